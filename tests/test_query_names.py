"""What a query says about names (coderag/queries/names.py): the name it asks about, and whether it asks for
the name's definition or for its uses."""

from __future__ import annotations

import pytest

from coderag.queries.names import asks_for_definition, asks_for_usages, query_identifiers, uses_name


@pytest.mark.parametrize("query, definition, usages", [
    ("MAX_RETRIES", True, False),
    ("where is MAX_RETRIES defined", True, False),
    ("definition of the LruCache.get method", True, False),
    ("RecursionGuard::new", True, False),
    ("what does parse_header do", True, False),
    ("how is LruCache.get implemented", True, False),
    ("who calls parse_header", False, True),
    ("where is parse_header used", False, True),
    ("find all references to LruCache.get", False, True),
    ("where is parse_header tested", False, True),     # its uses in tests (the role is file_roles' business)
    ("tests for parse_header", False, True),
    ("why does MAX_RETRIES stop at 3", False, False),  # a question about the name's behaviour
    ("parse_header and build_header", False, False),   # two names
    ("where is the retry logic", False, False),        # no name
])
def test_query_names_what_a_query_asks_of_its_name(query, definition, usages) -> None:
    idents = query_identifiers(query)
    assert asks_for_definition(query, idents) is definition
    assert asks_for_usages(query, idents) is usages


@pytest.mark.parametrize("text, name, expected", [
    ("x = parse_header(raw)\n", "parse_header", True),
    ("from .headers import parse_header\n", "parse_header", False),
    ("import { parseHeader } from './headers';\n", "parseHeader", False),
    ("use crate::headers::parse_header;\n", "parse_header", False),
    ("#include \"headers.h\"\nint n = parse_header(buf);\n", "parse_header", True),
    ("parse_headers(raw)\n", "parse_header", False),  # another name that starts alike
    ("cache.get(key)\n", "LruCache.get", True),       # a dotted name: its last part
])
def test_query_names_uses_name_outside_imports(text, name, expected) -> None:
    assert uses_name(text, name) is expected
