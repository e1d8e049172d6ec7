"""A rebuild embeds only what its old index never embedded, and keeps nothing else of it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files
from coderag.base.config import Settings
from coderag.base.paths import DB_NAME, index_dir
from coderag.store.previous_cache import PREVIOUS_DB_NAME, forget, set_aside

MARKER = "zebra_quartz_marker_7781"  # a word of one file's text, to look for in what a rebuild keeps
MARKED_FILE = "src/marked.py"
MARKED = f'def {MARKER}():\n    """Return the marker of this test."""\n    return "{MARKER}"\n'


def _cache_keys(root: Path) -> set[str]:
    conn = sqlite3.connect(str(index_dir(root) / DB_NAME))
    try:
        return {r[0] for r in conn.execute("SELECT key FROM embed_cache")}
    finally:
        conn.close()


def _previous_files(root: Path) -> list[Path]:
    return sorted(index_dir(root).glob(PREVIOUS_DB_NAME + "*"))


@pytest.fixture()
def built(tmp_path: Path) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path / "repo", {**TINY_FILES, MARKED_FILE: MARKED})
    first = index_repository(root, settings=Settings())
    assert first.embedded > 0
    return root


def test_a_rebuild_embeds_no_chunk_it_had_embedded(built: Path) -> None:
    from coderag import CodeIndex, index_repository

    before = _cache_keys(built)
    again = index_repository(built, settings=Settings(), rebuild=True)
    assert again.embedded == 0 and again.cached > 0 and again.indexed == len(TINY_FILES) + 1
    assert _cache_keys(built) == before  # the same vectors, and no other
    assert not _previous_files(built)
    with CodeIndex.open(built, settings=Settings(), create=False) as idx:
        res = idx.search("add sales tax to the sum of the line items", retriever="dense", max_tokens=800,
                         auto_merge=False, merge_adjacent=False)
        assert res[0].file_path == "src/billing/invoice.py"


def test_a_rebuild_keeps_no_vector_of_a_chunk_it_no_longer_makes(built: Path) -> None:
    from coderag import index_repository

    before = _cache_keys(built)
    (built / MARKED_FILE).unlink()
    again = index_repository(built, settings=Settings(), rebuild=True)
    assert again.embedded == 0
    after = _cache_keys(built)
    assert after < before  # the deleted file's vectors were not carried over


def test_set_aside_keeps_only_the_embedding_cache_and_overwrites_the_rest(built: Path) -> None:
    idx = index_dir(built)
    set_aside(idx)
    assert not (idx / DB_NAME).exists() and (idx / PREVIOUS_DB_NAME).is_file()
    conn = sqlite3.connect(str(idx / PREVIOUS_DB_NAME))
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        vectors = conn.execute("SELECT COUNT(*) FROM embed_cache").fetchone()[0]
    finally:
        conn.close()
    assert tables == {"embed_cache"} and vectors > 0
    for path in _previous_files(built):  # the file texts, manifest and docstore: zeroed, not merely freed
        assert MARKER.encode() not in path.read_bytes(), path.name
    forget(idx)
    assert not _previous_files(built)


def test_a_killed_rebuild_is_finished_by_the_next_run_from_the_old_vectors(built: Path) -> None:
    """Killed right after it set the old database aside: `coderag index` (no --rebuild) builds from it."""
    from coderag import index_repository

    before = _cache_keys(built)
    set_aside(index_dir(built))
    set_aside(index_dir(built))  # a second rebuild killed as early: the vectors are still there
    run = index_repository(built, settings=Settings())
    assert run.embedded == 0 and run.indexed == len(TINY_FILES) + 1
    assert _cache_keys(built) == before and not _previous_files(built)


def test_an_owner_finishes_a_killed_rebuild_from_the_old_vectors(built: Path) -> None:
    """An owner (`coderag mcp`) started after a killed rebuild builds from previous.db, then deletes it."""
    from coderag.service import IndexService

    before = _cache_keys(built)
    set_aside(index_dir(built))
    svc = IndexService(built, watch=False, background=False, serve=False).start()
    try:
        svc._initial_index()
        assert svc.dense_ready and svc.progress["phase"] == "idle", svc.progress
        assert svc.dispatch("search", {"query": "add sales tax to the sum of the line items"})["results"]
    finally:
        svc.stop()
    assert _cache_keys(built) == before and not _previous_files(built)


def test_set_aside_never_replays_a_stray_log_of_an_older_previous_db(built: Path, tmp_path: Path) -> None:
    """SQLite replays a -wal file beside a database whatever database wrote it: one left from an older
    previous.db would overwrite pages of the one set aside now."""
    import shutil

    from coderag import index_repository

    idx = index_dir(built)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(str(other))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the writes stay in other.db-wal
    conn.execute("CREATE TABLE junk (x BLOB)")
    conn.executemany("INSERT INTO junk VALUES (?)", [(bytes(3000),) for _ in range(200)])
    conn.commit()
    shutil.copyfile(str(other) + "-wal", idx / (PREVIOUS_DB_NAME + "-wal"))
    conn.close()
    again = index_repository(built, settings=Settings(), rebuild=True)
    assert again.embedded == 0 and not _previous_files(built)


def test_set_aside_again_keeps_the_partial_rebuilds_vectors_too(built: Path) -> None:
    """A rebuild killed part way, then rebuilt again: previous.db keeps its vectors and gains the new ones."""
    from coderag.store.state import IndexState

    idx = index_dir(built)
    before = _cache_keys(built)
    set_aside(idx)
    partial = IndexState(idx / DB_NAME)  # what a killed rebuild had embedded that the old index had not
    partial.cache_vectors([("a-new-chunk-key", b"\0" * 8)])
    partial.commit()
    partial.close()
    set_aside(idx)
    assert not (idx / DB_NAME).exists()
    conn = sqlite3.connect(str(idx / PREVIOUS_DB_NAME))
    try:
        kept = {r[0] for r in conn.execute("SELECT key FROM embed_cache")}
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert kept == before | {"a-new-chunk-key"} and tables == {"embed_cache"}


def test_a_rebuild_with_the_shard_elsewhere_leaves_no_old_chunk_in_it(tmp_path: Path) -> None:
    """With `store.path` set (the shard outside .coderag), a rebuild cleared the index folder but not the shard:
    the points of a file deleted since, and of the chunking before, stayed beside the new ones (48 points for
    32 chunks on a probe). Now the shard is emptied with the folder."""
    from coderag import index_repository
    from coderag.store.edge_vector_store import EdgeVectorStore

    root = write_files(tmp_path / "repo", {**TINY_FILES, MARKED_FILE: MARKED})
    settings = Settings()
    settings.store.path = str(tmp_path / "elsewhere" / "shard")

    def points() -> tuple[int, set[str]]:
        store = EdgeVectorStore.open(settings.store.path, dim=384)
        try:
            return store.count(), set(store.file_paths())
        finally:
            store.close()

    def chunks() -> int:
        conn = sqlite3.connect(str(index_dir(root) / DB_NAME))
        try:
            return conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        finally:
            conn.close()

    index_repository(root, settings=settings)
    assert MARKED_FILE in points()[1]
    (root / MARKED_FILE).unlink()
    index_repository(root, settings=settings, rebuild=True)
    count, files = points()
    assert MARKED_FILE not in files and count == chunks(), (count, chunks(), files)

    smaller = settings.model_copy(deep=True)
    smaller.chunking.max_tokens = 64  # another chunking: the index is built again (start_over_if_stale)
    again = index_repository(root, settings=smaller)
    from coderag.pipelines.fingerprint import SETTINGS_CHANGED

    assert again.started_over and again.rebuild_reason == SETTINGS_CHANGED
    assert points()[0] == chunks()


def test_a_new_index_over_a_shard_kept_elsewhere_starts_it_empty(tmp_path: Path) -> None:
    """`rm -rf .coderag` (as the README says to remove an index) with the shard at `store.path`: the next build
    made a new database over the old shard, whose points no index knew any more."""
    import shutil

    from coderag import index_repository
    from coderag.store.edge_vector_store import EdgeVectorStore

    root = write_files(tmp_path / "repo", {**TINY_FILES, MARKED_FILE: MARKED})
    settings = Settings()
    settings.store.path = str(tmp_path / "elsewhere" / "shard")
    index_repository(root, settings=settings)
    (root / MARKED_FILE).unlink()
    shutil.rmtree(index_dir(root))
    again = index_repository(root, settings=settings)
    store = EdgeVectorStore.open(settings.store.path, dim=384)
    try:
        assert MARKED_FILE not in set(store.file_paths()) and store.count() == again.chunks, store.count()
    finally:
        store.close()
