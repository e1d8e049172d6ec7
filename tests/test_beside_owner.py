"""Beside a running owner nothing surprises (issue 26, section 1): a notebook's CodeIndex.open while the
background owner a search started runs, `coderag index --rebuild`, an edited qdrant.yaml, and search
options checked before an owner is started. The real console script in separate processes, real owners
(the background one, `coderag serve`, `coderag mcp` through the MCP SDK's client), the real model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from conftest import CODERAG, TINY_FILES, server_env, write_files

QUERY = "sum the line items and add sales tax"
TIMEOUT_S = 180
CHUNKING_CHANGE = "chunking:\n  max_tokens: 64\n"
RETRIEVAL_CHANGE = "retrieval:\n  fusion_top_k: 1\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The tiny repository, indexed (each test changes its index or its settings)."""
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root)
    return root


@pytest.fixture
def owners(repo: Path):
    """Owners the test started (their pids, appended as found) are stopped after it, whatever happened."""
    pids: list[int] = []
    yield pids
    pid = _owner_pid(repo)
    for p in set(pids + ([pid] if pid else [])):
        _stop(p)


def _owner_pid(root: Path) -> int | None:
    try:
        return json.loads((root / ".coderag" / "owner.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # our own child (a `coderag serve` this test started) that exited is a zombie until reaped
        return os.waitpid(pid, os.WNOHANG)[0] != pid
    except ChildProcessError:
        return True


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def _daemon_env() -> dict[str, str]:
    """The environment of a user's shell: a search may start a background owner."""
    return {k: v for k, v in server_env().items() if k != "CODERAG_NO_DAEMON"}


def coderag(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CODERAG, *args], capture_output=True, text=True, env=env or _daemon_env(),
                          timeout=TIMEOUT_S)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}"
    return proc


def _search_json(root: Path, query: str = QUERY, *extra: str) -> dict:
    proc = _ok(coderag("search", query, "--root", str(root), "--format", "json", *extra))
    return json.loads(proc.stdout)


def _start_background_owner(root: Path, owners: list[int]) -> int:
    """`coderag search` as a user types it: it starts the background owner and is answered by it."""
    res = _search_json(root)
    assert res["results"][0]["file_path"] == "src/billing/invoice.py", res
    pid = _owner_pid(root)
    assert pid is not None and _alive(pid), "the search started no owner"
    owners.append(pid)
    return pid


NOTEBOOK = textwrap.dedent("""\
    import sys
    from coderag import CodeIndex

    with CodeIndex.open(sys.argv[1]) as index:
        res = index.search("sum the line items and add sales tax", max_tokens=1500)
        print(res[0].file_path)
        print(type(index.retriever).__name__, type(index.vector_store).__name__)
    """)


def test_code_index_open_in_a_notebook_while_the_background_owner_runs(repo: Path, owners: list[int]) -> None:
    """`coderag search`, then the README's Python API in another process: the idle background owner hands
    the index over and exits, and the API has every LlamaIndex part in its own process. It raised
    IndexLockedError ("is writing the index ... pass --wait") before."""
    pid = _start_background_owner(repo, owners)
    t0 = time.monotonic()
    nb = subprocess.run([sys.executable, "-c", NOTEBOOK, str(repo)], capture_output=True, text=True,
                        env=_daemon_env(), timeout=TIMEOUT_S)
    took = time.monotonic() - t0
    assert nb.returncode == 0, nb.stderr[-3000:]
    first, parts = nb.stdout.splitlines()[:2]
    assert first == "src/billing/invoice.py"
    assert "Retriever" in parts and "VectorStore" in parts, parts
    assert took < 60, f"opening beside the owner took {took:.0f} s"
    deadline = time.monotonic() + 60
    while _alive(pid):
        assert time.monotonic() < deadline, "the background owner did not stop after handing the index over"
        time.sleep(0.2)
    log = (repo / ".coderag" / "coderag.log").read_text()
    assert "hands it over and stops" in log, log[-2000:]
    assert not (repo / ".coderag" / "owner.json").exists()
    # The next search starts a new owner, as after any owner's exit.
    assert _search_json(repo)["results"][0]["file_path"] == "src/billing/invoice.py"
    owners.append(_owner_pid(repo))


def test_code_index_open_beside_a_foreground_owner_says_what_to_do(repo: Path) -> None:
    """`coderag serve` keeps the index: CodeIndex.open fails at once, naming it and the ways on (not `--wait`,
    a flag of the CLI, and not after waiting)."""
    from coderag import CodeIndex
    from coderag.client import connect
    from coderag.base.errors import IndexLockedError

    serve = subprocess.Popen([CODERAG, "serve", "--root", str(repo)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=server_env())
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while _owner_pid(repo) != serve.pid:
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read().decode()[-3000:]
            time.sleep(0.1)
        t0 = time.monotonic()
        with pytest.raises(IndexLockedError) as exc:
            CodeIndex.open(repo)
        assert time.monotonic() - t0 < 5
        msg = str(exc.value)
        assert f"pid {serve.pid} (coderag serve)" in msg and "become_owner=False" in msg, msg
        assert "--wait" not in msg, msg
        client = connect(repo, become_owner=False)  # the way on that the message gives
        try:
            res = client.call("search", query=QUERY, max_tokens=600)
        finally:
            client.close()
        assert res["results"][0]["file_path"] == "src/billing/invoice.py"
        assert serve.poll() is None, "a foreground owner keeps running"
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)


