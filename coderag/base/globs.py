"""`file_pattern` globs: gitignore-style patterns on POSIX paths relative to the root, `!` to exclude,
`{a,b}` brace sets."""

from __future__ import annotations

import re
import warnings
from typing import Iterable, Optional

GLOB_EXAMPLES = "'src/**/*.py', '*.md', '**/*.{py,rst}', 'src/**/*.ts,!**/*.test.ts', '!tests/**'"
# Bounds on what one request may ask for: every alternative is a compiled regex matched against every
# indexed path, and `{a,b}{c,d}...` doubles with each group.
MAX_ALTERNATIVES = 64
MAX_PATTERN_CHARS = 2000
MAX_BRACE_GROUPS = 32  # also bounds the recursion of the expansion


def _bracket_end(s: str, i: int) -> Optional[int]:
    """The index of the `]` closing the set opened at s[i] ('[]x]' and '[!]x]' hold a literal ']'), or None."""
    j = i + 1
    if s[j:j + 1] in ("!", "^"):
        j += 1
    if s[j:j + 1] == "]":
        j += 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "]":
            return j
        j += 1
    return None


def _marks(s: str) -> list[tuple[int, str, int]]:
    """(index, char, brace depth) of each unescaped `{`, `}` and `,` outside `[...]` sets; a `}` carries the
    depth of the group it closes, so a depth below 0 is a `}` that closes nothing."""
    out, depth, i = [], 0, 0
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            end = _bracket_end(s, i)
            if end is not None:
                i = end + 1
                continue
        if ch == "{":
            out.append((i, ch, depth))
            depth += 1
        elif ch == "}":
            depth -= 1
            out.append((i, ch, depth))
        elif ch == ",":
            out.append((i, ch, depth))
        i += 1
    return out


def _split(s: str, depth: int, marks: list, start: int = 0, end: Optional[int] = None) -> list[str]:
    """s[start:end] cut at the commas of brace depth `depth`, each piece stripped (a space may be part of a
    path, but not one around a comma)."""
    end = len(s) if end is None else end
    cuts = [i for i, ch, d in marks if ch == "," and d == depth and start <= i < end]
    bounds = [start - 1, *cuts, end]
    return [s[a + 1:b].strip() for a, b in zip(bounds, bounds[1:])]


def _expand(s: str, limit: int) -> list[str]:
    """`a{b,c{d,e}}f` -> [abf, acdf, acef]; raises ValueError past `limit` alternatives."""
    marks = _marks(s)
    opened = next(((i, d) for i, ch, d in marks if ch == "{" and d == 0), None)
    if opened is None:
        return [s]
    i = opened[0]
    j = next(k for k, ch, d in marks if ch == "}" and d == 0 and k > i)
    out: dict[str, None] = {}
    for option in _split(s, 1, marks, i + 1, j):
        for alt in _expand(s[:i] + option + s[j + 1:], limit):
            out[alt] = None
            if len(out) > limit:
                raise ValueError(f"more than {limit} alternatives once its {{...}} sets are expanded; "
                                 "list fewer names, or use a wildcard such as '*.py'")
    return list(out)


def _problem(part: str) -> Optional[str]:
    """What is wrong with one comma-separated pattern (braces not yet expanded), or None."""
    marks = _marks(part)
    if any(ch == "}" and d < 0 for _, ch, d in marks):
        return "'}' closes no '{' (write '\\}' for a literal brace)"
    opened = sum(ch == "{" for _, ch, _d in marks)
    if opened != sum(ch == "}" for _, ch, _d in marks):
        return "unclosed '{' (a set is written '{py,rst}'; '\\{' is a literal brace)"
    if opened > MAX_BRACE_GROUPS:
        return f"{opened} {{...}} sets; at most {MAX_BRACE_GROUPS}"
    return None


