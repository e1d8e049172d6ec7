"""End-to-end eval over a tiny corpus: real indexing, real model, every variant, the CLI and the outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.eval import runner
from coderag.eval.datasets import Gold, Query
from coderag.eval.metrics import Span
from coderag.eval.report import markdown_report, write_run
from coderag.eval.runner import VARIANTS, parse_overrides, run_eval

from conftest import TINY_FILES, write_files

QUERIES = [
    Query("tiny-1", "tiny", "get_user_by_id", (Gold("src/auth/service.py", 26, 27),), "identifier"),
    Query("tiny-2", "tiny", "wait a little longer after each failed login attempt",
          (Gold("src/auth/service.py", 17, 23),), "natural"),
    Query("tiny-3", "tiny", "add sales tax to the sum of the line items, rounded to cents",
          (Gold("src/billing/invoice.py", 10, 13),), "natural"),
]


def _has_rg() -> bool:
    try:
        from coderag.eval.ripgrep_baseline import find_rg

        find_rg()
        return True
    except FileNotFoundError:
        return False


HAS_RG = _has_rg()
VARIANTS_HERE = tuple(v for v in VARIANTS if v != "ripgrep" or HAS_RG)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_files(tmp_path_factory.mktemp("corpus") / "tiny", TINY_FILES)


@pytest.fixture(scope="module")
def run(corpus: Path):
    """One eval run over the tiny corpus, with `dense` made to fail on every query."""
    real = runner.coderag_outcome

    def flaky(index, query, variant, gold, max_tokens):
        if variant == "dense":
            raise RuntimeError("boom")
        return real(index, query, variant, gold, max_tokens)

    mp = pytest.MonkeyPatch()
    mp.setattr(runner, "coderag_outcome", flaky)
    try:
        yield run_eval(QUERIES, VARIANTS_HERE, max_tokens=600, root_for_corpus=lambda name: corpus)
    finally:
        mp.undo()


def test_run_eval_indexes_the_corpus_in_place(run, corpus: Path):
    assert (corpus / ".coderag").is_dir()
    assert run.meta["corpora"]["tiny"]["root"] == str(corpus.resolve())
    assert run.meta["max_tokens"] == 600


def test_run_eval_finds_the_gold_of_easy_queries(run):
    for v in ("bm25", "hybrid", "full"):
        row = run.summary[v]["all"]
        assert row["n"] == 3 and row["errors"] == 0
        assert row["recall@5"] == 1.0, (v, [q["outcomes"][v].ranked for q in run.queries])
    ident = run.queries[0]["outcomes"]
    assert ident["bm25"].metrics["hit@1"] == 1.0
    assert ident["bm25"].ranked[0].startswith("src/auth/service.py:")


def test_baselines_answer_with_spans_and_a_packed_payload(run):
    ident = run.queries[0]["outcomes"]
    for v in ("li-bm25", "bm25-window"):
        out = ident[v]
        assert out.error is None and out.ranked[0].startswith("src/auth/service.py:"), (v, out.ranked)
        assert out.metrics["recall@1"] == 1.0 and out.in_payload and 0 < out.tokens <= 600
    info = run.meta["corpora"]["tiny"]
    assert info["mode"] == "dense" and info["pending_dense"] == 0  # dense variants asked: vectors for all
    assert info["li-bm25"]["units"] > 0 and info["bm25-window"]["units"] > 0


def test_run_eval_counts_a_failing_variant_as_misses(run):
    row = run.summary["dense"]["all"]
    assert row["errors"] == 3 and row["recall@10"] == 0.0 and row["in_payload"] == 0.0
    assert run.queries[0]["outcomes"]["dense"].error == "RuntimeError: boom"
    assert "| dense | 3 | 3 |" in markdown_report(run.summary)


def test_run_eval_respects_the_token_budget(run):
    for q in run.queries:
        assert q["outcomes"]["full"].tokens <= 600
        assert q["outcomes"]["full"].latency_ms > 0


def test_run_eval_counts_tokens_until_the_first_gold_line(run):
    for q in run.queries:
        for v in ("full", "bm25"):
            out = q["outcomes"][v]
            if out.in_payload:  # a gold line is shown: it is reached within the payload, after its frame
                assert out.file_in_payload and 0 < out.tokens_to_gold < out.tokens, (v, q["id"], out.to_json())
            else:
                assert out.tokens_to_gold is None
    row = run.summary["full"]["all"]
    assert 0 < row["tokens_to_gold"] < 600


@pytest.mark.skipif(not HAS_RG, reason="ripgrep (rg) is not installed")
def test_full_counts_gold_places_among_its_candidate_lines(run):
    """`full` lists candidate places after its blocks: a gold place there counts for "gold place", never
    against "gold in payload"."""
    for q in run.queries:
        out = q["outcomes"]["full"]
        assert out.place_in_payload is not None and (out.place_in_payload or not out.in_payload)
    row = run.summary["full"]["all"]
    assert row["place_in_payload"] >= row["in_payload"]
    assert row["file_in_payload"] >= row["place_in_payload"]  # a gold place is in a gold file
    assert run.queries[0]["outcomes"]["bm25"].place_in_payload is None


def test_ripgrep_variant_ranks_files_by_matches(run):
    out = run.queries[0]["outcomes"]["ripgrep"]
    assert out.error is None
    assert out.ranked[0].startswith("src/auth/service.py (")
    assert out.metrics["recall@1"] == 1.0 and out.in_payload and out.tokens > 0


@pytest.mark.skipif(not HAS_RG, reason="ripgrep (rg) is not installed")
def test_ripgrep_tokens_to_gold_read_the_matching_files_whole_in_its_order(run, corpus: Path):
    """Grep-and-read: every matching file before the gold one is read whole, then the gold file down to
    its first gold line; reported beside coderag's tokens to gold, with how often the gold is reached."""
    from coderag.eval.outcomes import ripgrep_outcome
    from coderag.eval.ripgrep_baseline import find_rg, grep

    q = QUERIES[2]  # "add sales tax ...": its words match more files than the gold one
    ranked = [r.file_path for r in grep(q.query, corpus).ranked]
    assert len(ranked) >= 2, ranked
    gold = Span(ranked[1], 3, 4)  # a place in the second file: the first is read whole before it
    whole = (corpus / ranked[0]).read_text()
    head = "\n".join((corpus / ranked[1]).read_text().split("\n")[:3])
    out = ripgrep_outcome(corpus, q.query, [gold], len, find_rg())  # characters as the token count
    assert out.tokens_to_gold == len(whole) + len(head)
    missed = ripgrep_outcome(corpus, q.query, [Span("nowhere.py", 1, 2)], len, find_rg())
    assert missed.tokens_to_gold is None
    row = run.summary["ripgrep"]["all"]
    assert row["gold_reached"] == 1.0 and row["tokens_to_gold"] > 0
    assert "gold reached" in markdown_report(run.summary)


