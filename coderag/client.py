"""Thin client of an index owner, and `connect()`: become the owner, or talk to the one there is."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from coderag.base.code_id import code_id
from coderag.base.errors import CodeRagError, IndexLockedError
from coderag.base.handover import ask_owner_to_hand_over, owner_record
from coderag.base.lock import DEFAULT_WAIT_S
from coderag.base.paths import index_dir

log = logging.getLogger("coderag.client")
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 600.0
RETRY_S = 0.2
T = TypeVar("T")


class OwnerGone(CodeRagError):
    """The owner process went away (or none is serving)."""


class RemoteError(CodeRagError):
    """The owner answered with an error; `type` names the exception it raised."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_


def owner_socket(root: Path) -> Optional[str]:
    """The socket of the owner of `root`'s index (base/handover.py `owner_record`)."""
    info = owner_record(index_dir(root))
    return info.get("socket") if info is not None else None


def owner_client(root: Path, replace_other_code: bool = True) -> Optional["IndexClient"]:
    """A client of the process that serves the index of `root` (it answered a ping), or None when nobody does.
    An owner that runs other coderag code is replaced or named (`_owner_of_other_code`) unless
    `replace_other_code` is False (`coderag status`, which only reports).

    The one place owners are found: `connect()` (the MCP server) and every CLI command use it."""
    sock = owner_socket(root)
    if not sock or not os.path.exists(sock):
        return None
    try:
        client = IndexClient(root, sock)
    except OwnerGone:
        return None
    try:
        answer = client.call("ping")
    except (OwnerGone, RemoteError, OSError, ValueError):
        client.close()
        return None
    if not replace_other_code or (isinstance(answer, dict) and answer.get("code") == code_id()):
        return client
    return _owner_of_other_code(client, root, answer)


_told: set[Path] = set()  # roots whose owner this process has said runs other code


def _owner_of_other_code(client: "IndexClient", root: Path, ping: Any) -> Optional["IndexClient"]:
    """The owner runs other coderag code than this process (started before an upgrade, or before a checkout
    of an editable install; an owner older than the check says no code at all). A background owner, which
    only exists to keep searches warm, is asked to hand the index over and stop: None, so the caller opens
    the index or starts an owner with this code. One that keeps the index while it runs (a Claude Code
    session's `coderag mcp`, a `coderag serve`) goes on answering, and the command says so once."""
    try:
        ask_owner_to_hand_over(index_dir(root))  # as a notebook's CodeIndex.open asks (base/handover.py)
    except IndexLockedError:
        pid = ping.get("pid", "?") if isinstance(ping, dict) else "?"
        if root not in _told:
            _told.add(root)
            log.warning("coderag: the owner of %s (pid %s) runs other coderag code than this command (it started "
                        "before coderag was upgraded or checked out); it answers with that code until it is "
                        "restarted.", root, pid)
        return client
    client.close()
    return None


def lock_holder(root: Path) -> str:
    """Who holds the writer lock of `root`'s index, as its lock file names it (pid and command)."""
    from coderag.base.lock import WriterLock
    from coderag.base.paths import LOCK_NAME

    return WriterLock(index_dir(root) / LOCK_NAME).holder()


def owner_or_open(root: Path, open_here: Callable[[], T], wait: Optional[float] = None,
                  say: Optional[Callable[[str], None]] = None, what: str = "open the index") -> "IndexClient | T":
    """A client of the owner of `root`, or what `open_here()` returns (it takes the writer lock here).

    While another process holds the lock without serving (a `coderag index` or `coderag search` at work,
    or an owner still starting up), both are tried again every 0.2 s for up to `wait` seconds (default
    DEFAULT_WAIT_S): an owner that opens its socket meanwhile is used at once. `say` gets one line when
    the wait begins. Past the bound: IndexLockedError naming the holder and what to do."""
    wait = DEFAULT_WAIT_S if wait is None else wait
    root = Path(root).resolve()
    deadline = time.monotonic() + max(0.0, wait)
    said = False
    while True:
        client = owner_client(root)
        if client is not None:
            return client
        try:
            return open_here()
        except IndexLockedError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise IndexLockedError(
                f"Could not {what}: another coderag process ({lock_holder(root)}) holds the index of {root} "
                f"and does not answer on its socket{f' (waited {wait:.0f} s)' if wait else ''}. Let it finish and "
                "try again, pass --wait SECONDS to wait longer, or stop that process.") from last
        if not said and say is not None:
            say(f"waiting for {lock_holder(root)} to release the index of {root} "
                f"(up to {wait:.0f} s, --wait to change)...")
            said = True
        time.sleep(RETRY_S)


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


def connect(root: Path, settings=None, wait: Optional[float] = None, become_owner: bool = True,
            say: Optional[Callable[[str], None]] = None, **service_kwargs: Any):
    """An IndexService (this process becomes the owner) or an IndexClient of the current owner.

    A dead owner's lock is released by the OS and its socket refuses connections, so whoever
    comes next takes over; nothing in the index is lost.
    """
    root = Path(root).resolve()

    def become():
        if not become_owner:
            raise IndexLockedError(f"No owner is serving {root}.")
        from coderag.service import IndexService

        return IndexService(root, settings, **service_kwargs).start()

    return owner_or_open(root, become, wait, say or log.warning, what="reach or become the owner of the index")


class IndexHandle:
    """What `coderag mcp` talks to: the local owner or a client, re-connected (taking over) when the owner dies.

    `wait`: how long connecting waits for another process that holds the index (`coderag mcp --wait`);
    it connects later, on the MCP server's own thread, so the wait travels with the handle."""

    def __init__(self, root: Path, settings=None, wait: Optional[float] = None, **service_kwargs: Any) -> None:
        self.root = Path(root).resolve()
        self.settings = settings
        self.wait = wait
        self._kwargs = service_kwargs
        self._target = None
        self._lock = threading.Lock()

    def target(self):
        with self._lock:
            if self._target is None:
                self._target = connect(self.root, self.settings, wait=self.wait, **self._kwargs)
            return self._target

    @property
    def is_owner(self) -> bool:
        from coderag.service import IndexService

        return isinstance(self._target, IndexService)

    def call(self, method: str, **params: Any) -> Any:
        for attempt in range(3):
            target = self._unless_moved_back(self.target())
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

    def _unless_moved_back(self, target):
        """The owner here let go of the index when the repository or its index folder moved or was deleted
        (service.py `let_go`); with a repository in this place again (moved back, cloned again, its `.coderag`
        deleted to start afresh), the handle opens its index, or builds one, rather than answer "moved" for
        the rest of the MCP session."""
        if not getattr(target, "let_go", False) or not self.root.is_dir():
            return target
        log.warning("%s is in its place again: opening its index", self.root)
        with self._lock:
            if self._target is target:
                self._target = None  # it stopped when it let go
        return self.target()

    def close(self) -> None:
        with self._lock:
            if self._target is not None:
                (self._target.stop if hasattr(self._target, "stop") else self._target.close)()
                self._target = None
