"""One index, one configuration: every update path refuses to mix chunkings or models, and says how to rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderag.config import Settings
from coderag.errors import ConfigError


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


def test_fingerprint_a_running_owner_refuses_a_changed_chunking(built: Path) -> None:
    from coderag.service import IndexService

    (built / "src/billing/invoice.py").write_text("def invoice_total(items):\n    return 0\n", encoding="utf-8")
    svc = IndexService(built, settings=_other_chunking(), watch=False, background=False, serve=False).start()
    try:
        with pytest.raises(ConfigError, match=r'coderag index --rebuild'):
            svc.dispatch("refresh", {})
        res = svc.dispatch("search", {"query": "invoice total"})  # still answers, from what is indexed
        assert res["results"] and "refreshed" not in res["freshness"]
    finally:
        svc.stop()


def test_fingerprint_refresh_refuses_even_when_nothing_changed(built: Path) -> None:
    """`coderag index` used to answer "16 unchanged" under a changed setting: the change was silently ignored."""
    from coderag import CodeIndex

    with CodeIndex.open(built, settings=_other_chunking(), create=False) as idx:
        assert not idx.settings_match()
        with pytest.raises(ConfigError, match=r'coderag index --rebuild'):
            idx.refresh(paths=["README.md"])
    with CodeIndex.open(built, settings=Settings(), create=False) as idx:
        assert idx.settings_match()
        idx.refresh()
