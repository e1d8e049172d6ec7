"""Associations between the words of change descriptions and the terms of the lines they changed
(eval/term_translation.py), learned from a mined query read against a snapshot, and their score as a file
probe's evidence (eval/file_probe.py)."""

from __future__ import annotations

import json
from pathlib import Path

from coderag.eval.file_probe import Candidates, translation_scores
from coderag.eval.ranker_data import snapshot_folder
from coderag.eval.term_translation import TermTranslation, mined_pairs
from tests.conftest import write_files


def test_associations_are_learned_from_mined_changes_and_score_a_candidates_other_words(tmp_path: Path) -> None:
    repo = "pypa/packaging"  # a training repository of HISTORY_REPOS: its snapshot's folder name is known
    snapshots = tmp_path / "snapshots"
    write_files(snapshot_folder(snapshots, repo), {"src/store.py": "def lookup(key):\n    return lru.get(key)\n"})
    mined = tmp_path / "mined"
    mined.mkdir()
    record = {"query": "Speed up the cache", "gold": [{"file_path": "src/store.py", "start_line": 2, "end_line": 2}]}
    (mined / "pypa+packaging.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    [(words, terms, name)] = list(mined_pairs(mined, snapshots))
    assert name == repo and "cach" in words and {"lru", "lookup"} <= terms  # the change's line and its context
    assert list(mined_pairs(mined, snapshots, leave_out=["packaging"])) == []

    pairs = [(words, terms, f"{name}{i}") for i in range(5)]
    translation = TermTranslation(pairs + [({"pars"}, {"token"}, f"r{i}") for i in range(5)], min_repos=5)
    assert "lru" in translation.table["cach"]
    assert TermTranslation(pairs, min_repos=6).table == {}  # seen in five repositories only
    corpus = write_files(tmp_path / "corpus", {"a.py": "x = lru(1)\n", "b.py": "y = token(2)\n"})
    cand = Candidates("q", "c", "the cache", {"a.py"}, {"a.py": [(1, 1)], "b.py": [(1, 1)]})
    [scores] = translation_scores([cand], translation, lambda corpus_name: corpus)
    assert scores["a.py"] > 0.0 == scores["b.py"]
