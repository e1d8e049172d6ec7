"""eval/paired.py: two saved runs compared query by query, with an exact sign test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderag.eval.paired import _main, load_run, paired, report, sign_test


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 1) == pytest.approx(14 / 64)  # (1 + 6) / 64, both tails
    assert sign_test(1, 5) == sign_test(5, 1)
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(3, 3) == 1.0


def _run(path: Path, values: dict[str, tuple[str, str, float]]) -> Path:
    queries = [{"id": qid, "split": split, "kind": kind, "query": f"question {qid}",
                "outcomes": {"full": {"metrics": {"recall@1": r1}, "file_in_payload": r1 > 0}}}
               for qid, (split, kind, r1) in values.items()]
    path.mkdir()
    (path / "results.json").write_text(json.dumps({"meta": {}, "summary": {}, "queries": queries}))
    return path


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    before = _run(tmp_path / "before", {"a": ("tune", "natural", 0.0), "b": ("tune", "natural", 1.0),
                                        "c": ("heldout", "natural", 0.0), "d": ("heldout", "issue", 1.0),
                                        "gone": ("tune", "natural", 1.0)})
    after = _run(tmp_path / "after", {"a": ("tune", "natural", 1.0), "b": ("tune", "natural", 1.0),
                                      "c": ("heldout", "natural", 1.0), "d": ("heldout", "issue", 0.0),
                                      "new": ("tune", "natural", 0.0)})
    return before, after


def test_paired_counts_the_queries_both_runs_scored(runs) -> None:
    before, after = (load_run(p) for p in runs)
    sums, moves = paired(before, after)
    assert sorted((m.id, m.before, m.after) for m in moves) == [("a", 0.0, 1.0), ("c", 0.0, 1.0), ("d", 1.0, 0.0)]
    assert sums[("all", "all")] == [4, 2.0, 3.0]  # "gone" and "new" are in one run only
    assert sums[("tune", "natural")] == [2, 1.0, 2.0]
    assert sums[("heldout", "all")] == [2, 1.0, 1.0]
    _, payload_moves = paired(before, after, metric="file_in_payload")
    assert {m.id for m in payload_moves} == {"a", "c", "d"}


def test_report_and_command_line(runs, capsys) -> None:
    before, after = runs
    text = report(load_run(before), load_run(after), kind="natural")
    assert "| all | natural | 3 | 0.333 | 1.000 | 2 | 0 | 0.5 |" in text
    assert "| d |" not in text and "| a | tune | natural | 0.00 | 1.00 |" in text
    assert _main([str(before), str(after / "results.json"), "--split", "heldout"]) == 0
    out = capsys.readouterr().out
    assert "| heldout | issue | 1 | 1.000 | 0.000 | 0 | 1 | 1 |" in out and "| a |" not in out
    assert _main([str(before), str(after / "nope.json")]) == 2
    assert "no saved run" in capsys.readouterr().err
