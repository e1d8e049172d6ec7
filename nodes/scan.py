"""Walk a repository and read its text files safely; stdlib + pathspec only, so a no-change run stays light."""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from coderag.nodes.file_classes import content_class
from coderag.nodes.file_text import decode_file
from coderag.nodes.notebook import is_notebook
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.safe_path import (MISSING, UNDECODABLE, UNREADABLE, escaped_name, file_kind, is_decodable,
                                     open_regular)

DEFAULT_HARD_MAX_BYTES = 8 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class FileEntry:
    """One file found by the walk, with the stat taken before any read."""

    rel_path: str  # POSIX, relative to the root
    abs_path: str
    size: int
    mtime_ns: int


@dataclass
class SkipLog:
    """Files left out of the index, counted by reason; `items` keeps (path, reason, detail) for --verbose."""

    counts: Counter = field(default_factory=Counter)
    items: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, rel_path: str, reason: str, detail: str = "") -> None:
        self.counts[reason] += 1
        self.items.append((rel_path, reason, detail))

    def merge(self, other: "SkipLog") -> None:
        self.counts.update(other.counts)
        self.items.extend(other.items)


def walk(root: str | os.PathLike, matcher: IgnoreMatcher, skips: SkipLog) -> list[FileEntry]:
    """All non-ignored regular files under root, sorted by path. Ignored directories are pruned, never read.

    Symlinks are not followed (no loops, nothing outside the root); each is counted as a skip. So are FIFOs,
    sockets and devices ("not a regular file") and names that are not UTF-8 ("undecodable name", the path
    shown with \\xNN escapes): such a name can be neither stored nor printed, and must not stop the run.
    """
    root = Path(root)
    out: list[FileEntry] = []
    stack = [""]
    while stack:
        dir_rel = stack.pop()
        dir_abs = os.path.join(root, dir_rel) if dir_rel else str(root)
        try:
            with os.scandir(dir_abs) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            continue  # vanished while walking
        except OSError as exc:
            skips.add(dir_rel or ".", "unreadable", str(exc))
            continue
        subdirs = []
        for entry in entries:
            rel = f"{dir_rel}/{entry.name}" if dir_rel else entry.name
            if not is_decodable(entry.name):
                skips.add(escaped_name(rel), UNDECODABLE, repr(os.fsencode(rel)))
                continue
            try:
                if entry.is_symlink():
                    if not matcher.is_ignored(rel, is_dir=False):
                        skips.add(rel, "symlink")
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if matcher.is_ignored(rel, is_dir=True):
                        continue
                    if os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                        continue  # a virtualenv under any name
                    subdirs.append(rel)
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                skips.add(rel, "unreadable", str(exc))
                continue
            if matcher.is_ignored(rel, is_dir=False):
                continue
            if not stat_mod.S_ISREG(st.st_mode):
                skips.add(rel, "not a regular file", file_kind(st.st_mode))
                continue
            out.append(FileEntry(rel, entry.path, st.st_size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    out.sort(key=lambda e: e.rel_path)
    return out


@dataclass(frozen=True)
class FileText:
    """A file read and decoded: text with '\\n' line ends (tokens masked, bad bytes replaced: nodes/file_text.py),
    hash of the raw bytes, and the (note, detail) of what decoding did to it."""

    entry: FileEntry
    text: str
    sha256: str
    notes: tuple[tuple[str, str], ...] = ()

    @property
    def last_modified(self) -> str:
        return iso_mtime(self.entry.mtime_ns)


def iso_mtime(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9, tz=timezone.utc).isoformat(timespec="seconds")


def hash_file(path: str, root: str | None = None) -> str | None:
    """sha256 of a file's bytes, or None if it cannot be read, is not a regular file (a FIFO must not block
    a freshness check) or, with `root`, lies outside it."""
    fh, _, _ = open_regular(path, root)
    if fh is None:
        return None
    try:
        with fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None


def _root_of(entry: FileEntry) -> str | None:
    """The root `entry.abs_path` was joined from (every FileEntry is `root/rel_path`), or None if it is not."""
    tail = os.sep + entry.rel_path.replace("/", os.sep)
    return entry.abs_path[:-len(tail)] if entry.abs_path.endswith(tail) else None


def read_text_file(entry: FileEntry, skips: SkipLog, hard_max_bytes: int = DEFAULT_HARD_MAX_BYTES) -> FileText | None:
    """Read and decode one file, or record why not (too-large, vanished, unreadable, binary, empty)."""
    if entry.size > hard_max_bytes:
        skips.add(entry.rel_path, "too-large", f"{entry.size} bytes > {hard_max_bytes}")
        return None
    # Never blocks: what the walk saw as a file may be a FIFO, socket or device by now, or a link out.
    fh, reason, detail = open_regular(entry.abs_path, _root_of(entry))
    if fh is None:
        if reason == MISSING:
            skips.add(entry.rel_path, "vanished")
        else:
            skips.add(entry.rel_path, reason, detail)
        return None
    try:
        with fh:
            data = fh.read(hard_max_bytes + 1)
    except OSError as exc:
        skips.add(entry.rel_path, UNREADABLE, str(exc))
        return None
    if len(data) > hard_max_bytes:
        skips.add(entry.rel_path, "too-large", f"grew past {hard_max_bytes} bytes while reading")
        return None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        skips.add(entry.rel_path, "binary")
        return None
    if (cls := content_class(entry.rel_path, data)) is not None:  # a secret or data (file_classes.py)
        skips.add(entry.rel_path, *cls)
        return None
    decoded = decode_file(data, notebook=is_notebook(entry.rel_path))
    if decoded.mostly_undecodable:
        skips.add(entry.rel_path, "binary", f"{decoded.replaced} of {len(decoded.text)} characters are not UTF-8")
        return None
    if not decoded.text.strip():
        skips.add(entry.rel_path, "empty")
        return None
    return FileText(entry, decoded.text, hashlib.sha256(data).hexdigest(), tuple(decoded.notes()))
