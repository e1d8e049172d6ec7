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

import ast
import re
from pathlib import Path

from coderag.eval import generated
from coderag.eval.generated import parsed_files, spread
from coderag.eval.metrics import Span

_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")


def constant_queries(root: Path, limit: int) -> list[tuple[str, Span]]:
    """(name, the assignment's span) of up to `limit` module-level constants, spread evenly over the tree."""
    found: dict[str, list[Span]] = {}
    for rel, tree in parsed_files(root):
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and _CONSTANT.match(target.id) and len(target.id) > 2:
                    found.setdefault(target.id, []).append(Span(rel, node.lineno, node.end_lineno or node.lineno))
    # A name assigned in two files has two answers; one file assigning it twice (a platform switch) has one.
    unique = [(name, spans[0]) for name, spans in found.items() if len({s.file_path for s in spans}) == 1]
    return spread(unique, limit)


def main() -> None:
    generated.main(__doc__, "constant-name queries",
                   lambda root, args: [(args.ask.format(name), [gold]) for name, gold in constant_queries(root, args.limit)],
                   limit=150, ask="{}")


if __name__ == "__main__":
    main()
