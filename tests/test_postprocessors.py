"""Postprocessors: merge adjacent chunks, pack into a token budget, read lines as they are at answer time."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from conftest import write_files
from coderag.base.config import Settings
from coderag.postprocessors.lines import LineSource
from coderag.postprocessors.merge_adjacent import MergeAdjacentPostprocessor
from coderag.postprocessors.token_budget import TokenBudgetPostprocessor
from test_query import RETRIEVAL_FILES, assert_exact, file_lines

BUDGETS = (50, 100, 300, 1000, 4000, 20_000)
FORMATS = ("xml", "json", "text")


def _long_report_function() -> str:
    body = "\n".join(f"    rows.append(format_report_row('section {i}', totals[{i}], ratio={i} / 100))"
                     for i in range(70))
    return f'''\
"""Monthly report."""


def build_monthly_report(totals):
    """Render one line per section of the monthly sales report."""
    rows = []
{body}
    return "\\n".join(rows)


def format_report_row(label, amount, ratio):
    return f"{{label:<20}} {{amount:>12.2f}} {{ratio:6.1%}}"
'''


BUDGET_FILES = {**RETRIEVAL_FILES, "src/report/monthly.py": _long_report_function()}
QUERIES = ["build the monthly sales report", "round the sales tax to whole cents", "getUserById",
           "drop the oldest entries when the cache is full", "throttle outgoing requests", "TokenBucketRateLimiter"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = tmp_path_factory.mktemp("post") / "shop"
    write_files(root, {k: v for k, v in BUDGET_FILES.items() if k != "src/report/monthly.py"})
    (root / "src/report").mkdir(parents=True)
    (root / "src/report/monthly.py").write_text(BUDGET_FILES["src/report/monthly.py"], encoding="utf-8")
    assert index_repository(root, settings=Settings()).indexed == len(BUDGET_FILES)
    return root


@pytest.fixture(scope="module")
def index(repo: Path):
    from coderag import CodeIndex

    with CodeIndex.open(repo, settings=Settings(), create=False) as idx:
        yield idx


def _payload(res, fmt: str) -> str:
    return {"xml": res.to_xml, "json": res.to_json, "text": res.to_text}[fmt]()


# -- token budget, end to end -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("max_tokens", BUDGETS)
def test_token_budget_is_never_exceeded(index, repo, fmt, max_tokens) -> None:
    for q in QUERIES:
        res = index.search(q, max_tokens=max_tokens, format=fmt)
        payload = _payload(res, fmt)
        used = index.count_tokens(payload)
        assert used <= max_tokens, (q, fmt, max_tokens, used)
        assert res.tokens == used, (q, fmt, max_tokens)
        assert_exact(repo, res)
        if fmt == "xml":
            ET.fromstring(payload)
        elif fmt == "json":
            assert json.loads(payload)["tokens"] == used


@pytest.mark.parametrize("fmt", FORMATS)
def test_token_budget_small_budget_still_answers_when_a_result_fits(index, fmt) -> None:
    res = index.search("round the sales tax to whole cents", max_tokens=300, format=fmt)
    assert len(res) >= 1 and res[0].file_path == "src/billing/invoice.py"


@pytest.mark.parametrize("fmt", ["xml", "json"])
def test_token_budget_too_small_for_any_result_says_so(index, fmt) -> None:
    """There are hits, but none fits in 50 tokens: the message must not claim there were no results."""
    res = index.search("round the sales tax to whole cents", max_tokens=50, format=fmt)
    assert len(res) == 0 and res.total_hits > 0
    assert "max_tokens" in res.message and "Broaden the query" not in res.message
    assert index.count_tokens(_payload(res, fmt)) <= 50


def test_token_budget_larger_budget_returns_more(index) -> None:
    sizes = [index.search("sales report tax cents", max_tokens=b).tokens for b in (300, 1000, 4000)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_token_budget_truncation_marker(index, repo, fmt) -> None:
    res = index.search("build the monthly sales report", max_tokens=300, format=fmt, auto_merge=False)
    cut = [r for r in res if r.truncated]
    assert cut, [(r.file_path, r.start_line, r.end_line) for r in res]
    r = cut[0]
    assert r.full_end_line > r.end_line >= r.start_line
    lines = file_lines(repo, r.file_path)
    assert r.text == "\n".join(lines[r.start_line - 1:r.end_line])  # the shown lines, whole lines only
    payload = _payload(res, fmt)
    if fmt == "xml":
        el = next(e for e in ET.fromstring(payload).findall("result") if e.get("id") == r.id)
        assert el.findtext("truncated") == (f"lines {r.end_line + 1}-{r.full_end_line} not shown; "
                                            "use expand_result or read the file")
        assert el.findtext("lines") == f"{r.start_line}-{r.end_line}"
    elif fmt == "json":
        item = next(i for i in json.loads(payload)["results"] if i["id"] == r.id)
        assert item["truncated"] is True and item["full_end_line"] == r.full_end_line
        assert item["end_line"] == r.end_line and item["text"] == r.text
    else:
        assert f"… truncated: lines {r.end_line + 1}-{r.full_end_line} not shown" in payload


def test_token_budget_untruncated_results_carry_no_marker(index) -> None:
    res = index.search("round the sales tax to whole cents", max_tokens=20_000)
    assert res and not any(r.truncated or r.full_end_line for r in res)
    assert "<truncated>" not in res.to_xml()


# -- adjacent merge, end to end ---------------------------------------------------------------------------

@pytest.mark.parametrize("q", QUERIES)
def test_merge_adjacent_blocks_of_one_file_are_disjoint_and_exact(index, repo, q) -> None:
    gap = index.settings.retrieval.gap_lines
    res = index.search(q, max_tokens=20_000, auto_merge=False)
    assert_exact(repo, res)
    by_file: dict[str, list] = {}
    for r in res:
        by_file.setdefault(r.file_path, []).append((r.start_line, r.end_line))
    for path, spans in by_file.items():
        spans.sort()
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s2 > e1 + gap + 1, (path, spans)  # overlapping or near blocks were merged
    plain = index.search(q, max_tokens=20_000, auto_merge=False, merge_adjacent=False)
    for r in plain:  # every unmerged chunk lies inside one merged block
        assert any(r.file_path == m.file_path and m.start_line <= r.start_line and r.end_line <= m.end_line
                   for m in res), (r.file_path, r.start_line, r.end_line)


# -- MergeAdjacentPostprocessor on hand-made nodes over a real file -------------------------------------

def _node(path: str, start: int, end: int, score: float, lines: list[str], symbol: str = "", text=None,
          node_id=None) -> NodeWithScore:
    meta = {"file_path": path, "start_line": start, "end_line": end, "symbol": symbol, "kind": "function",
            "language": "python"}
    kw = {"id_": node_id} if node_id else {}
    return NodeWithScore(node=TextNode(text="\n".join(lines[start - 1:end]) if text is None else text,
                                       metadata=meta, **kw), score=score)


@pytest.fixture
def numbered(tmp_path: Path):
    lines = [f"line {i}" for i in range(1, 41)]
    (tmp_path / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path, lines


def _merge(root: Path, nodes, gap: int = 3, max_lines=None):
    return MergeAdjacentPostprocessor(lines=LineSource(root), gap_lines=gap,
                                      max_lines=max_lines).postprocess_nodes(nodes)


def test_merge_adjacent_overlapping_chunks_become_one_filled_block(numbered) -> None:
    root, lines = numbered
    out = _merge(root, [_node("a.py", 5, 10, 0.3, lines, "f"), _node("a.py", 8, 14, 0.9, lines, "g")])
    assert len(out) == 1
    m = out[0].node.metadata
    assert (m["start_line"], m["end_line"], m["kind"]) == (5, 14, "merged")
    assert out[0].node.get_content() == "\n".join(lines[4:14])
    assert out[0].score == 0.9


def test_merge_adjacent_fills_a_small_gap_and_keeps_a_large_one(numbered) -> None:
    root, lines = numbered
    near = _merge(root, [_node("a.py", 1, 4, 0.5, lines), _node("a.py", 8, 9, 0.4, lines)], gap=3)
    assert [(n.node.metadata["start_line"], n.node.metadata["end_line"]) for n in near] == [(1, 9)]
    assert near[0].node.get_content() == "\n".join(lines[0:9])  # lines 5-7 filled in from the file
    far = _merge(root, [_node("a.py", 1, 4, 0.5, lines), _node("a.py", 9, 9, 0.4, lines)], gap=3)
    assert [(n.node.metadata["start_line"], n.node.metadata["end_line"]) for n in far] == [(1, 4), (9, 9)]
    touching = _merge(root, [_node("a.py", 1, 4, 0.5, lines), _node("a.py", 5, 6, 0.4, lines)], gap=0)
    assert [(n.node.metadata["start_line"], n.node.metadata["end_line"]) for n in touching] == [(1, 6)]


def test_merge_adjacent_joins_close_chunks_only_up_to_max_lines(numbered) -> None:
    """Close chunks stop joining at max_lines (a run of them would show a whole file as one place);
    overlapping ones always merge, so no line is shown twice."""
    root, lines = numbered
    close = [_node("a.py", s, s + 5, 0.5, lines) for s in (1, 8, 15, 22)]  # gaps of one line
    spans = lambda out: sorted((n.node.metadata["start_line"], n.node.metadata["end_line"]) for n in out)
    assert spans(_merge(root, close, gap=3)) == [(1, 27)]
    assert spans(_merge(root, close, gap=3, max_lines=14)) == [(1, 13), (15, 27)]
    overlapping = [_node("a.py", 1, 10, 0.5, lines), _node("a.py", 8, 20, 0.4, lines)]
    assert spans(_merge(root, overlapping, gap=3, max_lines=5)) == [(1, 20)]


def test_merge_adjacent_contained_chunk_and_other_files(numbered) -> None:
    root, lines = numbered
    out = _merge(root, [_node("a.py", 10, 30, 0.2, lines), _node("a.py", 12, 13, 0.8, lines),
                        _node("b.py", 12, 13, 0.5, lines)])
    spans = [(n.node.metadata["file_path"], n.node.metadata["start_line"], n.node.metadata["end_line"], n.score)
             for n in out]
    assert spans == [("a.py", 10, 30, 0.8), ("b.py", 12, 13, 0.5)]  # best first; files never mix


def test_merge_adjacent_chain_of_runs_is_ordered_by_line(numbered) -> None:
    root, lines = numbered
    nodes = [_node("a.py", s, s + 1, sc, lines, f"s{s}") for s, sc in ((30, 0.1), (1, 0.2), (4, 0.9), (26, 0.3))]
    out = _merge(root, nodes, gap=3)
    assert [(n.node.metadata["start_line"], n.node.metadata["end_line"]) for n in out] == [(1, 5), (26, 31)]
    assert out[0].node.get_content().split("\n") == lines[0:5]


def test_merge_adjacent_keeps_the_best_members_symbol(numbered) -> None:
    """The docstring promises the best member's symbol; it was dropped when more than four members merged."""
    root, lines = numbered
    nodes = [_node("a.py", 2 * i + 1, 2 * i + 2, 0.1 + i / 100, lines, f"sym{i}") for i in range(6)]
    nodes.append(_node("a.py", 13, 14, 0.99, lines, "best_one"))
    out = _merge(root, nodes)
    assert len(out) == 1
    assert "best_one" in out[0].node.metadata["symbol"].split(", ")


