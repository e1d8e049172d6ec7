"""The learned ranker's data: snapshots of the mined repositories, their labelled queries, and each query's
candidates as the legs return them, dumped once per repository.

Four steps, each a subcommand, each resumable (a finished repository is skipped):

1. ``snapshots``: each repository of eval/history_repos.py at its pinned commit, from bare git directories with
   full history (``<mirror>/<owner>+<name>/repo``), written to ``<out>/<owner>+<name>@<commit>``.
2. ``index``: ``coderag index`` of every snapshot (vectors and all; the slow step: minutes per repository).
3. ``queries``: the commit queries of eval/history.py, and docstring queries from the index (the first
   sentence of a definition's leading doc comment or docstring: eval/index_queries.py), as dataset
   records (eval/datasets.py) in ``<data>/queries/<owner>+<name>.jsonl``, with queries that name code
   (a definition by its name in three spellings, a name's callers, its tests); and
   in ``<owner>+<name>.tests.jsonl`` the descriptions of the tests those commits added (eval/history.py's
   TEST queries: a source mined in a pass of its own, so the main file is not made again); ``heldout``
   joins those of the held-out repositories in ``<data>/heldout.jsonl``, a dataset ``coderag eval
   --dataset`` reads; ``hand`` dumps the legs of the eval's tune-split questions, which train-ranker
   scores as a check it never trains on (indexed by ``coderag eval`` first); ``tested`` writes "where is X
   tested" queries of the indexed held-out snapshots, an eval set (``where_tested_queries``); ``reports``
   writes ``<owner>+<name>.reports.jsonl``, the training repositories' bug reports gathered in
   eval/ranker_reports.jsonl, each with the lines its fix added (eval/report_queries.py).
4. ``dump``: each query's candidates from each leg, at DUMP_DEPTH, with the nodes they name, in
   ``<data>/dump/<owner>+<name>[.<source>].json.gz``, one per queries file. Features are computed from a
   dump (eval/train_ranker.py) by the same function the search runs (pipelines/features.py), so they can
   change without searching again.

Usage::

    python -m coderag.eval.ranker_data snapshots --mirror /work/.mirror --out $CODERAG_HISTORY_DIR
    python -m coderag.eval.ranker_data index
    python -m coderag.eval.ranker_data queries --data /work/rank --mirror /work/.mirror
    python -m coderag.eval.ranker_data reports --data /work/rank --mirror /work/.mirror
    python -m coderag.eval.ranker_data dump --data /work/rank
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from coderag.base.paths import INDEX_DIR_NAME
from coderag.eval.history import DEFAULT_YEARS, TEST, make_snapshot, mine
from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS, TRAIN
from coderag.eval.index_queries import docstring_queries, name_queries, where_tested_queries
from coderag.eval.legs import DUMPED_METADATA, dump_settings
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name

DUMP_DEPTH = 50  # deeper than the search's legs go, so a deeper setting can be tried on the same dump


def snapshot_folder(root: Path, repo: str) -> Path:
    return root / snapshot_name(repo, HISTORY_REPOS[repo][0])


TESTS_SOURCE = "tests"  # <repo>.tests.jsonl: the descriptions of the tests commits added (eval/history.py)
REPORTS_SOURCE = "reports"  # <repo>.reports.jsonl: bug reports with the lines their fixes added (report_queries.py)


def queries_file(data: Path, repo: str, source: str = "") -> Path:
    """Where a repository's queries of one source are: ``<repo>.jsonl`` (commits, docstrings, names), or
    ``<repo>.<source>.jsonl`` for a source mined in a pass of its own."""
    return data / "queries" / (repo.replace("/", "+") + (f".{source}" if source else "") + ".jsonl")


def queries_files(data: Path, repo: str) -> list[Path]:
    """Every queries file of a repository, its main one first."""
    main = queries_file(data, repo)
    return [p for p in [main] if p.is_file()] + sorted(main.parent.glob(main.name.replace(".jsonl", ".*.jsonl")))


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    tmp.replace(path)


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def dump_repo(root: Path, queries: list[dict[str, Any]], out: Path, depth: int = DUMP_DEPTH) -> int:
    """Each query's legs, `depth` deep, and every node they name, in one gzipped JSON file; returns the count."""
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.search_options import SearchOptions

    nodes: dict[str, dict[str, Any]] = {}
    rows = []
    with CodeIndex.open(root, settings=dump_settings(root, depth), create=False) as index:
        graph = index.engine.graph
        indexed = set(index.indexed_paths())
        for q in queries:
            q = dict(q, gold=[g for g in q["gold"] if g["file_path"] in indexed])
            if not q["gold"]:
                continue  # its files are ignored by the index (vendored, generated, too big)
            req = graph.request(SearchOptions(query=q["query"]))
            legs = graph.fusion.run_legs(req) if req is not None else {}
            ranked = {}
            for leg, found in legs.items():
                found = sorted(found, key=lambda n: n.score or 0.0, reverse=True)
                ranked[leg] = [[n.node.node_id, float(n.score or 0.0)] for n in found]
                for n in found:
                    if n.node.node_id not in nodes:
                        nodes[n.node.node_id] = {**{k: n.node.metadata.get(k) for k in DUMPED_METADATA},
                                                 "text": n.node.get_content()}
            rows.append({**q, "legs": ranked})
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump({"nodes": nodes, "queries": rows}, f)
    tmp.replace(out)
    return len(rows)


