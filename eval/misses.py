"""Where a saved run's first places go wrong: for one variant's misses (R@1 below 1), where the gold file is
among the first ten files, whether the file that took the first place was also the first of the BM25 or the
dense leg (when the run has those variants), and which files take the first place most often without being
the answer, with how often they take it at all. A file that is first for many questions and right for few
is a hub: central, long or worded like everything (a module of options with a long docstring, a parser).

Command line (a run saved by ``coderag eval --out DIR``; the legs are read from the same run when it has them)::

    python -m coderag.eval.misses DIR [--variant=full] [--kind=natural] [--most=10]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from coderag.eval.report import RESULTS_NAME

LEGS = ("bm25", "dense")
TOP_FILES = 10


@dataclass
class Misses:
    """A variant's misses over the queries read (`n`): by the gold file's place among the first ten files
    (0-based; None: not there), by the legs whose first file was the wrong first, and the wrong firsts by
    (corpus, file), each with the number of queries that file is first for."""

    n: int = 0
    missed: int = 0
    gold_place: Counter = field(default_factory=Counter)
    leg_first: Counter = field(default_factory=Counter)
    wrong_first: Counter = field(default_factory=Counter)
    first: Counter = field(default_factory=Counter)


def ranked_files(ranked: Sequence[str]) -> list[str]:
    """The distinct files of a ranked list of `path:start-end` spans, best first."""
    return list(dict.fromkeys(span.rsplit(":", 1)[0] for span in ranked))


def read_misses(queries: Sequence[dict], variant: str = "full", kind: Optional[str] = None) -> Misses:
    out = Misses()
    for q in queries:
        outcome = q["outcomes"].get(variant)
        if outcome is None or (kind and q["kind"] != kind):
            continue
        files = ranked_files(outcome["ranked"])
        if not files:
            continue
        out.n += 1
        out.first[(q["corpus"], files[0])] += 1
        if outcome["metrics"]["recall@1"] >= 1.0:
            continue
        out.missed += 1
        gold = {span.rsplit(":", 1)[0] for span in q["gold"]}
        out.gold_place[next((i for i, f in enumerate(files[:TOP_FILES]) if f in gold), None)] += 1
        out.wrong_first[(q["corpus"], files[0])] += 1
        for leg in LEGS:
            leg_files = ranked_files(q["outcomes"][leg]["ranked"]) if leg in q["outcomes"] else []
            if leg_files and leg_files[0] == files[0]:
                out.leg_first[leg] += 1
    return out


def report(m: Misses, most: int = 10) -> str:
    places = ", ".join(f"{'none' if p is None else p + 1}: {c}"
                       for p, c in sorted(m.gold_place.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    lines = [f"{m.missed} of {m.n} queries miss the first place; the gold file's place among the first "
             f"{TOP_FILES} files: {places or '-'}"]
    if m.leg_first:
        lines.append("the wrong first is the first of: " + ", ".join(f"{leg} {m.leg_first[leg]}" for leg in LEGS))
    lines.append("the files most often first without being the answer (wrong / first):")
    lines += [f"  {corpus}: {path}  {c} / {m.first[(corpus, path)]}" for (corpus, path), c in
              m.wrong_first.most_common(most)]
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    paths = [a for a in argv if not a.startswith("--")]
    if len(paths) != 1:
        print("usage: python -m coderag.eval.misses RUN.json|DIR [--variant=full] [--kind=natural] [--most=10]",
              file=sys.stderr)
        return 2
    path = Path(paths[0]) / RESULTS_NAME if Path(paths[0]).is_dir() else Path(paths[0])
    if not path.is_file():
        print(f"error: no saved run at {path} (coderag eval --out DIR writes DIR/{RESULTS_NAME})", file=sys.stderr)
        return 2
    queries = json.loads(path.read_text(encoding="utf-8"))["queries"]
    print(report(read_misses(queries, opts.get("variant", "full"), opts.get("kind")), int(opts.get("most", 10))))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
