"""What the rules variant of WeightedFusionRetriever.fuse (`retrieval.ranker: rules`) does beyond summing the legs, on synthetic leg outputs: the first place
goes to the file both legs put first; windows that define nothing, and code that only declares, weigh less for a
question; a leg's clear first counts."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from coderag.base.config import Settings
from coderag.pipelines.features import FEATURES, candidate_features, is_unnamed_window
from coderag.pipelines.retriever_graph import fusion_of
from coderag.pipelines.retrievers import DenseRetriever, SparseRetriever
from coderag.pipelines.search_request import BM25, DENSE, NAMED, SearchRequest


def _fusion(agreement: bool = True, unnamed: float | None = None, declaration: float | None = None,
            ranker: str = "rules"):
    settings = Settings()
    settings.retrieval.ranker = ranker  # mostly the rules' behaviours, kept as a variant to compare against
    settings.retrieval.leg_agreement = agreement
    if unnamed is not None:
        settings.retrieval.unnamed_window_weight = unnamed
    if declaration is not None:
        settings.retrieval.declaration_weight = declaration
    return fusion_of(settings, {DENSE: DenseRetriever(None), BM25: SparseRetriever(None),
                                NAMED: SparseRetriever(None, named_files=True)})


def _chunk(path: str, start: int, text: str = "x = 1", symbol: str = "", kind: str = "block") -> TextNode:
    return TextNode(id_=f"{path}:{start}", text=text,
                    metadata={"file_path": path, "start_line": start, "end_line": start + 9, "symbol": symbol,
                              "language": "python", "kind": kind})


def _leg(*nodes: TextNode) -> list[NodeWithScore]:
    return [NodeWithScore(node=n, score=1.0 - i / 100) for i, n in enumerate(nodes)]


# Each leg puts a different chunk of core.py first and the same chunk of other.py second: chunk-level RRF
# ranks other.py first (two second places beat a first place and a tenth, or a first place alone).
CORE_A, CORE_B, OTHER = _chunk("src/core.py", 10), _chunk("src/core.py", 200), _chunk("src/other.py", 1)
FILLER = [_chunk(f"src/f{i}.py", 1) for i in range(8)]
AGREE = {DENSE: _leg(CORE_A, OTHER, *FILLER), BM25: _leg(CORE_B, OTHER, *FILLER[:7], CORE_A)}


def _order(fused) -> list[str]:
    return [n.node.node_id for n in fused]


def test_fusion_agreement_the_file_both_legs_put_first_comes_first() -> None:
    plain = _fusion(agreement=False).fuse(AGREE, SearchRequest("parse the options"))
    assert _order(plain)[0] == "src/other.py:1"  # what RRF alone gives
    fused = _fusion().fuse(AGREE, SearchRequest("parse the options"))
    assert _order(fused)[0] == "src/core.py:10"  # core.py's best fused chunk
    assert _order(fused)[1:] == [nid for nid in _order(plain) if nid != "src/core.py:10"]  # the rest as RRF made it
    assert fused[0].score > fused[1].score == pytest.approx(plain[0].score)


def test_fusion_agreement_legs_that_disagree_leave_the_order_to_rrf() -> None:
    legs = {DENSE: _leg(CORE_A, OTHER, *FILLER), BM25: _leg(FILLER[0], OTHER, CORE_B, *FILLER[1:])}
    assert _order(_fusion().fuse(legs, SearchRequest("q w e"))) == \
        _order(_fusion(agreement=False).fuse(legs, SearchRequest("q w e")))


def test_fusion_agreement_reads_each_leg_with_the_boosts() -> None:
    """The legs' first files are those the boosts give: here the definition of the name the query spells,
    which is in other.py, so the legs (raw: core.py first in both) do not agree and nothing moves."""
    other = _chunk("src/other.py", 1, text="def parse_options(): ...", symbol="parse_options")
    legs = {DENSE: _leg(CORE_A, other, *FILLER), BM25: _leg(CORE_B, other, *FILLER)}
    fused = _fusion().fuse(legs, SearchRequest("where is parse_options"))
    assert _order(fused)[0] == "src/other.py:1"
    assert _order(fused) == _order(_fusion(agreement=False).fuse(legs, SearchRequest("where is parse_options")))


def test_fusion_agreement_needs_both_legs() -> None:
    legs = {BM25: _leg(CORE_B, OTHER, *FILLER)}
    assert _order(_fusion().fuse(legs, SearchRequest("q w e"))) == \
        _order(_fusion(agreement=False).fuse(legs, SearchRequest("q w e")))


def test_fusion_a_window_that_defines_nothing_weighs_less_for_a_question() -> None:
    """A palette table's window (no symbol) that both legs rank first loses the first place to the function
    both rank second once it weighs 0.7; a window of a function (its symbol set) is not touched."""
    table = _chunk("rich/_palettes.py", 1, text="(0, 0, 0), (128, 0, 0)", kind="window")
    func = _chunk("rich/color.py", 500, text="def downgrade(self): ...", symbol="Color.downgrade", kind="window")
    legs = {DENSE: _leg(table, func, *FILLER), BM25: _leg(table, func, *FILLER)}
    plain = _fusion(unnamed=1.0).fuse(legs, SearchRequest("map a colour to the nearest palette entry"))
    damped = _fusion(unnamed=0.7).fuse(legs, SearchRequest("map a colour to the nearest palette entry"))
    assert _order(plain)[:2] == ["rich/_palettes.py:1", "rich/color.py:500"]
    assert _order(damped)[0] == "rich/color.py:500"
    scores = {n.node.node_id: n.score for n in plain}
    for n in damped:
        factor = 0.7 if n.node.node_id == "rich/_palettes.py:1" else 1.0
        assert n.score == pytest.approx(scores[n.node.node_id] * factor)
    assert Settings().retrieval.unnamed_window_weight == 0.7
    assert is_unnamed_window(table.metadata) and not is_unnamed_window(func.metadata)
    assert not is_unnamed_window(_chunk("a.py", 1).metadata)  # a block without symbol (imports, a statement)


# A window of an interface whose doc comments word the question (both legs rank it first), and the method
# that does what it asks (both rank it second).
OPTIONS = TextNode(id_="src/types.ts:1947", text="  /** Delay before the next attempt: exponential backoff. */\n"
                   "  retryDelay?: RetryDelayValue<TError>", metadata={
                       "file_path": "src/types.ts", "start_line": 1947, "end_line": 1962, "symbol": "MutationOptions",
                       "language": "typescript", "kind": "window", "declaration": True})
RETRY_LOOP = TextNode(id_="src/retryer.ts:223", text="const run = () => {\n  if (failureCount < retry) {\n"
                      "    return sleep(delay(failureCount)).then(run)\n  }\n}", metadata={
                          "file_path": "src/retryer.ts", "start_line": 223, "end_line": 289, "symbol": "createRetryer",
                          "language": "typescript", "kind": "function"})
DECLARATION_LEGS = {DENSE: _leg(OPTIONS, RETRY_LOOP, *FILLER), BM25: _leg(OPTIONS, RETRY_LOOP, *FILLER)}


def test_fusion_code_that_only_declares_weighs_less_for_a_question() -> None:
    """A question about what the code does is answered where it is done: the interface the loop reads, which
    both legs rank first, loses the first place to the loop once declarations weigh less. A question that
    spells the declared name, and a query for that name, keep it where the legs put it."""
    question = SearchRequest("where is the loop that waits with exponential backoff before retrying")
    assert _order(_fusion(declaration=1.0).fuse(DECLARATION_LEGS, question))[0] == "src/types.ts:1947"
    assert _order(_fusion(declaration=0.5).fuse(DECLARATION_LEGS, question))[0] == "src/retryer.ts:223"
    for query in ("which MutationOptions set the backoff before retrying", "MutationOptions"):
        assert _order(_fusion(declaration=0.5).fuse(DECLARATION_LEGS, SearchRequest(query)))[0] == "src/types.ts:1947"
    ids, rows = candidate_features(DECLARATION_LEGS, question)  # the learned ranker reads the same mark
    marks = dict(zip(ids, (row[FEATURES.index("declaration")] for row in rows)))
    assert marks["src/types.ts:1947"] == 1.0 and marks["src/retryer.ts:223"] == 0.0


# A constant's assignment (module-level code: no symbol) that BM25 ranks third, below a function's local of the
# same name, and a chunk using the name that both legs rank first.
ASSIGNMENT = _chunk("src/defaults.py", 1, text='"""Defaults."""\nDEFAULT_TIMEOUT_SECONDS: int = 30\n')
USAGE = _chunk("src/client.py", 40, text="    def get(self):\n        return fetch(timeout=DEFAULT_TIMEOUT_SECONDS)\n",
               symbol="Client.get", kind="method")
LOCAL = _chunk("src/other.py", 1, text="def f():\n    DEFAULT_TIMEOUT_SECONDS = 5\n", symbol="f", kind="function")
NAME_LEGS = {DENSE: _leg(USAGE, *FILLER), BM25: _leg(USAGE, LOCAL, ASSIGNMENT, *FILLER)}


@pytest.mark.parametrize("query", ["DEFAULT_TIMEOUT_SECONDS", "where is DEFAULT_TIMEOUT_SECONDS defined",
                                   "definition of the DEFAULT_TIMEOUT_SECONDS constant"])
def test_fusion_a_query_that_is_a_name_puts_the_constant_it_assigns_first(query) -> None:
    """A query that is one name (alone, or with words that only ask where it is defined) asks for its
    definition: the line that assigns a constant at the top level defines it (the splitter gives module-level
    code no symbol), and its factor outweighs the 2.25x that a chunk both legs rank first has over one that
    only BM25 finds. A local of the same name is no definition."""
    fused = _fusion().fuse(NAME_LEGS, SearchRequest(query))
    assert _order(fused)[:2] == ["src/defaults.py:1", "src/client.py:40"]
    assert _order(fused).index("src/other.py:1") > 2


def test_fusion_a_sentence_naming_a_constant_keeps_the_plain_definition_boost() -> None:
    """In a sentence the name is one clue among others: the assignment gains the plain definition boost (it
    passes the local), which does not outweigh both legs' first place."""
    fused = _fusion().fuse(NAME_LEGS, SearchRequest("why does DEFAULT_TIMEOUT_SECONDS wait thirty seconds"))
    order = _order(fused)
    assert order[0] == "src/client.py:40"
    assert order.index("src/defaults.py:1") < order.index("src/other.py:1")


