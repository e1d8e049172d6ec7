"""Search payloads: XML for agents, JSON for programs, text for people. Snippets can never break the frame."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional
from xml.sax.saxutils import escape, quoteattr

NO_RESULTS_HINTS = [
    "Broaden the query: describe the behaviour instead of guessing names.",
    "Drop or widen file_pattern, or set requires_exact_match to false.",
    "Check the spelling of identifiers in keywords.",
]


QUERY_ECHO_CHARS = 200


def query_echo(query: str) -> str:
    """The query as the payload repeats it: the agent wrote it, so a long one is cut (a 1 MB query once filled
    the budget and left no room for results).

    Examples:
        >>> query_echo("where is the retry")
        'where is the retry'
        >>> query_echo("x" * 5000)[-23:]
        'xxxx… (5000 characters)'
    """
    if len(query) <= QUERY_ECHO_CHARS:
        return query
    return f"{query[:QUERY_ECHO_CHARS]}… ({len(query)} characters)"


@dataclass
class SearchResult:
    """One block of code: exact lines start_line..end_line of file_path (POSIX, relative to the root)."""

    id: str
    file_path: str
    start_line: int
    end_line: int
    language: str
    symbol: str
    kind: str
    score: float
    last_modified: str
    stale: bool
    text: str
    truncated: bool = False
    full_end_line: Optional[int] = None
    also_in: list[str] = field(default_factory=list)


@dataclass
class Candidate:
    """A further place after the full blocks, shown as one line: lines start_line..end_line of file_path are
    one indexed chunk, `signature` its definition's first line. `id` ("path:START-END") is what
    expand_result takes to show it."""

    id: str
    file_path: str
    start_line: int
    end_line: int
    symbol: str
    score: float
    signature: str


class SearchResults(list):
    """A list of SearchResult with the query's meta data and renderers.

    Examples:
        >>> res = index.search("where is the retry after a failed login")   # doctest: +SKIP
        >>> res[0].file_path, res[0].start_line, res[0].end_line              # doctest: +SKIP
        ('src/auth/service.py', 17, 23)
        >>> print(res.to_xml())                                               # doctest: +SKIP
    """

    def __init__(self, results: list[SearchResult] = (), *, query: str = "", root: str = "", strategy: str = "",
                 total_hits: int = 0, tokens: int = 0, latency_ms: float = 0.0, freshness: str = "fresh",
                 timings: Optional[dict[str, float]] = None, message: str = "", max_tokens: int = 0,
                 compact: bool = False, candidates: Optional[list[Candidate]] = None) -> None:
        super().__init__(results)
        self.query, self.root, self.strategy = query, root, strategy
        self.total_hits, self.tokens, self.latency_ms = total_hits, tokens, latency_ms
        self.freshness, self.message, self.max_tokens = freshness, message, max_tokens
        self.timings = timings or {}
        # An empty answer whose full frame would not fit max_tokens is rendered as its message alone.
        self.compact = compact
        # Places after the blocks, one line each, within the same budget; not counted in returned_hits.
        self.candidates: list[Candidate] = list(candidates or [])

    def to_dict(self) -> dict[str, Any]:
        """The wire format: what the owner's socket carries, plain JSON types (see `from_dict`)."""
        return {"results": [asdict(r) for r in self], "query": self.query, "root": self.root,
                "strategy": self.strategy, "total_hits": self.total_hits, "tokens": self.tokens,
                "latency_ms": self.latency_ms, "freshness": self.freshness, "timings": self.timings,
                "message": self.message, "max_tokens": self.max_tokens, "compact": self.compact,
                "candidates": [asdict(c) for c in self.candidates]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SearchResults":
        return cls([SearchResult(**r) for r in d["results"]], query=d["query"], root=d["root"],
                   strategy=d["strategy"], total_hits=d["total_hits"], tokens=d["tokens"],
                   latency_ms=d["latency_ms"], freshness=d["freshness"], timings=d.get("timings"),
                   message=d.get("message", ""), max_tokens=d.get("max_tokens", 0),
                   compact=d.get("compact", False), candidates=[Candidate(**c) for c in d.get("candidates", [])])

    def to_json(self, indent: Optional[int] = None) -> str:
        return render_json(self, indent)

    def to_xml(self) -> str:
        return render_xml(self)

    def to_text(self) -> str:
        return render_text(self)

    def __repr__(self) -> str:
        return (f"SearchResults(query={query_echo(self.query)!r}, returned={len(self)}, "
                f"candidates={len(self.candidates)}, total_hits={self.total_hits})")


# C0 controls other than tab, LF and CR are not allowed in XML 1.0, not even as character references.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_escape(value: Any) -> str:
    # Full XML escaping: no snippet can close a tag, open a fake result or end the tool output. A control
    # character (ESC in ANSI colour codes, form feed page breaks) is shown as its Unicode control picture.
    return _XML_ILLEGAL.sub(lambda m: chr(0x2400 + ord(m.group())) if m.group() < " " else "\ufffd",
                            escape(str(value)))


_x = xml_escape


def xml_attr(value: Any) -> str:
    """`value` as a quoted XML attribute: markup, quotes, line breaks and control characters escaped."""
    return quoteattr(_XML_ILLEGAL.sub(lambda m: chr(0x2400 + ord(m.group())) if m.group() < " " else "\ufffd",
                                      str(value)))


def xml_result_head(r: SearchResult) -> list[str]:
    """The lines of a result before its snippet (the last is `    <snippet>`), without their newlines."""
    head = [f"  <result id={quoteattr(r.id)} score=\"{r.score:.4f}\">",
            f"    <source_file>{_x(r.file_path)}</source_file>",
            f"    <lines>{r.start_line}-{r.end_line}</lines>",
            f"    <language>{_x(r.language)}</language>",
            f"    <symbol>{_x(r.symbol)}</symbol>",
            f"    <last_modified>{_x(r.last_modified)}</last_modified>"]
    if r.stale:
        head.append("    <stale>true: the file changed after indexing; re-read before editing</stale>")
    head.extend(f"    <also_in>{_x(loc)}</also_in>" for loc in r.also_in)
    head.append("    <snippet>")
    return head


def xml_result_tail(r: SearchResult) -> str:
    """What follows a result's snippet, from the newline that ends its last line."""
    truncated = ""
    if r.truncated:
        truncated = (f"\n    <truncated>lines {r.end_line + 1}-{r.full_end_line} not shown; "
                     f"use expand_result or read the file</truncated>")
    return f"\n    </snippet>{truncated}\n  </result>\n"


def render_result_xml(r: SearchResult) -> str:
    return "\n".join(xml_result_head(r)) + "\n" + _x(r.text) + xml_result_tail(r)


def render_xml_frame(res: SearchResults, returned: int, tokens: int) -> tuple[str, str]:
    head = ("<search_results>\n  <meta>\n"
            f"    <query>{_x(query_echo(res.query))}</query>\n"
            f"    <total_hits>{res.total_hits}</total_hits>\n"
            f"    <returned_hits>{returned}</returned_hits>\n"
            f"    <tokens>{tokens}</tokens>\n"
            f"    <latency_ms>{res.latency_ms:.0f}</latency_ms>\n"
            f"    <search_strategy>{_x(res.strategy)}</search_strategy>\n"
            f"    <index_freshness>{_x(res.freshness)}</index_freshness>\n"
            "  </meta>\n")
    if res.message:
        head += f"  <message>{_x(res.message)}</message>\n"
    return head, "</search_results>"


def shown_symbol(c: Candidate) -> str:
    """The symbol a candidate line shows: none when its signature names it already (`def f(x):` for `f`); of
    a section's heading path (`Guide > Install > Linux`), the last heading."""
    symbol = c.symbol.rsplit(" > ", 1)[-1]
    return "" if symbol in c.signature else symbol


def render_candidate_xml(c: Candidate) -> str:
    """One candidate line; like a result it starts with spaces after a `>` and a newline and ends with one."""
    symbol = shown_symbol(c)
    symbol = f" symbol={xml_attr(symbol)}" if symbol else ""
    return f"    <candidate id={xml_attr(c.id)}{symbol}>{_x(c.signature)}</candidate>\n"


CANDIDATES_XML_OPEN, CANDIDATES_XML_CLOSE = "  <candidates>\n", "  </candidates>\n"


def render_candidates_xml(candidates: list[Candidate]) -> str:
    if not candidates:
        return ""
    return CANDIDATES_XML_OPEN + "".join(render_candidate_xml(c) for c in candidates) + CANDIDATES_XML_CLOSE


def render_xml(res: SearchResults) -> str:
    if res.compact and not res:
        return f"<search_results>\n  <message>{_x(res.message)}</message>\n</search_results>"
    head, tail = render_xml_frame(res, len(res), res.tokens)
    return head + "".join(render_result_xml(r) for r in res) + render_candidates_xml(res.candidates) + tail


def render_json(res: SearchResults, indent: Optional[int] = None) -> str:
    if res.compact and not res:
        return json.dumps({"total_hits": res.total_hits, "returned": 0, "tokens": res.tokens, "results": [],
                           "message": res.message}, ensure_ascii=False, indent=indent)
    doc = {"query": query_echo(res.query), "root": res.root, "strategy": res.strategy, "total_hits": res.total_hits,
           "returned": len(res), "tokens": res.tokens, "latency_ms": round(res.latency_ms, 1),
           "freshness": res.freshness, "results": [asdict(r) for r in res],
           "candidates": [asdict(c) for c in res.candidates]}
    if res.message:
        doc["message"] = res.message
    return json.dumps(doc, ensure_ascii=False, indent=indent)


# Control characters (a newline, ESC) in a name would add lines to the text output or drive the terminal.
_TEXT_CONTROL = re.compile("[\x00-\x1f\x7f]")


def text_name(value: str) -> str:
    r"""A file name or symbol on one line of the text output: control characters escaped as JSON escapes them.

    Examples:
        >>> print(text_name("evil\nname.py"), text_name("tab\tbell\x07"))
        evil\nname.py tab\tbell\u0007
    """
    return _TEXT_CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], value)


