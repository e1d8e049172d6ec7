"""CodeIndex: the Python API over one indexed repository, with every stage reachable as a LlamaIndex object."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from coderag.base.budget import DEFAULT_MAX_TOKENS
from coderag.base.config import Settings, load_settings
from coderag.base.errors import IndexMissingError
from coderag.base.handover import take_writer_lock
from coderag.base.lock import WriterLock
from coderag.base.paths import DB_NAME, ensure_index_dir, find_root, index_dir, private_umask
from coderag.pipelines.index_parts import IndexParts
from coderag.pipelines.search_options import SearchOptions
from coderag.postprocessors.payload import SearchResults
from coderag.store.state import SEARCHABLE, FileRecord, IndexState


class CodeIndex(IndexParts):
    """An open index: search it, refresh it, or take its parts to build your own pipeline.

    Opening takes the index's writer lock and its embedded shard, which admit one process at a time.

    Examples:
        >>> from coderag import CodeIndex
        >>> with CodeIndex.open("path/to/repo") as index:                       # doctest: +SKIP
        ...     index.refresh()                                                  # index what changed
        ...     res = index.search("where is the retry after a failed login", max_tokens=1500)
        ...     print(res[0].file_path, res[0].start_line, res[0].end_line)
        src/auth/service.py 17 23
        >>> index.retriever.retrieve("token validation")                        # doctest: +SKIP
    """

    def __init__(self, root: Path, settings: Settings, state: IndexState, lock: WriterLock,
                 folder: Optional[Path] = None) -> None:
        self.root, self.settings, self.state = root, settings, state
        self.folder = folder or index_dir(root)  # where its database and shard are: .coderag/, or a build beside
        self._lock = lock
        self._store = None
        self._docstore = None
        self._embed_model = None
        self._doc_embed_model = None
        self._storage_context = None
        self._engine = None
        self._tokenizer = None
        self._paths: Optional[list[str]] = None
        self.walk_skips = None  # the SkipLog of the last walk of the whole tree: what it left out unread
        self.upgraded_on_open: dict[str, int] = {}  # what opening it under newer file-class rules dropped
        # One ingestion at a time; searches never wait for it (the stores are safe to read meanwhile).
        self.ingest_lock = threading.RLock()
        from coderag.pipelines.freshness import FileChecker

        self.checker = FileChecker(root, state, self.ingest_lock)

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike = ".", settings: Optional[Settings] = None,
             config_path: Optional[str] = None, wait: float = 0.0, create: bool = True,
             lock: Optional[WriterLock] = None) -> "CodeIndex":
        """Open the index of `root` (or of the nearest ancestor that has one).

        With `create=False` a missing index raises IndexMissingError; with `create=True` an empty
        index is created, to be filled by `refresh()`. `lock`: the index's writer lock, already taken by the
        caller (the owner takes it before it opens its socket); released on failure and by close().

        The background owner a `coderag search` started hands the index over and exits (coderag/base/handover.py);
        an owner run in the foreground (`coderag mcp`, `coderag serve`) keeps it, and the error says so.
        `wait`: seconds to wait for another process that is writing the index.
        """
        from coderag.pipelines.index_repository import before_reading

        start = Path(root).resolve()
        found = find_root(start)
        if found is None:
            if not create:
                raise IndexMissingError(f'No index at or above {start}. Run "coderag index {start}" first.')
            found = start
        settings = settings or load_settings(found, config_path)
        idx = ensure_index_dir(found)
        lock = lock or take_writer_lock(idx, wait)
        try:
            before_reading(idx, settings)  # a swap killed half way, a model moved (pipelines/index_repository.py)
            index = cls._open_in(found, settings, idx, lock)
        except BaseException:
            lock.release()
            raise
        return index

    @classmethod
    def open_beside(cls, root: Path, settings: Settings, lock: WriterLock) -> "CodeIndex":
        """A new, empty index of `root` in the folder beside its index (store/beside.py `prepare`), for an owner
        that builds the index again while it serves the old one; `lock` is the owner's writer lock."""
        from coderag.store.beside import prepare

        with private_umask():
            folder = prepare(index_dir(root))
        return cls._open_in(root, settings, folder, lock)

    @classmethod
    def _open_in(cls, root: Path, settings: Settings, folder: Path, lock: WriterLock) -> "CodeIndex":
        from coderag.pipelines.migrations import drop_new_secrets

        with private_umask():  # a new index.db and shard: 0600 (the folder is 0700 already)
            state = IndexState(folder / DB_NAME)
            index = cls(root, settings, state, lock, folder)
            _ = index.vector_store  # fail now, not on the first query, if the shard is held elsewhere
            # Before it serves anything: a notebook's retrievers hand out stored text.
            index.upgraded_on_open = drop_new_secrets(root, settings, state, store=index.vector_store)
        return index

    def close(self, release_lock: bool = True) -> None:
        """Close the store and the state. `release_lock=False`: the caller keeps the writer lock (an owner
        that opens the index again, to rebuild it)."""
        stop = getattr(self._embed_model, "stop_process", None)
        if stop is not None:
            stop()
        with self.ingest_lock, private_umask():  # closing the shard rewrites its segment files: 0600
            try:
                if self._store is not None and hasattr(self._store, "close"):
                    self._store.close()  # fails where the folder is gone (a repository moved under its owner)
            finally:
                self._store = self._storage_context = None
                try:
                    self.state.close()
                finally:
                    if release_lock:
                        self._lock.release()  # whatever failed: a lock kept would bar the index until exit

    def __enter__(self) -> "CodeIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- work -----------------------------------------------------------------------------------
    def _ingestion(self, progress=None, dense: bool = True):
        from coderag.pipelines.ingestion import Ingestion

        return Ingestion(self.root, self.settings, self.state, progress, store=self.vector_store,
                         docstore=self.docstore, embed_loader=lambda: self.document_embed_model, dense=dense,
                         tokenizer=self.tokenizer)

    def refresh(self, paths: Optional[Sequence[str]] = None, progress=None, dense: bool = True,
                force: bool = False):
        """Index what changed: the whole tree, or only `paths` (relative POSIX paths). Returns an IndexSummary.

        The one way an index is updated (the CLI, the owner's first build, its watcher and dense pass, the
        benchmarks). It refuses, with the `--rebuild` hint, an index built with another model or chunking.
        `dense=False` writes BM25 only (the owner's first pass: searchable at once; vectors follow with
        `dense=True, force=True` over the same paths, which re-indexes them even though they are unchanged).
        """
        from coderag.pipelines.changes import changes_for_paths, detect_changes
        from coderag.pipelines.fingerprint import fingerprint
        from coderag.pipelines.ingestion import sync

        with self.ingest_lock, private_umask():  # new shard segments and WAL pages: 0600
            run = self._ingestion(progress, dense)
            changes = (changes_for_paths(self.root, self.state, list(paths)) if paths is not None
                       else detect_changes(self.root, self.state))
            if force:
                changes.candidates = changes.entries  # the same content, indexed again
            s = run.summary
            s.files_seen, s.unchanged = len(changes.entries), changes.unchanged
            s.skipped, s.skip_items = dict(changes.skips.counts), list(changes.skips.items)  # what the walk left
            sync(run, changes, fingerprint(self.settings), progress, force=force)
            if paths is None:  # a whole tree: what it leaves out, whichever run read it (one account everywhere)
                from coderag.pipelines.skip_report import skip_report

                s.skipped, s.skip_items = skip_report(self.state, changes.skips, s.skip_items)
                self.walk_skips = changes.skips
            self._paths = None
            return s

    def optimize(self, progress=None) -> bool:
        """Build the store's HNSW graph over what is in it, after a bulk load: without it a dense query scans
        every vector of the shard, several times slower on a large one. It blocks and holds the GIL (seconds to a
        minute), so a one-shot build calls it (`coderag index`), never an owner that serves searches. The
        document model is let go first: the optimizer's peak comes on top of what the process holds."""
        import gc

        from coderag.base.heap import trim_heap

        optimize = getattr(self.vector_store, "optimize", None)
        if optimize is None:
            return False  # a Qdrant server builds its own index
        self._doc_embed_model = None  # loaded again if this process embeds more
        with self.ingest_lock:
            gc.collect()  # the model's objects hold reference cycles: freed now, not at the next collection
            trim_heap()
            if progress:
                progress("optimize", 0, 0)
            return optimize()

    def search(self, query: str, *, file_pattern: Optional[str] = None, keywords: Iterable[str] = (),
               requires_exact_match: bool = False, max_tokens: int = DEFAULT_MAX_TOKENS, top_k: Optional[int] = None,
               retriever: str = "hybrid", auto_merge: bool = True, merge_adjacent: bool = True,
               format: str = "xml", refresh: bool = True, freshness: Optional[str] = None) -> SearchResults:
        """Search the index. Returns SearchResults (a list of SearchResult plus `.to_xml()`, `.to_json()`).

        With `refresh`, files found changed since indexing are re-indexed and the search runs again, when
        they are few (`retrieval.freshness_max_files`) and no other thread is indexing (a search never waits
        for one); otherwise results from them are flagged stale. `freshness` overrides the payload's
        freshness note.

        Examples:
            >>> res = index.search("getUserById", file_pattern="src/**/*.ts")   # doctest: +SKIP
            >>> [(r.file_path, r.start_line, r.end_line) for r in res]          # doctest: +SKIP
            [('src/api/users.ts', 12, 30)]
        """
        opts = SearchOptions(query=query, file_pattern=file_pattern, keywords=list(keywords),
                             requires_exact_match=requires_exact_match, max_tokens=max_tokens, top_k=top_k,
                             retriever=retriever, auto_merge=auto_merge, merge_adjacent=merge_adjacent, format=format)
        if self.state.get_meta("fingerprint") is None:
            raise IndexMissingError(f'Index at {index_dir(self.root)} is empty. Run "coderag index {self.root}" first.')
        res, stale = self.engine.search(opts, freshness)
        if (stale and refresh and len(stale) <= self.settings.retrieval.freshness_max_files
                and self.settings_match() and self.ingest_lock.acquire(blocking=False)):
            try:
                t0 = time.perf_counter()
                self.refresh(paths=sorted(stale))
                refresh_ms = (time.perf_counter() - t0) * 1000
            finally:
                self.ingest_lock.release()
            res, _ = self.engine.search(opts, f"refreshed {len(stale)} changed file(s) before answering")
            res.timings["refresh_ms"] = refresh_ms
        return res

    def use_settings(self, settings: Settings) -> None:
        """Search with `settings` from the next search on (an owner whose settings file changed): the query
        pipeline is built again with them, and the query model loaded again if its precision changed. Only
        settings that leave the indexed chunks as they are: a model or chunking change needs a rebuild."""
        from coderag.base.errors import ConfigError
        from coderag.pipelines.fingerprint import fingerprint

        if fingerprint(settings) != fingerprint(self.settings):
            raise ConfigError(f'The model or chunking settings changed: run "coderag index {self.root} --rebuild" '
                              "to build the index with them.")
        old, self.settings = self.settings, settings
        self._engine = None  # built again from the new settings by the next search
        if (settings.retrieval.query_precision, settings.retrieval.embed_process) != \
                (old.retrieval.query_precision, old.retrieval.embed_process):
            stop = getattr(self._embed_model, "stop_process", None)
            if stop is not None:
                stop()
            self._embed_model = None
        if settings.embedding != old.embedding:
            self._doc_embed_model = None

    def adopt_moved_model(self, settings: Settings) -> bool:
        """Settings that name the index's model in another folder holding the same files (a copy of it, a
        virtualenv made again): the index takes that folder and keeps its chunks and vectors, rather than being
        built again (fingerprint.adopt_moved_model). Returns whether it did; `use_settings(settings)` then
        applies. The models already loaded stay: their bytes are the same."""
        from coderag.pipelines.fingerprint import adopt_moved_model

        with self.ingest_lock:
            if not adopt_moved_model(self.state, settings):
                return False
            self.state.commit()
            self.settings = self.settings.model_copy(update={"embedding": settings.embedding})
        return True

    def settings_match(self) -> bool:
        """Whether the index was built with the current model and chunking, so `refresh` may write to it."""
        from coderag.pipelines.fingerprint import built_otherwise, fingerprint

        return not built_otherwise(self.state, fingerprint(self.settings))

    # -- what the index holds ---------------------------------------------------------------------------
    def indexed_paths(self) -> list[str]:
        """Files searchable now, those of a first build's BM25-only pass included (`file_pattern` selects
        from these: leaving them out answered a filtered search with nothing until the dense pass ended)."""
        if self._paths is None:
            self._paths = sorted(p for p, r in self.state.files().items() if r.status in SEARCHABLE)
        return self._paths

    def changed_files(self, paths: Iterable[str]) -> set[str]:
        """Those of `paths` whose file differs from what is indexed (stat, then hash) or is gone."""
        return {p for p, rec in self.check_files(paths).items() if rec is None}

    def check_files(self, paths: Iterable[str]) -> dict[str, Optional[FileRecord]]:
        """Each of `paths` -> its manifest row if the file on disk is the content indexed, None if not."""
        return self.checker.check(paths)

    def other_locations_of(self, node_ids: Iterable[str]) -> dict[str, list[str]]:
        """Where else each of these chunks is (`path:start-end`): copies deduplicated at indexing; nodes
        without copies are left out."""
        return {nid: [f"{p}:{s}-{e}" for p, s, e in locs]
                for nid, locs in self.state.other_locations_of(node_ids).items()}

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` as payload budgets count them (cl100k, as LlamaIndex counts by default)."""
        return self.tokenizer.count(text)

    def warm_up(self) -> None:
        """Load what a first search would otherwise pay for: the query model, the tokenizer and its
        token-width table, the stored line counts, the store's files in the OS page cache, and one search's
        imports; and start the query-embedding helper process (`retrieval.embed_process`; `close()` stops
        it). For resident processes (the owner service, notebooks); a one-shot CLI search does not call it.

        Examples:
            >>> index = CodeIndex.open("."); index.warm_up()                     # doctest: +SKIP
        """
        from array import array

        from coderag.postprocessors.tokenizer import LINE_COUNTS_FILES

        self.embed_model.get_query_embedding("warm up")
        start = getattr(self.embed_model, "start_process", None)
        if start is not None and self.settings.retrieval.embed_process:
            start()
        tok = self.tokenizer
        tok.widths()
        tok.keep_line_counts({(path, sha): array("I", blob) for path, sha, blob
                              in self.state.current_line_tokens(tok.name, LINE_COUNTS_FILES)})
        self.state.files_of(())  # reads the manifest into memory (IndexState keeps it for its one writer)
        warm = getattr(self.vector_store, "warm_page_cache", None)
        if warm is not None:
            warm()
        self.search("warm up", max_tokens=200, refresh=False)  # the modules and objects a search builds
