"""Lexical baselines for `coderag eval`, each built once per corpus and answering with ranked (path, start, end).

- ``li-bm25``: LlamaIndex's own ``BM25Retriever`` (llama-index-retrievers-bm25, over bm25s with an
  English stemmer and stop words) over the same leaf nodes coderag's BM25 leg searches, read from the
  index's docstore, each with its breadcrumb in front as coderag's leg sees it. It measures our Qdrant
  sparse leg (code-aware terms, IDF from Qdrant) against the library's stock BM25 on the same chunks.
- ``bm25-window``: plain Okapi BM25 (k1=1.2, b=0.75, Lucene's non-negative IDF) over 40-line windows,
  overlapping by 20, of code files only. A *code file* is an indexed file whose detected language
  (nodes/languages.py) is a programming language: not markdown, rst, plain text, config or data
  formats (json, yaml, toml, ini, xml, html, css, sql). Terms are the query's and window's words
  (``[A-Za-z0-9_]+``, lower-cased) plus the parts of snake_case and camelCase words; each distinct query
  term counts once, so a long pasted log does not weigh a term by its repetitions. This is the
  "twenty-line script" of issue 15: no AST, no breadcrumbs, no fusion.

Both return :class:`Hit` lists (a :class:`~coderag.eval.metrics.Result` and the text it shows); the
runner scores them with the same metrics as coderag, and :func:`pack` makes their payload at the
same token budget.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coderag.eval.metrics import Result

WINDOW_LINES = 40
WINDOW_STRIDE = 20  # windows overlap by WINDOW_LINES - WINDOW_STRIDE = 20 lines
K1, B = 1.2, 0.75
CODE_LANGUAGES = frozenset({"python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp",
                            "csharp", "ruby", "php", "kotlin", "scala", "swift", "lua", "bash"})
_WORD = re.compile(r"[A-Za-z0-9_]+")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@dataclass(frozen=True)
class Hit:
    result: Result
    text: str


def terms(text: str) -> list[str]:
    """Lower-cased words and their snake/camel parts, words of one character dropped."""
    out: list[str] = []
    for w in _WORD.findall(text):
        low = w.lower()
        if len(low) > 1:
            out.append(low)
        parts = [p.lower() for p in _PART.findall(w)]
        if len(parts) > 1:
            out.extend(p for p in parts if len(p) > 1 and p != low)
    return out


class WindowBM25:
    """Okapi BM25 over fixed line windows of files, as a term-by-window sparse matrix of BM25 weights."""

    def __init__(self, windows: Sequence[tuple[str, int, int, str]]) -> None:
        import numpy as np
        from scipy.sparse import csc_matrix

        self.windows = list(windows)  # (path, start_line, end_line, text)
        vocab: dict[str, int] = {}
        rows, cols, tfs, lengths = [], [], [], []
        for i, (_, _, _, text) in enumerate(self.windows):
            counts = Counter(terms(text))
            lengths.append(sum(counts.values()))
            for t, c in counts.items():
                rows.append(i)
                cols.append(vocab.setdefault(t, len(vocab)))
                tfs.append(c)
        n = len(self.windows)
        tf = np.asarray(tfs, dtype=np.float32)
        col = np.asarray(cols, dtype=np.int64)
        df = np.bincount(col, minlength=len(vocab)).astype(np.float32)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        length = np.asarray(lengths, dtype=np.float32)
        norm = K1 * (1 - B + B * length / max(float(length.mean()) if n else 1.0, 1e-9))
        weight = idf[col] * tf * (K1 + 1) / (tf + norm[np.asarray(rows, dtype=np.int64)])
        self.matrix = csc_matrix((weight, (rows, cols)), shape=(n, len(vocab)))
        self.vocab = vocab

    @classmethod
    def from_files(cls, root: Path, paths: Iterable[str]) -> "WindowBM25":
        windows = []
        for path in sorted(paths):
            try:
                lines = (root / path).read_text(encoding="utf-8", errors="replace").split("\n")
            except OSError:
                continue
            if lines and lines[-1] == "":
                lines.pop()
            for start in range(0, max(len(lines) - (WINDOW_LINES - WINDOW_STRIDE), 1), WINDOW_STRIDE):
                chunk = lines[start:start + WINDOW_LINES]
                if any(line.strip() for line in chunk):
                    windows.append((path, start + 1, start + len(chunk), "\n".join(chunk)))
        return cls(windows)

    def search(self, query: str, k: int) -> list[Hit]:
        import numpy as np

        ids = sorted({self.vocab[t] for t in terms(query) if t in self.vocab})
        if not ids:
            return []
        scores = np.asarray(self.matrix[:, ids].sum(axis=1)).ravel()
        top = np.argsort(-scores, kind="stable")[:k]
        return [Hit(Result.block(*self.windows[i][:3]), self.windows[i][3]) for i in top if scores[i] > 0]


def code_files(index) -> list[str]:
    """Indexed files (searchable, any status) whose detected language is a programming language."""
    from coderag.store.state import SEARCHABLE

    return [p for p, r in index.state.files().items() if r.status in SEARCHABLE and r.language in CODE_LANGUAGES]


class LeafBM25:
    """LlamaIndex's BM25Retriever over the index's leaf nodes (what coderag's BM25 leg searches)."""

    def __init__(self, index, top_k: int) -> None:
        from llama_index.retrievers.bm25 import BM25Retriever

        leaves = [n for n in index.docstore.docs.values()
                  if n.metadata.get("is_leaf", True) and not n.metadata.get("duplicate_of")]
        if not leaves:
            raise ValueError("the index has no leaf nodes for li-bm25")
        self.size = len(leaves)
        self.retriever = BM25Retriever.from_defaults(nodes=leaves, similarity_top_k=min(top_k, len(leaves)))

    def search(self, query: str, k: int) -> list[Hit]:
        out = []
        for nws in self.retriever.retrieve(query)[:k]:
            m = nws.node.metadata
            out.append(Hit(Result.block(m["file_path"], int(m["start_line"]), int(m["end_line"])), nws.node.text))
        return out


def pack(hits: Sequence[Hit], count_tokens: Callable[[str], int], max_tokens: int) -> tuple[list[Result], int]:
    """The hits an agent would be shown within `max_tokens`, best first, each as ``path:start-end`` and its
    lines; one that does not fit is left out and the next tried (as coderag's packing does)."""
    shown, used = [], 0
    for h in hits:
        r = h.result
        cost = count_tokens(f"{r.file_path}:{r.spans[0][0]}-{r.spans[-1][1]}\n{h.text}\n")
        if used + cost <= max_tokens:
            shown.append(r)
            used += cost
    return shown, used
