"""The evidence a request gives about each of its candidates, as one row of numbers per candidate: what the
learned ranker (pipelines/ranker.py) scores, and what eval/ranker_data.py dumps to train it on.

Computed once per request over the union of the legs' candidates, from nothing but the legs' answers and the
request: each leg's score and rank; how the query's terms fall on the candidate's fields (its path, its file
name, the names it defines, its comments, its string literals, its code); whether it defines or uses the names
the query spells, holds the query as a phrase or prints it as a message; its file's evidence across the pool;
its role, kind and size, and whether it only declares; and what kind of query asked (as numbers, never as a
branch). A term's weight is its inverse frequency in the candidate pool, so a word every candidate holds says
nothing.

Examples:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> from coderag.pipelines.search_request import SearchRequest
    >>> a = TextNode(id_="a", text="def parse_header(line):\\n    return line", metadata={
    ...     "file_path": "src/http.py", "start_line": 1, "end_line": 2, "kind": "function", "symbol": "parse_header"})
    >>> ids, rows = candidate_features({"bm25": [NodeWithScore(node=a, score=3.0)]}, SearchRequest("parse_header"))
    >>> ids, rows[0][FEATURES.index("defines_query_name")], rows[0][FEATURES.index("bm25_share")]
    (['a'], 1.0, 1.0)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import AbstractSet, Dict, List, Sequence, Tuple

from llama_index.core.schema import NodeWithScore

from coderag.nodes.file_roles import DOC_LANGUAGES, DOCS, EXAMPLES, TESTS, file_role
from coderag.nodes.keys import (DECLARATION_KEY, END_LINE_KEY, FILE_PATH_KEY, KIND_KEY, LANGUAGE_KEY, START_LINE_KEY,
                                SYMBOL_KEY)
from coderag.nodes.lexical import STOP_WORDS, code_terms, is_pasted_error, term_set
from coderag.queries.literals import message_coverage
from coderag.queries.names import is_code_name, uses_name
from coderag.queries.symbols import assigns_at_top_level, chunk_defines, chunk_symbols, declares_field
from coderag.pipelines.search_request import BM25, DENSE, NAMED, SearchRequest

LEGS = (DENSE, BM25, NAMED)
ABSENT_RANK = 100  # the rank of a candidate a leg did not return: past any leg's depth
NON_CODE_LANGUAGES = DOC_LANGUAGES | {"json", "yaml", "toml", "ini", "xml", "html", "css", "scss"}
# The feature `is_container`: a chunk of a type or module, as the shipped model was trained to read it. Not the
# outline's CLASS_LIKE_KINDS (whose functions are methods): an object literal of functions, a container there since
# a later reading, is not one here until a model is trained with it (adding it moved none of koa's 131 held-out
# queries), and a type alias, which holds no method, is one here.
CONTAINER_KINDS = frozenset({"class", "struct", "trait", "impl", "interface", "module", "namespace", "enum", "type"})
PHRASE_MIN_WORDS = 4  # shorter queries are names or keywords: found word for word everywhere they are used

_COMMENT_LINE = re.compile(r"^\s*(?:#|//|/\*|\*|--|;;|\"\"\"|''')")
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'|`([^`]*)`')
_PHRASE_COMMENT = re.compile(r"^[ \t]*(?:/\*\*?|\*/|\*|///?|#+|--|;+)", re.M)
_PHRASE_EDGES = "`'\" .:;,!?"
_SPACE = re.compile(r"\s+")
# Changelogs by the names projects give them (CHANGES, HISTORY, NEWS, RELEASES, anyio's versionhistory), and the
# folders that collect their entries before a release (towncrier's newsfragments and changelog.d, CPython's
# NEWS.d, the changesets of JavaScript monorepos).
_NOISE_NAMES = re.compile(r"^(changelog|changes|(version[-_]?)?history|news|releases|release[-_ ]?notes|whatsnew"
                          r"|authors|contributors|code_of_conduct|contributing)([-_.].*)?$", re.I)
_NOISE_FOLDERS = frozenset(("changelog", "changes", "whatsnew", "release-notes", "changelog.d", "newsfragments",
                            "news.d", ".changeset"))
# A forge's folder: its prose (templates, contributing, security policy), issue forms and bots' canned replies
# (YAML) are noise; its CI (workflows, actions) and the scripts they run are not.
_FORGE_FOLDERS = frozenset((".github", ".gitlab"))
_FORGE_CI_FOLDERS = frozenset(("workflows", "workflow-templates", "actions", "ci"))

QUERY_FEATURES = ("q_words", "q_long", "q_idents", "q_code_idents", "q_definition", "q_usages", "q_pasted_error",
                  "q_frames", "q_wants_tests", "q_wants_docs", "q_keywords", "q_legs_agree")
LEG_FEATURES = tuple(f"{leg}_{x}" for leg in LEGS for x in ("share", "rank", "score"))
FILE_FEATURES = ("file_hits", "file_dense_max", "file_bm25_max", "file_dense_sum", "file_bm25_sum",
                 "file_dense_rank", "file_bm25_rank", "best_of_file_dense", "best_of_file_bm25", "file_agreed_first",
                 "file_path_cover", "file_code_cover", "file_code_cover_rel")
FIELD_FEATURES = ("path_cover", "name_cover", "symbol_cover", "comment_cover", "string_cover", "code_cover",
                  "code_cover_rel", "code_cover_unweighted", "defines_query_name", "uses_query_name", "defines_report_name",
                  "phrase", "message", "keywords")
CANDIDATE_FEATURES = ("in_both", "is_test", "is_doc", "is_example", "role_wanted", "non_code", "unnamed_window",
                      "report_noise", "is_window", "is_section", "is_container", "symbol_depth", "lines",
                      "declaration")
FEATURES: Tuple[str, ...] = QUERY_FEATURES + LEG_FEATURES + FILE_FEATURES + FIELD_FEATURES + CANDIDATE_FEATURES


def phrase_of(text: str) -> str:
    """Text as a phrase is matched: lower case, one space between words, comment markers at line starts
    gone (a docstring or a JSDoc block wrapped over lines reads as the sentence it is).

    >>> phrase_of(" * Split text into lines\\n * such that  each fits.")
    'split text into lines such that each fits.'
    """
    return " ".join(_PHRASE_COMMENT.sub("", text).split()).lower()


def query_phrase(query: str) -> str:
    """The phrase a sentence-like query would be found as (a docstring or an error message quoted), or ""
    for a query of fewer than PHRASE_MIN_WORDS words. Quotes and the closing full stop are not part of it.

    >>> query_phrase('"Replace emoji code in text."'), query_phrase("retry after login")
    ('replace emoji code in text', '')
    """
    phrase = _SPACE.sub(" ", query).strip(_PHRASE_EDGES).lower()
    return phrase if len(phrase.split(" ")) >= PHRASE_MIN_WORDS else ""


def holds_phrase(text: str, phrase: str) -> bool:
    """Whether `text` holds a query's `phrase` (query_phrase) word for word as phrase_of reads it, across line
    breaks and comment markers. Its longest word is looked for first: a cheap test that most candidates fail.

    >>> holds_phrase("# Split text into lines\\n# such that each fits.", "split text into lines such that")
    True
    """
    return max(phrase.split(" "), key=len) in text.lower() and phrase in phrase_of(text)


def quote_counts(role: str, wanted: str | None) -> bool:
    """Whether a candidate of file role `role` that holds the query word for word (a phrase, a printed message)
    is what a query that asks for role `wanted` (or None) asks for. A test states the behaviour it checks in a
    developer's words (a spec string, a test's docstring, an assertion's message): found there, the sentence
    names the behaviour, and the code that has it is elsewhere. So a test's quote counts only when the query
    asks for tests (eval/RESULTS.md, "a test's own words").

    >>> quote_counts("source", None), quote_counts("tests", None), quote_counts("tests", "tests")
    (True, False, True)
    """
    return role != TESTS or wanted == TESTS


def is_report_noise(path: str, language: str) -> bool:
    """Files a bug report or a change's description resembles without being where it is fixed or made:
    issue and PR templates, changelogs and release notes (they quote past reports and changes), contributor
    lists. Only prose, and what a forge's folder holds beside its CI: a module named `history.py`, a workflow
    under `.github/` are code and configuration like any other, and may be what a query asks for.

    >>> [is_report_noise(p, lang) for p, lang in (("docs/versionhistory.rst", "rst"), ("CHANGES", "text"),
    ...     (".changeset/quiet-owls.md", "markdown"), ("src/history.py", "python"), ("docs/history.md", "markdown"))]
    [True, True, True, False, True]
    >>> [is_report_noise(p, lang) for p, lang in ((".github/ISSUE_TEMPLATE/bug.yml", "yaml"),
    ...     (".github/CONTRIBUTING.md", "markdown"), (".github/config.yml", "yaml"),
    ...     (".github/workflows/tests.yml", "yaml"), (".github/scripts/release.py", "python"))]
    [True, True, True, False, False]
    """
    parts = path.split("/")
    folders = [p.lower() for p in parts[:-1]]
    if folders and folders[0] in _FORGE_FOLDERS:
        return language in NON_CODE_LANGUAGES and not any(p in _FORGE_CI_FOLDERS for p in folders[1:])
    return language in DOC_LANGUAGES and (_NOISE_NAMES.match(parts[-1]) is not None
                                          or any(p in _NOISE_FOLDERS for p in folders))


def is_unnamed_window(metadata: dict) -> bool:
    """A line window that defines no symbol: a piece of a long data table (an emoji map, a palette, a
    case-folding switch), of a license or a package's PKG-INFO, of a header's list of declarations. It
    matches the words of many questions and answers none of them: in the natural-language questions of
    the tune and held-out splits, 62 such windows reached a top 10 and none was an answer (eval/RESULTS.md)."""
    return metadata.get(KIND_KEY) == "window" and not metadata.get(SYMBOL_KEY)


def declares_only(metadata: dict) -> bool:
    """A chunk that only declares (a TypeScript interface or type alias, an enum, a struct, a stub file's
    signatures: nodes/code_splitter.py). A question about what the code does is answered where it is done;
    the declarations that code uses are worded like the question (their doc comments describe the
    behaviour) and are not its answer (eval/RESULTS.md, "code that only declares")."""
    return bool(metadata.get(DECLARATION_KEY))


@lru_cache(maxsize=8192)
def _fields(text: str, path: str, symbols: Tuple[str, ...]) -> Tuple[frozenset, ...]:
    """The term sets of a chunk's fields: path, file name, symbols, comments, string literals, all code.
    Cached on the chunk itself, so a resident owner splits a chunk once however often it is a candidate."""
    is_comment = _COMMENT_LINE.match
    comments = [line for line in text.splitlines() if is_comment(line)]
    strings = [a or b or c for a, b, c in _LITERAL.findall(text)]  # the one group that matched
    return (*_path_fields(path), term_set(" ".join(symbols)), term_set("\n".join(comments)),
            term_set(" ".join(strings)), term_set(text))


def _path_fields(path: str) -> Tuple[frozenset, frozenset]:
    """The term sets of a file's path and of its name (the last part, less its extension)."""
    name = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return term_set(path.replace("/", " ")), term_set(name)


