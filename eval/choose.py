"""Leave-one-corpus-out choice of retrieval settings, replayed over dumped legs.

A setting chosen on the queries it is then scored on looks better than it is. Here each corpus in turn is
left out: the grid point with the most R@1 hits (then the highest MRR@10) on the other corpora's queries is
scored on the left-out corpus's. The sum over the folds is what choosing on this grid is worth on code it was
not chosen on; the point chosen on every corpus is the one to ship. A corpus can be kept out of the whole
choice (``--exclude-corpus``, the fresh set), to be scored once afterwards by ``coderag eval``.

The replay is eval/legs.py's: the fusion of pipelines/fusion.py over each query's dumped candidates, so
the numbers are those of the fused list, before auto-merging and packing.

Usage::

    python -m coderag.eval.legs dump --dataset all --out legs.jsonl
    python -m coderag.eval.choose legs.jsonl --exclude-corpus sqlalchemy-engine \\
        --grid retrieval.score_power=1,2,3,4 --grid retrieval.score_dense_weight=1.25,1.5,1.75,2,2.5
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Point = tuple[tuple[str, str], ...]  # (("retrieval.score_power", "3"), ...)


def parse_grid(specs: Sequence[str]) -> list[Point]:
    """`KEY=v1,v2` specs -> every combination of their values (one point when no spec is given)."""
    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ValueError(f"--grid wants KEY=v1,v2,...; got {spec!r}")
        axes.append([(key.strip(), v.strip()) for v in values.split(",") if v.strip()])
    return [tuple(p) for p in itertools.product(*axes)]


def hits_of(records: list[dict[str, Any]], point: Point) -> dict[str, tuple[float, float]]:
    """Each query's (R@1, MRR@10) under the settings of `point`, replayed over its dumped legs."""
    from coderag.base.config import Settings
    from coderag.eval.legs import gold_spans, replay
    from coderag.eval.metrics import score_ranking
    from coderag.eval.runner import apply_overrides, parse_overrides

    settings = apply_overrides(Settings(), parse_overrides([f"{k}={v}" for k, v in point]))
    out = {}
    for rec, ranking in replay(records, settings):
        m = score_ranking(ranking, gold_spans(rec))
        out[rec["id"]] = (m["recall@1"], m["mrr@10"])
    return out


def _total(table: dict[str, tuple[float, float]], ids: Sequence[str]) -> tuple[float, float]:
    return sum(table[i][0] for i in ids), sum(table[i][1] for i in ids)


def choose(records: list[dict[str, Any]], grid: list[Point], baseline: Point = ()) -> str:
    """The leave-one-corpus-out report (markdown) of `grid` over `records`, against `baseline`."""
    tables = {p: hits_of(records, p) for p in dict.fromkeys([baseline, *grid])}
    by_corpus: dict[str, list[str]] = {}
    for rec in records:
        by_corpus.setdefault(rec["corpus"], []).append(rec["id"])
    every = [rec["id"] for rec in records]

    def name(p: Point) -> str:
        return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in p) or "the defaults"

    lines = [f"| left out | n | chosen on the others | R@1 hits, {name(baseline)} | R@1 hits, chosen |",
             "| --- | ---: | --- | ---: | ---: |"]
    base_sum = chosen_sum = 0.0
    for corpus, ids in sorted(by_corpus.items()):
        left_out = set(ids)
        rest = [i for i in every if i not in left_out]
        best = max(grid, key=lambda p: _total(tables[p], rest))
        b, c = _total(tables[baseline], ids)[0], _total(tables[best], ids)[0]
        base_sum, chosen_sum = base_sum + b, chosen_sum + c
        lines.append(f"| {corpus} | {len(ids)} | {name(best)} | {b:.0f} | {c:.0f} |")
    lines.append(f"| all folds | {len(every)} | | {base_sum:.0f} | {chosen_sum:.0f} |")
    ranked = sorted(grid, key=lambda p: _total(tables[p], every), reverse=True)
    lines += ["", "Chosen on every corpus (R@1 hits, MRR@10 sum):"]
    lines += [f"- {name(p)}: {_total(tables[p], every)[0]:.0f}, {_total(tables[p], every)[1]:.1f}" for p in ranked[:5]]
    lines.append(f"- {name(baseline)} (baseline): {_total(tables[baseline], every)[0]:.0f}, "
                 f"{_total(tables[baseline], every)[1]:.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.choose", description=__doc__.split("\n\n")[0])
    p.add_argument("dump", type=Path, help="a dump of python -m coderag.eval.legs dump")
    p.add_argument("--grid", action="append", default=[], metavar="retrieval.KEY=v1,v2,...")
    p.add_argument("--baseline", action="append", default=[], metavar="retrieval.KEY=VALUE",
                   help="the settings the folds are compared with (default: the defaults)")
    p.add_argument("--exclude-corpus", action="append", default=[], metavar="NAME")
    p.add_argument("--kinds", default="", help="comma-separated query kinds to score (default: all)")
    a = p.parse_args(argv)
    try:
        grid = parse_grid(a.grid)
        baseline = tuple(tuple(s.split("=", 1)) for s in a.baseline)
        if any(len(kv) != 2 for kv in baseline):
            raise ValueError("--baseline wants KEY=VALUE")
        kinds = {k for k in a.kinds.split(",") if k}
        records = [json.loads(line) for line in a.dump.open(encoding="utf-8")]
        records = [r for r in records if r["corpus"] not in a.exclude_corpus and (not kinds or r["kind"] in kinds)]
        print(choose(records, grid, baseline))
    except (OSError, ValueError) as exc:  # a missing dump, a malformed --grid or a value the settings refuse
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
