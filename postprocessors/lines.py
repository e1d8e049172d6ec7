"""Lines of files as they are on disk at answer time, decoded as the indexer decodes them (so every returned
snippet is exact)."""

from __future__ import annotations

import os
import threading
from array import array
from collections import OrderedDict
from itertools import accumulate
from pathlib import Path
from typing import Optional

from coderag.nodes.file_classes import SECRET, content_class, secret_name
from coderag.nodes.file_text import decode_file
from coderag.nodes.notebook import is_notebook
from coderag.nodes.safe_path import RepoFiles

# Why a file is not shown although the index holds it: the current file-class rules call it a secret (it
# gained a key since it was indexed, and the next run leaves it out). Its lines never reach an answer.
SECRET_NOW = "it holds a secret: never shown"


def split_lines(text: str) -> list[str]:
    """A file's text (newlines normalized) as its lines, the way the indexer numbers them."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


class FileTexts:
    """Text of recently read files, keyed by path and checked against (size, mtime_ns) on every use: a resident
    process re-reads a file only when it changed. One per open index (its search engine), shared by the
    requests' LineSources. Kept as one string per file, split per request: a cache of line lists holds
    hundreds of thousands of small strings, and every full pass of the cyclic GC touches each of them
    (pauses longer than a search). With it, on the first `span` request, the offsets
    where its lines start (an array, not GC-tracked), so a range is one slice of the text."""

    def __init__(self, max_files: int = 512) -> None:
        self.max_files = max_files
        self._entries: "OrderedDict[str, list]" = OrderedDict()  # path -> [size, mtime_ns, text, starts or None]
        self._lock = threading.Lock()

    def get(self, path: str, st: os.stat_result) -> Optional[list]:
        """The entry of `path` if it was read with this size and mtime."""
        with self._lock:
            hit = self._entries.get(path)
            if hit is not None and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
                self._entries.move_to_end(path)
                return hit
        return None

    def put(self, path: str, entry: list) -> None:
        with self._lock:
            self._entries[path] = entry
            while len(self._entries) > self.max_files:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every file (benchmarks measure cold searches with it)."""
        with self._lock:
            self._entries.clear()


def line_starts(text: str) -> array:
    """Offsets in `text` where each of its lines starts, plus one past the end of the last line (so line i,
    0-based, is `text[starts[i]:starts[i + 1] - 1]`); as many lines as `split_lines` gives."""
    parts = text.split("\n")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return array("Q", accumulate((len(p) + 1 for p in parts), initial=0))


class LineSource:
    """Reads and caches `root/<rel>` split into lines exactly as the indexer splits them.

    Only files of the repository: a path that resolves outside the root or into its index folder, or that is
    not a regular file, reads as gone (see nodes/safe_path.py; `refusal` says why), and so does a file the
    current rules call a secret, by its name or by the bytes read (SECRET_NOW). Ignore rules are not checked
    here: paths come from the index, which applied them (expand_result checks them on a caller's id).

    `indexed_as_is`: files the caller just found to be the content indexed. The indexer classed those bytes
    under the current rules (an index classed under older ones is checked again when opened: CodeIndex.open),
    so they are not classed again: a search reads dozens of files, and the check costs a few milliseconds for
    a large one.
    """

    def __init__(self, root: str | Path, texts: Optional[FileTexts] = None) -> None:
        self.root = Path(root)
        self.texts = texts if texts is not None else FileTexts()
        self._files = RepoFiles(self.root, check_ignored=False)  # the root resolved once per request
        self._cache: dict[str, Optional[list[str]]] = {}
        self._entries: dict[str, Optional[list]] = {}  # rel path -> its FileTexts entry as of this request
        self.refusal: dict[str, str] = {}  # rel path -> why it could not be read
        self.indexed_as_is: frozenset[str] = frozenset()

    def _entry(self, rel_path: str) -> Optional[list]:
        """[size, mtime_ns, text, line starts or None] of the file as it is now (read once per request, and
        again only when it changed), or None if it is gone or unreadable."""
        if rel_path in self._entries:
            return self._entries[rel_path]
        # One realpath and stat per file and request; the open below runs only when the file changed.
        path, st, reason = self._files.check(rel_path)
        entry = None
        if path is None or secret_name(rel_path) is not None:  # a secret by name is never opened
            self.refusal[rel_path] = reason if path is None else SECRET_NOW
            self._entries[rel_path] = None
            return None
        entry = self.texts.get(path, st)
        if entry is None:
            f, reason = self._files.open_checked(path)  # never blocks, even if it became a FIFO since
            if f is None:
                self.refusal[rel_path] = reason
                self._entries[rel_path] = None
                return None
            try:
                with f:
                    st = os.fstat(f.fileno())  # the stat of what is read, for the cache
                    data = f.read()
                if rel_path not in self.indexed_as_is and (found := content_class(rel_path, data)) is not None \
                        and found[0] == SECRET:
                    self.refusal[rel_path] = SECRET_NOW
                    self._entries[rel_path] = None
                    return None
                # The text as the indexer made it: tokens masked (never shown, even from a file changed since
                # it was indexed), bad bytes replaced, lines numbered alike.
                entry = [st.st_size, st.st_mtime_ns, decode_file(data, notebook=is_notebook(rel_path)).text, None]
            except OSError:
                self.refusal[rel_path] = "unreadable"
                self._entries[rel_path] = None
                return None
            self.texts.put(path, entry)
        self._entries[rel_path] = entry
        return entry

    def lines(self, rel_path: str) -> Optional[list[str]]:
        """The file's lines, or None if it is gone or unreadable."""
        if rel_path not in self._cache:
            entry = self._entry(rel_path)
            self._cache[rel_path] = split_lines(entry[2]) if entry is not None else None
        return self._cache[rel_path]

    def span(self, rel_path: str, start: int, end: int) -> Optional[tuple[str, int]]:
        """(lines start..min(end, last line) joined by newlines, the file's line count), or None if the file
        is gone or unreadable. The text is "" when start is past the last line. Without splitting the file:
        a merged block of a 10,000-line test module costs a slice, not a split of the whole file."""
        entry = self._entry(rel_path)
        if entry is None:
            return None
        starts = entry[3]
        if starts is None:
            starts = entry[3] = line_starts(entry[2])
        n = len(starts) - 1
        end = min(end, n)
        if start < 1 or end < start:
            return "", n
        return entry[2][starts[start - 1]:starts[end] - 1], n

    def text(self, rel_path: str, start: int, end: int) -> Optional[str]:
        lines = self.lines(rel_path)
        if lines is None or start < 1 or end > len(lines) or end < start:
            return None
        return "\n".join(lines[start - 1:end])
