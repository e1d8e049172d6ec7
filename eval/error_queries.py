"""Pasted-error queries made from any indexed Python repository: held out by construction.

Not a test: it prints numbers. An agent pastes the error it got ("ValueError: 'x' is not a valid color")
and asks where it comes from. This makes one query per `raise SomeError(<message>)` of the tree (outside
tests) whose message is a template with a placeholder and four words or more: a string, an f-string,
`"...".format(...)`, `"..." % ...` or `_("...")`, its placeholders filled with 'foo' and the exception's
name in front, as a traceback prints it. Its gold is the raise statement's lines. Scored as
eval/docstring_queries.py scores its queries: `full` and each leg alone, at the default budget.

Usage::

    coderag index PATH                      # the repository must be indexed (with vectors)
    python eval/error_queries.py PATH [--limit 60] [--set retrieval.KEY=VALUE]
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from coderag.config import load_settings
from coderag.eval.docstring_queries import report
from coderag.eval.metrics import Span
from coderag.eval.runner import apply_overrides, parse_overrides
from coderag.nodes.file_roles import TESTS, file_role

FILL = "'foo'"
_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")
_PRINTF = re.compile(r"%(?:\([^)]*\))?[sdrfi]")


def message_of(node: ast.AST) -> str | None:
    """The text a message expression prints, its placeholders filled with FILL; None if it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else FILL for v in node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        base = message_of(node.func.value)
        return _FORMAT_FIELD.sub(FILL, base) if base else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "gettext") and node.args:
        return message_of(node.args[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        base = message_of(node.left)
        return _PRINTF.sub(FILL, base) if base else None
    return None


def error_queries(root: Path, limit: int) -> list[tuple[str, Span]]:
    """("ErrorName: message", the raise statement's span) for up to `limit` raises, spread over the tree."""
    found: list[tuple[str, Span]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/." in "/" + rel or file_role(rel, "python") == TESTS:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            msg = message_of(node.exc.args[0])
            if msg and FILL in msg and len(msg.split()) >= 4:
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "Error")
                found.append((f"{name}: {' '.join(msg.split())}", Span(rel, node.lineno, node.end_lineno or node.lineno)))
    counts: dict[str, int] = {}
    for query, _ in found:
        counts[query] = counts.get(query, 0) + 1
    unique = [q for q in found if counts[q[0]] == 1]  # a message raised in two places has two answers
    return unique[::max(1, len(unique) // limit)][:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--set", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="a retrieval setting for every variant (repeatable)")
    args = ap.parse_args()
    root = args.root.resolve()
    queries = error_queries(root, args.limit)
    print(f"{root}: {len(queries)} pasted-error queries")
    report(root, apply_overrides(load_settings(root), parse_overrides(args.set)),
           [(query, [gold]) for query, gold in queries])


if __name__ == "__main__":
    main()
