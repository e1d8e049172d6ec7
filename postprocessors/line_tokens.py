"""Tokens of a file's lines as an XML payload shows them, counted once when the file is indexed.

Packing needs the exact token count of every block it considers. Encoding thousands of tokens of new blocks
was a large part of each search; with these counts a block costs one small encode (its header).

Why a snippet's count is a sum of per-line numbers: tiktoken splits text with cl100k's pre-tokenizer regex
before BPE, and BPE never merges across the pieces. A piece that contains a newline ends with it (a run of
punctuation takes the newlines after it, `[\\r\\n]*+`; whitespace goes up to its last newline,
`\\s*[\\r\\n]`), so the start of a line that holds a visible character, and no carriage return, is always
the start of a piece, whatever came before. Blank lines are the exception (`"):\\n\\n"` is one piece), so
the unit is a *segment*: a visible line and the blank lines after it. A snippet made of whole segments
costs the sum of theirs; the payload's header before it ends with `<snippet>\\n` and the frame after it
starts a line with `    </snippet>`, both piece boundaries, so

    tokens(block) = tokens(header) + sum(segments of the snippet) + tokens(footer)

The counts are of XML-escaped lines (the agent format); other formats count blocks as before. Tests check
the sum against a full count for every block of real files (`tests/test_line_tokens.py`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import accumulate
from typing import Any, Optional, Sequence

from coderag.postprocessors.payload import xml_escape
from coderag.postprocessors.tokenizer import PayloadTokenizer

def file_line_tokens(text: str, tok: PayloadTokenizer) -> Optional[bytes]:
    """A file's segment counts as stored in the index (see `segment_counts`), or None."""
    from coderag.postprocessors.lines import split_lines

    counts = segment_counts(split_lines(text), tok)
    return counts.tobytes() if counts is not None else None


def starts_segment(escaped_line: str) -> bool:
    """A line whose start is always a piece boundary: a visible character, no carriage return. Python's
    `isspace` covers every character the regex's `\\s` does, so this never says yes wrongly."""
    return "\r" not in escaped_line and not escaped_line.isspace() and escaped_line != ""


def segment_counts(lines: Sequence[str], tok: PayloadTokenizer) -> Optional[array]:
    """Per line of a file: the tokens of the segment that starts there (as XML-escaped, each line followed
    by a newline), 0 for a line inside a segment. The first line always starts one. None if a token
    straddles a segment start (never seen; the caller then counts blocks by encoding them)."""
    esc = [xml_escape(line) for line in lines]
    tokens = tok.encode("".join(e + "\n" for e in esc))
    ends = list(accumulate(map(tok.widths().__getitem__, tokens)))
    counts = array("I", bytes(4 * len(esc)))
    offset, start_line, start_tok = 0, 0, 0
    for i, e in enumerate(esc):
        if i and starts_segment(e):
            k = bisect_left(ends, offset)  # tokens that end at or before this line's first byte
            if k == len(ends) or ends[k] != offset:
                return None
            counts[start_line] = k + 1 - start_tok
            start_line, start_tok = i, k + 1
        offset += len(e.encode("utf-8", "surrogatepass")) + 1
    if esc:
        counts[start_line] = len(tokens) - start_tok
    return counts


def snippet_tokens(counts: Sequence[int], start: int, end: int, esc_lines: Any,
                   tok: PayloadTokenizer) -> Optional[int]:
    """Tokens of lines start..end (1-based, inclusive) shown as a snippet, from a file's segment counts; None
    when the first line does not start a segment (a blank first line: count the block instead).
    `esc_lines(a, b)` gives the escaped lines a..b, needed only when the last segment runs past `end`."""
    if not (1 <= start <= end <= len(counts)) or counts[start - 1] == 0:
        return None
    total = sum(counts[start - 1:end])
    if end < len(counts) and counts[end] == 0:  # the last segment goes on past `end`: count its part here
        last = end
        while counts[last - 1] == 0:
            last -= 1
        total -= counts[last - 1]
        total += tok.count("".join(e + "\n" for e in esc_lines(last, end)))
    return total
