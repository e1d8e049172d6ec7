"""The definitions a chunk holds: its symbol, or every symbol of a chunk of merged small siblings."""

from __future__ import annotations

import functools
import re
from typing import Mapping

from coderag.nodes.keys import SYMBOL_KEY, SYMBOLS_KEY


def chunk_symbols(metadata: Mapping) -> list[str]:
    """`symbols` of a merged chunk (each definition inside it, nested ones too), else its one `symbol`.

    A merged chunk's `symbol` names at most its first three definitions ("A.x, A.y, A.z, ..."), so it
    cannot answer "does this chunk define A.w"; `symbols` can."""
    names = metadata.get(SYMBOLS_KEY)
    if names:
        return list(names)
    symbol = metadata.get(SYMBOL_KEY) or ""
    return [symbol] if symbol else []


_GENERIC_ARGS = re.compile(r"<[^<>]*>")


def bare_symbol(symbol: str) -> str:
    """`symbol` without generic arguments, which a type's name carries in some languages and a question
    never does: `RecursionGuard<'_, S>.new` -> `RecursionGuard.new`, `Map<K, List<V>>.get` -> `Map.get`."""
    while "<" in symbol:
        stripped = _GENERIC_ARGS.sub("", symbol)
        if stripped == symbol:
            break
        symbol = stripped
    return symbol


def defines_symbol(symbol: str, identifier: str) -> bool:
    """True if a definition named `symbol` defines `identifier` (`LruCache.get` defines `get` and `LruCache.get`;
    `RecursionGuard<'_, S>.new` defines `RecursionGuard.new`)."""
    if symbol == identifier or symbol.endswith("." + identifier):
        return True
    if "<" not in symbol:
        return False
    symbol = bare_symbol(symbol)
    return symbol == identifier or symbol.endswith("." + identifier)


def chunk_defines(metadata: Mapping, identifier: str) -> bool:
    """True if the chunk with this metadata holds a definition of `identifier`."""
    return any(defines_symbol(s, identifier) for s in chunk_symbols(metadata))


# A line at column 0 that gives `name` its value: a module's constant or variable (`NAME = ...`, `NAME: T = ...`),
# a JS/TS/Go/Rust `const`/`let`/`var`/`static` (exported or `pub` too), a C `#define`.
_ASSIGNMENT = (r"^(?:export\s+)?(?:(?:pub(?:\([^)\n]*\))?\s+)?(?:const|let|var|static)\s+(?:mut\s+)?)?{name}"
               r"\s*(?::[^=\n]*)?=(?!=)|^#[ \t]*define[ \t]+{name}\b")


@functools.lru_cache(maxsize=512)
def _assignment_of(name: str) -> re.Pattern:
    return re.compile(_ASSIGNMENT.format(name=re.escape(name)), re.M)


def assigns_at_top_level(text: str, name: str) -> bool:
    r"""True if a line of `text` starting at column 0 assigns the plain name `name` (no dots): the definition
    of a constant, which the splitter does not make a symbol of (module-level code is a block or a window).
    Indented lines, a function's locals and a class's attributes, do not count.

    >>> assigns_at_top_level("DEFAULT_STYLES: Dict[str, Style] = {", "DEFAULT_STYLES")
    True
    >>> assigns_at_top_level("    if WINDOWS == x:\nprint(WINDOWS)", "WINDOWS")
    False
    """
    return "." not in name and name in text and _assignment_of(name).search(text) is not None
