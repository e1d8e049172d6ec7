"""CodeIndex: the Python API over one indexed repository, with every stage reachable as a LlamaIndex object."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from coderag.config import Settings, StoreMode, load_settings
from coderag.errors import IndexMissingError
from coderag.lock import WriterLock
from coderag.paths import DB_NAME, LOCK_NAME, ensure_index_dir, find_root, index_dir, private_umask
from coderag.pipelines.query import run_search
from coderag.pipelines.search_options import SearchOptions
from coderag.postprocessors.payload import SearchResults
from coderag.store.state import SEARCHABLE, FileRecord, IndexState

LINE_COUNTS_CACHE = 20_000  # files whose line token counts a process keeps (~1 KB each on the 100k-chunk bench)
GC_YOUNG_THRESHOLD = 50_000  # net allocations between young collections in a warmed-up (resident) process
_gc_lock = threading.Lock()
_gc_users: "weakref.WeakSet[CodeIndex]" = weakref.WeakSet()  # warmed-up indexes not closed yet
_gc_saved: list = []  # the process's thresholds, saved by the first of them


def _tune_gc(index: "CodeIndex", on: bool) -> None:
    """Search-friendly GC thresholds while at least one warmed-up index is open (see warm_up); the
    process's own thresholds come back when the last of them closes, in whatever order they close."""
    import gc

    with _gc_lock:
        if on and index not in _gc_users:
            if not _gc_users:
                _gc_saved[:] = [gc.get_threshold()]
            _gc_users.add(index)
            gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 10)
        elif not on and index in _gc_users:
            _gc_users.discard(index)
            if not _gc_users and _gc_saved:
                gc.set_threshold(*_gc_saved.pop())


