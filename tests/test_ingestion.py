"""Incremental indexing with the real model and stores: every store agrees with the working tree after every run.

The stores of an index are the manifest (`files`), the docstore (`kv`: nodes, ref docs, metadata),
the dedup table (`chunks`) and the Edge shard (leaf points). A ghost is anything in one of them
that the working tree no longer has; `assert_index_matches_tree` looks for ghosts everywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files
from coderag.base.errors import IndexLockedError
from coderag.base.paths import DB_NAME, LOCK_NAME, SHARD_NAME, ensure_index_dir
from coderag.store.state import IndexState

CODERAG = str(Path(sys.executable).with_name("coderag"))
NODE_DATA, REF_DOC_INFO, NODE_META = "nodes/data", "nodes/ref_doc_info", "nodes/metadata"


# -- reading an index back ------------------------------------------------------------------------

def copy_repo(src: Path, dst: Path) -> Path:
    """Copy a repository with its index; mtimes are kept (the index sees no change) and the shard's
    sparse files stay sparse (a plain copy would write 200 MB of zeros)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def edge_points(root: Path) -> dict[str, tuple]:
    """node id -> (file_path, start_line, end_line, text) of every point in the shard."""
    from coderag.store.edge_vector_store import EdgeVectorStore

    store = EdgeVectorStore.open(root / ".coderag" / SHARD_NAME, dim=384)
    try:
        out = {}
        for n in store.get_nodes():
            m = n.metadata
            out[n.node_id] = (m["file_path"], m["start_line"], m["end_line"], n.get_content())
        assert len(out) == store.count()
        assert store.file_paths() == {v[0] for v in out.values()}
        return out
    finally:
        store.close()


def read_state(root: Path) -> dict:
    state = IndexState(root / ".coderag" / DB_NAME, readonly=True)
    try:
        nodes = {}
        for key, val in state.kv_get_all(NODE_DATA).items():
            d = val["__data__"]
            m = d["metadata"]
            nodes[key] = {"file_path": m["file_path"], "start_line": m["start_line"], "end_line": m["end_line"],
                          "symbol": m["symbol"], "text": d["text"], "is_leaf": m.get("is_leaf", True),
                          "duplicate_of": m.get("duplicate_of")}
        return {
            "files": state.files(),
            "nodes": nodes,
            "ref_docs": {k: set(v["node_ids"]) for k, v in state.kv_get_all(REF_DOC_INFO).items()},
            "node_meta": set(state.kv_get_all(NODE_META)),
            "chunks": {r[0]: r[1:] for r in state.conn.execute(
                "SELECT node_id, file_path, start_line, end_line, duplicate_of FROM chunks")},
            "embed_cache": state.conn.execute("SELECT COUNT(*) FROM embed_cache").fetchone()[0],
        }
    finally:
        state.close()


def index_content(root: Path) -> tuple[set, set]:
    """What a search can see: (file_path, start, end, symbol, text) of every docstore node, and the point ids."""
    st = read_state(root)
    nodes = {(n["file_path"], n["start_line"], n["end_line"], n["symbol"], n["text"]) for n in st["nodes"].values()}
    return nodes, set(edge_points(root))


def expected_nodes(root: Path, tokenizer_path: str) -> dict[str, dict]:
    """What a clean build of the working tree holds: the real reader, filter and splitter over every file."""
    from coderag.nodes.code_splitter import CodeHierarchySplitter
    from coderag.nodes.gitignore_filter import skip_reason
    from coderag.nodes.ignore import IgnoreMatcher
    from coderag.nodes.reader import make_document
    from coderag.nodes.scan import SkipLog, read_text_file, walk

    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path)
    out: dict[str, dict] = {}
    for e in walk(root, IgnoreMatcher(root), SkipLog()):
        ft = read_text_file(e, SkipLog())
        if ft is None or skip_reason(ft.text):
            continue
        for n in sp.split_document(make_document(ft)):
            m = n.metadata
            out[n.node_id] = {"file_path": m["file_path"], "start_line": m["start_line"], "end_line": m["end_line"],
                              "symbol": m["symbol"], "text": n.text, "is_leaf": m["is_leaf"]}
    return out


