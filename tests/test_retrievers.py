"""Retrievers as LlamaIndex objects: the dense and BM25 legs, weighted RRF with boosts, bounded auto-merging."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.retrievers import AutoMergingRetriever
from llama_index.core.storage import StorageContext
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from conftest import write_files
from coderag.base.config import Settings
from coderag.pipelines.retriever_graph import RetrieverGraph
from coderag.pipelines.search_request import SearchRequest
from coderag.pipelines.search_options import SearchOptions
from coderag.queries.names import query_identifiers
from coderag.pipelines.features import phrase_of, query_phrase
from coderag.pipelines.rules import DEFAULT_RRF_K
from coderag.queries.symbols import defines_symbol as defines
from coderag.pipelines.retrievers import BoundedAutoMergingRetriever, DenseRetriever, SparseRetriever, contains_all
from test_query import RETRIEVAL_FILES


def _long_class() -> str:
    methods = []
    for name in ("title", "header", "summary", "totals", "footer", "notes", "appendix", "index", "glossary",
                 "credits", "changelog", "contacts"):
        methods.append(f'''
    def format_{name}_section(self, report):
        """Format the {name} section of the report as aligned text."""
        lines = []
        for key, value in report.get("{name}", {{}}).items():
            label = str(key).ljust(self.width)
            lines.append(label + " " + str(value))
        if not lines:
            lines.append("(no {name})")
        return self.separator.join(lines)
''')
    return ('"""Plain-text report formatting."""\n\n\nclass ReportFormatter:\n'
            '    """Formats every section of a report."""\n\n'
            '    def __init__(self, width=20, separator="\\n"):\n        self.width = width\n'
            '        self.separator = separator\n' + "".join(methods))


RETRIEVER_FILES = {**RETRIEVAL_FILES}
LONG_CLASS_PATH = "src/report/formatter.py"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("retrievers") / "shop", RETRIEVER_FILES)
    (root / LONG_CLASS_PATH).parent.mkdir(parents=True)
    (root / LONG_CLASS_PATH).write_text(_long_class(), encoding="utf-8")
    assert index_repository(root, settings=Settings()).indexed == len(RETRIEVER_FILES) + 1
    return root


# These tests check the mechanisms (fusion arithmetic, merge bounds), so they pin the knobs they were
# written for instead of following the tuned defaults (equal weights, no path prior, ratio 0.5).
MECHANISM_SETTINGS = {"ranker": "rules", "fusion": "rrf", "dense_weight": 1.0, "score_dense_weight": 1.0, "sparse_weight": 1.0, "tests_docs_weight": 1.0, "merge_ratio": 0.5,
                      "cut_ratio": 0.0, "fusion_top_k": 20}


@pytest.fixture(scope="module")
def index(repo: Path):
    from coderag import CodeIndex

    settings = Settings()
    settings.retrieval = settings.retrieval.model_copy(update=MECHANISM_SETTINGS)
    with CodeIndex.open(repo, settings=settings, create=False) as idx:
        yield idx


def _key(nws) -> tuple[str, str]:
    return nws.node.metadata["file_path"], nws.node.metadata["symbol"]


def _in(paths: list[str]) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key="file_path", operator=FilterOperator.IN, value=paths)])


def _graph(index) -> RetrieverGraph:
    """A retriever graph built now from the index's parts and its settings as they are (tests change them)."""
    return RetrieverGraph(index.settings, index.vector_store, lambda: index.embed_model, index.storage_context,
                          paths=index.indexed_paths, text_filter=index.supports_text_filter)


class _Fusion:
    """The fusion of a fresh graph, asked with the request of `query` and `opts`."""

    def __init__(self, index, query: str, **opts) -> None:
        self.graph, self.request = _graph(index), SearchOptions(query=query, auto_merge=False, **opts)
        self.fusion = self.graph.fusion

    def retrieve(self, q: str):
        return self.fusion.retrieve(self.graph.request(self.request.model_copy(update={"query": q})))


def _fusion(index, query: str, **opts) -> _Fusion:
    return _Fusion(index, query, **opts)


