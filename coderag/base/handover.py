"""Taking an index over from the background owner a `coderag search` started, for `CodeIndex.open`.

An embedded shard admits one process, and the Python API needs the shard in its own process: its
LlamaIndex parts (the vector store, the retrievers, the ingestion pipeline) are objects over that shard,
and no socket can hand those across. So the API does not talk to the owner: it asks the owner to go.
An owner that a search started in the background (`coderag serve --background`) only exists to make the
next searches fast, so it stops its indexing at the next committed batch, closes the index and exits;
the process that asked takes the lock as soon as it is free (well under a second when idle), and the
next `coderag search` after that process is done starts a new owner. An owner a person or an agent runs
(`coderag mcp` for a Claude Code session, `coderag serve`) refuses, and its refusal says what to do.

Only the socket and owner.json are used here (not coderag.client), so the pipelines can call it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Optional

from coderag.base.errors import IndexLockedError
from coderag.base.lock import WriterLock
from coderag.base.paths import LOCK_NAME, OWNER_FILE, SOCKET_NAME

HAND_OVER = "hand_over"  # the owner's request method (coderag/service.py)
ANSWER_TIMEOUT_S = 10.0  # the owner answers at once; it stops after answering
HANDOVER_WAIT_S = 60.0  # how long the taker waits for the lock once the owner agreed (it finishes a batch first)


def owner_record(index_dir: Path) -> Optional[dict]:
    """What the process that serves the index in `index_dir` wrote in its owner.json (pid, socket, ...), None
    where there is none. Its "socket" is the one owner.json names, or, where that is gone and the folder holds
    one, the folder's own: an index folder moved with its repository keeps its owner's socket file while
    owner.json names the old place. The owner, reached there, finds itself moved and lets go of the index
    (IndexService.dispatch), so that the caller opens it in its new place."""
    try:
        info = json.loads((Path(index_dir) / OWNER_FILE).read_text("utf-8"))
        sock = info["socket"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    here = Path(index_dir) / SOCKET_NAME
    if sock and not os.path.exists(sock) and here.exists():
        info["socket"] = str(here)
    return info


def ask_owner_to_hand_over(index_dir: Path) -> Optional[int]:
    """Ask the process that serves the index in `index_dir` to let go of it. Returns its pid when it agreed
    (it releases the lock shortly) or has let go already (its repository moved away from under it), None when
    no owner answers. Raises IndexLockedError, in the owner's own words, when it serves in the foreground and
    keeps the index."""
    info = owner_record(index_dir)
    if info is None:
        return None
    path = info["socket"]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ANSWER_TIMEOUT_S)
    try:
        sock.connect(path)
        request = {"id": 1, "method": HAND_OVER, "params": {"pid": os.getpid()}}
        sock.sendall((json.dumps(request) + "\n").encode())
        with sock.makefile("rb") as f:
            line = f.readline()
    except OSError:  # nobody listens (a dead owner's socket file): the lock is free or about to be
        return None
    finally:
        sock.close()
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    if "error" in answer:
        err = answer["error"]
        if err.get("type") == "IndexLockedError":
            raise IndexLockedError(err.get("message", "The owner of the index keeps it."))
        if err.get("type") == "IndexMissingError":  # it found its repository moved and has let go of the index
            return int(info.get("pid", 0)) or None
        pid = info.get("pid", "?")  # an owner of an older coderag: it knows no hand-over
        raise IndexLockedError(f"The index in {index_dir} is served by another coderag process (pid {pid}) that "
                               f'cannot hand it over. Stop it ("kill {pid}"), then open the index again.')
    return int(answer["result"]["pid"])


def take_writer_lock(idx: Path, wait: float) -> WriterLock:
    """The writer lock of index folder `idx`, for a process that opens the index itself (a notebook, a
    one-shot command): taken at once when free; else the background owner that holds it is asked to hand
    it over, and the lock is awaited while it finishes; else waited for up to `wait` seconds."""
    lock = WriterLock(idx / LOCK_NAME)
    try:
        return lock.acquire()
    except IndexLockedError:
        pass
    owner = ask_owner_to_hand_over(idx)  # raises, in the owner's words, when it keeps the index
    try:
        return lock.acquire(wait=max(wait, HANDOVER_WAIT_S) if owner else wait)
    except IndexLockedError as exc:
        if owner:
            raise IndexLockedError(f"The background owner of {idx.parent} (pid {owner}) agreed to hand the index "
                                   f"over but still holds it after {max(wait, HANDOVER_WAIT_S):.0f} s. "
                                   f'Try again, or stop it ("kill {owner}").') from exc
        raise IndexLockedError(f"Another coderag process ({lock.holder()}) is writing the index in {idx}. Wait for "
                               "it to finish (pass wait=SECONDS to CodeIndex.open to wait for it), or stop it.") from exc
