"""What changed between the working tree and the index's manifest: from stat alone (a walk), or for a few
known paths (a watcher event, a stale search hit). Stdlib, pathspec and SQLite only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.scan import FileEntry, SkipLog, walk
from coderag.store.state import STATUS_DIRTY, IndexState

# Skips that say nothing about the content: a chmod (which leaves size and mtime alone) or a file
# that reappears can make them readable, so they are tried again on every run.
RETRY_STATUSES = frozenset({"unreadable", "vanished", STATUS_DIRTY})


@dataclass
class ChangeSet:
    """What differs between the working tree and the manifest, from stat alone."""

    entries: list[FileEntry]
    candidates: list[FileEntry]  # new, or size/mtime differ: read and hash these
    unchanged: int
    removed: list[str]
    skips: SkipLog


def detect_changes(root: Path, state: IndexState) -> ChangeSet:
    skips = SkipLog()
    entries = walk(root, IgnoreMatcher(root, skips=skips), skips)  # notes the secrets and data it never opens
    manifest = state.files()
    candidates, unchanged = [], 0
    for e in entries:
        rec = manifest.get(e.rel_path)
        if rec is not None and rec.size == e.size and rec.mtime_ns == e.mtime_ns and rec.status not in RETRY_STATUSES:
            unchanged += 1
        else:
            candidates.append(e)
    seen = {e.rel_path for e in entries}
    removed = sorted(p for p in manifest if p not in seen)
    return ChangeSet(entries, candidates, unchanged, removed, skips)


def changes_for_paths(root: Path, state: IndexState, paths: list[str]) -> ChangeSet:
    """A ChangeSet for a few known paths (a watcher event, a stale search hit), without walking the tree.

    A path that may not be read (nodes/safe_path.py: outside the root, in .coderag/, not a regular file,
    ignored, an undecodable name) or that goes through a link (the walk follows none) counts as removed."""
    from coderag.nodes.safe_path import IGNORED, MISSING, UNDECODABLE, RepoFiles, escaped_name

    files = RepoFiles(root, IgnoreMatcher(root))
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
        rec = state.file(rel)
        if rec is None or rec.size != e.size or rec.mtime_ns != e.mtime_ns or rec.status in RETRY_STATUSES:
            candidates.append(e)
    return ChangeSet(entries, candidates, len(entries) - len(candidates), removed, skips)
