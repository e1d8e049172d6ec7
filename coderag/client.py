"""Thin client of an index owner, and `connect()`: become the owner, or talk to the one there is."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Optional

from coderag.errors import CodeRagError, IndexLockedError
from coderag.paths import index_dir

log = logging.getLogger("coderag.client")
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 600.0


class OwnerGone(CodeRagError):
    """The owner process went away (or none is serving)."""


class RemoteError(CodeRagError):
    """The owner answered with an error; `type` names the exception it raised."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_


def owner_socket(root: Path) -> Optional[str]:
    try:
        info = json.loads((index_dir(root) / "owner.json").read_text("utf-8"))
        return info.get("socket")
    except (OSError, ValueError):
        return None


class IndexClient:
    """Line-delimited JSON over the owner's Unix socket; one persistent connection, thread-safe."""

    def __init__(self, root: Path, sock_path: str) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            self._sock.connect(sock_path)
        except OSError as exc:
            self._sock.close()
            raise OwnerGone(f"no owner is serving {root}: {exc}") from exc
        self._sock.settimeout(CALL_TIMEOUT_S)
        self._file = self._sock.makefile("rwb")
        self._n = 0

    def call(self, method: str, **params: Any) -> Any:
        with self._lock:
            self._n += 1
            try:
                self._file.write((json.dumps({"id": self._n, "method": method, "params": params}) + "\n").encode())
                self._file.flush()
                line = self._file.readline()
            except OSError as exc:
                raise OwnerGone(f"the owner of {self.root} went away: {exc}") from exc
            if not line:
                raise OwnerGone(f"the owner of {self.root} went away")
        resp = json.loads(line)
        if "error" in resp:
            raise RemoteError(resp["error"]["type"], resp["error"]["message"])
        return resp["result"]

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass


def connect(root: Path, settings=None, wait: float = 30.0, become_owner: bool = True, **service_kwargs: Any):
    """An IndexService (this process becomes the owner) or an IndexClient of the current owner.

    A dead owner's lock is released by the OS and its socket refuses connections, so whoever
    comes next takes over; nothing in the index is lost.
    """
    deadline = time.monotonic() + wait
    root = Path(root).resolve()
    while True:
        sock = owner_socket(root)
        if sock and os.path.exists(sock):
            try:
                client = IndexClient(root, sock)
                client.call("ping")
                return client
            except (OwnerGone, RemoteError):
                pass
        if become_owner:
            from coderag.service import IndexService

            try:
                return IndexService(root, settings, **service_kwargs).start()
            except IndexLockedError:
                pass  # another process holds the index but is not serving (yet): wait for it
        if time.monotonic() >= deadline:
            raise IndexLockedError(
                f"Another process holds the index of {root} and does not answer on its socket. "
                "If it is an indexing run, wait for it to finish; otherwise stop it.")
        time.sleep(0.2)


class IndexHandle:
    """What `coderag mcp` talks to: the local owner or a client, re-connected (taking over) when the owner dies."""

    def __init__(self, root: Path, settings=None, **service_kwargs: Any) -> None:
        self.root = Path(root).resolve()
        self.settings = settings
        self._kwargs = service_kwargs
        self._target = None
        self._lock = threading.Lock()

    def target(self):
        with self._lock:
            if self._target is None:
                self._target = connect(self.root, self.settings, **self._kwargs)
            return self._target

    @property
    def is_owner(self) -> bool:
        from coderag.service import IndexService

        return isinstance(self._target, IndexService)

    def call(self, method: str, **params: Any) -> Any:
        for attempt in range(3):
            target = self.target()
            try:
                if isinstance(target, IndexClient):
                    return target.call(method, **params)
                return target.dispatch(method, params)
            except OwnerGone:
                log.warning("owner of %s went away; taking over", self.root)
                with self._lock:
                    if self._target is target:
                        target.close()
                        self._target = None
        raise OwnerGone(f"could not reach or become the owner of {self.root}")

    def close(self) -> None:
        with self._lock:
            if self._target is not None:
                (self._target.stop if hasattr(self._target, "stop") else self._target.close)()
                self._target = None
