"""Labelled retrieval queries over the pinned corpora, their loader and their validator.

One JSON Lines file per corpus in ``eval/datasets/``; one query per line::

    {"id": "click-1", "corpus": "click", "query": "...", "kind": "natural", "split": "tune",
     "gold": [{"file_path": "src/click/core.py", "start_line": 10, "end_line": 42}]}

``file_path`` is a POSIX path relative to :func:`coderag.eval.corpora.fetch` (the
corpus root); lines are 1-based and inclusive. A query of a local snapshot corpus
(:mod:`coderag.eval.snapshots`) also has ``repo`` ("owner/name") and ``commit``, which name
its snapshot, and its paths are relative to that snapshot. ``split`` is ``tune`` (what
settings may be chosen on) or ``heldout`` (reported apart, never tuned on; see
eval/RESULTS.md); a record without one is ``tune``. ``kind`` is one of:

- ``identifier``: names a symbol ("HTTPStatusError raise_for_status");
- ``natural``: describes behaviour without the symbol's identifiers or their word parts;
- ``docstring``: a docstring's first sentence (CodeSearchNet style);
- ``issue``: a bug report as a user would file it, maybe with a short traceback;
- ``commit``: a commit's message, its gold the source lines it changed (mined: eval/history.py);
- ``test``: the description of a test a commit added, with that commit's gold (mined: eval/history.py).

Command line::

    python -m coderag.eval.datasets list
    python -m coderag.eval.datasets validate [NAME|PATH|all] [--offline]

``validate`` prints the counts by kind of each dataset and every error, fetching the
corpora (a download on first use) to check the gold ranges unless ``--offline``; it
exits 1 when there is any error.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from coderag.eval.corpora import CORPORA, SNAPSHOTS, CorpusError, fetch, snapshot_root

__all__ = [
    "DATASETS_DIR",
    "KINDS",
    "DatasetError",
    "Gold",
    "Query",
    "list_datasets",
    "load_all",
    "load_dataset",
    "parse_record",
    "validate",
]

DATASETS_DIR = Path(__file__).resolve().parent / "datasets"
WRITTEN_KINDS = ("identifier", "natural", "docstring", "issue")  # what the shipped datasets hold, each corpus all four
# Mined from history (eval/history.py: commit messages, the descriptions of the tests commits add), never shipped.
KINDS = WRITTEN_KINDS + ("commit", "test")
SPLITS = ("tune", "heldout")
_FIELDS = {"id", "corpus", "query", "gold", "kind"}
_OPTIONAL = {"split", "repo", "commit"}
_GOLD_FIELDS = {"file_path", "start_line", "end_line"}


class DatasetError(ValueError):
    """A dataset file is missing or malformed."""


class Gold(NamedTuple):
    """One expected location: a file and a 1-based inclusive line range."""

    file_path: str
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Query:
    id: str
    corpus: str
    query: str
    gold: tuple[Gold, ...]
    kind: str
    split: str = "tune"
    repo: str | None = None  # a snapshot corpus' query: the repository and commit of its snapshot
    commit: str | None = None

    @property
    def location(self) -> tuple[str, str | None, str | None]:
        """What to index for this query: the corpus, and for a snapshot corpus its repo and commit."""
        return (self.corpus, self.repo, self.commit)

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "corpus": self.corpus,
            "query": self.query,
            "gold": [g._asdict() for g in self.gold],
            "kind": self.kind,
            "split": self.split,
        }
        if self.repo is not None:
            out.update(repo=self.repo, commit=self.commit)
        return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _schema_errors(rec: Any, where: str) -> list[str]:
    if not isinstance(rec, dict):
        return [f"{where}: record is not a JSON object"]
    errors: list[str] = []
    missing = _FIELDS - rec.keys()
    extra = rec.keys() - _FIELDS - _OPTIONAL
    if missing:
        errors.append(f"{where}: missing field(s) {', '.join(sorted(missing))}")
    if extra:
        errors.append(f"{where}: unexpected field(s) {', '.join(sorted(extra))}")
    for name in ("id", "corpus", "query", "kind", "split", "repo", "commit"):
        if name in rec and (not isinstance(rec[name], str) or not rec[name].strip()):
            errors.append(f"{where}: {name} must be a non-empty string")
    if ("repo" in rec) != ("commit" in rec):
        errors.append(f"{where}: repo and commit come together (they name a snapshot)")
    if "gold" in rec:
        gold = rec["gold"]
        if not isinstance(gold, list) or not gold:
            errors.append(f"{where}: gold must be a non-empty list")
        else:
            for i, g in enumerate(gold):
                gw = f"{where}: gold[{i}]"
                if not isinstance(g, dict):
                    errors.append(f"{gw}: not an object")
                    continue
                if g.keys() != _GOLD_FIELDS:
                    errors.append(f"{gw}: fields must be exactly file_path, start_line, end_line")
                    continue
                fp = g["file_path"]
                if not isinstance(fp, str) or not fp:
                    errors.append(f"{gw}: file_path must be a non-empty string")
                elif "\\" in fp or fp.startswith("/") or ".." in PurePosixPath(fp).parts or fp != str(PurePosixPath(fp)):
                    errors.append(f"{gw}: file_path {fp!r} is not a normalized relative POSIX path")
                if not _is_int(g["start_line"]) or not _is_int(g["end_line"]):
                    errors.append(f"{gw}: start_line and end_line must be integers")
    return errors


def parse_record(rec: Any, where: str = "record") -> tuple[Query | None, list[str]]:
    """Check one raw record's schema; return the Query (None if unusable) and errors."""
    errors = _schema_errors(rec, where)
    if errors:
        return None, errors
    gold = tuple(Gold(g["file_path"], g["start_line"], g["end_line"]) for g in rec["gold"])
    return Query(rec["id"], rec["corpus"], rec["query"], gold, rec["kind"], rec.get("split", "tune"),
                 rec.get("repo"), rec.get("commit")), []


