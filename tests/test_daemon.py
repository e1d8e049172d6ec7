"""The background owner a `coderag search` starts when none is running: the next search is answered by it,
`coderag status` names it, and it exits by itself once idle for `service.idle_exit_s`."""

from __future__ import annotations

import json
import os
import signal
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.cli import main
from coderag.daemon import NO_DAEMON_ENV, owner_pid
from conftest import TINY_FILES, write_files

QUERY = "sum the line items and add sales tax"
EXIT_TIMEOUT_S = 60


def _reaped(pid: int) -> bool:
    """The owner has exited. It was started by a search run in this process, so it is our child: reap it."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped already (by subprocess's own bookkeeping)
        return True
    return done == pid


@pytest.fixture(scope="module")
def indexed_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path_factory.mktemp("daemon") / "repo", TINY_FILES)
    index_repository(root)
    return root


def test_no_owner_is_started_while_another_process_holds_the_index(
        indexed_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `coderag index` at work (here: its lock): the search waits for it as before, and starts nothing."""
    from coderag.base.lock import WriterLock
    from coderag.base.paths import LOCK_NAME

    monkeypatch.delenv(NO_DAEMON_ENV, raising=False)
    lock = WriterLock(indexed_repo / ".coderag" / LOCK_NAME).acquire()
    try:
        res = CliRunner().invoke(main, ["search", QUERY, "--root", str(indexed_repo), "--wait", "0.5"])
    finally:
        lock.release()
    assert res.exit_code == 1, res.output
    assert "waiting for pid" in res.stderr and "--wait SECONDS" in res.stderr, res.stderr
    assert "started a background owner" not in res.stderr
    assert not (indexed_repo / ".coderag" / "owner.json").exists()


def test_first_search_starts_an_owner_that_answers_the_next_and_exits_when_idle(
        indexed_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-daemon first (nothing started), then a search that starts the owner, one it answers, status, exit."""
    runner = CliRunner()
    owner_file = indexed_repo / ".coderag" / "owner.json"

    res = runner.invoke(main, ["search", QUERY, "--root", str(indexed_repo), "--no-daemon", "--retriever", "bm25"])
    assert res.exit_code == 0, res.output
    assert not owner_file.exists(), "--no-daemon searched in this process"

    monkeypatch.delenv(NO_DAEMON_ENV, raising=False)
    cfg = tmp_path / "settings.yaml"
    cfg.write_text("service:\n  idle_exit_s: 4\n")
    args = ["search", QUERY, "--root", str(indexed_repo), "--config", str(cfg), "--format", "xml"]
    pid = None
    try:
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
        assert ET.fromstring(res.stdout).findtext("result/source_file") == "src/billing/invoice.py"
        pid = json.loads(owner_file.read_text())["pid"]
        assert pid != os.getpid() and owner_pid(indexed_repo) == pid
        assert f"started a background owner of {indexed_repo.resolve()} (pid {pid}" in res.stderr, res.stderr

        t0 = time.monotonic()
        res = runner.invoke(main, args)  # answered by that owner: this process does not open the index
        took = time.monotonic() - t0
        assert res.exit_code == 0, res.output
        assert ET.fromstring(res.stdout).findtext("result/source_file") == "src/billing/invoice.py"
        assert "started a background owner" not in res.stderr
        assert json.loads(owner_file.read_text())["pid"] == pid
        assert took < 5, f"a search through the warm owner took {took:.1f} s"

        res = runner.invoke(main, ["status", str(indexed_repo)])
        assert f"owner:       pid {pid} " in res.output, res.output

        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while not _reaped(pid):
            assert time.monotonic() < deadline, "the owner did not exit after 4 s idle"
            time.sleep(0.2)
        pid = None
        assert not owner_file.exists(), "a clean stop removes owner.json"
        log = (indexed_repo / ".coderag" / "coderag.log").read_text()
        assert "no request for 4 s" in log, log[-2000:]
        assert not (indexed_repo / ".coderag" / "owner.sock").exists()
        res = runner.invoke(main, ["status", str(indexed_repo)])
        assert "owner:       none" in res.output, res.output
    finally:
        if pid is not None:  # a failed assertion above: stop the owner this test started
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + EXIT_TIMEOUT_S
            while not _reaped(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
