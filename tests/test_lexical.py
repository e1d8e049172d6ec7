"""Code-aware BM25 terms (nodes/lexical.py). The terms are the index's sparse vectors: pinned here."""

from __future__ import annotations

import hashlib
import struct

import pytest

from coderag.nodes.lexical import CodeAnalyzer, code_terms, doc_sparse, identifier_parts, query_sparse, term_id

CHUNK = ("src/auth.py :: AuthService.getUserById (python)\ndef getUserById(user_id):\n"
         "    # retries the HTTPServer lookup 3 times\n    return self.user_cache[user_id]")
LINE = "parse_http_date: RFC 7231 dates, retried connections, XMLHttpRequest2"


def _digest(ids: list[int], vals: list[float]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(ids)}I{len(vals)}d", *ids, *vals)).hexdigest()


@pytest.mark.parametrize("text, terms", [
    ("getUserById", ["getuserbyid", "get", "user", "by", "id"]),
    ("get_user_by_id", ["get_user_by_id", "get", "user", "by", "id"]),
    ("get user by id", ["get", "user", "by", "id"]),
    ("HTTPServer XMLHttpRequest2", ["httpserver", "http", "server", "xmlhttprequest2", "xml", "http", "request"]),
    ("parse_http_date x 7231", ["parse_http_date", "pars", "http", "date", "7231"]),  # one-letter words dropped
])
def test_lexical_terms_split_camel_and_snake_case(text: str, terms: list[str]) -> None:
    assert CodeAnalyzer().terms(text) == terms


def test_lexical_spellings_of_one_identifier_meet() -> None:
    a = CodeAnalyzer()
    parts = [set(a.terms(t)) for t in ("getUserById", "get_user_by_id", "get user by id")]
    assert parts[0] & parts[1] & parts[2] == {"get", "user", "by", "id"}
    assert identifier_parts("HTTPServer2") == ["HTTP", "Server", "2"]


def test_lexical_stemming_joins_word_forms() -> None:
    a = CodeAnalyzer()
    assert a.terms("retries retry retried") == ["retri"] * 3
    assert a.terms("connections connect connecting") == ["connect"] * 3
    assert a.terms("Caching") == ["cach"]  # lower-cased before stemming


def test_lexical_terms_and_vectors_are_the_pinned_ones() -> None:
    """What every stored sparse vector was built from: the same terms, ids and weights, bit for bit, as
    before the stemmer's cache moved into the analyzer."""
    assert code_terms(CHUNK) == [
        "src", "auth", "py", "authservice", "auth", "servic", "getuserbyid", "get", "user", "by", "id", "python",
        "def", "getuserbyid", "get", "user", "by", "id", "user_id", "user", "id", "retri", "the", "httpserver",
        "http", "server", "lookup", "time", "return", "self", "user_cache", "user", "cach", "user_id", "user", "id"]
    assert term_id("user") == 2375276105 and term_id("date") == 2862495610  # crc32
    assert _digest(*doc_sparse(CHUNK)) == "0fa7ce0f959eee6f502aa1808620d0354ebd555d0ba6c8f82ebdde8839080833"
    assert _digest(*doc_sparse(LINE)) == "0cbeec5245ab7bd20f663fba6d558c112200dbd3f009cbdf3e61489d4199372f"
    ids, vals = doc_sparse(LINE)
    assert ids[:3] == [838129763, 861356423, 999788447] and vals[ids.index(2862495610)] == 1.8352450469238792
    assert query_sparse(LINE) == (ids, [1.0] * len(ids))


def test_lexical_analyzers_share_nothing_and_agree() -> None:
    """Each analyzer has its own stem cache (no module state), and every analyzer gives the same vectors."""
    one, two = CodeAnalyzer(), CodeAnalyzer(stem_cache_size=4)
    assert one.doc_sparse(CHUNK) == two.doc_sparse(CHUNK) == doc_sparse(CHUNK)
    assert one.query_sparse(LINE) == two.query_sparse(LINE)
    assert one.stem.cache_info().currsize > 4 and two.stem.cache_info().currsize == 4
    one.stem.cache_clear()
    assert two.stem.cache_info().currsize == 4 and one.terms("retries") == ["retri"]


def test_lexical_a_question_searches_no_stop_words() -> None:
    """A question of four words or more searches its content words only: its "the", "of" and "with" would
    match the comments and prose of every file. A shorter query keeps them, and documents always do."""
    a = CodeAnalyzer()
    question = "how many columns of the terminal does this text take"
    assert a.query_sparse(question) == a.query_sparse("how many columns terminal does text take")
    assert term_id("the") not in a.query_sparse(question)[0]
    assert term_id("the") in a.query_sparse("the end")[0]  # three words or fewer: as typed
    assert term_id("is") in a.query_sparse("is_empty")[0]  # a name: its parts as they are
    assert "the" in a.terms(question) and term_id("the") in a.doc_sparse(question)[0]
    assert term_id("is_empty") in a.query_sparse("check whether the is_empty flag is set")[0]  # identifiers stay whole


@pytest.mark.parametrize("message", ["Error: No such command 'statsu'.", "ValueError: no such option: --colour",
                                     "panic: no such file or directory"])
def test_lexical_a_pasted_error_message_keeps_its_stop_words(message) -> None:
    """"No such command" is a message's own words, which its template holds: a pasted error keeps them. A
    question that names a member with `::` is still a question."""
    a = CodeAnalyzer()
    assert term_id("no") in a.query_sparse(message)[0] and term_id("such") in a.query_sparse(message)[0]
    assert term_id("the") not in a.query_sparse("where does Parser::parse read the next token")[0]
    # a report's evidence, joined over lines by the query reader, keeps the question's rule
    assert term_id("no") not in a.query_sparse(message + "\nparse_args\nsrc/cli.py the reporter's prose")[0]


def test_lexical_term_set_is_the_set_of_the_terms() -> None:
    """The features read a chunk's distinct terms from `term_set`, which splits each identifier once through
    the analyzer's identifier cache: the same terms as `terms`, with a cache too small to hold them or not."""
    text = CHUNK + "\n" + LINE + "\nHTTPServer2 __init__ _ x 42 getUserById getUserById"
    roomy, tight = CodeAnalyzer(), CodeAnalyzer(stem_cache_size=4)
    for a in (roomy, tight):
        assert a.term_set(text) == frozenset(a.terms(text)) == frozenset(code_terms(text))
        assert a.terms(text) == code_terms(text)  # order and repeats kept: BM25 counts them
    assert tight.identifier_terms.cache_info().currsize == 4
    assert roomy.term_set("") == frozenset() and roomy.terms("") == []
