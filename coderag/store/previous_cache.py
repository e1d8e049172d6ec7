"""The embedding cache of an index being rebuilt: its vectors serve the rebuild, and nothing else of it stays.

A rebuild (`coderag index --rebuild`, an owner opening an index of other settings, the eval after a
splitter change) starts from an empty database, but most chunks it makes are the ones it made before,
word for word: embedding them again is the whole cost of a rebuild (half an hour for 100k chunks on two
cores). So the old database is set aside as `previous.db` and cut down to its embedding cache, the rest
of it (file texts, manifest) dropped with SQLite's secure_delete, which overwrites what it frees. The new
index looks a vector up there when its own cache misses and copies the vectors it uses; once a run of
`coderag index` or an owner's build completes, the file is deleted. So the new cache holds only vectors
of chunks the new index holds, and a killed rebuild keeps no more than the cache it started from. Keys
hash the model with the text: another model's vectors are never used.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable

from coderag.base.paths import DB_FILE_SUFFIXES, DB_NAME, remove_index_files
from coderag.store.state import IndexState

PREVIOUS_DB_NAME = "previous.db"


def set_aside(idx: Path) -> None:
    """Clear index folder `idx` for a rebuild, keeping its embedding cache as previous.db. A previous.db
    already there (a rebuild killed before) is kept and given the vectors of the partial index too."""
    previous, current = idx / PREVIOUS_DB_NAME, idx / DB_NAME
    if not current.is_file():
        remove_index_files(idx)  # nothing to keep here (a shard alone, or nothing)
    elif previous.is_file():
        try:
            kept = IndexState(previous)  # (which gives it back empty tables: they go again below)
            try:
                kept.seed_cache(current)
            finally:
                kept.close()
        except sqlite3.DatabaseError:
            pass  # the partial index's vectors are only a saving
        remove_index_files(idx)
    else:
        forget(idx)  # a stray log of an older previous.db must never be replayed into this one
        remove_index_files(idx, keep_db_as=PREVIOUS_DB_NAME)
    if previous.is_file():
        try:
            _keep_only_the_cache(previous)
        except sqlite3.DatabaseError:  # not a database of ours: the rebuild embeds everything
            forget(idx)


def forget(idx: Path) -> None:
    """Delete previous.db (a build has completed: every chunk that could use it has)."""
    for suffix in DB_FILE_SUFFIXES:
        (idx / (PREVIOUS_DB_NAME + suffix)).unlink(missing_ok=True)


def _keep_only_the_cache(db: Path) -> None:
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("PRAGMA secure_delete=ON")  # freed pages are overwritten, not left readable
        conn.execute("SELECT key, vector FROM embed_cache LIMIT 1")  # raises when there is no cache
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name != 'embed_cache'")]
        for name in names:
            conn.execute(f'DROP TABLE "{name}"')
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the zeroed pages into the file, the log emptied
    finally:
        conn.close()


class CarriedCache:
    """An index's embedding cache (`state`: cached_vectors / cache_vectors) in front of previous.db's:
    a key missing from the first is looked up in the second, and a vector found there is copied over."""

    def __init__(self, state: IndexState, previous: Path) -> None:
        self.state = state
        self._previous = IndexState(previous, readonly=True)

    def cached_vectors(self, keys: list[str]) -> dict[str, bytes]:
        hits = self.state.cached_vectors(keys)
        missing = [k for k in keys if k not in hits]
        found = self._previous.cached_vectors(missing) if missing else {}
        if found:
            self.state.cache_vectors(found.items())
            hits.update(found)
        return hits

    def cache_vectors(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.state.cache_vectors(items)


def embedding_cache(state, db_path: Path):
    """What an ingestion embeds through: the index's own cache, or, while previous.db lies beside its
    database (a rebuild under way), a CarriedCache over both."""
    previous = Path(db_path).with_name(PREVIOUS_DB_NAME)
    return CarriedCache(state, previous) if previous.is_file() else state
