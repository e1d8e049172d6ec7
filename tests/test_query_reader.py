"""Query reading: short queries stay as they are; bug reports are split into evidence and noise."""

from __future__ import annotations

import pytest

from coderag.queries.reader import LONG_QUERY_WORDS, read_query, path_matches

REPORT = '''\
[version 2.20.0] TypeError: 'NoneType' object is not subscriptable
<!-- Please fill in the template below. Thanks for the report! -->
## Describe the bug
After update from version 2.19.5 to 2.20.0 I got an error when a nested schema gets an invalid value.

## To Reproduce
```python
from marshmallow import Schema, fields, validates

class Bar(Schema):
    value = fields.String()

    @validates('value')
    def validate_value(self, value):
        pass
```

```
Traceback (most recent call last):
  File "/_/env/lib/python3.7/site-packages/marshmallow/schema.py", line 628, in validate
    _, errors = self._do_load(data, many, partial=partial, postprocess=False)
  File "/_/env/lib/python3.7/site-packages/marshmallow/schema.py", line 894, in _invoke_field_validators
    value = data[field_obj.attribute or field_name]
TypeError: 'NoneType' object is not subscriptable
```

## Environment
python 3.7.4
marshmallow==2.20.0
numpy==1.17.2
OS: Ubuntu 18.04
See https://github.com/marshmallow-code/marshmallow/issues/1 for a similar one.
'''


def test_read_query_keeps_a_short_query_as_it_is():
    r = read_query("where is getUserById retried after a failed login")
    assert not r.is_long
    assert r.bm25_text == r.dense_text == "where is getUserById retried after a failed login"
    assert r.identifiers == ["getUserById"]


def test_read_query_finds_frames_errors_and_paths_of_a_report():
    r = read_query(REPORT)
    assert r.is_long
    assert [(f.path.rsplit("/", 2)[-2:], f.line, f.func) for f in r.frames] == [
        (["marshmallow", "schema.py"], 628, "validate"),
        (["marshmallow", "schema.py"], 894, "_invoke_field_validators")]
    assert any(e.startswith("TypeError: 'NoneType' object is not subscriptable") for e in r.errors)
    assert "validate_value" in r.identifiers and "_do_load" in r.identifiers


def test_read_query_drops_template_lines_dumps_and_urls():
    r = read_query(REPORT)
    for noise in ("Describe the bug", "To Reproduce", "Environment", "numpy==1.17.2", "https://github.com",
                  "Please fill in the template", "Ubuntu"):
        assert noise not in r.bm25_text, noise
        assert noise not in r.dense_text, noise
    assert "nested schema gets an invalid value" in r.dense_text
    assert "_invoke_field_validators" in r.bm25_text


def test_read_query_counts_each_piece_once_in_the_bm25_text():
    pasted = "KeyError: 'x'\n" + "\n".join(f'  File "pkg/mod.py", line {i}, in handler' for i in range(60))
    r = read_query(pasted)
    assert r.is_long
    assert r.bm25_text.count("handler") == 1


def test_read_query_reads_java_and_go_style_frames():
    text = ("NullPointerException when closing the pool " + "word " * LONG_QUERY_WORDS +
            "\n\tat com.example.pool.ConnectionPool.close(ConnectionPool.java:88)\n"
            "panic: runtime error\n\t/home/u/src/server/handler.go:41 +0x1d\n")
    r = read_query(text)
    assert ("ConnectionPool.java", 88, "close") in [(f.path, f.line, f.func) for f in r.frames]
    assert any(f.path.endswith("server/handler.go") and f.line == 41 for f in r.frames)
    assert any(e.startswith("NullPointerException") for e in r.errors)


@pytest.mark.parametrize("candidate, named, expected", [
    ("src/marshmallow/schema.py", "/_/env/lib/python3.7/site-packages/marshmallow/schema.py", True),
    ("src/marshmallow/schema.py", "marshmallow/schema.py", True),
    ("src/marshmallow/schema.py", "schema.py", True),
    ("src/marshmallow/schema.py", "marshmallow.schema", True),
    ("src/marshmallow/schema.py", "other/schema.py", False),
    ("astropy/io/fits/__init__.py", "/x/site-packages/numpy/__init__.py", False),
    ("astropy/io/fits/card.py", "astropy.io.fits.card", True),
])
def test_path_matches_whole_trailing_components(candidate, named, expected):
    assert path_matches(candidate, named) is expected


def test_read_query_drops_a_pasted_configuration_but_keeps_code():
    text = ("fix wipes the file when the encoding fails " + "word " * LONG_QUERY_WORDS + "\n```\n[tool]\n"
            "verbose = 2\ndialect = postgres\n# comment\nexclude_rules = None\n```\n"
            "```python\nresult = lint_paths(paths)\nresult.persist_changes()\n```\n")
    r = read_query(text)
    assert "exclude_rules" not in r.identifiers and "dialect" not in r.identifiers
    assert "lint_paths" in r.identifiers and "persist_changes" in r.identifiers


@pytest.mark.parametrize("query, kind, word_for_word, role", [
    ("who calls parse_header", "usages", True, None),
    ("where is parse_header tested", "usages", True, "tests"),
    ("where is MAX_RETRIES defined", "definition", True, None),
    ("what does parse_header do", "definition", True, None),
    ("why does MAX_RETRIES stop at 3", "question", False, None),
    ("ValueError: invalid literal for int() with base 10: 'x'", "question", True, None),  # a pasted error
    ("docs about installing the plugin", "question", False, "docs"),
])
def test_query_kind_is_read_once_per_request(query, kind, word_for_word, role) -> None:
    """A request's kind, what the rules branch on (pipelines/rules.py), comes from its reading and its names."""
    from coderag.pipelines.search_request import QueryKind, SearchRequest

    req = SearchRequest(query)
    assert (req.kind, req.word_for_word, req.role_asked_for) == (QueryKind(kind), word_for_word, role)


def test_query_kind_of_a_report_is_report_whatever_names_it_spells() -> None:
    from coderag.pipelines.search_request import QueryKind, SearchRequest

    req = SearchRequest(REPORT, reading=read_query(REPORT))
    assert (req.kind, req.word_for_word, req.role_asked_for) == (QueryKind.REPORT, False, None)
