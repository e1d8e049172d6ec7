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

import ast
import re
from pathlib import Path

from coderag.eval import generated
from coderag.eval.generated import parsed_files, spread_unique
from coderag.eval.metrics import Span

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
    for rel, tree in parsed_files(root, skip_tests=True):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            msg = message_of(node.exc.args[0])
            if msg and FILL in msg and len(msg.split()) >= 4:
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "Error")
                found.append((f"{name}: {' '.join(msg.split())}", Span(rel, node.lineno, node.end_lineno or node.lineno)))
    return spread_unique(found, limit)  # a message raised in two places has two answers


def main() -> None:
    generated.main(__doc__, "pasted-error queries",
                   lambda root, args: [(query, [gold]) for query, gold in error_queries(root, args.limit)], limit=60)


if __name__ == "__main__":
    main()
