"""The file-level probe of a saved run (eval/file_probe.py): its odds and reordering, a file's centroid over a real
index, the words of its path and its comments' words; and the command's refusal of a translation probe without
its data (the associations themselves: tests/test_term_translation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderag.base.config import Settings
from coderag.eval.file_probe import (Candidates, centroid_scores, main, pairwise_odds, path_scores, prose_scores,
                                     read_candidates, reordered_gold_first)
from coderag.pipelines.index_repository import index_repository
from tests.conftest import TINY_FILES, write_files


def _query(qid: str, corpus: str, gold: str, ranked: list[str], kind: str = "natural") -> dict:
    return {"id": qid, "corpus": corpus, "kind": kind, "query": "q", "gold": [gold],
            "outcomes": {"full": {"ranked": ranked}}}


RUN = [
    _query("hit", "c1", "a.py:1-5", ["a.py:1-5", "b.py:3-9", "a.py:7-9"]),
    _query("miss", "c1", "b.py:1-2", ["c.py:1-4", "b.py:1-2"]),
    _query("other kind", "c2", "a.py:1-5", ["b.py:1-5"], kind="commit"),
]


def test_candidates_keep_the_runs_file_order_and_their_spans() -> None:
    cands = read_candidates(RUN)
    assert [c.id for c in cands] == ["hit", "miss"]
    assert cands[0].order == ["a.py", "b.py"] and cands[0].files["a.py"] == [(1, 5), (7, 9)]
    assert cands[1].gold == {"b.py"}
    assert len(read_candidates(RUN, kind=None)) == 3


def test_odds_and_reordering_follow_the_score() -> None:
    cands = read_candidates(RUN)
    lifts_the_gold = [{"a.py": 1.0, "b.py": 0.0}, {"c.py": 0.0, "b.py": 1.0}]
    assert pairwise_odds(cands, lifts_the_gold) == (1, 1, 1, 1)
    assert reordered_gold_first(cands, lifts_the_gold, 0.0) == (0.5, {"c1": 0.5})  # weight 0: the run's own order
    assert reordered_gold_first(cands, lifts_the_gold, 2.0) == (1.0, {"c1": 1.0})  # the gold one place down moves up
    backwards = [{"a.py": 0.0, "b.py": 1.0}, {"c.py": 1.0, "b.py": 0.0}]
    assert pairwise_odds(cands, backwards) == (0, 1, 0, 1)
    assert reordered_gold_first(cands, backwards, 2.0)[0] == 0.0


def test_a_files_centroid_is_nearer_the_question_it_answers(tmp_path: Path) -> None:
    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    cand = Candidates("q", "tiny", "log a user in and retry after a wrong password", {"src/auth/service.py"},
                      {"src/billing/invoice.py": [(1, 5)], "src/auth/service.py": [(1, 5)]})
    [scores] = centroid_scores([cand], lambda corpus: root)
    assert scores["src/auth/service.py"] > scores["src/billing/invoice.py"]
    assert all(-1.0 <= s <= 1.0 for s in scores.values())
    billing = Candidates("q", "tiny", "what the customer is billed", {"src/billing/invoice.py"}, cand.files)
    [by_path] = path_scores([billing], lambda corpus: root)
    assert by_path["src/billing/invoice.py"] > by_path["src/auth/service.py"]  # "src billing invoice" is nearer
    whole = {path: [(1, len((root / path).read_text().splitlines()))] for path in cand.files}
    retry = Candidates("q", "tiny", "wait longer after each failed login attempt", {"src/auth/service.py"}, whole)
    [by_prose] = prose_scores([retry], lambda corpus: root)
    assert by_prose["src/auth/service.py"] > max(by_prose["src/billing/invoice.py"], 0.0)  # its login's docstring


def test_the_command_refuses_translation_without_mined_queries(tmp_path: Path, capsys) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"queries": RUN}), encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), "--evidence", "translation"])
    assert stop.value.code == 2 and "--mined" in capsys.readouterr().err


def test_the_command_names_a_run_folder_that_holds_no_run(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "no_such_run"), "--evidence", "centroid"])
    assert stop.value.code == 2 and "no saved run at" in capsys.readouterr().err
