"""The background owner a `coderag search` starts: `coderag serve --idle-exit N`, detached, so that the next
searches are answered in milliseconds instead of paying ~6 s of imports each; it exits by itself after N
seconds without a request (`service.idle_exit_s`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

NO_DAEMON_ENV = "CODERAG_NO_DAEMON"  # set to 1: every search opens the index itself (as --no-daemon)
SPAWN_LOCK_NAME = "spawn.lock"
START_TIMEOUT_S = 300.0  # an owner that is still alive after this long without answering is not waited for
POLL_S = 0.1


def daemon_wanted(no_daemon_flag: bool) -> bool:
    """Whether a search may start a background owner: not with --no-daemon or CODERAG_NO_DAEMON=1."""
    return not no_daemon_flag and os.environ.get(NO_DAEMON_ENV, "").strip().lower() in ("", "0", "false", "no")


def serve_command(root: Path, idle_exit_s: float, wait: float, config: Optional[Path] = None) -> list[str]:
    """The command line of a background owner of `root`: this environment's console script when it has one."""
    script = Path(sys.executable).with_name("coderag")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "coderag.cli"]
    cmd = head + ["serve", "--root", str(root), "--idle-exit", f"{idle_exit_s:g}", "--wait", f"{wait:g}", "--background"]
    return cmd + (["--config", str(Path(config).resolve())] if config else [])


def spawn_owner(root: Path, idle_exit_s: float, wait: float, config: Optional[Path] = None) -> subprocess.Popen:
    """Start `coderag serve` detached: its own session (a Ctrl-C or a closed terminal of this command does
    not reach it), no terminal on its stdio (it logs to <index>/coderag.log)."""
    return subprocess.Popen(serve_command(root, idle_exit_s, wait, config), cwd=str(root), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True)


def _index_held(index_dir: Path) -> bool:
    """Whether another process holds the writer lock (a `coderag index` at work, a search that opened the
    index itself): then no owner is started, the search waits for that process as it always has."""
    from coderag.base.paths import LOCK_NAME

    try:
        fd = os.open(index_dir / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock, if it was taken


def owner_for_search(root: Path, idle_exit_s: float, wait: float, config: Optional[Path] = None,
                     say: Optional[Callable[[str], None]] = None):
    """A client of the owner of `root`, starting a background one when nobody serves the index; None when
    none could be reached (the index is held by a process that does not serve, or the owner did not
    start): the caller then opens the index itself, as with --no-daemon."""
    from coderag.client import owner_client
    from coderag.base.paths import index_dir

    client = owner_client(root)
    if client is not None or _index_held(index_dir(root)):
        return client
    # One search starts the owner; searches that start meanwhile wait for the same one.
    fd = os.open(index_dir(root) / SPAWN_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            spawner = True
        except BlockingIOError:
            spawner = False
        proc = None
        if spawner:
            client = owner_client(root)  # one started while this process took the lock
            if client is not None:
                return client
            proc = spawn_owner(root, idle_exit_s, wait, config)
            if say is not None:
                say(f"started a background owner of {root} (pid {proc.pid}; it exits after "
                    f"{idle_exit_s:g} s without a request; --no-daemon or {NO_DAEMON_ENV}=1 to not start one)")
        return await_owner(root, proc, fd)
    finally:
        os.close(fd)


def await_owner(root: Path, proc: Optional[subprocess.Popen], spawn_fd: int,
                timeout: float = START_TIMEOUT_S):
    """The owner's client once it answers. None when the process we started exits first, or (when another
    search started it) when that search is done waiting and still nobody answers, or after `timeout`."""
    from coderag.client import owner_client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client = owner_client(root)
        if client is not None:
            return client
        if proc is not None and proc.poll() is not None:
            return None
        if proc is None:  # the spawning search holds the lock until the owner answers or fails
            try:
                fcntl.flock(spawn_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return owner_client(root)
            except BlockingIOError:
                pass
        time.sleep(POLL_S)
    return None


def owner_info(root: Path) -> Optional[dict]:
    """What the process serving the index of `root` wrote in owner.json (its pid, socket, start, code digest),
    if it is alive; read without a request to it: asking would count as use and put off its idle exit."""
    from coderag.base.handover import owner_record
    from coderag.base.paths import index_dir

    info = owner_record(index_dir(root))
    if info is None:
        return None
    try:
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info


def owner_pid(root: Path) -> Optional[int]:
    """The pid of the process serving the index of `root`, alive (`owner_info`), or None."""
    info = owner_info(root)
    return int(info["pid"]) if info is not None else None


def idle_for(service) -> float:
    """Seconds the owner has been idle: no request on its socket (coderag/socket_server.py notes each) and
    no indexing under way; 0 while either is going on."""
    activity = getattr(service, "activity", None)
    if activity is None or service.progress.get("phase") not in ("idle", "failed"):
        return 0.0
    return activity.idle_s()


IDLE, MOVED = "idle", "moved"  # why an owner's main loop ends, besides being asked to stop


def wait_until_idle(service, idle_exit_s: float, stop: threading.Event) -> Optional[str]:
    """Block until `stop` is set (None), until the owner has been idle for idle_exit_s where that is > 0 (IDLE),
    or until its repository or index folder is no longer where it opened them (MOVED: `IndexService.moved`;
    the index in its new place is then free for a new owner)."""
    poll = min(1.0, max(0.05, idle_exit_s / 4)) if idle_exit_s > 0 else 1.0
    while not stop.wait(poll):
        if idle_exit_s > 0 and idle_for(service) >= idle_exit_s:
            return IDLE
        if service.moved():
            return MOVED
    return None
