"""Eval reports: Markdown tables, the per-query JSON file, a PNG chart, and a comparison of saved runs.

Command line (compare runs saved by ``coderag eval --out DIR``)::

    python -m coderag.eval.report DIR_A/results.json DIR_B/results.json [--variants=full,hybrid]
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

RESULTS_NAME = "results.json"
TABLE_NAME = "summary.md"
CHART_NAME = "recall_tokens.png"
KIND_ORDER = ("identifier", "natural", "docstring", "issue")
SPLIT_ORDER = ("tune", "heldout")

COLUMNS = (  # (summary key, header, format)
    ("n", "n", "{:.0f}"), ("errors", "err", "{:.0f}"),
    ("recall@1", "R@1", "{:.2f}"), ("gold_first", "gold first", "{:.2f}"), ("recall@5", "R@5", "{:.2f}"),
    ("recall@10", "R@10", "{:.2f}"),
    ("mrr@10", "MRR@10", "{:.3f}"), ("line_hit@1", "line hit@1", "{:.2f}"), ("line_hit@5", "line hit@5", "{:.2f}"),
    ("hit@1", "hit@1", "{:.2f}"), ("hit@5", "hit@5", "{:.2f}"),
    ("chunk_mrr@10", "chunk MRR", "{:.3f}"), ("ndcg@10", "nDCG@10", "{:.3f}"),
    ("tokens", "tokens", "{:.0f}"), ("in_payload", "gold in payload", "{:.2f}"),
    ("place_in_payload", "gold place", "{:.2f}"), ("file_in_payload", "gold file", "{:.2f}"),
    ("tokens_to_gold", "tokens to gold", "{:.0f}"), ("gold_reached", "gold reached", "{:.2f}"),
    ("p50_ms", "p50 ms", "{:.0f}"), ("p95_ms", "p95 ms", "{:.0f}"),
)
LEGEND = ("R@k: file-level recall, the share of gold files among the first k distinct files. gold first: the first "
          "distinct file is a gold file (R@1 where the gold is one file; a change to two files scores 0.5 at most "
          "on R@1 and 1 here). MRR@10: file level, "
          "1 / rank of the first gold file among the first 10 distinct files. line hit@k: one of the first k "
          "results shows at most 200 lines and overlaps a gold range. hit@k: a result among the first k overlaps "
          "a gold range (same file, any size). chunk MRR and nDCG@10: chunk level, binary relevance, each gold "
          "range credited once (chunk MRR was reported as MRR@10 before issue 15). tokens: mean tokens of the "
          "payload (cl100k); raw retrievers, full and the li-bm25 / bm25-window baselines packed at --max-tokens, "
          "ripgrep = its first 250 matching lines. gold in payload: share of queries whose payload shows a line "
          "of a gold range. gold place: the same, or one of its one-line candidates is a gold place. "
          "gold file: a block or a candidate line of the payload is in a gold file (issue 15's 'gold file in the "
          "payload'). tokens to gold: median tokens read until the first gold line, over the queries where one is "
          "reached (gold reached: their share); coderag's variants and the baselines: the payload read block by "
          "block; ripgrep: grep-and-read, the matching files read whole in ripgrep's order. err: queries on which the variant raised (scored "
          "as misses). split: tune (settings may be chosen on it) or heldout (never tuned on; eval/RESULTS.md).")


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _groups(summary: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """All, then each split, each kind (with its splits when it has both), each corpus (when more than one)."""
    present = {g for rows in summary.values() for g in rows}
    splits = [f"split:{s}" for s in SPLIT_ORDER if f"split:{s}" in present]
    splits += sorted(g for g in present if g.startswith("split:") and g not in splits)
    kinds = [f"kind:{k}" for k in KIND_ORDER if f"kind:{k}" in present]
    kinds += sorted(g for g in present if g.startswith("kind:") and " " not in g and g not in kinds)
    by_kind: list[str] = []
    for k in kinds:
        parts = [g for g in (f"{k} {s}" for s in splits) if g in present]
        by_kind += [k, *(parts if len(parts) > 1 else [])]
    corpora = sorted(g for g in present if g.startswith("corpus:"))
    return ["all", *(splits if len(splits) > 1 else []), *by_kind, *(corpora if len(corpora) > 1 else [])]


def group_title(group: str, n: int) -> str:
    name = "all queries" if group == "all" else group.replace(":", " ").replace(" split ", ", split ")
    return f"{name} (n={n})"


def markdown_table(summary: dict[str, dict[str, dict[str, float]]], group: str,
                   row_labels: Optional[dict[str, str]] = None) -> str:
    """One Markdown table: a row per variant, the columns of COLUMNS, for one group ("all", "kind:natural")."""
    head = "| variant | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "| --- | " + " | ".join("---:" for _ in COLUMNS) + " |"
    lines = [head, rule]
    for variant, groups in summary.items():
        row = groups.get(group)
        if row is None:
            continue
        label = (row_labels or {}).get(variant, variant)
        lines.append(f"| {label} | " + " | ".join(_fmt(row.get(k), f) for k, _, f in COLUMNS) + " |")
    return "\n".join(lines)


def markdown_report(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    """Every group's table under a heading, then the legend."""
    parts = []
    for g in _groups(summary):
        n = next((int(rows[g]["n"]) for rows in summary.values() if g in rows), 0)
        parts.append(f"### {group_title(g, n)}\n\n{markdown_table(summary, g)}")
    parts.append(LEGEND)
    return "\n\n".join(parts) + "\n"


