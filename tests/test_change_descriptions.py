"""A short description of a change (a commit message, an agent's "make X do Y") finds the code, not the
changelog entry that words the same change: `retrieval.report_noise_weight` weighs changelogs for every query."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from coderag.base.config import Settings

FILES = {
    "src/client/retry.py": '''\
        """Sending a request again when it fails."""
        import time


        def retry_request(send, attempts=3, delay=0.5):
            """Call `send` until it succeeds, waiting twice as long after each failed attempt."""
            for attempt in range(attempts):
                try:
                    return send()
                except ConnectionError:
                    time.sleep(delay * 2 ** attempt)
            return send()
        ''',
    "src/client/session.py": '''\
        """A session keeps cookies and headers between requests."""


        class Session:
            def __init__(self):
                self.headers = {}
                self.cookies = {}

            def request(self, method, url):
                return {"method": method, "url": url, "headers": dict(self.headers)}
        ''',
    "src/client/timeouts.py": '''\
        """Timeouts of a request: connect and read."""


        def timeout_for(kind, default=10.0):
            return {"connect": 3.0, "read": default}.get(kind, default)
        ''',
    "CHANGELOG.md": '''\
        # Changelog

        ## 2.1.0
        - Retry failed requests with an exponential backoff instead of a fixed delay.
        - Sessions keep their cookies between requests.

        ## 2.0.0
        - Timeouts are split into connect and read timeouts.
        ''',
}

# The changelog's own words, and a rewording of them.
WORD_FOR_WORD = "Retry failed requests with an exponential backoff instead of a fixed delay"
REWORDED = "Use exponential backoff when retrying failed requests"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("changes") / "client", FILES)
    index_repository(root, settings=Settings())
    return root


def _files(root: Path, query: str, retriever: str, **retrieval) -> list[str]:
    from coderag import CodeIndex

    settings = Settings()
    for key, value in retrieval.items():
        setattr(settings.retrieval, key, value)
    with CodeIndex.open(root, settings=settings, create=False) as idx:
        res = idx.search(query, retriever=retriever, max_tokens=4000)
    return list(dict.fromkeys(r.file_path for r in res))


@pytest.mark.parametrize("query, retriever, ranker", [(WORD_FOR_WORD, "hybrid", "rules"), (REWORDED, "bm25", "blend")])
def test_change_description_ranks_the_code_above_the_changelog(repo: Path, query: str, retriever: str,
                                                                ranker: str) -> None:
    files = _files(repo, query, retriever, ranker=ranker)
    assert files[0] == "src/client/retry.py"
    assert "CHANGELOG.md" in files  # weighed less, not hidden: a question about a release still finds it
    # Weighed as any doc, the changelog that words the change comes first.
    assert _files(repo, query, retriever, ranker=ranker, report_noise_weight=1.0)[0] == "CHANGELOG.md"


@pytest.mark.parametrize("query, ranker, first", [("release notes of 2.1.0", "rules", "CHANGELOG.md"),
                                                  ("what changed in version 2.0.0 for timeouts", "blend",
                                                   "src/client/timeouts.py")])
def test_question_about_a_release_keeps_the_changelog(repo: Path, query: str, ranker: str, first: str) -> None:
    """A question about what changed, and in which release, is answered by the changelog: it keeps its weight."""
    files = _files(repo, query, "hybrid", ranker=ranker)
    assert files[0] == first and "CHANGELOG.md" in files


HISTORY_FILES = {
    "src/shell/history.py": '''\
        """The commands typed at the prompt, kept in a file between sessions."""
        from pathlib import Path


        def save_history(commands, path=Path("~/.shell_history")):
            """Append the commands typed in this session to the history file."""
            with path.expanduser().open("a") as f:
                f.writelines(c + "\\n" for c in commands)
        ''',
    "src/shell/prompt.py": '''\
        """The prompt: read a command, run it, remember it."""


        def read_commands(read=input):
            commands = []
            while (line := read("$ ")) != "exit":
                commands.append(line)
            return commands
        ''',
    "docs/history.md": "# History\n\n## 1.2\n- Commands typed at the prompt are saved to a history file.\n",
}


@pytest.mark.parametrize("ranker", ["rules", "blend"])
def test_a_module_named_like_a_changelog_is_code(tmp_path: Path, ranker: str) -> None:
    """`history.py` is a module like any other: only prose is weighed as a changelog by its name (the module
    weighed 0.3 when its name alone decided)."""
    from coderag import index_repository

    root = write_files(tmp_path / "shell", HISTORY_FILES)
    index_repository(root, settings=Settings())
    files = _files(root, "save the commands typed at the prompt to the history file", "hybrid", ranker=ranker)
    assert files[0] == "src/shell/history.py"
    assert files.index("src/shell/history.py") < files.index("docs/history.md")


CI_FILES = {
    ".github/workflows/tests.yml": '''\
        name: tests
        on: [push, pull_request]
        jobs:
          pytest:
            runs-on: ubuntu-latest
            strategy:
              matrix:
                python-version: ["3.10", "3.11", "3.12", "3.13"]
            steps:
              - uses: actions/checkout@v4
              - uses: actions/setup-python@v5
                with:
                  python-version: ${{ matrix.python-version }}
              - run: pip install -e .[test] && pytest
        ''',
    ".github/ISSUE_TEMPLATE/bug.yml": '''\
        name: Bug report
        body:
          - type: input
            attributes:
              label: Python version the tests failed on
        ''',
    "noxfile.py": '''\
        import nox


        @nox.session(python=["3.12"])
        def tests(session):
            """Run the test suite with pytest."""
            session.install("-e", ".[test]")
            session.run("pytest")
        ''',
}


@pytest.mark.parametrize("ranker", ["rules", "blend"])
def test_a_ci_workflow_is_configuration_not_a_template(tmp_path: Path, ranker: str) -> None:
    """Under `.github/`, the issue forms and the prose weigh as changelogs do; a workflow is what a question
    about CI asks for (it weighed 0.3 when its folder alone decided)."""
    from coderag import index_repository

    root = write_files(tmp_path / "ci", CI_FILES)
    index_repository(root, settings=Settings())
    files = _files(root, "which python versions do the tests run on in the CI workflow", "hybrid", ranker=ranker)
    assert files[0] == ".github/workflows/tests.yml", files