def test_merge_adjacent_ids_are_deterministic(numbered) -> None:
    root, lines = numbered
    a = _node("a.py", 1, 3, 0.5, lines, node_id="id-a")
    b = _node("a.py", 4, 6, 0.4, lines, node_id="id-b")
    one = _merge(root, [a, b])[0].node.node_id
    two = _merge(root, [b, a])[0].node.node_id
    assert one == two and one not in ("id-a", "id-b")
    assert _merge(root, [a])[0].node.node_id == "id-a"  # a lone chunk keeps its own id


def test_merge_adjacent_reads_the_file_as_it_is_now(numbered) -> None:
    root, lines = numbered
    stale = _node("a.py", 3, 4, 0.5, lines, text="old text\nfrom the index")
    out = _merge(root, [stale])
    assert out[0].node.get_content() == "line 3\nline 4"
    (root / "a.py").write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")
    clipped = _merge(root, [_node("a.py", 8, 20, 0.5, lines)])
    assert (clipped[0].node.metadata["end_line"], clipped[0].node.get_content()) == (10, "line 8\nline 9\nline 10")
    assert _merge(root, [_node("a.py", 15, 20, 0.5, lines)]) == []  # wholly past the end of the file


def test_merge_adjacent_drops_deleted_files(numbered) -> None:
    root, lines = numbered
    (root / "b.py").unlink()
    out = _merge(root, [_node("a.py", 1, 2, 0.5, lines), _node("b.py", 1, 2, 0.9, lines)])
    assert [n.node.metadata["file_path"] for n in out] == ["a.py"]


