"""The server code path (QdrantVectorStore over QdrantClient), selected by configuration alone.

`url: ":memory:"` runs qdrant-client's in-process emulation of the server API through the same code;
set CODERAG_TEST_QDRANT_URL to run the same tests against a real Qdrant server.
"""

import os

import pytest

from coderag.base.config import Settings, StoreSettings
from coderag.base.errors import ConfigError

SERVER_URL = os.environ.get("CODERAG_TEST_QDRANT_URL")
requires_qdrant_server = pytest.mark.skipif(
    not SERVER_URL, reason="set CODERAG_TEST_QDRANT_URL=http://host:6333 to run against a real Qdrant server")

BACKENDS = [pytest.param(":memory:", id="client-emulation"),
            pytest.param(SERVER_URL, id="qdrant-server", marks=[requires_qdrant_server])]


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect")
@pytest.mark.parametrize("url", BACKENDS)
def test_server_mode_index_search_delete(tiny_repo, url):
    from coderag import CodeIndex

    settings = Settings(store=StoreSettings(mode="server", url=url, collection_prefix="coderagtest"))
    with CodeIndex.open(tiny_repo, settings=settings) as idx:
        idx.vector_store.clear()
        summary = idx.refresh()
        assert summary.indexed == 5
        res = idx.search("wait longer after each failed login attempt", max_tokens=1500, file_pattern="src/**/*.py")
        assert res and res[0].file_path == "src/auth/service.py"
        lines = (tiny_repo / res[0].file_path).read_text().split("\n")
        assert res[0].text == "\n".join(lines[res[0].start_line - 1:res[0].end_line])
        bm25 = idx.search("fetchUserRecord", retriever="bm25", auto_merge=False)
        assert bm25[0].file_path == "web/api.ts"
        (tiny_repo / "web/api.ts").unlink()
        assert idx.refresh().removed == 1
        left = {n.metadata["file_path"] for n in idx.vector_store.get_nodes()}
        assert "web/api.ts" not in left and "src/auth/service.py" in left


def test_server_mode_without_url_is_a_clear_error(tiny_repo):
    from coderag.pipelines.stores import open_vector_store

    with pytest.raises(ConfigError, match="store.url"):
        open_vector_store(Settings(store=StoreSettings(mode="server")), tiny_repo)


@requires_qdrant_server
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect")
def test_server_mode_rebuild_starts_from_an_empty_collection(tiny_repo):
    """A rebuild cleared the index folder but not the server's collection: the points of a file deleted since
    stayed in it. (Needs a real server: the emulation's store lives as long as one CodeIndex.)"""
    from coderag import CodeIndex, index_repository

    settings = Settings(store=StoreSettings(mode="server", url=SERVER_URL, collection_prefix="coderagtest"))
    index_repository(tiny_repo, settings=settings, rebuild=True)
    (tiny_repo / "web/api.ts").unlink()
    index_repository(tiny_repo, settings=settings, rebuild=True)
    with CodeIndex.open(tiny_repo, settings=settings) as idx:
        left = {n.metadata["file_path"] for n in idx.vector_store.get_nodes()}
    assert "web/api.ts" not in left and "src/auth/service.py" in left


def test_server_mode_with_no_server_there_is_a_clear_error(tiny_repo):
    """A traceback of httpx and qdrant_client before (`coderag index`, every search)."""
    import socket
    import threading
    import warnings

    from coderag.pipelines.stores import open_vector_store

    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(store=StoreSettings(mode="server", url=f"http://127.0.0.1:{port}"))
    with warnings.catch_warnings():  # qdrant-client's version check warns from a thread of its own: waited for here
        warnings.filterwarnings("ignore", message="Failed to obtain server version")
        said = rf"Qdrant server at http://127.0.0.1:{port} \(store.url\) did not answer"
        with pytest.raises(ConfigError, match=said):
            open_vector_store(settings, tiny_repo)
        for t in threading.enumerate():
            if "compatibility" in t.name:
                t.join(30)
