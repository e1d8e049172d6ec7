"""Convert the swebench-dev issue set (../shared/datasets/swebench-dev/queries.jsonl) to our dataset format.

The source records carry the issue text, the repository and commit, and the pre-image line ranges of
the gold patch's hunks (``gold_lines``); ours carry the same as ``gold`` spans of kind ``issue``, with
``repo`` and ``commit`` naming the local snapshot (:mod:`coderag.eval.snapshots`) they are relative to.
The repositories' code is never copied here: only the queries and their labels.

Two labels are fitted to the snapshot's files when it is present (``--snapshots``, default the
configured folder): a pure insertion at the end of a file names the line after the last one, so the
range is cut at the last line; an insertion between blank lines names only blank lines, so the range
is widened to the nearest non-blank line on each side (the code around the insertion point).

The held-out split is chosen by repository, so that nothing tuned on one commit of a repository is
scored on another commit of it: pvlib/pvlib-python and pydicom/pydicom (10 of the 28 issues) are
``heldout``, the rest ``tune`` (see eval/RESULTS.md).

Command line (writes eval/datasets/swebench-dev.jsonl by default)::

    python -m coderag.eval.swebench [SOURCE.jsonl] [OUT.jsonl] [--snapshots DIR]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coderag.eval.datasets import DATASETS_DIR, Gold, Query, file_lines
from coderag.eval.snapshots import SNAPSHOTS, snapshot_name

CORPUS = "swebench-dev"
HELDOUT_REPOS = frozenset({"pvlib/pvlib-python", "pydicom/pydicom"})
DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "../shared/datasets/swebench-dev/queries.jsonl"


def fit_range(lines: list[str], start: int, end: int) -> tuple[int, int]:
    """`start..end` cut at the file's last line, and widened to non-blank lines when it holds only blank ones."""
    end = min(end, len(lines))
    start = min(start, end)
    if not any(line.strip() for line in lines[start - 1:end]):
        while start > 1 and not lines[start - 1].strip():
            start -= 1
        while end < len(lines) and not lines[end - 1].strip():
            end += 1
    return start, end


def convert_record(rec: dict[str, Any], snapshots: Path | None = None) -> Query:
    """One source record as a Query: gold spans from gold_lines (files in path order, ranges in line order),
    fitted to the files of its snapshot in `snapshots` when that folder holds it."""
    root = snapshots / snapshot_name(rec["repo"], rec["commit"]) if snapshots is not None else None
    gold = []
    for path in sorted(rec["gold_lines"]):
        lines = file_lines(root / path) if root is not None and (root / path).is_file() else None
        for s, e in sorted(rec["gold_lines"][path]):
            gold.append(Gold(path, *fit_range(lines, int(s), int(e))) if lines else Gold(path, int(s), int(e)))
    gold = tuple(gold)
    if not gold:  # a patch that only adds files has no pre-image lines; none of the 28 does
        raise ValueError(f"{rec.get('id')}: no gold_lines")
    missing = set(rec.get("gold_files", [])) - {g.file_path for g in gold}
    if missing:
        raise ValueError(f"{rec.get('id')}: gold_files without gold_lines: {sorted(missing)}")
    split = "heldout" if rec["repo"] in HELDOUT_REPOS else "tune"
    return Query(f"{CORPUS}-{rec['instance_id']}", CORPUS, rec["query"].strip(), gold, rec.get("kind", "issue"),
                 split, rec["repo"], rec["commit"])


def convert(lines: Iterable[str], snapshots: Path | None = None) -> list[Query]:
    return [convert_record(json.loads(line), snapshots) for line in lines if line.strip()]


def write(queries: Iterable[Query], out: Path) -> None:
    out.write_text("".join(json.dumps(q.to_json(), ensure_ascii=False) + "\n" for q in queries), encoding="utf-8")


def _main(argv: list[str]) -> int:
    snapshots = SNAPSHOTS[CORPUS].folder()
    if "--snapshots" in argv:
        i = argv.index("--snapshots")
        snapshots = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if not snapshots.is_dir():
        print(f"warning: no snapshots in {snapshots}: gold ranges are written as the source gives them",
              file=sys.stderr)
    src = Path(argv[0]) if argv else DEFAULT_SOURCE
    out = Path(argv[1]) if len(argv) > 1 else DATASETS_DIR / f"{CORPUS}.jsonl"
    with src.open(encoding="utf-8") as f:
        queries = convert(f, snapshots if snapshots.is_dir() else None)
    write(queries, out)
    held = sum(q.split == "heldout" for q in queries)
    print(f"{out}: {len(queries)} queries ({held} heldout, {len(queries) - held} tune)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