def assert_index_matches_tree(root: Path, tokenizer_path: str) -> dict:
    """Manifest, docstore, dedup table and shard all describe exactly the files in the working tree."""
    from coderag.nodes.ignore import IgnoreMatcher
    from coderag.nodes.scan import SkipLog, walk

    st = read_state(root)
    points = edge_points(root)
    want = expected_nodes(root, tokenizer_path)
    walked = {e.rel_path for e in walk(root, IgnoreMatcher(root), SkipLog())}
    indexed = {n["file_path"] for n in want.values()}

    assert set(st["files"]) == walked, "manifest differs from the working tree"
    assert {p for p, r in st["files"].items() if r.status == "indexed"} == indexed
    got = {k: {f: v[f] for f in ("file_path", "start_line", "end_line", "symbol", "text", "is_leaf")}
           for k, v in st["nodes"].items()}
    assert set(got) - set(want) == set(), f"ghost nodes: {[got[k]['file_path'] for k in set(got) - set(want)]}"
    assert set(want) - set(got) == set(), f"missing nodes: {[want[k]['file_path'] for k in set(want) - set(got)]}"
    assert got == want, "node content differs from the working tree"
    assert st["node_meta"] == set(want)
    assert set(st["ref_docs"]) == indexed
    for path, ids in st["ref_docs"].items():
        assert ids == {k for k, v in want.items() if v["file_path"] == path}, path

    leaves = {k for k, v in want.items() if v["is_leaf"]}
    assert set(st["chunks"]) == leaves, "dedup table differs from the leaves"
    dups = {k: v[3] for k, v in st["chunks"].items() if v[3]}
    canonical = leaves - set(dups)
    assert set(points) == canonical, f"ghost points: {set(points) - canonical}, missing: {canonical - set(points)}"
    for k, (path, start, end, text) in points.items():
        w = want[k]
        assert (path, start, end, text) == (w["file_path"], w["start_line"], w["end_line"], w["text"])
    for k, target in dups.items():
        assert target in points, f"{want[k]['file_path']}: duplicate of {target}, which has no point"
    for rec in st["files"].values():
        if rec.status == "indexed":
            assert rec.n_nodes == sum(1 for v in want.values() if v["file_path"] == rec.path)
            assert rec.n_leaves == sum(1 for k in leaves if want[k]["file_path"] == rec.path)
    return st


