"""eval/misses.py reads a saved run's misses: where the gold file is, which leg's first took the first place,
and the files that are first most often without being the answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from coderag.eval.misses import read_misses


def _query(qid: str, gold: str, full: list[str], bm25: list[str], dense: list[str], r1: float) -> dict:
    def outcome(ranked: list[str], recall: float) -> dict:
        return {"metrics": {"recall@1": recall}, "ranked": ranked}

    return {"id": qid, "corpus": "lib", "kind": "natural", "gold": [gold],
            "outcomes": {"full": outcome(full, r1), "bm25": outcome(bm25, 0.0), "dense": outcome(dense, 0.0)}}


QUERIES = [
    # The hub is first three times and right once; the gold is second, fourth, then nowhere.
    _query("q1", "src/hub.py:1-9", ["src/hub.py:1-9", "src/a.py:1-5"], ["src/hub.py:1-9"], ["src/a.py:1-5"], 1.0),
    _query("q2", "src/a.py:1-5", ["src/hub.py:10-20", "src/a.py:1-5"], ["src/hub.py:10-20"], ["src/a.py:1-5"], 0.0),
    _query("q3", "src/b.py:1-5", ["src/hub.py:1-9", "src/hub.py:30-40", "src/c.py:1-3", "src/d.py:1-3",
                                  "src/b.py:1-5"], ["src/c.py:1-3"], ["src/hub.py:1-9"], 0.0),
    _query("q4", "src/e.py:1-5", ["src/hub.py:1-9"], ["src/hub.py:1-9"], ["src/hub.py:1-9"], 0.0),
    _query("q5", "src/c.py:1-3", ["src/a.py:1-5", "src/c.py:1-3"], ["src/a.py:1-5"], ["src/c.py:1-3"], 0.0),
]


def test_misses_count_the_gold_places_the_legs_and_the_hubs() -> None:
    m = read_misses(QUERIES)
    assert (m.n, m.missed) == (5, 4)
    assert m.gold_place == {1: 2, 3: 1, None: 1}  # 0-based places among distinct files: q3's hub spans count once
    assert m.leg_first == {"bm25": 3, "dense": 2}
    assert m.wrong_first.most_common(1) == [(("lib", "src/hub.py"), 3)] and m.first[("lib", "src/hub.py")] == 4


def test_misses_command_reads_a_saved_run(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}, "summary": {}, "queries": QUERIES}))
    out = subprocess.run([sys.executable, "-m", "coderag.eval.misses", str(tmp_path), "--kind=natural"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("4 of 5 queries miss the first place") and "2: 2, 4: 1, none: 1" in out
    assert "lib: src/hub.py  3 / 4" in out
    bad = subprocess.run([sys.executable, "-m", "coderag.eval.misses", str(tmp_path / "nowhere")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no saved run" in bad.stderr
