"""An owner started from other coderag code than a command's (before an upgrade, or before a checkout of an
editable install): a background owner hands the index over, so the command and the next searches run this
code; one that keeps the index (`coderag serve`, a Claude Code session's server) answers, and the command
says so. The other code is a real copy of this package in tmp_path with one module changed, run as the owner
with PYTHONPATH pointing at it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from importlib.util import find_spec
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.base.code_id import PACKAGES, code_id
from coderag.cli import main
from coderag.client import IndexClient, OwnerGone, RemoteError
from coderag.daemon import NO_DAEMON_ENV
from conftest import TINY_FILES, write_files

QUERY = "sum the line items and add sales tax"
ANSWER = "src/billing/invoice.py"
START_TIMEOUT_S = 120
EXIT_TIMEOUT_S = 60


def _install_copy(site: Path, copy_function=shutil.copy2) -> Path:
    """This coderag copied into `site` as a wheel lays it out (the subpackages inside coderag/)."""
    for name in (*PACKAGES, "coderag.eval"):
        src = find_spec(name).submodule_search_locations[0]
        shutil.copytree(src, site / name.replace(".", "/"), dirs_exist_ok=True, copy_function=copy_function,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return site


@pytest.fixture(scope="module")
def other_code(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The environment of a process that runs a copy of this coderag with one line added to one module."""
    site = _install_copy(tmp_path_factory.mktemp("other_code"))
    with open(site / "coderag" / "base" / "paths.py", "a", encoding="utf-8") as f:
        f.write("\n# the release before or after this one\n")
    return {**os.environ, "PYTHONPATH": str(site)}


def test_two_installs_of_the_same_code_agree(tmp_path: Path) -> None:
    """A copy with other file times (a second install of the same release) has the same digest."""
    site = _install_copy(tmp_path / "site", copy_function=shutil.copy)  # copy: new file times
    out = subprocess.run([sys.executable, "-c", "import coderag.pipelines as p; from coderag.base.code_id import "
                          "code_id; print(p.__file__); print(code_id())"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True,
                         check=True)
    where, digest = out.stdout.split()
    assert Path(where).is_relative_to(site) and digest == code_id()


def _repo(tmp_path: Path) -> Path:
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "repo", TINY_FILES).resolve()
    index_repository(root)
    return root


def _start_owner(root: Path, env: dict, *extra: str) -> tuple[subprocess.Popen, dict]:
    """`coderag serve` of `root` run by the other code, and its ping once it serves the index."""
    proc = subprocess.Popen([sys.executable, "-m", "coderag.cli", "serve", "--root", str(root), *extra], cwd=root,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the owner exited while starting"
        try:
            sock = json.loads((root / ".coderag" / "owner.json").read_text("utf-8"))["socket"]
            client = IndexClient(root, sock)
            try:
                ping = client.call("ping")
            finally:
                client.close()
            if ping.get("ready"):
                return proc, ping
        except (OSError, ValueError, KeyError, OwnerGone, RemoteError):
            pass
        time.sleep(0.2)
    raise AssertionError("the owner did not start")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=EXIT_TIMEOUT_S)


def _stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.2)


def test_a_background_owner_of_other_code_hands_the_index_over(tmp_path: Path, other_code: dict,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = _repo(tmp_path)
    proc, ping = _start_owner(root, other_code, "--background", "--idle-exit", "300")
    new_pid = None
    try:
        assert ping["pid"] == proc.pid and ping["code"] != code_id()
        monkeypatch.delenv(NO_DAEMON_ENV, raising=False)
        runner = CliRunner()
        # `coderag status` reports; it does not stop the owner
        res = runner.invoke(main, ["status", str(root)])
        assert res.exit_code == 0, res.output
        assert (f"owner:       pid {proc.pid} (searches and updates go through it; it runs other coderag code "
                "than this command, until restarted)") in res.output, res.output
        client = IndexClient(root, json.loads((root / ".coderag" / "owner.json").read_text("utf-8"))["socket"])
        try:
            client.call("status")  # an owner asked to hand over refuses requests while it stops
        finally:
            client.close()
        assert proc.poll() is None, "a status stopped the owner"
        res = runner.invoke(main, ["search", QUERY, "--root", str(root), "--format", "xml"])
        assert res.exit_code == 0, res.output
        assert ET.fromstring(res.stdout).findtext("result/source_file") == ANSWER
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == 0, "the owner of the other code did not stop"
        assert "runs other coderag code" not in res.stderr, res.stderr  # nothing to do for the user

        res = runner.invoke(main, ["search", QUERY, "--root", str(root), "--format", "xml"])
        assert res.exit_code == 0, res.output
        owner = json.loads((root / ".coderag" / "owner.json").read_text("utf-8"))
        new_pid = owner["pid"]
        assert new_pid != proc.pid and owner["code"] == code_id(), owner
        assert f"started a background owner of {root} (pid {new_pid}" in res.stderr, res.stderr
    finally:
        _stop(proc)
        if new_pid is not None:
            _stop_pid(new_pid)


def test_an_owner_that_keeps_the_index_answers_and_the_command_says_it_runs_other_code(
        tmp_path: Path, other_code: dict) -> None:
    root = _repo(tmp_path)
    proc, ping = _start_owner(root, other_code)  # in the foreground: it keeps the index while it runs
    try:
        assert ping["code"] != code_id()
        env = {k: v for k, v in os.environ.items() if k != NO_DAEMON_ENV}
        res = subprocess.run([sys.executable, "-m", "coderag.cli", "search", QUERY, "--root", str(root), "--format",
                              "xml"], cwd=root, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        assert res.returncode == 0, res.stdout + res.stderr
        assert ET.fromstring(res.stdout).findtext("result/source_file") == ANSWER
        assert proc.poll() is None, "an owner run in the foreground keeps the index"
        assert (f"the owner of {root} (pid {proc.pid}) runs other coderag code than this command"
                in " ".join(res.stderr.split())), res.stderr
        assert json.loads((root / ".coderag" / "owner.json").read_text("utf-8"))["pid"] == proc.pid
    finally:
        _stop(proc)
