"""The LlamaIndex retriever graph of an index, built once (legs, fusion, bounded auto-merging), and the
SearchRequest each query becomes: its filters, its reading, the files it names."""

from __future__ import annotations

from typing import Any, Callable, Optional

from coderag.base.globs import FilePattern
from coderag.nodes.keys import FILE_PATH_KEY
from coderag.queries.reader import read_query
from coderag.pipelines.search_options import RetrieverMode, SearchOptions
from coderag.pipelines.search_request import BM25, DENSE, NAMED, SearchRequest


def fusion_of(settings, legs: dict, prepare: Optional[Callable] = None):
    """The fusion over `legs` (dense, bm25, named) with the retrieval settings' weights and boosts:
    the search's, and the one eval/legs.py replays over dumped candidates."""
    from coderag.pipelines.fusion import WeightedFusionRetriever

    r = settings.retrieval
    return WeightedFusionRetriever(
        legs, {DENSE: r.dense_weight, BM25: r.sparse_weight, NAMED: r.named_files_weight},
        fusion=r.fusion, score_weights={DENSE: r.score_dense_weight}, score_power=r.score_power,
        keyword_boost=r.keyword_boost, phrase_boost=r.phrase_boost, tests_docs_weight=r.tests_docs_weight,
        unnamed_window_weight=r.unnamed_window_weight,
        declaration_weight=r.declaration_weight, noise_weight=r.report_noise_weight,
        non_code_weight=r.report_non_code_weight, file_evidence=r.report_file_evidence,
        leg_agreement=r.leg_agreement, similarity_top_k=r.fusion_top_k, prepare=prepare, ranker=r.ranker,
        learned_share=r.learned_share)


class RetrieverGraph:
    """The LlamaIndex retriever graph of one open index, built once: the dense leg, the BM25 leg and the BM25
    leg within the files a report names, their weighted-RRF fusion, and bounded auto-merging over it. Every
    request runs through the same objects; what it adds travels in its SearchRequest (`request`).

    `paths()` lists the files searchable now (file_pattern selects from them); `text_filter`: the store
    applies exact-keyword filters itself (embedded store) instead of only after the top-k.
    """

    def __init__(self, settings, vector_store, load_embed_model: Callable[[], Any], storage_context, parent_of=None,
                 paths: Callable[[], list[str]] = list, text_filter: bool = False) -> None:
        from coderag.pipelines.retrievers import BoundedAutoMergingRetriever, DenseRetriever, SparseRetriever

        r = self.retrieval = settings.retrieval
        self.paths, self.text_filter = paths, text_filter
        # Light nodes: no links to the previous and next chunks, which a search never reads.
        adapter = None
        if r.query_adapter:
            from coderag.pipelines.query_adapter import load_adapter

            adapter = load_adapter()
        self.legs = {DENSE: DenseRetriever(vector_store, None, r.dense_top_k, load_model=load_embed_model,
                                           adapter=adapter, light=True),
                     BM25: SparseRetriever(vector_store, r.sparse_top_k, light=True),
                     NAMED: SparseRetriever(vector_store, r.sparse_top_k, named_files=True, light=True)}
        self.fusion = fusion_of(settings, self.legs, prepare=lambda q: self.request(SearchOptions(query=q.query_str))
                                or SearchRequest(q.query_str, legs=()))
        self.merging = BoundedAutoMergingRetriever(self.fusion, storage_context, simple_ratio_thresh=r.merge_ratio,
                                                   max_parent_lines=r.max_parent_lines,
                                                   min_score_ratio=r.merge_min_score_ratio, parent_of=parent_of)

    def retriever(self, auto_merge: bool = True):
        """The graph's top: auto-merging over the fusion, or the fusion alone."""
        return self.merging if auto_merge else self.fusion

    def request(self, opts: SearchOptions, **extra: Any) -> Optional[SearchRequest]:
        """The SearchRequest of `opts`, or None when its file_pattern selects no indexed file. `extra`: the
        request's other fields (timings, while_embedding, ...)."""
        filters, any_file = self.filters(opts)
        if not any_file:
            return None
        r = self.retrieval
        reading = report_reading(opts.query, r)
        legs = {RetrieverMode.Hybrid: (DENSE, BM25), RetrieverMode.BM25: (BM25,), RetrieverMode.Dense: (DENSE,)}[
            opts.retriever]
        named = (named_files(self.paths(), reading, opts.file_pattern)
                 if reading is not None and BM25 in legs and r.named_files_weight else [])
        return SearchRequest(opts.query, legs=legs + ((NAMED,) if named else ()), filters=filters,
                             named_filters=_and(filters, named) if named else None, keywords=list(opts.keywords),
                             exact_keywords=list(opts.keywords) if opts.requires_exact_match else [],
                             reading=reading, top_k=opts.top_k, dense_top_k=leg_depths(r, reading)[DENSE],
                             source_quota_depth=source_quota_depth(r, reading, opts.query), **extra)

    def filters(self, opts: SearchOptions):
        """(the store filters of a request, whether any file can match): its file_pattern as the paths it
        selects, and with requires_exact_match each keyword as a text filter, applied inside the store query
        (not after a top-k cut)."""
        from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

        conds = []
        if opts.file_pattern:
            paths = FilePattern(opts.file_pattern).select(self.paths())
            if not paths:
                return None, False
            conds.append(MetadataFilter(key=FILE_PATH_KEY, operator=FilterOperator.IN, value=paths))
        if opts.requires_exact_match and opts.keywords and self.text_filter:
            for kw in opts.keywords:
                conds.append(MetadataFilter(key="text", operator=FilterOperator.TEXT_MATCH, value=kw))
        return (MetadataFilters(filters=conds) if conds else None), True


