"""Text that arrives from an agent: find what is not valid Unicode before a UTF-8 encoder meets it."""

from __future__ import annotations

import re
from typing import Any, Optional

# A Python str holds a surrogate code point only when the sender's JSON had a `\ud800`-style escape without
# its partner (json.loads joins a correct pair into one character). UTF-8 cannot encode it: the MCP SDK's
# JSON parser rejects the whole line, and `str.encode("utf-8")` raises wherever the text is written.
_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_problem(name: str, text: str) -> Optional[str]:
    """What to tell the sender when `text` (argument `name`) holds an unpaired surrogate, else None.

    Examples:
        >>> surrogate_problem("query", "caf\\ud800")[:60]
        "query contains an unpaired UTF-16 surrogate ('\\\\ud800' at cha"
        >>> surrogate_problem("query", "café 😀") is None
        True
    """
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (f"{name} contains an unpaired UTF-16 surrogate ({m.group()!r} at character {m.start()}), which is not "
            "valid Unicode and cannot be encoded as UTF-8: send the text as UTF-8, write a character above "
            "U+FFFF as a pair of escapes (high then low, e.g. '\\ud83d\\ude00'), or drop that character")


def find_surrogate(value: Any, name: str) -> Optional[str]:
    """surrogate_problem for the first string in a JSON value (keys included), named by its path."""
    if isinstance(value, str):
        return surrogate_problem(name, value)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        path = f"{name}[{key}]" if isinstance(key, int) else (f"{name}.{key}" if name else str(key))
        problem = (surrogate_problem(f"a key of {name or 'the message'}", key) if isinstance(key, str) else None) \
            or find_surrogate(item, path)
        if problem:
            return problem
    return None