def query_terms(text: str) -> List[str]:
    """The query's distinct terms, stop words left out."""
    stops = STOP_WORDS
    return list(dict.fromkeys(t for t in code_terms(text) if t not in stops))


class _Cover:
    """The share of the query's term weight that a field's term set holds (0.0 for a query of no terms)."""

    def __init__(self, terms: Sequence[str], weights: Dict[str, float]) -> None:
        self.weighted = [(t, weights[t]) for t in terms]
        self.total = sum(w for _, w in self.weighted)

    def __call__(self, field: AbstractSet[str]) -> float:
        return sum(w for t, w in self.weighted if t in field) / self.total if self.total else 0.0


def _leg_table(results: Dict[str, List[NodeWithScore]]) -> Dict[str, Dict[str, Tuple[float, int, float]]]:
    """Per leg: node id -> (share of the leg's best score, rank, score)."""
    table: Dict[str, Dict[str, Tuple[float, int, float]]] = {}
    for leg, nodes in results.items():
        ranked = sorted(nodes, key=lambda n: n.score or 0.0, reverse=True)
        top = max((ranked[0].score or 0.0) if ranked else 0.0, 0.0)
        table[leg] = {n.node.node_id: ((max(n.score or 0.0, 0.0) / top) if top > 0 else 0.0, rank, float(n.score or 0.0))
                      for rank, n in enumerate(ranked)}
    return table


