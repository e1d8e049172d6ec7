"""The learned ranker: the shipped model loads and matches the features this code computes, a model made for
other features is refused with what to do, and a real index searched through the learned ranker answers
questions, names and async calls as a user expects."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from coderag.base.config import Settings
from coderag.pipelines.code_index import CodeIndex
from coderag.pipelines.features import FEATURES
from coderag.pipelines.index_repository import index_repository
from coderag.pipelines.ranker import MODEL_PATH, RankerModelError, load_ranker
from coderag.pipelines.search_request import BM25, DENSE, QueryKind, SearchRequest
from tests.conftest import TINY_FILES, write_files


def test_ranker_the_shipped_model_scores_every_feature_this_code_computes() -> None:
    doc = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    assert doc["features"] == list(FEATURES)
    ranker = load_ranker(MODEL_PATH)
    assert ranker.n_features == len(FEATURES)
    probs = ranker.scores([[0.0] * len(FEATURES), [1.0] * len(FEATURES)])
    assert len(probs) == 2 and abs(sum(probs) - 1.0) < 1e-9 and all(p > 0 for p in probs)


def test_ranker_the_shipped_twin_scores_as_its_booster_and_a_search_loads_no_lightgbm(indexed: Path) -> None:
    """A search scores with the model's ONNX twin, in a process that never imports LightGBM or the
    scikit-learn its import pulls in (seconds of every start); the twin gives the booster's scores."""
    import subprocess
    import sys

    import lightgbm as lgb
    import numpy as np

    doc = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    rows = np.random.default_rng(1).uniform(0.0, 3.0, (300, len(FEATURES)))
    twin = load_ranker(MODEL_PATH).raw_scores(rows.tolist())
    assert np.allclose(twin, lgb.Booster(model_str=doc["booster"]).predict(rows), atol=1e-5)
    code = ("import sys\nfrom coderag.pipelines.code_index import CodeIndex\n"
            f"with CodeIndex.open({str(indexed)!r}, create=False) as index:\n"
            "    hits = index.search('add sales tax to the line items', max_tokens=2000)\n"
            "    assert index.engine.graph.fusion.ranker == 'blend' and hits\n"
            "print(sorted(m for m in ('lightgbm', 'sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr[-3000:]


def test_ranker_a_model_file_without_its_twin_gets_one_from_its_booster(tmp_path: Path) -> None:
    """A model written before files carried the ONNX twin (a booster and its features) still loads, and
    scores as the shipped one does."""
    doc = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    del doc["onnx"]
    path = tmp_path / "older_model.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    rows = [[0.0] * len(FEATURES), [1.0] * len(FEATURES), [2.0] * len(FEATURES)]
    older, shipped = load_ranker(path).raw_scores(rows), load_ranker(MODEL_PATH).raw_scores(rows)
    assert older == pytest.approx(shipped, abs=1e-9)


def test_ranker_a_model_for_other_features_is_refused_with_what_to_do(tmp_path: Path) -> None:
    doc = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    doc["features"] = doc["features"][:-1]
    path = tmp_path / "old_model.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RankerModelError, match="retrieval.ranker: rules.*`coderag train-ranker --data DIR`"):
        load_ranker(path)
    doc = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    doc["onnx"] = doc["onnx"][: len(doc["onnx"]) // 2]  # a file cut short
    damaged = tmp_path / "damaged_model.json"
    damaged.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RankerModelError, match="Cannot read the ranker model .*damaged_model.json.*ranker: rules"):
        load_ranker(damaged)
    with pytest.raises(RankerModelError, match="Cannot read") as missing:
        load_ranker(tmp_path / "missing.json")
    from coderag.cli import main  # the command the message names is one the CLI has

    assert "coderag train-ranker" in str(missing.value) and "train-ranker" in main.commands


LEARNED = Settings(retrieval={"ranker": "learned"})


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_files(tmp_path_factory.mktemp("ranked"), TINY_FILES)
    index_repository(root, settings=Settings())
    return root


@pytest.mark.parametrize("query, want", [
    ("wait a little longer after each failed login attempt", "src/auth/service.py"),
    ("add sales tax to the line items and round to cents", "src/billing/invoice.py"),
    ("invoice_total", "src/billing/invoice.py"),
])
def test_ranker_learned_search_puts_the_answer_first(indexed: Path, query: str, want: str) -> None:
    with CodeIndex.open(indexed, settings=LEARNED, create=False) as index:
        assert index.engine.graph.fusion.ranker == "learned"
        results = index.search(query, max_tokens=2000)
    assert results and results[0].file_path == want


def test_ranker_the_blend_runs_from_the_rules_to_the_learned_order(indexed: Path) -> None:
    """learned_share 0 is the rules' order and scores, 1 the learned ranker's order; the default is between."""
    query = "wait a little longer after each failed login attempt"

    def fused(**retrieval) -> list:
        with CodeIndex.open(indexed, settings=Settings(retrieval=retrieval), create=False) as index:
            fusion = index.engine.graph.fusion
            return [(n.node.node_id, n.score) for n in fusion.retrieve(query)], fusion

    default, fusion = fused(ranker="blend")
    assert (fusion.ranker, fusion.learned_share) == ("blend", 0.25)
    rules, _ = fused(ranker="rules")
    learned, _ = fused(ranker="learned")
    assert fused(ranker="blend", learned_share=0.0)[0] == rules
    assert [nid for nid, _ in fused(ranker="blend", learned_share=1.0)[0]] == [nid for nid, _ in learned]
    assert {nid for nid, _ in default} == {nid for nid, _ in rules}
    assert [score for _, score in default] == [score for _, score in rules], "the rules' scores, in the blend's order"
    with pytest.raises(ValueError, match="learned_share"):
        Settings(retrieval={"learned_share": 1.5})


def fusion_answer(root: Path, query: str, legs: tuple = (DENSE, BM25), **retrieval) -> list:
    """(node id, score) of the fusion's answer to `query` over `legs`, under the `retrieval` settings."""
    with CodeIndex.open(root, settings=Settings(retrieval=retrieval), create=False) as index:
        fusion = index.engine.graph.fusion
        req = SearchRequest(query, legs=legs)
        return [(n.node.node_id, n.score) for n in fusion.fuse(fusion.run_legs(req), req)]


def test_ranker_the_blend_leaves_a_one_leg_search_to_the_rules(indexed: Path) -> None:
    """The model learned from candidates of both legs: a search with one leg (while the vectors are built, or
    `retriever: bm25` / `dense`) keeps the rules' order and scores even at a learned share of 1, where with
    both legs the order is the model's."""
    query = "wait a little longer after each failed login attempt"
    for legs in ((BM25,), (DENSE,)):
        one_leg = fusion_answer(indexed, query, legs, ranker="blend", learned_share=1.0)
        assert one_leg == fusion_answer(indexed, query, legs, ranker="rules")
    learned = [nid for nid, _ in fusion_answer(indexed, query, ranker="learned")]
    assert [nid for nid, _ in fusion_answer(indexed, query, ranker="blend", learned_share=1.0)] == learned


def test_ranker_the_blend_weighs_a_definition_as_any_query(indexed: Path) -> None:
    """No kind of query has its own share: one name asked for its definition takes the learned order at a
    share of 1, as a question does (the test above), and keeps the rules' scores, in that order."""
    for query in ("invoice_total", "where is hash_password defined"):
        assert SearchRequest(query).kind is QueryKind.DEFINITION
        rules = fusion_answer(indexed, query, ranker="rules")
        learned = [nid for nid, _ in fusion_answer(indexed, query, ranker="learned")]
        assert learned != [nid for nid, _ in rules], "a query the two order differently"
        blended = fusion_answer(indexed, query, ranker="blend", learned_share=1.0)
        assert [nid for nid, _ in blended] == learned
        assert [score for _, score in blended] == [score for _, score in rules]


@pytest.mark.parametrize("ranker", ["blend", "learned", "rules"])
def test_ranker_async_retrieve_answers_as_retrieve(indexed: Path, ranker: str) -> None:
    """Core's async path fuses the legs with its own unweighted rank fusion; ours must give the same answer."""
    with CodeIndex.open(indexed, settings=Settings(retrieval={"ranker": ranker}), create=False) as index:
        fusion = index.engine.graph.fusion
        query = "sum the line items and add sales tax"
        sync = [(n.node.node_id, round(n.score, 9)) for n in fusion.retrieve(query)]
        asyncs = [(n.node.node_id, round(n.score, 9)) for n in asyncio.run(fusion.aretrieve(query))]
    assert sync and sync == asyncs
