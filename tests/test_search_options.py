"""SearchOptions, the one validation of a search request (CLI flags, MCP arguments, API keywords): text
that is not valid Unicode, oversized keywords and queries, malformed globs, each a ValueError that says
what to pass instead. No index needed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coderag.base.agent_text import find_surrogate, surrogate_problem
from coderag.pipelines.search_options import QUERY_SEARCH_CHARS, SearchOptions


@pytest.mark.parametrize("kwargs, fragments", [
    (dict(query="\ud800"), ["query contains an unpaired UTF-16 surrogate", "'\\ud800' at character 0", "UTF-8"]),
    (dict(query="login \udc00 retry"), ["query contains an unpaired", "at character 6"]),
    (dict(query="x", keywords=["ok", "bad\ud83d"]), ["keywords[1] contains an unpaired", "'\\ud83d'"]),
    (dict(query="x", file_pattern="src/\udfff/*.py"), ["file_pattern contains an unpaired"]),
    (dict(query="x", keywords=["k" * 201]), ["keywords[0]", "201 characters; at most 200", "put prose in query"]),
    (dict(query="x", keywords=[f"k{i}" for i in range(17)]), ["at most 16 keywords (17 given)"]),
    (dict(query="x", file_pattern="[z-a]"), ["Malformed file_pattern '[z-a]'", "bad character range z-a",
                                            "Examples: 'src/**/*.py'"]),
    (dict(query="x", file_pattern="**/*.{py,rst"), ["unclosed '{'"]),
])
def test_search_options_reject_text_that_cannot_be_searched(kwargs, fragments) -> None:
    with pytest.raises(ValidationError) as exc:
        SearchOptions(**kwargs)
    text = str(exc.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    # The message itself must survive a UTF-8 encoder (the MCP transport writes it): the value is escaped.
    for err in exc.value.errors():
        err["msg"].encode("utf-8")


def test_search_options_a_long_query_is_cut_for_search_and_says_so() -> None:
    short = SearchOptions(query="  where are failed logins retried  ")
    assert (short.query, short.query_note) == ("where are failed logins retried", "")
    exactly = SearchOptions(query="q" * QUERY_SEARCH_CHARS)
    assert len(exactly.query) == QUERY_SEARCH_CHARS and exactly.query_note == ""
    huge = SearchOptions(query="retry the login " * 100_000)
    assert huge.query == ("retry the login " * 100_000).strip()[:QUERY_SEARCH_CHARS]
    assert huge.query_note.startswith(f"Only the first {QUERY_SEARCH_CHARS} of the query's 1599999 characters")


def test_search_options_brace_sets_are_valid_patterns() -> None:
    assert SearchOptions(query="x", file_pattern=" **/*.{py,rst} ").file_pattern == "**/*.{py,rst}"


def test_find_surrogate_names_the_path_to_the_bad_string() -> None:
    assert find_surrogate({"query": "fine", "keywords": ["a", "b\ud800"]}, "").startswith("keywords[1] contains")
    assert find_surrogate({"a\udc00": 1}, "").startswith("a key of the message contains")
    assert find_surrogate({"name": "search_code", "arguments": {"id": "\ud800"}}, "params").startswith(
        "params.arguments.id contains")
    assert find_surrogate({"query": "😀 café", "n": 3, "x": None}, "") is None
    assert surrogate_problem("q", "\ud83d\ude00") is not None  # two escapes Python kept apart: still not UTF-8
