"""Token counts of a rendered payload for the price of one tokenizer pass over each block shown.

Counting with tiktoken costs time in proportion to the text counted, so a packer that renders and
counts every try (each step of a binary search for the cut, then the whole payload again, and again when
the count changes the width of its own number) spends more time counting than searching. Here each block
is rendered once, with its snippet, and encoded once:

* the block's tokens as rendered are exact (its cost when it fits whole);
* the byte widths of those tokens give the tokens of every line prefix of the snippet (cl100k pre-tokenizes
  at line breaks, so a prefix count is exact, or one over where a token spans the break, like `):\\n`);
* an XML payload is the sum of its parts: the head ends with `>\\n`, every result starts with `  <result`
  and ends with `>\\n`, and cl100k's pre-tokenizer never joins across that boundary, so the payload's
  tokens are head + results + tail without encoding it again (tests check the sum against a full count);
* better still, an XML block of a file unchanged since indexing is not encoded at all: its snippet costs
  the sum of the file's stored segment counts, its header the sum of its lines' counts (see
  line_tokens.py), and only header lines not seen before are encoded.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import Any, Callable, Mapping, Optional, Sequence

from coderag.nodes.keys import END_LINE_KEY, FILE_PATH_KEY, START_LINE_KEY
from coderag.postprocessors.line_tokens import snippet_tokens, starts_segment
from coderag.postprocessors.payload import (CANDIDATES_TEXT_HEAD, CANDIDATES_XML_CLOSE, CANDIDATES_XML_OPEN, Candidate,
                                            SearchResult, SearchResults, render_candidate_text, render_candidate_xml,
                                            render_xml_frame, xml_escape, xml_result_head,
                                            xml_result_tail)
from coderag.postprocessors.tokenizer import PayloadTokenizer

# An invisible separator no escaping changes: splits a rendered block into what comes before and after
# its snippet.
SENTINEL = "\u2063\u2063snippet\u2063\u2063"
SLACK = 2  # tokens a snippet may share with the frame where it starts and ends

# Header lines that repeat from block to block (file, language, date): counted once and remembered.
_REPEATING = ("    <source_file>", "    <language>", "    <last_modified>", "    <snippet>", "    <stale>")


@dataclass
class _Block:
    total: int  # tokens of the whole block as rendered (exact)
    before: str  # the rendered block up to its snippet
    after: str  # and after it
    text: str  # the snippet, unescaped
    counts: Optional[Sequence[int]] = None  # its file's segment counts, when priced from them
    start: int = 0  # the snippet's first line in the file (with counts)
    esc: Optional[list[str]] = None  # the snippet's lines, escaped: on need
    lines: Optional[list[str]] = None  # the snippet's lines, as they are: on need
    tokens: Optional[Sequence[int]] = None  # the block's tokens (tiktoken only): on need
    prefix: Optional[list[int]] = None  # tokens of the snippet's first k lines, k = 0..n: on need
    cut_frame: Optional[int] = None  # tokens of a cut block's frame (lines, truncation marker): on need


class PayloadCost:
    """Prices blocks for `TokenBudgetPostprocessor` and counts the final payload.

    `result(nws, text, truncated)` builds the SearchResult a node renders as; `render_one` renders one
    result in the payload's format; `tokenizer` counts (and remembers what it counted, across searches).
    `line_tokens` maps a file to its stored segment counts (XML only; given only for files just found
    unchanged): a block of such a file is priced by encoding its header alone.
    """

    def __init__(self, fmt: str, render_one: Callable[[SearchResult], str], tokenizer: PayloadTokenizer,
                 result: Callable[[Any, str, bool], SearchResult],
                 line_tokens: Optional[Mapping[str, Sequence[int]]] = None) -> None:
        self.fmt = fmt
        self._render_one, self._tok, self._count, self._result = render_one, tokenizer, tokenizer.count, result
        self._line_tokens = line_tokens if fmt == "xml" else None
        self._footers: dict[str, int] = {}
        self._candidates_frame: Optional[int] = None
        if fmt == "json":
            self._escape, self._sep = (lambda s: json.dumps(s, ensure_ascii=False)[1:-1]), "\\n"
        elif fmt == "xml":
            self._escape, self._sep = xml_escape, "\n"
        else:
            self._escape, self._sep = str, "\n"
        self._blocks: dict[int, _Block] = {}

    # -- blocks -----------------------------------------------------------------------------------
    def _split(self, nws: Any, truncated: bool) -> tuple[str, str]:
        r = self._result(nws, SENTINEL, truncated)
        if self.fmt != "json":
            # XML and text show the score as d.dddd: always the same tokens (cl100k takes 1-3 digits
            # per token), so a block is counted with a fixed score and its count reused across searches.
            r.score = 0.0
        before, _, after = self._render_one(r).partition(self._escape(SENTINEL))
        return before, after

    def _block(self, nws: Any) -> _Block:
        key = id(nws)
        block = self._blocks.get(key)
        if block is None:
            block = self._from_line_tokens(nws) if self._line_tokens else None
            if block is None:
                text = nws.node.get_content()
                before, after = self._split(nws, False)
                block = _Block(0, before, after, text)
                block.tokens = self._tok.encode_cached(before + self._sep.join(self._escaped(block)) + after)
                block.total = len(block.tokens)
            self._blocks[key] = block
        return block

    def _from_line_tokens(self, nws: Any) -> Optional[_Block]:
        """The block priced from its file's stored segment counts (see line_tokens.py): its header lines are
        segments too, mostly the same from block to block, so only the new ones are encoded. None where
        the counts do not apply. Prices are remembered by header, lines and counts (the counts object
        stands for the file's content: a changed file gets new counts), for blocks shown again."""
        m = nws.node.metadata
        counts = self._line_tokens.get(m.get(FILE_PATH_KEY))
        if counts is None:
            return None
        text = nws.node.get_content()
        start, end = int(m[START_LINE_KEY]), int(m[END_LINE_KEY])
        r = self._result(nws, "", False)
        r.score = 0.0  # as in _split
        head, tail = xml_result_head(r), xml_result_tail(r)
        block = _Block(0, "\n".join(head) + "\n", tail, text, counts=counts, start=start)
        key = ("counted", block.before, start, end)
        hit = self._tok.remembered(key)
        if hit is not None and hit[0] is counts:
            block.total = hit[1]
            return block
        blank = len(text) - len(text.lstrip("\n"))  # leading empty lines (a window or a doc section)
        first = text[blank:].split("\n", 1)[0]
        if text.count("\n") != end - start or start + blank > end or not starts_segment(self._escape(first)):
            return None
        snippet = snippet_tokens(counts, start + blank, end, self._esc_range(block), self._tok)
        head_tokens = self._lines_tokens(head)
        if snippet is None or head_tokens is None:
            return None
        if blank:
            head_tokens += self._blank_lead(blank)
        footer = self._footers.get(tail)
        if footer is None:
            footer = self._footers[tail] = self._count(tail[1:])
        block.total = head_tokens + snippet + footer
        self._tok.remember(key, (counts, block.total))
        return block

    def _blank_lead(self, k: int) -> int:
        """What `k` empty lines at the start of a snippet add to its header's count. The header ends with
        `<snippet>` and a newline, and the pre-tokenizer's punctuation piece `>` takes every newline that
        follows it (`[\\r\\n]*`): `>` plus k + 1 newlines replaces the `>` plus one newline counted with the
        header, and the first visible line after them starts a piece as it does in the file."""
        return self._tok.cached(("blank lead", k), lambda: self._count(">" + "\n" * (k + 1)) - self._count(">\n"))

    def _lines_tokens(self, lines: list[str]) -> Optional[int]:
        """Tokens of these header lines, each followed by a newline (each starts a segment). Lines that
        repeat (file, language, date) are counted once and remembered; the rest are counted together."""
        total, rest = 0, []
        for line in lines:
            if not starts_segment(line) or "\n" in line:  # a file name with a line break in it
                return None
            if line.startswith(_REPEATING):
                total += self._tok.cached(("header line", line), lambda: self._count(line + "\n"))
            else:
                rest.append(line)
        return total + (self._count("\n".join(rest) + "\n") if rest else 0)

    def _esc_range(self, block: _Block) -> Callable[[int, int], list[str]]:
        """Escaped lines a..b (numbered as in the file) of a block priced from counts; the block's text is
        split once, on the first call (each step of the binary search for a cut asks again)."""
        def escaped(a: int, b: int) -> list[str]:
            return [self._escape(x) for x in self._lines(block)[a - block.start:b - block.start + 1]]
        return escaped

    @staticmethod
    def _lines(block: _Block) -> list[str]:
        if block.lines is None:
            block.lines = block.text.split("\n")
        return block.lines

    def _escaped(self, block: _Block) -> list[str]:
        if block.esc is None:
            block.esc = [self._escape(line) for line in self._lines(block)]
        return block.esc

    def _prefixes(self, block: _Block) -> list[int]:
        if block.prefix is not None:
            return block.prefix
        esc = self._escaped(block)
        if block.tokens is None:  # priced from line counts: the cut needs the block's own tokens
            block.tokens = self._tok.encode_cached(block.before + self._sep.join(esc) + block.after)
        tokens = block.tokens
        ends = list(accumulate(map(self._tok.widths().__getitem__, tokens)))
        start = len(block.before.encode())
        head = bisect_right(ends, start)  # tokens wholly before the snippet
        prefix, offset, sep_len = [0], start, len(self._sep.encode())
        for i, e in enumerate(esc):
            offset += (sep_len if i else 0) + len(e.encode())
            # tokens that end before this line does, plus the one that ends with it or spans its end
            prefix.append(max(0, min(len(tokens), bisect_left(ends, offset) + 1) - head))
        block.prefix = prefix
        return prefix

    def min_block_tokens(self) -> int:
        """A lower bound of any block's tokens: the frame of a result with empty fields (counted once per
        format)."""
        empty = SearchResult(id="", file_path="", start_line=1, end_line=1, language="", symbol="", kind="",
                             score=0.0, last_modified="", stale=False, text="")
        return self._tok.cached(("min block", self.fmt), lambda: max(1, self._count(self._render_one(empty))))

    # -- the packer's prices ------------------------------------------------------------------------
    def cost(self, nws: Any, text: str, truncated: bool) -> int:
        """Tokens of the block showing `text` (the packer asks for whole blocks; anything else is rendered)."""
        if truncated or text != nws.node.get_content():
            return self._count(self._render_one(self._result(nws, text, truncated))) + SLACK
        return self._block(nws).total

    def prefix_cost(self, nws: Any, k: int) -> int:
        """Tokens of the block cut after its first k lines, truncation marker included."""
        block = self._block(nws)
        if block.cut_frame is None:
            before, after = self._split(nws, True)
            block.cut_frame = self._count(before) + self._count(after)
        if block.counts is not None:
            n = 0 if k == 0 else snippet_tokens(block.counts, block.start, block.start + k - 1,
                                                self._esc_range(block), self._tok)
            if n is not None:
                return block.cut_frame + n + SLACK
        return block.cut_frame + self._prefixes(block)[k] + SLACK

    # -- candidate lines ----------------------------------------------------------------------------
    def candidate_cost(self, c: Candidate) -> int:
        """Tokens one candidate line adds. XML: exact (a line starts with spaces after `>\\n` and ends with
        `>\\n`, as a result does, so the sum rule holds); JSON and text: the line alone, which the final
        count of the payload corrects."""
        if self.fmt == "xml":
            line = render_candidate_xml(c)
        elif self.fmt == "json":
            line = json.dumps(asdict(c), ensure_ascii=False) + ", "
        else:
            line = render_candidate_text(c)
        return self._tok.cached(("candidate line", line), lambda: self._count(line))  # the same places recur

    def candidates_frame_cost(self) -> int:
        """Tokens the candidates section adds around its lines (JSON: the frame holds its empty list)."""
        if self._candidates_frame is None:
            if self.fmt == "xml":
                n = self._count(CANDIDATES_XML_OPEN) + self._count(CANDIDATES_XML_CLOSE)
            elif self.fmt == "json":
                n = 0
            else:
                n = self._count("\n" + CANDIDATES_TEXT_HEAD) + 1
            self._candidates_frame = n
        return self._candidates_frame

    # -- the payload --------------------------------------------------------------------------------
    def payload_tokens(self, out: SearchResults, packed: list, render_all: Callable[[SearchResults], str]) -> int:
        """Exact tokens of `out` as rendered. `packed[i]` is the node `out[i]` came from: a result that
        is still the whole block priced here is not encoded again (XML only: the sum rule above)."""
        if self.fmt != "xml" or not out:
            return self._count(render_all(out))
        head, tail = render_xml_frame(out, len(out), out.tokens)
        total = self._count(head) + self._count(tail)
        if out.candidates:  # the sum rule holds for candidate lines too
            total += self.candidates_frame_cost() + sum(map(self.candidate_cost, out.candidates))
        for r, nws in zip(out, packed):
            block = self._blocks.get(id(nws))
            whole = (block is not None and not r.truncated and not r.also_in
                     and r.end_line == int(nws.node.metadata[END_LINE_KEY]))
            total += block.total if whole else self._count(self._render_one(r))
        return total
