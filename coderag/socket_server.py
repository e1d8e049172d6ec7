"""The owner's Unix socket: line-delimited JSON requests in, one JSON line out each, one thread per client."""

from __future__ import annotations

import json
import os
import socketserver
import logging
import threading
import time
from pathlib import Path

from coderag.base.errors import CodeRagError, error_text
from coderag.base.paths import SOCKET_NAME  # noqa: F401 (public here too)

log = logging.getLogger("coderag.service")

MAX_SOCKET_PATH = 100


def socket_path_for(index_dir: Path) -> Path:
    """<index>/owner.sock, or a private runtime folder when that path is too long for AF_UNIX."""
    p = index_dir / SOCKET_NAME
    if len(str(p)) <= MAX_SOCKET_PATH:
        return p
    import hashlib

    base = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/coderag-{os.getuid()}")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base / (hashlib.sha1(str(index_dir).encode()).hexdigest()[:16] + ".sock")


class Activity:
    """When the socket last got a request, and how many it is answering now: an owner started with
    `--idle-exit` (coderag/daemon.py) stops once it has been idle long enough."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._last = time.monotonic()

    def __enter__(self) -> "Activity":
        with self._lock:
            self._busy += 1
            self._last = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._busy -= 1
            self._last = time.monotonic()

    def idle_s(self) -> float:
        """Seconds since the last request was answered; 0 while one is being answered (a long refresh)."""
        with self._lock:
            return 0.0 if self._busy else time.monotonic() - self._last


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        service = self.server.service  # type: ignore[attr-defined]
        for line in self.rfile:
            if not line.strip():
                continue
            with self.server.activity:  # type: ignore[attr-defined]
                self._answer(service, line)

    def _answer(self, service, line: bytes) -> None:
        req_id = None  # echoed whenever the line parsed far enough to name one
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError('A request is one JSON object per line, e.g. {"id": 1, "method": "ping", '
                                 f'"params": {{}}}}, not {type(req).__name__}.')
            req_id = req.get("id")
            params = req.get("params") or {}
            if not isinstance(params, dict):
                raise ValueError(f"params must be a JSON object of named arguments, not {type(params).__name__}.")
            resp = {"id": req_id, "result": service.dispatch(req.get("method", ""), params)}
        except Exception as exc:  # every failure goes back to the client as an error it can show
            if not isinstance(exc, (CodeRagError, ValueError, TypeError)):
                log.exception("request failed: %.200r", line)  # not the caller's mistake: keep the traceback
            resp = {"id": req_id, "error": {"type": type(exc).__name__, "message": error_text(exc)}}
        # "replace": a lone surrogate in some text must not kill the answer (and the client's connection).
        self.wfile.write((json.dumps(resp, ensure_ascii=False) + "\n").encode("utf-8", "replace"))
        self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # many clients starting at once (several sessions, a script of searches)


def bind(path: Path, service) -> _Server:
    """Listen on `path` (0600: other users cannot connect) for `service.dispatch`; a stale socket file of a
    dead owner is replaced (the caller holds the index's lock, so nobody else serves it). The server's
    Activity is also `service.activity`: the one place that sees every request."""
    if path.exists() or path.is_symlink():
        path.unlink()
    old_umask = os.umask(0o177)
    try:
        server = _Server(str(path), _Handler)
    finally:
        os.umask(old_umask)
    server.service = service  # type: ignore[attr-defined]
    server.activity = service.activity = Activity()  # type: ignore[attr-defined]
    return server