def write_chart(summary: dict[str, dict[str, dict[str, float]]], path: Path) -> Optional[Path]:
    """A PNG with Recall@5 and mean tokens per variant (overall); None when matplotlib is missing."""
    try:
        import matplotlib  # optional: only the chart needs it

        matplotlib.use("Agg")  # headless
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    variants = [v for v in summary if "all" in summary[v]]
    recall = [summary[v]["all"]["recall@5"] for v in variants]
    tokens = [summary[v]["all"]["tokens"] for v in variants]
    tokens = [0 if t is None or math.isnan(t) else t for t in tokens]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(variants, recall, color="#4C72B0")
    ax1.set_ylim(0, 1.1)
    ax1.set_title("Recall@5 (file level)")
    for i, r in enumerate(recall):
        ax1.text(i, r + 0.02, f"{r:.2f}", ha="center")
    ax2.bar(variants, tokens, color="#DD8452")
    ax2.set_title("mean tokens returned")
    for i, t in enumerate(tokens):
        ax2.text(i, t, f"{t:.0f}", ha="center", va="bottom")
    n = int(summary[variants[0]]["all"]["n"]) if variants else 0
    fig.suptitle(f"coderag eval, {n} queries")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_run(run, out_dir: Path) -> dict[str, Optional[Path]]:
    """results.json (per-query outcomes, to diff two runs), summary.md, and the chart, in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / RESULTS_NAME
    results.write_text(json.dumps(run.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    table = out_dir / TABLE_NAME
    table.write_text(markdown_report(run.summary), encoding="utf-8")
    return {"results": results, "table": table, "chart": write_chart(run.summary, out_dir / CHART_NAME)}


def compare(paths: Sequence[Path], variants: Optional[Sequence[str]] = None) -> str:
    """Tables that put the same variants of several saved runs side by side, one row per run x variant."""
    merged: dict[str, dict[str, dict[str, float]]] = {}
    for p in paths:
        data = json.loads(Path(p).read_text(encoding="utf-8"))
        over = data["meta"].get("overrides") or {}
        tag = ", ".join(f"{k}={v}" for k, v in over.items()) or "defaults"
        for v, groups in data["summary"].items():
            if variants and v not in variants:
                continue
            merged[f"{v} [{tag}]"] = groups
    return markdown_report(merged)


def _main(argv: list[str]) -> int:
    variants = None
    paths = []
    for a in argv:
        if a.startswith("--variants="):
            variants = a.split("=", 1)[1].split(",")
        else:
            paths.append(Path(a) / RESULTS_NAME if Path(a).is_dir() else Path(a))
    if not paths:
        print("usage: python -m coderag.eval.report RUN.json|DIR [...] [--variants=full,hybrid]", file=sys.stderr)
        return 2
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"error: no saved run at {', '.join(missing)} (coderag eval --out DIR writes DIR/{RESULTS_NAME})",
              file=sys.stderr)
        return 2
    print(compare(paths, variants))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
