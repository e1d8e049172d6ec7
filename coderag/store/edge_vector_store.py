"""EdgeVectorStore: LlamaIndex vector store over Qdrant Edge, Qdrant's in-process shard (dense + sparse BM25)."""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, ClassVar, List, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import (BaseNode, MetadataMode, NodeRelationship, ObjectType, RelatedNodeInfo,
                                     TextNode)
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore, FilterCondition, FilterOperator, MetadataFilter, MetadataFilters,
    VectorStoreQuery, VectorStoreQueryMode, VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from coderag.errors import ConfigError, IndexLockedError
from coderag.nodes.keys import DIRS_KEY, FILE_PATH_KEY, KIND_KEY, LANGUAGE_KEY, NON_EMBED_KEYS, SYMBOL_KEY
from coderag.nodes.lexical import doc_sparse, query_sparse

DENSE_VECTOR_NAME = "dense"
SPARSE_VECTOR_NAME = "sparse"
DOC_ID_KEY = "doc_id"
TEXT_KEY = "text"  # the chunk's source text, word-indexed for exact keyword filters
KEYWORD_INDEX_KEYS = (FILE_PATH_KEY, DIRS_KEY, LANGUAGE_KEY, KIND_KEY, SYMBOL_KEY, DOC_ID_KEY)
UPSERT_BATCH = 256
NODE_CACHE_SIZE = 2_000  # decoded leaf nodes kept by a resident process: the candidates of ~40 searches
NODE_KEY = "_node"  # a TextNode as slim JSON (see node_payload_json); older points hold "_node_content"
PARENT_KEY = "parent_id"  # the leaf's parent node ("": none; Qdrant drops null values); with the text and
# metadata, what a light node is built from
CHARS_KEY = "char_span"  # [start_char_idx, end_char_idx] of the leaf in its file's text (light nodes)
_NODE_FIELDS = [NODE_KEY, "_node_content", "_node_type"]
# What a light node is not built from: the node JSON, LlamaIndex's copies of the document id, the folders.
_NOT_LIGHT = [NODE_KEY, "_node_content", "_node_type", "document_id", "ref_doc_id", DIRS_KEY]
DEFAULT_RRF_K = 60  # Cormack et al. 2009; Edge counts ranks from 0


