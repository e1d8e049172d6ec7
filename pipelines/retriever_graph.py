"""The LlamaIndex retriever graph of one request: the query read, its legs, their fusion, bounded auto-merging."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from coderag.globs import FilePattern
from coderag.nodes.keys import FILE_PATH_KEY
from coderag.nodes.query_reader import read_query
from coderag.pipelines.search_options import RetrieverMode, SearchOptions

if TYPE_CHECKING:
    from coderag.pipelines.code_index import CodeIndex


@functools.cache
def _no_llm():
    """The fusion retriever's LLM: a MockLLM it never calls (one query, no rewriting). Given as an instance,
    so QueryFusionRetriever does not resolve `Settings.llm` (OpenAI by default, an ImportError offline)."""
    from llama_index.core.llms import MockLLM

    return MockLLM()


def build_retriever(index: "CodeIndex", opts: SearchOptions, timings: dict, filters=None, light: bool = False,
                    while_embedding=None):
    """The LlamaIndex retriever graph for one request (cheap to build; filters are per request). `light`: the
    legs return light nodes (no links to the previous and next chunks, which a search never reads).
    `while_embedding(nodes)`: done with the BM25 leg's results while a helper process embeds the query."""
    from coderag.pipelines.fusion import WeightedRRFFusionRetriever
    from coderag.pipelines.retrievers import BoundedAutoMergingRetriever, DenseRetriever, SparseRetriever

    r = index.settings.retrieval
    exact = opts.keywords if opts.requires_exact_match else []
    reading = read_query(opts.query) if r.read_queries else None
    long = reading is not None and reading.is_long
    legs, weights = [], []
    if opts.retriever in (RetrieverMode.Hybrid, RetrieverMode.Dense):
        legs.append(DenseRetriever(index.vector_store, index.embed_model, r.dense_top_k, filters=filters,
                                   exact_keywords=exact, timings=timings, light=light,
                                   query_text=reading.dense_text if long else None))
        weights.append(r.dense_weight)
    if opts.retriever in (RetrieverMode.Hybrid, RetrieverMode.BM25):
        bm25_text = reading.bm25_text if long else None
        legs.append(SparseRetriever(index.vector_store, r.sparse_top_k, boost_terms=opts.keywords, filters=filters,
                                    exact_keywords=exact, timings=timings, light=light, query_text=bm25_text))
        weights.append(r.sparse_weight)
        named = named_files(index, reading, opts) if long and r.named_files_weight else []
        if named:  # the files a traceback or the text names: searched on their own, so they are never out of reach
            legs.append(SparseRetriever(index.vector_store, r.sparse_top_k, filters=_and(filters, named),
                                        exact_keywords=exact, timings=timings, light=light, query_text=bm25_text))
            weights.append(r.named_files_weight)
    fusion = WeightedRRFFusionRetriever(
        legs, retriever_weights=weights, llm=_no_llm(), mode="reciprocal_rerank", num_queries=1, use_async=False,
        similarity_top_k=opts.top_k or r.fusion_top_k, keywords=opts.keywords, keyword_boost=r.keyword_boost,
        tests_docs_weight=r.tests_docs_weight, timings=timings, while_embedding=while_embedding,
        identifiers=reading.definitions if long else None,
        noise_weight=r.report_noise_weight if long else 1.0,
        non_code_weight=r.report_non_code_weight if long else 1.0,
        file_evidence=r.report_file_evidence if long else 0.0)
    if not opts.auto_merge:
        return fusion
    return BoundedAutoMergingRetriever(fusion, index.storage_context, simple_ratio_thresh=r.merge_ratio,
                                       max_parent_lines=r.max_parent_lines,
                                       min_score_ratio=r.merge_min_score_ratio, timings=timings)


def named_files(index: "CodeIndex", reading, opts: SearchOptions) -> list[str]:
    """Indexed files that a long query names (traceback frames first, then paths and dotted modules),
    within the request's file_pattern; at most MAX_NAMED_FILES."""
    from coderag.nodes.query_reader import as_paths, path_matches

    names = list(dict.fromkeys([f.path for f in reversed(reading.frames)] + reading.paths))
    if not names:
        return []
    by_name: dict[str, list[str]] = {}
    for p in index.indexed_paths():
        by_name.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    allowed = FilePattern(opts.file_pattern).matches if opts.file_pattern else (lambda p: True)
    out: list[str] = []
    for name in names:
        found = [p for alt in as_paths(name) for p in by_name.get(alt.rsplit("/", 1)[-1], [])
                 if allowed(p) and path_matches(p, name)]
        if len(found) > MAX_FILES_PER_NAME:
            continue  # `core.py` alone names no file of a repository that has twenty
        out.extend(p for p in found if p not in out)
        if len(out) >= MAX_NAMED_FILES:
            break
    return out[:MAX_NAMED_FILES]


MAX_NAMED_FILES = 12
MAX_FILES_PER_NAME = 2


def _and(filters, paths: list[str]):
    """`filters` narrowed to `paths`."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    cond = MetadataFilter(key=FILE_PATH_KEY, operator=FilterOperator.IN, value=paths)
    if filters is None:
        return MetadataFilters(filters=[cond])
    return MetadataFilters(filters=[*filters.filters, cond])


def request_filters(index: "CodeIndex", opts: SearchOptions):
    """(the store filters of a request, whether any file can match): its file_pattern as the paths it
    selects, and with requires_exact_match each keyword as a text filter, applied inside the store query
    (not after a top-k cut)."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    conds = []
    if opts.file_pattern:
        paths = FilePattern(opts.file_pattern).select(index.indexed_paths())
        if not paths:
            return None, False
        conds.append(MetadataFilter(key=FILE_PATH_KEY, operator=FilterOperator.IN, value=paths))
    if opts.requires_exact_match and opts.keywords and index.supports_text_filter:
        for kw in opts.keywords:
            conds.append(MetadataFilter(key="text", operator=FilterOperator.TEXT_MATCH, value=kw))
    return (MetadataFilters(filters=conds) if conds else None), True
