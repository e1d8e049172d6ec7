"""Docstring-sentence queries made from any indexed Python repository: held out by construction.

Not a test: it prints numbers. The labelled datasets hold 40 docstring queries, all answered first by
every variant, so they cannot show what a change does to this kind. This makes as many as wanted from a
repository no dataset uses: each query is the first sentence of a function's or class's docstring (six
words or more, found in no other docstring of the tree), its gold the definition's lines, decorators
included. It is the "docstring sentences" kind of issue 15's outside benchmark: an agent pasting a line it
read. Scored through `CodeIndex.search` at the default budget: `full`, and each leg alone (`bm25`,
`dense`: no auto-merge, no merging), with the settings as they are and with the `--set` overrides.

Usage::

    coderag index PATH                      # the repository must be indexed (with vectors)
    python eval/docstring_queries.py PATH [--limit 150] [--set retrieval.phrase_boost=0]
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from coderag.config import load_settings
from coderag.eval.metrics import Result, Span, score_ranking
from coderag.eval.runner import apply_overrides, parse_overrides
from coderag.pipelines.code_index import CodeIndex

MIN_WORDS = 6
METRICS = ("recall@1", "mrr@10", "hit@1", "line_hit@5")
_SENTENCE = re.compile(r"(.+?[.!?])(\s|$)")


def docstring_queries(root: Path, limit: int) -> list[tuple[str, Span]]:
    """(first sentence, the definition's span) for up to `limit` definitions, spread evenly over the tree."""
    found: list[tuple[str, Span]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/." in "/" + rel:
            continue  # .coderag/, .git/
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            first = " ".join(doc.split("\n\n")[0].split())
            m = _SENTENCE.match(first)
            sentence = m.group(1) if m else first
            if len(sentence.split()) >= MIN_WORDS:
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                found.append((sentence, Span(rel, start, node.end_lineno or node.lineno)))
    seen: dict[str, int] = {}
    for sentence, _ in found:
        seen[sentence.lower()] = seen.get(sentence.lower(), 0) + 1
    unique = [q for q in found if seen[q[0].lower()] == 1]  # a sentence of two docstrings has two answers
    return unique[::max(1, len(unique) // limit)][:limit]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--set", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="a retrieval setting for every variant (repeatable)")
    args = ap.parse_args()
    root = args.root.resolve()
    queries = docstring_queries(root, args.limit)
    print(f"{root}: {len(queries)} docstring-sentence queries")
    report(root, apply_overrides(load_settings(root), parse_overrides(args.set)),
           [(sentence, [gold]) for sentence, gold in queries])


if __name__ == "__main__":
    main()