def ancestor_dirs(rel_path: str) -> list[str]:
    """`a/b/c.py` -> ["a", "a/b"]: a keyword index on these makes "everything under a/" one exact match."""
    parts = rel_path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _condition(f: MetadataFilter):
    from qdrant_edge import FieldCondition, Filter, MatchAny, MatchExcept, MatchText, MatchValue, RangeFloat

    op, key, value = f.operator, f.key, f.value
    if op == FilterOperator.EQ:
        return FieldCondition(key=key, match=MatchValue(value=value))
    if op == FilterOperator.NE:
        return Filter(must_not=[FieldCondition(key=key, match=MatchValue(value=value))])
    if op in (FilterOperator.IN, FilterOperator.ANY):
        return FieldCondition(key=key, match=MatchAny(any=list(value)))
    if op == FilterOperator.NIN:
        return FieldCondition(key=key, match=MatchExcept(except_=list(value)))
    if op == FilterOperator.TEXT_MATCH:
        return FieldCondition(key=key, match=MatchText(text=value))
    bounds = {FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte"}
    if op in bounds:
        return FieldCondition(key=key, range=RangeFloat(**{bounds[op]: float(value)}))
    raise ValueError(f"filter operator {op.value!r} is not supported by EdgeVectorStore (key {key!r})")


def to_edge_filter(filters: Optional[MetadataFilters]):
    """MetadataFilters -> qdrant_edge Filter (AND, OR and NOT nest)."""
    if filters is None or not filters.filters:
        return None
    from qdrant_edge import Filter

    conds = [to_edge_filter(f) if isinstance(f, MetadataFilters) else _condition(f) for f in filters.filters]
    conds = [c for c in conds if c is not None]
    if filters.condition == FilterCondition.OR:
        return Filter(should=conds)
    if filters.condition == FilterCondition.NOT:
        return Filter(must_not=conds)
    return Filter(must=conds)


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
    # Decoded nodes by point id. Queries ask Edge for ids and scores only (a query that loads payloads costs
    # 4-7 ms at 100k points, one without 0.5-2 ms), then decode the payloads they miss here. Any write
    # clears the cache (node ids are stable across edits of a file, so an id alone does not name a version).
    _nodes: Any = PrivateAttr(default_factory=OrderedDict)
    _nodes_lock: Any = PrivateAttr(default_factory=threading.Lock)
    _generation: int = PrivateAttr(default=0)
    _sparse_doc_fn: Optional[Callable[[str], tuple[list[int], list[float]]]] = PrivateAttr(default=None)

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
            if "WouldBlock" in msg or "Can't init WAL" in msg:
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
        sparse_fn = self._sparse_doc_fn or doc_sparse
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
        with self._nodes_lock:
            self._generation += 1
            self._nodes.clear()

    def flush(self) -> None:
        self._shard.flush()

    def optimize(self) -> bool:
        """Build the HNSW index after a bulk load. Blocks and holds the GIL: indexer only, never a request path."""
        return bool(self._shard.optimize())

    def warm_page_cache(self, max_bytes: int = 2 << 30) -> int:
        """Read the shard's segment files once so the OS page cache holds them; returns the bytes read.

        Edge drops its files from the page cache when it loads them ("cold" memory), so each point a
        query touches for the first time is a disk read: 30 payloads cost 4-7 ms instead of ~1 ms, and the
        HNSW search 4.3 ms instead of 2.7 (102k points, measured). A resident process calls this once,
        in the background; nothing is pinned, the kernel may evict the pages again under pressure.
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
                    with_payload=PayloadSelector.Include(["_node_content", "_node_type", NODE_KEY, PARENT_KEY])))
                changed, fat = [], []
                for r in recs:
                    payload = r.payload or {}
                    if PARENT_KEY in payload and "_node_content" not in payload:
                        continue
                    node = payload_to_node(payload)
                    if type(node) is not TextNode:
                        continue
                    self._shard.update(UpdateOperation.set_payload([r.id], {
                        NODE_KEY: node_payload_json(node), **light_fields(node)}))
                    changed.append(r.id)
                    if "_node_content" in payload:
                        fat.append(r.id)
                if fat:
                    self._shard.update(UpdateOperation.delete_payload(fat, ["_node_content"]))
                if changed:
                    done += len(changed)
                    if progress:
                        progress(done)
                if offset is None:
                    return done
        finally:
            self._invalidate()

    def close(self) -> None:
        if self._shard is not None:
            self._shard.flush()
            self._shard.close()
            self._shard = None

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
            return [self._to_node(r.payload) for r in recs]
        from qdrant_edge import ScrollRequest

        out, offset = [], None
        flt = to_edge_filter(filters)
        while True:
            recs, offset = self._shard.scroll(ScrollRequest(limit=1024, offset=offset, filter=flt, with_payload=True))
            out.extend(self._to_node(r.payload) for r in recs)
            if offset is None:
                return out

    def point_ids(self, ref_doc_id: str) -> list[str]:
        """Ids of every point of one document (one file)."""
        from qdrant_edge import FieldCondition, Filter, MatchValue, ScrollRequest

        flt = Filter(must=[FieldCondition(key=DOC_ID_KEY, match=MatchValue(value=ref_doc_id))])
        out, offset = [], None
        while True:
            recs, offset = self._shard.scroll(ScrollRequest(limit=1024, offset=offset, filter=flt, with_payload=False))
            out.extend(str(r.id) for r in recs)
            if offset is None:
                return out

    @staticmethod
    def _to_node(payload: dict) -> BaseNode:
        return payload_to_node(payload)

    def _nodes_by_id(self, ids: List[Any], light: bool = False,
                     keys: Optional[List[str]] = None) -> List[Optional[BaseNode]]:
        """Nodes of these point ids (None for a point deleted since the query): cached, or one retrieve.
        `light`: a light node will do (see `light_node`); the cache holds both kinds, and serves a light
        request with either. `keys`: the ids as strings, when the caller has them (Edge gives `UUID`s,
        and `str` of one costs ~1.5 us)."""
        from qdrant_edge import PayloadSelector

        keys = keys if keys is not None else [str(i) for i in ids]
        found: dict = {}
        with self._nodes_lock:
            gen = self._generation
            for k in keys:
                hit = self._nodes.get(k)
                if hit is not None and (light or not hit[1]):
                    found[k] = hit[0]
                    self._nodes.move_to_end(k)
        missing = {k: i for i, k in zip(ids, keys) if k not in found}
        if missing:
            fresh: dict = {}
            if light:
                for r in self._shard.retrieve(list(missing.values()), PayloadSelector.Exclude(_NOT_LIGHT), False):
                    k = str(r.id)
                    node = light_node(k, r.payload)
                    if node is not None:
                        fresh[k] = (node, True)
                missing = {k: i for k, i in missing.items() if k not in fresh}  # points of an older coderag
            if missing:
                recs = self._shard.retrieve(list(missing.values()), PayloadSelector.Include(_NODE_FIELDS), False)
                fresh.update((str(r.id), (self._to_node(r.payload), False)) for r in recs)
            found.update((k, v[0]) for k, v in fresh.items())
            with self._nodes_lock:
                if gen == self._generation:  # no write since: these payloads are current
                    self._nodes.update(fresh)
                    while len(self._nodes) > NODE_CACHE_SIZE:
                        self._nodes.popitem(last=False)
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
            ids, vals = query_sparse(query.query_str or "")
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


# What every node of coderag's splitter carries: left out of the stored JSON and put back when it is read.
_STANDARD = {"excluded_embed_metadata_keys": NON_EMBED_KEYS, "excluded_llm_metadata_keys": NON_EMBED_KEYS,
             "metadata_template": "{value}", "text_template": "{metadata_str}\n{content}"}
_STANDARD_HEAD = json.dumps(_STANDARD, ensure_ascii=False)[:-1] + ","


def node_payload_json(node: TextNode) -> str:
    """A TextNode as the store keeps it: fields at their class default, the embedding (the point's vector)
    and the fields every coderag node has (`_STANDARD`) left out, links reduced to id and type.
    About 1.1 KB for a leaf instead of 2.8: a search decodes ~60 of them (50 us each instead of 105-180)."""
    data = node.model_dump(mode="json", exclude_defaults=True, exclude={"embedding", "class_name"})
    data["id_"] = node.node_id
    for key, value in _STANDARD.items():
        if key in data and data[key] == value:
            del data[key]
        else:
            data[key] = getattr(node, key)  # a value not standard, or the class default: kept explicitly
    rels = {}
    for rel, info in node.relationships.items():
        slim = [{"node_id": i.node_id, "node_type": i.node_type} for i in (info if isinstance(info, list) else [info])]
        rels[rel.value] = slim if isinstance(info, list) else slim[0]
    data["relationships"] = rels
    return json.dumps(data, ensure_ascii=False)


def payload_to_node(payload: dict) -> BaseNode:
    """A stored payload back into its node, parsed and validated by pydantic-core from the JSON string."""
    slim = payload.get(NODE_KEY)
    if slim is not None:
        return TextNode.model_validate_json(_STANDARD_HEAD + slim[1:])
    if payload.get("_node_type", TextNode.class_name()) != TextNode.class_name():
        return metadata_dict_to_node(payload)
    return TextNode.model_validate_json(payload["_node_content"])


def light_node(point_id: str, payload: dict) -> Optional[TextNode]:
    """A leaf from its payload's text, metadata, document id and parent id (None for a point stored before
    coderag kept the parent id there). The same node as the stored JSON but for the links to the previous
    and next chunks, and cheaper to build than that JSON is to decode (one BM25 leg of 30 new hits on the
    102k-chunk bench: 3.8-4.1 ms instead of 5.4-5.6, store query included).

    Built as a copy of a template node with the payload's values put in, which pydantic does not validate
    again: they are what `store_payload` wrote from a validated node. 10 us a node instead of 16 (probe;
    A/B on the 102k-chunk bench: p50 28.9 ms instead of 29.5, mean 29.6 instead of 29.9); with `_copy`
    instead of `model_copy`, 12.6 us instead of 19.4 in a later probe (both cores busy with another job).
    Tests compare every light node with its stored node, field by field and with `==`."""
    if PARENT_KEY not in payload:
        return None
    meta = dict(payload)
    text, parent, doc = meta.pop(TEXT_KEY, ""), meta.pop(PARENT_KEY), meta.pop(DOC_ID_KEY, None)
    start, end = meta.pop(CHARS_KEY, None) or (None, None)
    rels = {}
    if doc is not None:
        rels[NodeRelationship.SOURCE] = _copy(_SOURCE, {"node_id": doc})
    if parent:
        rels[NodeRelationship.PARENT] = _copy(_PARENT, {"node_id": parent})
    return _copy(_LIGHT, {
        "id_": point_id, "text": text, "metadata": meta, "relationships": rels, "start_char_idx": start,
        "end_char_idx": end, "excluded_embed_metadata_keys": list(NON_EMBED_KEYS),
        "excluded_llm_metadata_keys": list(NON_EMBED_KEYS)})


_new_object, _set_attr = object.__new__, object.__setattr__


def _copy(template: Any, update: dict) -> Any:
    """`template.model_copy(update=update)`, for templates without extra or private attributes (checked
    below, where they are made): what pydantic's `__copy__` does for them, less its general case (a
    `copy.copy` of each of three attributes and `hasattr` checks); a light node takes three copies."""
    if not _PLAIN_TEMPLATES:
        return template.model_copy(update=update)
    m = _new_object(type(template))
    d = template.__dict__.copy()
    d.update(update)
    _set_attr(m, "__dict__", d)
    _set_attr(m, "__pydantic_extra__", None)
    _set_attr(m, "__pydantic_fields_set__", template.__pydantic_fields_set__ | update.keys())
    _set_attr(m, "__pydantic_private__", None)
    return m


# Templates of light_node: every field a light node does not set comes from these, as validated defaults.
_LIGHT = TextNode(id_="", text="", **_STANDARD)
_SOURCE = RelatedNodeInfo(node_id="", node_type=None)  # as the stored links are decoded: both fields set
_PARENT = RelatedNodeInfo(node_id="", node_type=ObjectType.TEXT)
_PLAIN_TEMPLATES = all(t.__pydantic_extra__ is None and getattr(t, "__pydantic_private__", None) is None
                       for t in (_LIGHT, _SOURCE, _PARENT))


def store_payload(node: BaseNode) -> dict:
    """The payload a node is stored with: its metadata as filterable fields, the node itself (slim JSON for a
    TextNode, LlamaIndex's `_node_content` for other types), its folders and its text (word-indexed)."""
    payload = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
    if type(node) is TextNode:
        del payload["_node_content"]
        payload[NODE_KEY] = node_payload_json(node)
    payload[DIRS_KEY] = ancestor_dirs(node.metadata.get(FILE_PATH_KEY, ""))
    payload[TEXT_KEY] = node.get_content()
    payload.update(light_fields(node))
    return payload


def light_fields(node: BaseNode) -> dict:
    """What a light node needs beside the text and the metadata the payload holds anyway."""
    parent = node.parent_node
    return {PARENT_KEY: parent.node_id if parent is not None else "",
            CHARS_KEY: [node.start_char_idx, node.end_char_idx]}
