"""The query-embedding helper process: same vectors as in-process, falls back when busy or dead, never
outlives its parent, and a resident CodeIndex answers the same with or without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import TINY_FILES, write_files
from coderag.base.config import Settings

QUERIES = ["where is the retry after a failed login", "getUserById", "round the sales tax to whole cents"]


@pytest.fixture(scope="module")
def model():
    """The int8 ONNX query model of the bundled weights (load_query_model exports it into the cache if missing)."""
    from coderag.nodes.onnx_embedding import load_query_model

    m = load_query_model(Settings().model_dir(), 256, "int8")
    assert m is not None
    yield m
    m.stop_process()


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a child of this process lingers as a zombie until reaped
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_helper_embeds_exactly_like_this_process(model) -> None:
    assert model.start_process() and model.helper_pid is not None
    model.clear_cache()
    for q in QUERIES:
        pending = model.start_query_embedding(q)
        assert pending.where == "helper"
        vec = np.array(pending.result())
        assert pending.compute_ms > 0
        assert np.abs(vec - np.array(model._embed([q])[0])).max() < 1e-6  # same weights, same runtime
        again = model.start_query_embedding(q)  # asked again: the recent-query cache answers
        assert again.where == "cache" and again.result() == pending.result()
    pid = model.helper_pid
    model.stop_process()
    assert model.helper_pid is None and _gone(pid)


def test_helper_busy_or_dead_means_embedding_here(model) -> None:
    model.clear_cache()
    assert model.start_process()
    first = model.start_query_embedding(QUERIES[0])
    second = model.start_query_embedding(QUERIES[1])  # the helper serves one request at a time
    assert (first.where, second.where) == ("helper", "here")
    assert np.allclose(second.result(), model._embed([QUERIES[1]])[0], atol=1e-6)
    assert np.allclose(first.result(), model._embed([QUERIES[0]])[0], atol=1e-6)

    # Killed after a query was sent: the answer never comes, the query is embedded here, the helper let go.
    model.clear_cache()
    os.kill(model.helper_pid, signal.SIGSTOP)  # it cannot answer before it dies (else a fast answer races the kill)
    pending = model.start_query_embedding(QUERIES[2])
    assert pending.where == "helper"
    os.kill(model.helper_pid, signal.SIGKILL)
    assert np.allclose(pending.result(), model._embed([QUERIES[2]])[0], atol=1e-6)
    assert pending.where == "here" and model.helper_pid is None
    after = model.start_query_embedding("parse an HTTP date header")  # dead: nothing is sent
    assert after.where == "here" and len(after.result()) == 384
    assert model.start_process() and model.helper_pid is not None  # a resident process can start another


def test_helper_exits_when_its_parent_dies(model, tmp_path) -> None:
    script = (
        "import os, sys\n"
        "from coderag.nodes.embed_process import EmbedProcess\n"
        f"h = EmbedProcess({model.model_dir!r}, {model.onnx_file!r}).start()\n"
        "print(h.pid, flush=True)\n"
        "os._exit(0)\n")  # no close(): the helper must notice the end of its input by itself
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    pid = int(out.stdout.split()[0])
    assert _gone(pid), f"helper {pid} outlived its parent"


def _indexed(tmp_path):
    from coderag import index_repository

    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    return root


def test_resident_index_answers_the_same_with_the_helper(tmp_path) -> None:
    import gc

    from coderag.pipelines.code_index import CodeIndex

    root = _indexed(tmp_path)
    before = gc.get_threshold()
    with CodeIndex.open(root) as index:
        plain = index.search("where is the retry after a failed login", max_tokens=800)
        assert index.embed_model.helper_pid is None  # a one-shot search starts no helper
        index.warm_up()
        assert gc.get_threshold() == before  # a library call leaves the process's collector alone
        pid = index.embed_model.helper_pid
        assert pid is not None
        index.embed_model.clear_cache()
        res = index.search("where is the retry after a failed login", max_tokens=800)
        assert [(r.file_path, r.start_line, r.end_line, r.score) for r in res] == \
            [(r.file_path, r.start_line, r.end_line, r.score) for r in plain]
        assert res.timings["embed_ms"] > 0 and "embed_wait_ms" in res.timings
    assert _gone(pid)  # close() stops it


def test_owner_entry_point_tunes_the_collector() -> None:
    """What an owner process does after its warm-up: what it loaded is frozen out of the cyclic GC, and young
    collections run far less often. (Put back here: the test process is not an owner.)"""
    import gc

    from coderag.owner_build import GC_YOUNG_THRESHOLD, tune_gc_for_serving

    before = gc.get_threshold()
    try:
        tune_gc_for_serving()
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD != before[0] and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_resident_index_without_the_helper_when_configured_off(tmp_path) -> None:
    from coderag.pipelines.code_index import CodeIndex

    root = _indexed(tmp_path)
    settings = Settings()
    settings.retrieval.embed_process = False
    with CodeIndex.open(root, settings=settings) as index:
        index.warm_up()
        assert index.embed_model.helper_pid is None
        assert index.search("invoice total with tax", max_tokens=500)


def test_bm25_results_are_handed_over_while_the_helper_embeds(tmp_path) -> None:
    """With a helper embedding the query, the fusion retriever hands the BM25 leg's results to
    `while_embedding` before it waits (the search engine checks their files then); without one it does not
    wait, and does not call it."""
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.search_options import SearchOptions

    root = _indexed(tmp_path)
    with CodeIndex.open(root) as index:
        q = "where is the retry after a failed login"
        for helper in (False, True):
            if helper:
                assert index.embed_model.start_process()
            index.embed_model.clear_cache()
            seen: list = []
            index.retriever.retrieve(index.engine.graph.request(SearchOptions(query=q), while_embedding=seen.append))
            bm25 = [n.node.node_id for n in index.bm25_retriever.retrieve(q)]
            assert seen == ([] if not helper else [seen[0]])
            if helper:
                assert [n.node.node_id for n in seen[0]] == bm25 and bm25


def test_helper_starts_from_a_folder_that_shadows_the_package(model, tmp_path, monkeypatch) -> None:
    """`python -m` puts the working directory first on sys.path: a `coderag` folder there must not be what
    the helper imports."""
    from coderag.nodes.embed_process import EmbedProcess

    (tmp_path / "coderag").mkdir()
    (tmp_path / "coderag" / "__init__.py").write_text("raise ImportError('the shadowing folder was imported')\n")
    monkeypatch.chdir(tmp_path)
    helper = EmbedProcess(model.model_dir, model.onnx_file).start()
    try:
        assert helper.alive and helper.submit("getUserById")
        vec, ms = helper.result()
        assert len(vec) == 384 and ms > 0
    finally:
        helper.close()
