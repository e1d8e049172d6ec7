"""Evidence about a candidate that the whole indexed tree gives and no leg's answer holds: how central its file is
in the import graph, how big its file is, and how often the chunk is among other chunks' nearest neighbours.
Issue 28 lists centrality as evidence to try; a file that is first for many questions and right for few (a hub:
eval/misses.py) is what it would tell apart. None of these is a feature of the shipped model: they are columns an
ablation adds (`add:NAME` in eval/ranker_ablations.py), computed offline from an indexed tree, so that whether
the model gains from them can be run again when the training data grows.

- `indeg`: the file's import in-degree, log(1 + n), and its share of the highest among the query's candidate
  files. A file's names are its stem (`parser` for `parser.py`), or its folder's name for a package's index file
  (`__init__.py`, `index.ts`, `mod.rs`, `lib.rs`) and for every Go file (Go imports folders); another file
  counts when an import-like line of it (`import`, `from … import`, `use`, `mod`, `#include`, `require(`, a Go
  import block's quoted path; a bracketed list to its closing bracket) holds one of those names as a word. No
  resolution of paths: two `utils.ts` share their importers. Enough to tell a hub from a leaf.
- `size`: the file's chunks in the index (`n_leaves`), log(1 + n), and its share of the largest candidate file.
- `knn`: the chunk's k-occurrence (how many chunks have it among their 10 nearest by the dense vectors; a hub
  of the vector space has many, Radovanović et al. 2010), the mean cosine to its own 10 nearest (CSLS's local
  density), and its file's highest k-occurrence, raw and as a share of the candidates' highest.

    python -m coderag.eval.tree_evidence TREE     # an indexed tree's most imported files and its hubs
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

KNN_K = 10
CODE_SUFFIXES = frozenset((".py", ".pyi", ".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs", ".go", ".rs",
                           ".java", ".kt", ".scala", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift"))
_INDEX_STEMS = frozenset(("index", "__init__", "mod", "lib", "main"))
_SKIPPED_FOLDERS = frozenset(("node_modules", "vendor", "target", "dist", "build"))
_IMPORT_LINE = re.compile(r'^[ \t]*(?:from\s+\S+\s+import\b|import\b|(?:pub\s+)?use\b|(?:pub\s+)?mod\b|#\s*include\b'
                          r'|export\b.*\bfrom\b|require\b|"[^"\s]+"\s*$|[A-Za-z_]+\s+"[^"\s]+"\s*$)'
                          r'|\brequire\s*\(|\bimport\s*\(', re.M)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
COLUMNS = {"indeg": ("file_in_degree", "file_in_degree_rel"), "size": ("file_leaves", "file_leaves_rel"),
           "knn": ("chunk_k_occurrence", "chunk_knn_density", "file_k_occurrence", "file_k_occurrence_rel")}


def module_names(path: str) -> set[str]:
    """The words an import of the file at POSIX `path` would spell."""
    p = Path(path)
    stem = p.name.split(".")[0]
    if stem in _INDEX_STEMS or p.suffix == ".go":
        return {p.parent.name} if p.parent.name else set()
    return {stem}


def imported_words(text: str) -> set[str]:
    """The words of a file's import-like lines, each bracketed list read to its close."""
    words: set[str] = set()
    for m in _IMPORT_LINE.finditer(text):
        end = text.find("\n", m.start())
        end = len(text) if end < 0 else end
        line = text[m.start():end]
        for opening, closing in (("(", ")"), ("{", "}")):
            if line.count(opening) > line.count(closing):
                close = text.find(closing, end)
                end = close if close >= 0 else end
        words.update(_WORD.findall(text[m.start():end]))
    return words


