"""Code a repository's owners mark as not theirs in `.gitattributes`: `linguist-vendored` and `linguist-generated`.

GitHub's Linguist reads these two attributes to leave third-party and generated files out of a repository's
language statistics and diffs; owners set them for a copied C library (`include/yyjson/* linguist-vendored`)
or a generated parser (`src/dialect/** linguist-generated`). Such a file is not where the project's behaviour
lives, but it is large and says everything a question asks about, so it ranks first as the project's own
source would. The ignore rules (nodes/ignore.py) skip it, as they skip `vendor/` and `*_pb2.py`.

The attributes are read as git reads them (gitattributes(5)): a line is a pattern and its attributes, the
pattern relative to the folder of its `.gitattributes`; a later line overrides an earlier one, a deeper file
a shallower one, and `.git/info/attributes` all of them. `attr` and `attr=true` set an attribute; `-attr`,
`attr=false` and `!attr` clear it (so `test/** linguist-vendored=false` keeps a folder Linguist would guess
is vendored). Unlike .gitignore, a pattern that names a folder does not reach the files inside it
(`include/*` is the files in include/, `include/**` everything below it), and `!pattern` is not allowed.

Stdlib and pathspec only: the walk of a no-change run imports this.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

import pathspec

from coderag.nodes.rule_files import read_lines

log = logging.getLogger(__name__)

ATTRIBUTES_NAME = ".gitattributes"
VENDORED, GENERATED = "vendored", "generated"
_ATTRIBUTES = {"linguist-vendored": VENDORED, "linguist-generated": GENERATED}
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})

# (compiled pattern, whether it ends in "**", {VENDORED or GENERATED: set (True) or cleared (False)})
Rule = tuple[re.Pattern, bool, dict[str, bool]]


def parse_attributes(lines: Iterable[str], source: str = ATTRIBUTES_NAME) -> list[Rule]:
    """The rules of one attributes file (`source`, named in warnings) that set or clear a Linguist mark, in file
    order; a malformed pattern is skipped with a warning, as git skips it.

    >>> [(tail, marks) for _, tail, marks in parse_attributes(
    ...     ["include/** linguist-vendored", "*.sql linguist-language=SQL", "test/** -linguist-vendored"])]
    [(True, {'vendored': True}), (True, {'vendored': False})]
    """
    rules: list[Rule] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or fields[0].startswith(("#", "!")):
            continue  # a comment, a pattern alone, or a negative pattern (git rejects those)
        marks = {}
        for token in fields[1:]:
            name, _, value = token.lstrip("-!").partition("=")
            if name not in _ATTRIBUTES:
                continue
            if token[0] in "-!" or value.lower() in _FALSE:
                marks[_ATTRIBUTES[name]] = False
            elif not value or value.lower() in _TRUE:
                marks[_ATTRIBUTES[name]] = True
        if not marks:
            continue
        try:
            regex = pathspec.lookup_pattern("gitignore")(fields[0]).regex
        except Exception as exc:  # re.error and pathspec's own errors: git skips such a line too
            log.warning("ignoring malformed pattern %r in %s: %s", fields[0], source, exc)
            continue
        if regex is not None:
            rules.append((regex, fields[0].endswith("**"), marks))
    return rules


def _applies(regex: re.Pattern, globstar_tail: bool, path: str) -> bool:
    """A gitattributes pattern names the file itself: gitignore's regex also matches a file inside a folder
    the pattern names (`include/*` matches include/a/b.c at "include/a/"), which git does not apply."""
    m = regex.match(path)
    return m is not None and (m.end() == len(path) or globstar_tail)


class ThirdPartyMarks:
    """Which files under `root` its attributes files mark vendored or generated.

    Examples:
        >>> marks = ThirdPartyMarks("/repo")                 # doctest: +SKIP
        >>> marks.mark("include/yyjson/yyjson.c")            # doctest: +SKIP
        'vendored'
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._rules: dict[str, list[Rule]] = {}
        info = self.root / ".git" / "info" / "attributes"
        self._info = parse_attributes(read_lines(info), str(info))

    def _rules_for(self, dir_rel: str) -> list[Rule]:
        if dir_rel not in self._rules:
            path = (self.root / dir_rel if dir_rel else self.root) / ATTRIBUTES_NAME
            self._rules[dir_rel] = parse_attributes(read_lines(path), str(path))
        return self._rules[dir_rel]

    def mark(self, rel_path: str) -> str | None:
        """VENDORED or GENERATED when the file at `rel_path` (POSIX, relative to the root) is marked so, else
        None. Vendored wins when a file is marked both."""
        parts = rel_path.split("/")  # POSIX and relative already: pathlib's parsing costs the walk more
        state: dict[str, bool] = {}
        folder = ""
        for depth in range(len(parts)):  # the root's file first: a deeper one overrides it
            rules = self._rules_for(folder)
            if rules:  # most folders have none: the walk asks this of every file
                sub = "/".join(parts[depth:])
                for regex, tail, marks in rules:
                    if _applies(regex, tail, sub):
                        state.update(marks)
            folder = f"{folder}/{parts[depth]}" if folder else parts[depth]
        for regex, tail, marks in self._info:
            if _applies(regex, tail, rel_path):
                state.update(marks)
        return next((m for m in (VENDORED, GENERATED) if state.get(m)), None)
