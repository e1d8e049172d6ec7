"""CLI commands never fail because another coderag process holds the index: they wait (bounded, with one line
on stderr) or go through the owner, even one that is still starting up. Separate processes where the race
needs them (the real `coderag` console script)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.cli import main
from coderag.base.lock import WriterLock
from coderag.base.paths import LOCK_NAME, ensure_index_dir
from conftest import CODERAG, TINY_FILES, server_env, write_files

TIMEOUT_S = 180


@pytest.fixture(scope="module")
def indexed_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One index for the module: the tests race for it, and none changes a file of the repository."""
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path_factory.mktemp("races") / "repo", TINY_FILES)
    index_repository(root)
    return root


def _search_cmd(root: Path, query: str = "sum the line items and add sales tax") -> list[str]:
    return [CODERAG, "search", query, "--root", str(root), "--format", "json", "--max-tokens", "600"]


def _ok(proc: subprocess.CompletedProcess | subprocess.Popen, out: bytes, err: bytes) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {out.decode()[-1500:]}\nstderr: {err.decode()[-3000:]}"
    assert b"src/billing/invoice.py" in out, out.decode()[-1500:]


def test_index_waits_for_the_lock_with_one_line_then_times_out_naming_the_holder(indexed_repo: Path) -> None:
    runner = CliRunner()
    lock = WriterLock(ensure_index_dir(indexed_repo) / LOCK_NAME).acquire()  # another process, as far as flock goes
    try:
        res = runner.invoke(main, ["index", str(indexed_repo), "--wait", "0.5"])
        assert res.exit_code == 1, res.output
        assert f"pid {os.getpid()}" in res.stderr and "--wait SECONDS" in res.stderr, res.stderr
        assert "waited 0 s" in res.stderr or "waited 1 s" in res.stderr, res.stderr

        threading.Timer(1.5, lock.release).start()
        t0 = time.monotonic()
        res = runner.invoke(main, ["index", str(indexed_repo), "--wait", "30"])
        assert res.exit_code == 0, res.output
        assert time.monotonic() - t0 >= 1.4
        waiting = [line for line in res.stderr.splitlines() if line.startswith("waiting for")]
        assert len(waiting) == 1 and f"pid {os.getpid()}" in waiting[0], res.stderr
        assert "5 unchanged" in res.stdout
    finally:
        lock.release()


def test_two_concurrent_cli_searches_both_succeed(indexed_repo: Path) -> None:
    """No owner: the second waits for the first to release the index, instead of failing on the lock."""
    procs = [subprocess.Popen(_search_cmd(indexed_repo), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=server_env(), cwd=str(indexed_repo)) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT_S)
        _ok(p, out, err)


@pytest.mark.parametrize("delay", [0.0, 1.5])
def test_search_and_index_right_after_serve_go_through_the_owner(indexed_repo: Path, delay: float) -> None:
    """The owner takes the lock, opens its socket, then opens the index: a command that starts meanwhile
    finds it (or waits for it), whenever it starts. A command that takes the lock before the owner (no delay,
    a loaded machine) works on its own, and the owner, retrying every 0.2 s, takes the index after it."""
    serve = subprocess.Popen([CODERAG, "serve", "--root", str(indexed_repo)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=server_env(), cwd=str(indexed_repo))
    try:
        time.sleep(delay)
        search = subprocess.Popen(_search_cmd(indexed_repo), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=server_env(), cwd=str(indexed_repo))
        index = subprocess.run([CODERAG, "index", str(indexed_repo)], capture_output=True, env=server_env(),
                               timeout=TIMEOUT_S)
        out, err = search.communicate(timeout=TIMEOUT_S)
        _ok(search, out, err)
        assert index.returncode == 0, index.stderr.decode()[-3000:]
        assert b"Indexed " in index.stdout
        assert serve.poll() is None, serve.stderr.read().decode()[-3000:]
        owner_file = indexed_repo / ".coderag" / "owner.json"
        deadline = time.monotonic() + 30
        while not owner_file.exists() and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the owner may still be retrying for the lock the commands held
        owner = owner_file.read_text()
        assert f'"pid": {serve.pid}' in owner  # the serve process owns it
        index_dir = indexed_repo / ".coderag"
        assert {"coderag.log", "owner.json", "owner.sock"} <= {p.name for p in index_dir.iterdir()}
        loose = [str(p) for p in [index_dir, *index_dir.rglob("*")] if p.lstat().st_mode & 0o077]
        assert loose == [], f"open to other users: {loose}"
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
