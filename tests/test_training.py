"""The trained parts rebuild from dumped legs (eval/ranker_data.py): `coderag train-ranker` (a real index's
legs dumped for labelled queries, features computed as the search computes them, LightGBM cross-validated by
repository, a model written that the search loads) and `coderag train-adapter` (the dense leg's query
adapter, fitted on the snapshots' vectors); with too few dumps each says what to make first. And the adapter
in a search: the identity changes nothing, the shipped one answers, a wrong file is refused with what to do."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from coderag.base.config import Settings
from coderag.cli import main
from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS, TRAIN
from coderag.eval.ranker_data import dump_repo, load_dump, snapshot_folder
from coderag.pipelines.code_index import CodeIndex
from coderag.pipelines.features import FEATURES
from coderag.pipelines.index_repository import index_repository
from coderag.pipelines.query_adapter import QueryAdapterError, load_adapter, save_adapter
from coderag.pipelines.ranker import load_ranker
from coderag.pipelines.retrievers import DenseRetriever
from coderag.pipelines.search_request import SearchRequest
from tests.conftest import TINY_FILES, write_files

QUERIES = [  # (query, kind, gold file)
    ("wait a little longer after each failed login attempt", "natural", "src/auth/service.py"),
    ("add sales tax to the line items and round to cents", "natural", "src/billing/invoice.py"),
    ("fetch a user record over HTTP", "natural", "web/api.ts"),
    ("listen on the configured address", "natural", "cmd/server/main.go"),
    ("invoice_total", "identifier", "src/billing/invoice.py"),
    ("hash_password", "identifier", "src/auth/service.py"),
    ("Cache user records by id so a lookup does not refetch", "commit", "web/api.ts"),
    ("Retry the login with a growing wait between attempts", "commit", "src/auth/service.py"),
]


def _records(split: str) -> list[dict]:
    return [{"id": f"q{i}", "corpus": "history", "query": q, "kind": kind, "split": split,
             "gold": [{"file_path": path, "start_line": 1, "end_line": 1000}]}
            for i, (q, kind, path) in enumerate(QUERIES)]


TRAINING = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == TRAIN][:4]
HELD_OUT = next(r for r, (_, _, split) in HISTORY_REPOS.items() if split == HELDOUT)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_files(tmp_path_factory.mktemp("repo"), TINY_FILES)
    index_repository(root, settings=Settings())
    return root


@pytest.fixture(scope="module")
def dumped(indexed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the tiny repository's legs dumped under the names of four training repositories and
    one held-out repository (the trainers read the repositories of eval/history_repos.py by name)."""
    data = tmp_path_factory.mktemp("data")
    (data / "dump").mkdir()
    first = data / "dump" / "first.json.gz"
    assert dump_repo(indexed, _records(TRAIN), first) == len(QUERIES)
    for repo in TRAINING + [HELD_OUT]:
        shutil.copy(first, data / "dump" / (repo.replace("/", "+") + ".json.gz"))
    first.unlink()
    return data


def test_train_ranker_dumps_hold_each_querys_legs_and_the_nodes_they_name(dumped: Path) -> None:
    dump = load_dump(next((dumped / "dump").glob("*.json.gz")))
    assert [q["query"] for q in dump["queries"]] == [q for q, _, _ in QUERIES]
    for q in dump["queries"]:
        assert set(q["legs"]) >= {"dense", "bm25"}
        named = {nid for ranked in q["legs"].values() for nid, _ in ranked}
        assert named and named <= set(dump["nodes"])
    assert all(n["text"] and n["file_path"] in TINY_FILES for n in dump["nodes"].values())