def test_summary_groups_by_kind(run):
    assert run.summary["full"]["kind:natural"]["n"] == 2
    assert run.summary["full"]["kind:identifier"]["n"] == 1
    report = markdown_report(run.summary)
    assert "### all queries (n=3)" in report and "### kind natural (n=2)" in report


def test_write_run_saves_json_table_and_chart(run, tmp_path: Path):
    files = write_run(run, tmp_path / "out")
    data = json.loads(files["results"].read_text())
    assert [q["id"] for q in data["queries"]] == ["tiny-1", "tiny-2", "tiny-3"]
    assert data["queries"][0]["outcomes"]["dense"]["error"] == "RuntimeError: boom"
    assert data["summary"]["full"]["all"]["n"] == 3
    assert files["table"].read_text().startswith("### all queries")
    if files["chart"] is not None:  # matplotlib is optional
        assert files["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parse_overrides_reads_yaml_scalars_and_refuses_other_sections():
    assert parse_overrides(["retrieval.dense_weight=2", "retrieval.cut_ratio=0.25"]) == \
        {"dense_weight": 2, "cut_ratio": 0.25}
    with pytest.raises(ValueError, match="needs its own index"):
        parse_overrides(["chunking.max_tokens=100"])
    with pytest.raises(ValueError, match="retrieval.KEY=VALUE"):
        parse_overrides(["dense_weight"])


def test_cli_eval_on_a_dataset_file(run, corpus: Path, tmp_path: Path):
    from coderag.cli import main

    ds = tmp_path / "tiny.jsonl"
    ds.write_text("\n".join(json.dumps(q.to_json()) for q in QUERIES) + "\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--variants", "bm25,full", "--limit", "2",
                                    "--corpus-root", f"tiny={corpus}", "--out", str(out),
                                    "--set", "retrieval.sparse_weight=2"])
    assert res.exit_code == 0, res.output
    assert "| bm25 | 2 | 0 |" in res.output and "| full | 2 | 0 |" in res.output
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["overrides"] == {"sparse_weight": 2}
    assert data["meta"]["corpora"]["tiny"]["indexed_now"] == 0  # the index of the first run is reused
    assert data["meta"]["corpora"]["tiny"]["retrieval"]["sparse_weight"] == 2


@pytest.mark.parametrize("args,message", [
    (["--variants", "bm25,grep"], "grep"),
    (["--set", "store.path=x"], "needs its own index"),
    (["--set", "retrieval.dense_weight=-1"], "dense_weight"),
])
def test_cli_eval_rejects_bad_options(args, message, corpus: Path, tmp_path: Path):
    from coderag.cli import main

    ds = tmp_path / "tiny.jsonl"
    ds.write_text(json.dumps(QUERIES[0].to_json()) + "\n")
    base = ["eval", "--dataset", str(ds), "--corpus-root", f"tiny={corpus}"]
    res = CliRunner().invoke(main, base + ([] if "--variants" in args else ["--variants", "bm25"]) + args)
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_compare_puts_saved_runs_side_by_side(run, tmp_path: Path):
    from coderag.eval.report import compare

    a = write_run(run, tmp_path / "a")["results"]
    data = json.loads(a.read_text())
    data["meta"]["overrides"] = {"dense_weight": 2}
    b = tmp_path / "b.json"
    b.write_text(json.dumps(data))
    table = compare([a, b], variants=["full"])
    assert "| full [defaults] | 3 |" in table and "| full [dense_weight=2] | 3 |" in table
    assert "| bm25 " not in table
