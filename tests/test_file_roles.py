"""File roles, and a first build that embeds source files before tests, docs and examples."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coderag.nodes.file_roles import (DOCS, EXAMPLES, SOURCE, TESTS, asks_for_changes, file_role, role_asked_for,
                                     source_first)


@pytest.mark.parametrize("path, language, role", [
    ("src/pkg/core.py", "python", SOURCE), ("pkg/tests/test_core.py", "python", TESTS),
    ("web/app.test.ts", "typescript", TESTS), ("conftest.py", "python", TESTS),
    ("docs/guide/intro.md", "markdown", DOCS), ("README.rst", "rst", DOCS), ("doc/conf.py", "python", DOCS),
    ("examples/quickstart.py", "python", EXAMPLES), ("pkg/testing_utils.py", "python", SOURCE),
])
def test_file_role(path: str, language: str, role: str) -> None:
    assert file_role(path, language) == role


def test_source_first_orders_by_role_then_path() -> None:
    paths = ["tests/test_b.py", "docs/b.md", "src/b.py", "examples/b.py", "src/a.py", "tests/test_a.py"]
    assert source_first(paths) == ["src/a.py", "src/b.py", "tests/test_a.py", "tests/test_b.py", "docs/b.md",
                                   "examples/b.py"]


def test_first_build_reports_dense_progress_by_role(tmp_path: Path) -> None:
    from conftest import write_files
    from coderag.service import IndexService

    root = write_files(tmp_path / "repo", {
        "src/pkg/core.py": "def add(a, b):\n    '''Add two numbers.'''\n    return a + b\n",
        "tests/test_core.py": "from pkg.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        "docs/guide.md": "# Guide\n\nCall add with two numbers.\n",
        "examples/demo.py": "from pkg.core import add\nprint(add(2, 3))\n",
        ".env": "API_KEY=not-for-the-index\n", "bench/results.csv": "a,b\n1,2\n",
    })
    svc = IndexService(root, watch=False, serve=False).start()
    try:
        deadline = time.monotonic() + 240
        while not svc.dense_ready and svc.progress.get("phase") != "failed" and time.monotonic() < deadline:
            time.sleep(0.2)
        status = svc.status()
        assert svc.dense_ready, status["indexing"]
        by_role = status["indexing"]["dense_by_role"]
        assert by_role == {role: {"done": 1, "total": 1} for role in (SOURCE, TESTS, DOCS, EXAMPLES)}
        assert status["skipped"] == {"secret": 1, "data": 1}  # every skip class, in index_status too
    finally:
        svc.stop()


@pytest.mark.parametrize("query, role", [
    ("where is the progress bar tested", TESTS),
    ("tests for parse_header", TESTS),
    ("which tests cover the retry logic", TESTS),
    ("docs about theming", DOCS),
    ("where is the cache documented", DOCS),
    ("emit a warning whenever a value is tested for truth", None),        # a behaviour
    ("capture printed output and exit code of a command in tests", None),  # testing helpers live in the source
    ("where are failed logins retried", None),
])
def test_file_roles_the_role_a_query_asks_for(query, role) -> None:
    assert role_asked_for(query) == role


@pytest.mark.parametrize("query, asks", [
    ("what changed in version 2.1.0", True),
    ("changes since version 2.0", True),
    ("which release added the retry option", True),
    ("release notes for the parser", True),
    ("what's new in 3.0", True),
    ("Retry failed requests with a backoff\n\n* add changelog entry for retries", False),  # a change that adds to it
    ("ask the installed shell which release it is", False),
    ("how are changes to the config saved", False),
])
def test_file_roles_a_query_about_what_changed_in_a_release(query, asks) -> None:
    assert asks_for_changes(query) is asks