# The definition of a function both legs rank first, a file that only imports it, and one that calls it.
DEFINITION = _chunk("src/headers.py", 1, text="def parse_header(raw):\n    return raw.split(':')\n",
                    symbol="parse_header", kind="function")
IMPORTER = _chunk("src/api.py", 1, text="from src.headers import parse_header\nimport json\n")
CALLER = _chunk("src/server.py", 30, text="    def handle(self, raw):\n        name, value = parse_header(raw)\n",
                symbol="Server.handle", kind="method")
USE_LEGS = {DENSE: _leg(DEFINITION, *FILLER), BM25: _leg(DEFINITION, IMPORTER, CALLER, *FILLER)}


@pytest.mark.parametrize("query", ["who calls parse_header", "where is parse_header used", "parse_header callers"])
def test_fusion_a_query_for_a_names_uses_puts_its_callers_first(query) -> None:
    """"Who calls parse_header" asks for the places that use it: a chunk that names it outside an import
    line comes before the definition both legs rank first; an import alone is no use."""
    order = _order(_fusion().fuse(USE_LEGS, SearchRequest(query)))
    assert order[0] == "src/server.py:30"
    assert order.index("src/headers.py:1") < order.index("src/api.py:1")
    plain = _order(_fusion().fuse(USE_LEGS, SearchRequest("parse_header")))
    assert plain[0] == "src/headers.py:1"


