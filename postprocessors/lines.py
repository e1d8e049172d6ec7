"""Lines of files as they are on disk at answer time (so every returned snippet is exact)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


class LineSource:
    """Reads and caches `root/<rel>` split into lines exactly as the indexer splits them."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._cache: dict[str, Optional[list[str]]] = {}

    def lines(self, rel_path: str) -> Optional[list[str]]:
        """The file's lines, or None if it is gone or unreadable."""
        if rel_path not in self._cache:
            try:
                data = (self.root / rel_path).read_bytes()
                if data.startswith(b"\xef\xbb\xbf"):
                    data = data[3:]
                text = data.decode("utf-8").replace("\r\n", "\n")
                lines = text.split("\n")
                if len(lines) > 1 and lines[-1] == "":
                    lines.pop()
                self._cache[rel_path] = lines
            except (OSError, UnicodeDecodeError):
                self._cache[rel_path] = None
        return self._cache[rel_path]

    def text(self, rel_path: str, start: int, end: int) -> Optional[str]:
        lines = self.lines(rel_path)
        if lines is None or start < 1 or end > len(lines) or end < start:
            return None
        return "\n".join(lines[start - 1:end])
