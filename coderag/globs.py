"""`file_pattern` globs: gitignore-style patterns on POSIX paths relative to the root, `!` to exclude."""

from __future__ import annotations

import re
from typing import Iterable

GLOB_EXAMPLES = "'src/**/*.py', '*.md', 'src/**/*.ts,!**/*.test.ts', '!tests/**'"
_SPLIT = re.compile(r"\s*,\s*")  # commas separate patterns; a space may be part of a path


def _check(pattern: str, original: str) -> None:
    depth = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        i += 1
    problem = None
    if depth:
        problem = "unclosed '['"
    elif "\x00" in pattern:
        problem = "NUL character"
    elif any(part == ".." for part in pattern.lstrip("!").strip("/").split("/")):
        problem = "'..' cannot leave the indexed root"
    elif not pattern.strip("!/"):
        problem = "empty pattern"
    if problem:
        raise ValueError(f"Malformed file_pattern {original!r}: {problem}. Examples: {GLOB_EXAMPLES}.")


class FilePattern:
    """A compiled `file_pattern`: comma-separated globs; a leading `!` excludes.

    Examples:
        >>> fp = FilePattern("src/**/*.py,!src/legacy/**")
        >>> fp.matches("src/app/main.py"), fp.matches("src/legacy/old.py"), fp.matches("README.md")
        (True, False, False)
        >>> FilePattern("!tests/**").matches("src/a.py")
        True
    """

    def __init__(self, pattern: str) -> None:
        import pathspec

        self.pattern = pattern
        parts = [p for p in _SPLIT.split(pattern.strip()) if p]
        if not parts:
            raise ValueError(f"Malformed file_pattern {pattern!r}: empty pattern. Examples: {GLOB_EXAMPLES}.")
        includes, excludes = [], []
        for p in parts:
            _check(p, pattern)
            (excludes if p.startswith("!") else includes).append(p.lstrip("!"))
        self._include = pathspec.GitIgnoreSpec.from_lines(includes) if includes else None
        self._exclude = pathspec.GitIgnoreSpec.from_lines(excludes) if excludes else None

    def matches(self, rel_path: str) -> bool:
        if self._include is not None and not self._include.match_file(rel_path):
            return False
        return not (self._exclude is not None and self._exclude.match_file(rel_path))

    def select(self, paths: Iterable[str]) -> list[str]:
        return [p for p in paths if self.matches(p)]
