"""index_repository: `coderag index` as a function, the one-shot build of a repository's index."""

from __future__ import annotations

import time
from pathlib import Path

from coderag.base.config import Settings, load_settings
from coderag.base.paths import DB_NAME, ensure_index_dir
from coderag.base.handover import take_writer_lock
from coderag.pipelines.code_index import CodeIndex
from coderag.store.state import IndexState


def index_repository(root: str | Path, settings: Settings | None = None, rebuild: bool = False,
                     progress=None, wait: float = 0.0):
    """Bring the index of `root` up to date with its working tree and return what was done (`coderag index`).

    An index built with other model or chunking settings (an upgrade of coderag, a changed setting) is built
    again, as `rebuild` asks and as an owner does when it opens one (`start_over_if_stale`): the vectors of
    the chunks that come out the same are reused, not embedded again (previous_cache.py).

    An unchanged tree is answered from the manifest alone (no LlamaIndex, torch or Qdrant import); changes go
    through `CodeIndex.refresh`, the one update path.

    Examples:
        >>> s = index_repository("path/to/repo")            # doctest: +SKIP
        >>> s.indexed, s.unchanged, s.removed, s.chunks     # doctest: +SKIP
        (42, 0, 0, 311)
    """
    from coderag.base.errors import ConfigError
    from coderag.store.previous_cache import forget, set_aside
    from coderag.pipelines.changes import detect_changes
    from coderag.pipelines.fingerprint import check_fingerprint, fingerprint
    from coderag.pipelines.ingestion import IndexSummary
    from coderag.pipelines.migrations import upgrade_index
    from coderag.pipelines.skip_report import skip_report

    t0 = time.perf_counter()
    root = Path(root).resolve()
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder. Pass the repository to index: coderag index PATH")
    settings = settings or load_settings(root)
    idx = ensure_index_dir(root)
    lock = take_writer_lock(idx, wait)  # a background owner hands the index over (coderag/base/handover.py)
    progress = _said_in(lock, progress)
    try:
        model = before_reading(idx, settings)
        if rebuild:
            set_aside(idx)  # its embedding cache serves the rebuild: unchanged chunks are not embedded again
        why = "" if rebuild else start_over_if_stale(idx, settings, model)
        state = IndexState(idx / DB_NAME)
        try:
            check_fingerprint(state, fingerprint(settings), root)
            changes = detect_changes(root, state)
            if not (changes.candidates or changes.removed):
                skipped, skip_items = skip_report(state, changes.skips)  # the walk's, and the manifest's
                s = IndexSummary(root=str(root), files_seen=len(changes.entries), unchanged=changes.unchanged,
                                 skipped=skipped, skip_items=skip_items)
                s.upgraded = upgrade_index(root, settings, state, progress)
                forget(idx)  # a rebuild killed after its last file: the index is whole
                s.seconds = time.perf_counter() - t0
                return s
        finally:
            state.close()
        index, lock = CodeIndex.open(root, settings=settings, lock=lock), None  # the index releases it
        with index:
            s = index.refresh(progress=progress)
            s.started_over, s.rebuild_reason = bool(why), why
            if s.chunks >= settings.store.hnsw_min_chunks:
                index.optimize(progress)
            s.upgraded = {**index.upgraded_on_open,
                          **upgrade_index(root, settings, index.state, progress, store=index.vector_store)}
            forget(idx)  # a rebuild's old vectors: every chunk of the tree has its own now
        s.seconds = time.perf_counter() - t0
        return s
    finally:
        if lock is not None:
            lock.release()


# How often a run rewrites what it is doing in the writer lock's holder line between its phases' own counts
# (an embedded batch every few tenths of a second is more than a reader needs).
SAY_EVERY_S = 1.0


def _said_in(lock, progress):
    """`progress`, and what the run is doing said in the holder line of its writer `lock` (WriterLock.say):
    a search that waits for the index, and `coderag status`, tell the user "indexing: 120 of 347 files, about
    3 min left" rather than only that a `coderag index` holds it."""
    from coderag.base.build_clock import PHASE_NAMES, BuildClock

    clock, said = BuildClock(), {"at": 0.0, "text": ""}

    def call(phase: str, done: int, total: int) -> None:
        if progress is not None:
            progress(phase, done, total)
        clock.count(phase, done, total)
        now, text = time.monotonic(), clock.doing()
        if text != said["text"] and (phase in PHASE_NAMES or now - said["at"] >= SAY_EVERY_S):
            lock.say(text)
            said.update(at=now, text=text)

    return call


def before_reading(idx: Path, settings: Settings) -> str | None:
    """For whoever has just taken the writer lock of index folder `idx`, before it reads the index (whether it
    is stale, what it holds): a rebuild beside it stopped half way is finished or deleted (store/beside.py
    `settle`), a model the index knows, found in another folder, is adopted, and one whose files changed in
    its folder makes the index stale (fingerprint.py `reconcile_model`, whose outcome it returns). `coderag
    index`, an owner's start, `CodeIndex.open` and the eval call it."""
    from coderag.pipelines.fingerprint import reconcile_model
    from coderag.store.beside import settle

    settle(idx)
    return reconcile_model(idx, settings)


def start_over_if_stale(idx: Path, settings: Settings, model: str | None) -> str:
    """For whoever holds the writer lock of index folder `idx` and is about to build into it (`coderag index`,
    an owner: `coderag mcp`, `serve`; the eval): an index built with another model or chunking (an upgrade
    of coderag, a changed setting) is set aside to be rebuilt, as `coderag index --rebuild` does, from its
    own vectors (previous_cache.py), rather than refused at every update. Returns why it was, in the words
    the user is shown, or "" where it was not; `model` is what `before_reading` found of the model."""
    from coderag.pipelines.fingerprint import (CHANGED, MODEL_FILES_CHANGED, SETTINGS_CHANGED, built_otherwise,
                                               fingerprint)
    from coderag.store.previous_cache import set_aside

    db = idx / DB_NAME
    if not db.is_file():
        return ""
    state = IndexState(db, readonly=True)
    try:
        stale = built_otherwise(state, fingerprint(settings))
    finally:
        state.close()
    if not stale:
        return ""
    set_aside(idx)
    return MODEL_FILES_CHANGED if model == CHANGED else SETTINGS_CHANGED


def servable_while_rebuilt(idx: Path, settings: Settings) -> Settings | None:
    """For an owner about to serve index folder `idx`: the settings its index can still answer with while it
    is built again beside it (store/beside.py), where it was built with other settings (`settings_built_with`);
    None where it is current, empty, of a model no longer on this machine, or where no build can run beside it
    (a server store, a shard set elsewhere, too little free disk): then `start_over_if_stale` decides."""
    from coderag.pipelines.fingerprint import settings_built_with
    from coderag.store.beside import can_build_beside

    db = idx / DB_NAME
    if not db.is_file():
        return None
    state = IndexState(db, readonly=True)
    try:
        as_built = settings_built_with(state, settings) if state.has_searchable_file() else None
    finally:
        state.close()
    return as_built if as_built is not None and can_build_beside(settings, idx) else None
