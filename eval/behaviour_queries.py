"""What a test states about the code it tests, read from the test's own lines: the queries of kind ``test``
that eval/history.py mines from the tests a commit adds beside its source change.

A test names a behaviour (`test_redirect_keeps_auth_header`, `TestMountsSubrouter`, `parsesEmptyArray`),
describes it in a Python test's docstring, or writes it as a spec string (`it("returns 404 when no route
matches")`): a statement of what code does in a developer's words, the shape of a question about what code
does rather than of a change log.
"""

from __future__ import annotations

import re

from coderag.nodes.lexical import IDENTIFIER_PARTS

# The forms below are those of the mined languages' common test frameworks.
MIN_TEST_WORDS = 4  # "parse header" names a function; "keeps auth header on redirect" states a behaviour
_SPEC = re.compile(r"""^\s*(?:it|test|describe|context|specify|scenario|t\.Run|s\.Run|TEST_CASE|SECTION|SCENARIO"""
                   r"""|@DisplayName)\s*\(?\s*(['"`])(.{8,200}?)(?<!\\)\1""")
_TEST_DEFS = (re.compile(r"^\s*(?:async\s+)?def\s+(test_?\w+)\s*\("),  # Python, Ruby's test/unit
              re.compile(r"^func\s+(Test\w+)\s*\("),  # Go
              re.compile(r"^\s*(?:public\s+)?function\s+(test\w+)\s*\("),  # PHPUnit
              re.compile(r"^\s*TEST(?:_F|_P)?\s*\(\s*\w+\s*,\s*(\w+)\s*\)"))  # GoogleTest
_ANNOTATED_DEFS = (  # (the marker on the line before, the definition): Rust's #[test], JUnit's @Test
    (re.compile(r"#\[(?:\w+::)?test\]"), re.compile(r"^\s*(?:pub\s+)?(?:async\s+)?fn\s+(\w+)\s*\(")),
    (re.compile(r"^\s*@Test\b"), re.compile(r"^\s*(?:public\s+|protected\s+)?void\s+(\w+)\s*\(")))
_PY_DOCSTRING_LINE = re.compile(r'^\s*[rRuU]?("""|\'\'\')\s*(.+?)\s*$')


def humanise(name: str) -> str:
    """A test's name as the words it spells, its `test` prefix dropped.

    >>> humanise("test_redirect_keeps_auth_header"), humanise("TestRouterMountsSubrouterAtPrefix")
    ('redirect keeps auth header', 'router mounts subrouter at prefix')
    """
    name = re.sub(r"^[Tt]est_?", "", name)
    return " ".join(p.lower() for p in IDENTIFIER_PARTS.findall(name.replace("_", " ")))


def described_behaviours(lines: list[str]) -> list[str]:
    """The behaviours stated by the tests among `lines` (a test file's added lines, in order), each
    MIN_TEST_WORDS words or more: a spec string as written, a Python test's docstring's first sentence,
    else the test's name as words.

    >>> for d in described_behaviours(["  it('returns 404 when no route matches', () => {",
    ...                                "def test_keeps_auth_header_on_same_origin(client):",
    ...                                "    '''Auth headers survive a redirect to the same origin. More.'''",
    ...                                "#[test]", "fn glob_matches_hidden_files_with_flag() {",
    ...                                "def test_parse(): pass"]):
    ...     print(d)
    returns 404 when no route matches
    Auth headers survive a redirect to the same origin.
    glob matches hidden files with flag
    """
    out = []
    previous = ""
    for i, line in enumerate(lines):
        spec = _SPEC.match(line)
        if spec:
            out.append(" ".join(spec.group(2).replace("\\", "").split()))
        else:
            name = next((m.group(1) for m in (rx.match(line) for rx in _TEST_DEFS) if m), None)
            if name is None:
                name = next((m.group(1) for marker, rx in _ANNOTATED_DEFS if marker.search(previous)
                             for m in [rx.match(line)] if m), None)
            if name is not None:
                doc = _PY_DOCSTRING_LINE.match(lines[i + 1]) if i + 1 < len(lines) else None
                sentence = re.split(r"(?<=[.!?])\s", doc.group(2).rstrip("\"'"))[0] if doc else ""
                out.append(sentence if len(sentence.split()) >= MIN_TEST_WORDS else humanise(name))
        if line.strip():
            previous = line
    return [d for d in out if len(d.split()) >= MIN_TEST_WORDS and not d.lower().startswith(("todo", "fixme"))]
