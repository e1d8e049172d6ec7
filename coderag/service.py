"""IndexService: the one owner of an index. It holds the open CodeIndex, indexes in the background and
watches the tree (coderag/owner_build.py), and answers thin clients on a Unix socket in the index folder.

Beside it, nothing is refused (coderag/owner_changes.py): `coderag index` (and `--rebuild`) has the owner do
the work; an edit of the settings file is applied: retrieval settings to the next search, a model or
chunking change by building the index again in the background; and the background owner a search
started hands the index over to a process that opens it (coderag/base/handover.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Optional

from coderag.base.budget import DEFAULT_MAX_TOKENS, EXPAND_CONTEXT_LINES
from coderag.base.build_clock import BuildClock
from coderag.base.code_id import code_id
from coderag.base.config import Settings, load_settings
from coderag.base.errors import IndexLockedError, IndexMissingError
from coderag.base.handover import HAND_OVER
from coderag.owner_build import OwnerBuild
from coderag.owner_changes import BUILDING, OwnerChanges  # noqa: F401 (BUILDING: public here)
from coderag.base.paths import LOCK_NAME, LOG_NAME, OWNER_FILE, ensure_index_dir, private_umask
from coderag.socket_server import SOCKET_NAME, bind, socket_path_for  # noqa: F401 (SOCKET_NAME: public here)

log = logging.getLogger("coderag.service")

OPEN_WAIT_S = 300.0  # a request that reaches an owner still opening its index waits this long for it
RESULT_MEMORY = 2048
STOP_JOIN_S = 30.0
SCRUB = ("files the current secret rules leave out, or mask, were in the index: built again so that none of "
         "their bytes stay in its files")
MODEL_CHANGED_UNDER_OWNER = ("its files changed in their folder since the index was built: the owner answers with the "
                             "model it loaded until it stops; its next start builds the index again, embedding "
                             "every chunk")
HOLD_WAIT_S = 10.0  # a swap waits this long at most for the requests under way (a search takes milliseconds)


def setup_logging(index_dir: Path, level: int = logging.INFO) -> None:
    """Log to stderr and <index>/coderag.log; never to stdout (stdout may be an MCP channel)."""
    root = logging.getLogger("coderag")
    if any(isinstance(h, logging.FileHandler) for h in root.handlers):
        return  # configured already (an owner logs to one index's file)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    with private_umask():  # the log names the repository's files: 0600, like the rest of the index
        file_handler = logging.FileHandler(index_dir / LOG_NAME, encoding="utf-8")
    for handler in (logging.StreamHandler(), file_handler):
        handler.setFormatter(fmt)
        root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False  # the MCP SDK configures the root logger too: log each line once


class IndexService(OwnerBuild, OwnerChanges):
    """Owner of one index: search, status, expand and refresh, for this process and for thin clients.

    `start()` raises IndexLockedError when another process owns the index. `config_path`: the settings file
    it was started with (`--config`), read again when it changes. `hands_over`: the owner a search started
    in the background; it stops when a process that opens the index itself asks for it (`stop_requested`).
    """

    def __init__(self, root: str | Path, settings: Optional[Settings] = None, watch: bool = True,
                 background: bool = True, serve: bool = True, tune_gc: bool = False,
                 config_path: Optional[str | Path] = None, hands_over: bool = False) -> None:
        from coderag.settings_file import SettingsFile

        self.root = Path(root).resolve()
        self.settings = settings or load_settings(self.root, config_path)
        self.settings_file = SettingsFile(self.root, config_path)
        self.settings_note: Optional[str] = None  # what the last change of the settings file did
        self._settings_lock = threading.Lock()
        self.hands_over = hands_over
        self.stop_requested = threading.Event()  # the process's main loop stops the owner when set
        self.last_build: Optional[dict] = None  # the summary of the last background build, for `coderag index`
        self.index_dir = ensure_index_dir(self.root)
        self.watch, self.background, self.serve = watch, background, serve
        self.tune_gc = tune_gc  # the owner process's own entry point: tune its GC after the warm-up
        self.index = None
        self._server = None
        self._stop = threading.Event()
        self._moved_away = threading.Event()  # it saw its repository moved and let go of the index (moved())
        self._cancel = threading.Event()  # the background build in progress is to end (a rebuild starts over)
        self._rebuild_lock = threading.Lock()
        self._writer_lock = None
        self._ingest = threading.RLock()  # replaced by the index's own ingest lock in start()
        self._threads: list[threading.Thread] = []
        self._results: OrderedDict[str, dict] = OrderedDict()
        self.progress = {"phase": "idle", "done": 0, "total": 0, "embedded": 0, "error": None}
        self.dense_ready = False
        self._clock = BuildClock()  # the build under way's time left (owner_build.py)
        self._ready = threading.Event()  # the index is open (requests that arrive before wait for it)
        self._requests = threading.Condition()  # requests under way, and whether new ones are held (requests_held)
        self._in_flight, self._requests_held = 0, False
        self._in_request = threading.local()  # whether this thread answers a request (requests_held waits not for it)
        self._watcher = None
        self.started = time.time()
        self.socket_path = socket_path_for(self.index_dir)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "IndexService":
        from coderag.base.lock import WriterLock
        from coderag.pipelines.code_index import CodeIndex  # LlamaIndex: imported before the lock is taken
        from coderag.pipelines.fingerprint import SETTINGS_CHANGED
        from coderag.pipelines.index_repository import before_reading, servable_while_rebuilt, start_over_if_stale

        setup_logging(self.index_dir)
        # The lock, then the socket at once, then the index (opening the shard takes a while): a client that
        # finds the lock held finds an owner that answers (its requests wait for the index), or finds it a
        # moment later while it retries (client.owner_or_open) -- never a holder that stays silent.
        lock = self._writer_lock = WriterLock(self.index_dir / LOCK_NAME).acquire()
        try:
            if self.serve:
                self._bind()
            with private_umask():  # a new index.db and shard are created 0600
                model = before_reading(self.index_dir, self.settings)  # a half-done swap ends, a moved model is kept
                # An index of other settings is answered from, as it was built, while a build beside it runs;
                # with nobody to run that build (no background), or where none can run, it starts over here.
                as_built = servable_while_rebuilt(self.index_dir, self.settings) if self.background else None
                why = "" if as_built is not None else start_over_if_stale(self.index_dir, self.settings, model)
                if why:
                    log.warning("%s: rebuilding the index", why)
                    self.progress["rebuild"] = why
                self.index = CodeIndex.open(self.root, settings=as_built or self.settings, create=True, lock=lock)
        except BaseException:
            self._unbind()
            lock.release()
            self._ready.set()  # requests already waiting fail at once (the index is None)
            raise
        self._ingest = self.index.ingest_lock
        if self.index.upgraded_on_open:
            log.info("opened the index of %s under newer file-class rules: %s", self.root,
                     ", ".join(f"{k}: {v}" for k, v in self.index.upgraded_on_open.items()))
        counts = self.index.state.counts()
        self.dense_ready = self.index.state.get_meta("fingerprint") is not None and counts["pending_dense"] == 0
        if self.background and as_built is not None:
            self.start_over(SETTINGS_CHANGED)
        elif self.background and self._holds_dropped_bytes():
            self.start_over(SCRUB)
        elif self.background:
            self.progress.update(phase="scanning")  # before the first request can see an empty index
            self._spawn(self._initial_index, "coderag-indexer")
        self._ready.set()  # requests waiting since the socket opened see the index and its phase now
        if self.watch:
            from coderag.watcher import TreeWatcher

            self._watcher = TreeWatcher(str(self.root), self._apply_changes, self._stop)
            self._spawn(self._watcher.run, "coderag-watcher")
        log.info("owner of %s (pid %d), socket %s", self.root, os.getpid(), self.socket_path)
        return self

    def _holds_dropped_bytes(self) -> bool:
        """Whether opening the index dropped files under newer secret rules, or masked their tokens, so that
        their old bytes are still in the store's files (never answered: a store frees no space when a point
        goes) and a build beside it can write a store without them."""
        from coderag.pipelines.migrations import PURGED_NOTE, REMASKED_NOTE
        from coderag.store.beside import can_build_beside

        dropped = {PURGED_NOTE, REMASKED_NOTE} & self.index.upgraded_on_open.keys()
        return bool(dropped) and can_build_beside(self.settings, self.index_dir)

    def _spawn(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _bind(self) -> None:
        path = self.socket_path
        self._server = bind(path, self)
        self._spawn(self._server.serve_forever, "coderag-server")  # pings answered now, other requests when ready
        tmp = self.index_dir / f".{OWNER_FILE}.{os.getpid()}"
        with private_umask():
            tmp.write_text(json.dumps({"pid": os.getpid(), "socket": str(path), "root": str(self.root),
                                       "started": self.started, "code": code_id()}), "utf-8")
        os.replace(tmp, self.index_dir / OWNER_FILE)  # atomic: a client never reads half of it

    def _unbind(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        for p in (self.socket_path, self.index_dir / OWNER_FILE):
            try:
                p.unlink()
            except OSError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._unbind()
        for t in self._threads:  # a process that exits while the indexer is inside the model aborts (SIGABRT)
            if t.name == "coderag-indexer" and t is not threading.current_thread():
                t.join(timeout=STOP_JOIN_S)
        with self._ingest:
            index, self.index = self.index, None
            if index is not None:
                moved = self.moved()  # asked of the lock, which the close lets go
                try:
                    index.close()
                except Exception:
                    if not moved:
                        raise
                    # The store cannot write its last state where its files were: they are at the new place,
                    # as complete as its last commit, and the process's exit lets go of them.
                    log.warning("the index of %s was moved or deleted; closing it in its old place failed", self.root)

    def wait(self) -> None:
        """Block until stopped (foreground `coderag serve`)."""
        while not self._stop.wait(0.5):
            pass

    def moved(self) -> bool:
        """Whether the repository or its index folder is no longer where the owner opened it (moved, renamed,
        deleted): the owner would answer from a tree that is not there, and the index's new place finds no
        owner at the socket its owner.json names while the writer lock stays held (WriterLock.in_place)."""
        lock = self._writer_lock
        return self._moved_away.is_set() or (lock is not None and not lock.in_place())

    @property
    def let_go(self) -> bool:
        """Whether it saw its repository moved and let go of the index: it answers nothing more."""
        return self._moved_away.is_set()

    def _let_go_of_moved_index(self) -> None:
        """The repository moved under an owner in its own process (the MCP server, which lives as long as
        Claude Code's session): it lets go of the index at once, once the requests under way have answered.
        Its writer lock and the store's files moved with the folder, and a coderag started in the new place
        (a search, `coderag index`, Claude Code started there) would find them held until the session ends."""
        with self._requests:
            if self._moved_away.is_set():
                return
            self._moved_away.set()
        log.warning("%s or its .coderag was moved or deleted: letting go of the index", self.root)
        with self.requests_held():
            self.stop()

    # -- requests -------------------------------------------------------------------------------
    def dispatch(self, method: str, params: dict) -> Any:
        handler = {"search": self.search, "status": self.status, "expand": self.expand, "refresh": self.refresh,
                   "build": self.build, HAND_OVER: self.hand_over,
                   "ping": lambda: {"pid": os.getpid(), "root": str(self.root), "ready": self._ready.is_set(),
                                    "code": code_id()}
                   }.get(method)
        if handler is None:
            raise ValueError(f"unknown method {method!r}")
        # Before a ping too: a client in the repository's new place finds this owner through the owner.json
        # that moved with the folder, and must find it gone (it then opens the index itself), not serving.
        if self.moved():  # a `coderag serve` owner stops by itself (daemon.wait_until_idle); an MCP server says so
            self._let_go_of_moved_index()
            raise IndexMissingError(
                f"{self.root} or its .coderag was moved or deleted after this coderag process (pid {os.getpid()}) "
                "opened it, so it answers from it no more and has let go of it. Restart it where the repository is "
                "now (in Claude Code: /mcp to reconnect coderag, or start claude in the repository's new folder), "
                "or move it back; a moved index is used as it is, a deleted one is built again (an MCP server does "
                "either at its next call once the repository is in its place).")
        if method in ("ping", HAND_OVER):
            return handler(**params)
        with self._requests:
            self._requests.wait_for(lambda: not self._requests_held, OPEN_WAIT_S)
            self._in_flight += 1
        self._in_request.active = True
        try:
            self._ready.wait(OPEN_WAIT_S)  # an owner that has just bound its socket is still opening the index
            if self.index is None or self.stop_requested.is_set():
                raise IndexLockedError(f"The owner of {self.root} (pid {os.getpid()}) is not serving its index "
                                       f"(starting up, or stopping). Try again in a few seconds.")
            if method != "expand":
                self.check_settings()  # an edited qdrant.yaml is never answered from the old settings
            return handler(**params)
        finally:
            self._in_request.active = False
            with self._requests:
                self._in_flight -= 1
                self._requests.notify_all()

    @contextlib.contextmanager
    def requests_held(self) -> Iterator[None]:
        """New requests wait (up to OPEN_WAIT_S) while the block runs, and the block starts once those under
        way have answered (or after HOLD_WAIT_S, should one hang): the index can be closed and replaced
        without a request meeting it closed (a rebuild's swap, owner_build.py; a rebuild in place, which a
        request may start itself: that one is not waited for)."""
        own = 1 if getattr(self._in_request, "active", False) else 0
        with self._requests:
            self._requests_held = True
            self._requests.wait_for(lambda: self._in_flight <= own, HOLD_WAIT_S)
        try:
            yield
        finally:
            with self._requests:
                self._requests_held = False
                self._requests.notify_all()

    def search(self, **params: Any) -> dict:
        from coderag.pipelines.search_options import RetrieverMode

        idx = self.index
        if not self.dense_ready and params.get("retriever", "hybrid") != RetrieverMode.BM25.value:
            p = self.progress
            note = (f"building: answering from BM25 while dense vectors are computed "
                    f"({p['phase']} {p['done']}/{p['total']} files)")
            if p["phase"] == "failed":
                note = (f"indexing failed ({p['error']}): answering from BM25 over what was indexed; "
                        f'"coderag index {self.root}" shows the error')
            # Not the fingerprint: a first build stamps it before its first batch is committed.
            if not idx.state.has_searchable_file() and p["phase"] != "idle":
                return self._building(params, note)
            res = idx.search(**{**params, "retriever": "bm25"}, refresh=False, freshness=note)
        else:
            res = idx.search(**params)  # changed files re-indexed first, unless the watcher is indexing
        for r in res:
            self._remember(r)
        for c in res.candidates:  # a candidate line's first expand_result shows its own lines
            self._remember(c, lines_only=True)
        return res.to_dict()

    def _building(self, params: dict, note: str) -> dict:
        """No chunk is written yet on a first build: an empty answer that says so (not "run coderag index")."""
        from coderag.pipelines.query import strategy_name
        from coderag.pipelines.search_options import SearchOptions
        from coderag.postprocessors.payload import SearchResults

        opts = SearchOptions(**{**params, "retriever": "bm25"})  # a bad request is still an error the caller can fix
        message = (f"The index of {self.root} is being built and has no chunks yet: search again in a few seconds."
                   if self.progress["phase"] != "failed" else
                   f"Indexing {self.root} failed ({self.progress['error']}) before any chunk was written. "
                   f'Run "coderag index {self.root}" to see the error, fix it, then restart the server.')
        res = SearchResults([], query=opts.query, root=str(self.root), strategy=strategy_name(opts), freshness=note,
                            max_tokens=opts.max_tokens, message=message)
        res.tokens = self.index.count_tokens(res.to_xml())
        return res.to_dict()

    def _remember(self, r, lines_only: bool = False) -> None:
        self._results[r.id] = {"file_path": r.file_path, "start_line": r.start_line,
                               "end_line": getattr(r, "full_end_line", None) or r.end_line}
        if lines_only:
            self._results[r.id].update(lines_only=True, symbol=r.symbol)
        self._results.move_to_end(r.id)
        while len(self._results) > RESULT_MEMORY:
            self._results.popitem(last=False)

    def expand(self, id: str, context_lines: int = EXPAND_CONTEXT_LINES, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
        """The enclosing parent of a result, or its surrounding lines, read from the file now."""
        from coderag.pipelines.expand import expand_result

        ref = self._results.get(id)
        out = expand_result(self.index, id, ref, context_lines, max_tokens)
        if ref is not None and ref.pop("lines_only", False):
            ref.pop("symbol", None)  # a candidate once shown is a result: expanded again, its enclosing definition
        return out

    def status(self, build_items: bool = False) -> dict:
        """The index, its build and the owner. `build_items`: the last build's lists of skipped and noted
        files too (`coderag index --verbose` following a build); index_status leaves them out, as tokens
        an agent would read for nothing."""
        from coderag.nodes.scan import SkipLog
        from coderag.pipelines.fingerprint import MODEL_FILES_KEY, MODEL_ID_KEY, model_changed
        from coderag.pipelines.skip_report import skip_report

        idx = self.index
        counts = idx.state.counts()
        # Its queries are embedded by the model it loaded, whose vectors the index holds: its answers stay
        # consistent, and only its next start sees the new files (fingerprint.reconcile_model).
        model_note = MODEL_CHANGED_UNDER_OWNER if model_changed(
            idx.settings.model_dir(), idx.state.get_meta(MODEL_ID_KEY), idx.state.get_meta(MODEL_FILES_KEY)) else None
        last_build = self.last_build
        if last_build is not None and not build_items:
            last_build = {k: v for k, v in last_build.items() if k not in ("skip_items", "note_items")}

        skipped, _ = skip_report(idx.state, idx.walk_skips or SkipLog())  # counted as `coderag index` counts them
        indexing = dict(self.progress)
        left = self._clock.seconds_left() if indexing["phase"] in BUILDING else None
        if left is not None:
            indexing["seconds_left"] = round(left)
        return {"root": str(self.root), "index_dir": str(self.index_dir), "pid": os.getpid(),
                "model": str(self.settings.model_dir()), "model_note": model_note,
                "last_update": idx.state.get_meta("last_update"),
                "counts": counts, "skipped": skipped, "dense_ready": self.dense_ready, "indexing": indexing,
                "settings": {"file": str(self.settings_file.path), "note": self.settings_note},
                "last_build": last_build,
                "watcher": self._watcher.status() if self._watcher is not None else {"state": "off"},
                "uptime_s": round(time.time() - self.started, 1)}

    def refresh(self, paths: Optional[list[str]] = None) -> dict:
        from dataclasses import asdict

        summary = asdict(self.index.refresh(paths=paths))
        return summary | {"skip_items": summary["skip_items"][:200]}