def test_merge_adjacent_without_line_source_refuses_to_invent_gap_lines(numbered) -> None:
    _, lines = numbered
    pp = MergeAdjacentPostprocessor(gap_lines=3)
    assert len(pp.postprocess_nodes([_node("a.py", 1, 2, 0.5, lines)])) == 1
    with pytest.raises(ValueError, match="LineSource"):
        pp.postprocess_nodes([_node("a.py", 1, 2, 0.5, lines), _node("a.py", 3, 4, 0.4, lines)])


# -- TokenBudgetPostprocessor on hand-made nodes ----------------------------------------------------------

def _word_cost(nws, text, truncated):
    """One token per whitespace-separated word, plus 4 for the frame of a result (5 when truncated)."""
    return len(text.split()) + 4 + int(truncated)


def _chunk(n_lines: int, score: float, start: int = 1, words: int = 3) -> NodeWithScore:
    text = "\n".join(" ".join(["w"] * words) for _ in range(n_lines))
    return NodeWithScore(node=TextNode(text=text, metadata={"file_path": "x.py", "start_line": start,
                                                            "end_line": start + n_lines - 1}), score=score)


def test_token_budget_packs_best_first_within_budget() -> None:
    nodes = [_chunk(2, 0.1, words=10), _chunk(2, 0.9, words=10), _chunk(2, 0.5, words=10)]  # 24 tokens each
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=100, frame_tokens=28).postprocess_nodes(nodes)
    assert [n.score for n in out] == [0.9, 0.5, 0.1]
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=99, frame_tokens=28).postprocess_nodes(nodes)
    assert [n.score for n in out] == [0.9, 0.5]