# -- the two legs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("leg", ["dense", "bm25"])
def test_retrievers_legs_filter_inside_the_store(index, leg) -> None:
    """The filter runs in the store before the top-k cut: with k=2 both hits still come from the allowed file."""
    paths = ["cmd/server/health.go"]
    r = (DenseRetriever(index.vector_store, index.embed_model, 2) if leg == "dense"
         else SparseRetriever(index.vector_store, 2))
    nodes = r.retrieve(SearchRequest("round the sales tax handler http", filters=_in(paths)))
    assert nodes and {n.node.metadata["file_path"] for n in nodes} == set(paths)


@pytest.mark.parametrize("leg", ["dense", "bm25"])
def test_retrievers_legs_exact_keywords(index, leg) -> None:
    r = (DenseRetriever(index.vector_store, index.embed_model, 50) if leg == "dense"
         else SparseRetriever(index.vector_store, 50))
    nodes = r.retrieve(SearchRequest("cache entries popitem", exact_keywords=["self._entries", "popitem"]))
    assert [_key(n) for n in nodes] == [("src/cache/lru.py", "LruCache.evict_least_recently_used")]


def test_retrievers_legs_record_their_timings(index) -> None:
    timings: dict[str, float] = {}
    DenseRetriever(index.vector_store, index.embed_model, 5).retrieve(SearchRequest("tax", timings=timings))
    SparseRetriever(index.vector_store, 5).retrieve(SearchRequest("tax", timings=timings))
    assert set(timings) == {"embed_ms", "dense_ms", "bm25_ms"} and all(v > 0 for v in timings.values())


def test_retrievers_dense_leg_goes_deeper_for_a_report(index) -> None:
    """A long query (a bug report) asks the dense leg for report_dense_top_k candidates, a question for
    dense_top_k; the depth travels on the request, so one graph answers both."""
    r = index.settings.retrieval
    saved = (r.dense_top_k, r.report_dense_top_k, r.source_quota_depth)
    r.dense_top_k, r.report_dense_top_k, r.source_quota_depth = 3, 7, 0
    try:
        graph = _graph(index)
        report = ("Invoice totals are wrong when tax is rounded\n" + "The invoice tax is rounded before the "
                  "discount is applied, so every total is off by a cent when the order has several lines. " * 3)
        requests = {q: graph.request(SearchOptions(query=q)) for q in ("round the sales tax", report)}
        found = {q: graph.legs["dense"].retrieve(req) for q, req in requests.items()}
    finally:
        r.dense_top_k, r.report_dense_top_k, r.source_quota_depth = saved
    assert requests[report].reading is not None and requests["round the sales tax"].reading is None
    assert [len(found[q]) for q in ("round the sales tax", report)] == [3, 7]


def test_retrievers_question_legs_look_past_tests_and_docs_for_source(index) -> None:
    """When tests or docs are among a question's first candidates, its dense and BM25 legs add source candidates
    from below until they hold as many as their depth (retrieval.source_quota_depth); a question that asks for
    tests keeps its depth."""
    from coderag.nodes.file_roles import SOURCE, file_role

    r = index.settings.retrieval
    saved = (r.dense_top_k, r.sparse_top_k, r.source_quota_depth)
    r.dense_top_k, r.sparse_top_k = 3, 3
    try:
        graph = _graph(index)

        def legs(query: str, quota: int) -> dict[str, list[str]]:
            r.source_quota_depth = quota
            req = graph.request(SearchOptions(query=query))
            return {leg: [n.node.metadata["file_path"] for n in graph.legs[leg].retrieve(req)] for leg in ("dense", "bm25")}

        off, on = legs("round the sales tax", 0), legs("round the sales tax", 50)
        tested = legs("where is the invoice tax tested", 50)
    finally:
        r.dense_top_k, r.sparse_top_k, r.source_quota_depth = saved

    def sources(paths: list[str]) -> int:
        return sum(file_role(p) == SOURCE for p in paths)

    assert any(sources(off[leg]) < 3 for leg in off)  # tests/test_invoice.py or README.md is among the first three
    for leg in ("dense", "bm25"):
        assert on[leg][:3] == off[leg][:3]  # the first candidates stay, in their order
        assert sources(on[leg]) == 3 and all(file_role(p) == SOURCE for p in on[leg][3:])
        assert len(tested[leg]) == 3


