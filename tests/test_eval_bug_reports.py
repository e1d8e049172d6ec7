"""bug-reports: a report's gold is made from its fix in a real git history (tmp_path), as lines of the commit
before the fix; its snapshot is that commit's tree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from coderag.eval import bug_reports
from coderag.eval.datasets import Gold, load_dataset, validate
from coderag.eval.snapshots import snapshot_name

BEFORE = '''\
def parse(text):
    """Parse one line."""
    value = text.strip()

    return value


def render(value):
    return str(value)
'''
AFTER = '''\
def parse(text):
    """Parse one line."""
    value = text.strip()
    if value.startswith("-"):
        value = value[1:]
    return value


def render(value):
    return repr(value)
'''


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, str, str]:
    """A mirror folder holding acme+tool/repo, a bare git dir with a commit and a fix of one source file (its
    test changed beside it)."""
    work = tmp_path / "work"
    (work / "tool").mkdir(parents=True)
    (work / "tests").mkdir()
    _git(tmp_path, "init", "-q", str(work))
    _git(work, "config", "user.email", "a@b.c")
    _git(work, "config", "user.name", "a")
    (work / "tool" / "core.py").write_text(BEFORE)
    (work / "tests" / "test_core.py").write_text("def test_parse():\n    pass\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "first")
    before = _git(work, "rev-parse", "HEAD")
    (work / "tool" / "core.py").write_text(AFTER)
    (work / "tests" / "test_core.py").write_text("def test_parse():\n    assert True\n")
    _git(work, "commit", "-q", "-am", "Fix parsing of negative values (fixes #7)")
    fix = _git(work, "rev-parse", "HEAD")
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "acme+tool" / "repo")], check=True)
    return mirror, before, fix


def test_gold_is_the_fix_as_lines_before_it_and_the_snapshot_is_that_commit(history, tmp_path: Path):
    mirror, before, fix = history
    record = {"repo": "acme/tool", "issue": 7, "url": "https://github.com/acme/tool/issues/7", "fix_commit": fix,
              "before_commit": before, "title": "  Negative values parse wrong ",
              "body": "parse('-3') gives '-3' where the docs say 3.\n"}
    out, fixes = tmp_path / "bug-reports.jsonl", tmp_path / "bug-reports.fixes.tsv"
    [q] = bug_reports.build([record], mirror, out, fixes)

    # The blank line 4 was replaced by two lines: widened to the code around it (3-5). The insertion-free
    # change of render is line 9. The test file is not gold.
    assert q.gold == (Gold("tool/core.py", 3, 5), Gold("tool/core.py", 9, 9))
    assert (q.id, q.corpus, q.kind, q.split, q.repo, q.commit) == (
        "bug-reports-acme+tool-7", "bug-reports", "issue", "tune", "acme/tool", before)
    assert q.query == "Negative values parse wrong\nparse('-3') gives '-3' where the docs say 3."
    assert json.loads(out.read_text())["gold"][0] == {"file_path": "tool/core.py", "start_line": 3, "end_line": 5}
    assert fixes.read_text().splitlines()[1].split("\t") == ["acme/tool", "7", record["url"], fix, before]

    snaps = tmp_path / "snaps"
    assert bug_reports.make_snapshots(load_dataset(out), mirror, snaps) == 1
    root = snaps / snapshot_name("acme/tool", before)
    assert (root / "tool" / "core.py").read_text() == BEFORE
    assert validate(load_dataset(out), root_for_corpus=lambda corpus: snaps) == []


def test_a_fix_of_no_source_file_is_refused(history, tmp_path: Path):
    mirror, before, _ = history
    record = {"repo": "acme/tool", "issue": 8, "url": "u", "fix_commit": before, "before_commit": before,
              "title": "t", "body": "b"}
    with pytest.raises(ValueError, match="changes 0 source files"):
        bug_reports.build([record], mirror, tmp_path / "x.jsonl", tmp_path / "x.tsv")
