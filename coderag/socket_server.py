"""The owner's Unix socket: line-delimited JSON requests in, one JSON line out each, one thread per client."""

from __future__ import annotations

import json
import os
import socketserver
from pathlib import Path

SOCKET_NAME = "owner.sock"
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


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        service = self.server.service  # type: ignore[attr-defined]
        for line in self.rfile:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                result = service.dispatch(req.get("method", ""), req.get("params") or {})
                resp = {"id": req.get("id"), "result": result}
            except Exception as exc:  # every failure goes back to the client as an error it can show
                from coderag.agent_text import validation_message

                message = validation_message(exc) if type(exc).__name__ == "ValidationError" else str(exc)
                resp = {"id": None, "error": {"type": type(exc).__name__, "message": message}}
            # "replace": a lone surrogate in some text must not kill the answer (and the client's connection).
            self.wfile.write((json.dumps(resp, ensure_ascii=False) + "\n").encode("utf-8", "replace"))
            self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # many clients starting at once (several sessions, a script of searches)




def bind(path: Path, service) -> _Server:
    """Listen on `path` (0600: other users cannot connect) for `service.dispatch`; a stale socket file of a
    dead owner is replaced (the caller holds the index's lock, so nobody else serves it)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    old_umask = os.umask(0o177)
    try:
        server = _Server(str(path), _Handler)
    finally:
        os.umask(old_umask)
    server.service = service  # type: ignore[attr-defined]
    return server
