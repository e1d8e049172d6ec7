"""Two saved eval runs compared query by query: which queries a change moved, and whether that is more than chance.

A change to ranking moves a handful of queries each way, and a table of means hides how few: +5 and -1 among
146 held-out questions reads as +0.03 R@1, and an exact sign test gives it p = 0.22. Tuning on such moves is
tuning on noise. This report lists every query whose metric moved, and for each split and kind it gives the
wins, the losses and the two-sided sign-test p-value, so that a note can say how much a change really moved.

Command line (runs saved by ``coderag eval --out DIR``)::

    python -m coderag.eval.paired BEFORE AFTER [--variant full] [--metric recall@1] [--split heldout]
        [--kind natural]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from coderag.eval.report import RESULTS_NAME


@dataclass(frozen=True)
class Move:
    """One query whose metric differs between the two runs."""

    id: str
    split: str
    kind: str
    before: float
    after: float
    query: str


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if a move were a coin toss.

    >>> round(sign_test(5, 1), 4), sign_test(0, 0), round(sign_test(10, 0), 4)
    (0.2188, 1.0, 0.002)
    """
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def load_run(path: Path) -> dict[str, dict[str, Any]]:
    """The queries of a saved run by id (`path`: a results.json or the folder that holds one)."""
    path = path / RESULTS_NAME if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"no saved run at {path} (coderag eval --out DIR writes DIR/{RESULTS_NAME})")
    return {q["id"]: q for q in json.loads(path.read_text(encoding="utf-8"))["queries"]}


def _value(query: dict[str, Any], variant: str, metric: str) -> Optional[float]:
    outcome = query.get("outcomes", {}).get(variant)
    if outcome is None:
        return None
    if metric in outcome.get("metrics", {}):
        return float(outcome["metrics"][metric])
    value = outcome.get(metric)  # the payload's booleans: in_payload, file_in_payload, ...
    return None if value is None else float(value)


def paired(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], variant: str = "full",
           metric: str = "recall@1") -> tuple[dict[tuple[str, str], list[float]], list[Move]]:
    """The (before, after) values of the queries both runs scored, as sums per (split, kind) group, and the
    queries that moved. A query only one run holds is left out (a dataset added or dropped)."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    moves: list[Move] = []
    for qid, a in after.items():
        b = before.get(qid)
        if b is None:
            continue
        x, y = _value(b, variant, metric), _value(a, variant, metric)
        if x is None or y is None:
            continue
        for group in ((a["split"], a["kind"]), (a["split"], "all"), ("all", a["kind"]), ("all", "all")):
            s = sums[group]
            s[0], s[1], s[2] = s[0] + 1, s[1] + x, s[2] + y
        if abs(x - y) > 1e-9:
            moves.append(Move(qid, a["split"], a["kind"], x, y, a.get("query", "")))
    return dict(sums), moves


def report(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], variant: str = "full",
           metric: str = "recall@1", split: Optional[str] = None, kind: Optional[str] = None) -> str:
    """A Markdown table per (split, kind) group: queries, the mean before and after, wins, losses and the
    sign test; then the queries that moved, worst first."""
    sums, moves = paired(before, after, variant, metric)
    keep = [m for m in moves if (split is None or m.split == split) and (kind is None or m.kind == kind)]
    lines = [f"### {variant} {metric}: {len(keep)} queries moved", "",
             "| split | kind | n | before | after | wins | losses | sign test p |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (s, k), (n, x, y) in sorted(sums.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1] == "all", kv[0][1])):
        if (split and s != split) or (kind and k != kind):
            continue
        group = [m for m in moves if s in ("all", m.split) and k in ("all", m.kind)]
        wins = sum(m.after > m.before for m in group)
        losses = len(group) - wins
        lines.append(f"| {s} | {k} | {n} | {x / n:.3f} | {y / n:.3f} | {wins} | {losses} | {sign_test(wins, losses):.3g} |")
    if keep:
        lines += ["", "| query | split | kind | before | after | text |", "| --- | --- | --- | ---: | ---: | --- |"]
        for m in sorted(keep, key=lambda m: (m.after - m.before, m.id)):
            text = " ".join(m.query.split())[:90].replace("|", "\\|")
            lines.append(f"| {m.id} | {m.split} | {m.kind} | {m.before:.2f} | {m.after:.2f} | {text} |")
    return "\n".join(lines)


def _main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.paired", description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path, help="a saved run: results.json or the folder that holds it")
    p.add_argument("after", type=Path)
    p.add_argument("--variant", default="full")
    p.add_argument("--metric", default="recall@1",
                   help="a ranking metric (recall@1, mrr@10, line_hit@5, ...) or a payload one (file_in_payload, ...)")
    p.add_argument("--split", choices=("tune", "heldout"))
    p.add_argument("--kind")
    args = p.parse_args(argv)
    try:
        before, after = load_run(args.before), load_run(args.after)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(before, after, args.variant, args.metric, args.split, args.kind))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