def test_retrievers_dense_uses_a_given_query_embedding(index) -> None:
    emb = index.embed_model.get_query_embedding("round the sales tax to whole cents")
    timings: dict[str, float] = {}
    nodes = DenseRetriever(index.vector_store, index.embed_model, 3).retrieve(
        SearchRequest("something else entirely", embedding=emb, timings=timings))
    assert _key(nodes[0]) == ("src/billing/invoice.py", "compute_invoice_tax")
    assert "embed_ms" not in timings and "dense_ms" in timings  # no second embedding


def test_retrievers_sparse_scores_code_aware_terms(index) -> None:
    bm25 = SparseRetriever(index.vector_store, 5)
    for q in ("getUserById", "get_user_by_id", "get user by id"):  # the three spellings meet
        top = {_key(n) for n in bm25.retrieve(q)[:4]}
        assert {("web/api/users.ts", "getUserById"), ("src/users/repository.py", "get_user_by_id")} <= top, q
    assert _key(bm25.retrieve("getUserById")[0]) == ("web/api/users.ts", "getUserById")  # the exact term counts
    assert bm25.retrieve("retries")[0].node.metadata["file_path"] == "src/auth/login.py"  # stemmed: retry


def test_retrievers_sparse_boost_terms(index) -> None:
    q = "seconds to wait before retrying"
    plain = [_key(n) for n in SparseRetriever(index.vector_store, 10).retrieve(q)]
    boosted = [_key(n) for n in SparseRetriever(index.vector_store, 10).retrieve(SearchRequest(q, keywords=["wait_time"]))]
    target = ("src/net/rate_limiter.py", "TokenBucketRateLimiter.wait_time")
    assert boosted[0] == target and plain.index(target) > 0


def test_retrievers_sparse_query_without_terms_returns_nothing(index) -> None:
    assert SparseRetriever(index.vector_store, 5).retrieve("?! -- ()") == []


# -- weighted reciprocal-rank fusion -------------------------------------------------------------------------

def test_retrievers_fusion_rrf_is_weighted_rrf(index) -> None:
    q = "how many seconds to wait"
    r = index.settings.retrieval
    dense = [n.node.node_id for n in DenseRetriever(index.vector_store, index.embed_model, r.dense_top_k).retrieve(q)]
    sparse = [n.node.node_id for n in SparseRetriever(index.vector_store, r.sparse_top_k).retrieve(q)]
    # The agreement rule can move one chunk first (test_fusion_order.py); the legs above keep their depth.
    saved = (r.leg_agreement, r.fusion, r.source_quota_depth)
    r.leg_agreement, r.fusion, r.source_quota_depth = False, "rrf", 0
    try:
        fused = _fusion(index, q, top_k=50).retrieve(q)
    finally:
        r.leg_agreement, r.fusion, r.source_quota_depth = saved
    w = 0.5  # equal weights, normalised to sum 1
    for n in fused:
        nid = n.node.node_id
        expected = sum(w / (ranks.index(nid) + DEFAULT_RRF_K) for ranks in (dense, sparse) if nid in ranks)
        assert n.score == pytest.approx(expected), _key(n)
    assert [n.score for n in fused] == sorted((n.score for n in fused), reverse=True)
    assert len({n.node.node_id for n in fused}) == len(fused)


def test_retrievers_fusion_scores_sums_each_legs_score_over_its_best(index) -> None:
    """Score fusion: each leg's score over the leg's best, to the power score_power, times the leg's weight
    (normalised to sum 1), summed over the legs that found the chunk; the best of both legs scores 1."""
    q = "how many seconds to wait"
    r = index.settings.retrieval
    dense = DenseRetriever(index.vector_store, index.embed_model, r.dense_top_k).retrieve(q)
    sparse = SparseRetriever(index.vector_store, r.sparse_top_k).retrieve(q)
    saved = (r.leg_agreement, r.fusion, r.score_dense_weight, r.score_power, r.source_quota_depth)
    r.leg_agreement, r.fusion, r.score_dense_weight, r.score_power, r.source_quota_depth = False, "scores", 3.0, 2.0, 0
    try:
        fused = _fusion(index, q, top_k=50).retrieve(q)
    finally:
        r.leg_agreement, r.fusion, r.score_dense_weight, r.score_power, r.source_quota_depth = saved
    legs = [({n.node.node_id: n.score for n in dense}, 3.0 / 4), ({n.node.node_id: n.score for n in sparse}, 1.0 / 4)]
    for n in fused:
        nid = n.node.node_id
        expected = sum(w * (max(scores[nid], 0.0) / max(scores.values())) ** 2  # a negative cosine counts 0
                       for scores, w in legs if nid in scores)
        assert n.score == pytest.approx(expected), _key(n)
    assert fused[0].score <= 1.0 and len(fused) == len({n.node.node_id for n in dense + sparse})


