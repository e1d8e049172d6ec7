"""(change description, changed code) pairs from the mined queries: the second kind of data
eval/train_embedder.py fine-tunes the embedding model on, beside the doc comments of eval/doc_pairs.py.

A doc comment says what a definition is; a commit message says what was changed in it, in the words a developer
uses for a task ("handle a missing config file", "retry on a closed connection"). Each mined query (eval/history.py:
a commit's message, or the description of a test it added) gives one pair, read against its repository's indexed
snapshot:

- the query is the mined text, as the search would get it (the model's window cuts a long body);
- the code is the file's path and the smallest definition that holds the changed lines, its first CODE_LINES lines,
  or CODE_LINES lines from a little above the change where the change is past them or outside any definition. Of a
  commit's changed ranges, the widest inside a definition is taken: one place per pair, as one chunk answers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from coderag.eval.doc_pairs import CODE_LINES, DocPair, wrapped
from coderag.nodes.languages import GRAMMARS, detect_language

LEAD_LINES = 8  # lines kept above a change cut out of a long definition: its signature or the loop it sits in


def _enclosing_definition(root, start: int, end: int, grammar) -> Optional[Tuple[int, int]]:
    """(first, last) 0-based rows of the smallest definition node holding rows start..end, with the export or
    decorator that wraps it."""
    best = None
    node = root
    while node is not None:
        inner = None
        for child in node.named_children:
            if child.start_point[0] <= start and child.end_point[0] >= end:
                inner = child
                break
        if inner is None:
            break
        if inner.type in grammar.definitions:
            best = inner
        node = inner
    if best is None:
        return None
    outer = wrapped(best, grammar)
    return outer.start_point[0], outer.end_point[0]


def change_code(lines: List[str], rel: str, ranges: Sequence[Tuple[int, int]], tree, language: str) -> str:
    """The code of one pair: `rel`, then the lines of the range chosen among `ranges` (1-based, inclusive)."""
    spans = []
    for start, end in ranges:
        found = _enclosing_definition(tree.root_node, start - 1, end - 1, GRAMMARS[language])
        spans.append((found is not None, end - start, start, end, found))
    _, _, start, end, found = max(spans, key=lambda s: (s[0], s[1], -s[2]))  # inside one, widest, first
    if found is not None and start - 1 - found[0] < CODE_LINES - (end - start) - 1:
        first = found[0]
        last = min(found[1], first + CODE_LINES - 1)
    else:
        first = max(found[0] if found else 0, start - 1 - LEAD_LINES)
        last = min(len(lines) - 1, found[1] if found else len(lines), first + CODE_LINES - 1)
    return rel + "\n" + "\n".join(lines[first:last + 1])


def change_pairs(mined: Path, snapshot: Path, most: int, seed: int = 0) -> List[DocPair]:
    """Up to `most` pairs of the mined queries file `mined`, read against the repository's `snapshot`, drawn at
    random (by `seed`). A query whose gold file is gone from the snapshot or is not code is skipped."""
    from tree_sitter_language_pack import get_parser

    from coderag.eval.datasets import file_lines

    records = [json.loads(line) for line in mined.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(records)
    parsers: Dict[str, object] = {}
    files: Dict[str, Tuple[List[str], object]] = {}
    out: List[DocPair] = []
    for rec in records:
        if len(out) >= most:
            break
        by_file: Dict[str, List[Tuple[int, int]]] = {}
        for g in rec["gold"]:
            by_file.setdefault(g["file_path"], []).append((g.get("start_line") or 1, g.get("end_line") or 0))
        rel = max(by_file, key=lambda f: sum(e - s + 1 for s, e in by_file[f]))  # the file most of it changed
        language = detect_language(rel)
        source = snapshot / rel
        if language not in GRAMMARS or not source.is_file():
            continue
        if rel not in files:
            lines = file_lines(source)
            if language not in parsers:
                parsers[language] = get_parser(language)
            files[rel] = (lines, parsers[language].parse("\n".join(lines).encode("utf-8")))
        lines, tree = files[rel]
        ranges = [(s, e if e else len(lines)) for s, e in by_file[rel]]
        out.append(DocPair(rec["query"], change_code(lines, rel, ranges, tree, language), rel))
    return out