def import_in_degree(root: Path) -> dict[str, int]:
    """Each code file's import in-degree: how many other files of the tree import one of its names."""
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in _SKIPPED_FOLDERS]
        files += [Path(folder, n).relative_to(root).as_posix() for n in names if Path(n).suffix in CODE_SUFFIXES]
    by_name: dict[str, set[str]] = defaultdict(set)
    for path in files:
        for name in module_names(path):
            by_name[name].add(path)
    importers: dict[str, set[str]] = defaultdict(set)
    for path in files:
        try:
            words = imported_words((root / path).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        for word in words:
            for target in by_name.get(word, ()):
                if target != path:
                    importers[target].add(path)
    return {path: len(importers.get(path, ())) for path in files}


def file_leaves(root: Path) -> dict[str, int]:
    """Each indexed file's chunks, from the index's manifest (read only)."""
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        return {path: rec.n_leaves for path, rec in state.files().items()}
    finally:
        state.close()


def knn_hubness(root: Path, k: int = KNN_K) -> dict[tuple[str, int, int], tuple[int, float]]:
    """(file, start, end) -> (k-occurrence, mean cosine to its k nearest) for every chunk with a dense vector."""
    import numpy as np

    from coderag.pipelines.code_index import CodeIndex

    with CodeIndex.open(root, create=False) as index:
        vectors, fields = index.vector_store.dense_vectors()
    if len(vectors) < 2:
        return {}
    v = np.asarray(vectors, dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True) + 1e-9
    n, k = len(v), min(k, len(vectors) - 1)
    occurrence, density = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float32)
    for start in range(0, n, 2048):  # a block of rows at a time: n x n would not fit for a big tree
        sims = v[start:start + 2048] @ v.T
        sims[np.arange(sims.shape[0]), start + np.arange(sims.shape[0])] = -2.0  # not its own neighbour
        nearest = np.argpartition(-sims, k, axis=1)[:, :k]
        np.add.at(occurrence, nearest.ravel(), 1)
        density[start:start + 2048] = np.take_along_axis(sims, nearest, axis=1).mean(axis=1)
    return {(f["file_path"], int(f["start_line"]), int(f["end_line"])): (int(o), float(d))
            for f, o, d in zip(fields, occurrence, density)}


class TreeEvidence:
    """The three kinds of evidence of one indexed tree, computed once (k-occurrence cached in `cache`, a JSON
    file, since it reads every vector)."""

    def __init__(self, root: Path, cache: Path | None = None) -> None:
        self.in_degree = import_in_degree(root)
        self.leaves = file_leaves(root)
        if cache is not None and cache.is_file():
            rows = json.loads(cache.read_text(encoding="utf-8"))
        else:
            rows = [[*span, *value] for span, value in knn_hubness(root).items()]
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(rows), encoding="utf-8")
        self.chunk_knn = {(f, s, e): (o, d) for f, s, e, o, d in rows}
        self.file_knn: dict[str, int] = {}
        for (f, _, _), (o, _) in self.chunk_knn.items():
            self.file_knn[f] = max(self.file_knn.get(f, 0), o)

    def columns(self, name: str, places: Sequence[Any]) -> list[list[float]]:
        """Evidence `name` (a key of COLUMNS) for a query's candidates, given as (file_path, spans) results."""
        files = [p.file_path for p in places]
        if name == "indeg":
            return _with_share([math.log1p(self.in_degree.get(f, 0)) for f in files])
        if name == "size":
            return _with_share([math.log1p(self.leaves.get(f, 0)) for f in files])
        per_file = _with_share([math.log1p(self.file_knn.get(f, 0)) for f in files])
        out = []
        for p, file_cols in zip(places, per_file):
            occurrence, density = self.chunk_knn.get((p.file_path, *p.spans[0]), (0, 0.0))
            out.append([math.log1p(occurrence), density, *file_cols])
        return out


def _with_share(values: Iterable[float]) -> list[list[float]]:
    values = list(values)
    top = max(values, default=0.0)
    return [[v, v / top if top > 0 else 0.0] for v in values]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not (Path(args[0]) / ".coderag").is_dir():
        print("usage: python -m coderag.eval.tree_evidence TREE (an indexed tree: `coderag index TREE` first)",
              file=sys.stderr)
        return 2
    root = Path(args[0])
    evidence = TreeEvidence(root)
    print("most imported files:")
    for path, n in sorted(evidence.in_degree.items(), key=lambda x: -x[1])[:10]:
        print(f"  {n:5d}  {path}")
    print(f"chunks most often among others' {KNN_K} nearest:")
    for (f, s, e), (o, d) in sorted(evidence.chunk_knn.items(), key=lambda x: -x[1][0])[:10]:
        print(f"  {o:5d}  {f}:{s}-{e}  (mean cosine to its own nearest {d:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