# A source chunk both legs rank first, and a test chunk both rank second.
SOURCE = _chunk("src/termui.py", 280, text="def progressbar(iterable):\n    return ProgressBar(iterable)\n",
                symbol="progressbar", kind="function")
TEST = _chunk("tests/test_termui.py", 70, text="def test_progressbar_eta(runner):\n    assert eta(10) == 5\n",
              symbol="test_progressbar_eta", kind="function")
ROLE_LEGS = {DENSE: _leg(SOURCE, TEST, *FILLER), BM25: _leg(SOURCE, TEST, *FILLER)}


def test_fusion_a_question_for_tests_puts_tests_first() -> None:
    """Tests weigh less, as a question asks where a behaviour lives; "where is the progress bar tested" asks
    for tests: they keep their weight and the source weighs less."""
    assert _order(_fusion().fuse(ROLE_LEGS, SearchRequest("how does the progress bar estimate time")))[0] == \
        "src/termui.py:280"
    assert _order(_fusion().fuse(ROLE_LEGS, SearchRequest("where is the progress bar tested")))[0] == \
        "tests/test_termui.py:70"


# A release script that names the whole API, which both legs rank first, and the source both rank second.
SCRIPT = _chunk("script/bump_changelog.py", 1, text="from pkg.brain import numpy_version\nprint(numpy_version())\n",
                symbol="main", kind="function")
