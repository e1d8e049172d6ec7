"""IndexState: the SQLite side of an index (manifest, meta, counts, dedup rows, KV), on a real file in tmp_path."""

from __future__ import annotations

from pathlib import Path

from coderag.store.state import (STATUS_DIRTY, STATUS_INDEXED, STATUS_SPARSE, FileRecord, IndexState)


def _rec(path: str, status: str = STATUS_INDEXED, n_nodes: int = 3, n_leaves: int = 2) -> FileRecord:
    return FileRecord(path, size=10, mtime_ns=1_000, sha256="ab" * 32, language="python", status=status,
                      n_nodes=n_nodes, n_leaves=n_leaves)


def test_state_manifest_rows(tmp_path: Path) -> None:
    state = IndexState(tmp_path / "index.db")
    try:
        state.put_file(_rec("src/a.py"))
        state.put_file(_rec("src/b.py", status=STATUS_SPARSE))
        state.put_file(_rec("data/rows.csv", status="data", n_nodes=0, n_leaves=0))
        assert state.file("src/a.py") == _rec("src/a.py") and state.file("missing.py") is None
        assert set(state.files()) == {"src/a.py", "src/b.py", "data/rows.csv"}
        assert set(state.files_of(["src/b.py", "missing.py", "src/b.py"])) == {"src/b.py"}
        state.mark_dirty(["src/a.py", "missing.py"])
        assert state.file("src/a.py").status == STATUS_DIRTY
        state.put_file(_rec("src/a.py"))  # re-indexed
        state.add_chunk("n1", "h1", "src/b.py", 1, 2, None)
        state.delete_file("src/b.py", keep_record=True)  # chunks go, the row stays while it is re-indexed
        assert state.file("src/b.py") is not None and state.copies("h1") == (0, None)
        state.delete_file("src/b.py")
        assert state.file("src/b.py") is None and "src/b.py" not in state.files()
    finally:
        state.close()


def test_state_meta_and_counts(tmp_path: Path) -> None:
    state = IndexState(tmp_path / "index.db")
    try:
        assert state.get_meta("fingerprint") is None and state.get_meta("schema_version") == "1"
        state.set_meta("fingerprint", "fp-1")
        state.set_meta("fingerprint", "fp-2")  # replaced, not added
        assert state.get_meta("fingerprint") == "fp-2"
        state.put_file(_rec("key.pem", status="secret", n_nodes=0, n_leaves=0))
        state.put_file(_rec("c.py", status=STATUS_DIRTY, n_nodes=1, n_leaves=1))
        assert not state.has_searchable_file()  # stamped, but no file's chunks yet: a first build is running
        state.put_file(_rec("b.py", status=STATUS_SPARSE, n_nodes=2, n_leaves=1))
        assert state.has_searchable_file()  # BM25-only files are searchable
        state.put_file(_rec("a.py", n_nodes=4, n_leaves=3))
        state.add_chunk("n1", "h", "a.py", 1, 5, None)
        state.add_chunk("n2", "h", "b.py", 1, 5, "n1")
        assert state.counts() == {"files": 2, "pending_dense": 1, "skipped": 2, "nodes": 7, "leaves": 5,
                                  "duplicates": 1}
        assert state.skip_counts() == {"secret": 1}  # a dirty file is no skip: it is re-indexed next run
    finally:
        state.close()


def test_state_reopen_keeps_what_was_committed(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    state = IndexState(db)
    state.put_file(_rec("kept.py"))
    state.set_meta("last_update", "now")
    state.kv_put_many("nodes/data", [("k1", {"v": 1})])
    state.commit()
    state.put_file(_rec("lost.py"))  # never committed: rolled back by close
    state.close()

    again = IndexState(db)
    try:
        assert set(again.files()) == {"kept.py"} and again.get_meta("last_update") == "now"
        assert again.kv_get("nodes/data", "k1") == {"v": 1}
    finally:
        again.close()
    ro = IndexState(db, readonly=True)
    try:
        assert ro.file("kept.py") == _rec("kept.py") and ro.counts()["files"] == 1
    finally:
        ro.close()


def test_state_kv_items_streams_a_collection_in_key_order(tmp_path: Path) -> None:
    state = IndexState(tmp_path / "index.db")
    try:
        items = [(f"key-{i:03d}", {"i": i}) for i in range(25)]
        state.kv_put_many("nodes/data", items[::-1])
        state.kv_put_many("nodes/ref_doc_info", [("key-000", {"other": True})])
        state.kv_put_many("nodes/data", [("", {"empty": True})])
        assert list(state.kv_items("nodes/data", page=4)) == [("", {"empty": True}), *items]
        assert list(state.kv_items("nodes/data", page=26)) == list(state.kv_items("nodes/data", page=1))
        assert list(state.kv_items("missing")) == []
    finally:
        state.close()
