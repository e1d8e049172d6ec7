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

import ast
from collections import defaultdict
from pathlib import Path

from coderag.eval import generated
from coderag.eval.generated import parsed_files, spread
from coderag.eval.metrics import Span
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
    for rel, tree in parsed_files(root):
        in_tests = file_role(rel, "python") == TESTS
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
    return spread(found, limit)


def main() -> None:
    generated.main(__doc__, "usage queries",
                   lambda root, args: [(args.ask.format(name), gold)
                                       for name, gold in usage_queries(root, args.limit, tests=args.tests)],
                   limit=80, ask="who calls {}",
                   flags=[("--tests", 'the callers are the tests (ask e.g. "where is {} tested")')])


if __name__ == "__main__":
    main()
