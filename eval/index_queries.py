"""Queries mined from an indexed snapshot, with their gold: docstring sentences (gold, their definition),
names (a definition by its name, a name's callers, its tests) and "where is X tested". The ranker's data
(eval/ranker_data.py) is made of them beside the commit messages of eval/history.py.

Each reads the index's leaves (`indexed_leaves`) and asks only what the snapshot answers once: a sentence or a
name that one definition has.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from coderag.eval.history_repos import HISTORY_REPOS
from coderag.nodes.file_roles import TESTS, file_role
from coderag.nodes.lexical import IDENTIFIER_PARTS

DOCSTRING_LIMIT = 200  # per repository: enough to teach what a docstring query looks like, not to outweigh commits
DOC_MIN_WORDS = 6
_DEFINITION_KINDS = frozenset({"function", "method", "class", "struct", "trait", "interface", "enum", "impl",
                               "type", "macro", "module"})
_PY_DOCSTRING = re.compile(r"^[^\n]*\b(?:def|class)\b[^\n]*(?:\n[^\n]*)*?:\s*\n\s*[rRuUbB]?(\"\"\"|''')(.*?)\1", re.S)
_DOC_MARKER = re.compile(r"^\s*(?:///?!?|/\*\*?|\*/?|#!?|--)\s?")
_SENTENCE = re.compile(r"(.+?[.!?])(\s|$)")
_NOT_PROSE = re.compile(r"^\s*(?:@|\\|copyright|license|spdx|todo|fixme|xxx|noinspection|eslint|nolint|type:)", re.I)


def indexed_leaves(root: Path) -> list:
    """The leaf chunks of the index at `root` (an indexed snapshot), each with its file."""
    from coderag.pipelines.code_index import CodeIndex

    with CodeIndex.open(root, create=False) as index:
        return [n for n in index.docstore.docs.values() if n.metadata.get("is_leaf") is not False
                and n.metadata.get("file_path")]


def doc_sentence(text: str, language: str) -> str:
    """The first sentence of a definition's docstring (Python) or of the comment block it starts with, if it
    has DOC_MIN_WORDS words and reads as prose; else "".

    >>> doc_sentence('def f(x):\\n    \"\"\"Return the parsed header line, or None.\\n\\n    More.\"\"\"', "python")
    'Return the parsed header line, or None.'
    >>> doc_sentence("/// Splits a path into its parts, dropping empty ones.\\nfn split() {}", "rust")
    'Splits a path into its parts, dropping empty ones.'
    """
    if language == "python":
        m = _PY_DOCSTRING.match(text)
        doc = m.group(2) if m else ""
    else:
        lines = []
        for line in text.splitlines():
            if not _DOC_MARKER.match(line):
                break
            lines.append(_DOC_MARKER.sub("", line).strip().rstrip("*/").strip())
        doc = "\n".join(lines)
    sentence = first_sentence(doc)
    if not sentence or _NOT_PROSE.match(sentence):
        return ""
    return sentence if len(sentence.split()) >= DOC_MIN_WORDS and "<" not in sentence[:1] else ""


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, its spaces collapsed; the paragraph when no
    sentence ends in it.

    >>> first_sentence("Return the parsed   header.  Or None.\\n\\nMore."), first_sentence("Parse a header")
    ('Return the parsed header.', 'Parse a header')
    """
    first = " ".join(doc.strip().split("\n\n")[0].split())
    m = _SENTENCE.match(first)
    return m.group(1) if m else first


