"""Lines of files as they are on disk at answer time (so every returned snippet is exact)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Optional

# Lines of recently read files, keyed by path and checked against (size, mtime_ns) on every use:
# a resident process re-reads a file only when it changed.
_CACHE: "OrderedDict[str, tuple[int, int, list[str]]]" = OrderedDict()
_CACHE_MAX = 512
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every cached file (benchmarks; entries are checked against size and mtime on each use)."""
    with _CACHE_LOCK:
        _CACHE.clear()


class LineSource:
    """Reads and caches `root/<rel>` split into lines exactly as the indexer splits them."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._cache: dict[str, Optional[list[str]]] = {}

    def lines(self, rel_path: str) -> Optional[list[str]]:
        """The file's lines, or None if it is gone or unreadable."""
        if rel_path not in self._cache:
            path = str(self.root / rel_path)
            try:
                st = os.stat(path)
            except OSError:
                self._cache[rel_path] = None
                return None
            with _CACHE_LOCK:
                hit = _CACHE.get(path)
                if hit is not None and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
                    _CACHE.move_to_end(path)
                    self._cache[rel_path] = hit[2]
                    return hit[2]
            try:
                data = (self.root / rel_path).read_bytes()
                if data.startswith(b"\xef\xbb\xbf"):
                    data = data[3:]
                text = data.decode("utf-8").replace("\r\n", "\n")
                lines = text.split("\n")
                if len(lines) > 1 and lines[-1] == "":
                    lines.pop()
                self._cache[rel_path] = lines
                with _CACHE_LOCK:
                    _CACHE[path] = (st.st_size, st.st_mtime_ns, lines)
                    while len(_CACHE) > _CACHE_MAX:
                        _CACHE.popitem(last=False)
            except (OSError, UnicodeDecodeError):
                self._cache[rel_path] = None
        return self._cache[rel_path]

    def text(self, rel_path: str, start: int, end: int) -> Optional[str]:
        lines = self.lines(rel_path)
        if lines is None or start < 1 or end > len(lines) or end < start:
            return None
        return "\n".join(lines[start - 1:end])