@pytest.mark.parametrize("fusion", ["rrf", "scores"])
@pytest.mark.parametrize("weights, leg", [((1.0, 0.0), "dense"), ((0.0, 1.0), "bm25")])
def test_retrievers_fusion_honours_leg_weights(index, weights, leg, fusion) -> None:
    q = "drop the oldest entries when the cache is full"
    r = index.settings.retrieval
    saved = (r.fusion, r.dense_weight, r.score_dense_weight, r.sparse_weight)
    r.fusion, r.dense_weight, r.score_dense_weight, r.sparse_weight = fusion, weights[0], weights[0], weights[1]
    try:
        fused = [_key(n) for n in _fusion(index, q, top_k=5).retrieve(q)]
    finally:
        r.fusion, r.dense_weight, r.score_dense_weight, r.sparse_weight = saved
    single = DenseRetriever(index.vector_store, index.embed_model, 5) if leg == "dense" \
        else SparseRetriever(index.vector_store, 5)
    assert fused == [_key(n) for n in single.retrieve(q)][:len(fused)]


def test_retrievers_fusion_keyword_boost_multiplies_the_score(index) -> None:
    q = "how many seconds to wait"
    keywords = ["wait_time", "self._refill()"]
    r = index.settings.retrieval
    boost, r.keyword_boost = r.keyword_boost, 0.0
    try:  # the same legs (keywords also feed the BM25 query), without the fusion boost
        plain = {n.node.node_id: n.score for n in _fusion(index, q, top_k=50, keywords=keywords).retrieve(q)}
    finally:
        r.keyword_boost = boost
    boosted = _fusion(index, q, top_k=50, keywords=keywords).retrieve(q)
    for n in boosted:
        hits = sum(k in n.node.get_content() for k in ("wait_time", "self._refill()"))
        assert n.score == pytest.approx(plain[n.node.node_id] * (1 + boost * hits / 2))
    assert _key(boosted[0]) == ("src/net/rate_limiter.py", "TokenBucketRateLimiter.wait_time")


@pytest.mark.parametrize("query, expected", [
    ("getUserById", ["getUserById"]),
    ("get_user_by_id", ["get_user_by_id"]),
    ("LruCache.get", ["LruCache.get"]),
    ("get", ["get"]),
    ("where is getUserById called from parse_retry_after", ["getUserById", "parse_retry_after"]),
    ("get user by id", []),
    ("how many seconds to wait", []),
    ("Decimal rounding", []),
    ("RecursionGuard::new", ["RecursionGuard.new"]),  # Rust, C++, PHP members read as the stored symbols
    ("Array#map and conn->close", ["Array.map", "conn.close"]),
    ("a -> b, issue #12", []),
])
def test_retrievers_query_identifiers(query, expected) -> None:
    assert query_identifiers(query) == expected


def test_retrievers_defines() -> None:
    assert defines("LruCache.get", "get") and defines("LruCache.get", "LruCache.get") and defines("f", "f")
    assert not defines("LruCache.get", "Cache.get") and not defines("getter", "get") and not defines("", "get")


def test_retrievers_fusion_ranks_the_exact_definition_above_callers(index, monkeypatch) -> None:
    """`web/ui/profile.ts` imports and calls getUserById: the definition still comes first."""
    fused = [_key(n) for n in _fusion(index, "getUserById").retrieve("getUserById")]
    assert fused[0] == ("web/api/users.ts", "getUserById")
    plain = _fusion(index, "getUserById")
    plain.fusion.rules.definition_boost = 0.0
    monkeypatch.setattr("coderag.pipelines.rules.LEXICAL_QUERY_DENSE_FACTOR", 1.0)  # the dense leg weighs as usual
    assert [_key(n) for n in plain.retrieve("getUserById")][0] != fused[0]  # the boost is what does it