def render_result_text(r: SearchResult) -> str:
    flags = " (stale)" if r.stale else ""
    head = f"── {text_name(r.file_path)}:{r.start_line}-{r.end_line}  {text_name(r.symbol)}  [{r.score:.4f}]{flags}\n"
    tail = f"\n   … truncated: lines {r.end_line + 1}-{r.full_end_line} not shown\n" if r.truncated else "\n"
    return head + r.text + tail


CANDIDATES_TEXT_HEAD = "── more places (expand_result ID shows one):\n"


def render_candidate_text(c: Candidate) -> str:
    symbol = text_name(shown_symbol(c))
    return f"   {text_name(c.id)}  {symbol + '  ' if symbol else ''}{c.signature}\n"


def render_candidates_text(candidates: list[Candidate]) -> str:
    if not candidates:
        return ""
    return "\n" + CANDIDATES_TEXT_HEAD + "".join(render_candidate_text(c) for c in candidates)


def render_text(res: SearchResults) -> str:
    if not res:
        return res.message + "\n"
    body = "\n".join(render_result_text(r) for r in res) + render_candidates_text(res.candidates)
    return body + f"\n{len(res)} of {res.total_hits} hits, {res.tokens} tokens, {res.latency_ms:.0f} ms ({res.strategy})\n"


def budget_message(total_hits: int, max_tokens: int) -> str:
    """There were hits, but not one line of the best fits: say so, not "no results"."""
    return f"None of the {total_hits} hits fits in max_tokens={max_tokens}: raise max_tokens."


def no_results_message(query: str, file_pattern: Optional[str], keywords: list[str], exact: bool) -> str:
    hints = list(NO_RESULTS_HINTS)
    if file_pattern:
        hints.insert(0, f"Nothing matched inside file_pattern {file_pattern!r}: try without it.")
    if exact and keywords:
        hints.insert(0, f"No chunk contains all of {keywords!r} exactly: try requires_exact_match=false.")
    return f"No results for {query_echo(query)!r}. " + " ".join(hints)
