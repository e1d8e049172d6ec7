"""The index is private to its user: the folder 0700 and every file 0600 (what another local user could read
is judged from the modes), an existing loose index tightened when opened, and the user's umask left alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.cli import main
from coderag.base.paths import private_umask, tighten_index


def modes(index: Path) -> dict[str, int]:
    """Mode bits of the index folder and of everything under it (the shard's files included)."""
    out = {".": stat.S_IMODE(index.lstat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(index):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            out[str(p.relative_to(index))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def open_to_others(index: Path) -> dict[str, str]:
    return {p: oct(m) for p, m in modes(index).items() if m & 0o077}


@pytest.fixture
def loose_umask():
    """The common default umask (022): without care the index would be 0755/0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_index_folder_0700_and_files_0600_after_index_and_serve(tiny_repo: Path, loose_umask) -> None:
    from coderag.service import IndexService

    res = CliRunner().invoke(main, ["index", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert os.umask(0o022) == 0o022  # the user's umask is back once the command returned
    index = tiny_repo / ".coderag"
    assert modes(index)["."] == 0o700
    assert {"index.db", "writer.lock", ".gitignore", "shard"} <= set(modes(index))
    assert open_to_others(index) == {}

    svc = IndexService(tiny_repo, background=False).start()  # owner.json, coderag.log, the socket
    try:
        (tiny_repo / "src" / "new.py").write_text("def koala_new():\n    return 1\n")
        svc.refresh(paths=["src/new.py"])  # a write through the owner: new WAL pages, shard segments
        m = modes(index)
        assert {"owner.json", "owner.sock"} <= set(m)  # coderag.log: once per process (see test_owner_races)
        assert open_to_others(index) == {}
    finally:
        svc.stop()
    assert os.umask(0o022) == 0o022
    new_file = tiny_repo / "user_file.txt"  # what the user creates afterwards keeps their umask
    new_file.write_text("x")
    assert stat.S_IMODE(new_file.stat().st_mode) == 0o644


def test_an_existing_loose_index_is_tightened_on_open_with_a_note_in_status(tiny_repo: Path, loose_umask) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["index", str(tiny_repo)]).exit_code == 0
    index = tiny_repo / ".coderag"
    for dirpath, dirnames, filenames in os.walk(index):  # as an older coderag left it
        for d in dirnames:
            os.chmod(Path(dirpath, d), 0o755)
        for f in filenames:
            os.chmod(Path(dirpath, f), 0o644)
    os.chmod(index, 0o755)
    assert len(open_to_others(index)) > 5

    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert "permissions: tightened (the folder was 0755" in res.output, res.output
    assert open_to_others(index) == {}
    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert "permissions: private (0700, files 0600)" in res.output, res.output

    for dirpath, dirnames, filenames in os.walk(index):  # loose again: opening the index tightens it too
        for f in filenames:
            os.chmod(Path(dirpath, f), 0o644)
    os.chmod(index, 0o755)
    res = runner.invoke(main, ["search", "sum the line items", "--root", str(tiny_repo), "--retriever", "bm25"])
    assert res.exit_code == 0, res.output
    assert open_to_others(index) == {}


def test_private_umask_nests_and_restores(tmp_path: Path, loose_umask) -> None:
    with private_umask():
        with private_umask():
            (tmp_path / "a").write_text("x")
        (tmp_path / "b").write_text("x")
        assert os.umask(0o077) == 0o077
    assert os.umask(0o022) == 0o022
    (tmp_path / "c").write_text("x")
    assert [stat.S_IMODE((tmp_path / n).stat().st_mode) for n in "abc"] == [0o600, 0o600, 0o644]
    link = tmp_path / "idx" / "link"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "c")  # a link in the index is not followed out of it
    assert tighten_index(link.parent).entries == 0 and stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o644