@pytest.mark.parametrize("query, expected", [
    ("Replace emoji code in text.", "replace emoji code in text"),
    ('"Seconds until the next token is available."', "seconds until the next token is available"),
    ("ValueError: invalid literal for  int()", "valueerror: invalid literal for int()"),
    ("retry after login", ""),  # three words: a name or keywords, found wherever they are used
    ("getUserById", ""),
])
def test_retrievers_query_phrase(query, expected) -> None:
    assert query_phrase(query) == expected


def test_retrievers_phrase_of_reads_a_wrapped_comment_as_its_sentence() -> None:
    jsdoc = "/**\n * Returns the user\n * with this id.\n */\nfunction getUserById(id) {"
    assert "returns the user with this id." in phrase_of(jsdoc)
    python = 'def f():\n    """Split text into lines such that each\n    line fits."""'
    assert query_phrase("Split text into lines such that each line fits.") in phrase_of(python)
    assert phrase_of("x = 1  # note") == "x = 1 # note"  # a comment marker goes only at a line's start


PHRASE = "Seconds until the next token is available."  # the docstring of TokenBucketRateLimiter.wait_time


def test_retrievers_fusion_phrase_boost_multiplies_the_chunks_that_quote_the_query(index) -> None:
    r = index.settings.retrieval
    boost, r.phrase_boost = r.phrase_boost, 0.0
    try:  # the same legs, without the boost
        plain = {n.node.node_id: n.score for n in _fusion(index, PHRASE, top_k=50).retrieve(PHRASE)}
    finally:
        r.phrase_boost = boost
    assert boost > 0
    boosted = _fusion(index, PHRASE, top_k=50).retrieve(PHRASE)
    quoted = [n for n in boosted if query_phrase(PHRASE) in phrase_of(n.node.get_content())]
    assert [_key(n) for n in quoted] == [("src/net/rate_limiter.py", "TokenBucketRateLimiter.wait_time")]
    for n in boosted:
        factor = 1 + boost if n in quoted else 1.0
        assert n.score == pytest.approx(plain[n.node.node_id] * factor)
    assert boosted[0] is quoted[0]


# -- bounded auto-merging ---------------------------------------------------------------------------------

def _auto(index, q: str, **kw) -> list:
    r = index.settings.retrieval
    ctx = StorageContext.from_defaults(docstore=index.docstore, vector_store=index.vector_store)
    args = dict(simple_ratio_thresh=r.merge_ratio, max_parent_lines=r.max_parent_lines,
                min_score_ratio=r.merge_min_score_ratio)
    args.update(kw)
    fusion = _fusion(index, q)
    return BoundedAutoMergingRetriever(fusion.fusion, ctx, **args).retrieve(fusion.graph.request(fusion.request))


LRU_QUERY = "LruCache get put evict entries move_to_end"


def test_auto_merge_sibling_hits_become_their_parent(index) -> None:
    fused = _fusion(index, LRU_QUERY).retrieve(LRU_QUERY)
    kids = [n for n in fused if n.node.metadata["symbol"].startswith("LruCache")]
    assert len(kids) >= 3
    merged = _auto(index, LRU_QUERY)
    parents = [n for n in merged if n.node.metadata["symbol"] == "LruCache" and n.node.metadata["kind"] == "class"]
    assert len(parents) == 1
    parent = parents[0]
    assert (parent.node.metadata["start_line"], parent.node.metadata["end_line"]) == (5, 26)
    assert parent.score == pytest.approx(max(k.score for k in kids))  # the best child's score, not the mean
    merged_ids = {n.node.node_id for n in merged}
    child_ids = {c.node_id for c in parent.node.child_nodes}
    floor = max(n.score for n in fused) * index.settings.retrieval.merge_min_score_ratio
    # children that counted are gone; weak ones below the floor may stay
    assert all(k.node.node_id not in merged_ids for k in kids if k.score >= floor)
    assert child_ids and [n.score for n in merged] == sorted((n.score for n in merged), reverse=True)


