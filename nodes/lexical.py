"""Code-aware lexical terms for BM25: `getUserById`, `get_user_by_id` and "get user by id" meet.

The terms are the index's sparse vectors: any change to what `CodeAnalyzer` returns changes every
stored vector, so tests pin them. The stemmer and its cache belong to an analyzer instance (the
store owns one); the module functions serve callers that hold none.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections import Counter

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
# The parts of one identifier: `HTTPServer2` -> HTTP, Server, 2; `get_user_by_id` -> get, user, by, id.
IDENTIFIER_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

# BM25 term-frequency saturation (Lucene defaults); the IDF half is applied by the store at query time.
BM25_K1 = 1.2
BM25_B = 0.75
DEFAULT_AVG_DOC_TERMS = 120.0
DEFAULT_STEM_CACHE_SIZE = 200_000  # distinct words: a large repository's vocabulary, a few tens of MB at most

# The English stop words of Lucene's classic analyzer (also bm25s' list). A question's function words are not
# searched: in code they occur in comments and prose alone, so "the", "of" and "with" pulled READMEs, PKG-INFO
# and comment-heavy chunks up for every question. Documents keep them, as does
# a query shorter than QUESTION_MIN_WORDS ("is empty", "for each"), where they may be what is asked.
STOP_WORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                       "there these they this to was will with".split())
QUESTION_MIN_WORDS = 4
# A pasted error message ("Error: No such command 'x'.", "ValueError: ...") is not a question: its "no" and
# "such" are the message's own words, and its template holds them.
_PASTED_ERROR = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Warning)|Error|ERROR|error|FATAL|fatal|"
                           r"panic)\s*(?::(?!:)|\()")


def is_pasted_error(text: str) -> bool:
    """One line that starts as an error prints ("Error: ...", "ValueError: ...", "panic: ..."). Not a report's
    evidence, which the query reader joins over lines and which keeps the question's rule (keeping its stop
    words cost two swebench-dev reports their first place).

    >>> is_pasted_error("Error: No such command 'x'."), is_pasted_error("ValidationError::from_val_error")
    (True, False)
    """
    return "\n" not in text.strip() and _PASTED_ERROR.match(text) is not None


def identifier_parts(name: str) -> list[str]:
    """`getUserById` -> ["get", "User", "By", "Id"]; `user_id` -> ["user", "id"] (case kept)."""
    return IDENTIFIER_PARTS.findall(name)


def term_id(term: str) -> int:
    """Stable 32-bit id of a term (no vocabulary file to keep in sync; collisions are rare and harmless)."""
    return zlib.crc32(term.encode("utf-8"))


class CodeAnalyzer:
    """Text -> BM25 terms and sparse vectors, with a Snowball stemmer and a cache of its words.

    Examples:
        >>> CodeAnalyzer().terms("getUserById(user_id) retries")
        ['getuserbyid', 'get', 'user', 'by', 'id', 'user_id', 'user', 'id', 'retri']
    """

    def __init__(self, stem_cache_size: int = DEFAULT_STEM_CACHE_SIZE) -> None:
        import Stemmer  # PyStemmer (C, Snowball): "retries" and "retry" meet

        # An identifier's parts repeat across a repository: the cache saves most stemmer calls.
        self.stem = functools.lru_cache(maxsize=stem_cache_size)(Stemmer.Stemmer("english").stemWord)
        # STOP_WORDS as `terms` writes them (stemmed, should a stem differ from its word).
        self._stop_terms = STOP_WORDS | {self.stem(w) for w in STOP_WORDS}
        # Identifiers repeat even more than words (`self`, `return`, a module's own names): split and stem each
        # once, so a chunk's terms are a lookup per identifier.
        self.identifier_terms = functools.lru_cache(maxsize=stem_cache_size)(self._identifier_terms)

    def _identifier_terms(self, ident: str) -> tuple[str, ...]:
        """One identifier's terms: the compound whole, lower-cased (when it has parts), then its parts, stemmed."""
        parts = [p.lower() for p in IDENTIFIER_PARTS.findall(ident)]
        low = ident.lower()
        whole = (low,) if (len(parts) != 1 or parts[0] != low) and len(low) > 1 else ()
        return whole + tuple(self.stem(p) for p in parts if len(p) > 1)

    def terms(self, text: str) -> list[str]:
        """Lower-cased terms: every compound identifier whole, plus its camelCase/snake_case/digit parts, stemmed."""
        out: list[str] = []
        split = self.identifier_terms
        for ident in IDENTIFIER.findall(text):
            out.extend(split(ident))
        return out

    def term_set(self, text: str) -> frozenset[str]:
        """The distinct `terms` of a text (each identifier split once, however often it occurs)."""
        split = self.identifier_terms
        return frozenset().union(*map(split, set(IDENTIFIER.findall(text))))

    def doc_sparse(self, text: str, avg_terms: float = DEFAULT_AVG_DOC_TERMS) -> tuple[list[int], list[float]]:
        """BM25 term-frequency weights of a document; the store multiplies in the IDF."""
        counts = Counter(term_id(t) for t in self.terms(text))
        dl = sum(counts.values()) or 1
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / avg_terms)
        ids = sorted(counts)
        return ids, [counts[i] * (BM25_K1 + 1) / (counts[i] + norm) for i in ids]

    def query_sparse(self, text: str) -> tuple[list[int], list[float]]:
        """Each distinct query term once, weight 1; a question's stop words left out (STOP_WORDS), not a
        pasted error message's."""
        terms = self.terms(text)
        if len(text.split()) >= QUESTION_MIN_WORDS and not is_pasted_error(text):
            terms = [t for t in terms if t not in self._stop_terms]
        ids = sorted({term_id(t) for t in terms})
        return ids, [1.0] * len(ids)


@functools.cache
def default_analyzer() -> CodeAnalyzer:
    """One shared analyzer for the module functions below (made on first use: PyStemmer is imported then)."""
    return CodeAnalyzer()


def code_terms(text: str) -> list[str]:
    """`CodeAnalyzer.terms` of the shared analyzer."""
    return default_analyzer().terms(text)


def term_set(text: str) -> frozenset[str]:
    """`CodeAnalyzer.term_set` of the shared analyzer."""
    return default_analyzer().term_set(text)


def doc_sparse(text: str, avg_terms: float = DEFAULT_AVG_DOC_TERMS) -> tuple[list[int], list[float]]:
    """`CodeAnalyzer.doc_sparse` of the shared analyzer (the server-mode store's sparse function)."""
    return default_analyzer().doc_sparse(text, avg_terms)


def query_sparse(text: str) -> tuple[list[int], list[float]]:
    """`CodeAnalyzer.query_sparse` of the shared analyzer."""
    return default_analyzer().query_sparse(text)
