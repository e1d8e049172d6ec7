"""eval/tune_commits.py: which snapshot of a tune project its commit queries are mined at."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coderag.eval.tune_commits import newest_snapshot


def _commit(repo: Path, name: str, when: str) -> str:
    env = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
           "HOME": str(repo), "PATH": "/usr/bin:/bin"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout

    if not (repo / ".git").exists():
        git("init", "-q")
    (repo / name).write_text(name, encoding="utf-8")
    git("add", "-A")
    git("commit", "-q", "-m", f"Add the {name} module to the project")
    return git("rev-parse", "HEAD").strip()


def test_tune_commits_are_mined_at_the_newest_commit_a_report_is_searched_at(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    old = _commit(repo, "a.py", "2024-01-01T00:00:00")
    new = _commit(repo, "b.py", "2025-06-01T00:00:00")
    _commit(repo, "c.py", "2026-01-01T00:00:00")  # no report's parent: not a snapshot bug-reports searches
    fixes = tmp_path / "fixes.tsv"
    fixes.write_text("repo\tissue\turl\tfix_commit\tbefore_commit\n"
                     f"dev/app\t2\tu\tf2\t{new}\n"
                     f"dev/app\t1\tu\tf1\t{old}\n"
                     f"dev/other\t3\tu\tf3\t{old}\n", encoding="utf-8")

    assert newest_snapshot("dev/app", repo / ".git", fixes) == new
    with pytest.raises(SystemExit, match="dev/none has no report"):
        newest_snapshot("dev/none", repo / ".git", fixes)
