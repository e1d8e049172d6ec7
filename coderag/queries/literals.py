"""Messages a chunk's string literals can print, matched against a pasted one: `"No such command {name!r}."`
prints "No such command 'statsu'.", `"%s is not a valid integer" % value` prints "'x' is not a valid integer".
Pure functions over strings."""

from __future__ import annotations

import re

# One-line string literals (an f/r/b prefix is left outside), and JS template strings.
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)+)"|\'((?:[^\'\\\n]|\\.)+)\'|`([^`]+)`')
# What a message template leaves to be filled: str.format / f-string / Rust format! fields, printf conversions
# (Go's %v, %w, %q and %T too), ${...}.
_PLACEHOLDER = re.compile(r"\{[^{}\n]*\}|%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrifxXeEgGcvwqtTp]|\$\{[^}]*\}")
_SPACE = re.compile(r"\s+")
MIN_FIXED_CHARS = 16  # what a template must say in its own words to count: "is not a valid integer", not "%s: %s"
MIN_FIXED_WORDS = 3


# Between two parts of one message: whitespace, a `+`, the next part's string prefix (f"...", r'...').
_JOIN = re.compile(r"\s*\+?\s*[rbfuRBFU]{0,2}")


def _messages(text: str) -> list[str]:
    """The one-line string literals of `text`, adjacent ones joined as the language joins them: a message
    wrapped over lines (`"Managed to invoke callback without a context"` / `f" object of type {t!r}"`)."""
    out: list[str] = []
    end = -1
    for m in _LITERAL.finditer(text):
        body = next(g for g in m.groups() if g is not None)
        if out and _JOIN.fullmatch(text, end, m.start()):
            out[-1] += body
        else:
            out.append(body)
        end = m.end()
    return out


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def message_pieces(literal: str) -> list[str]:
    """The fixed text of a message template, between its placeholders, lower case.

    >>> message_pieces("No such command {name!r}.")
    ['no such command', '.']
    """
    return [p for p in (_norm(piece) for piece in _PLACEHOLDER.split(literal)) if p]


def message_templates(text: str) -> list[tuple[list[str], int]]:
    """The messages `text` can print that say enough in their own words to count (MIN_FIXED_CHARS,
    MIN_FIXED_WORDS): each as its fixed pieces and their length."""
    out = []
    for literal in _messages(text):
        pieces = message_pieces(literal)
        fixed = sum(len(p) for p in pieces)
        if fixed >= MIN_FIXED_CHARS and len(" ".join(pieces).split()) >= MIN_FIXED_WORDS:
            out.append((pieces, fixed))
    return out


def message_coverage(text: str, query: str) -> float:
    """The share of the (whitespace-normalised) query that a string literal of `text` prints: its fixed pieces
    occur in the query in order and say at least MIN_FIXED_WORDS words and MIN_FIXED_CHARS characters. 0.0
    when no literal could have printed the query. A pasted message is mostly the template's own words; a
    report that quotes one is mostly other words.

    >>> round(message_coverage('ctx.fail(_("No such command {name!r}.").format(name=n))', "No such command 'statsu'."), 2)
    0.64
    >>> message_coverage('raise ValueError("invalid value")', "invalid value")
    0.0
    """
    templates = message_templates(text)
    if not templates:
        return 0.0
    q = _norm(query)
    best = 0.0
    for pieces, fixed in templates:
        at = 0
        for piece in pieces:
            at = q.find(piece, at)
            if at < 0:
                break
            at += len(piece)
        else:
            best = max(best, fixed / max(1, len(q)))
    return best
