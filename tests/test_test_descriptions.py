"""A test states the behaviour it checks in a developer's words; asked in those words, a search finds the code
that has the behaviour, and the test only when the query asks for tests (pipelines/features.py `quote_counts`,
read by the rules and by the learned ranker's features)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from coderag.base.config import Settings

FILES = {
    "src/router/match.py": '''\
        """Routing a request path to its handler."""
        from src.router.response import Response


        def match_route(routes, path):
            for pattern, handler in routes:
                if pattern == path or (pattern.endswith("*") and path.startswith(pattern[:-1])):
                    return handler
            return lambda request: Response(404, "no route for " + path)
        ''',
    "src/router/response.py": '''\
        """The response a handler gives back."""


        class Response:
            def __init__(self, status, body=""):
                self.status = status
                self.body = body
        ''',
    "tests/test_match.py": '''\
        from src.router.match import match_route


        def test_missing_route():
            """Returns 404 when no route matches the requested path."""
            handler = match_route([("/users", lambda r: None)], "/orders")
            assert handler(None).status == 404
        ''',
}

DESCRIPTION = "Returns 404 when no route matches the requested path"  # the test's docstring, word for word


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("tests_words") / "router", FILES)
    index_repository(root, settings=Settings())
    return root


def _files(root: Path, query: str, ranker: str) -> list[str]:
    from coderag import CodeIndex

    settings = Settings()
    settings.retrieval.ranker = ranker
    with CodeIndex.open(root, settings=settings, create=False) as idx:
        res = idx.search(query, retriever="hybrid", max_tokens=4000)
    return list(dict.fromkeys(r.file_path for r in res))


def test_a_tests_words_find_the_code_that_does_it(repo: Path) -> None:
    """The rules' order (the blend's larger share). The learned ranker reads the same `quote_counts`, but its
    other evidence (the test's words cover the query, its name) still puts the test first in a three-file
    repository, and the blend with it; over the tune projects' test descriptions it gains (eval/RESULTS.md)."""
    files = _files(repo, DESCRIPTION, "rules")
    assert files[0] == "src/router/match.py"
    assert "tests/test_match.py" in files  # not boosted, not hidden


@pytest.mark.parametrize("ranker", ["rules", "blend"])
def test_a_query_for_the_test_finds_the_test(repo: Path, ranker: str) -> None:
    files = _files(repo, f"which test covers: {DESCRIPTION}", ranker)
    assert files[0] == "tests/test_match.py"
