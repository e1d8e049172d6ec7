"""Docstring-sentence queries made from any indexed Python repository: held out by construction.

Not a test: it prints numbers. The labelled datasets hold 40 docstring queries, all answered first by
every variant, so they cannot show what a change does to this kind. This makes as many as wanted from a
repository no dataset uses: each query is the first sentence of a function's or class's docstring (six
words or more, found in no other docstring of the tree), its gold the definition's lines, decorators
included. Tests are left out: a test's docstring states the behaviour it checks, and asked in its words
the answer is the code that has it, not the test (as for the ranker's training queries, index_queries.py).
It is the "docstring sentences" kind of issue 15's outside benchmark: an agent pasting a line it read.
Scored through `CodeIndex.search` at the default budget: `full`, and each leg alone (`bm25`, `dense`: no
auto-merge, no merging), with the settings as they are and with the `--set` overrides.

Usage::

    coderag index PATH                      # the repository must be indexed (with vectors)
    python eval/docstring_queries.py PATH [--limit 150] [--set retrieval.phrase_boost=0]
"""

from __future__ import annotations

import ast
from pathlib import Path

from coderag.eval import generated
from coderag.eval.generated import parsed_files, spread_unique
from coderag.eval.index_queries import DOC_MIN_WORDS, first_sentence
from coderag.eval.metrics import Span


def docstring_queries(root: Path, limit: int) -> list[tuple[str, Span]]:
    """(first sentence, the definition's span) for up to `limit` definitions, spread evenly over the tree."""
    found: list[tuple[str, Span]] = []
    for rel, tree in parsed_files(root, skip_tests=True):
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            sentence = first_sentence(doc)
            if len(sentence.split()) >= DOC_MIN_WORDS:
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                found.append((sentence, Span(rel, start, node.end_lineno or node.lineno)))
    return spread_unique(found, limit, key=str.lower)  # a sentence of two docstrings has two answers


def main() -> None:
    generated.main(__doc__, "docstring-sentence queries",
                   lambda root, args: [(s, [gold]) for s, gold in docstring_queries(root, args.limit)], limit=150)


if __name__ == "__main__":
    main()
