"""expand_result: the enclosing parent of a result, or the lines around it, so an agent need not read the file."""

from __future__ import annotations

import re
from typing import Optional

from coderag.base.budget import DEFAULT_MAX_TOKENS, EXPAND_CONTEXT_LINES, MAX_CONTEXT_LINES
from coderag.nodes.keys import END_LINE_KEY, START_LINE_KEY, SYMBOL_KEY
from coderag.nodes.safe_path import MISSING, readable_path
from coderag.postprocessors.lines import LineSource
from coderag.postprocessors.payload import SearchResult, SearchResults

_REF = re.compile(r"^(?P<path>.+):(?P<start>\d+)-(?P<end>\d+)$")
# A path that itself ends in a line or a range (`app.py:1-5:6-7`, `app.py:3:6-7`) is a malformed location,
# not a file that is gone.
_LINES_SUFFIX = re.compile(r":\d+(?:-\d+)?$")
MAX_PARENT_LINES = 400


def parse_ref(result_id: str, ref: Optional[dict]) -> dict:
    """The location a result id stands for: `ref` (what a search of this session stored for it), else the id
    read as 'path:START-END'. ValueError, saying what an id looks like, when it is neither.

    Examples:
        >>> parse_ref("src/app.py:3-9", None)
        {'file_path': 'src/app.py', 'start_line': 3, 'end_line': 9}
        >>> parse_ref("app.py:1-5:6-7", None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: 'app.py:1-5:6-7' is not a valid id: ...
    """
    if ref is not None:
        return ref
    m = _REF.match(result_id.strip())
    if not m:
        raise ValueError(f"Unknown result id {_shown(result_id)}. Pass an id from a search_code result of this "
                         "session, or a location as 'path/to/file.py:START-END'.")
    start, end = int(m["start"]), int(m["end"])
    if _LINES_SUFFIX.search(m["path"]) or not 1 <= start <= end:
        raise ValueError(f"{_shown(result_id)} is not a valid id: pass an id from a search_code result of this "
                         "session, or one location as 'path/to/file.py:START-END' (lines from 1, START <= END).")
    return {"file_path": m["path"], "start_line": start, "end_line": end}


def _not_ours(result_id: str, reason: str) -> str:
    return (f"{_shown(result_id)} is not a file of this repository ({reason}). Pass an id from a search_code "
            "result of this session, or 'path/from/the/repo/root.py:START-END' for a file in the index.")


def _clip(text: str) -> str:
    """`text` for an error message: cut short, lone surrogates escaped (they cannot be sent)."""
    text = text if len(text) <= 200 else text[:200] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _shown(result_id: str) -> str:
    return repr(_clip(result_id))


def check_path(index, result_id: str, path: str) -> None:
    """Raise ValueError unless `path` is an indexed file that may be read (nodes/safe_path.py): an id can
    be written by anyone, so it never reaches a file outside the root, in .coderag/, ignored, or that is not
    a regular file, nor one the index skipped (a secret or data file the indexer left out stays unread)."""
    from coderag.store.state import SEARCHABLE, STATUS_DIRTY

    real, reason = readable_path(index.root, path)
    if real is None:
        if reason == MISSING:
            raise ValueError(f"{_clip(path)} no longer exists (or is not readable): search again.")
        raise ValueError(_not_ours(result_id, reason))
    rec = index.state.file(path)
    if rec is None:
        raise ValueError(f"{path} is not in the index yet: search again, or run \"coderag index\" to add it.")
    if rec.status not in SEARCHABLE and rec.status != STATUS_DIRTY:
        raise ValueError(_not_ours(result_id, f"left out of the index: {rec.status}"))


def _enclosing(index, path: str, start: int, end: int):
    """The smallest indexed node of `path` that strictly contains start..end."""
    info = index.docstore.get_ref_doc_info(path)
    best = None
    for node_id in (info.node_ids if info else []):
        node = index.docstore.get_document(node_id, raise_error=False)
        if node is None:
            continue
        s, e = node.metadata[START_LINE_KEY], node.metadata[END_LINE_KEY]
        if s <= start and e >= end and (s, e) != (start, end) and e - s + 1 <= MAX_PARENT_LINES:
            if best is None or (e - s) < (best.metadata[END_LINE_KEY] - best.metadata[START_LINE_KEY]):
                best = node
    return best


def expand_result(index, result_id: str, ref: Optional[dict], context_lines: int = EXPAND_CONTEXT_LINES,
                  max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
    """A SearchResults dict with one block: the parent of the result, else +-context_lines around it."""

    if not 0 <= context_lines <= MAX_CONTEXT_LINES:
        raise ValueError(f"context_lines must be between 0 and {MAX_CONTEXT_LINES} (got {context_lines})")
    ref = parse_ref(result_id, ref)
    path, start, end = ref["file_path"], int(ref["start_line"]), int(ref["end_line"])
    check_path(index, result_id, path)
    source = LineSource(index.root)
    lines = source.lines(path)
    if lines is None:
        if source.refusal.get(path, MISSING) != MISSING:  # it changed into something else since the check
            raise ValueError(_not_ours(result_id, source.refusal[path]))
        raise ValueError(f"{path} no longer exists (or is not readable): search again.")
    parent = None if ref.get("lines_only") else _enclosing(index, path, start, end)
    if ref.get("lines_only") and start <= len(lines):  # a candidate line of a search: show its lines first
        s, e, symbol, how = start, min(end, len(lines)), ref.get("symbol", ""), "candidate"
    elif parent is not None and parent.metadata[END_LINE_KEY] <= len(lines):
        s, e, symbol, how = parent.metadata[START_LINE_KEY], parent.metadata[END_LINE_KEY], \
            parent.metadata.get(SYMBOL_KEY, ""), "enclosing definition"
    else:
        s, e, symbol, how = max(1, start - context_lines), min(len(lines), end + context_lines), "", "context lines"
    rec = index.state.file(path)
    from coderag.nodes.languages import detect_language
    from coderag.nodes.scan import iso_mtime

    res = SearchResults([SearchResult(id=result_id, file_path=path, start_line=s, end_line=e,
                                      language=(rec.language if rec and rec.language else detect_language(path)),
                                      symbol=symbol, kind=how, score=1.0,
                                      last_modified=iso_mtime(rec.mtime_ns) if rec else "",
                                      stale=bool(index.changed_files([path])), text="\n".join(lines[s - 1:e]))],
                        query=f"expand {result_id}", root=str(index.root), strategy=f"expand: {how}",
                        total_hits=1, max_tokens=max_tokens)
    res.tokens = index.count_tokens(res.to_xml())
    while res.tokens > max_tokens and res[0].end_line > res[0].start_line:
        r = res[0]
        keep = max(1, (r.end_line - r.start_line + 1) * max_tokens // res.tokens - 1)
        r.full_end_line = r.full_end_line or r.end_line
        r.end_line = r.start_line + keep - 1
        r.text = "\n".join(lines[r.start_line - 1:r.end_line])
        r.truncated = True
        res.tokens = index.count_tokens(res.to_xml())
    if res.tokens > max_tokens:  # not even one line fits: an error the caller can fix, never an oversized answer
        raise ValueError(f"max_tokens={max_tokens} is too small to show any line of {path}:{s}-{e} "
                         f"(one line takes {res.tokens} tokens with its frame): raise max_tokens to {res.tokens} or more.")
    return res.to_dict()
