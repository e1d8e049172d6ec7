"""What may be read (nodes/safe_path.py), on real files in tmp_path: links out of the repository, FIFOs,
the index folder, ignored files and names that are not UTF-8 -- in the walk, the reader, LineSource,
changes_for_paths and `coderag index --verbose`."""

from __future__ import annotations

import os
import signal
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_files
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.safe_path import lexical_reason, open_readable, open_regular, readable_path
from coderag.nodes.scan import SkipLog, hash_file, read_text_file, walk
from coderag.postprocessors.lines import LineSource

MARKER = "OUTSIDE-MARKER-5f1c9e"
BAD_NAME = os.fsdecode(b"bad\xffname.py")  # what os.scandir gives for a name that is not UTF-8
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


class Blocked(Exception):
    """Not an OSError (as TimeoutError is): code under test that catches OSError must not swallow it."""


@contextmanager
def within(seconds: int):
    """Fail, instead of hanging the suite, if the body blocks (an open() of a FIFO waits for a writer)."""
    def fail(signum, frame):
        raise Blocked(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """repo/ with ordinary files, links out of it (a folder and a file), a FIFO, an ignored file and an
    index folder; outside/ next to it holds the marker."""
    write_files(tmp_path / "outside", {"secret.py": f"TOKEN = '{MARKER}'\n", "dir/inner.py": f"X = '{MARKER}'\n"})
    root = write_files(tmp_path / "repo", {
        "src/app.py": "def main():\n    return 1\n",
        "src/alias_target.py": "A = 1\n",
        ".gitignore": "*.env\n",
        "keys.env": "API_KEY=1\n",
        ".coderag/owner.json": f'{{"m": "{MARKER}"}}\n',
    })
    os.symlink(tmp_path / "outside", root / "outside_link")
    os.symlink(tmp_path / "outside" / "secret.py", root / "src" / "passwd.py")
    os.symlink("alias_target.py", root / "src" / "alias.py")  # a link that stays inside
    os.symlink("keys.env", root / "keys_link.py")  # a link to an ignored file
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe.py")
    return root


@pytest.mark.parametrize("rel, reason", [
    ("src/app.py", ""),
    ("src/alias.py", ""),
    ("src/passwd.py", "outside the repository"),
    ("outside_link/secret.py", "outside the repository"),
    ("outside_link/dir/inner.py", "outside the repository"),
    ("../outside/secret.py", "outside the repository"),
    ("src/../../outside/secret.py", "outside the repository"),
    ("src/../app.py", "not a normalized path"),
    ("./src/app.py", "not a normalized path"),
    ("src//app.py", "not a normalized path"),
    ("src/app.py/", "not a normalized path"),
    ("/etc/passwd", "absolute path"),
    ("\\etc\\passwd", "absolute path"),
    ("C:\\Windows\\win.ini", "absolute path"),
    ("src/app.py\x00.txt", "NUL byte"),
    (BAD_NAME, "undecodable name"),
    ("", "empty path"),
    (".coderag/owner.json", "index folder"),
    ("keys.env", "ignored"),
    ("keys_link.py", "ignored"),
    ("src", "not a regular file"),
    ("src/nope.py", "missing"),
    ("%2e%2e/outside/secret.py", "missing"),
])
def test_safe_path_readable_path_gives_each_refusal_a_reason(layout: Path, rel: str, reason: str) -> None:
    path, why = readable_path(layout, rel)
    assert why == reason
    assert (path is not None) == (reason == "")
    if path is not None:
        assert path.is_relative_to(layout.resolve())


@needs_fifo
def test_safe_path_fifo_is_refused_without_blocking(layout: Path) -> None:
    with within(5):
        assert readable_path(layout, "pipe.py") == (None, "not a regular file")
        assert open_readable(layout, "pipe.py") == (None, "not a regular file")
        fh, reason, detail = open_regular(layout / "pipe.py", layout)
        assert (fh, reason, detail) == (None, "not a regular file", "a FIFO")
        assert hash_file(str(layout / "pipe.py")) is None


def test_safe_path_open_readable_reads_a_file_of_the_repository(layout: Path) -> None:
    fh, reason = open_readable(layout, "src/app.py")
    assert reason == "" and fh is not None
    with fh:
        assert fh.read() == b"def main():\n    return 1\n"
    assert open_readable(layout, "src/passwd.py") == (None, "outside the repository")
    # Opened by its path inside the root: refused once the path leads out (checked on the descriptor).
    assert open_regular(layout / "outside_link" / "secret.py", layout)[1] == "outside the repository"
    assert open_regular(layout / ".coderag" / "owner.json", layout)[1] == "index folder"


def test_safe_path_lexical_reasons_need_no_file_system() -> None:
    assert lexical_reason("a/b.py") == ""
    assert lexical_reason("../" * 300 + "etc/passwd") == "outside the repository"
    assert lexical_reason("a/" * 5000 + "../" * 5001 + "x") == "outside the repository"


# -- the walk and the reader -------------------------------------------------------------------------------

@needs_fifo
def test_safe_path_walk_skips_fifo_socket_and_undecodable_names_with_a_reason(layout: Path) -> None:
    (layout / BAD_NAME).write_text("X = 1\n")
    os.mkdir(layout / os.fsdecode(b"dir\xfe"))
    (layout / os.fsdecode(b"dir\xfe") / "inner.py").write_text("Y = 2\n")
    sock = _unix_socket(layout / "s.sock")
    try:
        skips = SkipLog()
        with within(10):
            entries = walk(layout, IgnoreMatcher(layout), skips)
    finally:
        if sock is not None:
            sock.close()
    assert {e.rel_path for e in entries} == {".gitignore", "src/alias_target.py", "src/app.py"}
    by_path = {p: (r, d) for p, r, d in skips.items}
    assert by_path["pipe.py"] == ("not a regular file", "a FIFO")
    if sock is not None:
        assert by_path["s.sock"] == ("not a regular file", "a socket")
    assert by_path["bad\\xffname.py"] == ("undecodable name", repr(b"bad\xffname.py"))
    assert by_path["dir\\xfe"] == ("undecodable name", repr(b"dir\xfe"))
    assert {by_path[p][0] for p in ("outside_link", "src/passwd.py", "src/alias.py", "keys_link.py")} == {"symlink"}
    for p, _, detail in skips.items:  # every skip can be printed and stored
        (p + detail).encode("utf-8")


def _unix_socket(path: Path):
    if len(str(path)) > 100 or not hasattr(socket, "AF_UNIX"):
        return None  # too long for sun_path: the FIFO stands for the other special files
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    return s


@needs_fifo
def test_safe_path_file_replaced_by_a_fifo_after_the_walk_is_skipped_at_once(tmp_path: Path) -> None:
    root = write_files(tmp_path / "repo", {"a.py": "A = 1\n", "b.py": "B = 2\n"})
    entries = walk(root, IgnoreMatcher(root), SkipLog())
    (root / "a.py").unlink()
    os.mkfifo(root / "a.py")  # same name, now a FIFO: a plain open() would wait for a writer forever
    (root / "b.py").unlink()
    os.symlink(tmp_path / "outside.py", root / "b.py")  # now a link out of the repository
    (tmp_path / "outside.py").write_text(f"S = '{MARKER}'\n")
    skips = SkipLog()
    with within(5):
        assert [read_text_file(e, skips) for e in entries] == [None, None]
    assert skips.items == [("a.py", "not a regular file", "a FIFO"), ("b.py", "not a regular file", "a symlink")]


@needs_fifo
def test_safe_path_line_source_refuses_fifo_links_out_and_the_index_folder(layout: Path) -> None:
    src = LineSource(layout)
    with within(5):
        for rel in ("pipe.py", "src/passwd.py", "outside_link/secret.py", ".coderag/owner.json",
                    "../outside/secret.py"):
            assert src.lines(rel) is None and src.span(rel, 1, 3) is None, rel
    assert src.refusal["pipe.py"] == "not a regular file"
    assert src.refusal["src/passwd.py"] == "outside the repository"
    assert src.refusal[".coderag/owner.json"] == "index folder"
    assert src.lines("src/app.py") == ["def main():", "    return 1"]
    assert src.lines("src/alias.py") == ["A = 1"]  # a link that stays inside the repository is read


def test_safe_path_line_source_sees_a_file_that_became_a_link_out(tmp_path: Path) -> None:
    """The cache is keyed by the resolved file: a cached path that now leads out is not served from it."""
    (tmp_path / "outside.py").write_text(f"S = '{MARKER}'\n")
    root = write_files(tmp_path / "repo", {"a.py": "A = 1\n"})
    assert LineSource(root).lines("a.py") == ["A = 1"]
    (root / "a.py").unlink()
    os.symlink(tmp_path / "outside.py", root / "a.py")
    assert LineSource(root).lines("a.py") is None


# -- changes_for_paths (freshness checks and watcher events) -----------------------------------------------

@needs_fifo
def test_safe_path_changes_for_paths_treats_what_may_not_be_read_as_removed(layout: Path) -> None:
    from coderag.pipelines.changes import changes_for_paths
    from coderag.store.state import FileRecord, IndexState

    state = IndexState(layout / ".coderag" / "index.db")
    try:
        for rel in ("src/app.py", "src/passwd.py", "pipe.py"):  # as if they were indexed as files before
            state.put_file(FileRecord(rel, 1, 1, "0" * 64, "python", "indexed", 1, 1))
        state.commit()
        (layout / "outside_link" / "new.py").write_text(f"N = '{MARKER}'\n")  # a watcher event through the link
        (layout / BAD_NAME).write_text("X = 1\n")
        with within(5):
            ch = changes_for_paths(layout.resolve(), state, [
                "src/app.py", "src/passwd.py", "pipe.py", "outside_link/new.py", BAD_NAME, "src/alias.py",
                ".coderag/owner.json", "keys.env"])
    finally:
        state.close()
    assert [e.rel_path for e in ch.candidates] == ["src/app.py"]
    assert ch.removed == ["pipe.py", "src/passwd.py"]
    reasons = {p: r for p, r, _ in ch.skips.items}
    assert reasons == {"bad\\xffname.py": "undecodable name", "outside_link/new.py": "outside the repository",
                       "pipe.py": "not a regular file", "src/passwd.py": "outside the repository",
                       "src/alias.py": "symlink", ".coderag/owner.json": "index folder"}


# -- through the real CLI ----------------------------------------------------------------------------------

@needs_fifo
def test_safe_path_cli_index_skips_special_files_and_bad_names_and_lists_why(tmp_path: Path) -> None:
    """`coderag index` exits 0 with a FIFO, a name that is not UTF-8 and links out of the repository in
    the tree (regression: UnicodeEncodeError in add_inflight stopped the run; FIFOs were dropped silently)."""
    from coderag.cli import main

    write_files(tmp_path / "outside", {"leak.py": f"L = '{MARKER}'\n"})
    root = write_files(tmp_path / "repo", {"src/app.py": "def main():\n    return 1\n"})
    (root / BAD_NAME).write_text("def bad():\n    return 2\n")
    os.mkfifo(root / "pipe.py")
    os.symlink(tmp_path / "outside", root / "outside_link")
    os.symlink(tmp_path / "outside" / "leak.py", root / "leak.py")
    res = {}

    def run() -> None:
        res["r"] = CliRunner().invoke(main, ["index", "--verbose", str(root)])

    t = threading.Thread(target=run, daemon=True)  # the model load makes an alarm too tight: a join timeout
    t.start()
    t.join(240)
    assert not t.is_alive(), "coderag index blocked (on the FIFO?)"
    r = res["r"]
    assert r.exit_code == 0, (r.output, r.exception)
    assert "1 indexed" in r.output
    assert "pipe.py: not a regular file (a FIFO)" in r.output
    assert f"bad\\xffname.py: undecodable name ({b'bad' + bytes([0xff]) + b'name.py'!r})" in r.output
    assert "outside_link: symlink" in r.output and "leak.py: symlink" in r.output
    assert MARKER not in r.output


@needs_fifo
def test_safe_path_ignore_files_that_are_fifos_or_links_are_not_read(tmp_path: Path) -> None:
    """A FIFO named .gitignore once blocked the walk; a .gitignore link is not followed, as git does not."""
    (tmp_path / "outside_rules").write_text("*.py\n")
    root = write_files(tmp_path / "repo", {"a.py": "A = 1\n", "sub/b.py": "B = 2\n"})
    os.mkfifo(root / ".gitignore")
    os.symlink(tmp_path / "outside_rules", root / "sub" / ".gitignore")
    with within(5):
        entries = walk(root, IgnoreMatcher(root), SkipLog())
    assert [e.rel_path for e in entries] == ["a.py", "sub/b.py"]
