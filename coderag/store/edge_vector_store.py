"""EdgeVectorStore: LlamaIndex vector store over Qdrant Edge, Qdrant's in-process shard (dense + sparse BM25).

The store opens the shard, writes points and answers queries; what a point's payload holds and how a
node is read back is node_codec's, how LlamaIndex filters become Edge filters is edge_filters', and the
decoded nodes a resident process keeps are node_cache's. Their public names are importable from here.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, List, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore, MetadataFilters, VectorStoreQuery, VectorStoreQueryMode, VectorStoreQueryResult,
)

from coderag.base.errors import ConfigError, IndexLockedError
from coderag.nodes.keys import DIRS_KEY, FILE_PATH_KEY, KIND_KEY, LANGUAGE_KEY, SYMBOL_KEY
from coderag.nodes.lexical import CodeAnalyzer
from coderag.store.edge_filters import edge_condition, to_edge_filter
from coderag.store.node_cache import DEFAULT_NODE_CACHE_SIZE, NodeCache
from coderag.store.node_codec import (CHARS_KEY, DOC_ID_KEY, LEGACY_NODE_KEY, LIGHT_EXCLUDED_KEYS, NODE_FIELDS,
                                      NODE_KEY, PARENT_KEY, TEXT_KEY, ancestor_dirs, light_fields,
                                      light_node, node_payload_json, payload_to_node, store_payload)

__all__ = [
    "EdgeVectorStore", "DENSE_VECTOR_NAME", "SPARSE_VECTOR_NAME", "KEYWORD_INDEX_KEYS", "DEFAULT_RRF_K",
    "edge_condition", "to_edge_filter", "NodeCache", "CHARS_KEY", "DOC_ID_KEY", "LIGHT_EXCLUDED_KEYS", "NODE_FIELDS",
    "NODE_KEY", "PARENT_KEY", "TEXT_KEY", "ancestor_dirs", "light_fields", "light_node", "node_payload_json",
    "payload_to_node", "store_payload",
]

DENSE_VECTOR_NAME = "dense"
SPARSE_VECTOR_NAME = "sparse"
KEYWORD_INDEX_KEYS = (FILE_PATH_KEY, DIRS_KEY, LANGUAGE_KEY, KIND_KEY, SYMBOL_KEY, DOC_ID_KEY)
UPSERT_BATCH = 256
SCROLL_PAGE = 1024  # points a full read (scroll) takes at a time
DEFAULT_RRF_K = 60  # Cormack et al. 2009; Edge counts ranks from 0


def shard_is_held(exc: BaseException) -> bool:
    """Whether opening a shard failed because another process holds it. qdrant-edge-py 0.9 raises a plain
    `Exception` for every failure (no typed error to catch), so its message is the only sign: the WAL's
    file lock answers `Kind(WouldBlock)` inside "Can't init WAL"."""
    msg = str(exc)
    return "WouldBlock" in msg or "Can't init WAL" in msg


class EdgeVectorStore(BasePydanticVectorStore):
    """Dense and sparse (BM25 with IDF) vectors of leaf nodes in one embedded Qdrant Edge shard.

    Only one process may open a shard; a second open raises IndexLockedError naming the folder.

    Examples:
        >>> store = EdgeVectorStore.open("/tmp/shard", dim=384)          # doctest: +SKIP
        >>> store.add(nodes_with_embeddings)                              # doctest: +SKIP
        >>> store.query(VectorStoreQuery(query_embedding=v, similarity_top_k=5))  # doctest: +SKIP
    """

    stores_text: bool = True
    flat_metadata: bool = False
    path: str = Field(description="Shard folder.")
    dim: int = Field(gt=0, description="Dense vector size.")

    _shard: Any = PrivateAttr(default=None)
    # Queries ask Edge for ids and scores only (loading payloads in the query is several times slower), then
    # decode the payloads this cache misses. Every write clears it.
    _nodes: NodeCache = PrivateAttr(default_factory=lambda: NodeCache(DEFAULT_NODE_CACHE_SIZE))
    _sparse_doc_fn: Optional[Callable[[str], tuple[list[int], list[float]]]] = PrivateAttr(default=None)
    _analyzer: CodeAnalyzer = PrivateAttr(default_factory=CodeAnalyzer)  # BM25 terms of points and queries

    @classmethod
    def class_name(cls) -> str:
        return "EdgeVectorStore"

    @classmethod
    def open(cls, path: str | Path, dim: int, on_disk: bool = False, hnsw_m: int = 16, hnsw_ef_construct: int = 100,
             quantization: str = "none", sparse_doc_fn: Callable | None = None) -> "EdgeVectorStore":
        """Open the shard at `path`, creating it (with payload indexes) if it does not exist."""
        # qdrant_edge is a 36 MB native module: imported only when a store is opened.
        from qdrant_edge import (Distance, EdgeConfig, EdgeShard, EdgeSparseVectorParams, EdgeVectorParams,
                                 HnswIndexConfig, Modifier, PayloadSchemaType, ScalarQuantizationConfig,
                                 ScalarType, TextIndexParams, TokenizerType, UpdateOperation)

        store = cls(path=str(path), dim=dim)
        if sparse_doc_fn is not None:
            store._sparse_doc_fn = sparse_doc_fn
        p = Path(path)
        exists = p.is_dir() and (p / "edge_config.json").exists()
        try:
            if exists:
                store._shard = EdgeShard.load(str(p))
            else:
                p.mkdir(parents=True, exist_ok=True)
                quant = ScalarQuantizationConfig(type=ScalarType.Int8, quantile=0.99) if quantization == "int8" else None
                cfg = EdgeConfig(
                    vectors={DENSE_VECTOR_NAME: EdgeVectorParams(size=dim, distance=Distance.Cosine, on_disk=on_disk)},
                    sparse_vectors={SPARSE_VECTOR_NAME: EdgeSparseVectorParams(modifier=Modifier.Idf)},
                    hnsw_config=HnswIndexConfig(m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=10_000),
                    quantization_config=quant,
                )
                store._shard = EdgeShard.create(str(p), cfg)
                for key in KEYWORD_INDEX_KEYS:
                    store._shard.update(UpdateOperation.create_field_index(key, PayloadSchemaType.Keyword))
                # Case-sensitive word index: a superset filter for exact identifiers, checked exactly afterwards.
                store._shard.update(UpdateOperation.create_field_index(
                    TEXT_KEY, TextIndexParams(tokenizer=TokenizerType.Word, lowercase=False)))
        except Exception as exc:
            msg = str(exc)
            if shard_is_held(exc):
                raise IndexLockedError(
                    f"Another process holds the index shard {p}. Stop it (for example a running "
                    f'"coderag serve" or "coderag mcp"), or wait for it to finish.') from exc
            if "incompatible" in msg:
                raise ConfigError(f"The shard at {p} was built with other vector settings ({msg}). "
                                  f'Run "coderag index --rebuild".') from exc
            raise
        return store

    @property
    def client(self) -> Any:
        return self._shard

    # -- writes ---------------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> List[str]:
        from qdrant_edge import Point, SparseVector, UpdateOperation

        self._invalidate()
        sparse_fn = self._sparse_doc_fn or self._analyzer.doc_sparse
        ids: list[str] = []
        points = []
        for node in nodes:
            s_ids, s_vals = sparse_fn(node.get_content(metadata_mode=MetadataMode.EMBED))
            payload = store_payload(node)
            vectors = {SPARSE_VECTOR_NAME: SparseVector(indices=s_ids, values=s_vals)}
            if node.embedding is not None:  # a sparse-only point serves BM25 until its dense vector arrives
                vectors[DENSE_VECTOR_NAME] = list(node.embedding)
            points.append(Point(node.node_id, vectors, payload))
            ids.append(node.node_id)
            if len(points) >= UPSERT_BATCH:
                self._shard.update(UpdateOperation.upsert_points(points))
                points = []
        if points:
            self._shard.update(UpdateOperation.upsert_points(points))
        self._invalidate()
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every point of one document (one file)."""
        from qdrant_edge import FieldCondition, Filter, MatchValue, UpdateOperation

        self._shard.update(UpdateOperation.delete_points_by_filter(
            Filter(must=[FieldCondition(key=DOC_ID_KEY, match=MatchValue(value=ref_doc_id))])))
        self._invalidate()

    def delete_nodes(self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None,
                     **delete_kwargs: Any) -> None:
        from qdrant_edge import UpdateOperation

        if node_ids:
            self._shard.update(UpdateOperation.delete_points([uuid.UUID(i) for i in node_ids]))
        flt = to_edge_filter(filters)
        if flt is not None:
            self._shard.update(UpdateOperation.delete_points_by_filter(flt))
        self._invalidate()

    def clear(self) -> None:
        from qdrant_edge import Filter, UpdateOperation

        self._shard.update(UpdateOperation.delete_points_by_filter(Filter(must=[])))
        self._invalidate()

    def clear_node_cache(self) -> None:
        """Forget the decoded nodes (benchmarks; writes do this themselves)."""
        self._invalidate()

    def _invalidate(self) -> None:
        self._nodes.clear()

    def flush(self) -> None:
        self._shard.flush()

    def optimize(self) -> bool:
        """Build the HNSW index after a bulk load. Blocks and holds the GIL: indexer only, never a request path."""
        return bool(self._shard.optimize())

    def warm_page_cache(self, max_bytes: int = 2 << 30) -> int:
        """Read the shard's segment files once so the OS page cache holds them; returns the bytes read.

        Edge drops its files from the page cache when it loads them ("cold" memory), so each point a
        query touches for the first time would be a disk read. A resident process calls this once, in
        the background; nothing is pinned, the kernel may evict the pages again under pressure.
        """

        done = 0
        files = sorted((f for f in (Path(self.path) / "segments").rglob("*") if f.is_file()),
                       key=lambda f: ("payload_storage" not in f.parts, str(f)))  # payloads first
        for f in files:
            try:
                with open(f, "rb", buffering=0) as fh:
                    while done < max_bytes:
                        chunk = fh.read(1 << 20)
                        if not chunk:
                            break
                        done += len(chunk)
            except OSError:
                continue  # a segment replaced by the optimizer meanwhile
            if done >= max_bytes:
                break
        return done

    def upgrade_payloads(self, progress: Optional[Callable[[int], None]] = None) -> int:
        """Bring points stored by an older coderag to the current payload: LlamaIndex's `_node_content`
        (~2.8 KB a leaf) rewritten as a slim node (`_node`, ~1.1 KB, decoded twice as fast), and the parent
        id added (what light nodes need). Returns how many points changed. Every older payload still
        decodes, so a run cut short leaves a usable store. No re-embedding: payloads only."""
        from qdrant_edge import PayloadSelector, ScrollRequest, UpdateOperation

        done, offset = 0, None
        try:
            while True:
                recs, offset = self._shard.scroll(ScrollRequest(
                    limit=256, offset=offset,
                    with_payload=PayloadSelector.Include([*NODE_FIELDS, PARENT_KEY])))
                changed, fat = [], []
                for r in recs:
                    payload = r.payload or {}
                    if PARENT_KEY in payload and LEGACY_NODE_KEY not in payload:
                        continue
                    node = payload_to_node(payload)
                    if type(node) is not TextNode:
                        continue
                    self._shard.update(UpdateOperation.set_payload([r.id], {
                        NODE_KEY: node_payload_json(node), **light_fields(node)}))
                    changed.append(r.id)
                    if LEGACY_NODE_KEY in payload:
                        fat.append(r.id)
                if fat:
                    self._shard.update(UpdateOperation.delete_payload(fat, [LEGACY_NODE_KEY]))
                if changed:
                    done += len(changed)
                    if progress:
                        progress(done)
                if offset is None:
                    return done
        finally:
            self._invalidate()

    def close(self) -> None:
        """Flush and close the shard. It is let go of whatever fails: where its folder was moved or deleted
        the flush cannot write there, and a store that kept the shard would keep its files locked for as long
        as the process lives (an MCP server: Claude Code's whole session)."""
        shard, self._shard = self._shard, None
        if shard is None:
            return
        try:
            shard.flush()
        finally:
            shard.close()

    # -- reads ----------------------------------------------------------------------------------
    def count(self) -> int:
        from qdrant_edge import CountRequest

        return self._shard.count(CountRequest(exact=True))

    def file_paths(self) -> set[str]:
        """Every file that has at least one point (facet over the keyword index)."""
        from qdrant_edge import FacetRequest

        res = self._shard.facet(FacetRequest(key=FILE_PATH_KEY, limit=10_000_000, exact=True))
        return {h.value for h in res.hits}

    def get_nodes(self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None,
                  **kwargs: Any) -> List[BaseNode]:
        if node_ids:
            recs = self._shard.retrieve([uuid.UUID(i) for i in node_ids], True, False)
            return [payload_to_node(r.payload) for r in recs]
        return [payload_to_node(r.payload) for r in self._scroll(filter=to_edge_filter(filters), with_payload=True)]

    def dense_vectors(self, keys: Sequence[str] = (FILE_PATH_KEY, "start_line", "end_line")
                      ) -> tuple[list[list[float]], list[dict]]:
        """Every point's dense vector with the payload fields `keys` (what a query adapter is trained against:
        eval/train_adapter.py); points without a dense vector (BM25-only) are left out."""
        vectors, fields = [], []
        for r in self._scroll(with_payload=True, with_vector=True):
            v = r.vector.get(DENSE_VECTOR_NAME) if isinstance(r.vector, dict) else None
            if v is not None:
                vectors.append(list(v))
                fields.append({k: r.payload.get(k) for k in keys})
        return vectors, fields

    def point_ids(self, ref_doc_id: str) -> list[str]:
        """Ids of every point of one document (one file)."""
        from qdrant_edge import FieldCondition, Filter, MatchValue

        flt = Filter(must=[FieldCondition(key=DOC_ID_KEY, match=MatchValue(value=ref_doc_id))])
        return [str(r.id) for r in self._scroll(filter=flt, with_payload=False)]

    def _scroll(self, **request: Any) -> Iterator[Any]:
        """Every point a `ScrollRequest(**request)` selects, read SCROLL_PAGE points at a time."""
        from qdrant_edge import ScrollRequest

        offset = None
        while True:
            recs, offset = self._shard.scroll(ScrollRequest(limit=SCROLL_PAGE, offset=offset, **request))
            yield from recs
            if offset is None:
                return

    def _nodes_by_id(self, ids: List[Any], light: bool = False,
                     keys: Optional[List[str]] = None) -> List[Optional[BaseNode]]:
        """Nodes of these point ids (None for a point deleted since the query): cached, or one retrieve.
        `light`: a light node will do (see `light_node`); the cache holds both kinds, and serves a light
        request with either. `keys`: the ids as strings, when the caller has them (Edge gives `UUID`s,
        and `str` of one costs ~1.5 us)."""
        from qdrant_edge import PayloadSelector

        keys = keys if keys is not None else [str(i) for i in ids]
        gen = self._nodes.generation
        found = self._nodes.get(keys, light=light)
        missing = {k: i for i, k in zip(ids, keys) if k not in found}
        if missing:
            fresh: dict = {}
            if light:
                recs = self._shard.retrieve(list(missing.values()), PayloadSelector.Exclude(LIGHT_EXCLUDED_KEYS), False)
                for r in recs:
                    k = str(r.id)
                    node = light_node(k, r.payload)
                    if node is not None:
                        fresh[k] = (node, True)
                missing = {k: i for k, i in missing.items() if k not in fresh}  # points of an older coderag
            if missing:
                recs = self._shard.retrieve(list(missing.values()), PayloadSelector.Include(NODE_FIELDS), False)
                fresh.update((str(r.id), (payload_to_node(r.payload), False)) for r in recs)
            found.update((k, v[0]) for k, v in fresh.items())
            self._nodes.put(fresh, gen)  # kept only if no write came in meanwhile
        return [found.get(k) for k in keys]

    supports_light_nodes: ClassVar[bool] = True

    def query(self, query: VectorStoreQuery, light: bool = False, **kwargs: Any) -> VectorStoreQueryResult:
        """The nodes nearest to the query. `light=True`: nodes built from their payload's text, metadata and
        links to source and parent (what a search uses) instead of the stored node JSON, which also holds
        the links to the previous and next chunks; see `light_node`."""
        from qdrant_edge import Fusion, Prefetch, Query, QueryRequest, SparseVector

        flt = to_edge_filter(query.filters)
        k = query.similarity_top_k
        mode = query.mode

        def sparse_query():
            ids, vals = self._analyzer.query_sparse(query.query_str or "")
            return Query.Nearest(SparseVector(indices=ids, values=vals), using=SPARSE_VECTOR_NAME), bool(ids)

        if mode == VectorStoreQueryMode.SPARSE:
            q, nonempty = sparse_query()
            if not nonempty:
                return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
            req = QueryRequest(limit=query.sparse_top_k or k, query=q, filter=flt, with_payload=False)
        elif mode == VectorStoreQueryMode.HYBRID:
            q, nonempty = sparse_query()
            prefetches = [Prefetch(limit=k, query=Query.Nearest(list(query.query_embedding), using=DENSE_VECTOR_NAME),
                                   filter=flt)]
            if nonempty:
                prefetches.append(Prefetch(limit=query.sparse_top_k or k, query=q, filter=flt))
            req = QueryRequest(limit=query.hybrid_top_k or k, query=Fusion.Rrf(k=DEFAULT_RRF_K), prefetches=prefetches,
                               with_payload=False)
        else:
            if query.query_embedding is None:
                raise ValueError("dense query needs query_embedding")
            req = QueryRequest(limit=k, query=Query.Nearest(list(query.query_embedding), using=DENSE_VECTOR_NAME),
                               filter=flt, with_payload=False)
        hits = self._shard.query(req)
        keys = [str(h.id) for h in hits]
        found = self._nodes_by_id([h.id for h in hits], light=light, keys=keys)
        kept = [(h.score, k, n) for h, k, n in zip(hits, keys, found) if n is not None]
        return VectorStoreQueryResult(nodes=[n for _, _, n in kept], similarities=[s for s, _, _ in kept],
                                      ids=[k for _, k, _ in kept])
