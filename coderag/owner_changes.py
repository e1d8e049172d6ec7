"""What an owner does for the processes beside it, besides answering searches: `coderag index` through it
(a refresh, or a build from scratch it runs in the background and the command follows), an edited settings
file applied while it serves, and the hand-over of the index to a process that opens it itself.

A part of IndexService (coderag/service.py), kept apart because it changes for other reasons than the
owner's start, background indexing and requests: it reads the service's index, progress and locks.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Optional

from coderag.base.errors import ConfigError, IndexLockedError
from coderag.base.paths import private_umask

log = logging.getLogger("coderag.service")

REBUILD_ASKED = "coderag index --rebuild"
BUILDING = ("scanning", "bm25", "indexing", "dense")  # phases of the background build (`coderag index` follows them)


class OwnerChanges:
    """IndexService's rebuild, settings reload, hand-over and `build` request."""

    def _build_summary(self, summary, seconds: float) -> dict:
        """What `coderag index` prints for a build the owner did: the first pass's counts, with the chunks
        embedded by the passes after it."""
        from dataclasses import asdict

        out = asdict(summary)
        why = self.progress.get("rebuild")
        out.update(skip_items=out["skip_items"][:200], note_items=out.get("note_items", [])[:200], seconds=seconds,
                   embedded=self.progress["embedded"],
                   cached=out["cached"] + self.progress.get("cached", 0),
                   started_over=bool(why) and why != REBUILD_ASKED, rebuild_reason=why)
        return out

    def start_over(self, reason: str) -> None:
        """Build the index again from scratch, in the background: the build in progress ends at its next
        batch, then the new index is built beside the old one, which answers every search until the new one
        is complete and takes its place (store/beside.py). Where that cannot be (the store is a server or a
        shard set elsewhere, the disk has no room for two indexes, the old index has nothing to answer from), the old index is set aside (its vectors
        kept for chunks that come out the same) and the new one built in its place, BM25 first and vectors
        after. The owner keeps its writer lock throughout: nobody else writes the index meanwhile."""
        from coderag.store.beside import can_build_beside

        with self._rebuild_lock:
            self._cancel.set()
            for t in self._threads:
                if t.name == "coderag-indexer" and t is not threading.current_thread():
                    t.join()
            self._threads = [t for t in self._threads if t.is_alive()]
            self._cancel.clear()
            log.warning("rebuilding the index of %s: %s", self.root, reason)
            if self.index.state.has_searchable_file() and can_build_beside(self.settings, self.index_dir):
                self._start_beside(reason)
            else:
                self._start_in_place(reason)

    def _start_beside(self, reason: str) -> None:
        self.last_build = None
        self.progress.update(phase="scanning", done=0, total=0, embedded=0, cached=0, error=None, rebuild=reason,
                             beside=True)
        self.progress.pop("dense_by_role", None)
        self._spawn(self._build_beside, "coderag-indexer")

    def _start_in_place(self, reason: str) -> None:
        from coderag.pipelines.code_index import CodeIndex
        from coderag.store.previous_cache import set_aside

        # Requests under way answer from the old index first, new ones wait for the new one; the watcher's
        # batches wait, then see another index and skip.
        with self.requests_held(), self._ingest:
            self._ready.clear()
            old, self.index = self.index, None
            try:
                old.close(release_lock=False)
                with private_umask():
                    set_aside(self.index_dir)
                    self.index = CodeIndex.open(self.root, settings=self.settings, create=True,
                                                lock=self._writer_lock)
            except Exception as exc:  # requests now say the owner is not serving; status says why
                self.progress.update(phase="failed", error=f"rebuilding: {type(exc).__name__}: {exc}")
                raise
            finally:
                self._ready.set()
        self._ingest = self.index.ingest_lock
        self.dense_ready, self.last_build = False, None
        self.progress.update(phase="scanning", done=0, total=0, embedded=0, cached=0, error=None, rebuild=reason,
                             beside=False)
        self.progress.pop("dense_by_role", None)
        self._spawn(self._initial_index, "coderag-indexer")

    def check_settings(self) -> None:
        """Apply a change of the settings file: retrieval (and other query-time) settings from the next search
        on; a model or chunking change by building the index again (`start_over`); store settings when the
        owner starts again. `settings_note` says what was done, for index_status and `coderag status`."""
        from coderag.pipelines.fingerprint import fingerprint

        with self._settings_lock:
            if self.index is None:  # starting, or stopping: the change is read at the next request
                return
            try:
                new = self.settings_file.reread()
            except ConfigError as exc:
                self.settings_note = f"{self.settings_file.describe()} changed but is invalid; still using the " \
                                     f"settings read before: {exc}"
                log.warning("%s", self.settings_note)
                return
            if new is None or new == self.settings:
                return
            old, when = self.settings, time.strftime("%H:%M:%S")
            where = self.settings_file.describe()
            notes = []
            if new.store != old.store:
                notes.append("its store settings apply when the owner starts again (stop it, or let it exit idle)")
                new = new.model_copy(update={"store": old.store})
            self.settings = new
            # The same model in another folder (copied, a virtualenv made again) keeps the index as it is, as
            # an owner's start does (fingerprint.reconcile_model); not while a build beside holds other settings.
            moved = fingerprint(new) != fingerprint(old) and fingerprint(self.index.settings) == fingerprint(old) \
                and self.index.adopt_moved_model(new)
            if moved:
                notes.append(f"the model is the same files in another folder ({new.model_dir()}): the index and its "
                             "vectors are kept")
            if fingerprint(new) != fingerprint(old) and not moved:
                self.start_over(f"the model or chunking settings in {where} changed at {when}")
                how = ("beside the index as it was, which answered until the new one took its place" if
                       self.progress.get("beside") else "in its place, BM25 first")
                notes.insert(0, f"new model or chunking settings, so the index was built again from then on ({how}; "
                                "the vectors of unchanged chunks reused)")
                self.settings_note = f"{where} changed at {when}: " + "; ".join(notes)
            else:
                # A build beside the index holds `new`'s model and chunking already; the index it replaces
                # keeps its own and takes the searches' settings alone.
                same = fingerprint(new) == fingerprint(self.index.settings)
                self.index.use_settings(new if same else
                                        self.index.settings.model_copy(update={"retrieval": new.retrieval}))
                notes.insert(0, "applied to searches from then on")
                self.settings_note = f"{where} changed at {when}: " + "; ".join(notes)
                log.info("%s", self.settings_note)

    def hand_over(self, pid: Optional[int] = None) -> dict:
        """A process that opens the index itself (CodeIndex.open) asks for it: the background owner a
        search started agrees and stops; one run in the foreground keeps the index and says what to do."""
        if not self.hands_over:
            command = " ".join(os.path.basename(a) for a in sys.argv[:2]) or "coderag"
            raise IndexLockedError(
                f"The index of {self.root} is served by pid {os.getpid()} ({command}), which keeps it while it runs "
                f"(a Claude Code session's server, or a coderag serve). Open it here once that process has "
                f"stopped, or search through it: coderag.client.connect({str(self.root)!r}, become_owner=False)"
                f'.call("search", query=...), or coderag search.')
        log.info("pid %s opens the index of %s itself: this background owner hands it over and stops", pid, self.root)
        self.stop_requested.set()
        return {"pid": os.getpid()}

    def build(self, rebuild: bool = False) -> dict:
        """`coderag index` through the owner: {"summary": ...} of a refresh done now, or {"building": why}
        when a background build runs (one `rebuild` starts, or a settings change started): the command
        follows it through `status` and prints `last_build`."""
        if rebuild:
            self.start_over(REBUILD_ASKED)
        if self.progress["phase"] in BUILDING:
            return {"building": self.progress.get("rebuild") or "the owner is indexing the tree"}
        return {"summary": self.refresh()}
