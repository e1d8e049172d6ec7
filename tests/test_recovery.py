"""A run killed between writing a batch's vectors and committing its manifest leaves no ghost behind."""

from coderag.paths import DB_NAME, SHARD_NAME, index_dir
from coderag.pipelines.ingestion import index_repository
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
