"""`coderag train-ranker` rebuilds the learned ranker from dumped legs (eval/ranker_data.py): a real index's
legs dumped for labelled queries, features computed as the search computes them, LightGBM cross-validated by
repository and a model written that the search loads; and with too few dumps it says what to make first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.base.config import Settings
from coderag.cli import main
from coderag.eval.history import HELDOUT, HISTORY_REPOS, TRAIN
from coderag.eval.ranker_data import dump_repo, load_dump
from coderag.pipelines.features import FEATURES
from coderag.pipelines.index_repository import index_repository
from coderag.pipelines.ranker import load_ranker
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


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the tiny repository's legs dumped under the names of four training repositories and
    one held-out repository (train-ranker reads the repositories of eval/history.py by name)."""
    root = write_files(tmp_path_factory.mktemp("repo"), TINY_FILES)
    index_repository(root, settings=Settings())
    data = tmp_path_factory.mktemp("data")
    (data / "dump").mkdir()
    first = data / "dump" / "first.json.gz"
    assert dump_repo(root, _records(TRAIN), first) == len(QUERIES)
    train = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == TRAIN][:4]
    heldout = next(r for r, (_, _, split) in HISTORY_REPOS.items() if split == HELDOUT)
    for repo in train + [heldout]:
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
    assert "## held-out repositories (1:" in result.output and "| learned | all | 8 |" in result.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["features"] == list(FEATURES) and doc["info"]["queries"] == 4 * len(QUERIES)
    ranker = load_ranker(out)
    assert ranker.booster.num_feature() == len(FEATURES)
    assert (dumped / "features").is_dir()  # the features are cached beside the dumps, for the next run


def test_train_ranker_with_too_few_dumps_says_what_to_make(tmp_path: Path) -> None:
    (tmp_path / "dump").mkdir()
    result = CliRunner().invoke(main, ["train-ranker", "--data", str(tmp_path), "--folds", "3"])
    assert result.exit_code == 2
    assert "0 training repositories have dumps" in result.output and "coderag.eval.ranker_data" in result.output
