"""A process that holds an index's writer lock says what it is doing in the lock's holder line, and the
processes beside it show that: `coderag status` ("writer: ... indexing: 3 of 7 files, about 2 min left") and a
search that waits for the index. The real console script, a real holder in another process, real indexing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import CODERAG, server_env
from coderag.base.lock import WriterLock
from coderag.base.paths import LOCK_NAME, index_dir

DOING = "indexing: 3 of 7 files, about 2 min left"


def _status(root: Path) -> str:
    proc = subprocess.run([CODERAG, "status", str(root)], capture_output=True, text=True, timeout=120,
                          env=server_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_status_and_a_waiting_search_say_what_the_holder_is_doing(tiny_repo: Path) -> None:
    from coderag import index_repository

    index_repository(tiny_repo)
    (tiny_repo / "src" / "new.py").write_text("def added():\n    return 1\n")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from coderag.base.lock import WriterLock
        lock = WriterLock({str(index_dir(tiny_repo) / LOCK_NAME)!r}).acquire()
        lock.say({DOING!r})
        print("held", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=server_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        status = _status(tiny_repo)
        assert f"writer:      pid {holder.pid}: " in status and f"({DOING})" in status, status
        assert "1 new or modified, 0 deleted (the writer above is at work)" in status, status
        assert "the next search waits for the writer below" in status, status
        search = subprocess.run([CODERAG, "search", "added", "--root", str(tiny_repo), "--wait", "0"],
                                capture_output=True, text=True, timeout=120,
                                env={**server_env(), "CODERAG_NO_DAEMON": "1"})
        assert search.returncode != 0 and DOING in search.stderr, search.stderr
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # killed while it holds the lock: its line stays, its pid is gone
        holder.wait(timeout=60)
    assert WriterLock(index_dir(tiny_repo) / LOCK_NAME).held_by() is None
    status = _status(tiny_repo)
    assert "writer:" not in status and '(run "coderag index ' in status, status


def test_an_index_run_says_its_phase_while_it_holds_the_lock_and_nothing_after(tiny_repo: Path) -> None:
    from coderag import index_repository

    lock_file = WriterLock(index_dir(tiny_repo) / LOCK_NAME)
    seen: list[str] = []
    index_repository(tiny_repo, progress=lambda phase, done, total: seen.append(lock_file.holder()))
    assert any(line.startswith(f"pid {os.getpid()}: ") and "(indexing: " in line and " of 5 files" in line
               for line in seen), seen
    assert lock_file.holder() == "unknown process" and lock_file.held_by() is None  # released: the line is cleared
