"""A teammate's shell on a checkout two users share: the index is private to whoever built it, and another user
who searches, indexes or opens it there gets an error that says whose it is and what to do, not a traceback
(PermissionError from deep in pathlib, before).

Another user is real: a child process of this one, as root, confined to the test's folder (chroot) and switched to
the unprivileged uid, where the kernel refuses what it would refuse a teammate (root itself is never refused)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="becoming another user takes root")

OTHER_UID = 65534  # nobody


def _as_other_user(folder: Path, calls: dict) -> dict[str, str]:
    """Each of `calls` run by another user in a child process whose / is `folder`: name -> what it returned or
    raised, as "ok: ..." or "ErrorType: message"."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        try:
            os.close(r)
            os.chroot(folder)
            os.chdir("/")
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            out = []
            for name, call in calls.items():
                try:
                    out.append(f"{name}\t ok: {call()}")
                except BaseException as exc:  # noqa: BLE001 (what the other user gets is the finding)
                    out.append(f"{name}\t {type(exc).__name__}: {exc}")
            os.write(w, "\n".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b"".join(iter(lambda: os.read(r, 1 << 16), b""))
    os.close(r)
    os.waitpid(pid, 0)
    return dict(line.split("\t ", 1) for line in data.decode().splitlines())


def test_another_users_index_is_refused_in_words(tmp_path: Path) -> None:
    from coderag import index_repository
    from coderag.base import errors, paths  # noqa: F401 (imported before the child's / holds no Python)

    repo = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(repo)
    for p in (tmp_path, *[q for q in repo.rglob("*") if ".coderag" not in q.parts], repo):
        p.chmod(0o755 if p.is_dir() else 0o644)  # a checkout every user may read; its index stays 0700
    assert (repo / ".coderag").stat().st_mode & 0o777 == 0o700

    got = _as_other_user(tmp_path, {
        "find_root": lambda: paths.find_root(Path("/repo/src/auth")),  # search, status, a notebook's open
        "ensure_index_dir": lambda: paths.ensure_index_dir(Path("/repo")),  # coderag index, an owner's start
    })
    for name, outcome in got.items():
        assert outcome.startswith("IndexAccessError: The index /repo/.coderag belongs to uid 0 "), (name, outcome)
        assert "cannot read or update it" in outcome and "index your clone" in outcome, (name, outcome)
    assert set(got) == {"find_root", "ensure_index_dir"}


def test_a_checkout_without_an_index_is_indexed_by_whoever_asks(tmp_path: Path) -> None:
    """The check refuses only an index someone else built: where there is none, the other user's own build
    goes ahead (here: the folder it would be made in, found free)."""
    from coderag.base import errors, paths  # noqa: F401

    repo = write_files(tmp_path / "repo", TINY_FILES)
    for p in (tmp_path, *repo.rglob("*"), repo):
        p.chmod(0o777 if p.is_dir() else 0o644)
    got = _as_other_user(tmp_path, {"find_root": lambda: paths.find_root(Path("/repo/src")),
                                    "ensure_index_dir": lambda: paths.ensure_index_dir(Path("/repo"))})
    assert got == {"find_root": "ok: None", "ensure_index_dir": "ok: /repo/.coderag"}, got