def report_reading(query: str, retrieval):
    """The QueryReading of `query` when it is long enough to be read as a report and the `retrieval` settings
    read queries; else None (a short query stays as it is). The search and the replays of dumped legs
    (eval/legs.py, eval/train_ranker.py) read a query here, so both see the same request."""
    reading = read_query(query) if retrieval.read_queries else None
    return reading if reading is not None and reading.is_long else None


def leg_depths(retrieval, reading) -> dict[str, int]:
    """How many candidates each leg gives a request, by the `retrieval` settings: a long query's (`reading`
    set) dense leg goes deeper, since one embedding of a whole report places the code it means lower than a
    question's embedding does. The search and the replays of dumped legs (eval/legs.py, eval/train_ranker.py)
    read the depths here."""
    dense = retrieval.report_dense_top_k if reading is not None else retrieval.dense_top_k
    return {DENSE: dense, BM25: retrieval.sparse_top_k, NAMED: retrieval.sparse_top_k}


def source_quota_depth(retrieval, reading, query: str) -> int:
    """How deep the dense and BM25 legs of a request look for source files (pipelines/retrievers.py
    `source_quota`): a short query's, unless it asks for tests or docs; not a long report's, whose named-files
    leg reaches the code it points at. The search and the replays of dumped legs read it here."""
    from coderag.nodes.file_roles import role_asked_for

    return 0 if reading is not None or role_asked_for(query) is not None else retrieval.source_quota_depth


def legs_as_searched(found: dict, retrieval, reading, query: str) -> dict:
    """Each leg's candidates in `found` (dumped deeper than a search reads them, best first) as the search keeps
    them: its depth (`leg_depths`) and the source quota (`source_quota_depth`: none for a report, the only
    request whose named-files leg runs). The replays of dumped legs (eval/legs.py, eval/train_ranker.py) cut them
    here, so that they rank as a search does."""
    from coderag.pipelines.retrievers import source_quota

    depth, quota = leg_depths(retrieval, reading), source_quota_depth(retrieval, reading, query)
    return {leg: source_quota(nodes, depth[leg], quota) for leg, nodes in found.items()}


def named_files(indexed: list[str], reading, file_pattern: Optional[str]) -> list[str]:
    """Indexed files that a long query names (traceback frames first, then paths and dotted modules),
    within the request's file_pattern; at most MAX_NAMED_FILES."""
    from coderag.queries.reader import as_paths, path_matches

    names = list(dict.fromkeys([f.path for f in reversed(reading.frames)] + reading.paths))
    if not names:
        return []
    by_name: dict[str, list[str]] = {}
    for p in indexed:
        by_name.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    allowed = FilePattern(file_pattern).matches if file_pattern else (lambda p: True)
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
