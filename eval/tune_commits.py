"""Commit messages and test descriptions of tune projects, to choose a ranking setting on change
descriptions before the held-out projects' ones see it (eval/README.md, "Tune commits").

The held-out commit queries are the only change descriptions no ranker was trained on, so nothing could be
chosen on that kind of query without spending them. These come from the tune projects of `bug-reports`
that no ranker was trained on (astroid, sqlfluff; marshmallow is a training repository of
eval/history_repos.py), mined as the training data was (eval/history.py `mine`: five years of commits
before the snapshot), at each project's newest bug-report snapshot, which `bug-reports` already indexes.
A seeded sample per project and kind keeps a run to about a minute.

    python -m coderag.eval.tune_commits --mirror DIR --out tune_commits.jsonl
    CODERAG_HISTORY_DIR=$CODERAG_BUGREPORTS_DIR coderag eval --dataset tune_commits.jsonl --variants full
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

from coderag.eval.bug_reports import FIXES
from coderag.eval.history import COMMIT, TEST, mine, snapshot_time
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name

TUNE_COMMIT_REPOS = ("pylint-dev/astroid", "sqlfluff/sqlfluff")
SAMPLE = {COMMIT: 300, TEST: 120}  # per project
SEED = 7


def newest_snapshot(repo: str, gitdir: Path, fixes: Path = FIXES) -> str:
    """The newest commit of `repo` that `bug-reports` searches (a fix's parent, in `fixes`)."""
    with fixes.open(encoding="utf-8") as f:
        parents = [row["before_commit"] for row in csv.DictReader(f, delimiter="\t") if row["repo"] == repo]
    if not parents:
        raise SystemExit(f"{repo} has no report in {fixes}.")
    return max(parents, key=lambda c: snapshot_time(gitdir, c))


def tune_commits(mirror: Path, snapshots: Path, sizes: dict[str, int] = SAMPLE, seed: int = SEED) -> list[dict]:
    """`sizes[kind]` queries of each kind of each project, drawn by one generator: the same ones on every run."""
    rng = random.Random(seed)
    out: list[dict] = []
    for repo in TUNE_COMMIT_REPOS:
        gitdir = mirror / repo.replace("/", "+") / "repo"
        commit = newest_snapshot(repo, gitdir)
        snap = snapshots / snapshot_name(repo, commit)
        if not (snap / ".commit").is_file():
            raise SystemExit(f"{snap} is not there: make the bug-reports snapshots first "
                             f"({SNAPSHOTS['bug-reports'].prepare}).")
        for kind, n in sizes.items():
            records, _ = mine(repo, gitdir, snap, commit, "tune", kind=kind)
            rng.shuffle(records)
            out += records[:n]
            print(f"{repo} @ {commit[:12]}: {len(records)} {kind} queries, {min(n, len(records))} kept", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.tune_commits", description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    p.add_argument("--snapshots", type=Path, default=None,
                   help=f"the bug-reports snapshots (default: ${SNAPSHOTS['bug-reports'].env})")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    records = tune_commits(a.mirror, a.snapshots or SNAPSHOTS["bug-reports"].folder())
    a.out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    print(f"{a.out}: {len(records)} queries", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