def test_auto_merge_never_returns_a_parent_longer_than_the_bound(index) -> None:
    assert any(n.node.metadata["kind"] == "class" for n in _auto(index, LRU_QUERY, max_parent_lines=22))
    assert not any(n.node.metadata["kind"] == "class" for n in _auto(index, LRU_QUERY, max_parent_lines=21))


def test_auto_merge_ignores_weak_siblings(index) -> None:
    assert any(n.node.metadata["kind"] == "class" for n in _auto(index, LRU_QUERY, min_score_ratio=0.5))
    assert not any(n.node.metadata["kind"] == "class" for n in _auto(index, LRU_QUERY, min_score_ratio=1.0))


def test_auto_merge_long_class_stays_in_pieces(index) -> None:
    """Core AutoMergingRetriever would return the whole 130-line class; ours keeps its methods."""
    q = "format a section of the report as aligned text"
    ctx = StorageContext.from_defaults(docstore=index.docstore, vector_store=index.vector_store)
    fusion = _fusion(index, q, top_k=30)
    core = AutoMergingRetriever(fusion.fusion, ctx, simple_ratio_thresh=0.5).retrieve(fusion.graph.request(fusion.request))
    cls = [n for n in core if n.node.metadata["kind"] == "class"]
    assert cls and cls[0].node.metadata["end_line"] - cls[0].node.metadata["start_line"] + 1 > 120
    bounded = _auto(index, q)
    assert not any(n.node.metadata["kind"] == "class" for n in bounded)
    assert sum(n.node.metadata["file_path"] == LONG_CLASS_PATH for n in bounded) >= 5


@pytest.mark.parametrize("q", ["format the report", LRU_QUERY, "token bucket rate limiter refill",
                               "user repository email lookup", "README configuration deployment"])
def test_auto_merge_bound_holds_end_to_end(index, q) -> None:
    bound = index.settings.retrieval.max_parent_lines
    res = index.search(q, merge_adjacent=False, max_tokens=20_000, top_k=50)
    leaves = {(n.metadata["file_path"], n.metadata["start_line"], n.metadata["end_line"])
              for n in index.vector_store.get_nodes()}
    for r in res:
        assert (r.file_path, r.start_line, r.end_line) in leaves or r.end_line - r.start_line + 1 <= bound


def test_contains_all() -> None:
    assert contains_all("a.b(c)", ["a.b", "(c)"]) and contains_all("x", [])
    assert not contains_all("getUserById", ["getuserbyid"])


def test_store_payload_decodes_to_the_node_written(index) -> None:
    """Stored leaves are slim (no embedding, no field at its default, links by id and type), and decode to the
    very node the splitter made, which the docstore keeps as written."""
    from coderag.store.edge_vector_store import NODE_KEY, payload_to_node

    recs, _ = index.vector_store.client.scroll(__import__("qdrant_edge").ScrollRequest(limit=1000, with_payload=True))
    assert len(recs) > 20
    for r in recs:
        assert NODE_KEY in r.payload and "_node_content" not in r.payload
        node = payload_to_node(r.payload)
        ref = index.docstore.get_node(node.node_id)
        assert type(node) is type(ref)
        assert node.model_dump(mode="json") == {**ref.model_dump(mode="json"), "embedding": None}
        assert node.get_content(metadata_mode="embed") == ref.get_content(metadata_mode="embed")
        assert len(r.payload[NODE_KEY]) < len(ref.to_json()) * 0.8


