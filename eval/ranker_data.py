"""The learned ranker's data: snapshots of the mined repositories, their labelled queries, and each query's
candidates as the legs return them, dumped once per repository.

Four steps, each a subcommand, each resumable (a finished repository is skipped):

1. ``snapshots``: each repository of eval/history_repos.py at its pinned commit, from bare git directories with
   full history (``<mirror>/<owner>+<name>/repo``), written to ``<out>/<owner>+<name>@<commit>``.
2. ``index``: ``coderag index`` of every snapshot (vectors and all; the slow step: minutes per repository).
3. ``queries``: the commit queries of eval/history.py, and docstring queries from the index (the first
   sentence of a definition's leading doc comment or docstring, DOCSTRING_LIMIT per repository), as dataset
   records (eval/datasets.py) in ``<data>/queries/<owner>+<name>.jsonl``, with queries that name code
   (a definition by its name in three spellings, a name's callers, its tests: NAME_LIMIT, USAGE_LIMIT); and
   in ``<owner>+<name>.tests.jsonl`` the descriptions of the tests those commits added (eval/history.py's
   TEST queries: a source mined in a pass of its own, so the main file is not made again); ``heldout``
   joins those of the held-out repositories in ``<data>/heldout.jsonl``, a dataset ``coderag eval
   --dataset`` reads; ``hand`` dumps the legs of the eval's tune-split questions, which train-ranker
   scores as a check it never trains on (indexed by ``coderag eval`` first); ``tested`` writes "where is X
   tested" queries of the indexed held-out snapshots, an eval set (``tested_queries``).
4. ``dump``: each query's candidates from each leg, at DUMP_DEPTH, with the nodes they name, in
   ``<data>/dump/<owner>+<name>[.<source>].json.gz``, one per queries file. Features are computed from a
   dump (eval/train_ranker.py) by the same function the search runs (pipelines/features.py), so they can
   change without searching again.

Usage::

    python -m coderag.eval.ranker_data snapshots --mirror /work/.mirror --out $CODERAG_HISTORY_DIR
    python -m coderag.eval.ranker_data index
    python -m coderag.eval.ranker_data queries --data /work/rank --mirror /work/.mirror
    python -m coderag.eval.ranker_data dump --data /work/rank
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator

from coderag.base.paths import INDEX_DIR_NAME
from coderag.eval.history import DEFAULT_YEARS, TEST, make_snapshot, mine
from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS
from coderag.eval.legs import DUMPED_METADATA, dump_settings
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name
from coderag.nodes.lexical import IDENTIFIER_PARTS

DUMP_DEPTH = 50  # deeper than the search's legs go, so a deeper setting can be tried on the same dump
DOCSTRING_LIMIT = 200  # per repository: enough to teach what a docstring query looks like, not to outweigh commits
DOC_MIN_WORDS = 6
_DEFINITION_KINDS = frozenset({"function", "method", "class", "struct", "trait", "interface", "enum", "impl",
                               "type", "macro", "module"})
_PY_DOCSTRING = re.compile(r"^[^\n]*\b(?:def|class)\b[^\n]*(?:\n[^\n]*)*?:\s*\n\s*[rRuUbB]?(\"\"\"|''')(.*?)\1", re.S)
_DOC_MARKER = re.compile(r"^\s*(?:///?!?|/\*\*?|\*/?|#!?|--)\s?")
_SENTENCE = re.compile(r"(.+?[.!?])(\s|$)")
_NOT_PROSE = re.compile(r"^\s*(?:@|\\|copyright|license|spdx|todo|fixme|xxx|noinspection|eslint|nolint|type:)", re.I)


def snapshot_folder(root: Path, repo: str) -> Path:
    return root / snapshot_name(repo, HISTORY_REPOS[repo][0])


def doc_sentence(text: str, language: str) -> str:
    """The first sentence of a definition's docstring (Python) or of the comment block it starts with, if it
    has DOC_MIN_WORDS words and reads as prose; else "".

    >>> doc_sentence('def f(x):\\n    \"\"\"Return the parsed header line, or None.\\n\\n    More.\"\"\"', "python")
    'Return the parsed header line, or None.'
    >>> doc_sentence("/// Splits a path into its parts, dropping empty ones.\\nfn split() {}", "rust")
    'Splits a path into its parts, dropping empty ones.'
    """
    if language == "python":
        m = _PY_DOCSTRING.match(text)
        doc = m.group(2) if m else ""
    else:
        lines = []
        for line in text.splitlines():
            if not _DOC_MARKER.match(line):
                break
            lines.append(_DOC_MARKER.sub("", line).strip().rstrip("*/").strip())
        doc = "\n".join(lines)
    first = " ".join(doc.strip().split("\n\n")[0].split())
    if not first or _NOT_PROSE.match(first):
        return ""
    m = _SENTENCE.match(first)
    sentence = m.group(1) if m else first
    return sentence if len(sentence.split()) >= DOC_MIN_WORDS and "<" not in sentence[:1] else ""


def docstring_queries(root: Path, repo: str, split: str, limit: int = DOCSTRING_LIMIT) -> list[dict[str, Any]]:
    """Docstring queries of an indexed snapshot: one per definition whose sentence no other definition has,
    spread evenly over the definitions found (every n-th), at most `limit`."""
    from coderag.pipelines.code_index import CodeIndex

    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with CodeIndex.open(root, create=False) as index:
        for node in index.docstore.docs.values():
            m = node.metadata
            if m.get("kind") not in _DEFINITION_KINDS or m.get("is_leaf") is False:
                continue
            sentence = doc_sentence(node.get_content(), m.get("language", ""))
            if sentence:
                found[sentence.lower()].append({"file_path": m["file_path"], "start_line": int(m["start_line"]),
                                                "end_line": int(m["end_line"]), "sentence": sentence})
    unique = sorted((v[0] for v in found.values() if len(v) == 1), key=lambda g: (g["file_path"], g["start_line"]))
    step = max(1, len(unique) // limit) if unique else 1
    out = []
    for g in unique[::step][:limit]:
        gold = {k: g[k] for k in ("file_path", "start_line", "end_line")}
        out.append({"id": f"history-{repo}:doc:{g['file_path']}:{g['start_line']}", "corpus": "history",
                    "query": g["sentence"], "gold": [gold], "kind": "docstring", "split": split, "repo": repo,
                    "commit": HISTORY_REPOS[repo][0]})
    return out


TESTS_SOURCE = "tests"  # <repo>.tests.jsonl: the descriptions of the tests commits added (eval/history.py)


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


NAME_LIMIT = 60  # definitions asked for by name, per repository
USAGE_LIMIT = 25  # names asked for their callers or their tests, per repository
TESTED_LIMIT = 40  # names asked for their tests by tested_queries, per repository


def spellings(name: str) -> list[str]:
    """A name as written, in the other convention, and as plain words (what a developer types).

    >>> spellings("parse_retry_after"), spellings("getUserById")
    (['parse_retry_after', 'parseRetryAfter', 'parse retry after'], ['getUserById', 'get_user_by_id', 'get user by id'])
    """
    parts = [p.lower() for p in IDENTIFIER_PARTS.findall(name)]
    other = (parts[0] + "".join(p.title() for p in parts[1:])) if "_" in name else "_".join(parts)
    return [name, other, " ".join(parts)]


def name_queries(root: Path, repo: str, split: str) -> list[dict[str, Any]]:
    """Queries that name code: a definition by its name (as written, in the other convention, as words, or
    "where is X defined"), gold its definition; "who calls X" / "where is X used", gold the chunks that use
    it; "where is X tested", gold the tests that use it. Names defined once in the snapshot, spread evenly."""
    from coderag.nodes.file_roles import TESTS, file_role
    from coderag.queries.names import is_code_name, uses_name
    from coderag.queries.symbols import bare_symbol, chunk_defines
    from coderag.pipelines.code_index import CodeIndex

    sha = HISTORY_REPOS[repo][0]

    def record(kind_id: str, query: str, gold: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": f"history-{repo}:{kind_id}", "corpus": "history", "query": query, "gold": gold, "kind": "identifier",
                "split": split, "repo": repo, "commit": sha}

    with CodeIndex.open(root, create=False) as index:
        leaves = [n for n in index.docstore.docs.values() if n.metadata.get("is_leaf") is not False
                  and n.metadata.get("file_path")]
    defs: dict[str, list] = defaultdict(list)
    for n in leaves:  # names of the source: a question names the code it asks about, rarely a test
        if (n.metadata.get("kind") in _DEFINITION_KINDS and n.metadata.get("symbol")
                and file_role(n.metadata["file_path"], n.metadata.get("language", "")) != TESTS):
            name = bare_symbol(n.metadata["symbol"]).split(".")[-1].split("::")[-1]
            if len(name) >= 4 and is_code_name(name):
                defs[name].append(n)
    once = sorted((name, ns[0]) for name, ns in defs.items() if len(ns) == 1)
    step = max(1, len(once) // NAME_LIMIT)
    out = []
    for i, (name, n) in enumerate(once[::step][:NAME_LIMIT]):
        m = n.metadata
        gold = [{"file_path": m["file_path"], "start_line": int(m["start_line"]), "end_line": int(m["end_line"])}]
        forms = spellings(name) + [f"where is {name} defined"]
        out.append(record(f"name:{name}", forms[i % len(forms)], gold))
    usage_step = max(1, len(once) // (USAGE_LIMIT * 2))
    asked = 0
    for i, (name, n) in enumerate(once[::usage_step]):
        if asked >= USAGE_LIMIT:
            break
        users = [u for u in leaves if name in u.get_content() and not chunk_defines(u.metadata, name)
                 and uses_name(u.get_content(), name)]
        tests = [u for u in users if file_role(u.metadata["file_path"], u.metadata.get("language", "")) == TESTS]
        wanted, query = ((tests, f"where is {name} tested") if i % 3 == 2 and tests
                         else (users, ("who calls {}", "where is {} used")[i % 2].format(name)))
        if not wanted or len(wanted) > 10:
            continue  # unused, or used everywhere: no answer to rank
        gold = [{"file_path": u.metadata["file_path"], "start_line": int(u.metadata["start_line"]),
                 "end_line": int(u.metadata["end_line"])} for u in wanted]
        out.append(record(f"use:{name}", query, gold))
        asked += 1
    return out


def tested_queries(root: Path, repo: str, sha: str, split: str, limit: int = TESTED_LIMIT,
                   seed: int = 11) -> list[dict[str, Any]]:
    """"where is X tested" for up to `limit` source definitions that are defined once and used by one to ten
    test chunks (the gold), drawn by a seeded generator from the indexed snapshot at `root`. A query that asks
    for tests wants the tests, which no change description's gold is: `name_queries` asks it of a third of its
    usage names only, and no held-out set asked it at all (eval/RESULTS.md, "queries that ask for tests")."""
    import random

    from coderag.nodes.code_splitter import MERGED_KIND
    from coderag.nodes.file_roles import TESTS, file_role
    from coderag.pipelines.code_index import CodeIndex
    from coderag.queries.names import is_code_name, uses_name
    from coderag.queries.symbols import bare_symbol, chunk_symbols

    with CodeIndex.open(root, create=False) as index:
        leaves = [n for n in index.docstore.docs.values() if n.metadata.get("is_leaf") is not False
                  and n.metadata.get("file_path")]
    tests = [n for n in leaves if file_role(n.metadata["file_path"], n.metadata.get("language", "")) == TESTS]
    test_ids = {n.node_id for n in tests}
    defined: dict[str, int] = defaultdict(int)
    for n in leaves:  # a merged leaf of small definitions lists each of them
        if n.metadata.get("kind") in _DEFINITION_KINDS | {MERGED_KIND} and n.node_id not in test_ids:
            for symbol in chunk_symbols(n.metadata):
                name = bare_symbol(symbol).split(".")[-1].split("::")[-1]
                if len(name) >= 6 and is_code_name(name):  # shorter names are words tests use for other things
                    defined[name] += 1
    names = sorted(name for name, count in defined.items() if count == 1)
    random.Random(seed).shuffle(names)
    out: list[dict[str, Any]] = []
    for name in names:
        if len(out) >= limit:
            break
        users = [u for u in tests if name in u.get_content() and uses_name(u.get_content(), name)]
        if not 1 <= len(users) <= 10:
            continue  # untested, or used by every test: no answer to rank
        gold = [{"file_path": u.metadata["file_path"], "start_line": int(u.metadata["start_line"]),
                 "end_line": int(u.metadata["end_line"])} for u in users]
        out.append({"id": f"history-{repo}:tested:{name}", "corpus": "history", "query": f"where is {name} tested",
                    "gold": gold, "kind": "identifier", "split": split, "repo": repo, "commit": sha})
    return out


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
            found = tested_queries(folder, repo, HISTORY_REPOS[repo][0], HELDOUT)
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