def docstring_queries(root: Path, repo: str, split: str, limit: int = DOCSTRING_LIMIT) -> list[dict[str, Any]]:
    """Docstring queries of an indexed snapshot: one per definition whose sentence no other definition has,
    spread evenly over the definitions found (every n-th), at most `limit`; none of a test's.

    A test's docstring states the behaviour it checks, and asked in those words the answer is the code that
    has the behaviour, not the test (pipelines/features.py `quote_counts`; the test descriptions of
    eval/history.py are such queries, their gold the code). Kept with the test as gold, they taught the ranker
    the opposite (eval/RESULTS.md, "a test's docstring is not its answer"). They are dropped after the spread,
    so which others are chosen does not depend on the tests' docstrings: queries mined without this rule and
    filtered are the queries mined with it."""
    from coderag.pipelines.code_index import CodeIndex

    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with CodeIndex.open(root, create=False) as index:
        for node in index.docstore.docs.values():
            m = node.metadata
            if m.get("kind") not in _DEFINITION_KINDS or m.get("is_leaf") is False:
                continue
            sentence = doc_sentence(node.get_content(), m.get("language", ""))
            if sentence:
                found[sentence.lower()].append({"file_path": m["file_path"], "start_line": int(m["start_line"]),
                                                "end_line": int(m["end_line"]), "sentence": sentence})
    unique = sorted((v[0] for v in found.values() if len(v) == 1), key=lambda g: (g["file_path"], g["start_line"]))
    step = max(1, len(unique) // limit) if unique else 1
    out = []
    for g in unique[::step][:limit]:
        if file_role(g["file_path"]) == TESTS:
            continue
        gold = {k: g[k] for k in ("file_path", "start_line", "end_line")}
        out.append({"id": f"history-{repo}:doc:{g['file_path']}:{g['start_line']}", "corpus": "history",
                    "query": g["sentence"], "gold": [gold], "kind": "docstring", "split": split, "repo": repo,
                    "commit": HISTORY_REPOS[repo][0]})
    return out


NAME_LIMIT = 60  # definitions asked for by name, per repository
USAGE_LIMIT = 25  # names asked for their callers or their tests, per repository
TESTED_LIMIT = 40  # names asked for their tests by where_tested_queries, per repository


def spellings(name: str) -> list[str]:
    """A name as written, in the other convention, and as plain words (what a developer types).

    >>> spellings("parse_retry_after"), spellings("getUserById")
    (['parse_retry_after', 'parseRetryAfter', 'parse retry after'], ['getUserById', 'get_user_by_id', 'get user by id'])
    """
    parts = [p.lower() for p in IDENTIFIER_PARTS.findall(name)]
    other = (parts[0] + "".join(p.title() for p in parts[1:])) if "_" in name else "_".join(parts)
    return [name, other, " ".join(parts)]


def name_queries(root: Path, repo: str, split: str, commit: str | None = None) -> list[dict[str, Any]]:
    """Queries that name code: a definition by its name (as written, in the other convention, as words, or
    "where is X defined"), gold its definition; "who calls X" / "where is X used", gold the chunks that use
    it; "where is X tested", gold the tests that use it. Names defined once in the snapshot (at `commit`, by
    default the one eval/history_repos.py pins), spread evenly."""
    from coderag.nodes.file_roles import TESTS, file_role
    from coderag.queries.names import is_code_name, uses_name
    from coderag.queries.symbols import bare_symbol, chunk_defines

    sha = commit or HISTORY_REPOS[repo][0]

    def record(kind_id: str, query: str, gold: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": f"history-{repo}:{kind_id}", "corpus": "history", "query": query, "gold": gold, "kind": "identifier",
                "split": split, "repo": repo, "commit": sha}

    leaves = indexed_leaves(root)
    defs: dict[str, list] = defaultdict(list)
    for n in leaves:  # names of the source: a question names the code it asks about, rarely a test
        if (n.metadata.get("kind") in _DEFINITION_KINDS and n.metadata.get("symbol")
                and file_role(n.metadata["file_path"], n.metadata.get("language", "")) != TESTS):
            name = bare_symbol(n.metadata["symbol"]).split(".")[-1].split("::")[-1]
            if len(name) >= 4 and is_code_name(name):
                defs[name].append(n)
    once = sorted((name, ns[0]) for name, ns in defs.items() if len(ns) == 1)
    step = max(1, len(once) // NAME_LIMIT)
    out = []
    for i, (name, n) in enumerate(once[::step][:NAME_LIMIT]):
        m = n.metadata
        gold = [{"file_path": m["file_path"], "start_line": int(m["start_line"]), "end_line": int(m["end_line"])}]
        forms = spellings(name) + [f"where is {name} defined"]
        out.append(record(f"name:{name}", forms[i % len(forms)], gold))
    usage_step = max(1, len(once) // (USAGE_LIMIT * 2))
    asked = 0
    for i, (name, n) in enumerate(once[::usage_step]):
        if asked >= USAGE_LIMIT:
            break
        users = [u for u in leaves if name in u.get_content() and not chunk_defines(u.metadata, name)
                 and uses_name(u.get_content(), name)]
        tests = [u for u in users if file_role(u.metadata["file_path"], u.metadata.get("language", "")) == TESTS]
        wanted, query = ((tests, f"where is {name} tested") if i % 3 == 2 and tests
                         else (users, ("who calls {}", "where is {} used")[i % 2].format(name)))
        if not wanted or len(wanted) > 10:
            continue  # unused, or used everywhere: no answer to rank
        gold = [{"file_path": u.metadata["file_path"], "start_line": int(u.metadata["start_line"]),
                 "end_line": int(u.metadata["end_line"])} for u in wanted]
        out.append(record(f"use:{name}", query, gold))
        asked += 1
    return out


def where_tested_queries(root: Path, repo: str, sha: str, split: str, limit: int = TESTED_LIMIT,
                   seed: int = 11) -> list[dict[str, Any]]:
    """"where is X tested" for up to `limit` source definitions that are defined once and used by one to ten
    test chunks (the gold), drawn by a seeded generator from the indexed snapshot at `root`. A query that asks
    for tests wants the tests, which no change description's gold is: `name_queries` asks it of a third of its
    usage names only, and no held-out set asked it at all (eval/RESULTS.md, "queries that ask for tests")."""
    import random

    from coderag.nodes.code_splitter import MERGED_KIND
    from coderag.nodes.file_roles import TESTS, file_role
    from coderag.queries.names import is_code_name, uses_name
    from coderag.queries.symbols import bare_symbol, chunk_symbols

    leaves = indexed_leaves(root)
    tests = [n for n in leaves if file_role(n.metadata["file_path"], n.metadata.get("language", "")) == TESTS]
    test_ids = {n.node_id for n in tests}
    defined: dict[str, int] = defaultdict(int)
    for n in leaves:  # a merged leaf of small definitions lists each of them
        if n.metadata.get("kind") in _DEFINITION_KINDS | {MERGED_KIND} and n.node_id not in test_ids:
            for symbol in chunk_symbols(n.metadata):
                name = bare_symbol(symbol).split(".")[-1].split("::")[-1]
                if len(name) >= 6 and is_code_name(name):  # shorter names are words tests use for other things
                    defined[name] += 1
    names = sorted(name for name, count in defined.items() if count == 1)
    random.Random(seed).shuffle(names)
    out: list[dict[str, Any]] = []
    for name in names:
        if len(out) >= limit:
            break
        users = [u for u in tests if name in u.get_content() and uses_name(u.get_content(), name)]
        if not 1 <= len(users) <= 10:
            continue  # untested, or used by every test: no answer to rank
        gold = [{"file_path": u.metadata["file_path"], "start_line": int(u.metadata["start_line"]),
                 "end_line": int(u.metadata["end_line"])} for u in users]
        out.append({"id": f"history-{repo}:tested:{name}", "corpus": "history", "query": f"where is {name} tested",
                    "gold": gold, "kind": "identifier", "split": split, "repo": repo, "commit": sha})
    return out