def test_token_budget_cuts_a_block_at_a_line_boundary() -> None:
    big = _chunk(20, 0.9, start=100)  # 64 tokens whole
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=40).postprocess_nodes([big])
    assert len(out) == 1
    m = out[0].node.metadata
    k = len(out[0].node.get_content().split("\n"))
    assert 3 * k + 5 <= 40 < 3 * (k + 1) + 5  # as many whole lines as fit
    assert (m["start_line"], m["end_line"], m["full_end_line"], m["truncated"]) == (100, 100 + k - 1, 119, True)
    assert out[0].node.node_id == big.node.node_id


def test_token_budget_skips_what_cannot_fit_and_keeps_packing() -> None:
    wide = _chunk(1, 0.9, words=100)  # one line of 104 tokens: cannot be cut
    small = _chunk(1, 0.5)
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=50).postprocess_nodes([wide, small])
    assert [n.score for n in out] == [0.5]


def test_token_budget_cut_ratio_drops_the_tail_but_keeps_min_keep() -> None:
    nodes = [_chunk(1, s) for s in (1.0, 0.9, 0.2, 0.1, 0.05)]
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=1000, cut_ratio=0.5, min_keep=1) \
        .postprocess_nodes(nodes)
    assert [n.score for n in out] == [1.0, 0.9]
    out = TokenBudgetPostprocessor(cost=_word_cost, max_tokens=1000, cut_ratio=0.5, min_keep=3) \
        .postprocess_nodes(nodes)
    assert [n.score for n in out] == [1.0, 0.9, 0.2]


# -- LineSource -------------------------------------------------------------------------------------------