BRAIN = _chunk("pkg/brain/numpy_utils.py", 30, text="def numpy_version():\n    return _installed('numpy')\n",
               symbol="numpy_version", kind="function")
SCRIPT_LEGS = {DENSE: _leg(SCRIPT, BRAIN, *FILLER), BM25: _leg(SCRIPT, BRAIN, *FILLER)}


@pytest.mark.parametrize("ranker", ["learned", "blend"])
def test_fusion_the_projects_own_scripts_weigh_as_examples(ranker: str) -> None:
    """script/ and scripts/ hold the project's tooling, which uses its API: the learned ranker weighs them as
    examples (nodes/file_roles.py), so the code with the behaviour comes first. The rules weigh examples as
    source, and so scripts too."""
    order = _order(_fusion(ranker=ranker).fuse(SCRIPT_LEGS, SearchRequest("fix crash if numpy does not report its version")))
    assert order.index("pkg/brain/numpy_utils.py:30") < order.index("script/bump_changelog.py:1")


# A chunk whose message template printed the pasted error, which BM25 ranks third, and one both legs rank first.
RAISER = _chunk("src/types.py", 400, text='        self.fail(f"{value!r} is not a valid integer range.", param, ctx)\n',
                symbol="IntRange.convert", kind="method")
TALKER = _chunk("docs/ranges.rst", 1, text="Integer ranges\n==============\nA valid integer range is ...\n",
                kind="section")
MESSAGE_LEGS = {DENSE: _leg(TALKER, *FILLER), BM25: _leg(TALKER, FILLER[0], RAISER, *FILLER[1:])}


def test_fusion_a_pasted_error_message_finds_the_template_that_printed_it() -> None:
    """"Error: 'x' is not a valid integer range." was printed by `f"{value!r} is not a valid integer range."`:
    the message's own words are the query's, placeholders aside, so that chunk gets the phrase boost."""
    assert _order(_fusion().fuse(MESSAGE_LEGS, SearchRequest("Error: 'x' is not a valid integer range.")))[0] == \
        "src/types.py:400"
    assert _order(_fusion().fuse(MESSAGE_LEGS, SearchRequest("what counts as a valid integer range")))[0] != \
        "src/types.py:400"


LEXICAL_LEGS = {DENSE: _leg(*FILLER), BM25: _leg(DEFINITION, *FILLER)}


@pytest.mark.parametrize("mode", ["scores", "rrf"])
def test_fusion_a_query_about_a_code_name_leans_on_bm25(mode) -> None:
    """A query about one code name, or a pasted error, is matched word for word: the dense leg, which ranks
    the name's neighbours, weighs half as much. A question, or one plain word, keeps the usual weights."""
    f = _fusion()
    usual = (f.rules.score_weights if mode == "scores" else f.rules.weights)[DENSE]
    weights = f.rules._leg_weights(LEXICAL_LEGS, SearchRequest("where is parse_header defined"), mode)
    assert weights[DENSE] == pytest.approx(usual / 2) and weights[BM25] == 1.0
    assert f.rules._leg_weights(LEXICAL_LEGS, SearchRequest("parse the header of a request"), mode)[DENSE] == usual
    assert f.rules._leg_weights(LEXICAL_LEGS, SearchRequest("authentication"), mode)[DENSE] == usual
    assert f.rules._leg_weights(LEXICAL_LEGS, SearchRequest("ValueError: no such header"), mode)[DENSE] < usual


def _scored(*pairs: tuple[TextNode, float]) -> list[NodeWithScore]:
    return [NodeWithScore(node=n, score=s) for n, s in pairs]


# The dense leg's clear first (cosine 0.62, the next 0.45) that BM25 does not find, and a chunk both legs rank
# in the middle (dense 0.44, BM25 6.0 where its first scores 14).
CLEAR = _chunk("src/shared.py", 200, symbol="float_as_int", kind="function")
MIDDLE = _chunk("src/decimal.py", 170, symbol="DecimalValidator.validate", kind="window")
MARGIN_LEGS = {DENSE: _scored((CLEAR, 0.62), *((f, 0.45 - i / 100) for i, f in enumerate(FILLER[:4])), (MIDDLE, 0.40)),
               BM25: _scored(*((f, 14.0 - i) for i, f in enumerate(FILLER[4:8])), (MIDDLE, 6.0))}