def defines_name(metadata: dict, text: str, name: str) -> bool:
    """True if a chunk defines `name`: one of its symbols, a constant it assigns at the top level, or a field
    its type declares."""
    return chunk_defines(metadata, name) or assigns_at_top_level(text, name) or declares_field(text, name)


def candidate_features(results: Dict[str, List[NodeWithScore]], req: SearchRequest
                       ) -> Tuple[List[str], List[List[float]]]:
    """(node ids, one row of FEATURES per node) for the union of the legs' candidates, in first-seen order."""
    by_id: Dict[str, NodeWithScore] = {}
    for nodes in results.values():
        for n in nodes:
            by_id.setdefault(n.node.node_id, n)
    ids = list(by_id)
    if not ids:
        return [], []
    legs = _leg_table(results)
    query = req.query_str
    names = req.names
    reading = req.reading
    wanted = req.role_asked_for
    terms = query_terms(req.bm25_text)

    fields = {}
    for nid, n in by_id.items():
        m = n.node.metadata
        fields[nid] = _fields(n.node.get_content(), m.get(FILE_PATH_KEY, ""), tuple(chunk_symbols(m)))
    df = Counter(t for f in fields.values() for t in set(terms) & f[5])
    pool = len(ids)
    weights = {t: math.log(1.0 + (pool + 1) / (df.get(t, 0) + 0.5)) for t in terms}

    # File-level evidence across the pool.
    file_of = {nid: by_id[nid].node.metadata.get(FILE_PATH_KEY, "") for nid in ids}
    per_file: Dict[str, Dict[str, List[float]]] = {}
    for nid in ids:
        f = per_file.setdefault(file_of[nid], {DENSE: [], BM25: []})
        for leg in (DENSE, BM25):
            f[leg].append(legs.get(leg, {}).get(nid, (0.0, 0, 0.0))[0])
    file_rank = {}
    for leg in (DENSE, BM25):
        order = sorted(per_file, key=lambda p: max(per_file[p][leg]), reverse=True)
        file_rank[leg] = {p: (i if max(per_file[p][leg]) > 0 else ABSENT_RANK) for i, p in enumerate(order)}
    firsts = {leg: min(legs[leg], key=lambda nid: legs[leg][nid][1]) for leg in (DENSE, BM25) if legs.get(leg)}
    agreed = file_of[firsts[DENSE]] if len(firsts) == 2 and file_of[firsts[DENSE]] == file_of[firsts[BM25]] else None
    cover = _Cover(terms, weights)
    path_cover = {file_of[nid]: cover(fields[nid][0]) for nid in ids}  # the chunks of a file share its path
    # How much of the query a file's candidates cover together: a change described in words that fall on
    # several of one file's chunks is in that file, though no one chunk holds them all.
    file_terms: Dict[str, set] = {}
    for nid in ids:
        file_terms.setdefault(file_of[nid], set()).update(fields[nid][5])
    file_cover = {p: cover(t) for p, t in file_terms.items()}
    best_file_cover = max(file_cover.values()) or 1.0
    code_cover = {nid: cover(fields[nid][5]) for nid in ids}
    best_code_cover = max(code_cover.values()) or 1.0

    phrase = query_phrase(query) if reading is None else ""
    check_message = len(query.split()) >= PHRASE_MIN_WORDS and reading is None
    idents = list(names.idents)
    report_names = reading.definitions if reading is not None else []
    q_row = [len(query.split()), float(reading is not None), len(idents), sum(map(is_code_name, idents)),
             float(names.definition), float(names.usages), float(is_pasted_error(query)),
             len(reading.frames) if reading is not None else 0, float(wanted == TESTS), float(wanted == DOCS),
             len(req.keywords), float(agreed is not None)]

    rows: List[List[float]] = []
    for nid in ids:
        node = by_id[nid].node
        m = node.metadata
        text = node.get_content()
        path = file_of[nid]
        language = m.get(LANGUAGE_KEY, "")
        role = file_role(path, language)
        f_path, f_name, f_sym, f_comment, f_string, f_code = fields[nid]
        row = list(q_row)
        for leg in LEGS:
            share, rank, score = legs.get(leg, {}).get(nid, (0.0, ABSENT_RANK, 0.0))
            row += [share, rank, score]
        pf = per_file[path]
        dense_here = legs.get(DENSE, {}).get(nid, (0.0,))[0]
        bm25_here = legs.get(BM25, {}).get(nid, (0.0,))[0]
        row += [len(pf[DENSE]), max(pf[DENSE]), max(pf[BM25]), sum(pf[DENSE]), sum(pf[BM25]),
                file_rank[DENSE][path], file_rank[BM25][path],
                float(dense_here > 0 and dense_here >= max(pf[DENSE])), float(bm25_here > 0 and bm25_here >= max(pf[BM25])),
                float(path == agreed), path_cover[path], file_cover[path], file_cover[path] / best_file_cover]
        defined = sum(1 for i in idents if defines_name(m, text, i))
        used = sum(1 for i in idents if uses_name(text, i)) if idents else 0
        report_rank = next((i for i, name in enumerate(report_names) if defines_name(m, text, name)), None)
        row += [cover(f_path), cover(f_name), cover(f_sym), cover(f_comment), cover(f_string), code_cover[nid],
                code_cover[nid] / best_code_cover,
                (sum(1 for t in terms if t in f_code) / len(terms)) if terms else 0.0,
                defined / len(idents) if idents else 0.0, used / len(idents) if idents else 0.0,
                1.0 / (report_rank + 1) if report_rank is not None else 0.0,
                float(bool(phrase) and quote_counts(role, wanted) and holds_phrase(text, phrase)),
                message_coverage(text, query) if check_message and quote_counts(role, wanted) else 0.0,
                (sum(1 for k in req.keywords if k in text) / len(req.keywords)) if req.keywords else 0.0]
        kind = m.get(KIND_KEY, "")
        symbol = m.get(SYMBOL_KEY) or ""
        start, end = int(m.get(START_LINE_KEY, 1) or 1), int(m.get(END_LINE_KEY, 1) or 1)
        row += [float(nid in legs.get(DENSE, {}) and nid in legs.get(BM25, {})), float(role == TESTS),
                float(role == DOCS), float(role == EXAMPLES), float(wanted is not None and role == wanted),
                float(language in NON_CODE_LANGUAGES), float(is_unnamed_window(m)),
                float(is_report_noise(path, language)),
                float(kind == "window"), float(kind == "section"), float(kind in CONTAINER_KINDS),
                symbol.count(".") + (1 if symbol else 0), end - start + 1, float(declares_only(m))]
        rows.append(row)
    return ids, rows