def test_train_ranker_cross_validates_reports_and_writes_a_model_the_search_loads(dumped: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    result = CliRunner().invoke(main, ["train-ranker", "--data", str(dumped), "--folds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "## cross-validation by repository (4 repositories)" in result.output
    assert "| rules | all | 32 |" in result.output  # 8 queries of each of the 4 repositories, left out by fold
    assert "| line_hit@5 | gold_file_found |" in result.output  # how far any order of the candidates could go
    assert "## held-out repositories (1:" in result.output and "| learned | all | 8 |" in result.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["features"] == list(FEATURES) and doc["info"]["queries"] == 4 * len(QUERIES)
    ranker = load_ranker(out)
    assert ranker.n_features == len(FEATURES)
    # The search scores with the ONNX twin written beside the booster: the same scores, row for row.
    import lightgbm as lgb
    import numpy as np

    booster = lgb.Booster(model_str=doc["booster"])
    rows = np.random.default_rng(0).uniform(0.0, 3.0, (200, len(FEATURES)))
    assert np.allclose(ranker.raw_scores(rows.tolist()), booster.predict(rows), atol=1e-5)
    assert (dumped / "features").is_dir()  # the features are cached beside the dumps, for the next run


def test_train_ranker_says_whether_a_gold_file_is_among_the_candidates_at_all() -> None:
    from coderag.eval.metrics import Result
    from coderag.eval.train_ranker import QueryRows, metrics_of

    def query(files: list[str]) -> QueryRows:
        gold = [{"file_path": "src/parse.py", "start_line": 1, "end_line": 9}]
        return QueryRows({"kind": "commit", "gold": gold}, [f"n{i}" for i in range(len(files))], [[0.0]] * len(files),
                         [int(f == "src/parse.py") for f in files], [Result.block(f, 1, 9) for f in files])

    found, missed = query(["src/cli.py", "src/parse.py"]), query(["src/cli.py", "src/io.py"])
    m = metrics_of([(found, found.places), (missed, missed.places)])["commit"]
    assert m["gold_file_found"] == 0.5  # the one query whose legs found src/parse.py, ranked second
    assert m["recall@1"] == 0.0 and m["recall@5"] == 0.5


def test_train_ranker_scores_our_own_questions_and_never_trains_on_them(dumped: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(dumped / "dump", data / "dump")
    shutil.copy(data / "dump" / (HELD_OUT.replace("/", "+") + ".json.gz"), data / "dump" / "hand+click.json.gz")
    out = tmp_path / "model.json"
    result = CliRunner().invoke(main, ["train-ranker", "--data", str(data), "--folds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "## the tune split's hand-written questions (never trained on)" in result.output
    checked = result.output.split("never trained on")[1].split("## held-out repositories")[0]
    assert "| learned | all | 8 |" in checked and "| rules (chosen on them) | all | 8 |" in checked
    info = json.loads(out.read_text(encoding="utf-8"))["info"]
    assert "hand/click" not in info["trained_on"] and info["queries"] == 4 * len(QUERIES)


def test_train_ranker_with_too_few_dumps_says_what_to_make(tmp_path: Path) -> None:
    (tmp_path / "dump").mkdir()
    result = CliRunner().invoke(main, ["train-ranker", "--data", str(tmp_path), "--folds", "3"])
    assert result.exit_code == 2
    assert "0 training repositories have dumps" in result.output and "coderag.eval.ranker_data" in result.output


def test_train_adapter_chooses_reports_and_writes_an_adapter_the_search_loads(indexed: Path, dumped: Path,
                                                                              tmp_path: Path) -> None:
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    for repo in TRAINING + [HELD_OUT]:  # each repository's indexed snapshot, where ranker_data.py puts it
        snapshot_folder(snapshots, repo).symlink_to(indexed, target_is_directory=True)
    out = tmp_path / "adapter.npz"
    result = CliRunner().invoke(main, ["train-adapter", "--data", str(dumped), "--snapshots", str(snapshots),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "## choice, on 1 training repositories left out of the fit" in result.output
    assert "## held-out repositories (1; queries: all 8 / commit 2 / identifier 2" in result.output
    adapter = load_adapter(out)
    assert adapter.dim == 384 and adapter.info["trained_on"] == sorted(TRAINING)
    assert adapter.info["queries"] == 4 * len(QUERIES)
    assert sorted(p.name for p in (dumped / "adapter").iterdir()) == sorted(
        r.replace("/", "+") + ".npz" for r in TRAINING + [HELD_OUT])  # the vectors, cached for the next run


def test_train_adapter_with_too_few_dumps_says_what_to_make(tmp_path: Path) -> None:
    (tmp_path / "dump").mkdir()
    result = CliRunner().invoke(main, ["train-adapter", "--data", str(tmp_path), "--snapshots", str(tmp_path)])
    assert result.exit_code == 2
    assert "0 training repositories have dumps" in result.output and "coderag.eval.ranker_data" in result.output


def test_query_adapter_the_identity_leaves_the_dense_leg_as_it_is(indexed: Path, tmp_path: Path) -> None:
    identity = load_adapter(save_adapter(np.eye(384), tmp_path / "identity.npz", {}))
    shifted = load_adapter(save_adapter(np.roll(np.eye(384), 1, axis=1), tmp_path / "shifted.npz", {}))
    with CodeIndex.open(indexed, create=False) as index:
        model, store = index.embed_model, index.vector_store

        def dense(adapter):
            leg = DenseRetriever(store, model, 10, adapter=adapter)
            return [(n.node.node_id, round(n.score, 5)) for n in leg.retrieve(SearchRequest("sum the line items"))]

        plain, same, moved = dense(None), dense(identity), dense(shifted)
    assert plain and same == plain
    assert moved != plain  # the adapter is applied: a permuted embedding finds other neighbours


def test_query_adapter_the_shipped_one_answers_a_search(indexed: Path) -> None:
    settings = Settings(retrieval={"query_adapter": True})
    with CodeIndex.open(indexed, settings=settings, create=False) as index:
        assert index.engine.graph.legs["dense"].adapter is load_adapter()
        results = index.search("wait a little longer after each failed login attempt", max_tokens=2000)
    assert results and results[0].file_path == "src/auth/service.py"


def test_query_adapter_a_wrong_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(QueryAdapterError, match="Cannot read.*train-adapter.*query_adapter: false"):
        load_adapter(tmp_path / "missing.npz")
    with pytest.raises(QueryAdapterError, match="not a square matrix"):
        load_adapter(save_adapter(np.ones((3, 4)), tmp_path / "flat.npz", {}))
    small = load_adapter(save_adapter(np.eye(8), tmp_path / "small.npz", {}))
    with pytest.raises(QueryAdapterError, match="maps 8-number embeddings; this model gives 384"):
        small([0.1] * 384)


def test_a_repositorys_queries_files_are_its_main_file_then_each_source_mined_apart(tmp_path: Path) -> None:
    from coderag.eval.ranker_data import TESTS_SOURCE, queries_file, queries_files

    (tmp_path / "queries").mkdir()
    for name in ("dev+app.tests.jsonl", "dev+app.jsonl", "dev+app.names.jsonl", "dev+application.jsonl"):
        (tmp_path / "queries" / name).write_text("{}\n")
    assert queries_file(tmp_path, "dev/app", TESTS_SOURCE).name == "dev+app.tests.jsonl"
    assert [p.name for p in queries_files(tmp_path, "dev/app")] == [
        "dev+app.jsonl", "dev+app.names.jsonl", "dev+app.tests.jsonl"]


def test_ranker_ablations_train_each_variant_and_score_it_beside_the_rules(dumped: Path, capsys) -> None:
    from coderag.eval.ranker_ablations import main as ablations

    variants = ["base", "drop:file+weight:commit=0", "objective:binary", "also:natural=0.5", "monotone"]
    assert ablations(["--data", str(dumped), *variants]) == 0
    out = capsys.readouterr().out
    assert "| rules | held-out repositories | 8 |" in out
    for v in variants:
        assert f"| {v} | held-out repositories | 8 |" in out


def test_ranker_ablations_a_dropped_feature_is_never_split_on(dumped: Path) -> None:
    from coderag.eval.ranker_ablations import feature_groups, parse_variant, shipped_size, train
    from coderag.eval.train_ranker import load_rows
    from coderag.pipelines.ranker import MODEL_PATH

    qs = [q for rows in load_rows(dumped, Settings(), TRAINING).values() for q in rows]
    params, _ = shipped_size(MODEL_PATH)
    params = {**params, "min_data_in_leaf": 2, "min_data_in_bin": 1}  # a tiny set: let the trees split
    splits = train(parse_variant("base"), qs, params, 20).boosters[0].feature_importance("split")
    used = {g: sum(splits[FEATURES.index(f)] for f in fs) for g, fs in feature_groups().items()}
    group = max(used, key=used.get)  # the group the full model splits on most...
    assert used[group] > 0
    kept = train(parse_variant(f"drop:{group}"), qs, params, 20).boosters[0].feature_importance("split")
    assert all(kept[FEATURES.index(f)] == 0 for f in feature_groups()[group])  # ...is never split on once dropped


def test_ranker_ablations_a_variant_it_cannot_read_is_refused_with_what_to_do(tmp_path: Path, capsys) -> None:
    from coderag.eval.ranker_ablations import main as ablations

    assert ablations(["--data", str(tmp_path), "drop:colour"]) == 2
    err = capsys.readouterr().err
    assert "'colour' is neither a feature nor one of the groups" in err and "--help" in err
    assert ablations(["--data", str(tmp_path), "weight:commit=lots"]) == 2
    assert "needs a number" in capsys.readouterr().err


def test_ranker_ablations_questions_score_each_tune_set_with_a_model_that_never_saw_it(dumped: Path, tmp_path: Path,
                                                                                          capsys, monkeypatch) -> None:
    import coderag.eval.ranker_ablations as ablations

    data = tmp_path / "data"
    shutil.copytree(dumped / "dump", data / "dump")
    source = json.loads(gzip.decompress((data / "dump" / (HELD_OUT.replace("/", "+") + ".json.gz")).read_bytes()))
    for name in ("click", "rich"):  # two tune sets: the held-out repository's queries, renamed
        doc = {**source, "queries": [{**q, "id": f"{name}-{q['id']}"} for q in source["queries"]]}
        (data / "dump" / f"hand+{name}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    trained_on = []
    real_train = ablations.train

    def train(variant, qs, params, rounds):  # the real training; the queries it got are noted
        trained_on.append({q.record["id"] for q in qs})
        return real_train(variant, qs, params, rounds)

    monkeypatch.setattr(ablations, "train", train)
    assert ablations.main(["--data", str(data), "questions+weight:natural=5"]) == 0
    out = capsys.readouterr().out
    assert "| questions+weight:natural=5 | tune questions, each set left out | 16 |" in out
    assert "| questions+weight:natural=5 | held-out repositories | 8 |" in out
    from coderag.eval.train_ranker import HAND_WRITTEN, load_rows

    hand = load_rows(data, Settings(), HAND_WRITTEN)
    assert len(trained_on) == 3  # one model per tune set left out, and one with every set for the repositories
    for seen, (name, qs) in zip(trained_on, hand.items()):
        ids = {q.record["id"] for q in qs}
        assert not seen & ids and seen & {q.record["id"] for other in hand.values() for q in other} - ids, name
    assert all(q.record["id"] in trained_on[-1] for qs in hand.values() for q in qs)


def test_ranker_ablations_add_the_whole_trees_evidence_as_columns_the_model_trains_on(
        indexed: Path, dumped: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from coderag.eval.ranker_ablations import main as ablations, parse_variant, shipped_size, train, with_evidence
    from coderag.eval.train_ranker import load_rows
    from coderag.eval.tree_evidence import COLUMNS
    from coderag.pipelines.ranker import MODEL_PATH

    history = tmp_path / "history"  # each repository's snapshot is the tiny indexed repository
    for repo in TRAINING + [HELD_OUT]:
        snapshot_folder(history, repo).parent.mkdir(parents=True, exist_ok=True)
        snapshot_folder(history, repo).symlink_to(indexed, target_is_directory=True)
    monkeypatch.setenv("CODERAG_HISTORY_DIR", str(history))
    assert ablations(["--data", str(dumped), "--cv", "2", "add:indeg+add:size+add:knn"]) == 0
    out = capsys.readouterr().out
    assert "| add:indeg+add:size+add:knn | held-out repositories | 8 |" in out
    n = 8 * len(TRAINING)  # every training repository's queries, each scored by a fold that did not train on it
    assert f"| rules | training repositories, 2 folds | {n} |" in out
    assert f"| add:indeg+add:size+add:knn | training repositories, 2 folds | {n} |" in out
    assert ablations(["--data", str(dumped), "add:centrality"]) == 2
    assert "add:centrality: expected one of indeg, size, knn" in capsys.readouterr().err

    variant = parse_variant("add:size")
    qs = with_evidence(load_rows(dumped, Settings(), TRAINING), variant.added, {}, dumped)
    rows = [q for rows in qs.values() for q in rows]
    assert all(len(r) == len(FEATURES) + len(COLUMNS["size"]) for q in rows for r in q.rows)
    params, _ = shipped_size(MODEL_PATH)
    booster = train(variant, rows, {**params, "min_data_in_leaf": 2, "min_data_in_bin": 1}, 5).boosters[0]
    assert booster.feature_name()[-2:] == list(COLUMNS["size"])