def test_index_rebuild_goes_through_the_background_owner(repo: Path, owners: list[int]) -> None:
    """It was refused ("kill N") before: now the owner builds again, the command follows it to the end."""
    pid = _start_background_owner(repo, owners)
    proc = _ok(coderag("index", str(repo), "--rebuild"))
    assert f"(pid {pid}) builds the index in the background (coderag index --rebuild)" in proc.stderr, proc.stderr
    assert "5 indexed" in proc.stdout, proc.stdout
    assert _owner_pid(repo) == pid and _alive(pid)
    status = _ok(coderag("status", str(repo))).stdout
    assert "files:       5 indexed" in status and f"owner:       pid {pid}" in status, status
    assert _search_json(repo)["results"][0]["file_path"] == "src/billing/invoice.py"


def test_an_edited_qdrant_yaml_is_applied_by_the_background_owner(repo: Path, owners: list[int]) -> None:
    """Before, the owner answered from its old settings and `coderag index` said "5 unchanged" until it
    exited. Now retrieval settings apply to the next search, a chunking change builds the index again, and
    `index` and `status` say so."""
    _start_background_owner(repo, owners)
    before = _search_json(repo, "user", "--max-tokens", "4000")
    assert before["total_hits"] > 1, before

    (repo / "qdrant.yaml").write_text(RETRIEVAL_CHANGE)
    after = _search_json(repo, "user", "--max-tokens", "4000")
    assert after["total_hits"] == 1, after  # fusion_top_k: 1
    status = _ok(coderag("status", str(repo))).stdout
    assert "settings:    qdrant.yaml changed at" in status and "applied to searches" in status, status

    (repo / "qdrant.yaml").write_text(RETRIEVAL_CHANGE + CHUNKING_CHANGE)
    proc = _ok(coderag("index", str(repo)))
    assert "6 seen, 6 indexed, 0 unchanged" in proc.stdout, proc.stdout  # not "5 unchanged"
    assert "rebuilt: the model or chunking settings in qdrant.yaml changed" in proc.stdout, proc.stdout
    status = _ok(coderag("status", str(repo))).stdout
    assert "new model or chunking settings, so the index was built again" in status, status
    assert "files:       6 indexed" in status, status  # qdrant.yaml is a file of the tree too
    from coderag.store.state import IndexState

    state = IndexState(repo / ".coderag" / "index.db", readonly=True)
    try:
        assert json.loads(state.get_meta("fingerprint"))["chunking"]["max_tokens"] == 64
    finally:
        state.close()


@pytest.mark.parametrize("flags, named, not_named", [
    (["--files", "src/[a"], "--files", "file_pattern"),
    (["--max-tokens", "10"], "--max-tokens", "max_tokens"),
    (["--top-k", "0"], "--top-k", "top_k"),
])
def test_bad_search_options_are_refused_before_an_owner_starts(repo: Path, owners: list[int], flags: list[str],
                                                               named: str, not_named: str) -> None:
    """A bad --files started the background owner before it was refused, and the error named the MCP
    parameter (file_pattern) instead of the flag typed. (`owners` stops an owner started all the same.)"""
    proc = coderag("search", QUERY, "--root", str(repo), *flags)
    assert proc.returncode == 2, proc.stderr
    assert f"Invalid search options: {named}:" in proc.stderr and not_named not in proc.stderr, proc.stderr
    assert "started a background owner" not in proc.stderr
    assert not (repo / ".coderag" / "owner.json").exists() and _owner_pid(repo) is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_owner_applies_settings_and_rebuilds_for_the_cli(repo: Path) -> None:
    """`coderag mcp` (a Claude Code session's owner) through the MCP SDK's client: an edited chunking is
    built again and index_status says why; `coderag index --rebuild` beside it goes through it."""
    from test_mcp_server import mcp_client, search, status, wait_dense_ready

    errors: list = []
    async with mcp_client(repo, errors) as client:
        await wait_dense_ready(client)
        (repo / "qdrant.yaml").write_text(CHUNKING_CHANGE)
        st = await status(client)
        assert "new model or chunking settings" in (st["settings"]["note"] or ""), st
        st = await wait_dense_ready(client)
        assert st["last_build"]["rebuild_reason"].startswith("the model or chunking settings in qdrant.yaml"), st
        assert st["counts"]["files"] == 6, st
        doc = await search(client, QUERY)
        assert doc.find("result/source_file").text == "src/billing/invoice.py"

        proc = await anyio.to_thread.run_sync(lambda: coderag("index", str(repo), "--rebuild"))
        _ok(proc)
        assert "builds the index in the background (coderag index --rebuild)" in proc.stderr, proc.stderr
        assert "6 indexed" in proc.stdout, proc.stdout
        st = await status(client)
        assert st["last_build"]["rebuild_reason"] == "coderag index --rebuild", st
        doc = await search(client, QUERY)
        assert doc.find("result/source_file").text == "src/billing/invoice.py"
    assert not errors


