"""bug-reports: real bug reports, each with the lines its fix changed, split by project.

Made SWE-bench's way, from issues swebench-dev does not hold: a report is the first post of a GitHub issue (title and
description, no comment), labelled or plainly written as a bug by a user; its fix is the commit of the
repository's history that names the issue ("Fixes #N", or the pull request that does) and changes one to
three source files (tests, docs and changelog beside them are ignored). The snapshot searched is the fix's
parent, and the gold is each hunk of the fix in those source files as lines of that parent (a pure insertion
names the line it goes before; `swebench.fit_range` widens blank lines to the code around them).

The split is by repository. The held-out projects of the question sets and the mined commit messages
(anyio, tomlkit, ajv, orjson, jiter: eval/README.md) give the ``heldout`` reports; three of swebench-dev's
tune projects (marshmallow, astroid, sqlfluff) give ``tune`` ones, for choosing how reports are read. The
issues were found through a search of stored GitHub issue threads; ``bug-reports.fixes.tsv`` beside the
dataset names each report's issue, fix and parent commit, so the gold can be made again from the
repositories' histories.

Command line, with a folder of bare git dirs ``<mirror>/<owner>+<name>/repo``::

    python -m coderag.eval.bug_reports build RECORDS.jsonl --mirror DIR   # the dataset and its .fixes.tsv
    python -m coderag.eval.bug_reports snapshots --mirror DIR [--out DIR] # a checkout per (repo, commit)

RECORDS holds one object per report: repo, issue, url, fix_commit, before_commit, title, body.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

from coderag.eval.datasets import DATASETS_DIR, Gold, Query, load_dataset
from coderag.eval.history import ISSUE, is_source, make_snapshot
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name
from coderag.eval.swebench import fit_range, write

CORPUS = "bug-reports"
FIXES = DATASETS_DIR / f"{CORPUS}.fixes.tsv"
HELDOUT_REPOS = frozenset({"agronholm/anyio", "python-poetry/tomlkit", "ajv-validator/ajv", "ijl/orjson",
                           "pydantic/jiter"})
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", re.M)


def hunk_ranges(diff: str) -> list[tuple[int, int]]:
    """The lines of the old file that each hunk of a `git diff -U0` changes, 1-based and inclusive. A pure
    insertion (no old line) names the line after the insertion point, the code it goes before.

    >>> hunk_ranges("@@ -3,2 +3,1 @@\\n-a\\n-b\\n+c\\n@@ -9,0 +9,2 @@\\n+d\\n@@ -0,0 +1 @@\\n+e")
    [(3, 4), (10, 10), (1, 1)]
    """
    out = []
    for m in _HUNK.finditer(diff):
        start, count = int(m.group(1)), int(m.group(2) or 1)
        out.append((start, start + count - 1) if count else (start + 1, start + 1))
    return out


def _git(gitdir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, text=True,
                          check=True).stdout


def gold_of(gitdir: Path, before: str, fix: str) -> list[Gold]:
    """The source lines `fix` changed, as lines of `before`: each hunk fitted to the file's lines."""
    gold = []
    for path in sorted(_git(gitdir, "diff", "--name-only", before, fix).split()):
        if not is_source(path):
            continue
        lines = _git(gitdir, "show", f"{before}:{path}").splitlines()
        for s, e in hunk_ranges(_git(gitdir, "diff", "-U0", before, fix, "--", path)):
            gold.append(Gold(path, *fit_range(lines, s, e)))
    return gold


def report_text(rec: dict[str, Any]) -> str:
    """A report as a query: its title, then its first post.

    >>> report_text({"title": " Crash on empty input ", "body": "Traceback ...\\n"})
    'Crash on empty input\\nTraceback ...'
    """
    return f"{rec['title'].strip()}\n{rec['body'].strip()}".strip()


def to_query(rec: dict[str, Any], gitdir: Path) -> Query:
    gold = gold_of(gitdir, rec["before_commit"], rec["fix_commit"])
    files = len({g.file_path for g in gold})
    if not 1 <= files <= 3:
        raise ValueError(f"{rec['url']}: the fix changes {files} source files, not 1-3")
    text = report_text(rec)
    qid = f"{CORPUS}-{rec['repo'].replace('/', '+')}-{rec['issue']}"
    split = "heldout" if rec["repo"] in HELDOUT_REPOS else "tune"
    return Query(qid, CORPUS, text, tuple(gold), ISSUE, split, rec["repo"], rec["before_commit"])


def build(records: Iterable[dict[str, Any]], mirror: Path, out: Path, fixes: Path) -> list[Query]:
    records = list(records)
    queries = [to_query(r, mirror / r["repo"].replace("/", "+") / "repo") for r in records]
    write(queries, out)
    rows = ["repo\tissue\turl\tfix_commit\tbefore_commit"]
    rows += [f"{r['repo']}\t{r['issue']}\t{r['url']}\t{r['fix_commit']}\t{r['before_commit']}" for r in records]
    fixes.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return queries


def make_snapshots(queries: Iterable[Query], mirror: Path, folder: Path) -> int:
    made = 0
    for repo, commit in sorted({(q.repo, q.commit) for q in queries}):
        make_snapshot(mirror / repo.replace("/", "+") / "repo", commit, folder / snapshot_name(repo, commit))
        made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.bug_reports", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="the dataset (eval/datasets/bug-reports.jsonl) from gathered reports")
    b.add_argument("records", type=Path)
    b.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    b.add_argument("--out", type=Path, default=DATASETS_DIR / f"{CORPUS}.jsonl")
    s = sub.add_parser("snapshots", help="a checkout of each report's repository at the commit before its fix")
    s.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    s.add_argument("--out", type=Path, default=None, help=f"default: ${SNAPSHOTS[CORPUS].env} or the temp dir")
    a = p.parse_args(argv)
    if a.cmd == "build":
        with a.records.open(encoding="utf-8") as f:
            queries = build((json.loads(line) for line in f if line.strip()), a.mirror, a.out, FIXES)
        print(f"{a.out}: {len(queries)} reports; fixes in {FIXES}")
        return 0
    folder = a.out or SNAPSHOTS[CORPUS].folder()
    n = make_snapshots(load_dataset(CORPUS), a.mirror, folder)
    print(f"{folder}: {n} snapshots (index them with `coderag index`, or let `coderag eval` do it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
