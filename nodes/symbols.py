"""The definitions a chunk holds: its symbol, or every symbol of a chunk of merged small siblings."""

from __future__ import annotations

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
