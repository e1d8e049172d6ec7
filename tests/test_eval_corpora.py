"""Corpora of the eval come from a package registry: `coderag eval` says so, with the size, before it
downloads one (issue 26). A real HTTP server on localhost stands for the registry."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from pathlib import Path

import pytest

from coderag.eval import corpora


@pytest.fixture
def registry(tmp_path: Path):
    """A PyPI simple index (JSON) serving one sdist, at http://127.0.0.1:PORT/simple."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"def f():\n    return 1\n" * 2000
        info = tarfile.TarInfo("tinypkg-1.0/tinypkg.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/tinypkg/":
                url = f"http://127.0.0.1:{self.server.server_port}/files/tinypkg-1.0.tar.gz"
                body = json.dumps({"files": [{"filename": "tinypkg-1.0.tar.gz", "url": url}]}).encode()
            elif self.path == "/files/tinypkg-1.0.tar.gz":
                body = archive
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple", archive
    finally:
        server.shutdown()
        server.server_close()


def test_download_says_what_from_where_and_how_big_before_it_starts(registry, tmp_path: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url, archive = registry
    monkeypatch.setattr(corpora, "PYPI_SIMPLE_URL", url)
    corpus = corpora.Corpus(name="tiny", registry="pypi", package="tinypkg", version="1.0",
                            sha256=hashlib.sha256(archive).hexdigest(), archive="tinypkg-1.0.tar.gz", subdir="",
                            languages=("python",))
    dest = tmp_path / "cache" / "tinypkg-1.0.tar.gz"
    corpora.download(corpus, dest)
    assert dest.read_bytes() == archive
    said = capsys.readouterr().err
    size = f"{len(archive) / 1e3:.0f} KB"
    assert f"downloading corpus 'tiny': pypi tinypkg==1.0 ({size}) into {dest.parent}" in said, said
