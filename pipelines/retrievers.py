"""Retrievers of the query pipeline: the dense and BM25 legs over the vector store, and bounded auto-merging
(their fusion is in pipelines/fusion.py)."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.constants import DATA_KEY
from llama_index.core.retrievers import AutoMergingRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore
from llama_index.core.storage.docstore.utils import json_to_doc
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery, VectorStoreQueryMode

from coderag.nodes.keys import END_LINE_KEY, START_LINE_KEY


def contains_all(text: str, keywords: Sequence[str]) -> bool:
    return all(k in text for k in keywords)


def retrieve_nodes(retriever: BaseRetriever, query: QueryBundle) -> List[NodeWithScore]:
    """`retriever.retrieve(query)`: the public call, with LlamaIndex's spans, events and callbacks."""
    return retriever.retrieve(query)


def postprocess(postprocessor: Any, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
    """`postprocessor.postprocess_nodes(nodes)`: the public call, with its dispatcher span."""
    return postprocessor.postprocess_nodes(nodes)


class _StoreRetriever(BaseRetriever):
    """Common part of the two legs: one store query with filters, an exact-keyword check, timings."""


    def __init__(self, vector_store: Any, similarity_top_k: int, filters: Optional[MetadataFilters] = None,
                 exact_keywords: Sequence[str] = (), timings: Optional[Dict[str, float]] = None,
                 light: bool = False, query_text: Optional[str] = None) -> None:
        super().__init__()
        self._store = vector_store
        self._query_text = query_text  # what this leg searches instead of the query (see nodes/query_reader.py)
        self._top_k = similarity_top_k
        self._filters = filters
        self._exact = list(exact_keywords)
        self.timings = timings if timings is not None else {}
        # Light nodes (text, metadata, source and parent: all a search reads), where the store has them.
        self._query_kwargs = {"light": True} if light and getattr(vector_store, "supports_light_nodes", False) else {}

    def text_of(self, query_bundle: QueryBundle) -> str:
        """The text this leg searches for the query: its own reading of it, or the query as it is."""
        return self._query_text or query_bundle.query_str

    def _wrap(self, result) -> List[NodeWithScore]:
        out = []
        for node, score in zip(result.nodes, result.similarities or [0.0] * len(result.nodes)):
            if self._exact and not contains_all(node.get_content(), self._exact):
                continue  # the store's text filter is token-level; this makes it exact
            out.append(NodeWithScore(node=node, score=score))
        return out


class DenseRetriever(_StoreRetriever):
    """Nearest leaf vectors to the query's embedding."""

    def __init__(self, vector_store: Any, embed_model: Any, similarity_top_k: int = 20, **kwargs: Any) -> None:
        super().__init__(vector_store, similarity_top_k, **kwargs)
        self._embed_model = embed_model

    def start_embedding(self, query: str) -> Any:
        """The query's embedding under way where the model can overlap it with other work (a helper
        process), as an object with `.result()`; None where it cannot (then `_retrieve` embeds)."""
        start = getattr(self._embed_model, "start_query_embedding", None)
        return start(query) if start is not None else None

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        t0 = time.perf_counter()
        emb = query_bundle.embedding or self._embed_model.get_query_embedding(self.text_of(query_bundle))
        t1 = time.perf_counter()
        res = self._store.query(VectorStoreQuery(query_embedding=emb, similarity_top_k=self._top_k,
                                                 filters=self._filters), **self._query_kwargs)
        if query_bundle.embedding is None:
            self.timings["embed_ms"] = (t1 - t0) * 1000
        self.timings["dense_ms"] = (time.perf_counter() - t1) * 1000
        return self._wrap(res)


class SparseRetriever(_StoreRetriever):
    """BM25 over the store's sparse vectors (code-aware terms; IDF applied by Qdrant)."""

    def __init__(self, vector_store: Any, similarity_top_k: int = 20, boost_terms: Sequence[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(vector_store, similarity_top_k, **kwargs)
        self._boost_terms = list(boost_terms)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        t0 = time.perf_counter()
        text = " ".join([self.text_of(query_bundle), *self._boost_terms])
        res = self._store.query(VectorStoreQuery(query_str=text, mode=VectorStoreQueryMode.SPARSE,
                                                 similarity_top_k=self._top_k, sparse_top_k=self._top_k,
                                                 filters=self._filters), **self._query_kwargs)
        self.timings["bm25_ms"] = (time.perf_counter() - t0) * 1000
        return self._wrap(res)


def _lines(m: dict) -> int:
    return int(m.get(END_LINE_KEY, 0)) - int(m.get(START_LINE_KEY, 0)) + 1


def _span(node: BaseNode) -> int:
    return _lines(node.metadata)


class BoundedAutoMergingRetriever(AutoMergingRetriever):
    """AutoMergingRetriever with the cascade bounded by size and score.

    Merging repeats up the tree, and one weak extra hit can turn a class into its whole file. Here a
    parent longer than `max_parent_lines` is never merged into, only children scoring at least
    `min_score_ratio` x the best score count towards the ratio, and the merged parent takes its best
    child's score (not the average), so it ranks where its evidence is.
    """


    def __init__(self, *args: Any, max_parent_lines: int = 120, min_score_ratio: float = 0.5,
                 timings: Optional[Dict[str, float]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_parent_lines = max_parent_lines
        self._min_score_ratio = min_score_ratio
        self.timings = timings if timings is not None else {}

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        initial = retrieve_nodes(self._vector_retriever, query_bundle)
        t0 = time.perf_counter()
        nodes, changed = self._get_parents_and_merge(initial)
        while changed:
            nodes, changed = self._get_parents_and_merge(nodes)
        nodes.sort(key=lambda x: x.get_score(), reverse=True)
        self.timings["merge_parents_ms"] = (time.perf_counter() - t0) * 1000
        return nodes

    def _get_parents_and_merge(self, nodes: List[NodeWithScore]) -> Tuple[List[NodeWithScore], bool]:
        if not nodes:
            return nodes, False
        floor = max(n.get_score() for n in nodes) * self._min_score_ratio
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
            parent = self._short_parent(parent_id)
            if parent is None:
                continue
            total = len(parent.child_nodes or []) or 1
            if len(kids) / total > self._simple_ratio_thresh:
                drop.update(k.node.node_id for k in kids)
                add.append(NodeWithScore(node=parent, score=max(k.get_score() for k in kids)))
        if not drop:
            return nodes, False
        return [n for n in nodes if n.node.node_id not in drop] + add, True

    def _short_parent(self, parent_id: str) -> Optional[BaseNode]:
        """The parent node, or None when it is missing or longer than `max_parent_lines`. From LlamaIndex's
        KVDocumentStore the stored dict is read first and a long parent refused on its metadata, before
        pydantic builds the node: a parent is a whole class or module, up to hundreds of KB of text, and
        about half of those a search looks at are too long (201 of 439 on the 102k-chunk bench)."""
        docstore = self._storage_context.docstore
        kv, collection = getattr(docstore, "_kvstore", None), getattr(docstore, "_node_collection", None)
        if isinstance(docstore, KVDocumentStore) and kv is not None and collection is not None:
            data = kv.get(parent_id, collection=collection)
            if data is None:
                return None
            fields = data.get(DATA_KEY)
            meta = fields.get("metadata") if isinstance(fields, dict) else None
            if isinstance(meta, dict) and _lines(meta) > self._max_parent_lines:
                return None
            parent = json_to_doc(data)
        else:
            parent = docstore.get_document(parent_id, raise_error=False)
        return parent if parent is not None and _span(parent) <= self._max_parent_lines else None

