"""(doc comment, definition) pairs from a repository snapshot: what eval/train_embedder.py fine-tunes the
embedding model on.

A code embedder learns to read a question about code from definitions and the sentences their authors wrote
about them; the training repositories hold such pairs by the thousand, and we wrote none of them. A pair is a
source definition (a node type of `nodes/languages.GRAMMARS`, three lines or more, in a file an index would
read, outside tests, docs and examples) with its Python docstring or the comment just above it:

- the query is the comment's first paragraph, cut where its tags or examples start (`@param`, `Args:`, `>>>`),
  and kept when it has 5 to 80 words;
- the code is the file's path and the definition's first 60 lines (with its decorators or `export`), a
  Python docstring taken out (else the model learns to match a sentence to itself).

Examples:
    >>> first_paragraph('''/**
    ...  * Find a flag subcommand by its long flag or an alias.
    ...  *
    ...  * @param long the flag
    ...  */''')
    'Find a flag subcommand by its long flag or an alias.'
    >>> first_paragraph("# Too short.")
    ''
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

from coderag.nodes.file_roles import SOURCE, file_role
from coderag.nodes.languages import GRAMMARS, detect_language

MIN_WORDS, MAX_WORDS = 5, 80
MIN_LINES = 3  # a one- or two-line definition says little the comment does not
CODE_LINES = 60  # past the model's training window (128 tokens) anyway
MAX_FILE_BYTES = 400_000  # generated tables and amalgamations
_MARKERS = re.compile(r"^\s*(/\*\*?|\*/|\*|///?|//!|#)\s?")
_STOPS = ("@", ":param", ":return", ":raises", "Args:", "Returns:", "Raises:", "#", "```", ">>>", "- ", "Example")
_QUOTES = re.compile(r'^[rRbBuUfF]*("""|\'\'\'|"|\')|("""|\'\'\'|"|\')$')  # a Python string's prefix and quotes


@dataclass(frozen=True)
class DocPair:
    query: str
    code: str
    path: str


def first_paragraph(comment: str) -> str:
    """The comment's first paragraph as one line of words, without comment markers; '' when it is not
    MIN_WORDS to MAX_WORDS words of prose."""
    words: List[str] = []
    for line in comment.splitlines():
        text = re.sub(r"\*/\s*$", "", _MARKERS.sub("", line)).strip()
        if not text:
            if words:
                break
            continue
        if text.startswith(_STOPS):
            break
        words.append(text)
    query = " ".join(words)
    return query if MIN_WORDS <= len(query.split()) <= MAX_WORDS and re.search(r"[A-Za-z]{3}", query) else ""


def wrapped(node, grammar):
    """The definition `node` with the export, decorator or template that wraps it, where one does."""
    return node.parent if node.parent is not None and node.parent.type in grammar.wrappers else node


def _python_docstring(node) -> Optional[object]:
    """The string that opens a Python definition's body (the grammar gives it bare or in a statement)."""
    body = node.child_by_field_name("body")
    if body is None or not body.named_children:
        return None
    first = body.named_children[0]
    if first.type == "expression_statement" and first.named_children:
        first = first.named_children[0]
    return first if first.type == "string" else None


def _leading_comment(node, src: bytes) -> str:
    """The comments that end on the line just above `node` (or above the export or decorator wrapping it)."""
    prev = node.prev_named_sibling
    texts: List[str] = []
    line = node.start_point[0]
    while prev is not None and prev.type.endswith("comment") and prev.end_point[0] >= line - 1:
        texts.insert(0, src[prev.start_byte:prev.end_byte].decode("utf-8", "replace"))
        line, prev = prev.start_point[0], prev.prev_named_sibling
    return "\n".join(texts)


def pairs_in_file(src: bytes, rel: str, language: str, parser) -> Iterator[DocPair]:
    """The pairs of one file's `src`, parsed by `parser` (tree-sitter's, for `language`)."""
    grammar = GRAMMARS[language]
    stack = [parser.parse(src).root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.named_children)
        if node.type not in grammar.definitions or node.end_point[0] - node.start_point[0] < MIN_LINES - 1:
            continue
        outer = wrapped(node, grammar)
        if language == "python":
            doc = _python_docstring(node)
            if doc is None:
                continue
            query = first_paragraph(_QUOTES.sub("", src[doc.start_byte:doc.end_byte].decode("utf-8", "replace")))
            code = (src[outer.start_byte:doc.start_byte] + src[doc.end_byte:node.end_byte]).decode("utf-8", "replace")
        else:
            query = first_paragraph(_leading_comment(outer, src))
            code = src[outer.start_byte:node.end_byte].decode("utf-8", "replace")
        if query:
            yield DocPair(query, rel + "\n" + "\n".join(code.splitlines()[:CODE_LINES]), rel)


def doc_pairs(root: Path, most: int, seed: int = 0) -> List[DocPair]:
    """Up to `most` pairs of the snapshot at `root`, drawn at random (by `seed`) from all of them."""
    from tree_sitter_language_pack import get_parser

    from coderag.nodes.ignore import IgnoreMatcher
    from coderag.nodes.scan import SkipLog, read_text_file, walk

    parsers: dict = {}
    pairs: List[DocPair] = []
    skips = SkipLog()  # what the index would leave out, and why; a snapshot's odd file costs a few pairs, not the run
    for entry in walk(root, IgnoreMatcher(root), skips):  # the files an index of `root` would read, read as it does
        rel = entry.rel_path
        language = detect_language(rel)
        if language not in GRAMMARS or file_role(rel, language) != SOURCE:
            continue
        read = read_text_file(entry, skips, hard_max_bytes=MAX_FILE_BYTES)
        if read is None:
            continue
        if language not in parsers:
            parsers[language] = get_parser(language)
        pairs.extend(pairs_in_file(read.text.encode("utf-8"), rel, language, parsers[language]))
    random.Random(seed).shuffle(pairs)
    return pairs[:most]
