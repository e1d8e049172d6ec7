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
    assert not start_over_if_stale(index_dir(root), Settings())  # built with these settings: kept as it is
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