def index_files_snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file of the index, but the lock (which names its latest holder)."""
    idx = root / ".coderag"
    out = {}
    for p in sorted(idx.rglob("*")):
        if p.is_file() and p.name != LOCK_NAME:
            out[str(p.relative_to(idx))] = hashlib.sha256(p.read_bytes()).hexdigest() + f":{p.stat().st_mtime_ns}"
    return out


def index(root: Path, **kw):
    from coderag.pipelines.index_repository import index_repository

    return index_repository(root, **kw)


# -- one indexed tiny repository, copied for each test ---------------------------------------------

@pytest.fixture(scope="module")
def indexed_tiny(tmp_path_factory: pytest.TempPathFactory, tokenizer_path: str) -> Path:
    root = write_files(tmp_path_factory.mktemp("base") / "repo", TINY_FILES)
    s = index(root)
    assert (s.indexed, s.files_seen, s.removed) == (5, 5, 0)
    assert s.embedded == s.chunks > 0 and s.cached == 0
    return root


@pytest.fixture
def repo(indexed_tiny: Path, tmp_path: Path) -> Path:
    return copy_repo(indexed_tiny, tmp_path / "repo")


def test_ingestion_first_build_matches_tree(repo: Path, tokenizer_path: str) -> None:
    st = assert_index_matches_tree(repo, tokenizer_path)
    assert st["embed_cache"] == sum(1 for v in st["nodes"].values() if v["is_leaf"])


def test_ingestion_unchanged_rerun_embeds_nothing_and_writes_nothing(repo: Path) -> None:
    before = index_files_snapshot(repo)
    s = index(repo)
    assert (s.indexed, s.unchanged, s.removed, s.chunks, s.embedded, s.cached) == (0, 5, 0, 0, 0, 0)
    assert index_files_snapshot(repo) == before


def test_ingestion_touched_file_is_hashed_not_embedded(repo: Path, tokenizer_path: str) -> None:
    """A new mtime with the same bytes (git checkout, touch) costs a read and a hash, no embedding."""
    content_before = index_content(repo)
    p = repo / "src/billing/invoice.py"
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 5_000_000_000))
    s = index(repo)
    assert (s.indexed, s.unchanged, s.embedded, s.chunks) == (0, 5, 0, 0)
    assert index_content(repo) == content_before
    assert read_state(repo)["files"]["src/billing/invoice.py"].mtime_ns == p.stat().st_mtime_ns
    again = index(repo)
    assert (again.indexed, again.unchanged, again.embedded) == (0, 5, 0)


def test_ingestion_one_function_change_reembeds_only_that_chunk(repo: Path, tokenizer_path: str) -> None:
    p = repo / "src/auth/service.py"
    leaves = read_state(repo)["files"]["src/auth/service.py"].n_leaves
    p.write_text(p.read_text().replace("time.sleep(0.1 * attempt)", "time.sleep(0.25 * attempt)  # back off"))
    s = index(repo)
    assert (s.indexed, s.unchanged) == (1, 4)
    assert s.embedded == 1, f"embedded {s.embedded} chunks for a one-function change"
    assert s.cached == leaves - 1
    assert_index_matches_tree(repo, tokenizer_path)
    login = [t for _, _, _, t in edge_points(repo).values() if "def login" in t]
    assert len(login) == 1 and "0.25 * attempt" in login[0]


def test_ingestion_add_modify_delete_rename_leave_no_ghosts(repo: Path, tokenizer_path: str) -> None:
    # add
    write_files(repo, {"src/auth/tokens.py": '''\
        def issue_token(user):
            """Mint a session token."""
            return f"tok-{user}"
        '''})
    s = index(repo)
    assert (s.indexed, s.unchanged, s.removed) == (1, 5, 0)
    assert_index_matches_tree(repo, tokenizer_path)

    # modify: a function renamed and one removed, so old node ids must go
    p = repo / "src/auth/service.py"
    text = p.read_text().replace("def get_user_by_id(user_id):", "def find_user(user_id):")
    p.write_text(text.replace("    @staticmethod\n    def hash_password(pw: str) -> str:\n        return pw[::-1]\n\n", ""))
    s = index(repo)
    assert (s.indexed, s.removed) == (1, 0)
    st = assert_index_matches_tree(repo, tokenizer_path)
    symbols = {n["symbol"] for n in st["nodes"].values()}
    assert "find_user" in symbols and "get_user_by_id" not in symbols and "AuthService.hash_password" not in symbols

    # delete
    (repo / "cmd/server/main.go").unlink()
    s = index(repo)
    assert (s.indexed, s.removed) == (0, 1)
    assert_index_matches_tree(repo, tokenizer_path)

    # rename (same bytes, new path: the breadcrumb changes, so its chunks are embedded again)
    (repo / "src/billing/invoice.py").rename(repo / "src/billing/invoices.py")
    s = index(repo)
    assert (s.indexed, s.removed) == (1, 1)
    st = assert_index_matches_tree(repo, tokenizer_path)
    assert not any(n["file_path"] == "src/billing/invoice.py" for n in st["nodes"].values())

    # a file that becomes empty, one that becomes generated, and a folder newly ignored
    (repo / "src/auth/tokens.py").write_text("")
    (repo / "src/billing/invoices.py").write_text("# Code generated by gen.py. DO NOT EDIT.\nX = 1\n")
    (repo / ".gitignore").write_text("web/\n")
    s = index(repo)
    assert s.removed == 1 and s.skipped.get("empty") == 1 and s.skipped.get("generated") == 1
    st = assert_index_matches_tree(repo, tokenizer_path)
    assert {n["file_path"] for n in st["nodes"].values()} == {"src/auth/service.py", "README.md", ".gitignore"}

    # and nothing left to do
    s = index(repo)
    assert (s.indexed, s.removed, s.embedded) == (0, 0, 0)


def test_ingestion_duplicate_gets_a_point_when_its_canonical_copy_is_deleted(tmp_path: Path,
                                                                               tokenizer_path: str) -> None:
    header = textwrap.dedent('''\
        def licence_banner():
            """Copyright (c) 2024 Example Corp. Licensed under the Apache License, Version 2.0."""
            return "Apache-2.0"
        ''')
    root = write_files(tmp_path / "repo", {"a/banner.py": header, "b/banner.py": header, "c/banner.py": header})
    s = index(root)
    assert s.duplicates == 1
    st = assert_index_matches_tree(root, tokenizer_path)
    dups = [(v[0], v[3]) for v in st["chunks"].values() if v[3]]
    assert len(dups) == 1
    # Delete the file that holds the copy the duplicate points at: the duplicate must get a vector itself.
    canonical_file = st["chunks"][dups[0][1]][0]
    assert canonical_file != dups[0][0]
    (root / canonical_file).unlink()
    index(root)
    st = assert_index_matches_tree(root, tokenizer_path)
    assert not any(v[3] for v in st["chunks"].values())
    assert {v[0] for v in edge_points(root).values()} == {"a/banner.py", "b/banner.py", "c/banner.py"} - {
        canonical_file}


# -- two writers ----------------------------------------------------------------------------------

HOLD_LOCK = """
import sys
from coderag.base.lock import WriterLock
lock = WriterLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.readline()  # hold the lock until the test says so
lock.release()
"""


def test_ingestion_second_writer_raises_index_locked_naming_holder(tmp_path: Path) -> None:
    import threading

    root = write_files(tmp_path / "repo", {"README.md": "# Locked\n\nA repository whose index is busy.\n"})
    lock_path = ensure_index_dir(root) / LOCK_NAME
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    release = threading.Timer(1.0, holder.communicate, args=("go\n",))
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(IndexLockedError) as info:
            index(root)
        assert f"pid {holder.pid}" in str(info.value) and str(root / ".coderag") in str(info.value)
        t0 = time.monotonic()
        with pytest.raises(IndexLockedError):
            index(root, wait=0.5)
        assert time.monotonic() - t0 >= 0.5
        assert not (root / ".coderag" / DB_NAME).exists(), "the loser must not touch the index"
        # --wait outlasts the holder: the second writer then runs.
        release.start()
        t0 = time.monotonic()
        s = index(root, wait=60)
        assert s.indexed == 1 and time.monotonic() - t0 >= 1.0
    finally:
        release.cancel()
        holder.kill()
        holder.wait()


# -- crash ----------------------------------------------------------------------------------------

def _crash_repo(root: Path, n: int) -> Path:
    """n small Python files, one chunk each, distinct content: three batches of the indexer."""
    files = {}
    for i in range(n):
        files[f"pkg/m{i // 40}/mod_{i:03d}.py"] = (
            f"def scale_{i}(values):\n"
            f"    \"\"\"Multiply every value by {i} and add the offset {i * i % 97}.\"\"\"\n"
            f"    return [v * {i} + {i * i % 97} for v in values]\n")
    return write_files(root, files)


def _committed_files(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return con.execute("SELECT COUNT(*) FROM files").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_ingestion_sigkill_mid_run_then_rerun_equals_clean_build(tmp_path: Path, tokenizer_path: str) -> None:
    from click.testing import CliRunner

    from coderag.cli import main
    from coderag.pipelines.ingestion import BATCH_FILES

    n = BATCH_FILES + 30  # two batches: the kill lands while the second one is embedded
    root = _crash_repo(tmp_path / "repo", n)
    db = root / ".coderag" / DB_NAME
    proc = subprocess.Popen([CODERAG, "index", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _committed_files(db) == 0:
            assert proc.poll() is None, f"indexer ended before its first commit: {proc.communicate()}"
            assert time.monotonic() < deadline, "no batch committed within 120 s"
            time.sleep(0.02)
        # A second writer while the first one runs is refused, and told who holds the index.
        with pytest.raises(IndexLockedError, match=rf"pid {proc.pid}: coderag index"):
            index(root)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    committed = _committed_files(db)
    assert 0 < committed < n, f"the kill came too late to test anything ({committed}/{n} files committed)"

    # The killed index opens, and status works and reports the rest as pending.
    res = CliRunner().invoke(main, ["status", str(root)])
    assert res.exit_code == 0, res.output
    assert "pending:" in res.output and "new or modified" in res.output
    assert len(edge_points(root)) >= committed

    # The user keeps working meanwhile: one committed file changes, one uncommitted file goes.
    first = root / "pkg/m0/mod_000.py"
    first.write_text(first.read_text().replace("by 0 and", "by nothing and"))
    (root / f"pkg/m{(n - 1) // 40}/mod_{n - 1:03d}.py").unlink()

    s = index(root)
    assert s.indexed == n - 1 - committed + 1
    assert_index_matches_tree(root, tokenizer_path)

    clean = tmp_path / "clean"
    shutil.copytree(root, clean, ignore=shutil.ignore_patterns(".coderag"))
    index(clean)
    assert index_content(root) == index_content(clean)
    assert read_state(root)["files"].keys() == read_state(clean)["files"].keys()
    s = index(root)
    assert (s.indexed, s.embedded, s.removed) == (0, 0, 0)


def test_ingestion_docstore_keeps_no_vectors(repo: Path) -> None:
    """Vectors live in the store and the embedding cache; the docstore keeps hierarchy and text only."""
    import json

    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    state = IndexState(index_dir(repo) / DB_NAME, readonly=True)
    try:
        rows = state.conn.execute("SELECT value FROM kv WHERE collection = 'nodes/data'").fetchall()
    finally:
        state.close()
    assert rows
    for (value,) in rows:
        data = json.loads(value)["__data__"]
        assert data.get("embedding") is None and data["text"]


def test_state_manifest_in_memory_follows_every_write(tmp_path: Path) -> None:
    """A writable IndexState answers manifest lookups from memory once read: puts, deletes and dirty marks
    show at once, exactly as SQL reads them; a rollback (close) forgets it, and a read-only one always asks
    SQLite (another process may write)."""
    from coderag.store.state import STATUS_DIRTY, FileRecord

    db = tmp_path / "index.db"
    state = IndexState(db)
    rec = lambda p, size=1: FileRecord(p, size, 10, "sha", "python", "indexed", 2, 1)  # noqa: E731

    def sql_view() -> dict:
        rows = state.conn.execute("SELECT path, size, mtime_ns, sha256, language, status, n_nodes, n_leaves "
                                  "FROM files").fetchall()
        return {r[0]: FileRecord(*r) for r in rows}

    assert state.files_of(["a.py"]) == {} and state.file("a.py") is None  # read once, empty
    for p in ("a.py", "b.py", "c.py"):
        state.put_file(rec(p))
    state.commit()
    assert state.files_of(["a.py", "b.py", "x.py", "a.py"]) == {"a.py": rec("a.py"), "b.py": rec("b.py")}
    state.put_file(rec("a.py", size=7))
    state.delete_file("b.py")
    state.delete_file("c.py", keep_record=True)
    state.mark_dirty(["c.py", "gone.py"])
    assert state.files() == sql_view()
    assert state.file("a.py").size == 7 and state.file("b.py") is None and state.file("c.py").status == STATUS_DIRTY
    state.commit()
    state.put_file(rec("d.py"))
    state.close()  # not committed: rolled back
    state = IndexState(db)
    assert set(state.files()) == {"a.py", "c.py"} == set(sql_view())
    other = IndexState(db, readonly=True)
    assert other.file("a.py").size == 7
    state.put_file(rec("a.py", size=9))
    state.commit()
    assert other.file("a.py").size == 9 and other.files_of(["a.py"])["a.py"].size == 9
    other.close()
    state.close()