def _dataset_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".jsonl" or p.is_file():
        return p
    return DATASETS_DIR / f"{name_or_path}.jsonl"


def _read(path: Path) -> tuple[list[Query], list[str]]:
    if not path.is_file():
        raise DatasetError(f"no dataset at {path}; known: {', '.join(list_datasets()) or 'none'}")
    queries: list[Query] = []
    errors: list[str] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{where}: invalid JSON: {exc}")
                continue
            q, errs = parse_record(rec, where)
            errors.extend(errs)
            if q is not None:
                queries.append(q)
    return queries, errors


def load_dataset(name_or_path: str | Path) -> list[Query]:
    """Load a dataset by corpus name (``eval/datasets/NAME.jsonl``) or by path.

    Raises :class:`DatasetError` when the file is missing or any record is malformed.
    """
    path = _dataset_path(name_or_path)
    queries, errors = _read(path)
    if errors:
        raise DatasetError(f"{path}: {len(errors)} schema error(s):\n" + "\n".join(errors))
    return queries


def list_datasets() -> list[str]:
    """Names of the datasets shipped in ``eval/datasets/``."""
    return sorted(p.stem for p in DATASETS_DIR.glob("*.jsonl"))


def load_all() -> list[Query]:
    """Every shipped dataset, concatenated."""
    return [q for name in list_datasets() for q in load_dataset(name)]


