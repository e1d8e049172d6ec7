"""Retrievers of the query pipeline: the dense and BM25 legs over the vector store, and bounded auto-merging
(their fusion is in pipelines/fusion.py)."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import AutoMergingRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from coderag.nodes.file_roles import SOURCE, file_role
from coderag.nodes.keys import END_LINE_KEY, FILE_PATH_KEY, LANGUAGE_KEY, START_LINE_KEY
from coderag.pipelines.search_request import as_request


def contains_all(text: str, keywords: Sequence[str]) -> bool:
    return all(k in text for k in keywords)


def source_quota(nodes: List[NodeWithScore], k: int, depth: int) -> List[NodeWithScore]:
    """A leg's candidates (best first) as it keeps them: its first `k`, then, while fewer than `k` of those are in
    source files, the next source ones down to `depth`. In a whole repository docs pages, tests and examples fill
    most of a question's first candidates, and the code it means is often below them (eval/RESULTS.md, "the
    query-core tune questions over the whole TanStack Query repository").

    >>> from llama_index.core.schema import TextNode
    >>> ns = [NodeWithScore(node=TextNode(id_=p, metadata={"file_path": p}), score=1.0)
    ...       for p in ("docs/a.md", "src/a.py", "tests/test_a.py", "docs/b.md", "src/b.py", "src/c.py")]
    >>> [n.node.node_id for n in source_quota(ns, 3, 6)]
    ['docs/a.md', 'src/a.py', 'tests/test_a.py', 'src/b.py', 'src/c.py']
    """
    if depth <= k:
        return nodes[:k]  # no quota (a report, a query that asks for tests or docs): no file's role is read
    kept, sources = nodes[:k], 0
    for n in kept:
        sources += _is_source(n)
    for n in nodes[k:depth]:
        if sources >= k:
            break
        if _is_source(n):
            kept.append(n)
            sources += 1
    return kept


def _is_source(n: NodeWithScore) -> bool:
    m = n.node.metadata
    return file_role(m.get(FILE_PATH_KEY, ""), m.get(LANGUAGE_KEY, "")) == SOURCE


class _StoreRetriever(BaseRetriever):
    """Common part of the legs: one store query with the request's filters, an exact-keyword check, timings.
    Built once per index; everything per request comes with the query (pipelines/search_request.py)."""

    def __init__(self, vector_store: Any, similarity_top_k: int, light: bool = False) -> None:
        super().__init__()
        self.store = vector_store
        self.top_k = similarity_top_k
        # Light nodes (text, metadata, source and parent: all a search reads), where the store has them.
        self.query_kwargs = {"light": True} if light and getattr(vector_store, "supports_light_nodes", False) else {}

    def _wrap(self, result, exact: Sequence[str]) -> List[NodeWithScore]:
        out = []
        for node, score in zip(result.nodes, result.similarities or [0.0] * len(result.nodes)):
            if exact and not contains_all(node.get_content(), exact):
                continue  # the store's text filter is token-level; this makes it exact
            out.append(NodeWithScore(node=node, score=score))
        return out


class DenseRetriever(_StoreRetriever):
    """Nearest leaf vectors to the query's embedding. `embed_model` may be given as a loader instead
    (`load_model`), called on the first dense search: a BM25-only search never loads the model."""

    def __init__(self, vector_store: Any, embed_model: Any = None, similarity_top_k: int = 20,
                 load_model: Optional[Callable[[], Any]] = None,
                 adapter: Optional[Callable[[List[float]], List[float]]] = None, **kwargs: Any) -> None:
        super().__init__(vector_store, similarity_top_k, **kwargs)
        self._model, self._load_model = embed_model, load_model
        self.adapter = adapter  # the query adapter (pipelines/query_adapter.py), applied to every query vector

    @property
    def embed_model(self) -> Any:
        if self._model is None:
            self._model = self._load_model()
        return self._model

    def start_embedding(self, query: str) -> Any:
        """The query's embedding under way where the model can overlap it with other work (a helper
        process), as an object with `.result()`; None where it cannot (then `_retrieve` embeds)."""
        start = getattr(self.embed_model, "start_query_embedding", None)
        return start(query) if start is not None else None

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        req = as_request(query_bundle)
        t0 = time.perf_counter()
        emb = req.embedding or self.embed_model.get_query_embedding(req.dense_text)
        if self.adapter is not None:
            emb = self.adapter(emb)
        t1 = time.perf_counter()
        k = req.dense_top_k or self.top_k
        res = self.store.query(VectorStoreQuery(query_embedding=emb, similarity_top_k=max(k, req.source_quota_depth),
                                                filters=req.filters), **self.query_kwargs)
        if req.embedding is None:
            req.timings["embed_ms"] = (t1 - t0) * 1000
        req.timings["dense_ms"] = (time.perf_counter() - t1) * 1000
        return source_quota(self._wrap(res, req.exact_keywords), k, req.source_quota_depth)


class SparseRetriever(_StoreRetriever):
    """BM25 over the store's sparse vectors (code-aware terms; IDF applied by Qdrant). With `named_files`,
    the leg searches only the files a long query names (the request's `named_filters`), so a traceback's
    files are never out of reach; it returns nothing for a request that names none."""

    def __init__(self, vector_store: Any, similarity_top_k: int = 20, named_files: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(vector_store, similarity_top_k, **kwargs)
        self.named_files = named_files

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        req = as_request(query_bundle)
        filters = req.named_filters if self.named_files else req.filters
        if self.named_files and filters is None:
            return []
        t0 = time.perf_counter()
        text = " ".join([req.bm25_text, *req.keywords])
        pull = max(self.top_k, req.source_quota_depth)
        res = self.store.query(VectorStoreQuery(query_str=text, mode=VectorStoreQueryMode.SPARSE,
                                                similarity_top_k=pull, sparse_top_k=pull,
                                                filters=filters), **self.query_kwargs)
        req.timings["named_bm25_ms" if self.named_files else "bm25_ms"] = (time.perf_counter() - t0) * 1000
        return source_quota(self._wrap(res, req.exact_keywords), self.top_k, req.source_quota_depth)


def _lines(m: dict) -> int:
    return int(m.get(END_LINE_KEY, 0)) - int(m.get(START_LINE_KEY, 0)) + 1


def _span(node: BaseNode) -> int:
    return _lines(node.metadata)


class BoundedAutoMergingRetriever(AutoMergingRetriever):
    """AutoMergingRetriever with the cascade bounded by size and score.

    Merging repeats up the tree, and one weak extra hit can turn a class into its whole file. Here a
    parent longer than `max_parent_lines` is never merged into, only children scoring at least
    `min_score_ratio` x the best score count towards the ratio, and the merged parent takes its best
    child's score (not the average), so it ranks where its evidence is. `parent_of(id, max_lines)` reads a
    parent, or None when it is missing or too long (pipelines/stores.py reads the span before building the
    node); by default the docstore's `get_document`.
    """

    def __init__(self, retriever: BaseRetriever, storage_context: Any, simple_ratio_thresh: float = 0.5,
                 max_parent_lines: int = 120, min_score_ratio: float = 0.5,
                 parent_of: Optional[Callable[[str, int], Optional[BaseNode]]] = None, **kwargs: Any) -> None:
        super().__init__(retriever, storage_context, simple_ratio_thresh=simple_ratio_thresh, **kwargs)
        self.retriever = retriever
        self.ratio = simple_ratio_thresh
        self.max_parent_lines = max_parent_lines
        self.min_score_ratio = min_score_ratio
        docstore = storage_context.docstore
        self.parent_of = parent_of or (lambda pid, _: docstore.get_document(pid, raise_error=False))

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        initial = self.retriever.retrieve(query_bundle)
        t0 = time.perf_counter()
        nodes, changed = self._merge_step(initial)
        while changed:
            nodes, changed = self._merge_step(nodes)
        nodes.sort(key=lambda x: x.get_score(), reverse=True)
        as_request(query_bundle).timings["merge_parents_ms"] = (time.perf_counter() - t0) * 1000
        return nodes

    def _merge_step(self, nodes: List[NodeWithScore]) -> Tuple[List[NodeWithScore], bool]:
        if not nodes:
            return nodes, False
        floor = max(n.get_score() for n in nodes) * self.min_score_ratio
        groups: Dict[str, List[NodeWithScore]] = {}
        for n in nodes:
            info = n.node.parent_node
            if info is not None and n.get_score() >= floor:
                groups.setdefault(info.node_id, []).append(n)
        drop: set[str] = set()
        add: List[NodeWithScore] = []
        for parent_id, kids in groups.items():
            if len(kids) < 2:
                continue
            parent = self.parent_of(parent_id, self.max_parent_lines)
            if parent is None or _span(parent) > self.max_parent_lines:
                continue
            total = len(parent.child_nodes or []) or 1
            if len(kids) / total > self.ratio:
                drop.update(k.node.node_id for k in kids)
                add.append(NodeWithScore(node=parent, score=max(k.get_score() for k in kids)))
        if not drop:
            return nodes, False
        return [n for n in nodes if n.node.node_id not in drop] + add, True
