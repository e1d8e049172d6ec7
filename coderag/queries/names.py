"""What a query says about names: the identifiers it spells, and whether it asks for one name's definition
("where is MAX_RETRIES defined") or for its uses ("who calls parse_header"). Pure functions over strings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from coderag.nodes.lexical import identifier_parts

_QUERY_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_MEMBER_SEPARATOR = re.compile(r"(?<=[A-Za-z0-9_>])(?:::|->|#)(?=[A-Za-z_])")


def query_identifiers(query: str) -> list[str]:
    """Identifiers the query spells out: compound names (`getUserById`, `get_user_by_id`, `LruCache.get`),
    or the whole query when it is one name. Plain words of a sentence are not identifiers.

    >>> query_identifiers("where is getUserById called"), query_identifiers("retry after login")
    (['getUserById'], [])

    Other languages' member separators read as dots, as symbols are stored: `RecursionGuard::new` (Rust,
    C++, PHP), `Array#map` (Ruby docs) and `conn->close` (C, PHP) are `RecursionGuard.new`, `Array.map`
    and `conn.close`.
    """
    query = _MEMBER_SEPARATOR.sub(".", query)
    tokens = _QUERY_IDENT.findall(query)
    if len(tokens) == 1 and tokens[0] == query.strip():
        return tokens
    return [t for t in dict.fromkeys(tokens)
            if "." in t or sum(1 for p in identifier_parts(t) if not p.isdigit()) > 1]


# Words a query may hold beside one name and still only ask where that name is defined.
_DEFINITION_WORDS = frozenset("where is are the a an of for in to find show me what which whats defined define "
                              "definition declared declare declaration assigned set implemented implementation "
                              "located file class function method constant variable type struct enum def fn "
                              "how does do work works explain".split())


def asks_for_definition(query: str, idents: list[str]) -> bool:
    """True if the query is one name, alone or with words that only ask where it is defined.

    >>> asks_for_definition("where is MAX_RETRIES defined", ["MAX_RETRIES"])
    True
    >>> asks_for_definition("why does MAX_RETRIES stop at 3", ["MAX_RETRIES"])
    False
    """
    return len(idents) == 1 and all(w in _DEFINITION_WORDS for w in _other_words(query, idents[0]))


# Words a query may hold beside one name when it asks where the name is used; it must hold one of the verbs.
_USAGE_VERBS = frozenset("calls call called calling caller callers uses use used using usage usages reference "
                         "references referenced referencing invokes invoked invoking tested tests test".split())
_USAGE_WORDS = _USAGE_VERBS | frozenset("who what where which is are the a an of in to for find show me all every "
                                        "places place sites site does do how unit cases".split())


def asks_for_usages(query: str, idents: list[str]) -> bool:
    """True if the query is one name with words that only ask where it is used, called or tested.

    >>> asks_for_usages("who calls parse_header", ["parse_header"]), asks_for_usages("parse_header", ["parse_header"])
    (True, False)
    """
    if len(idents) != 1:
        return False
    words = _other_words(query, idents[0])
    return bool(words) and all(w in _USAGE_WORDS for w in words) and any(w in _USAGE_VERBS for w in words)


def _other_words(query: str, ident: str) -> list[str]:
    """The query's words besides `ident`, lower case."""
    return re.findall(r"[A-Za-z0-9_]+", _MEMBER_SEPARATOR.sub(".", query).replace(ident, " ").lower())


_IMPORT_LINE = re.compile(r"^\s*(?:from\s+\S+\s+import|import|#\s*include|use|export\s+\{[^}]*\}\s+from|require)\b")


def uses_name(text: str, name: str) -> bool:
    r"""True if a line of `text` other than an import names `name` (its last part, for a dotted name) as a
    whole word: a call, a read, a use of the name.

    >>> uses_name("from .globals import resolve\nx = resolve(color)", "resolve"), uses_name("import resolve", "resolve")
    (True, False)
    """
    word = name.rsplit(".", 1)[-1]
    if word not in text:
        return False
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])")
    return any(pattern.search(line) and not _IMPORT_LINE.match(line) for line in text.splitlines())


_CAMEL = re.compile(r"[a-z0-9][A-Z]")


def is_code_name(ident: str) -> bool:
    """A name as code spells it (dotted, snake_case, camelCase, UPPER_CASE), not a plain word such as
    "authentication", which the dense leg reads as the concept it is.

    >>> is_code_name("parse_header"), is_code_name("getUserById"), is_code_name("MAX_RETRIES"), is_code_name("cache")
    (True, True, True, False)
    """
    return ("." in ident or "_" in ident.strip("_") or (ident.isupper() and len(ident) > 1)
            or _CAMEL.search(ident) is not None)


@dataclass(frozen=True)
class NameQuestion:
    """What a query asks of the names it spells: its identifiers, and whether it asks for the one name's
    definition or for its uses. Read once per request (`SearchRequest.names`)."""

    idents: tuple[str, ...]
    definition: bool  # one name, alone or with words that only ask where it is defined
    usages: bool  # one name with words that only ask where it is used, called or tested

    @property
    def about_a_code_name(self) -> bool:
        """One code name asked for its definition or its uses: a query matched word for word."""
        return (self.definition or self.usages) and is_code_name(self.idents[0])


def read_names(query: str) -> NameQuestion:
    """The NameQuestion of `query`.

    >>> read_names("who calls parse_header")
    NameQuestion(idents=('parse_header',), definition=False, usages=True)
    """
    idents = query_identifiers(query)
    return NameQuestion(tuple(idents), asks_for_definition(query, idents), asks_for_usages(query, idents))
