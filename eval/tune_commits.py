"""Commit messages and test descriptions of tune projects, to choose a ranking setting on change
descriptions before the held-out projects' ones see it (eval/README.md, "Tune commits").

The held-out commit queries were the only change descriptions no ranker was trained on, so nothing could be
chosen on that kind of query without spending them. These come from tune projects that no ranker was trained
on, mined as the training data was (eval/history.py `mine`: five years of commits before the snapshot), each
at one pinned snapshot: astroid and sqlfluff (tune projects of `bug-reports`, at the newest commit it searches
them at), pydantic-core and TanStack Query (the projects of the tune question sets `pydantic-core` and
`query-core`, at the head of their history when it was fetched). A seeded sample per project and kind keeps a
run to a few minutes.

    python -m coderag.eval.tune_commits queries --mirror DIR --out tune_commits.jsonl  # snapshots: $CODERAG_HISTORY_DIR
    coderag eval --dataset tune_commits.jsonl --variants full                            # indexes them on first use
    python -m coderag.eval.tune_commits names --out tune_names.jsonl                     # then: names of those indexed

The same snapshots serve `query-core-repo` (eval/datasets): `python -m coderag.eval.tune_commits snapshots
--mirror DIR [--out DIR]` makes them alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from coderag.eval.history import COMMIT, TEST, make_snapshot, mine
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name

# repo -> the snapshot commit its queries are mined at. None is a training repository of
# eval/history_repos.py (marshmallow, a tune project of bug-reports, is one) or a held-out one.
TUNE_COMMIT_REPOS: dict[str, str] = {
    "pylint-dev/astroid": "1c23028fa427fbe040a5e228faf55ae9b8ecfe2e",
    "sqlfluff/sqlfluff": "ba911518e42ff0531eabcb9852cea551e9188ed4",
    "pydantic/pydantic-core": "383eb95a19433754c0cecf7025b50c26b6d97a36",
    "TanStack/query": "40321a0b1b3bdd0afa11f0e439642ab84cdf6afe",
}
SAMPLE = {COMMIT: 300, TEST: 120}  # per project
SEED = 7


def snapshot_of(mirror: Path, snapshots: Path, repo: str, commit: str) -> tuple[Path, Path]:
    """(the git dir, the snapshot) of `repo` at `commit`, the snapshot made when it is not there yet."""
    gitdir = mirror / repo.replace("/", "+") / "repo"
    if not gitdir.is_dir():
        raise SystemExit(f"{gitdir} is not there: fetch {repo} as a bare git dir with its history first.")
    return gitdir, make_snapshot(gitdir, commit, snapshots / snapshot_name(repo, commit))


def tune_commits(mirror: Path, snapshots: Path, repos: dict[str, str] = TUNE_COMMIT_REPOS,
                 sizes: dict[str, int] = SAMPLE, seed: int = SEED) -> list[dict]:
    """`sizes[kind]` queries of each kind of each project, drawn by one generator: the same ones on every run
    (and the first projects' the same when one is added at the end). Makes each snapshot it lacks."""
    rng = random.Random(seed)
    out: list[dict] = []
    for repo, commit in repos.items():
        gitdir, snap = snapshot_of(mirror, snapshots, repo, commit)
        for kind, n in sizes.items():
            records, _ = mine(repo, gitdir, snap, commit, "tune", kind=kind)
            rng.shuffle(records)
            out += records[:n]
            print(f"{repo} @ {commit[:12]}: {len(records)} {kind} queries, {min(n, len(records))} kept", file=sys.stderr)
    return out


def tune_names(snapshots: Path, repos: dict[str, str] = TUNE_COMMIT_REPOS) -> list[dict]:
    """Name queries (eval/index_queries.py `name_queries`, as the training repositories' are mined) of each
    project's snapshot that is indexed: to choose, on tune data, how a query that names code is ranked."""
    from coderag.base.paths import INDEX_DIR_NAME
    from coderag.eval.index_queries import name_queries

    out: list[dict] = []
    for repo, commit in repos.items():
        snap = snapshots / snapshot_name(repo, commit)
        if not (snap / INDEX_DIR_NAME).is_dir():
            print(f"{repo} @ {commit[:12]}: not indexed, skipped", file=sys.stderr)
            continue
        found = name_queries(snap, repo, "tune", commit=commit)
        print(f"{repo} @ {commit[:12]}: {len(found)} name queries", file=sys.stderr)
        out += found
    return out


def main(argv: list[str] | None = None) -> int:
    history = SNAPSHOTS["history"]  # where `coderag eval` looks for the snapshots of these queries
    p = argparse.ArgumentParser(prog="python -m coderag.eval.tune_commits", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("queries", help="mine the queries (and make the snapshots they need)")
    q.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    q.add_argument("--snapshots", type=Path, default=None, help=f"where the snapshots go (default: ${history.env})")
    q.add_argument("--out", type=Path, required=True, help="the queries, one JSON object a line")
    n = sub.add_parser("names", help="name queries of the snapshots already indexed (by `coderag eval` of the queries)")
    n.add_argument("--snapshots", type=Path, default=None, help=f"where the snapshots are (default: ${history.env})")
    n.add_argument("--out", type=Path, required=True, help="the queries, one JSON object a line")
    s = sub.add_parser("snapshots", help="only the snapshots")
    s.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    s.add_argument("--out", type=Path, default=None, help=f"where the snapshots go (default: ${history.env})")
    a = p.parse_args(argv)
    if a.cmd == "snapshots":
        folder = a.out or history.folder()
        for repo, commit in TUNE_COMMIT_REPOS.items():
            print(snapshot_of(a.mirror, folder, repo, commit)[1])
        return 0
    if a.cmd == "names":
        records = tune_names(a.snapshots or history.folder())
        if not records:
            print(f"error: no indexed tune snapshot in {a.snapshots or history.folder()}; run `coderag eval --dataset "
                  f"<the queries>` first, which indexes them.", file=sys.stderr)
            return 2
    else:
        records = tune_commits(a.mirror, a.snapshots or history.folder())
    a.out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    print(f"{a.out}: {len(records)} queries", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
