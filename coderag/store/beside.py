"""A rebuild beside the index it replaces: an owner that builds its index again while it serves (`coderag index
--rebuild` through it; a model or chunking setting edited under it, or a chunking edited while no owner ran;
files that newer secret rules dropped, whose bytes the old store's files still hold) builds the new one in
`.coderag/next/` and goes on answering from the old one, whole, until the new one is complete; then swaps them.

Built in place, the index would answer "no chunks yet", then from BM25 alone, for as long as the vectors of
the changed chunks take (half an hour for 100k chunks on two cores when the chunking changed). Beside it, a
search never sees a part-built index; the cost is the disk of two indexes while the build runs (memory peaks
with the document model, beside or in place: eval/RESULTS.md, "An owner's rebuild beside the index").

The new index embeds through `next/previous.db`, a copy of the old index's embedding cache
(previous_cache.py), so a chunk that comes out the same is not embedded again; the copy is deleted at the swap.

The swap can be killed half way: `next/ready` is written once the new index is complete and closed, and
whoever next takes the writer lock (`settle`: an owner's start, `coderag index`, `CodeIndex.open`) finishes a
swap it finds marked ready, or deletes a build it finds unmarked (killed before its end: the old index is
whole, and its fingerprint starts the rebuild again where the settings still ask for one). Each step of the
swap can be run again.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from coderag.base.config import Settings, StoreMode
from coderag.base.paths import DB_FILE_SUFFIXES, DB_NAME, SHARD_NAME
from coderag.store.previous_cache import PREVIOUS_DB_NAME

NEXT_NAME = "next"  # the folder in .coderag/ where the new index is built
READY_NAME = "ready"  # in next/: the new index is complete and closed; the swap may start, or go on
ROOM_FACTOR = 1.5  # free disk a build beside needs, over the size of the index it replaces

log = logging.getLogger("coderag.service")


def can_build_beside(settings: Settings, idx: Path) -> bool:
    """Whether a rebuild can run beside the index in folder `idx`: with the embedded store in its default place
    (a shard set elsewhere, `store.path`, or a Qdrant server holds one collection per index, which a second
    build would write into) and room on the disk for a second index (`room_beside`). Where it cannot, the index
    is built again in place."""
    if settings.store.mode != StoreMode.Embedded or settings.store.path:
        return False
    if room_beside(idx):
        return True
    log.warning("too little free disk for a second index beside %s: it is built again in place (searches get "
                "BM25 answers until its vectors are computed)", idx)
    return False


def room_beside(idx: Path) -> bool:
    """Whether the disk of index folder `idx` has room for a second index beside the one in it, by the size of
    that one (ROOM_FACTOR over it: a new chunking may make more chunks). Built in place instead, the index frees
    the old shard first."""
    used = 0
    for folder, _, names in os.walk(idx):  # a folder or file the store replaces meanwhile is passed over
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            used += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return shutil.disk_usage(idx).free > used * ROOM_FACTOR


def next_folder(idx: Path) -> Path:
    return idx / NEXT_NAME


def prepare(idx: Path) -> Path:
    """An empty `next/` in index folder `idx` (a build left there before is deleted), its previous.db holding
    the embedding cache of the index in `idx`. Returns the folder. The caller holds the writer lock."""
    from coderag.store.state import IndexState

    drop(idx)
    nxt = next_folder(idx)
    nxt.mkdir(mode=0o700)
    if (idx / DB_NAME).is_file():
        cache = IndexState(nxt / PREVIOUS_DB_NAME)
        try:
            cache.seed_cache(idx / DB_NAME)  # read beside the old index's writer: SQLite's WAL allows it
        finally:
            cache.close()
    return nxt


def mark_ready(idx: Path) -> None:
    """The new index in `next/` is complete and closed: from here on the swap is finished, not undone. Its
    database is first made one file (its WAL folded in), so that the swap moves it in one rename; it is put
    back in WAL mode when it is next opened (IndexState)."""
    import sqlite3

    nxt = next_folder(idx)
    conn = sqlite3.connect(str(nxt / DB_NAME))
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    (nxt / READY_NAME).touch(mode=0o600)


def swap(idx: Path) -> None:
    """Put the new index of `next/` in place of the one in `idx` (both closed), then delete `next/`. Run
    again after a kill, it goes on from where it stopped."""
    nxt = next_folder(idx)
    if (nxt / DB_NAME).is_file():
        # The old database's WAL goes before the new file takes its name: SQLite would read it into the new one.
        for suffix in DB_FILE_SUFFIXES[1:]:
            (idx / (DB_NAME + suffix)).unlink(missing_ok=True)
        (nxt / DB_NAME).replace(idx / DB_NAME)
    if (nxt / SHARD_NAME).is_dir():
        shutil.rmtree(idx / SHARD_NAME, ignore_errors=True)
        (nxt / SHARD_NAME).replace(idx / SHARD_NAME)
    shutil.rmtree(nxt, ignore_errors=True)  # previous.db and the mark last


def settle(idx: Path) -> None:
    """For whoever has just taken the writer lock of `idx`, before it reads the index: finish a swap marked
    ready, or delete a build beside the index that never completed."""
    nxt = next_folder(idx)
    if not nxt.is_dir():
        return
    if (nxt / READY_NAME).is_file():
        log.warning("%s: finishing the swap of an index built again beside it, stopped half way", idx)
        swap(idx)
    else:
        log.warning("%s: deleting an index being built again beside it, stopped before its end", idx)
        drop(idx)


def drop(idx: Path) -> None:
    """Delete a build beside the index that did not complete (failed, stopped, or started over)."""
    shutil.rmtree(next_folder(idx), ignore_errors=True)
