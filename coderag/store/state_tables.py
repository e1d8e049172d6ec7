"""Tables of an index's SQLite file (store/state.py) that each serve one other component: the chunk-hash
embedding cache (nodes/embedding.py) and the docstore's key-value rows (store/kvstore.py). Mixed into
IndexState, they use its connection (`conn`), its lock (`lock`) and its `_rows_in`; stdlib only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator, Optional


def locked(fn):
    """The method holds the instance lock: one connection serves every thread of a resident process."""
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return fn(self, *args, **kwargs)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


class EmbeddingCacheTable:
    """The embedding cache: sha256(model + embedded text) -> float32 vector."""

    @locked
    def cached_vectors(self, keys: list[str]) -> dict[str, bytes]:
        return dict(self._rows_in("SELECT key, vector FROM embed_cache WHERE key IN ({marks})", keys))

    @locked
    def cache_vectors(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO embed_cache VALUES (?, ?)", items)

    @locked
    def forget_cached_vectors(self) -> None:
        """Drop every cached vector: the model they were made with is no longer the one the index is built with."""
        self.conn.execute("DELETE FROM embed_cache")

    @locked
    def seed_cache(self, other_db: str | Path) -> int:
        """Copy the embedding cache of another index's database into this one (keys already here are kept);
        returns how many vectors were added. Keys hash the model with the text, so vectors of another model
        are never reused. The eval seeds each snapshot of a repository from its siblings, which share most
        chunks."""
        before = self.conn.execute("SELECT COUNT(*) FROM embed_cache").fetchone()[0]
        self.conn.execute("ATTACH DATABASE ? AS seed", (str(Path(other_db).resolve()),))  # only read
        try:
            self.conn.execute("INSERT OR IGNORE INTO embed_cache SELECT key, vector FROM seed.embed_cache")
            self.conn.commit()
        finally:
            self.conn.execute("DETACH DATABASE seed")
        return self.conn.execute("SELECT COUNT(*) FROM embed_cache").fetchone()[0] - before


class DocstoreTable:
    """The docstore's nodes as raw key-value rows, by collection."""

    @locked
    def kv_put_many(self, collection: str, items: list[tuple[str, dict]]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)",
                              [(collection, k, json.dumps(v, ensure_ascii=False)) for k, v in items])

    @locked
    def kv_get(self, collection: str, key: str) -> Optional[dict]:
        row = self.conn.execute("SELECT value FROM kv WHERE collection=? AND key=?", (collection, key)).fetchone()
        return json.loads(row[0]) if row else None

    @locked
    def kv_get_all(self, collection: str) -> dict[str, dict]:
        rows = self.conn.execute("SELECT key, value FROM kv WHERE collection=?", (collection,))
        return {k: json.loads(v) for k, v in rows}

    def kv_items(self, collection: str, page: int = 1000) -> Iterator[tuple[str, dict]]:
        """Every (key, value) of a collection in key order, read `page` rows at a time: a docstore of
        ~100k nodes streams in bounded memory, where `kv_get_all` would hold it all. Each page is read
        under the lock; rows written meanwhile after the last key read are seen."""
        last, op = "", ">="  # the first page from the smallest key on, then after the last key read
        while True:
            with self.lock:  # a range on the primary key: each page is an index seek, not a scan from the start
                rows = self.conn.execute(f"SELECT key, value FROM kv WHERE collection=? AND key {op} ? ORDER BY key "
                                         "LIMIT ?", (collection, last, page)).fetchall()
            op = ">"
            for key, value in rows:
                yield key, json.loads(value)
            if len(rows) < page:
                return
            last = rows[-1][0]

    @locked
    def kv_delete(self, collection: str, key: str) -> bool:
        cur = self.conn.execute("DELETE FROM kv WHERE collection=? AND key=?", (collection, key))
        return cur.rowcount > 0