def load_dump(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_report_queries(data: Path, mirror: Path, root: Path, repos: list[str]) -> int:
    """`<repo>.reports.jsonl` for each training repository with gathered reports and an indexed snapshot. None
    of a project whose reports the eval tunes on or holds out (eval/bug_reports.py) is written."""
    from coderag.eval.datasets import load_dataset
    from coderag.eval.report_queries import REPORTS, report_queries

    reports = list(_records(REPORTS))
    evaluated = {q.repo for q in load_dataset("bug-reports")}
    (data / "queries").mkdir(exist_ok=True)
    total = 0
    for n, repo in enumerate(repos, 1):
        sha, _, split = HISTORY_REPOS[repo]
        theirs = [r for r in reports if r["repo"] == repo]
        if not theirs or split != TRAIN or repo in evaluated:
            continue
        folder = snapshot_folder(root, repo)
        gitdir = mirror / repo.replace("/", "+") / "repo"
        if not (folder / INDEX_DIR_NAME).is_dir() or not gitdir.is_dir():
            print(f"[{n}/{len(repos)}] {repo}: no indexed snapshot or git dir; skipped", file=sys.stderr)
            continue
        found, why = report_queries(theirs, repo, gitdir, folder, sha, split)
        _write_jsonl(queries_file(data, repo, REPORTS_SOURCE), found)
        total += len(found)
        print(f"[{n}/{len(repos)}] {repo}: {len(found)} of {len(theirs)} reports; "
              f"rejected {dict(sorted(why.counts.items()))}", file=sys.stderr, flush=True)
    print(f"{total} report queries", file=sys.stderr)
    return 0


def history_root(arg: str | None) -> Path:
    return Path(arg) if arg else SNAPSHOTS["history"].folder()


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.ranker_data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshots", help="write each repository's pinned snapshot")
    s.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo bare git dirs")
    s.add_argument("--out", default=None, help="where the snapshots go (default: $CODERAG_HISTORY_DIR)")
    i = sub.add_parser("index", help="coderag index every snapshot (slow: the vectors)")
    i.add_argument("--out", default=None)
    q = sub.add_parser("queries", help="mine commit queries and docstring queries")
    q.add_argument("--mirror", type=Path, required=True)
    q.add_argument("--out", default=None, help="the snapshots' folder (default: $CODERAG_HISTORY_DIR)")
    q.add_argument("--data", type=Path, required=True, help="folder for queries.jsonl and the dumps")
    q.add_argument("--years", type=float, default=DEFAULT_YEARS)
    w = sub.add_parser("hand", help="dump the legs of the eval's tune-split questions (train_ranker.HAND_WRITTEN)")
    w.add_argument("--data", type=Path, required=True)
    w.add_argument("--out", default=None)
    t = sub.add_parser("tested", help="write \"where is X tested\" queries of the indexed held-out snapshots")
    t.add_argument("--out", default=None)
    t.add_argument("--to", type=Path, required=True, help="the dataset file to write")
    r = sub.add_parser("reports", help="the training repositories' bug reports (eval/ranker_reports.jsonl) as queries")
    r.add_argument("--mirror", type=Path, required=True)
    r.add_argument("--out", default=None)
    r.add_argument("--data", type=Path, required=True)
    h = sub.add_parser("heldout", help="write the held-out repositories' queries as one dataset file")
    h.add_argument("--data", type=Path, required=True)
    h.add_argument("--out", default=None)
    d = sub.add_parser("dump", help="dump each query's candidates from each leg")
    d.add_argument("--out", default=None)
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--depth", type=int, default=DUMP_DEPTH)
    a = p.parse_args(argv)
    root = history_root(a.out)
    repos = list(HISTORY_REPOS)
    if a.cmd == "snapshots":
        for n, repo in enumerate(repos, 1):
            gitdir = a.mirror / repo.replace("/", "+") / "repo"
            if not gitdir.is_dir():
                print(f"[{n}/{len(repos)}] {repo}: no git dir at {gitdir} (fetch it first); skipped", file=sys.stderr)
                continue
            make_snapshot(gitdir, HISTORY_REPOS[repo][0], snapshot_folder(root, repo))
            print(f"[{n}/{len(repos)}] {repo}", file=sys.stderr)
        return 0
    if a.cmd == "tested":
        records = []
        for repo in repos:
            folder = snapshot_folder(root, repo)
            if HISTORY_REPOS[repo][2] != HELDOUT or not (folder / INDEX_DIR_NAME).is_dir():
                continue
            found = where_tested_queries(folder, repo, HISTORY_REPOS[repo][0], HELDOUT)
            print(f"{repo}: {len(found)} queries", file=sys.stderr)
            records += found
        if not records:
            print(f"error: no indexed held-out snapshot in {root}; make them with `snapshots` and `index`.",
                  file=sys.stderr)
            return 2
        _write_jsonl(a.to, records)
        return 0
    if a.cmd == "index":
        for n, repo in enumerate(repos, 1):
            folder = snapshot_folder(root, repo)
            if folder.is_dir():
                print(f"[{n}/{len(repos)}] {repo}", file=sys.stderr, flush=True)
                subprocess.run([sys.executable, "-m", "coderag.cli", "index", str(folder)], check=True)
        return 0
    a.data.mkdir(parents=True, exist_ok=True)
    if a.cmd == "queries":
        (a.data / "queries").mkdir(exist_ok=True)
        for n, repo in enumerate(repos, 1):
            sha, _, split = HISTORY_REPOS[repo]
            folder = snapshot_folder(root, repo)
            gitdir = a.mirror / repo.replace("/", "+") / "repo"
            out, tests_out = queries_file(a.data, repo), queries_file(a.data, repo, TESTS_SOURCE)
            if out.is_file() and tests_out.is_file():
                continue
            if not (folder / ".coderag").is_dir() or not gitdir.is_dir():
                print(f"[{n}/{len(repos)}] {repo}: no indexed snapshot or git dir; skipped", file=sys.stderr)
                continue
            if not out.is_file():
                found, why = mine(repo, gitdir, folder, sha, split, a.years)
                docs = docstring_queries(folder, repo, split)
                names = name_queries(folder, repo, split)
                _write_jsonl(out, found + docs + names)
                print(f"[{n}/{len(repos)}] {repo}: {len(found)} commits, {len(docs)} docstrings, {len(names)} names; "
                      f"rejected {dict(sorted(why.counts.items()))}", file=sys.stderr, flush=True)
            if not tests_out.is_file():
                found, why = mine(repo, gitdir, folder, sha, split, a.years, kind=TEST)
                _write_jsonl(tests_out, found)
                print(f"[{n}/{len(repos)}] {repo}: {len(found)} test descriptions; "
                      f"rejected {dict(sorted(why.counts.items()))}", file=sys.stderr, flush=True)
        return 0
    if a.cmd == "reports":
        return write_report_queries(a.data, a.mirror, root, repos)
    if a.cmd == "hand":
        from coderag.eval.corpora import fetch
        from coderag.eval.datasets import load_dataset
        from coderag.eval.train_ranker import HAND_WRITTEN

        (a.data / "dump").mkdir(exist_ok=True)
        for name in HAND_WRITTEN:  # "hand/<corpus>": that corpus' tune questions, never a held-out one
            corpus = name.split("/", 1)[1]
            queries = [q.to_json() for q in load_dataset(corpus) if q.split == "tune"]
            count = dump_repo(Path(fetch(corpus)), queries, a.data / "dump" / (name.replace("/", "+") + ".json.gz"))
            print(f"{name}: {count} queries", file=sys.stderr)
        return 0
    if a.cmd == "heldout":
        records = [rec for repo in repos if HISTORY_REPOS[repo][2] == HELDOUT
                   for path in (queries_file(a.data, repo), queries_file(a.data, repo, TESTS_SOURCE)) if path.is_file()
                   for rec in _records(path)]
        _write_jsonl(a.data / "heldout.jsonl", records)
        print(f"wrote {len(records)} queries to {a.data / 'heldout.jsonl'}", file=sys.stderr)
        return 0
    (a.data / "dump").mkdir(exist_ok=True)
    for n, repo in enumerate(repos, 1):
        for path in queries_files(a.data, repo):
            out = a.data / "dump" / path.name.replace(".jsonl", ".json.gz")
            if out.is_file():
                continue
            t0 = time.perf_counter()
            count = dump_repo(snapshot_folder(root, repo), list(_records(path)), out, a.depth)
            print(f"[{n}/{len(repos)}] {path.stem}: {count} queries in {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