def file_lines(path: Path) -> list[str]:
    """A file's lines as editors and tree-sitter number them (a final newline ends the last line)."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")  # line numbers as editors and tree-sitter count them
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def validate(
    queries: Iterable[Query | dict],
    root_for_corpus: Callable[[str], Path] | None = fetch,
    corpora: Collection[str] | None = None,
) -> list[str]:
    """Return every problem found in ``queries`` (an empty list when they are sound).

    Raw dicts are schema-checked first. ``root_for_corpus`` maps a corpus name to its
    root directory (default: fetch it); pass None to skip the checks against files.
    ``corpora`` is the set of known corpus names (default: the registry). A snapshot corpus' root is
    the folder of its snapshots; each query's files are looked up in its own snapshot there.
    """
    known = set([*CORPORA, *SNAPSHOTS] if corpora is None else corpora)
    errors: list[str] = []
    seen: Counter[str] = Counter()
    roots: dict[str, Path | None] = {}
    files: dict[tuple, list[str] | None] = {}

    for i, item in enumerate(queries):
        if isinstance(item, Query):
            q = item
            where = q.id
        else:
            q, errs = parse_record(item, f"record {i}")
            errors.extend(errs)
            if q is None:
                continue
            where = q.id
        seen[q.id] += 1
        if seen[q.id] == 2:
            errors.append(f"{where}: duplicate id")
        if q.kind not in KINDS:
            errors.append(f"{where}: unknown kind {q.kind!r} (expected one of {', '.join(KINDS)})")
        if q.split not in SPLITS:
            errors.append(f"{where}: unknown split {q.split!r} (expected one of {', '.join(SPLITS)})")
        if q.corpus in SNAPSHOTS and q.commit is None:
            errors.append(f"{where}: a query of snapshot corpus {q.corpus!r} needs repo and commit")
        if not q.query.strip():
            errors.append(f"{where}: empty query")
        if q.corpus not in known:
            errors.append(f"{where}: unknown corpus {q.corpus!r}")
            continue
        if not q.id.startswith(q.corpus + "-"):
            errors.append(f"{where}: id should start with {q.corpus + '-'!r}")
        for g in q.gold:
            gw = f"{where}: {g.file_path}:{g.start_line}-{g.end_line}"
            if not _is_int(g.start_line) or not _is_int(g.end_line):
                errors.append(f"{gw}: line numbers must be integers")
                continue
            if g.start_line < 1:
                errors.append(f"{gw}: start_line < 1")
            if g.end_line < g.start_line:
                errors.append(f"{gw}: end_line < start_line")
            if root_for_corpus is None:
                continue
            if q.corpus not in roots:
                try:
                    roots[q.corpus] = Path(root_for_corpus(q.corpus))
                except (CorpusError, OSError, LookupError) as exc:
                    roots[q.corpus] = None
                    errors.append(f"corpus {q.corpus!r}: cannot get its files: {exc}")
            root = roots[q.corpus]
            if root is None:
                continue
            if q.commit is not None and q.corpus in SNAPSHOTS:
                try:
                    root = snapshot_root(q.corpus, q.repo, q.commit, folder=root)
                except CorpusError as exc:
                    errors.append(f"{where}: {str(exc).splitlines()[0]}")
                    continue
            key = (q.corpus, q.repo, q.commit, g.file_path)
            if key not in files:
                path = root / g.file_path
                files[key] = file_lines(path) if path.is_file() else None
            lines = files[key]
            if lines is None:
                errors.append(f"{gw}: gold file missing in corpus {q.corpus!r}")
                continue
            if g.end_line > len(lines):
                errors.append(f"{gw}: end_line beyond the file's {len(lines)} lines")
                continue
            if g.start_line >= 1 and g.end_line >= g.start_line:
                if not any(line.strip() for line in lines[g.start_line - 1 : g.end_line]):
                    errors.append(f"{gw}: gold range is blank lines only")
    return errors


def _counts_line(name: str, queries: list[Query]) -> str:
    by_kind = Counter(q.kind for q in queries)
    kinds = " ".join(f"{k}={by_kind.get(k, 0)}" for k in KINDS)
    others = sum(v for k, v in by_kind.items() if k not in KINDS)
    extra = f" other={others}" if others else ""
    by_split = Counter(q.split for q in queries)
    splits = " ".join(f"{s}={by_split.get(s, 0)}" for s in SPLITS)
    return f"{name:14} {len(queries):4} queries  {kinds}{extra}  {splits}"


def _main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    offline = "--offline" in argv
    cmd = args[0] if args else "validate"
    if cmd == "list":
        for name in list_datasets():
            print(name)
        return 0
    if cmd != "validate":
        print("usage: python -m coderag.eval.datasets [list | validate [NAME|PATH|all] [--offline]]", file=sys.stderr)
        return 2
    targets = args[1:] or ["all"]
    if targets == ["all"]:
        targets = list_datasets()
    all_errors: list[str] = []
    total: list[Query] = []
    for target in targets:
        path = _dataset_path(target)
        try:
            queries, errors = _read(path)
        except DatasetError as exc:
            all_errors.append(str(exc))
            continue
        errors += validate(queries, root_for_corpus=None if offline else fetch)
        print(_counts_line(path.stem, queries))
        total.extend(queries)
        all_errors.extend(errors)
    if len(targets) > 1:
        dup = [i for i, n in Counter(q.id for q in total).items() if n > 1]
        all_errors.extend(f"{i}: id used in more than one dataset" for i in dup if i)
        print(_counts_line("total", total))
    for e in all_errors:
        print(f"error: {e}")
    print(f"{len(all_errors)} error(s)")
    return 1 if all_errors else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
