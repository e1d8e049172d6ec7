"""Constant-name queries made from any indexed Python repository: held out by construction.

Not a test: it prints numbers. An agent asks for a constant by its name ("DEFAULT_STYLES", "where is
MAX_RETRIES defined") as often as for a function, and the labelled datasets' identifier queries name only
functions and classes. This makes one query per module-level UPPER_CASE constant that one file of the tree
assigns (`NAME = ...` or `NAME: T = ...`, no other file assigning it), its gold the assignment's lines.
Scored as eval/docstring_queries.py scores its queries: `full` and each leg alone, at the default budget.

Usage::

    coderag index PATH                      # the repository must be indexed (with vectors)
    python eval/constant_queries.py PATH [--limit 150] [--ask "where is {} defined"] [--set retrieval.KEY=VALUE]
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from coderag.config import load_settings
from coderag.eval.metrics import Span
from coderag.eval.runner import apply_overrides, parse_overrides
from coderag.eval.docstring_queries import report

_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")


def constant_queries(root: Path, limit: int) -> list[tuple[str, Span]]:
    """(name, the assignment's span) of up to `limit` module-level constants, spread evenly over the tree."""
    found: dict[str, list[Span]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/." in "/" + rel:
            continue  # .coderag/, .git/
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and _CONSTANT.match(target.id) and len(target.id) > 2:
                    found.setdefault(target.id, []).append(Span(rel, node.lineno, node.end_lineno or node.lineno))
    # A name assigned in two files has two answers; one file assigning it twice (a platform switch) has one.
    unique = [(name, spans[0]) for name, spans in found.items() if len({s.file_path for s in spans}) == 1]
    return unique[::max(1, len(unique) // limit)][:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--ask", default="{}", metavar="TEMPLATE",
                    help='how the query asks for the name, e.g. "where is {} defined" (default: the name alone)')
    ap.add_argument("--set", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="a retrieval setting for every variant (repeatable)")
    args = ap.parse_args()
    root = args.root.resolve()
    queries = constant_queries(root, args.limit)
    print(f"{root}: {len(queries)} constant-name queries, asked as {args.ask!r}")
    report(root, apply_overrides(load_settings(root), parse_overrides(args.set)),
           [(args.ask.format(name), [gold]) for name, gold in queries])


if __name__ == "__main__":
    main()
