"""What the query generators share (eval/docstring_queries.py, constant_queries.py, usage_queries.py and
error_queries.py): the parsed Python files of a tree, an even spread of the queries found, and the command
line that scores them through `CodeIndex.search`, for `full` and each leg alone, at the default budget.

Queries made from a tree no dataset uses are held out by construction: nothing was tuned on them.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from coderag.base.config import load_settings
from coderag.eval.metrics import Result, Span, score_ranking
from coderag.eval.runner import apply_overrides, parse_overrides
from coderag.nodes.file_roles import TESTS, file_role
from coderag.pipelines.code_index import CodeIndex

METRICS = ("recall@1", "mrr@10", "hit@1", "line_hit@5")
T = TypeVar("T")


def parsed_files(root: Path, skip_tests: bool = False) -> Iterator[tuple[str, ast.Module]]:
    """(repository path, module) of each Python file of `root` that parses; not .coderag/ or .git/, and not
    the tests with `skip_tests`."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/." in "/" + rel or (skip_tests and file_role(rel, "python") == TESTS):
            continue
        try:
            yield rel, ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue


def spread(found: Sequence[T], limit: int) -> list[T]:
    """At most `limit` of `found`, taken evenly over it (over the tree, when it is in file order)."""
    return list(found[::max(1, len(found) // limit)][:limit])


def spread_unique(found: Sequence[tuple[str, Span]], limit: int, key: Callable[[str], str] = str) -> list[tuple[str, Span]]:
    """`spread` over the (query, gold) pairs whose query (by `key`) no other pair asks: a query found in two
    places has two answers."""
    counts: dict[str, int] = {}
    for query, _ in found:
        counts[key(query)] = counts.get(key(query), 0) + 1
    return spread([q for q in found if counts[key(q[0])] == 1], limit)


def report(root: Path, settings, queries: list[tuple[str, list[Span]]]) -> None:
    """Print METRICS of `full` and of each leg alone (no auto-merge, no merging) over `queries`."""
    if not queries:
        print("no query to score")
        return
    variants = {"full": {}, "bm25": dict(retriever="bm25", auto_merge=False, merge_adjacent=False),
                "dense": dict(retriever="dense", auto_merge=False, merge_adjacent=False)}
    print(f"{'variant':8} " + " ".join(f"{m:>10}" for m in METRICS))
    with CodeIndex.open(root, settings=settings, create=False) as index:
        for name, options in variants.items():
            scores = []
            for query, gold in queries:
                res = index.search(query, **options)
                scores.append(score_ranking([Result.block(r.file_path, r.start_line, r.end_line) for r in res], gold))
            print(f"{name:8} " + " ".join(f"{sum(s[m] for s in scores) / len(scores):>10.3f}" for m in METRICS))


def main(doc: str, what: str, make: Callable[[Path, argparse.Namespace], list[tuple[str, list[Span]]]], *,
         limit: int, ask: str | None = None, flags: Sequence[tuple[str, str]] = ()) -> None:
    """The command line of a generator: `make(root, args)` gives the queries, scored by `report`. `ask`: the
    default of an --ask TEMPLATE option ("where is {} defined"); `flags`: (name, help) of boolean options."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--limit", type=int, default=limit)
    if ask is not None:
        ap.add_argument("--ask", default=ask, metavar="TEMPLATE",
                        help=f"how the query asks for the name, e.g. \"where is {{}} defined\" (default: {ask!r})")
    for flag, text in flags:
        ap.add_argument(flag, action="store_true", help=text)
    ap.add_argument("--set", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="a retrieval setting for every variant (repeatable)")
    args = ap.parse_args()
    root = args.root.resolve()
    queries = make(root, args)
    print(f"{root}: {len(queries)} {what}" + (f", asked as {args.ask!r}" if ask is not None else ""))
    report(root, apply_overrides(load_settings(root), parse_overrides(args.set)), queries)
