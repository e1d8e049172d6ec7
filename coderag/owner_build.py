"""How an owner keeps its index up to date: the first build in the background (BM25 first, then the vectors
source files first), an older index's upgrade, the warm-up, and the watcher's batches.

A part of IndexService (coderag/service.py), kept apart from its start, stop and requests: it reads the
service's index, settings, progress and locks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from coderag.base.build_clock import BuildClock
from coderag.base.config import StoreMode
from coderag.base.paths import private_umask

log = logging.getLogger("coderag.service")

WATCH_FULL_SCAN_THRESHOLD = 300
DENSE_BATCH_FILES = 8  # files whose chunks are out of BM25 answers while their vectors are computed

GC_YOUNG_THRESHOLD = 50_000  # net allocations between young collections in a resident owner


def tune_gc_for_serving() -> None:
    """For an owner process, after its warm-up: what is loaded by then (LlamaIndex, pydantic schemas, the
    models' Python objects: about a million objects) lives as long as the process, so it is frozen out of
    the cyclic GC, whose full passes over it paused a search every few hundred for longer than many searches; and
    the youngest generation is collected after 50,000 net allocations instead of 700 (a search holds ~2,000
    young objects at once, so at 700 the collector ran mid-search about once every 4 searches and found no
    garbage). Cyclic garbage waits longer, bounded by the threshold. Process-wide, so only an owner's entry
    point asks for it (IndexService(tune_gc=True)), never a library call a notebook makes."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 10)


class _Stopped(Exception):
    """Ends background indexing at a batch boundary when the owner stops, or starts the build over."""


class OwnerBuild:
    """IndexService's background indexing: the first build, the upgrade, the warm-up and the watcher's batches."""

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._cancel.is_set()

    def _progress(self, phase: str, done: int, total: int) -> None:
        self._clock.count(phase, done, total)
        if phase == "files" and self._stopping():
            raise _Stopped  # between two committed batches: stop() need not wait for the whole pass
        if phase == "embed":
            self.progress["embedded"] += done
        elif phase == "files":
            self.progress.update(done=done, total=total)
        elif phase in ("line tokens", "upgrade", "optimize"):  # an index of an older coderag (_upgrade)
            self.progress.update(phase=f"upgrade ({phase})", done=done, total=total)

    def _progress_beside(self, phase: str, done: int, total: int) -> None:
        """`_progress` for a build beside the index: it stops at any step, in the middle of a batch too (an
        owner asked to stop waits one batch of the model, not a whole batch of files), since what it leaves
        is deleted, not finished by the next owner."""
        if self._stopping():
            raise _Stopped
        self._progress(phase, done, total)

    def _initial_index(self) -> None:
        """Bring the index up to date; on a first build, BM25 first so search works within seconds."""
        from coderag.nodes.file_roles import ROLES, file_role, source_first
        from coderag.store.previous_cache import forget
        from coderag.store.state import STATUS_SPARSE

        idx = self.index
        t0 = time.perf_counter()
        self._clock = BuildClock()
        try:
            # Embedded store: BM25 first, so search works within seconds (even for a few files loading the
            # model takes seconds); the changed files' vectors follow in the dense pass below.
            two_pass = self.settings.store.mode == StoreMode.Embedded
            self.progress.update(phase="bm25" if two_pass else "indexing", done=0, total=0)
            summary = idx.refresh(progress=self._progress, dense=not two_pass)
            # Dense pass over whatever is still BM25-only, in small steps so searches interleave.
            # Source files first, then tests, docs and examples: the dense leg helps the questions that
            # matter soonest while the rest is still answered by BM25.
            records = idx.state.files()

            def language_of(path: str) -> str:
                return records[path].language or ""

            def role_of(path: str) -> str:
                return file_role(path, language_of(path))

            pending = source_first((p for p, r in records.items() if r.status == STATUS_SPARSE), language_of)
            if pending:
                roles = [role_of(p) for p in pending]
                self.progress.update(phase="dense", done=0, total=len(pending), dense_by_role={
                    role: {"done": 0, "total": roles.count(role)} for role in ROLES})
                self._densify(pending, role_of)
            self.dense_ready = True
            self.last_build = self._build_summary(summary, time.perf_counter() - t0)
            forget(self.index_dir)  # a killed rebuild's old vectors (previous_cache.py): every chunk has its own
            self._upgrade()
            self.progress.update(phase="warming")  # model, page cache, one search: then "idle"
            self._warm_up()
            self.progress.update(phase="idle")
            log.info("index of %s is up to date", self.root)
        except _Stopped:
            log.info("background indexing stopped; the next owner goes on from here")
        except Exception as exc:
            log.exception("background indexing failed")
            self.progress.update(phase="failed", error=f"{type(exc).__name__}: {exc}")

    def _build_beside(self) -> None:
        """Build the index again beside the one that serves (CodeIndex.open_beside), whole and with its
        vectors, while the old one answers every search; then put it in the old one's place
        (store/beside.py). Files changed during the build are read again just before the swap and just after
        it. A build that fails or is stopped is deleted, and the old index goes on serving."""
        from coderag.pipelines.code_index import CodeIndex
        from coderag.store.beside import drop, mark_ready, swap

        t0 = time.perf_counter()
        self._clock = BuildClock()
        try:
            new = CodeIndex.open_beside(self.root, self.settings, self._writer_lock)
            try:
                self.progress.update(phase="indexing", done=0, total=0)
                summary = new.refresh(progress=self._progress_beside)
                summary.add_later(new.refresh(progress=self._progress_beside))  # what changed while it was built
            finally:
                new.close(release_lock=False)
        except _Stopped:
            drop(self.index_dir)
            log.info("the rebuild beside the index stopped; the index as it was still serves")
            return
        except Exception as exc:
            drop(self.index_dir)
            log.exception("the rebuild beside the index failed")
            self.progress.update(phase="failed", error=f"rebuilding: {type(exc).__name__}: {exc}; the index as it "
                                                      f"was still answers searches")
            return
        try:
            # Requests wait, and those under way end first; then the watcher's batches wait, and skip the
            # index they were given once it has been replaced (the tree is read again below).
            with self.requests_held(), self._ingest:
                old, self.index = self.index, None
                old.close(release_lock=False)
                with private_umask():
                    mark_ready(self.index_dir)
                    swap(self.index_dir)
                self.index = CodeIndex.open(self.root, settings=self.settings, create=True, lock=self._writer_lock)
            self._ingest = self.index.ingest_lock
            self.dense_ready = True
            with self._ingest:
                summary.add_later(self.index.refresh())  # the watcher's batches skipped during the swap
            self.last_build = self._build_summary(summary, time.perf_counter() - t0)
            self._upgrade()
            self.progress.update(phase="warming")
            self._warm_up()
            self.progress.update(phase="idle")
            log.info("index of %s built again beside it, and swapped in", self.root)
        except Exception as exc:  # requests now say the owner is not serving; status says why
            log.exception("swapping in the rebuilt index failed")
            self.progress.update(phase="failed", error=f"swapping in the rebuilt index: {type(exc).__name__}: {exc}")

    def _upgrade(self) -> None:
        """What `coderag index` does once to an index written by an older coderag: store the token counts
        of its files' lines, and rewrite its stored chunks in the current payload format (no
        re-embedding). Without it, an owner started on such an index would serve slower searches until
        someone ran `coderag index`. On a current index: two quick reads of the index's state. Searches
        go on meanwhile, except while a rewrite of 5,000 points or more ends with the HNSW rebuild, which
        holds the GIL (once per index)."""
        from coderag.pipelines.migrations import upgrade_index

        idx = self.index
        with self._ingest, private_umask():
            done = upgrade_index(self.root, self.settings, idx.state, self._progress, store=idx.vector_store)
        if done:
            log.info("upgraded the index of %s: %s", self.root, ", ".join(f"{k}: {v}" for k, v in done.items()))

    def _warm_up(self) -> None:
        """Load the query model and tokenizer, and the store's files into the page cache, now, so the
        first searches do not pay for them."""
        try:
            self.index.warm_up()
        except Exception:
            log.exception("warm-up failed")
        if self.tune_gc:
            tune_gc_for_serving()

    def _densify(self, paths: list[str], role_of) -> None:
        def embedded_only(phase: str, done: int, total: int) -> None:
            if phase != "files":  # a step's own file count is not the dense pass's
                self._progress(phase, done, total)

        done = 0
        for i in range(0, len(paths), DENSE_BATCH_FILES):
            if self._stopping():
                raise _Stopped  # not "dense ready": the next owner (or build) goes on from here
            part = paths[i:i + DENSE_BATCH_FILES]
            step = self.index.refresh(paths=part, progress=embedded_only, force=True)  # same content, with vectors
            self.progress["cached"] = self.progress.get("cached", 0) + step.cached
            done += len(part)
            self.progress.update(done=done)
            self._clock.count("files", done, len(paths))  # the pass's own count: its time left is reckoned on it
            for p in part:
                self.progress["dense_by_role"][role_of(p)]["done"] += 1

    def _apply_changes(self, rels: list[str], rescan: bool = False) -> None:
        """The watcher's batch: re-index those paths, or the whole tree (a folder or an ignore rule changed)."""
        from coderag.nodes.ignore import RULE_FILE_NAMES

        if self.settings_file.relative_to_root() in rels:
            self.check_settings()
        idx = self.index
        if idx is None or not idx.settings_match():
            return  # none yet; or the index of other settings served while its rebuild beside it reads the tree
        rules_changed = any(Path(r).name in RULE_FILE_NAMES for r in rels)
        with self._ingest:
            if idx is not self.index:
                return
            t0 = time.perf_counter()
            if rescan or rules_changed or len(rels) > WATCH_FULL_SCAN_THRESHOLD or self._has_folder_event(rels):
                summary = idx.refresh()
            else:
                summary = idx.refresh(paths=rels)
            if summary.indexed or summary.removed:
                log.info("watcher: %d indexed, %d removed in %.0f ms", summary.indexed, summary.removed,
                         (time.perf_counter() - t0) * 1000)

    def _has_folder_event(self, rels: list[str]) -> bool:
        """A folder created, moved in, moved out or deleted: its files may have had no event of their own
        (a tree moved as a whole; files written before a new folder was watched), so rescan the tree."""
        state, known = self.index.state, None
        for r in rels:
            p = self.root / r
            if p.is_dir():
                return True
            if not p.exists() and state.file(r) is None:  # gone, and not a file we know: was it a folder?
                known = known if known is not None else list(state.files())
                if any(k.startswith(r + "/") for k in known):
                    return True
        return False