def test_a_repository_moved_under_its_background_owner_is_served_in_its_new_place(repo: Path,
                                                                                 owners: list[int]) -> None:
    """The owner kept the writer lock of the moved index and answered at the socket its owner.json named in the
    old place: every search in the new place waited 60 s and failed, for as long as the owner ran (600 s idle).
    Now the owner sees that its repository is gone from where it opened it and stops; the next search in the
    new place is answered, by an owner it starts there."""
    pid = _start_background_owner(repo, owners)
    moved = repo.with_name("moved")
    repo.rename(moved)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid), "the owner of the moved repository still runs"
    t0 = time.monotonic()
    res = _search_json(moved, QUERY, "--wait", "5")
    assert res["results"][0]["file_path"] == "src/billing/invoice.py" and time.monotonic() - t0 < 60, res
    new_pid = _owner_pid(moved)
    assert new_pid is not None and new_pid != pid
    owners.append(new_pid)
    assert "moved or deleted: the owner stops" in (moved / ".coderag" / "coderag.log").read_text()


def test_a_notebook_in_a_moved_repositorys_new_place_opens_the_index_its_old_owner_held(repo: Path) -> None:
    """An MCP server's repository is moved, and a notebook opens the index in the new place before the server
    hears of it: CodeIndex.open reaches the server through the socket that moved with the index folder, the
    server finds itself moved and lets go, and the notebook has the index at once (before: the hand-over found
    no owner at the old socket path and the lock stayed held)."""
    import pytest

    from coderag import CodeIndex
    from coderag.base.errors import IndexMissingError
    from coderag.service import IndexService

    svc = IndexService(repo, watch=False, serve=True).start()
    try:
        assert svc.dispatch("search", {"query": QUERY})["results"]
        moved = repo.with_name("moved")
        repo.rename(moved)
        t0 = time.monotonic()
        with CodeIndex.open(moved) as index:
            assert index.search(QUERY)[0].file_path == "src/billing/invoice.py"
        assert time.monotonic() - t0 < 30
        with pytest.raises(IndexMissingError, match="has let go of it"):
            svc.dispatch("search", {"query": QUERY})
    finally:
        svc.stop()


def test_an_mcp_servers_index_deleted_under_it_is_built_again_at_the_next_call(repo: Path) -> None:
    """The MCP server's handle (client.IndexHandle, in process): `.coderag` is deleted to start afresh; the next
    call says so, and the one after builds the index again and answers (before: "moved or deleted" until the
    session ended)."""
    import shutil

    from coderag.base.errors import IndexMissingError
    from coderag.client import IndexHandle

    handle = IndexHandle(repo, watch=False)
    try:
        assert handle.call("search", query=QUERY)["results"]
        shutil.rmtree(repo / ".coderag")
        with pytest.raises(IndexMissingError, match="was moved or deleted"):
            handle.call("search", query=QUERY)
        deadline = time.monotonic() + TIMEOUT_S
        while not (res := handle.call("search", query=QUERY))["results"]:  # BM25 first, as a first build answers
            assert time.monotonic() < deadline, res
            time.sleep(0.2)
        assert res["results"][0]["file_path"] == "src/billing/invoice.py"
        assert (repo / ".coderag" / "index.db").is_file()
    finally:
        handle.close()


def test_an_owner_in_process_says_its_repository_moved_and_what_to_do(repo: Path) -> None:
    """The MCP server is an owner in its own process, with no main loop of its own to end: its next tool call
    says the repository moved and what to do (before: answers from a tree that is not there)."""
    import pytest

    from coderag.base.errors import IndexMissingError
    from coderag.service import IndexService

    from coderag import CodeIndex

    svc = IndexService(repo, watch=False, serve=False).start()
    try:
        assert svc.dispatch("search", {"query": QUERY})["results"]
        moved = repo.with_name("moved")
        repo.rename(moved)
        for _ in range(2):  # and every call after
            with pytest.raises(IndexMissingError, match="was moved or deleted after this coderag process .* opened it"):
                svc.dispatch("search", {"query": QUERY})
        # It let go of the index that went with the folder (before: its writer lock and the store's files stayed
        # held for as long as the process lived, so nothing in the new place could open the index).
        with CodeIndex.open(moved) as index:
            assert index.search(QUERY)[0].file_path == "src/billing/invoice.py"
    finally:
        svc.stop()  # closing the store where its files were fails: stop says so and goes on
