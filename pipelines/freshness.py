"""FileChecker: whether the files a search answers from are still the content that was indexed."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterable, Optional

from coderag.store.state import FileRecord, IndexState


class FileChecker:
    """Compares files with the index's manifest, for the search engine (which reports stale files) and for
    its caller (which decides whether to refresh them). `ingest_lock` is the index's: held while an
    ingestion writes, when the store and the manifest may briefly disagree."""

    def __init__(self, root: Path, state: IndexState, ingest_lock: threading.RLock) -> None:
        self.root, self.state, self.ingest_lock = root, state, ingest_lock

    def check(self, paths: Iterable[str]) -> dict[str, Optional[FileRecord]]:
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

    def quiet(self) -> bool:
        """No ingestion runs in another thread of this process."""
        if self.ingest_lock.acquire(blocking=False):
            self.ingest_lock.release()
            return True
        return False

    def being_indexed(self) -> set[str]:
        """Files an ingestion is writing right now (their new points and manifest rows appear one after the
        other): changed on disk, but not stale."""
        return set(self.state.inflight())
