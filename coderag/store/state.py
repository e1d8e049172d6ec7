"""Index state in one SQLite file: file manifest, node docstore (KV), chunk-hash embedding cache, dedup table
(the docstore's and the cache's rows: state_tables.py).

Everything a batch of files changes is committed in one transaction, after its vectors are in the
shard, so a killed run leaves each file either fully old or fully new, and the next run finishes it.
Stdlib only: `coderag status` and no-change runs open it without LlamaIndex.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Optional

from coderag.store.state_tables import DocstoreTable, EmbeddingCacheTable, locked

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


class IndexState(EmbeddingCacheTable, DocstoreTable):
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

    @locked
    def commit(self) -> None:
        with self.lock:
            try:
                self.conn.commit()
            except BaseException:
                self._manifest = None  # SQLite may have rolled back: read the rows again
                raise

    @locked
    def close(self) -> None:
        """Close; anything not committed is rolled back (a failed batch leaves no half-written file)."""
        self._manifest = None
        self.conn.rollback()
        self.conn.close()

    # -- meta --
    @locked
    def get_meta(self, key: str) -> Optional[str]:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @locked
    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- manifest --
    @locked
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

    @locked
    def files(self) -> dict[str, FileRecord]:
        manifest = self._cached_manifest()
        if manifest is not None:
            return dict(manifest)
        rows = self.conn.execute(f"SELECT {_FILE_COLUMNS} FROM files")
        return {r[0]: FileRecord(*r) for r in rows}

    @locked
    def file(self, path: str) -> Optional[FileRecord]:
        manifest = self._cached_manifest()
        if manifest is not None:
            return manifest.get(path)
        r = self.conn.execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE path=?", (path,)).fetchone()
        return FileRecord(*r) if r else None

    @locked
    def files_of(self, paths: Iterable[str]) -> dict[str, FileRecord]:
        """Manifest rows of these paths (from memory, or one query; a search checks every file it answers
        from)."""
        manifest = self._cached_manifest()
        if manifest is not None:
            return {p: manifest[p] for p in dict.fromkeys(paths) if p in manifest}
        rows = self._rows_in(f"SELECT {_FILE_COLUMNS} FROM files WHERE path IN ({{marks}})", paths)
        return {r[0]: FileRecord(*r) for r in rows}

    @locked
    def put_file(self, rec: FileRecord) -> None:
        self.conn.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?)",
                          (rec.path, rec.size, rec.mtime_ns, rec.sha256, rec.language, rec.status, rec.n_nodes,
                           rec.n_leaves))
        if isinstance(self._manifest, dict):
            self._manifest[rec.path] = rec
            if len(self._manifest) > MANIFEST_CACHE_MAX:
                self._manifest = False

    @locked
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

    @locked
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
    @locked
    def add_inflight(self, paths: Iterable[str]) -> None:
        self.conn.executemany("INSERT OR IGNORE INTO inflight VALUES (?)", [(p,) for p in paths])

    @locked
    def clear_inflight(self, paths: Iterable[str]) -> None:
        self.conn.executemany("DELETE FROM inflight WHERE path=?", [(p,) for p in paths])

    @locked
    def inflight(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT path FROM inflight ORDER BY path")]

    @locked
    def has_searchable_file(self) -> bool:
        """Whether any file's chunks are committed (a first build has written its first batch)."""
        marks = ",".join("?" * len(SEARCHABLE))
        row = self.conn.execute(f"SELECT 1 FROM files WHERE status IN ({marks}) LIMIT 1", SEARCHABLE).fetchone()
        return row is not None

    @locked
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

    @locked
    def skip_counts(self) -> dict[str, int]:
        """Files read and left out of the index, by reason (their manifest status: secret, data, binary, ...).
        Files the walk never opens (secrets and data by name, symlinks) have no row: the walk counts them."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        rows = self.conn.execute(f"SELECT status, COUNT(*) FROM files WHERE status NOT IN ({marks}) GROUP BY status",
                                 (*SEARCHABLE, STATUS_DIRTY))
        return dict(rows.fetchall())

    @locked
    def skipped_files(self) -> list[tuple[str, str]]:
        """(path, reason) of each file that skip_counts counts, by path."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        rows = self.conn.execute(f"SELECT path, status FROM files WHERE status NOT IN ({marks}) ORDER BY path",
                                 (*SEARCHABLE, STATUS_DIRTY))
        return [(path, status) for path, status in rows]

    # -- notes: what decoding did to an indexed file's text (nodes/file_text.py: a token masked, bad bytes) --
    @locked
    def put_notes(self, path: str, notes: Iterable[tuple[str, str]]) -> None:
        """Replace the notes of `path` (none: it was indexed as it is, or not indexed)."""
        self.conn.execute("DELETE FROM notes WHERE path=?", (path,))
        self.conn.executemany("INSERT OR REPLACE INTO notes VALUES (?, ?, ?)", [(path, n, d) for n, d in notes])

    @locked
    def noted(self, note: str) -> set[str]:
        """The files that carry `note`."""
        return {r[0] for r in self.conn.execute("SELECT path FROM notes WHERE note=?", (note,))}

    @locked
    def note_counts(self) -> dict[str, int]:
        """Indexed files by note ("secret masked": 2, ...). An index written before notes existed has none."""
        marks = ",".join("?" * (len(SEARCHABLE) + 1))
        try:
            rows = self.conn.execute(f"SELECT n.note, COUNT(*) FROM notes n JOIN files f ON f.path = n.path "
                                     f"WHERE f.status IN ({marks}) GROUP BY n.note", (*SEARCHABLE, STATUS_DIRTY))
            return dict(rows.fetchall())
        except sqlite3.OperationalError:  # no such table: opened read-only, never written by this coderag
            return {}

    # -- dedup table --
    @locked
    def copies(self, chunk_hash: str) -> tuple[int, Optional[str]]:
        """(how many indexed copies of this content exist, the canonical node id)."""
        row = self.conn.execute("SELECT COUNT(*), MIN(CASE WHEN duplicate_of IS NULL THEN node_id END) FROM chunks "
                                "WHERE hash=? AND duplicate_of IS NULL", (chunk_hash,)).fetchone()
        return row[0], row[1]

    @locked
    def add_chunk(self, node_id: str, chunk_hash: str, file_path: str, start: int, end: int,
                  duplicate_of: Optional[str]) -> None:
        self.conn.execute("INSERT OR REPLACE INTO chunks VALUES (?,?,?,?,?,?)",
                          (node_id, chunk_hash, file_path, start, end, duplicate_of))

    @locked
    def dependents(self, file_path: str) -> set[str]:
        """Files whose chunks are recorded as duplicates of a chunk in `file_path`."""
        rows = self.conn.execute(
            "SELECT DISTINCT d.file_path FROM chunks d JOIN chunks c ON d.duplicate_of = c.node_id "
            "WHERE c.file_path=? AND d.file_path!=?", (file_path, file_path))
        return {r[0] for r in rows}

    @locked
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
    @locked
    def put_line_tokens(self, path: str, sha256: str, encoding: str, counts: bytes) -> None:
        self.conn.execute("INSERT OR REPLACE INTO line_tokens VALUES (?, ?, ?, ?)", (path, sha256, encoding, counts))

    @locked
    def line_tokens_of(self, paths: Iterable[str], encoding: str) -> dict[str, tuple[str, bytes]]:
        """path -> (sha256 of the content they were counted from, counts) for those of `paths` that have them."""
        rows = self._rows_in("SELECT path, sha256, counts FROM line_tokens WHERE encoding = ? AND path IN ({marks})",
                             paths, (encoding,))
        return {path: (sha, blob) for path, sha, blob in rows}

    @locked
    def current_line_tokens(self, encoding: str, limit: int) -> list[tuple[str, str, bytes]]:
        """(path, sha256, counts) of up to `limit` files whose counts match the manifest (to preload them)."""
        rows = self.conn.execute("SELECT l.path, l.sha256, l.counts FROM line_tokens l JOIN files f ON f.path = l.path "
                                 "AND f.sha256 = l.sha256 WHERE l.encoding = ? LIMIT ?", (encoding, limit))
        return [tuple(r) for r in rows]

    @locked
    def without_line_tokens(self, encoding: str) -> list[tuple[str, str]]:
        """(path, sha256) of searchable files whose line counts are missing or out of date."""
        rows = self.conn.execute(
            "SELECT f.path, f.sha256 FROM files f LEFT JOIN line_tokens l ON l.path = f.path AND "
            f"l.sha256 = f.sha256 AND l.encoding = ? WHERE f.status IN ({','.join('?' * len(SEARCHABLE))}) "
            "AND f.sha256 IS NOT NULL AND l.path IS NULL ORDER BY f.path", [encoding, *SEARCHABLE])
        return [tuple(r) for r in rows]