def test_lines_match_the_indexer_split(tmp_path: Path) -> None:
    (tmp_path / "crlf.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfx = 1\ny = 2")
    (tmp_path / "blank_end.py").write_bytes(b"x\n\n")
    (tmp_path / "latin1.py").write_bytes(b"caf\xe9 = 1\n")
    (tmp_path / "token.py").write_bytes(b"x = 1\nT = 'gh" + b"p_" + b"aB3" * 12 + b"'\n")
    # a classic Mac file, and one whose lines end every way: a CR alone ends a line, as in an editor
    (tmp_path / "mac.py").write_bytes(b"a = 1\rb = 2\r")
    (tmp_path / "ends.py").write_bytes(b"a\rb\r\nc\nd\r\r\ne")
    src = LineSource(tmp_path)
    assert src.lines("mac.py") == ["a = 1", "b = 2"] and src.text("mac.py", 2, 2) == "b = 2"
    assert src.lines("ends.py") == ["a", "b", "c", "d", "", "e"]
    assert src.lines("crlf.py") == ["a = 1", "b = 2"]
    assert src.lines("bom.py") == ["x = 1", "y = 2"]
    assert src.lines("blank_end.py") == ["x", ""]
    # decoded as the indexer decodes (issue 27): a bad byte replaced, a token masked on its own line
    assert src.lines("latin1.py") == ["caf\ufffd = 1"] and src.lines("missing.py") is None
    assert src.lines("token.py") == ["x = 1", "T = 'ghp_[SECRET MASKED]*********************'"]
    assert src.text("crlf.py", 2, 2) == "b = 2"
    assert src.text("crlf.py", 1, 3) is None and src.text("crlf.py", 0, 1) is None


def test_line_spans_are_the_lines_joined(tmp_path: Path) -> None:
    """`span` slices the cached text at line offsets; it gives what joining the split lines gives, for
    every range of files with and without a final newline, blank runs, CRLF, BOM, non-ASCII, empty."""
    files = {"crlf.py": b"a = 1\r\nb = 2\r\n", "bom.py": b"\xef\xbb\xbfx = 1\ny = 2", "blank_end.py": b"x\n\n",
             "empty.py": b"", "newlines.py": b"\n\n\n", "mixed.py": "é\n\n  ü = 1\r\n\tz\n\n\nend".encode(),
             "mac.py": b"a = 1\r\rb = 2\r"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    src = LineSource(tmp_path)
    for name in files:
        lines = src.lines(name)
        n = len(lines)
        for start in range(1, n + 3):
            for end in range(start, n + 3):
                assert src.span(name, start, end) == ("\n".join(lines[start - 1:min(end, n)]), n), (name, start, end)
    assert src.span("missing.py", 1, 2) is None
    (tmp_path / "mixed.py").write_bytes(b"changed\n")  # a new size: read again, with new offsets
    assert LineSource(tmp_path).span("mixed.py", 1, 9) == ("changed", 1)


@pytest.mark.parametrize("fmt", ["xml", "text"])
def test_payload_cost_score_digits_never_change_a_count(index, fmt) -> None:
    """Blocks are counted with a fixed score and the count reused across searches: this holds only if
    every score renders in the same number of tokens."""
    from dataclasses import replace

    from coderag.postprocessors.payload import render_result_text, render_result_xml

    render = render_result_xml if fmt == "xml" else render_result_text
    res = index.search("round the sales tax to whole cents", format=fmt)
    assert res
    for r in res:
        counts = {index.count_tokens(render(replace(r, score=s)))
                  for s in (0.0, 0.00001, 0.0123, 0.0999, 0.1, 0.5, 0.98765, 1.0, 3.14159, 12.5, 99.0001)}
        assert len(counts) == 1, (r.file_path, counts)


@pytest.mark.parametrize("fmt", ["xml", "json"])
def test_payload_cost_cached_counts_stay_exact(index, fmt) -> None:
    """Blocks seen again come from the caches (XML: header lines, the snippets from stored line counts; other
    formats: whole blocks); the payload count stays exact."""
    index.tokenizer.clear()
    for _ in range(2):
        for q in ("sales report tax cents", "round the sales tax to whole cents"):
            res = index.search(q, max_tokens=1000, format=fmt)
            rendered = res.to_xml() if fmt == "xml" else res.to_json()
            assert res.tokens == index.count_tokens(rendered) <= 1000
    kinds = {key[0] for key in index.tokenizer.keys()}
    assert kinds >= ({"header line", "counted"} if fmt == "xml" else {"block"}), kinds