def test_store_light_nodes_are_the_stored_nodes_less_prev_and_next(index) -> None:
    """A light node (built from the payload a query returns) equals the stored node but for the links to
    the previous and next chunks, which a search never reads; light and full queries rank the same."""
    from llama_index.core.schema import NodeRelationship
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
    from qdrant_edge import PayloadSelector, ScrollRequest

    from coderag.store.edge_vector_store import LIGHT_EXCLUDED_KEYS, light_node, payload_to_node

    shard = index.vector_store.client
    recs, _ = shard.scroll(ScrollRequest(limit=1000, with_payload=PayloadSelector.Exclude(LIGHT_EXCLUDED_KEYS)))
    full = {str(r.id): payload_to_node(r.payload) for r in
            shard.scroll(ScrollRequest(limit=1000, with_payload=True))[0]}
    assert len(recs) > 20 and any(n.parent_node is not None for n in full.values())
    for r in recs:
        light, node = light_node(str(r.id), r.payload), full[str(r.id)]
        want = node.model_copy(deep=True)
        for rel in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT):
            want.relationships.pop(rel, None)
        assert light.model_dump(mode="json") == want.model_dump(mode="json")
        assert light == want and light.model_fields_set == want.model_fields_set
        for rel, info in want.relationships.items():
            assert light.relationships[rel].model_fields_set == info.model_fields_set
        assert light.hash == node.hash and light.get_content("embed") == node.get_content("embed")
    # built from templates: no list or dict is shared between two nodes
    one, two = (light_node(str(r.id), r.payload) for r in recs[:2])
    one.excluded_embed_metadata_keys.append("x")
    one.metadata["x"] = 1
    assert "x" not in two.excluded_embed_metadata_keys and "x" not in two.metadata
    assert one.relationships is not two.relationships
    one.relationships[NodeRelationship.SOURCE].node_id = "changed"
    again = light_node(str(recs[0].id), recs[0].payload)
    assert again == light_node(str(recs[0].id), recs[0].payload) != one  # nothing changed reaches a new node
    assert again.relationships[NodeRelationship.SOURCE].node_id != "changed" and "x" not in again.metadata
    emb = index.embed_model.get_query_embedding("round the sales tax to whole cents")
    for q in (VectorStoreQuery(query_embedding=emb, similarity_top_k=10),
              VectorStoreQuery(query_str="tax cents round", mode=VectorStoreQueryMode.SPARSE, similarity_top_k=10)):
        index.vector_store.clear_node_cache()
        b, a = index.vector_store.query(q, light=True), index.vector_store.query(q)  # light ones cached first
        assert a.ids == b.ids and a.similarities == b.similarities and len(a.ids) > 3
        assert [n.get_content() for n in a.nodes] == [n.get_content() for n in b.nodes]
        # a full request is never served a cached light node; a light request takes either
        assert [n.model_dump() for n in a.nodes] == [full[i].model_dump() for i in a.ids]
        assert any(n.prev_node or n.next_node for n in a.nodes)
        assert index.vector_store.query(q, light=True).nodes == a.nodes


def test_store_payload_round_trip_of_other_nodes_and_old_points() -> None:
    """A TextNode with other templates and links that carry metadata comes back the same (links by id and
    type); a point written in the older format (`_node_content`) still decodes as LlamaIndex decodes it."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

    from coderag.store.edge_vector_store import payload_to_node, store_payload

    node = TextNode(text="x = '</snippet>' \u2603", metadata={"file_path": "a.py", "n": 3}, embedding=[0.5, 0.5],
                    excluded_llm_metadata_keys=["n"], start_char_idx=4)
    node.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id="p", node_type="1", metadata={"m": 1},
                                                                  hash="h")
    node.relationships[NodeRelationship.CHILD] = [RelatedNodeInfo(node_id="c", metadata={"k": 2})]
    back = payload_to_node(store_payload(node)).model_dump(mode="json")
    want = node.model_dump(mode="json")
    want["embedding"] = None
    want["relationships"] = {"4": {**want["relationships"]["4"], "metadata": {}, "hash": None},
                             "5": [{**want["relationships"]["5"][0], "metadata": {}}]}
    assert back == want
    old = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
    assert payload_to_node(old).model_dump(mode="json") == metadata_dict_to_node(old).model_dump(mode="json")


def test_store_node_cache_never_serves_a_replaced_node(tmp_path: Path) -> None:
    """Queries decode nodes once and cache them; a write of a node with the same id replaces what is served."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    from coderag.store.edge_vector_store import EdgeVectorStore

    store = EdgeVectorStore.open(tmp_path / "shard", dim=4)
    try:
        def node(text: str) -> TextNode:
            return TextNode(id_="00000000-0000-0000-0000-000000000001", text=text, embedding=[1.0, 0.0, 0.0, 0.0],
                            metadata={"file_path": "a.py"})

        def query() -> list[str]:
            res = store.query(VectorStoreQuery(query_str="parse_header", mode=VectorStoreQueryMode.SPARSE,
                                               similarity_top_k=5))
            return [n.get_content() for n in res.nodes]

        store.add([node("def parse_header(): return 1")])
        assert query() == ["def parse_header(): return 1"] == query()  # the second answer comes from the cache
        store.add([node("def parse_header(): return 2")])
        assert query() == ["def parse_header(): return 2"]
        store.delete_nodes(["00000000-0000-0000-0000-000000000001"])
        assert query() == []
    finally:
        store.close()


