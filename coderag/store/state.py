"""Index state in one SQLite file: file manifest, node docstore (KV), chunk-hash embedding cache, dedup table.

Everything a batch of files changes is committed in one transaction, after its vectors are in the
shard, so a killed run leaves each file either fully old or fully new, and the next run finishes it.
Stdlib only: `coderag status` and no-change runs open it without LlamaIndex.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator, Optional

SCHEMA_VERSION = "1"
STATUS_INDEXED = "indexed"
STATUS_SPARSE = "sparse"  # chunks searchable by BM25; dense vectors still to come
STATUS_DIRTY = "dirty"  # a duplicate's canonical chunk went away: re-index this file
SEARCHABLE = (STATUS_INDEXED, STATUS_SPARSE)
# meta: 2 = stored leaves are slim JSON (`_node`); 3 = and their payload holds the parent id (light nodes)
STORE_FORMAT_KEY, STORE_FORMAT = "store_format", "3"
LINE_TOKENS_ENCODING = "cl100k_base"  # the tokenizer the line_tokens table counts in (payload budgets)

_IN_BATCH = 500  # values per `IN (...)` query, under SQLite's bound-parameter limit
MANIFEST_CACHE_MAX = 200_000  # manifest rows a writable IndexState keeps in memory (~250 B each)
_FILE_COLUMNS = "path, size, mtime_ns, sha256, language, status, n_nodes, n_leaves"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT,
    language TEXT, status TEXT NOT NULL, n_nodes INTEGER NOT NULL DEFAULT 0, n_leaves INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS kv (collection TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (collection, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS embed_cache (key TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    node_id TEXT PRIMARY KEY, hash TEXT NOT NULL, file_path TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, duplicate_of TEXT
);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks(file_path);
CREATE INDEX IF NOT EXISTS chunks_dup ON chunks(duplicate_of);
CREATE TABLE IF NOT EXISTS inflight (path TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS line_tokens (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, encoding TEXT NOT NULL,
    counts BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS notes (path TEXT NOT NULL, note TEXT NOT NULL, detail TEXT NOT NULL,
    PRIMARY KEY (path, note)) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class FileRecord:
    path: str
    size: int
    mtime_ns: int
    sha256: Optional[str]
    language: Optional[str]
    status: str
    n_nodes: int
    n_leaves: int


def _locked(fn):
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return fn(self, *args, **kwargs)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


class IndexState:
    """The SQLite side of an index. Writes are buffered in a transaction until `commit()`.

    One connection serves every thread of a resident process; each method holds the instance lock.
    """

    def __init__(self, db_path: str | Path, readonly: bool = False) -> None:
        self.lock = threading.RLock()
        self.path = Path(db_path)
        self.readonly = readonly
        # Every manifest row, read on first need and then kept in step with this object's writes; a search
        # looks up tens of files, one SQL query each otherwise, in a search of a few ms. Only where this
        # object is the manifest's one writer (writable, under the index's writer lock); None until read,
        # and False for a manifest of more than MANIFEST_CACHE_MAX files (then every lookup is a query).
        self._manifest: Optional[dict[str, FileRecord]] | bool = None
        if readonly:
            self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self.conn = sqlite3.connect(str(self.path), check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            self.conn.commit()

    def _rows_in(self, sql: str, values: Iterable, params: tuple = ()) -> Iterable[tuple]:
        """Rows of `sql` whose `{marks}` is a parameter list of `values` (distinct), run in parts under SQLite's
        bound-parameter limit; `params` are bound before them. Callers hold the lock."""
        values = list(dict.fromkeys(values))
        for i in range(0, len(values), _IN_BATCH):
            part = values[i:i + _IN_BATCH]
            yield from self.conn.execute(sql.format(marks=",".join("?" * len(part))), [*params, *part])

    @_locked
    def commit(self) -> None:
        with self.lock:
            try:
                self.conn.commit()
            except BaseException:
                self._manifest = None  # SQLite may have rolled back: read the rows again
                raise

    @_locked
    def close(self) -> None:
        """Close; anything not committed is rolled back (a failed batch leaves no half-written file)."""
        self._manifest = None
        self.conn.rollback()
        self.conn.close()

    # -- meta --
    @_locked
    def get_meta(self, key: str) -> Optional[str]:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @_locked
    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- manifest --
    @_locked
    def reload(self) -> None:
        """Forget the manifest held in memory, for a caller that changed the tables by other means (SQL on
        `conn`); the next lookup reads them again."""
        self._manifest = None

    def _cached_manifest(self) -> Optional[dict[str, FileRecord]]:
        """The manifest in memory (see __init__), or None where it is not kept. Callers hold the lock."""
        if self._manifest is None and not self.readonly:
            rows = self.conn.execute(f"SELECT {_FILE_COLUMNS} FROM files LIMIT ?", (MANIFEST_CACHE_MAX + 1,))
            manifest = {r[0]: FileRecord(*r) for r in rows}
            self._manifest = manifest if len(manifest) <= MANIFEST_CACHE_MAX else False
        return self._manifest if isinstance(self._manifest, dict) else None

    @_locked
    def files(self) -> dict[str, FileRecord]:
        manifest = self._cached_manifest()
        if manifest is not None:
            return dict(manifest)
        rows = self.conn.execute(f"SELECT {_FILE_COLUMNS} FROM files")
        return {r[0]: FileRecord(*r) for r in rows}

    @_locked
    def file(self, path: str) -> Optional[FileRecord]:
        manifest = self._cached_manifest()
        if manifest is not None:
            return manifest.get(path)
        r = self.conn.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE path=?", (path,)).fetchone()
        return FileRecord(*r) if r else None

    @_locked
    def files_of(self, paths: Iterable[str]) -> dict[str, FileRecord]:
        """Manifest rows of these paths (from memory, or one query; a search checks every file it answers
        from)."""
        manifest = self._cached_manifest()
        if manifest is not None:
            return {p: manifest[p] for p in dict.fromkeys(paths) if p in manifest}
        rows = self._rows_in(f"SELECT {_FILE_COLUMNS} FROM files WHERE path IN ({{marks}})", paths)
        return {r[0]: FileRecord(*r) for r in rows}

    @_locked
    def put_file(self, rec: FileRecord) -> None:
        self.conn.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?)",
                          (rec.path, rec.size, rec.mtime_ns, rec.sha256, rec.language, rec.status, rec.n_nodes,
                           rec.n_leaves))
        if isinstance(self._manifest, dict):
            self._manifest[rec.path] = rec
            if len(self._manifest) > MANIFEST_CACHE_MAX:
                self._manifest = False

    @_locked
    def delete_file(self, path: str, keep_record: bool = False) -> None:
        """Forget a file's chunks, and its manifest row unless `keep_record` (a file being re-indexed keeps
        the row of what its searchable points say until the new one is written)."""
        if not keep_record:
            self.conn.execute("DELETE FROM files WHERE path=?", (path,))
            self.conn.execute("DELETE FROM line_tokens WHERE path=?", (path,))
            self.conn.execute("DELETE FROM notes WHERE path=?", (path,))
            if isinstance(self._manifest, dict):
                self._manifest.pop(path, None)
        self.conn.execute("DELETE FROM chunks WHERE file_path=?", (path,))

    @_locked
    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Make the next run re-index these files even though their content did not change."""
        paths = list(paths)
        self.conn.executemany("UPDATE files SET status=? WHERE path=?", [(STATUS_DIRTY, p) for p in paths])
        if isinstance(self._manifest, dict):
            for p in paths:
                rec = self._manifest.get(p)
                if rec is not None:
                    self._manifest[p] = replace(rec, status=STATUS_DIRTY)

    # -- files whose vectors may be in the shard without a committed manifest entry --
    @_locked
    def add_inflight(self, paths: Iterable[str]) -> None:
        self.conn.executemany("INSERT OR IGNORE INTO inflight VALUES (?)", [(p,) for p in paths])

    @_locked
    def clear_inflight(self, paths: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM inflight WHERE path=?", [(p,) for p in paths])

    @_locked
    def inflight(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT path FROM inflight ORDER BY path")]

    @_locked
    def has_searchable_file(self) -> bool:
        """Whether any file's chunks are committed (a first build has written its first batch)."""
        marks = ",".join("?" * len(SEARCHABLE))
        row = self.conn.execute(f"SELECT 1 FROM files WHERE status IN ({marks}) LIMIT 1", SEARCHABLE).fetchone()
        return row is not None

    @_locked
    def counts(self) -> dict[str, int]:
        q = self.conn.execute
        return {
            "files": q("SELECT COUNT(*) FROM files WHERE status IN (?, ?)", SEARCHABLE).fetchone()[0],
            "pending_dense": q("SELECT COUNT(*) FROM files WHERE status=?", (STATUS_SPARSE,)).fetchone()[0],
            "skipped": q("SELECT COUNT(*) FROM files WHERE status NOT IN (?, ?)", SEARCHABLE).fetchone()[0],
            "nodes": q("SELECT COALESCE(SUM(n_nodes),0) FROM files").fetchone()[0],
            "leaves": q("SELECT COALESCE(SUM(n_leaves),0) FROM files").fetchone()[0],
            "duplicates": q("SELECT COUNT(*) FROM chunks WHERE duplicate_of IS NOT NULL").fetchone()[0],
        }

    @_locked
    def skip_counts(self) -> dict[str, int]:
        """Files read and left out of the index, by reason (their manifest status: secret, data, binary, ...).
        Files the walk never opens (secrets and data by name, symlinks) have no row: the walk counts them."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        rows = self.conn.execute(f"SELECT status, COUNT(*) FROM files WHERE status NOT IN ({marks}) GROUP BY status",
                                 (*SEARCHABLE, STATUS_DIRTY))
        return dict(rows.fetchall())

    @_locked
    def skipped_files(self) -> list[tuple[str, str]]:
        """(path, reason) of each file that skip_counts counts, by path."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        rows = self.conn.execute(f"SELECT path, status FROM files WHERE status NOT IN ({marks}) ORDER BY path",
                                 (*SEARCHABLE, STATUS_DIRTY))
        return [(path, status) for path, status in rows]

    # -- notes: what decoding did to an indexed file's text (nodes/file_text.py: a token masked, bad bytes) --
    @_locked
    def put_notes(self, path: str, notes: Iterable[tuple[str, str]]) -> None:
        """Replace the notes of `path` (none: it was indexed as it is, or not indexed)."""
        self.conn.execute("DELETE FROM notes WHERE path=?", (path,))
        self.conn.executemany("INSERT OR REPLACE INTO notes VALUES (?, ?, ?)", [(path, n, d) for n, d in notes])

    @_locked
    def noted(self, note: str) -> set[str]:
        """The files that carry `note`."""
        return {r[0] for r in self.conn.execute("SELECT path FROM notes WHERE note=?", (note,))}

    @_locked
    def note_counts(self) -> dict[str, int]:
        """Indexed files by note ("secret masked": 2, ...). An index written before notes existed has none."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        try:
            rows = self.conn.execute(f"SELECT n.note, COUNT(*) FROM notes n JOIN files f ON f.path = n.path "
                                     f"WHERE f.status IN ({marks}) GROUP BY n.note", (*SEARCHABLE, STATUS_DIRTY))
            return dict(rows.fetchall())
        except sqlite3.OperationalError:  # no such table: opened read-only, never written by this coderag
            return {}

    # -- embedding cache: sha256(model + embedded text) -> float32 vector --
    @_locked
    def cached_vectors(self, keys: list[str]) -> dict[str, bytes]:
        return dict(self._rows_in("SELECT key, vector FROM embed_cache WHERE key IN ({marks})", keys))

    @_locked
    def cache_vectors(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO embed_cache VALUES (?, ?)", items)

    @_locked
    def forget_cached_vectors(self) -> None:
        """Drop every cached vector: the model they were made with is no longer the one the index is built with."""
        self.conn.execute("DELETE FROM embed_cache")

    @_locked
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

    # -- dedup table --
    @_locked
    def copies(self, chunk_hash: str) -> tuple[int, Optional[str]]:
        """(how many indexed copies of this content exist, the canonical node id)."""
        row = self.conn.execute("SELECT COUNT(*), MIN(CASE WHEN duplicate_of IS NULL THEN node_id END) FROM chunks "
                                "WHERE hash=? AND duplicate_of IS NULL", (chunk_hash,)).fetchone()
        return row[0], row[1]

    @_locked
    def add_chunk(self, node_id: str, chunk_hash: str, file_path: str, start: int, end: int,
                  duplicate_of: Optional[str]) -> None:
        self.conn.execute("INSERT OR REPLACE INTO chunks VALUES (?,?,?,?,?,?)",
                          (node_id, chunk_hash, file_path, start, end, duplicate_of))

    @_locked
    def dependents(self, file_path: str) -> set[str]:
        """Files whose chunks are recorded as duplicates of a chunk in `file_path`."""
        rows = self.conn.execute(
            "SELECT DISTINCT d.file_path FROM chunks d JOIN chunks c ON d.duplicate_of = c.node_id "
            "WHERE c.file_path=? AND d.file_path!=?", (file_path, file_path))
        return {r[0] for r in rows}

    @_locked
    def other_locations_of(self, node_ids: Iterable[str]) -> dict[str, list[tuple[str, int, int]]]:
        """Where the copies of these chunks are (file, start, end), by the node id of the chunk kept: one query;
        nodes without copies are left out."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        for dup, path, start, end in self._rows_in("SELECT duplicate_of, file_path, start_line, end_line FROM chunks "
                                                   "WHERE duplicate_of IN ({marks}) ORDER BY file_path, start_line",
                                                   node_ids):
            out.setdefault(dup, []).append((path, start, end))
        return out

    # -- token counts of each file's lines (postprocessors/line_tokens.py), tied to the content's sha256 --
    @_locked
    def put_line_tokens(self, path: str, sha256: str, encoding: str, counts: bytes) -> None:
        self.conn.execute("INSERT OR REPLACE INTO line_tokens VALUES (?, ?, ?, ?)", (path, sha256, encoding, counts))

    @_locked
    def line_tokens_of(self, paths: Iterable[str], encoding: str) -> dict[str, tuple[str, bytes]]:
        """path -> (sha256 of the content they were counted from, counts) for those of `paths` that have them."""
        rows = self._rows_in("SELECT path, sha256, counts FROM line_tokens WHERE encoding = ? AND path IN ({marks})",
                             paths, (encoding,))
        return {path: (sha, blob) for path, sha, blob in rows}

    @_locked
    def current_line_tokens(self, encoding: str, limit: int) -> list[tuple[str, str, bytes]]:
        """(path, sha256, counts) of up to `limit` files whose counts match the manifest (to preload them)."""
        rows = self.conn.execute("SELECT l.path, l.sha256, l.counts FROM line_tokens l JOIN files f ON f.path = l.path "
                                 "AND f.sha256 = l.sha256 WHERE l.encoding = ? LIMIT ?", (encoding, limit))
        return [tuple(r) for r in rows]

    @_locked
    def without_line_tokens(self, encoding: str) -> list[tuple[str, str]]:
        """(path, sha256) of searchable files whose line counts are missing or out of date."""
        rows = self.conn.execute(
            "SELECT f.path, f.sha256 FROM files f LEFT JOIN line_tokens l ON l.path = f.path AND "
            f"l.sha256 = f.sha256 AND l.encoding = ? WHERE f.status IN ({','.join('?' * len(SEARCHABLE))}) "
            "AND f.sha256 IS NOT NULL AND l.path IS NULL ORDER BY f.path", [encoding, *SEARCHABLE])
        return [tuple(r) for r in rows]

    # -- raw KV for the docstore --
    @_locked
    def kv_put_many(self, collection: str, items: list[tuple[str, dict]]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)",
                              [(collection, k, json.dumps(v, ensure_ascii=False)) for k, v in items])

    @_locked
    def kv_get(self, collection: str, key: str) -> Optional[dict]:
        row = self.conn.execute("SELECT value FROM kv WHERE collection=? AND key=?", (collection, key)).fetchone()
        return json.loads(row[0]) if row else None

    @_locked
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

    @_locked
    def kv_delete(self, collection: str, key: str) -> bool:
        cur = self.conn.execute("DELETE FROM kv WHERE collection=? AND key=?", (collection, key))
        return cur.rowcount > 0
