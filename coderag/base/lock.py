"""The writer lock of an index: one indexer at a time; a dead holder's lock is released by the OS."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from coderag.base.errors import IndexLockedError

# How long a command waits for another coderag process that holds an index (`--wait`).
DEFAULT_WAIT_S = 60.0


class WriterLock:
    """flock on <index>/writer.lock; the file names the holder (pid and command) for the error message."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def holder(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8").strip() or "unknown process"
        except OSError:
            return "unknown process"

    def acquire(self, wait: float = 0.0) -> "WriterLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise IndexLockedError(
                        f"Another coderag process ({self.holder()}) is writing the index in {self.path.parent}. "
                        "Wait for it to finish (or pass --wait SECONDS), or stop it.") from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {' '.join(os.path.basename(a) for a in sys.argv[:3])}".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
