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
    """flock on <index>/writer.lock; the file names the holder (pid and command), and what it is doing when it
    says (`say`), for the messages of the processes that wait for it and for `coderag status`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._named = ""  # "pid N: command", written when taken
        self._written = 0  # bytes of the line now in the file

    def holder(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8").strip() or "unknown process"
        except OSError:
            return "unknown process"

    def held_by(self) -> str | None:
        """The holder's line while another live process holds the lock, else None. Read, never taken: a
        process waiting for the lock with no time to spare would fail for a look. The line is cleared at
        release, and a holder killed before that leaves the pid of a process that is gone."""
        line = self.holder()
        try:
            pid = int(line.split(":", 1)[0].removeprefix("pid "))
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            return None
        except PermissionError:  # alive, another user's
            pass
        return None if pid == os.getpid() else line

    def in_place(self) -> bool:
        """Whether the lock file this process holds is still the one at its path: False once its index folder,
        or the repository above it, was moved, renamed or deleted. It compares the open file with the path's,
        whose identity holds even where a file system makes up inode numbers (an open file stays known)."""
        if self._fd is None:
            return True
        try:
            held, there = os.fstat(self._fd), os.stat(self.path)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)

    def say(self, doing: str) -> None:
        """Add what the holder is doing to its line ("indexing: 120 of 347 files, about 3 min left"). One
        write over the old line, padded with blanks that a reader strips: a reader never finds it empty."""
        if self._fd is None:
            return
        line = f"{self._named} ({doing})" if doing else self._named
        data = line.encode().ljust(self._written)
        os.pwrite(self._fd, data, 0)
        self._written = len(data)

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
        self._named = f"pid {os.getpid()}: {' '.join(os.path.basename(a) for a in sys.argv[:3])}"
        self._written = os.write(fd, self._named.encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # nobody holds it: `held_by` reads no holder
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
