"""A file's bytes as the text the index holds and answers show: UTF-8 with bad bytes replaced, tokens masked.

One function for both sides: the indexer (nodes/scan.py) and the reader of the lines an answer shows
(postprocessors/lines.py). So what is chunked, embedded, BM25-indexed, stored and served is the same text,
line for line, and a token is never in any of them.

- Tokens (API tokens and AWS secret access keys, file_classes.secret_spans) in a file that is indexed have
  their random part replaced, character for character, by `[SECRET MASKED]` and `*`: line numbers, columns
  and the issuer's prefix (`ghp_`) stay, and the line says what happened to it.
- Bytes that are not UTF-8 (a Latin-1 `é` in a comment) become U+FFFD; a newline is never part of a bad
  sequence, so line numbers stay exact. A file where more than MAX_REPLACED_SHARE of the characters come
  out so is not text in any encoding this reads: the indexer skips it as binary.
- The section `coderag init-claude` writes into CLAUDE.md is blanked (nodes/managed_section.py).

Stdlib only: the walk of a no-change run imports the scanner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from coderag.nodes.secret_tokens import line_of, secret_spans
from coderag.nodes.managed_section import blank_managed_sections
from coderag.nodes.notebook import notebook_text

REPLACED_NOTE = "decoded with replacement"  # an indexed file had bytes that are not UTF-8
MASKED_NOTE = "secret masked"  # an indexed file had a token, masked in every copy of its text
MASK_LABEL = b"[SECRET MASKED]"  # 15 bytes: every token's random part is longer (file_classes._API_TOKENS)
MASK_FILL = b"*"
MAX_REPLACED_SHARE = 0.3  # random bytes decode to about half U+FFFD; a legacy-encoded text to a few percent
MAX_MASKS_LISTED = 5
_BOM = b"\xef\xbb\xbf"
_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class DecodedText:
    """A file's text as indexed and shown ('\\n' line ends), with what was done to make it so."""

    text: str
    replaced: int = 0  # characters that came from bytes that are not UTF-8
    first_bad_byte: Optional[int] = None
    masked: tuple[tuple[int, str], ...] = ()  # (line, kind) of each masked token

    @property
    def mostly_undecodable(self) -> bool:
        return self.replaced > MAX_REPLACED_SHARE * max(1, len(self.text))

    def notes(self) -> list[tuple[str, str]]:
        """(note, detail) for each thing done to the file's text, as `coderag index --verbose` lists them;
        a detail names a token's kind and line, never its text."""
        out = []
        if self.masked:
            shown = ", ".join(f"{kind} at line {line}" for line, kind in self.masked[:MAX_MASKS_LISTED])
            more = len(self.masked) - MAX_MASKS_LISTED
            out.append((MASKED_NOTE, shown + (f" and {more} more" if more > 0 else "")))
        if self.replaced:
            out.append((REPLACED_NOTE, f"{self.replaced} byte(s) not UTF-8, the first at byte {self.first_bad_byte}"))
        return out


def mask(length: int) -> bytes:
    """What replaces `length` bytes of a token.

    Examples:
        >>> mask(20)
        b'[SECRET MASKED]*****'
    """
    return (MASK_LABEL + MASK_FILL * length)[:length] if length >= len(MASK_LABEL) else MASK_FILL * length


def mask_secrets(data: bytes) -> tuple[bytes, tuple[tuple[int, str], ...]]:
    """`data` with every token masked, and the (line, kind) of each.

    Examples:
        >>> masked, where = mask_secrets(b"x = 1\\nTOKEN = 'ghp_" + b"aB3" * 12 + b"'\\n")
        >>> masked
        b"x = 1\\nTOKEN = 'ghp_[SECRET MASKED]*********************'\\n"
        >>> where
        ((2, 'GitHub token'),)
    """
    spans = secret_spans(data)
    if not spans:
        return data, ()
    out = bytearray(data)
    for start, end, _ in spans:
        out[start:end] = mask(end - start)
    lines, line, pos = [], 1, 0
    for start, _, kind in spans:
        line, pos = line_of(data, start, pos, line), start
        lines.append((line, kind))
    return bytes(out), tuple(lines)


def decode_file(data: bytes, notebook: bool = False) -> DecodedText:
    """The text of a file's bytes (a UTF-8 BOM dropped, CRLF and a CR alone made LF, tokens masked, bad bytes
    replaced). A CR alone ends a line as editors and Node's readline (Claude Code's reader) end one, so a classic
    Mac file's line numbers are the ones they show. A `notebook`'s text is its cells, on its own lines
    (nodes/notebook.py).

    Examples:
        >>> ft = decode_file("# caf\\xe9\\ndef f():\\n    return 1\\n".encode("latin-1"))
        >>> ft.text.splitlines()[0], ft.replaced, ft.first_bad_byte
        ('# caf\\ufffd', 1, 5)
    """
    skip = len(_BOM) if data.startswith(_BOM) else 0
    if notebook:
        text, replaced, first = _decode(data[skip:], skip)
        cells = notebook_text(text)
        if cells is not None:  # else the file changed since it was classed (nodes/file_classes.py): its JSON
            # Its tokens are looked for in the cells' text, the JSON's escapes undone (a `\"` hides a quoted
            # password from the rules); the outputs, never indexed, are not read.
            raw, masked = mask_secrets(cells.encode("utf-8"))
            return DecodedText(raw.decode("utf-8", "replace"), replaced, first, masked)
    raw, masked = mask_secrets(data[skip:])
    text, replaced, first = _decode(raw, skip)
    return DecodedText(text, replaced, first, masked)


def notebook_cells(data: bytes) -> Optional[str]:
    """A notebook file's bytes as its cells' text, tokens not yet masked, decoded as `decode_file` decodes them
    (a BOM dropped, every line end made LF): None when they cannot be read as cells (nodes/notebook.py)."""
    skip = len(_BOM) if data.startswith(_BOM) else 0
    return notebook_text(_decode(data[skip:], skip)[0])


def _decode(raw: bytes, skip: int) -> tuple[str, int, Optional[int]]:
    """(text, characters replaced, the first bad byte's offset in the file) of bytes `raw` that start `skip`
    bytes into the file: UTF-8 with bad bytes replaced, lines ended by LF, CLAUDE.md's coderag section blank."""
    try:
        text, replaced, first = raw.decode("utf-8"), 0, None
    except UnicodeDecodeError as exc:
        text, first = raw.decode("utf-8", "replace"), skip + exc.start
        # U+FFFD the file itself holds (its UTF-8 is EF BF BD) was not a bad byte
        replaced = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return blank_managed_sections(text), replaced, first  # CLAUDE.md's coderag section is not the repo's
