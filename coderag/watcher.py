"""TreeWatcher: follow file changes under a root without ever watching through a link, restarted when it dies.

watchfiles' recursive mode lets the Rust notify backend follow symlinked folders (a link to /etc put 135
watches there, and a file written under a linked folder was indexed), and it cannot be told not to. So the
watcher plans the real folders under the root itself (os.scandir, links never followed) and watches each
one non-recursively; a folder created, moved or deleted re-plans the set. Events are checked again on
arrival with the repository's path-safety check (nodes/safe_path.py): an event is kept only for a path
in a watched folder of the root, outside .coderag/. What the indexer then reads is decided there too (a
link out of the root is never read; an indexed file replaced by one is forgotten).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from typing import Callable, Optional

from coderag.base.paths import INDEX_DIR_NAME
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.safe_path import INDEX_FOLDER, OUTSIDE, RepoFiles, is_decodable

log = logging.getLogger("coderag.watcher")

DEBOUNCE_MS = 80
STEP_MS = 20
# watchfiles yields an empty batch after this long without events, so a rescan owed by a new plan runs soon
# after the new folders are watched even when nothing else happens.
IDLE_YIELD_MS = 250
NOT_WATCHED = frozenset({INDEX_DIR_NAME, ".git"})  # our own writes, and git's (its events were dropped anyway)
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_S = 60.0  # a watcher that ran this long before dying starts its backoff over

OnChanges = Callable[[list[str], bool], None]  # (POSIX paths relative to the root, rescan the whole tree)


def plan_dirs(root: str) -> list[str]:
    """The real folders to watch: `root` and every folder below it that is not a link, not ignored, not a
    virtualenv, not the index or .git, and has a UTF-8 name (notify cannot report paths that are not)."""
    matcher = IgnoreMatcher(root)
    out, stack = [root], [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = list(it)
        except OSError:  # vanished or unreadable: nothing to watch below it
            continue
        for e in entries:
            sub = f"{rel}/{e.name}" if rel else e.name
            try:
                if not e.is_dir(follow_symlinks=False):  # a link to a folder is not a folder here
                    continue
            except OSError:
                continue
            if (not rel and e.name in NOT_WATCHED) or not is_decodable(e.name) or matcher.is_ignored(sub, is_dir=True) \
                    or os.path.exists(os.path.join(e.path, "pyvenv.cfg")):
                continue
            out.append(e.path)
            stack.append(sub)
    return out


class TreeWatcher:
    """Watches `root` and calls `on_changes(rels, rescan)` with each debounced batch, on its own thread.

    `run()` returns only when `stop` is set: a watcher that raises is restarted after a backoff (events
    meanwhile are caught by a rescan), and `status()` says how it is doing."""

    def __init__(self, root: str, on_changes: OnChanges, stop: threading.Event) -> None:
        self.root = os.path.realpath(root)
        self.on_changes = on_changes
        self.stop = stop
        self.state = "starting"
        self.restarts = 0
        self.last_error: Optional[str] = None
        self.skipped_undecodable = 0
        self.last_refresh_error: Optional[str] = None
        self.dirs: set[str] = set()
        self._files = RepoFiles(self.root, check_ignored=False)  # ignore rules: the indexer applies them

    def status(self) -> dict:
        return {"state": self.state, "watched_folders": len(self.dirs), "restarts": self.restarts,
                "last_error": self.last_error, "skipped_undecodable_events": self.skipped_undecodable,
                "last_refresh_error": self.last_refresh_error}

    # -- supervision -------------------------------------------------------------------------------
    def run(self) -> None:
        failures, restarted = 0, False
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                self._watch(rescan_first=restarted)  # whatever changed while it was down
                break  # stopped
            except Exception as exc:
                if self.stop.is_set():
                    break
                failures = 1 if time.monotonic() - t0 > HEALTHY_S else failures + 1
                delay = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
                self.restarts += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.state = "restarting"
                log.warning("file watcher of %s stopped (%s); restarting in %.1f s", self.root, self.last_error,
                            delay, exc_info=True)
                if self.stop.wait(delay):
                    break
                restarted = True
        self.state = "stopped"

    def _deliver(self, rels: list[str], rescan: bool) -> None:
        """A failed re-index is not a dead watcher: it is logged and reported, and watching goes on."""
        try:
            self.on_changes(rels, rescan)
        except Exception as exc:
            self.last_refresh_error = f"{type(exc).__name__}: {exc}"
            log.exception("re-indexing %d changed path(s) of %s failed", len(rels), self.root)

    # -- watching ---------------------------------------------------------------------------------------
    def _plan(self) -> list[str]:
        """The folders to watch, each alone (not recursive). watchfiles passes over folders it cannot read and
        folders that vanish while it is set up (their parent's event re-plans), so a root that is gone is
        checked here: an error, and the supervisor tries again later."""
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"the repository folder {self.root} is gone")
        dirs = plan_dirs(self.root)
        self.dirs = set(dirs)
        return dirs

    def _watch(self, rescan_first: bool = False) -> None:
        """Watch the planned folders; a batch in which a folder came or went ends the watch, and the next one
        watches the new plan. The tree is rescanned only once the new folders are watched (at the first
        batch, or the first empty one after IDLE_YIELD_MS): a change made before that, say a folder moved
        out right after it was moved in, has no event in either watch."""
        from watchfiles import watch

        owed = rescan_first
        while not self.stop.is_set():
            dirs = self._plan()
            self.state = "running"
            try:
                for raw in watch(*dirs, watch_filter=None, debounce=DEBOUNCE_MS, step=STEP_MS,
                                 rust_timeout=IDLE_YIELD_MS, yield_on_timeout=True, stop_event=self.stop,
                                 recursive=False, ignore_permission_denied=True, raise_interrupt=False):
                    rels, folders = self._filter(raw)
                    if folders:
                        owed = True
                        break
                    if rels or owed:
                        self._deliver(rels, owed)
                        owed = False
            except RuntimeError as exc:  # watchfiles' WatchfilesRustInternalError
                if "decode" not in str(exc):
                    raise
                # A file name that is not UTF-8: notify raises on every call until its batch is dropped, so
                # watch anew and rescan what the batch held.
                self.skipped_undecodable += 1
                log.warning("file watcher: skipped an event for a name that is not UTF-8 (%s); rescanning", exc)
                owed = True

    def _filter(self, raw: set) -> tuple[list[str], bool]:
        """The batch's paths relative to the root, and whether a folder came or went (re-plan and rescan)."""
        rels, folders = set(), False
        for _, path in raw:
            if not is_decodable(path):
                self.skipped_undecodable += 1
                continue
            folder = os.path.dirname(path)
            if folder not in self.dirs or os.path.realpath(folder) != folder:
                continue  # not a folder planned here, or swapped for a link since it was
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            if rel.split("/", 1)[0] in NOT_WATCHED:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            except OSError:
                continue
            if st is None:  # gone: a file to forget, or a folder whose files go with it
                folders = folders or path in self.dirs
            elif stat.S_ISDIR(st.st_mode):
                folders = True
                continue
            else:
                reason = self._files.check(rel)[2]
                if reason == INDEX_FOLDER or (reason == OUTSIDE and not stat.S_ISLNK(st.st_mode)):
                    continue  # a link out of the root stays: the indexer forgets it if it was a file before
            rels.add(rel)
        return sorted(rels), folders
