"""A Jupyter notebook's cells as text whose lines are the notebook file's own lines.

Jupyter, VS Code and Colab write a notebook (nbformat 4) as indented JSON with each line of a cell's source
as one string on its own line of the file. So the text the index holds can keep the file's line numbers:
each source line of a code cell is that line decoded from its JSON string, each line of a markdown cell the
same behind a `# ` (a comment in Python, so the code around it still parses), the line that opens a cell's
source a comment that names the cell (`# cell 3, id 9f2c1a`: its number and the id an editor addresses it by),
and every other line (the JSON around the cells, their outputs and metadata) is blank. An answer's
`analysis.ipynb:40-52` is then lines 40 to 52 of the file as `sed -n` or an editor showing the JSON counts
them, and its text is the code.

A notebook written otherwise (a cell's source as one string, the JSON on one line), or in another kernel's
language, gives None: the file stays data, as every notebook was before (nodes/file_classes.py).

Stdlib only: nodes/file_classes.py and nodes/file_text.py call it during the walk.
"""

from __future__ import annotations

import json
import re
from typing import Optional

NOTEBOOK_SUFFIX = ".ipynb"
_LANGUAGE = "python"
_MARKDOWN_PREFIX = "# "
_CELL_KEY = re.compile(r'^([ \t]*)"cell_type": ')


def is_notebook(rel_path: str) -> bool:
    return rel_path.lower().endswith(NOTEBOOK_SUFFIX)


def _language(doc: dict) -> str:
    """The notebook's kernel language; a notebook that names none is Python's (nbformat's default kernel)."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        value = meta.get(key, {}).get(field) if isinstance(meta.get(key), dict) else None
        if isinstance(value, str) and value:
            return value.lower()
    return _LANGUAGE


def _element(line: str) -> Optional[str]:
    """The string that one line of a source array holds (`    "x = 1\\n",`), or None if the line is not one."""
    s = line.strip()
    if s.endswith(","):
        s = s[:-1]
    if not (s.startswith('"') and s.endswith('"') and len(s) >= 2):
        return None
    try:
        value = json.loads(s)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def notebook_text(text: str) -> Optional[str]:
    """`text` (a notebook file decoded, lines ended by LF) as the index holds it: as many lines, code cells'
    source lines as they are, markdown lines as comments, the rest blank (above); None when the file is not a
    Python notebook of one source line per line of JSON.

    Examples:
        >>> nb = json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Load\\n", "data"]},
        ...                            {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
        ...                             "source": ["import csv\\n", "rows = list(csv.reader(open('a.csv')))"]}],
        ...                  "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
        >>> lines = notebook_text(nb).split("\\n")
        >>> [(i + 1, ln) for i, ln in enumerate(lines) if ln]  # doctest: +NORMALIZE_WHITESPACE
        [(6, '# cell 1 (markdown)'), (7, '# # Load'), (8, '# data'), (16, '# cell 2'), (17, 'import csv'),
         (18, "rows = list(csv.reader(open('a.csv')))")]
        >>> nb.split("\\n")[16]
        '    "import csv\\\\n",'
        >>> notebook_text(json.dumps(json.loads(nb))) is None  # the whole notebook on one line
        True
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list) or _language(doc) != _LANGUAGE:
        return None
    lines = text.split("\n")
    out = [""] * len(lines)
    first = next((m for m in map(_CELL_KEY.match, lines) if m), None)
    if first is None:
        return None if cells else "\n".join(out)
    source_key = first.group(1) + '"source": '  # at the cells' own depth, never inside an output's data
    i = 0
    for number, cell in enumerate(cells, 1):
        source = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(source, str):
            source = [source] if source else []
        if not isinstance(source, list):
            return None
        while i < len(lines) and not lines[i].startswith(source_key):
            i += 1
        if i == len(lines):
            return None
        rest = lines[i][len(source_key):].strip()
        if rest in ("[]", "[],", '""', '"",'):
            if source:
                return None
            out[i] = _label(number, cell)
            i += 1
            continue
        if rest != "[":  # one string on the key's line: a cell of one line, mapped to that line
            value = _element(rest)
            if value is None or [value] != source or not _one_line(value):
                return None
            out[i] = _shown(cell, value)
            i += 1
            continue
        out[i] = _label(number, cell)
        for k, value in enumerate(source):
            line = lines[i + 1 + k] if i + 1 + k < len(lines) else ""
            if _element(line) != value or not _one_line(value):
                return None  # a string spans lines, or the JSON is laid out otherwise
            out[i + 1 + k] = _shown(cell, value)
        i += 1 + len(source)
    return "\n".join(out)


def _one_line(value: str) -> bool:
    """Whether a source string is one line (a line end, `\\n` or Windows' `\\r\\n`, may close it)."""
    body = value.rstrip("\r\n")
    return "\n" not in body and "\r" not in body


def _label(number: int, cell: dict) -> str:
    """The line that opens a cell's source: which cell it is, so that an agent can edit it by its id (Claude
    Code's NotebookEdit takes one) without reading the notebook first."""
    kind = cell.get("cell_type")
    cell_id = cell.get("id")
    named = f", id {cell_id}" if isinstance(cell_id, str) and cell_id.isprintable() and len(cell_id) <= 64 else ""
    return f"# cell {number}{'' if kind == 'code' else f' ({kind})'}{named}" if kind != "raw" else ""


def _shown(cell: dict, value: str) -> str:
    """One source line as the index holds it: a code cell's as it is, a markdown cell's as a comment, a raw
    cell's (text for a converter, not run) blank."""
    line = value.rstrip("\r\n")
    kind = cell.get("cell_type")
    if kind == "code":
        return line
    if kind == "markdown":
        return (_MARKDOWN_PREFIX + line).rstrip()
    return ""
