"""Code-aware lexical terms for BM25: `getUserById`, `get_user_by_id` and "get user by id" meet."""

from __future__ import annotations

import re
import zlib
from collections import Counter

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

# BM25 term-frequency saturation (Lucene defaults); the IDF half is applied by the store at query time.
BM25_K1 = 1.2
BM25_B = 0.75
DEFAULT_AVG_DOC_TERMS = 120.0


_stem_cache: dict[str, str] = {}
_stemmer = None


def _stem(word: str) -> str:
    global _stemmer
    stem = _stem_cache.get(word)
    if stem is None:
        if _stemmer is None:
            import Stemmer  # PyStemmer (C, Snowball): "retries" and "retry" meet

            _stemmer = Stemmer.Stemmer("english")
        stem = _stemmer.stemWord(word)
        if len(_stem_cache) < 200_000:
            _stem_cache[word] = stem
    return stem


def code_terms(text: str) -> list[str]:
    """Lower-cased terms: every compound identifier whole, plus its camelCase/snake_case/digit parts, stemmed.

    >>> code_terms("getUserById(user_id) retries")
    ['getuserbyid', 'get', 'user', 'by', 'id', 'user_id', 'user', 'id', 'retri']
    """
    out: list[str] = []
    for ident in _IDENT.findall(text):
        parts = [p.lower() for p in _PARTS.findall(ident)]
        low = ident.lower()
        if len(parts) != 1 or parts[0] != low:
            if len(low) > 1:
                out.append(low)
        out.extend(_stem(p) for p in parts if len(p) > 1)
    return out


def term_id(term: str) -> int:
    """Stable 32-bit id of a term (no vocabulary file to keep in sync; collisions are rare and harmless)."""
    return zlib.crc32(term.encode("utf-8"))


def doc_sparse(text: str, avg_terms: float = DEFAULT_AVG_DOC_TERMS) -> tuple[list[int], list[float]]:
    """BM25 term-frequency weights of a document; the store multiplies in the IDF."""
    counts = Counter(term_id(t) for t in code_terms(text))
    dl = sum(counts.values()) or 1
    norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / avg_terms)
    ids = sorted(counts)
    return ids, [counts[i] * (BM25_K1 + 1) / (counts[i] + norm) for i in ids]


def query_sparse(text: str) -> tuple[list[int], list[float]]:
    """Each distinct query term once, weight 1."""
    ids = sorted({term_id(t) for t in code_terms(text)})
    return ids, [1.0] * len(ids)
