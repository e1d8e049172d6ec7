"""A run killed between writing a batch's vectors and committing its manifest leaves no ghost behind."""

from coderag.base.paths import DB_NAME, SHARD_NAME, index_dir
from coderag.pipelines.index_repository import index_repository
from coderag.store.edge_vector_store import EdgeVectorStore
from coderag.store.state import IndexState


def _points_by_file(root):
    store = EdgeVectorStore.open(index_dir(root) / SHARD_NAME, dim=384)
    try:
        out = {}
        for n in store.get_nodes():
            out.setdefault(n.metadata["file_path"], set()).add(n.metadata["symbol"])
        return out
    finally:
        store.close()


def test_recovery_inflight_batch_is_undone(tiny_repo):
    index_repository(tiny_repo)
    path = "src/billing/invoice.py"
    assert "invoice_total" in _points_by_file(tiny_repo)[path]
    # The state a SIGKILL leaves after Edge got the batch's points but before the SQLite commit:
    # the file is in flight and has no manifest entry, while its points are in the shard.
    state = IndexState(index_dir(tiny_repo) / DB_NAME)
    state.add_inflight([path])
    state.delete_file(path)
    state.commit()
    state.close()
    # Meanwhile the file loses its function: the old point must not survive as a ghost.
    (tiny_repo / path).write_text("TAX_RATE = 0.2\n")
    summary = index_repository(tiny_repo)
    assert summary.indexed == 1
    symbols = _points_by_file(tiny_repo).get(path, set())
    assert "invoice_total" not in symbols and "LineItem" not in symbols
    state = IndexState(index_dir(tiny_repo) / DB_NAME, readonly=True)
    try:
        assert state.inflight() == []
        assert state.file(path).status == "indexed"
    finally:
        state.close()


def test_files_that_vanish_during_a_run_are_not_pending_deletions(tiny_repo):
    """Files deleted between the walk and their read were never indexed: status must not call them deleted."""
    from click.testing import CliRunner

    from coderag.cli import main
    from coderag.pipelines.ingestion import BATCH_FILES

    names = [f"gen/mod_{i:03d}.py" for i in range(BATCH_FILES + 30)]
    for i, rel in enumerate(names):
        p = tiny_repo / rel
        p.parent.mkdir(exist_ok=True)
        p.write_text(f"def generated_{i}():\n    return {i}\n")
    doomed = names[-30:]  # sorted after the first batch: unread when it commits

    def progress(phase, done, total):
        if phase == "files" and 0 < done < total:
            for rel in doomed:
                (tiny_repo / rel).unlink(missing_ok=True)

    s = index_repository(tiny_repo, progress=progress)
    assert s.skipped.get("vanished") == 30, s.skipped
    res = CliRunner().invoke(main, ["status", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert "pending:     none, the index is up to date" in res.output, res.output
    state = IndexState(index_dir(tiny_repo) / DB_NAME, readonly=True)
    try:
        assert not set(doomed) & set(state.files())
    finally:
        state.close()
    (tiny_repo / names[0]).unlink()  # a file that was indexed and is gone now: that one is pending
    res = CliRunner().invoke(main, ["status", str(tiny_repo)])
    assert "pending:     0 new or modified, 1 deleted" in res.output, res.output