# -- instrumentation ----------------------------------------------------------------------------------------

def test_retrievers_emit_their_events_to_a_handler(index) -> None:
    """With an event handler on LlamaIndex's root dispatcher, each of the four retrievers emits its start and
    end events, and the results are the same as with nothing listening."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent

    seen: list = []

    class Recorder(BaseEventHandler):
        @classmethod
        def class_name(cls) -> str:
            return "Recorder"

        def handle(self, event, **kwargs) -> None:
            if isinstance(event, (RetrievalStartEvent, RetrievalEndEvent)):
                seen.append(type(event).__name__)

    retriever = index.retriever
    quiet, heard = _quiet_then_heard(index, retriever, get_dispatcher().event_handlers, Recorder(), seen)
    assert seen.count("RetrievalStartEvent") == 4 and seen.count("RetrievalEndEvent") == 4
    assert heard == quiet


QUIET_QUERY = "how many seconds to wait before retrying"


def _quiet_then_heard(index, component, handlers: list, handler, recorded: list) -> tuple[list, list]:
    """A search while nothing listens (`recorded` stays empty), then one with `handler` in `handlers` (a list
    of the root dispatcher's)."""
    quiet = [(r.id, r.score, r.text) for r in index.search(QUIET_QUERY)]
    assert recorded == []
    handlers.append(handler)
    try:
        index.vector_store.clear_node_cache()
        heard = [(r.id, r.score, r.text) for r in index.search(QUIET_QUERY)]
    finally:
        handlers.remove(handler)
    return quiet, heard


def test_spans_of_every_stage_reach_a_span_handler(index) -> None:
    """With a span handler on the root dispatcher, every stage's span reaches it: the four retrievers'
    `_retrieve` and the two postprocessors' `_postprocess_nodes`."""
    from typing import Any, Optional

    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
    from llama_index.core.instrumentation.span.simple import SimpleSpan

    from coderag.postprocessors.token_budget import TokenBudgetPostprocessor

    names: list = []

    class SpanRecorder(BaseSpanHandler[SimpleSpan]):
        @classmethod
        def class_name(cls) -> str:
            return "SpanRecorder"

        def new_span(self, id_: str, bound_args: Any, instance: Optional[Any] = None,
                     parent_span_id: Optional[str] = None, tags: Optional[dict] = None, **kwargs: Any):
            names.append(id_.rsplit("-", 5)[0])
            return SimpleSpan(id_=id_, parent_id=parent_span_id)

        def prepare_to_exit_span(self, id_: str, bound_args: Any, instance: Optional[Any] = None,
                                 result: Optional[Any] = None, **kwargs: Any):
            return None

        def prepare_to_drop_span(self, id_: str, bound_args: Any, instance: Optional[Any] = None,
                                 err: Optional[BaseException] = None, **kwargs: Any):
            return None

    packer = TokenBudgetPostprocessor(cost=lambda n, text, truncated: 1)
    quiet, heard = _quiet_then_heard(index, packer, get_dispatcher().span_handlers, SpanRecorder(), names)
    for stage in ("BoundedAutoMergingRetriever._retrieve", "WeightedFusionRetriever._retrieve",
                  "DenseRetriever._retrieve", "SparseRetriever._retrieve",
                  "MergeAdjacentPostprocessor._postprocess_nodes", "TokenBudgetPostprocessor._postprocess_nodes"):
        assert stage in names, (stage, names)
    assert heard == quiet
