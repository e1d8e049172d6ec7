"""Bring an eval corpus' index up to date: BM25-only when the run's variants need no vectors, dense otherwise.

Embedding is what makes indexing slow (astropy: ~55k leaves, hours on two cores; its BM25-only build
takes about two minutes), and ``bm25``, ``ripgrep``, ``li-bm25`` and ``bm25-window`` never read a vector.
So a run of only those indexes the corpus the way the owner's first pass does
(``CodeIndex.refresh(dense=False)``): its files are stored with status ``sparse``, searchable by BM25 at once.

A later run that needs vectors *densifies* that index rather than rebuilding it: files changed since
are indexed as usual (with vectors), then every file still ``sparse`` is re-indexed with its dense
vectors, forced (``refresh(paths, force=True)``: its content is unchanged, so a plain update would skip
it), the way the owner's dense pass does. Node ids are stable, so the points are overwritten in place and the sparse vectors
are the same as before. An index built with a different model or chunking (a new splitter version)
is rebuilt from scratch, since its chunks are not the ones the current code makes, embedding only the
chunks its old embedding cache lacks (coderag/store/previous_cache.py).

Examples:
    >>> info = prepare_index(Path("corpus"), load_settings(Path("corpus")), dense=False)   # doctest: +SKIP
    >>> info["mode"], info["pending_dense"]                                              # doctest: +SKIP
    ('bm25-only', 1614)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Sequence

from coderag.base.config import Settings

__all__ = ["prepare_index"]


def prepare_index(root: Path, settings: Settings, dense: bool, progress: Optional[Any] = None,
                  wait: float = 0.0, rebuild_stale: bool = True, seed_from: Sequence[Path] = ()) -> dict[str, Any]:
    """Index what changed under `root` (with vectors only when `dense`); with `dense`, also give every file
    that a BM25-only run left without vectors its vectors. `wait`: seconds to wait while another process
    holds the index. `rebuild_stale`: an index built with other model or chunking settings (another
    splitter version) is rebuilt from scratch, else refused. `seed_from`: index folders of other snapshots
    of the same repository, whose embedding caches are copied in first (the snapshots of one repository
    share most chunks: each is then embedded once, not once per snapshot). Returns what was done, for the
    run's meta."""
    from coderag.base.lock import WriterLock
    from coderag.base.paths import DB_NAME, LOCK_NAME, ensure_index_dir
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.index_repository import before_reading, start_over_if_stale
    from coderag.pipelines.fingerprint import check_fingerprint, fingerprint
    from coderag.pipelines.migrations import upgrade_index
    from coderag.store.previous_cache import forget
    from coderag.store.state import STATUS_SPARSE, IndexState

    t0 = time.perf_counter()
    root = Path(root).resolve()
    idx = ensure_index_dir(root)
    lock = WriterLock(idx / LOCK_NAME).acquire(wait=wait)
    try:
        # An eval scores the code as it is: an index of other chunking would score other chunks. It is set
        # aside and built again from the vectors it had (most chunks are made again as they were). The same
        # model in another folder (a virtualenv made again) is no reason to.
        model = before_reading(idx, settings)
        rebuilt = rebuild_stale and bool(start_over_if_stale(idx, settings, model))
        if not rebuild_stale:
            state = IndexState(idx / DB_NAME)
            try:
                check_fingerprint(state, fingerprint(settings), root)
            finally:
                state.close()
        index, lock = CodeIndex.open(root, settings=settings, lock=lock), None  # the index releases it
    finally:
        if lock is not None:
            lock.release()
    with index:
        seeded = sum(index.state.seed_cache(other / DB_NAME) for other in seed_from
                     if dense and (other / DB_NAME).is_file())
        summary = index.refresh(progress=progress, dense=dense)
        densified, embedded = 0, summary.embedded
        if dense:
            pending = sorted(p for p, r in index.state.files().items() if r.status == STATUS_SPARSE)
            if pending:
                more = index.refresh(paths=pending, progress=progress, force=True)
                densified, embedded = more.files_seen, embedded + more.embedded
        upgrade_index(root, settings, index.state, progress, store=index.vector_store)
        counts = index.state.counts()
        forget(idx)
    return {"mode": "dense" if dense else "bm25-only", "rebuilt": rebuilt, "files": summary.files_seen,
            "indexed_now": summary.indexed, "densified": densified, "embedded": embedded, "vectors_seeded": seeded,
            "pending_dense": counts["pending_dense"],
            "index_seconds": round(time.perf_counter() - t0, 1)}
