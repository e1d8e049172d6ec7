"""The eval runner: index each corpus once, ask every labelled query of every variant, score and aggregate.

Variants:

- ``bm25``, ``dense``, ``hybrid``: the raw retrievers (no auto-merge, no merge-adjacent). Their ranking
  metrics come from a top-10 call with a 20,000-token budget, so packing cuts nothing; their tokens,
  payload hit and latency come from a second call packed at ``max_tokens``.
- ``full``: the default pipeline (hybrid + auto-merge + merge-adjacent + packing at ``max_tokens``), one
  call, scored as returned.
- ``ripgrep``: what an agent's Grep tool gets (see :mod:`coderag.eval.ripgrep_baseline`).
- ``li-bm25``: LlamaIndex's ``BM25Retriever`` over the index's leaf nodes; ``bm25-window``: plain BM25
  over 40-line windows of code files (see :mod:`coderag.eval.baselines`). Both are built once per
  corpus, rank their top 10 and pack their payload at ``max_tokens`` from their top 30.

When no chosen variant reads vectors (only ``bm25`` and the baselines), corpora are indexed BM25-only,
and a later run that needs vectors densifies them (:mod:`coderag.eval.indexing`). A query of a local
snapshot corpus (swebench-dev) is run against its own snapshot, each snapshot indexed once.

Each variant's answer is scored in :mod:`coderag.eval.outcomes`. A variant that raises on a query scores a miss
there and is counted in ``errors``.

Examples:
    >>> from coderag.eval.datasets import load_dataset
    >>> run = run_eval(load_dataset("click")[:5], ["hybrid", "ripgrep"])   # doctest: +SKIP
    >>> run.summary["hybrid"]["all"]["recall@5"]                           # doctest: +SKIP
    0.8
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from coderag.base.budget import DEFAULT_MAX_TOKENS
from coderag.eval.metrics import RANKING_METRICS, Span, mean, percentile
from coderag.eval.outcomes import (BASELINE_TOP_K, RANK_MAX_TOKENS, RANK_TOP_K, Outcome, baseline_outcome,
                                   coderag_outcome, miss, ripgrep_outcome)

VARIANTS = ("bm25", "dense", "hybrid", "full", "ripgrep", "li-bm25", "bm25-window")
RAW_VARIANTS = ("bm25", "dense", "hybrid")
DENSE_VARIANTS = ("dense", "hybrid", "full")  # the variants that read vectors: their corpora are indexed dense
WARMUP_QUERY = "warm up: load the model and open the stores"


class StatusLine:
    """One status line on stderr, rewritten in place; silent when stderr is not a terminal."""

    def __init__(self, enabled: Optional[bool] = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._width = 0
        self._files = self._total = self._embedded = 0
        self.label = ""

    def show(self, msg: str) -> None:
        if not self.enabled:
            return
        msg = msg[:118]
        self.stream.write("\r" + msg.ljust(self._width))
        self.stream.flush()
        self._width = len(msg)

    def indexing(self, phase: str, done: int, total: int) -> None:
        """An index_repository progress callback."""
        if phase == "files":
            self._files, self._total = done, total
        elif phase == "embed":
            self._embedded += done
        if phase == "optimize":
            self.show(f"{self.label}: building the vector index (HNSW)...")
        else:
            self.show(f"{self.label}: indexing {self._files}/{self._total} files, {self._embedded} chunks embedded")

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = self._files = self._total = self._embedded = 0


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`retrieval.KEY=VALUE` strings to {KEY: value}; values are read as YAML scalars (2, 0.5, true)."""
    import yaml  # only when overrides are given

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise ValueError(f"expected retrieval.KEY=VALUE, e.g. retrieval.dense_weight=2 (not {item!r})")
        if section != "retrieval":
            raise ValueError(f"only retrieval.* settings can be changed for an eval run; {section}.* changes what "
                             f"is indexed and needs its own index (not {item!r})")
        out[name] = yaml.safe_load(raw)
    return out


def apply_overrides(settings, overrides: dict[str, Any]):
    """A copy of `settings` with `overrides` merged into its retrieval section, validated."""
    from coderag.base.config import Settings

    if not overrides:
        return settings
    data = settings.model_dump()
    data["retrieval"].update(overrides)
    return Settings.model_validate(data)


@dataclass
class EvalRun:
    """Everything one run produced: per-query outcomes, the aggregates, and how it was made."""

    meta: dict[str, Any]
    queries: list[dict[str, Any]]  # id, corpus, kind, query, gold, outcomes: {variant: Outcome}
    summary: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # variant -> group -> metric

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "summary": self.summary,
                "queries": [{**q, "outcomes": {v: o.to_json() for v, o in q["outcomes"].items()}}
                            for q in self.queries]}