def _check(pattern: str, original: str) -> Optional[str]:
    """What is wrong with one expanded alternative, or None."""
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
    if depth:
        return "unclosed '['"
    if pattern.startswith("!"):
        return "'!' excludes only at the start of a pattern, outside '{...}'"
    if any(part == ".." for part in pattern.strip("/").split("/")):
        return "'..' cannot leave the indexed root"
    if (len(pattern) - len(pattern.rstrip("\\"))) % 2:
        return "ends with a lone '\\' (write '\\\\' for a literal backslash)"
    if not pattern.strip("/"):
        return "empty pattern"
    return None


def _compile(alternatives: list[str], original: str):
    import pathspec

    if not alternatives:
        return None
    with warnings.catch_warnings():  # `re`'s "Possible nested set" FutureWarnings: the pattern is what was asked
        warnings.simplefilter("ignore")
        try:
            return pathspec.GitIgnoreSpec.from_lines(alternatives)
        except (re.error, ValueError):
            pass
        for alt in alternatives:  # which one, to say so
            try:
                pathspec.GitIgnoreSpec.from_lines([alt])
            except re.error as exc:  # not a ValueError: it once escaped as a bare "Error executing tool"
                _fail(original, f"{exc.msg} in {alt!r} (a range goes from low to high, e.g. '[a-z]')")
            except ValueError as exc:  # pathspec's GitIgnorePatternError
                _fail(original, f"{alt!r} is not a valid glob ({exc})")
    raise AssertionError("unreachable: the alternatives compile one by one but not together")


def _fail(original: str, problem: str) -> None:
    shown = repr(original) if len(original) <= 200 else f"{original[:200]!r}… ({len(original)} characters)"
    raise ValueError(f"Malformed file_pattern {shown}: {problem}. Examples: {GLOB_EXAMPLES}.")


class FilePattern:
    """A compiled `file_pattern`: comma-separated globs; a leading `!` excludes; `{a,b}` is a set of
    alternatives (commas inside braces do not separate patterns).

    Examples:
        >>> fp = FilePattern("src/**/*.py,!src/legacy/**")
        >>> fp.matches("src/app/main.py"), fp.matches("src/legacy/old.py"), fp.matches("README.md")
        (True, False, False)
        >>> FilePattern("!tests/**").matches("src/a.py")
        True
        >>> FilePattern("**/*.{py,rst}").select(["a.py", "docs/b.rst", "c.md"])
        ['a.py', 'docs/b.rst']
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        text = pattern.strip()
        if "\x00" in text:
            _fail(pattern, "NUL character")
        if len(text) > MAX_PATTERN_CHARS:
            _fail(pattern, f"{len(text)} characters; at most {MAX_PATTERN_CHARS}")
        parts = [p for p in _split(text, 0, _marks(text)) if p]
        if not parts:
            _fail(pattern, "empty pattern")
        includes, excludes = [], []
        for part in parts:
            problem = _problem(part)
            if problem:
                _fail(pattern, problem)
            exclude = part.startswith("!")
            body = part[1:] if exclude else part
            left = MAX_ALTERNATIVES - len(includes) - len(excludes)
            try:
                alternatives = _expand(body, left)
            except ValueError as exc:
                _fail(pattern, str(exc))
            for alt in alternatives:
                problem = _check(alt, pattern)
                if problem:
                    _fail(pattern, problem)
                # '#' starts a comment in gitignore syntax: a pattern is never one.
                (excludes if exclude else includes).append("\\" + alt if alt.startswith("#") else alt)
            if len(includes) + len(excludes) > MAX_ALTERNATIVES:
                _fail(pattern, f"more than {MAX_ALTERNATIVES} patterns; use a wildcard such as 'src/**/*.py'")
        self._include = _compile(includes, pattern)
        self._exclude = _compile(excludes, pattern)

    def matches(self, rel_path: str) -> bool:
        if self._include is not None and not self._include.match_file(rel_path):
            return False
        return not (self._exclude is not None and self._exclude.match_file(rel_path))

    def select(self, paths: Iterable[str]) -> list[str]:
        return [p for p in paths if self.matches(p)]
