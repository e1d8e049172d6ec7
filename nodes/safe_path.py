"""What may be read: one decision for every file read for the index or for an answer, and an open that never blocks.

    readable_path(root, rel_path, matcher=None, check_ignored=True) -> (Path | None, reason)
        (the resolved absolute path, "") when `rel_path` may be read, else (None, a short reason). `rel_path` is
        POSIX and relative to `root`, written as the index writes paths (no "", "." or ".." parts, no leading or
        trailing "/"). It may be read when, after following every link, it lands inside the resolved root, not
        in `<root>/.coderag/`, is a regular file, and neither it nor the path it resolves to is ignored
        (`IgnoreMatcher.is_ignored_anywhere`; pass the caller's `matcher` to reuse its parsed rules, or
        `check_ignored=False` where the path comes from the index itself). Reasons, in `REASONS`: "empty path",
        "undecodable name", "NUL byte", "absolute path", "not a normalized path", "outside the repository",
        "index folder", "missing", "unreadable", "not a regular file", "ignored". A link that stays inside
        is followed; to refuse every link (the walk follows none), compare the path returned with
        `os.path.join(os.path.realpath(root), rel_path)`, as pipelines/ingestion.py `changes_for_paths` does.

    open_readable(root, rel_path, matcher=None, check_ignored=True) -> (BinaryIO | None, reason)
        The same check, then the file opened with O_NONBLOCK, its type checked on the descriptor (a FIFO,
        socket or device can replace a file between check and open) and where it was opened checked again
        from the descriptor. Read it with `.read()`; `os.fstat(f.fileno())` is the stat of what is read.

    open_regular(path, root=None) -> (BinaryIO | None, reason, detail)
        The open alone, for a path already checked (a file found by the walk): never blocks, refuses what is
        not a regular file (or became a link), and with `root`, what lies outside it or in its index folder.
        `detail`: the system's message for "unreadable" (a permission error), what the file is for "not a
        regular file" ("a FIFO", "a socket", "a device", "a symlink"), else "".

    RepoFiles(root, matcher=None, check_ignored=True)
        The same bound to one root resolved once: `.check(rel_path)` -> (resolved path, stat, reason),
        `.open(rel_path)`; for callers that check many paths (LineSource, changes_for_paths).

    is_decodable(name) -> bool
        False for a name os.scandir decoded with surrogate escapes (bytes that are not UTF-8): such a name
        cannot be stored or printed, so the walk and the watcher skip it as "undecodable name";
        `escaped_name(name)` is its printable form, with the bytes as \\xNN.

Examples:
    >>> readable_path("/repo", "../etc/passwd")                     # doctest: +SKIP
    (None, 'outside the repository')
    >>> readable_path("/repo", "src/app.py")                        # doctest: +SKIP
    (PosixPath('/repo/src/app.py'), '')
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat as stat_mod
from pathlib import Path
from typing import BinaryIO, Optional

from coderag.base.paths import INDEX_DIR_NAME
from coderag.nodes.ignore import IgnoreMatcher

OUTSIDE = "outside the repository"
INDEX_FOLDER = "index folder"
NOT_REGULAR = "not a regular file"
IGNORED = "ignored"
UNDECODABLE = "undecodable name"
MISSING = "missing"
UNREADABLE = "unreadable"
REASONS = ("empty path", UNDECODABLE, "NUL byte", "absolute path", "not a normalized path", OUTSIDE,
           INDEX_FOLDER, MISSING, UNREADABLE, NOT_REGULAR, IGNORED)

# O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer. O_NOCTTY: a terminal never becomes ours.
# O_NOFOLLOW: the last part of an already resolved path must not have become a link since.
_OPEN_FLAGS = (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOFOLLOW", 0))
_DRIVE = re.compile(r"^[A-Za-z]:")
_PROC_FD = "/proc/self/fd"


def is_decodable(name: str) -> bool:
    """True if `name` is valid text (no surrogate escapes left by os.fsdecode of non-UTF-8 bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped_name(name: str) -> str:
    """A printable, lossless form of a name that may hold undecodable bytes (shown as \\xNN)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def lexical_reason(rel_path: str) -> str:
    """Why `rel_path` is not a plain repository path, from its text alone ("" if it is one)."""
    if not rel_path:
        return "empty path"
    if not is_decodable(rel_path):
        return UNDECODABLE
    if "\x00" in rel_path:
        return "NUL byte"
    if rel_path.startswith(("/", "\\")) or _DRIVE.match(rel_path):
        return "absolute path"
    parts = rel_path.split("/")
    if ".." in parts and posixpath.normpath(rel_path).split("/")[0] == "..":
        return OUTSIDE
    if ".." in parts or "" in parts or "." in parts:
        return "not a normalized path"
    return ""


def _inside(path: str, real_root: str) -> str:
    """"" if the resolved `path` is a file inside `real_root` and outside its index folder, else the reason."""
    if not path.startswith(real_root + os.sep) and real_root != os.sep:
        return OUTSIDE
    index_dir = os.path.join(real_root, INDEX_DIR_NAME)
    if path == index_dir or path.startswith(index_dir + os.sep):
        return INDEX_FOLDER
    return ""


class RepoFiles:
    """The checks of `readable_path` bound to one root, resolved once (LineSource keeps one per request)."""

    def __init__(self, root: str | os.PathLike, matcher: Optional[IgnoreMatcher] = None,
                 check_ignored: bool = True) -> None:
        self.root = os.fspath(root)
        self.real_root = os.path.realpath(self.root)
        self._matcher = matcher
        self.check_ignored = check_ignored

    @property
    def matcher(self) -> IgnoreMatcher:
        if self._matcher is None:
            self._matcher = IgnoreMatcher(self.real_root)
        return self._matcher

    def check(self, rel_path: str) -> tuple[Optional[str], Optional[os.stat_result], str]:
        """(resolved path, its stat, "") if `rel_path` may be read, else (None, None, reason)."""
        reason = lexical_reason(rel_path)
        if reason:
            return None, None, reason
        real = os.path.realpath(os.path.join(self.real_root, rel_path))
        reason = _inside(real, self.real_root)
        if reason:
            return None, None, reason
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return None, None, MISSING
        except OSError:
            return None, None, UNREADABLE
        if not stat_mod.S_ISREG(st.st_mode):
            return None, None, NOT_REGULAR
        if self.check_ignored:
            real_rel = real[len(self.real_root) + 1:].replace(os.sep, "/")
            if self.matcher.is_ignored_anywhere(rel_path) or (
                    real_rel != rel_path and self.matcher.is_ignored_anywhere(real_rel)):
                return None, None, IGNORED
        return real, st, ""

    def open(self, rel_path: str) -> tuple[Optional[BinaryIO], str]:
        """`rel_path` opened for reading (see open_readable), or (None, reason)."""
        real, _, reason = self.check(rel_path)
        if real is None:
            return None, reason
        return self.open_checked(real)

    def open_checked(self, real: str) -> tuple[Optional[BinaryIO], str]:
        """A path `check` returned, opened (see open_readable), or (None, reason)."""
        fh, reason, _ = _open(real, self.real_root)
        return fh, reason


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a skip's detail."""
    for test, name in ((stat_mod.S_ISFIFO, "a FIFO"), (stat_mod.S_ISSOCK, "a socket"), (stat_mod.S_ISCHR, "a device"),
                       (stat_mod.S_ISBLK, "a device"), (stat_mod.S_ISDIR, "a folder"), (stat_mod.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a file"


def _opened_where(fd: int, path: str, st: os.stat_result) -> Optional[str]:
    """The resolved path of what `fd` has open: from the kernel where it says, else the realpath of `path`
    if it is still the same file (same device and inode), else None."""
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        pass
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError:
        return None
    return real if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) else None


def _open(path: str, real_root: Optional[str]) -> tuple[Optional[BinaryIO], str, str]:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None, MISSING, ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last part became a link after it was checked or walked
            return None, NOT_REGULAR, "a symlink"
        return None, UNREADABLE, exc.strerror or str(exc)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            os.close(fd)
            return None, NOT_REGULAR, file_kind(st.st_mode)
        if real_root is not None:
            where = _opened_where(fd, path, st)
            reason = OUTSIDE if where is None else _inside(where, real_root)
            if reason:
                os.close(fd)
                return None, reason, ""
        os.set_blocking(fd, True)  # a regular file never blocks; plain reads from here on
        return os.fdopen(fd, "rb"), "", ""
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise


def readable_path(root: str | os.PathLike, rel_path: str, matcher: Optional[IgnoreMatcher] = None,
                  check_ignored: bool = True) -> tuple[Optional[Path], str]:
    """(resolved absolute path, "") if `rel_path` may be read, else (None, reason). See the module docstring."""
    real, _, reason = RepoFiles(root, matcher, check_ignored).check(rel_path)
    return (Path(real) if real is not None else None), reason


def open_readable(root: str | os.PathLike, rel_path: str, matcher: Optional[IgnoreMatcher] = None,
                  check_ignored: bool = True) -> tuple[Optional[BinaryIO], str]:
    """`rel_path` under `root` opened for binary reading, or (None, reason). See the module docstring."""
    return RepoFiles(root, matcher, check_ignored).open(rel_path)


def open_regular(path: str | os.PathLike,
                 root: str | os.PathLike | None = None) -> tuple[Optional[BinaryIO], str, str]:
    """`path` opened without blocking if it is a regular file (inside `root`, when given), else (None, reason,
    detail). See the module docstring."""
    return _open(os.fspath(path), os.path.realpath(root) if root is not None else None)
