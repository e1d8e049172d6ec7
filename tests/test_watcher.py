"""The owner's file watcher stays inside the repository: no watch through a symlinked folder, nothing written
there indexed, an undecodable file name skipped, a watcher that dies restarted and reported."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from coderag.watcher import TreeWatcher, plan_dirs

LIMIT_S = 30


def _wait_until(predicate, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"{what}: not seen after {timeout} s"
        time.sleep(0.02)


def inotify_watched_inodes(pid: int | str = "self") -> list[int]:
    """The inode of every inotify watch the process holds (one `inotify wd:` line per watch in fdinfo)."""
    inodes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            lines = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("inotify wd:"):
                fields = dict(f.split(":", 1) for f in line.split()[1:])
                inodes.append(int(fields["ino"], 16))
    return inodes


def _outside_tree(base: Path, folders: int = 30) -> Path:
    out = base / "outside"
    for i in range(folders):
        (out / f"pkg{i}" / "sub").mkdir(parents=True)
    (out / "already.py").write_text("def platypus_already_there():\n    return 1\n")
    return out


@pytest.fixture
def owner(tiny_repo: Path):
    from coderag.client import IndexClient
    from coderag.service import IndexService

    svc = IndexService(tiny_repo, background=False).start()
    svc._initial_index()
    client = IndexClient(tiny_repo, str(svc.socket_path))
    yield svc, client
    client.close()
    svc.stop()


def _search(client, keyword: str) -> list[str]:
    res = client.call("search", query=f"function {keyword}", keywords=[keyword], requires_exact_match=True)
    return [h["file_path"] for h in res["results"]]


def test_watcher_plans_no_folder_through_a_link(tmp_path: Path, tiny_repo: Path) -> None:
    out = _outside_tree(tmp_path)
    (tiny_repo / "outside_link").symlink_to(out)
    (tiny_repo / "src" / "inner_link").symlink_to(tiny_repo / "web")  # a link inside: not a second watch either
    dirs = plan_dirs(str(tiny_repo))
    assert str(tiny_repo) in dirs and str(tiny_repo / "src" / "auth") in dirs
    assert not [d for d in dirs if "outside" in d or "inner_link" in d]
    assert len(dirs) == len(set(os.path.realpath(d) for d in dirs))


def test_watcher_never_watches_or_indexes_a_linked_folder_outside_the_repo(owner, tiny_repo: Path,
                                                                           tmp_path: Path) -> None:
    svc, client = owner
    out = _outside_tree(tmp_path)
    outside_inodes = {os.stat(p).st_ino for p, _, _ in os.walk(out)}
    (tiny_repo / "outside_link").symlink_to(out)  # a new entry in a watched folder: the owner re-plans
    (tiny_repo / "src" / "marker_one.py").write_text("def echidna_marker_one():\n    return 1\n")
    _wait_until(lambda: svc.index.state.file("src/marker_one.py") is not None, LIMIT_S, "first marker")

    (out / "pkg3" / "sub" / "newsecret.py").write_text("def platypus_secret_token():\n    return 'x'\n")
    (out / "newsecret.py").write_text("def platypus_secret_top():\n    return 'y'\n")
    time.sleep(0.5)  # longer than the debounce: an event from there would be applied before the marker
    (tiny_repo / "src" / "marker_two.py").write_text("def echidna_marker_two():\n    return 2\n")
    _wait_until(lambda: svc.index.state.file("src/marker_two.py") is not None, LIMIT_S, "second marker")

    assert not [p for p in svc.index.state.files() if p.startswith("outside_link")]
    for name in ("platypus_secret_token", "platypus_secret_top", "platypus_already_there"):
        assert _search(client, name) == [], name
    watched = inotify_watched_inodes()
    assert not outside_inodes & set(watched), "an inotify watch sits on a folder outside the repository"
    status = client.call("status")["watcher"]
    assert status["state"] == "running" and status["restarts"] == 0
    assert status["watched_folders"] == len(plan_dirs(str(tiny_repo)))


def test_watcher_survives_an_undecodable_file_name(owner, tiny_repo: Path) -> None:
    svc, client = owner
    bad = os.fsdecode(os.fsencode(str(tiny_repo / "src")) + b"/bad\xffname.py")
    with open(bad, "w") as f:
        f.write("def wombat_bad_name():\n    return 0\n")
    (tiny_repo / "src" / "after_bad.py").write_text("def wombat_after_bad():\n    return 1\n")
    _wait_until(lambda: svc.index.state.file("src/after_bad.py") is not None, LIMIT_S, "file after the bad name")
    with open(bad, "a") as f:  # more events for the bad name, then a good file again
        f.write("# more\n")
    (tiny_repo / "src" / "after_bad_2.py").write_text("def wombat_after_bad_two():\n    return 2\n")
    _wait_until(lambda: svc.index.state.file("src/after_bad_2.py") is not None, LIMIT_S, "second file")
    assert _search(client, "wombat_after_bad_two") == ["src/after_bad_2.py"]
    status = client.call("status")["watcher"]
    assert status["state"] == "running" and status["restarts"] == 0, status
    assert status["skipped_undecodable_events"] >= 1, status


def test_watcher_that_dies_is_restarted_and_reported(tmp_path: Path) -> None:
    """A root that does not exist yet: notify refuses to watch it, the watcher backs off and tries again."""
    root = tmp_path / "later"
    got: list[tuple[list[str], bool]] = []
    stop = threading.Event()
    w = TreeWatcher(str(root), lambda rels, rescan: got.append((rels, rescan)), stop)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        _wait_until(lambda: w.restarts >= 1, LIMIT_S, "a restart")
        s = w.status()
        assert s["state"] == "restarting" and s["last_error"].startswith("FileNotFoundError"), s
        root.mkdir()
        _wait_until(lambda: w.state == "running", LIMIT_S, "running again")
        _wait_until(lambda: ([], True) in got, LIMIT_S, "a rescan for what changed while it was down")
        (root / "new.py").write_text("x = 1\n")
        _wait_until(lambda: (["new.py"], False) in got, LIMIT_S, "an event after the restart")
    finally:
        stop.set()
        t.join(10)
    assert w.status()["state"] == "stopped"


def test_watcher_rescans_for_a_change_made_while_it_replans(tmp_path: Path) -> None:
    """A folder moved in re-plans the watch; the folder moved out again at once, before the new watch is
    set up, has no event in either watch. The rescan comes once the new folders are watched, so it sees
    the folder gone (a rescan before the re-plan, as the watcher did once, missed it)."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    outside = tmp_path / "elsewhere" / "pkg"
    outside.mkdir(parents=True)
    (outside / "moved.py").write_text("x = 1\n")
    got: list[tuple[list[str], bool]] = []

    def on_changes(rels: list[str], rescan: bool) -> None:
        got.append((rels, rescan))
        if rescan and len(got) == 1:  # the first rescan: the folder goes back out before anything else runs
            os.rename(root / "src" / "pkg", outside)

    stop = threading.Event()
    w = TreeWatcher(str(root), on_changes, stop)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        _wait_until(lambda: w.state == "running", LIMIT_S, "watching")
        time.sleep(0.3)  # the watch is set up (no event can tell)
        os.rename(outside, root / "src" / "pkg")
        _wait_until(lambda: len(got) >= 2, LIMIT_S, "a rescan after the folder went out again")
        assert all(rescan for _, rescan in got), got
        assert str(root / "src" / "pkg") not in w.dirs
    finally:
        stop.set()
        t.join(10)


def test_failed_background_build_reports_its_reason(tiny_repo: Path) -> None:
    from coderag.service import IndexService

    (tiny_repo / "qdrant.yaml").write_text(f"embedding:\n  model_path: {tiny_repo.parent / 'no-such-model'}\n")
    svc = IndexService(tiny_repo, watch=False, background=False).start()
    try:
        svc._initial_index()
        st = svc.status()["indexing"]
        assert st["phase"] == "failed" and st["error"] and ":" in st["error"], st
        res = svc.search(query="sum the line items")
        assert "building" not in res["freshness"] and "failed" in res["freshness"], res["freshness"]
        assert st["error"].split(":")[0] in res["freshness"] + res["message"]
    finally:
        svc.stop()
