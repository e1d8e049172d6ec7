"""The legs dumped once and the fusion replayed over them (eval/legs.py): the replay is the search's ranking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files

QUESTIONS = [("add sales tax to the sum of the line items", "src/billing/invoice.py"),
             ("get_user_by_id", "src/auth/service.py"),
             ("wait a little longer after each failed login attempt", "src/auth/service.py")]


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory):
    from coderag.base.config import load_settings
    from coderag.eval.datasets import Gold, Query
    from coderag.eval.indexing import prepare_index
    from coderag.eval.legs import dump

    root = write_files(tmp_path_factory.mktemp("legs") / "repo", TINY_FILES).resolve()
    prepare_index(root, load_settings(root), dense=True)
    queries = [Query(f"q{i}", "tiny", text, (Gold(path, 1, 3),), "natural", "heldout" if i else "tune")
               for i, (text, path) in enumerate(QUESTIONS)]
    return root, list(dump(queries, lambda q: root, depth=10))


def test_legs_dump_holds_each_leg_best_first(dumped) -> None:
    _, records = dumped
    assert [r["id"] for r in records] == ["q0", "q1", "q2"]
    for rec in records:
        assert set(rec["legs"]) == {"dense", "bm25"}  # short questions: no named-files leg
        for ranked in rec["legs"].values():
            scores = [s for _, s in ranked]
            assert scores == sorted(scores, reverse=True) and 0 < len(ranked) <= 10
            assert all(rec["nodes"][nid]["file_path"] in TINY_FILES for nid, _ in ranked)
    json.dumps(records)  # a dump is plain JSON


def test_legs_replay_gives_the_hybrid_ranking(dumped) -> None:
    """Replayed with the index's own settings, the fusion ranks the dumped candidates as a search does."""
    from coderag.base.config import Settings
    from coderag.eval.legs import replay
    from coderag.pipelines.code_index import CodeIndex

    root, records = dumped
    with CodeIndex.open(root, create=False) as index:
        for rec, ranking in replay(records, Settings()):
            res = index.search(rec["query"], retriever="hybrid", auto_merge=False, merge_adjacent=False,
                               top_k=10, max_tokens=20_000)
            shown = [(r.file_path, (r.start_line, r.end_line)) for r in res]  # cut_ratio may show fewer
            assert shown and [(r.file_path, r.spans[0]) for r in ranking][: len(shown)] == shown


def test_legs_replay_follows_the_settings_it_is_given(dumped, capsys) -> None:
    from coderag.eval.legs import main

    root, records = dumped
    path = Path(root).parent / "legs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main(["replay", str(path), "--split", "heldout", "--set", "retrieval.dense_weight=4"]) == 0
    table = capsys.readouterr().out
    assert "| all | 2 |" in table and "| split heldout | 2 |" in table and "tune" not in table
    with pytest.raises(SystemExit):
        main(["replay", str(path), "--set", "chunking.max_tokens=3"])


def test_choose_leaves_each_corpus_out(dumped, capsys) -> None:
    """eval/choose.py: one fold per corpus, each choosing among the grid on the other corpora; a fold scores
    its corpus's queries with what was chosen, and the grid point that is the baseline scores as it does."""
    import re

    from coderag.eval.choose import hits_of, main, parse_grid

    root, records = dumped
    recs = [dict(r, corpus=f"c{i % 2}") for i, r in enumerate(records)]  # two corpora: q0, q2 and q1
    path = Path(root).parent / "legs-two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    assert parse_grid(["retrieval.fusion=rrf,scores", "retrieval.score_power=2"]) == [
        (("retrieval.fusion", "rrf"), ("retrieval.score_power", "2")),
        (("retrieval.fusion", "scores"), ("retrieval.score_power", "2"))]
    assert main([str(path), "--grid", "retrieval.fusion=rrf,scores", "--baseline", "retrieval.fusion=rrf"]) == 0
    out = capsys.readouterr().out
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (c\d) \| (\d) \| fusion=(\w+) \| (\d) \| (\d) \|$", out, re.M)}
    assert set(rows) == {"c0", "c1"} and rows["c0"][0] == "2" and rows["c1"][0] == "1"
    rrf = hits_of(recs, (("retrieval.fusion", "rrf"),))
    for corpus, (n, chosen, base, got) in rows.items():
        ids = [r["id"] for r in recs if r["corpus"] == corpus]
        assert int(base) == sum(rrf[i][0] for i in ids)  # the baseline's hits on the left-out corpus
        point = (("retrieval.fusion", chosen),)
        assert int(got) == sum(hits_of(recs, point)[i][0] for i in ids)
    with pytest.raises(SystemExit):
        main([str(path), "--grid", "retrieval.score_power"])


def test_legs_dump_is_as_deep_for_a_report_as_for_a_question(tmp_path) -> None:
    """A dump holds every leg `depth` deep, a report's dense leg too, so a replay can cut it to any depth."""
    from coderag.eval.legs import dump_settings
    from coderag.pipelines.retriever_graph import leg_depths

    r = dump_settings(tmp_path, 50).retrieval
    for reading in (None, object()):  # a question, and a request read as a report
        assert set(leg_depths(r, reading).values()) == {50}


def test_legs_reach_counts_what_the_source_quota_adds() -> None:
    """The legs' reach is of the candidates a search keeps: the source quota's additions count, as the fusion
    sees them, and nothing below its depth does."""
    from coderag.base.config import Settings
    from coderag.eval.legs import union_reach

    def node(path: str) -> dict:
        return {"file_path": path, "start_line": 1, "end_line": 5, "text": "x = 1", "kind": "function",
                "symbol": "x", "language": "markdown" if path.endswith(".md") else "python"}

    nodes = {f"d{i}": node(f"docs/page{i}.md") for i in range(40)}
    nodes["gold"] = node("src/app/gold.py")
    ranked = [[f"d{i}", 10.0 - i / 10] for i in range(40)] + [["gold", 5.0]]  # 41st: below the first k
    rec = {"query": "where is the answer", "gold": [{"file_path": "src/app/gold.py", "start_line": 1, "end_line": 5}],
           "legs": {"dense": ranked, "bm25": ranked}, "nodes": nodes}
    settings = Settings()
    assert settings.retrieval.source_quota_depth > len(ranked) > settings.retrieval.sparse_top_k
    assert union_reach(rec, settings.retrieval) == (True, True)
    settings.retrieval.source_quota_depth = 0
    assert union_reach(rec, settings.retrieval) == (False, False)
