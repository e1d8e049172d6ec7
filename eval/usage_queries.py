"""'Who calls NAME' queries made from any indexed Python repository: held out by construction.

Not a test: it prints numbers. An agent asks where a function is used ("who calls parse_header", "where
is parse_header used") as often as where it is defined, and the labelled datasets hold no such query. This
makes one per function of the tree (outside tests) that one file defines and one to four functions call
(`name(...)` or `obj.name(...)`), its gold those callers' lines; with `--tests`, the callers are the tests'
functions ("where is NAME tested"). Scored as eval/docstring_queries.py scores its queries: `full` and
each leg alone, at the default budget.

Usage::

    coderag index PATH                      # the repository must be indexed (with vectors)
    python eval/usage_queries.py PATH [--limit 80] [--ask "where is {} used"] [--set retrieval.KEY=VALUE]
    python eval/usage_queries.py PATH --tests --ask "where is {} tested"
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

from coderag.config import load_settings
from coderag.eval.docstring_queries import report
from coderag.eval.metrics import Span
from coderag.eval.runner import apply_overrides, parse_overrides
from coderag.nodes.file_roles import TESTS, file_role

MAX_CALLERS = 4


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def usage_queries(root: Path, limit: int, tests: bool = False) -> list[tuple[str, list[Span]]]:
    """(function name, the spans of the functions that call it) for up to `limit` functions with a compound
    name (two words or more), spread evenly over the tree. `tests`: the callers are the tests' functions
    (file_role TESTS) instead of the source's."""
    defined_in: dict[str, set[str]] = defaultdict(set)
    callers: dict[str, set[Span]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/." in "/" + rel:
            continue  # .coderag/, .git/
        in_tests = file_role(rel, "python") == TESTS
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not in_tests:
                defined_in[fn.name].add(rel)
            if in_tests != tests:
                continue
            start = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
            for node in ast.walk(fn):
                name = _called_name(node) if isinstance(node, ast.Call) else None
                if name and name != fn.name:
                    callers[name].add(Span(rel, start, fn.end_lineno or fn.lineno))
    found = [(name, sorted(callers[name])) for name, files in defined_in.items()
             if len(files) == 1 and 1 <= len(callers[name]) <= MAX_CALLERS and "_" in name.strip("_")]
    return found[::max(1, len(found) // limit)][:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--ask", default="who calls {}", metavar="TEMPLATE",
                    help='how the query asks for the name\'s uses (default: "who calls {}")')
    ap.add_argument("--tests", action="store_true",
                    help='the callers are the tests (ask e.g. "where is {} tested")')
    ap.add_argument("--set", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="a retrieval setting for every variant (repeatable)")
    args = ap.parse_args()
    root = args.root.resolve()
    queries = usage_queries(root, args.limit, tests=args.tests)
    print(f"{root}: {len(queries)} usage queries, asked as {args.ask!r}")
    report(root, apply_overrides(load_settings(root), parse_overrides(args.set)),
           [(args.ask.format(name), gold) for name, gold in queries])


if __name__ == "__main__":
    main()