def test_fusion_scores_a_legs_clear_first_beats_a_chunk_both_legs_rank_in_the_middle() -> None:
    """Under RRF a chunk that both legs find, however low, outscores one that a single leg ranks first (1/61
    against 1/65 + 1/65); score fusion reads how far ahead the first is."""
    request = SearchRequest("reject NaN and fractional values when a whole number is needed")
    settings = Settings()
    settings.retrieval.leg_agreement = False
    settings.retrieval.ranker = "rules"
    rrf = Settings(retrieval={**settings.retrieval.model_dump(), "fusion": "rrf"})
    legs = {DENSE: DenseRetriever(None), BM25: SparseRetriever(None)}
    assert _order(fusion_of(rrf, legs).fuse(MARGIN_LEGS, request))[0] == "src/decimal.py:170"
    assert _order(fusion_of(settings, legs).fuse(MARGIN_LEGS, request))[0] == "src/shared.py:200"


def test_fusion_reports_and_queries_about_one_name_are_fused_on_ranks() -> None:
    """A question is fused on scores; a long report and a query about one name keep RRF, whose scale their
    boosts were set on (the name's definition or uses x2.5, a report's frames)."""
    from coderag.queries.reader import read_query

    f = _fusion()
    assert f.mode_for(SearchRequest("reject NaN when a whole number is needed")) == "scores"
    for query in ("parse_header", "who calls parse_header", "where is MAX_RETRIES defined"):
        assert f.mode_for(SearchRequest(query)) == "rrf", query
    report = ("Traceback (most recent call last):\n  File \"src/shop/cart.py\", line 12, in total\n"
              "    return sum(i.price for i in items)\nTypeError: unsupported operand type(s) for +: 'int' and "
              "'NoneType'\n\nThe cart total fails when an item has no price. " + "More details follow here. " * 8)
    reading = read_query(report)
    assert reading is not None and reading.is_long
    assert f.mode_for(SearchRequest(report, reading=reading)) == "rrf"
    # Fused on ranks, the legs' shares are reciprocal ranks: the first of a leg weighs 1/61 of its weight.
    fused = f.fuse(NAME_LEGS, SearchRequest("DEFAULT_TIMEOUT_SECONDS"))
    assert max(n.score for n in fused) < 0.1


def test_every_kind_of_query_has_one_row_of_rules() -> None:
    """The rules read what applies to a request from its kind's row (pipelines/rules.py `KIND_RULES`): a kind
    added to `QueryKind` without a row would fail on its first search, so the table must name each one."""
    from coderag.pipelines.rules import KIND_RULES, READ, SPELLED, USES
    from coderag.pipelines.search_request import QueryKind

    assert set(KIND_RULES) == set(QueryKind)
    assert {rules.names for rules in KIND_RULES.values()} <= {SPELLED, USES, READ}


def test_payload_cuts_are_read_on_the_scale_of_the_requests_fusion() -> None:
    """One function gives a request's payload cuts (pipelines/fusion.py `payload_cuts`): the learned ranker's
    calibrated three whatever the query, the settings' cut on the rules' scales (a bug report's own), and no
    cut where the keywords are required."""
    from coderag.pipelines.fusion import LEARNED, payload_cuts
    from coderag.pipelines.ranker import LEARNED_CUT_RATIO, LEARNED_FLAT_RATIO, LEARNED_FLOOR_RATIO
    from coderag.pipelines.rules import RRF, SCORES

    r = Settings(retrieval={"cut_ratio": 0.2, "rrf_cut_ratio": 0.4, "report_cut_ratio": 0.1}).retrieval
    learned = (LEARNED_CUT_RATIO, LEARNED_FLAT_RATIO, LEARNED_FLOOR_RATIO)
    for long_query in (False, True):
        cuts = payload_cuts(LEARNED, r, long_query=long_query)
        assert (cuts.cut, cuts.flat, cuts.floor) == learned
    assert [payload_cuts(mode, r).cut for mode in (SCORES, RRF)] == [0.2, 0.4]
    assert [payload_cuts(mode, r, long_query=True).cut for mode in (SCORES, RRF)] == [0.1, 0.1]
    assert {payload_cuts(mode, r, exact=True).cut for mode in (SCORES, RRF, LEARNED)} == {0.0}
    # The rules' scales differ: RRF's scores stand closer together, so what is flat and what is worth a line
    # sit higher on it.
    scores, rrf = payload_cuts(SCORES, r), payload_cuts(RRF, r)
    assert rrf.flat > scores.flat and rrf.floor > scores.floor
