"""What changed between the working tree and the index's manifest: from stat alone (a walk), or for a few
known paths (a watcher event, a stale search hit). Stdlib, pathspec and SQLite only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from coderag.nodes.file_classes import RECHECKED_REASONS, RULES_VERSION
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.scan import FileEntry, SkipLog, walk
from coderag.store.state import STATUS_DIRTY, FileRecord, IndexState

# Skips that say nothing about the content: a chmod (which leaves size and mtime alone) or a file
# that reappears can make them readable, so they are tried again on every run.
UNREAD_STATUSES = frozenset({"unreadable", "vanished"})
RETRY_STATUSES = UNREAD_STATUSES | {STATUS_DIRTY}
FILE_CLASSES_KEY = "file_classes"  # meta: the file-class rules the indexed files were last checked under
# meta: the file-class rules under which the files skipped as RECHECKED_REASONS were last read again. A key of
# its own: an index is opened after an upgrade with its indexed files checked at once (CodeIndex.open), while
# its skipped files are read again by the next run's walk, which this key tells to.
SKIPS_RECHECKED_KEY = "skips_rechecked"


@dataclass
class ChangeSet:
    """What differs between the working tree and the manifest, from stat alone."""

    entries: list[FileEntry]
    candidates: list[FileEntry]  # new, or size/mtime differ: read and hash these
    unchanged: int
    removed: list[str]
    skips: SkipLog
    retried: frozenset[str] = frozenset()  # candidates only because they could not be read last time

    def pending(self) -> list[FileEntry]:
        """The candidates that are changes (`coderag status`): a file that could not be read is tried again
        by every run, but while it still cannot be opened there is nothing new to index."""
        return [e for e in self.candidates if e.rel_path not in self.retried or _can_open(e.abs_path)]


def _can_open(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # never blocks on a FIFO
        return True
    except OSError:
        return False


def retry_statuses(state: IndexState) -> frozenset[str]:
    """Manifest statuses read again though size and mtime are the same: RETRY_STATUSES, and while the index
    was last checked under older file-class rules, the skips a newer rule may let in (file_classes.py)."""
    if state.get_meta(SKIPS_RECHECKED_KEY) == RULES_VERSION or state.get_meta("fingerprint") is None:
        return RETRY_STATUSES  # a new index is checked under the current rules as it is built
    return RETRY_STATUSES | RECHECKED_REASONS


def _unchanged(rec: FileRecord | None, e: FileEntry, retry: frozenset[str]) -> bool:
    return rec is not None and rec.size == e.size and rec.mtime_ns == e.mtime_ns and rec.status not in retry


def detect_changes(root: Path, state: IndexState) -> ChangeSet:
    """The files of the working tree that are new or changed since the last index, and the indexed files
    that are gone: one walk of the tree (the ignore rules applied), each file's size and mtime compared with
    the manifest's. Nothing is read here; the run reads and hashes the candidates. A file is a candidate
    again, though its stat is the same, while it could not be read last time, or while the index was checked
    under older file-class rules that may have skipped it (`retry_statuses`)."""
    skips = SkipLog()
    entries = walk(root, IgnoreMatcher(root, skips=skips), skips)  # notes the secrets and data it never opens
    manifest = state.files()
    retry = retry_statuses(state)
    candidates, unchanged, retried = [], 0, set()
    for e in entries:
        rec = manifest.get(e.rel_path)
        if _unchanged(rec, e, retry):
            unchanged += 1
        else:
            candidates.append(e)
            if _unchanged(rec, e, retry - UNREAD_STATUSES):
                retried.add(e.rel_path)
    seen = {e.rel_path for e in entries}
    removed = sorted(p for p in manifest if p not in seen)
    return ChangeSet(entries, candidates, unchanged, removed, skips, frozenset(retried))


def changes_for_paths(root: Path, state: IndexState, paths: list[str]) -> ChangeSet:
    """A ChangeSet for a few known paths (a watcher event, a stale search hit), without walking the tree.

    A path that may not be read (nodes/safe_path.py: outside the root, in .coderag/, not a regular file,
    ignored, an undecodable name) or that goes through a link (the walk follows none) counts as removed."""
    from coderag.nodes.safe_path import IGNORED, MISSING, UNDECODABLE, RepoFiles, escaped_name

    files = RepoFiles(root, IgnoreMatcher(root))
    retry = retry_statuses(state)
    candidates, removed, entries, skips = [], [], [], SkipLog()
    for rel in sorted(set(paths)):
        abs_path = root / rel
        real, st, reason = files.check(rel)
        if real is None or real != os.path.join(files.real_root, rel):
            if reason == UNDECODABLE:  # never stored, and never to be: it cannot be encoded
                skips.add(escaped_name(rel), reason, repr(os.fsencode(rel)))
                continue
            if reason not in (MISSING, IGNORED):
                skips.add(rel, reason or "symlink")
            if state.file(rel) is not None:
                removed.append(rel)
            continue
        e = FileEntry(rel, str(abs_path), st.st_size, st.st_mtime_ns)
        entries.append(e)
        if not _unchanged(state.file(rel), e, retry):
            candidates.append(e)
    return ChangeSet(entries, candidates, len(entries) - len(candidates), removed, skips)