class CodeIndex:
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

    def __init__(self, root: Path, settings: Settings, state: IndexState, lock: WriterLock) -> None:
        self.root, self.settings, self.state = root, settings, state
        self._lock = lock
        self._store = None
        self._docstore = None
        self._embed_model = None
        self._doc_embed_model = None
        self._storage_context = None
        self._line_counts: OrderedDict = OrderedDict()  # (path, sha256, encoding) -> counts
        self._line_lock = threading.Lock()
        self._tokenizer = None
        self._paths: Optional[list[str]] = None
        # One ingestion at a time; searches never wait for it (the stores are safe to read meanwhile).
        self.ingest_lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike = ".", settings: Optional[Settings] = None,
             config_path: Optional[str] = None, wait: float = 0.0, create: bool = True,
             lock: Optional[WriterLock] = None) -> "CodeIndex":
        """Open the index of `root` (or of the nearest ancestor that has one).

        With `create=False` a missing index raises IndexMissingError; with `create=True` an empty
        index is created, to be filled by `refresh()`. `lock`: the index's writer lock, already taken by the
        caller (the owner takes it before it opens its socket); released on failure and by close().
        """
        start = Path(root).resolve()
        found = find_root(start)
        if found is None:
            if not create:
                raise IndexMissingError(f'No index at or above {start}. Run "coderag index {start}" first.')
            found = start
        settings = settings or load_settings(found, config_path)
        idx = ensure_index_dir(found)
        lock = lock or WriterLock(idx / LOCK_NAME).acquire(wait=wait)
        try:
            with private_umask():  # a new index.db and shard: 0600 (the folder is 0700 already)
                state = IndexState(idx / DB_NAME)
                index = cls(found, settings, state, lock)
                _ = index.vector_store  # fail now, not on the first query, if the shard is held elsewhere
        except BaseException:
            lock.release()
            raise
        return index

    def close(self) -> None:
        _tune_gc(self, False)
        stop = getattr(self._embed_model, "stop_process", None)
        if stop is not None:
            stop()
        with self.ingest_lock, private_umask():  # closing the shard rewrites its segment files: 0600
            if self._store is not None and hasattr(self._store, "close"):
                self._store.close()
            self._store = self._storage_context = None
            self.state.close()
            self._lock.release()

    def __enter__(self) -> "CodeIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- LlamaIndex parts -----------------------------------------------------------------------
    @property
    def vector_store(self):
        """The vector store: EdgeVectorStore (embedded) or QdrantVectorStore (server)."""
        if self._store is None:
            from coderag.pipelines.stores import open_vector_store

            self._store = open_vector_store(self.settings, self.root)
        return self._store

    @property
    def docstore(self):
        """KVDocumentStore with every node of the hierarchy (parents too), for auto-merging."""
        if self._docstore is None:
            from coderag.pipelines.stores import open_docstore

            self._docstore = open_docstore(self.state)
        return self._docstore

    @property
    def storage_context(self):
        """StorageContext over `docstore` and `vector_store` (what the auto-merging retriever reads parents from)."""
        if self._storage_context is None:
            from llama_index.core.storage import StorageContext

            self._storage_context = StorageContext.from_defaults(docstore=self.docstore,
                                                                 vector_store=self.vector_store)
        return self._storage_context

    @property
    def embed_model(self):
        """The index's model for queries, one thread (latency under load): its ONNX twin when one was
        exported (0.2 s to load instead of ~7 s of torch imports), else HuggingFaceEmbedding."""
        if self._embed_model is None:
            self._embed_model = self._load_model(self.settings.retrieval.query_precision)
        return self._embed_model

    def _load_model(self, precision: str):
        """The ONNX twin at `precision` when one was exported, else HuggingFaceEmbedding; one thread."""
        from coderag.nodes.onnx_embedding import load_query_model

        model_dir = self.settings.model_dir()
        model = load_query_model(model_dir, self.settings.embedding.window_tokens, precision)
        if model is None:
            from coderag.nodes.embedding import load_embed_model

            model = load_embed_model(model_dir, self.settings.embedding.batch_size, threads=1)
        return model

    @property
    def document_embed_model(self):
        """The model for chunks this process embeds (refresh, the owner's watcher and dense pass): always full
        precision, the ONNX fp32 twin or torch, whatever `retrieval.query_precision` says, so an index holds
        the same vectors however its files were indexed (and the chunk-hash cache only fp32 ones)."""
        if self.settings.retrieval.query_precision == "fp32":
            return self.embed_model
        if self._doc_embed_model is None:
            self._doc_embed_model = self._load_model("fp32")
        return self._doc_embed_model

    @property
    def supports_text_filter(self) -> bool:
        return self.settings.store.mode == StoreMode.Embedded

    @property
    def retriever(self):
        """The default retriever graph: weighted-RRF(dense, BM25) under bounded auto-merging."""
        from coderag.pipelines.retriever_graph import build_retriever

        return build_retriever(self, SearchOptions(query="-"), {})

    @property
    def dense_retriever(self):
        from coderag.pipelines.retrievers import DenseRetriever  # the dense leg alone
        return DenseRetriever(self.vector_store, self.embed_model, self.settings.retrieval.dense_top_k)

    @property
    def bm25_retriever(self):
        """BM25 over the store's sparse vectors with the code-aware tokenizer."""
        from coderag.pipelines.retrievers import SparseRetriever
        return SparseRetriever(self.vector_store, self.settings.retrieval.sparse_top_k)

    @property
    def ingestion_pipeline(self):
        """The IngestionPipeline (filter, splitter, path injection, dedup, cached embedding -> store)."""
        return self._ingestion().pipeline

    def as_query_engine(self, llm: Any, **kwargs: Any):
        """A RetrieverQueryEngine over `retriever` for users who bring their own LLM."""
        from llama_index.core.query_engine import RetrieverQueryEngine

        return RetrieverQueryEngine.from_args(self.retriever, llm=llm, **kwargs)

    # -- work -----------------------------------------------------------------------------------
    def _ingestion(self, progress=None):
        from coderag.pipelines.ingestion import Ingestion

        return Ingestion(self.root, self.settings, self.state, progress, store=self.vector_store,
                         docstore=self.docstore, embed_loader=lambda: self.document_embed_model)

    def refresh(self, paths: Optional[Sequence[str]] = None, progress=None):
        """Index what changed: the whole tree, or only `paths` (relative POSIX paths). Returns an IndexSummary."""
        from coderag.pipelines.changes import changes_for_paths, detect_changes
        from coderag.pipelines.ingestion import fingerprint, sync

        with self.ingest_lock:
            run = self._ingestion(progress)
            changes = (changes_for_paths(self.root, self.state, list(paths)) if paths is not None
                       else detect_changes(self.root, self.state, self.settings))
            s = run.summary
            s.files_seen, s.unchanged = len(changes.entries), changes.unchanged
            s.skipped, s.skip_items = dict(changes.skips.counts), list(changes.skips.items)  # what the walk left
            sync(run, changes, fingerprint(self.settings), progress)
            self._paths = None
            return s

    def search(self, query: str, *, file_pattern: Optional[str] = None, keywords: Iterable[str] = (),
               requires_exact_match: bool = False, max_tokens: int = 4000, top_k: Optional[int] = None,
               retriever: str = "hybrid", auto_merge: bool = True, merge_adjacent: bool = True,
               format: str = "xml", refresh: bool = True, freshness: Optional[str] = None) -> SearchResults:
        """Search the index. Returns SearchResults (a list of SearchResult plus `.to_xml()`, `.to_json()`).

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
        return run_search(self, opts, refresh=refresh, freshness=freshness)

    def settings_match(self) -> bool:
        """Whether the index was built with the current model and chunking, so `refresh` may write to it."""
        from coderag.pipelines.ingestion import fingerprint

        return self.state.get_meta("fingerprint") in (None, fingerprint(self.settings))

    # -- helpers used by the query pipeline -------------------------------------------------------
    can_refresh = True

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
        """Each of `paths` -> its manifest row if the file on disk is the content indexed (same size and
        mtime, or else the same hash), None if it changed, is gone or is not indexed."""
        from coderag.nodes.scan import hash_file

        paths = list(dict.fromkeys(paths))
        records = self.state.files_of(paths)
        root = str(self.root)  # plain strings: a search checks ~40 files, and Path joins cost more than stat
        out: dict[str, Optional[FileRecord]] = {}
        for p in paths:
            rec = records.get(p)
            full = os.path.join(root, p)
            try:
                st = os.stat(full)
            except OSError:
                rec = None
            else:
                if rec is not None and (rec.size != st.st_size or rec.mtime_ns != st.st_mtime_ns):
                    if hash_file(full) != rec.sha256:
                        rec = None
            out[p] = rec
        return out

    def line_tokens(self, files: Mapping[str, str], encoding: str) -> dict[str, Any]:
        """Stored token counts of lines (postprocessors/line_tokens.py) for `files` (path -> sha256 of the
        content wanted), where they were counted from that content in `encoding`. Kept in memory by
        (path, sha256); `warm_up` preloads them."""
        from array import array

        out, missing = {}, []
        with self._line_lock:
            for path, sha in files.items():
                hit = self._line_counts.get((path, sha, encoding))
                if hit is not None:
                    out[path] = hit
                else:
                    missing.append(path)
        if missing:
            found = {}
            for path, (sha, blob) in self.state.line_tokens_of(missing, encoding).items():
                if sha == files[path]:
                    found[(path, sha, encoding)] = out[path] = array("I", blob)
            self._cache_line_tokens(found)
        return out

    def _cache_line_tokens(self, entries: dict) -> None:
        with self._line_lock:
            for key, counts in entries.items():
                self._line_counts[key] = counts
                self._line_counts.move_to_end(key)
            while len(self._line_counts) > LINE_COUNTS_CACHE:
                self._line_counts.popitem(last=False)

    def other_locations(self, node_id: str) -> list[str]:
        """Where else the same chunk is (`path:start-end`): copies deduplicated at indexing."""
        return self.other_locations_of([node_id]).get(node_id, [])

    def other_locations_of(self, node_ids: Iterable[str]) -> dict[str, list[str]]:
        """`other_locations` of many nodes (one query); nodes without copies are left out."""
        return {nid: [f"{p}:{s}-{e}" for p, s, e in locs]
                for nid, locs in self.state.other_locations_of(node_ids).items()}

    def warm_up(self) -> None:
        """Load what a first search would otherwise pay for: the query model, the tokenizer and its
        token-width table, the store's files in the OS page cache, and one search's imports; and start the
        query-embedding helper process (`retrieval.embed_process`; `close()` stops it). For resident
        processes (the owner service, notebooks); a one-shot CLI search does not call it. It also tunes
        the process's cyclic garbage collector for searches (see the end of this method); the process's
        own thresholds come back when the last warmed-up index is closed.

        Examples:
            >>> index = CodeIndex.open("."); index.warm_up()                     # doctest: +SKIP
        """
        from coderag.postprocessors.payload_cost import token_widths

        self.embed_model.get_query_embedding("warm up")
        start = getattr(self.embed_model, "start_process", None)
        if start is not None and self.settings.retrieval.embed_process:
            start()
        self.count_tokens("warm up")
        enc = self.tiktoken_encoding
        if enc is not None:
            from array import array

            token_widths(enc)
            self._cache_line_tokens({(path, sha, enc.name): array("I", blob) for path, sha, blob
                                     in self.state.current_line_tokens(enc.name, LINE_COUNTS_CACHE)})
        self.state.files_of(())  # reads the manifest into memory (IndexState keeps it for its one writer)
        warm = getattr(self.vector_store, "warm_page_cache", None)
        if warm is not None:
            warm()
        self.search("warm up", max_tokens=200, refresh=False)  # the modules and objects a search builds
        # Everything loaded so far (LlamaIndex, pydantic schemas, the models' Python objects: about a million
        # objects) is long-lived: frozen out of the cyclic GC, whose full passes over it paused searches
        # for 200-500 ms every few hundred queries (measured with gc.callbacks on the 102k-leaf bench).
        # Then the youngest generation is collected after 50,000 net allocations instead of 700. A search
        # holds ~2,000 young objects at once (candidates, their metadata), so at 700 the collector ran
        # mid-search about once every 4 searches, traversing them all and finding no garbage, in pauses of
        # 2-37 ms (gc.callbacks, 300 new queries on the 102k-leaf bench: 85 passes, 311 ms, 0 collected);
        # at 50,000 it did not run once in those 300 searches. Cyclic garbage waits longer, and is
        # bounded by the threshold. A/B in one process: p50 27.1 vs 28.8 ms, p95 34.0 vs 37.6.
        import gc

        gc.collect()
        gc.freeze()
        _tune_gc(self, True)  # put back by close()

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` for LlamaIndex's global tokenizer (tiktoken cl100k from the cache llama-index ships)."""
        if self._tokenizer is None:
            from llama_index.core.utils import get_tokenizer

            self._tokenizer = get_tokenizer()
        return len(self._tokenizer(text))

    @property
    def tiktoken_encoding(self) -> Any:
        """The tiktoken Encoding behind `count_tokens`, or None when the global tokenizer is something else
        (then packing counts line by line through `count_tokens`)."""
        self.count_tokens("")
        enc = getattr(getattr(self._tokenizer, "func", None), "__self__", None)
        keywords = getattr(self._tokenizer, "keywords", None)
        ok = type(enc).__name__ == "Encoding" and hasattr(enc, "decode_single_token_bytes")  # token_widths
        return enc if ok and keywords == {"allowed_special": "all"} else None
