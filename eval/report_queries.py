"""Training queries from bug reports: an issue's first post, with the lines its fix changed as the mined
repository's indexed snapshot has them.

A commit message says what a change did in its author's words; a report says what went wrong in a user's:
the error it printed, a traceback or panic, the input that broke, what was expected. Mined commits hold
almost no such text (eval/README.md counts the stack traces of each), so without reports the learned
ranker never sees what a frame or a pasted error is worth.

The reports are gathered by hand, as eval/bug_reports.py gathers its own: the first post of a GitHub issue
written as a bug, whose fix is a commit of the repository's history that names the issue ("Fixes #N", or
the squash-merge of a pull request that does). They are kept in ``eval/ranker_reports.jsonl``, one object
per report (repo, issue, url, fix_commit, title, body), since nothing in a git history holds an issue's
text. A report becomes a query when its fix is an ancestor of the repository's snapshot and is narrow
(eval/history.py `narrow_gold`: 1 to 3 source files, each still in the snapshot); its gold is then the
lines the fix added that the snapshot still holds, as for a commit message.

Reports are only taken from training repositories, and none from the projects whose reports the eval
tunes on or holds out (eval/bug_reports.py), so that no report of theirs is trained on.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterable

from coderag.eval.bug_reports import report_text
from coderag.eval.history import ISSUE, Rejections, commit_of, narrow_gold

REPORTS = Path(__file__).resolve().parent / "ranker_reports.jsonl"


def _is_ancestor(gitdir: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(gitdir), "merge-base", "--is-ancestor", older, newer],
                          capture_output=True).returncode == 0


def report_queries(reports: Iterable[dict[str, Any]], repo: str, gitdir: Path, snapshot: Path, commit: str,
                   split: str) -> tuple[list[dict[str, Any]], Rejections]:
    """The queries of `repo`'s reports against its snapshot at `commit`, as dataset records (eval/datasets.py)
    of kind ISSUE in corpus ``history``; each rejected report's reason counted."""
    why = Rejections()
    out: list[dict[str, Any]] = []
    for rec in reports:
        if rec["repo"] != repo:
            continue
        if not _is_ancestor(gitdir, rec["fix_commit"], commit):
            why.add("fix not in the snapshot")
            continue
        gold = narrow_gold(commit_of(gitdir, rec["fix_commit"]), snapshot, why)
        if gold is None:
            continue
        out.append({"id": f"history-{repo}#{rec['issue']}", "corpus": "history", "query": report_text(rec),
                    "gold": gold, "kind": ISSUE, "split": split, "repo": repo, "commit": commit})
    return out, why
