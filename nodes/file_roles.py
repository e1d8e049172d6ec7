"""What a file is for in its repository: source, tests, docs or examples (a path and a language say it)."""

from __future__ import annotations

import re

SOURCE, TESTS, DOCS, EXAMPLES = "source", "tests", "docs", "examples"
ROLES = (SOURCE, TESTS, DOCS, EXAMPLES)  # also the order in which a first build embeds them
DOC_LANGUAGES = frozenset({"markdown", "rst", "text"})
# Inputs and doubles that tests read: fixtures, golden files, recorded data, jest's mocks, jscodeshift's
# before/after pairs. They are code or data shaped like the code under test, and never where it lives.
FIXTURE_DIRS = frozenset({"fixtures", "fixture", "__fixtures__", "__testfixtures__", "__mocks__", "testdata",
                          "test_data", "test-data", "golden"})
_TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs", "testing"}) | FIXTURE_DIRS
_TEST_FILE = re.compile(r"(^test_.*|.*_test\.\w+|.*\.(test|spec)\.\w+|conftest\.py)$")
_DOC_DIRS = frozenset({"doc", "docs", "documentation"})
# Code that uses the project rather than is it: examples, demos, benchmarks, and the project's own scripts
# (release, profiling and code-generation tools), which name the whole API and so match every question.
_EXAMPLE_DIRS = frozenset({"example", "examples", "samples", "demo", "demos", "benchmarks", "bench", "script",
                           "scripts"})


def file_role(path: str, language: str = "") -> str:
    """The role of the file at repository path `path` (POSIX).

    >>> file_role("src/app/auth.py"), file_role("tests/test_auth.py"), file_role("docs/index.md", "markdown")
    ('source', 'tests', 'docs')
    >>> file_role("examples/basic.py"), file_role("README.md", "markdown"), file_role("script/bump_changelog.py")
    ('examples', 'docs', 'examples')
    >>> file_role("src/v5/__testfixtures__/default.input.tsx"), file_role("pkg/testdata/config.go")
    ('tests', 'tests')
    """
    parts = path.split("/")
    folders = parts[:-1]
    if any(p in _TEST_DIRS for p in folders) or _TEST_FILE.match(parts[-1]):
        return TESTS
    if language in DOC_LANGUAGES or (folders and folders[0] in _DOC_DIRS):
        return DOCS
    if any(p in _EXAMPLE_DIRS for p in folders):
        return EXAMPLES
    return SOURCE


def source_first(paths, language_of=lambda path: "") -> list[str]:
    """`paths` in the order a first build embeds them: source, then tests, docs and examples, each by path.

    >>> source_first(["docs/a.md", "tests/test_a.py", "src/a.py", "examples/a.py"])
    ['src/a.py', 'tests/test_a.py', 'docs/a.md', 'examples/a.py']
    """
    return sorted(paths, key=lambda p: (ROLES.index(file_role(p, language_of(p))), p))


# A query that asks for tests or docs by name: "where is the progress bar tested", "tests for parse_header",
# "docs about theming". Not "... tested for truth" or "... during tests" (a behaviour, or testing helpers).
_ASKS_FOR_TESTS = re.compile(r"\b(?:where|how)\s+(?:is|are|do|does)\b.*\btested\b|\b(?:unit |integration )?tests?"
                             r"(?: cases?)? (?:for|of|covering|that cover|which cover)\b|\b(?:which|what) tests?\b", re.I)
_ASKS_FOR_DOCS = re.compile(r"\b(?:where|how)\s+(?:is|are)\b.*\bdocumented\b|\b(?:docs?|documentation|readme|guide|"
                            r"tutorial) (?:for|of|about|on)\b|\b(?:which|what) docs?\b", re.I)


# A query that asks what changed, and when: the changelog or the release notes answer it ("what changed in
# 2.1.0", "which release added retries", "changelog for the parser"). Not a change that adds to them ("update
# the changelog"), nor "... changed the parser" (a change).
_ASKS_FOR_CHANGES = re.compile(
    r"\b(?:change ?logs?|release notes?)\s+(?:entry\s+|entries\s+)?(?:for|of|about|on)\b|\bwhat'?s new\b"
    r"|\bversion history\b|\b(?:which|what) (?:release|version)s? (?:added|introduced|changed|removed|fixed|deprecated"
    r"|dropped|broke)\b|\b(?:what|which \w+) (?:was |were )?changed? (?:in|since|between) (?:the )?(?:release|version|v?\d)"
    r"|\bchanges? (?:in|since|between) (?:the )?(?:release|version|v?\d)", re.I)
_ADDS_TO_CHANGES = re.compile(r"\b(?:add|update|bump|fix)\w* (?:the |a |an )?(?:change ?logs?|release notes?)\b", re.I)


def asks_for_changes(query: str) -> bool:
    """True when the query asks about a project's changes and releases, which its changelog answers.

    >>> asks_for_changes("which release added retries"), asks_for_changes("what changed in 2.1.0")
    (True, True)
    >>> asks_for_changes("retry with a backoff * add changelog entry for retries")
    False
    >>> asks_for_changes("ask the installed shell which release it is")
    False
    """
    return _ASKS_FOR_CHANGES.search(query) is not None and _ADDS_TO_CHANGES.search(query) is None


def role_asked_for(query: str) -> str | None:
    """TESTS or DOCS when the query asks for that role's files, else None (a question asks where a behaviour
    lives: the source).

    >>> role_asked_for("where is the progress bar tested"), role_asked_for("docs about theming")
    ('tests', 'docs')
    >>> role_asked_for("emit a warning whenever a value is tested for truth") is None
    True
    """
    if _ASKS_FOR_TESTS.search(query):
        return TESTS
    if _ASKS_FOR_DOCS.search(query):
        return DOCS
    return None