def summarize(queries: Sequence[dict[str, Any]], variants: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Aggregate per variant, over all queries ("all"), per split ("split:heldout"), per kind ("kind:natural"),
    per kind and split ("kind:natural split:tune") and per corpus ("corpus:click")."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in queries:
        split = q.get("split", "tune")
        groups["all"].append(q)
        groups[f"split:{split}"].append(q)
        groups[f"kind:{q['kind']}"].append(q)
        groups[f"kind:{q['kind']} split:{split}"].append(q)
        groups[f"corpus:{q['corpus']}"].append(q)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for v in variants:
        out[v] = {}
        for g, qs in groups.items():
            outs = [q["outcomes"][v] for q in qs if v in q["outcomes"]]
            if not outs:
                continue
            ok = [o for o in outs if not o.error]
            lat = [o.latency_ms for o in ok if o.latency_ms is not None]
            row: dict[str, float] = {"n": len(outs), "errors": len(outs) - len(ok)}
            for m in RANKING_METRICS:
                row[m] = mean([o.metrics[m] for o in outs])
            row["tokens"] = mean([o.tokens for o in ok if o.tokens is not None])
            row["in_payload"] = mean([1.0 if o.in_payload else 0.0 for o in outs])
            row["place_in_payload"] = mean([1.0 if (o.in_payload if o.place_in_payload is None
                                                    else o.place_in_payload) else 0.0 for o in outs])
            row["file_in_payload"] = mean([1.0 if o.file_in_payload else 0.0 for o in outs])
            reached = [o.tokens_to_gold for o in ok if o.tokens_to_gold is not None]
            row["tokens_to_gold"] = percentile(reached, 50)  # median over the payloads that show a gold line
            row["gold_reached"] = len(reached) / len(outs)  # ... and how often that is
            row["p50_ms"] = percentile(lat, 50)
            row["p95_ms"] = percentile(lat, 95)
            out[v][g] = row
    return out


def _git_state() -> dict[str, Any]:
    """The commit the code was run at, and the tracked files that differed from it (results depend on both)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True,
                              timeout=5).stdout.rstrip("\n")

    try:
        return {"commit": git("rev-parse", "--short", "HEAD").strip() or None,
                "modified": [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "modified": []}


def _location(q) -> tuple[str, Optional[str], Optional[str]]:
    return getattr(q, "location", (q.corpus, None, None))


def run_eval(queries: Sequence, variants: Sequence[str] = VARIANTS, max_tokens: int = DEFAULT_MAX_TOKENS,
             root_for_corpus: Optional[Callable[[str], Path]] = None, overrides: Optional[dict[str, Any]] = None,
             status: Optional[StatusLine] = None, wait: float = 0.0) -> EvalRun:
    """Index each corpus (each snapshot) of `queries` once, reusing an up-to-date index; run every variant.

    Args:
        queries: coderag.eval.datasets.Query objects (several corpora may be mixed).
        root_for_corpus: corpus name -> folder to index (default: fetch the pinned corpus); for a snapshot
            corpus, the folder that holds its snapshots.
        overrides: retrieval settings to change for this run, e.g. {"dense_weight": 2.0}.
        wait: seconds to wait for an index that another process holds (an indexing run, an owner).
    """
    from coderag.base.config import load_settings
    from coderag.eval.indexing import prepare_index
    from coderag.eval.snapshots import snapshot_name, snapshot_root
    from coderag.base.paths import INDEX_DIR_NAME

    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants must be among {', '.join(VARIANTS)} (not {', '.join(unknown) or 'none'})")
    if root_for_corpus is None:
        from coderag.eval.corpora import fetch as root_for_corpus
    status = status or StatusLine(enabled=False)
    rg = None
    if "ripgrep" in variants:
        from coderag.eval.ripgrep_baseline import find_rg

        rg = find_rg()  # fail before hours of indexing, not after
    dense = any(v in DENSE_VARIANTS for v in variants)
    by_location: dict[tuple, list] = defaultdict(list)
    for q in queries:
        by_location[_location(q)].append(q)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["coderag", *sys.argv[1:]]) if Path(sys.argv[0]).name == "coderag" else None,
        **_git_state(), "variants": list(variants), "max_tokens": max_tokens,
        "rank_top_k": RANK_TOP_K, "rank_max_tokens": RANK_MAX_TOKENS, "overrides": overrides or {},
        "corpora": {}, "relevance": "recall@k, mrr@10: file level (distinct files, first gold file); line_hit@k: "
                                  "a result of at most 200 lines overlapping a gold range; hit@k, chunk_mrr@10, "
                                  "nDCG@10: chunk level (a result overlapping a gold range of the same file, "
                                  "each gold credited once)"}
    rows: list[dict[str, Any]] = []
    for (corpus, repo, commit), qs in by_location.items():
        root = Path(root_for_corpus(corpus))
        label, siblings = corpus, []
        if commit is not None:
            root = snapshot_root(corpus, repo, commit, folder=root)
            label = f"{corpus}/{snapshot_name(repo, commit)}"
            siblings = [p / INDEX_DIR_NAME for p in sorted(root.parent.glob(snapshot_name(repo, "*")))
                        if p != root and (p / INDEX_DIR_NAME).is_dir()]
        root = root.resolve()
        settings = apply_overrides(load_settings(root), overrides or {})
        status.label = label
        try:
            info = prepare_index(root, settings, dense=dense, progress=status.indexing, wait=wait, seed_from=siblings)
        finally:
            status.clear()
        meta["corpora"][label] = {"root": str(root), **info, "retrieval": settings.retrieval.model_dump()}
        rows.extend(_run_corpus(root, settings, qs, variants, max_tokens, rg, status, meta["corpora"][label],
                                wait))
    meta["seconds"] = round(time.perf_counter() - started, 1)
    return EvalRun(meta, rows, summarize(rows, variants))


def _baselines(index, variants: Sequence[str], status: StatusLine, info: dict[str, Any]) -> dict[str, Any]:
    """The baselines the run asks for, built over this corpus (their build time goes into `info`)."""
    from coderag.eval.baselines import LeafBM25, WindowBM25, code_files

    built: dict[str, Any] = {}
    for v in ("li-bm25", "bm25-window"):
        if v not in variants:
            continue
        status.show(f"{status.label}: building the {v} baseline")
        t0 = time.perf_counter()
        try:
            built[v] = (LeafBM25(index, BASELINE_TOP_K) if v == "li-bm25"
                        else WindowBM25.from_files(index.root, code_files(index)))
            size = built[v].size if v == "li-bm25" else len(built[v].windows)
            info[v] = {"units": size, "build_seconds": round(time.perf_counter() - t0, 1)}
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot be built scores misses, with the reason
            built[v] = exc
            info[v] = {"error": f"{type(exc).__name__}: {exc}"}
    return built


def _run_corpus(root: Path, settings, queries: Sequence, variants: Sequence[str], max_tokens: int,
                rg: Optional[str], status: StatusLine, info: Optional[dict[str, Any]] = None,
                wait: float = 0.0) -> list[dict[str, Any]]:
    from coderag.pipelines.code_index import CodeIndex

    index = CodeIndex.open(root, settings=settings, create=False, wait=wait)
    try:
        baselines = _baselines(index, variants, status, info if info is not None else {})
        for mode in ("hybrid", "bm25", "dense"):  # load the model and the stores outside the timings
            if mode in variants or (mode == "hybrid" and "full" in variants):
                index.search(WARMUP_QUERY, retriever=mode, max_tokens=max_tokens)
        if rg:
            from coderag.eval.ripgrep_baseline import grep

            grep(WARMUP_QUERY, root, rg=rg)  # page the tree into the OS cache, as it is for the other variants
        for b in baselines.values():
            if not isinstance(b, Exception):
                b.search(WARMUP_QUERY, 1)
        rows = []
        for i, q in enumerate(queries, 1):
            gold = [Span(*g) for g in q.gold]
            outcomes: dict[str, Outcome] = {}
            for v in variants:
                status.show(f"{status.label}: query {i}/{len(queries)} ({v})")
                try:
                    if isinstance(baselines.get(v), Exception):
                        raise baselines[v]
                    if v == "ripgrep":
                        outcomes[v] = ripgrep_outcome(root, q.query, gold, index.count_tokens, rg)
                    elif v in baselines:
                        outcomes[v] = baseline_outcome(baselines[v], q.query, gold, index.count_tokens, max_tokens)
                    else:
                        outcomes[v] = coderag_outcome(index, q.query, v, gold, max_tokens)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a scored miss, never a crash
                    outcomes[v] = miss(f"{type(exc).__name__}: {exc}")
            rows.append({"id": q.id, "corpus": q.corpus, "kind": q.kind, "split": getattr(q, "split", "tune"),
                         "query": q.query,
                         "gold": [f"{g.file_path}:{g.start_line}-{g.end_line}" for g in gold], "outcomes": outcomes})
        return rows
    finally:
        status.clear()
        index.close()
