"""The eval runner: index each corpus once, ask every labelled query of every variant, score and aggregate.

Variants:

- ``bm25``, ``dense``, ``hybrid``: the raw retrievers (no auto-merge, no merge-adjacent). Their ranking
  metrics come from a top-10 call with a 20,000-token budget, so packing cuts nothing; their tokens,
  payload hit and latency come from a second call packed at ``max_tokens``.
- ``full``: the default pipeline (hybrid + auto-merge + merge-adjacent + packing at ``max_tokens``), one
  call, scored as returned.
- ``ripgrep``: what an agent's Grep tool gets (see :mod:`coderag.eval.ripgrep_baseline`).

A variant that raises on a query scores a miss there and is counted in ``errors``.

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

from coderag.eval.metrics import RANK_KS, Result, Span, contains_gold, mean, percentile, score_ranking

VARIANTS = ("bm25", "dense", "hybrid", "full", "ripgrep")
RAW_VARIANTS = ("bm25", "dense", "hybrid")
DEFAULT_MAX_TOKENS = 4000
RANK_TOP_K = 10
RANK_MAX_TOKENS = 20_000  # the search API's ceiling: ten chunks always fit, so packing never cuts the ranking
RANKING_METRICS = tuple([f"recall@{k}" for k in RANK_KS] + [f"hit@{k}" for k in RANK_KS] + ["mrr@10", "ndcg@10"])
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
    from coderag.config import Settings

    if not overrides:
        return settings
    data = settings.model_dump()
    data["retrieval"].update(overrides)
    return Settings.model_validate(data)


@dataclass
class Outcome:
    """One variant's answer to one query, scored."""

    metrics: dict[str, float]
    tokens: Optional[int] = None
    in_payload: bool = False
    latency_ms: Optional[float] = None
    ranked: list[str] = field(default_factory=list)  # top 10, "path:start-end" (ripgrep: "path (N matches)")
    error: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        d = {"metrics": {k: round(v, 4) for k, v in self.metrics.items()}, "tokens": self.tokens,
             "in_payload": self.in_payload,
             "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1), "ranked": self.ranked}
        if self.error:
            d["error"] = self.error
        return d


def _miss(error: str) -> Outcome:
    return Outcome(metrics={m: 0.0 for m in RANKING_METRICS}, error=error)


def _as_results(res) -> list[Result]:
    return [Result.block(r.file_path, r.start_line, r.end_line) for r in res]


def _label(r: Result) -> str:
    return f"{r.file_path}:{r.spans[0][0]}-{r.spans[-1][1]}"


def _coderag_outcome(index, query: str, variant: str, gold: Sequence[Span], max_tokens: int) -> Outcome:
    if variant == "full":
        t0 = time.perf_counter()
        res = index.search(query, max_tokens=max_tokens, format="xml")
        latency = (time.perf_counter() - t0) * 1000
        ranked = _as_results(res)
        return Outcome(score_ranking(ranked, gold), res.tokens, contains_gold(ranked, gold), latency,
                       [_label(r) for r in ranked[:RANK_TOP_K]])
    raw = dict(retriever=variant, auto_merge=False, merge_adjacent=False, format="xml")
    ranked = _as_results(index.search(query, max_tokens=RANK_MAX_TOKENS, top_k=RANK_TOP_K, **raw))
    t0 = time.perf_counter()
    packed = index.search(query, max_tokens=max_tokens, **raw)
    latency = (time.perf_counter() - t0) * 1000
    return Outcome(score_ranking(ranked, gold), packed.tokens, contains_gold(_as_results(packed), gold), latency,
                   [_label(r) for r in ranked[:RANK_TOP_K]])


def _ripgrep_outcome(root: Path, query: str, gold: Sequence[Span], count_tokens: Callable[[str], int],
                     rg: str) -> Outcome:
    from coderag.eval.ripgrep_baseline import grep

    ans = grep(query, root, rg=rg)
    return Outcome(score_ranking(ans.ranked, gold), count_tokens(ans.payload) if ans.payload else 0,
                   contains_gold(ans.payload_results, gold), ans.latency_ms,
                   [f"{r.file_path} ({ans.matches[r.file_path]} matches)" for r in ans.ranked[:RANK_TOP_K]])


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
    """Aggregate per variant, over all queries ("all"), per kind ("kind:natural") and per corpus ("corpus:click")."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in queries:
        groups["all"].append(q)
        groups[f"kind:{q['kind']}"].append(q)
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


def run_eval(queries: Sequence, variants: Sequence[str] = VARIANTS, max_tokens: int = DEFAULT_MAX_TOKENS,
             root_for_corpus: Optional[Callable[[str], Path]] = None, overrides: Optional[dict[str, Any]] = None,
             status: Optional[StatusLine] = None) -> EvalRun:
    """Index each corpus of `queries` once (reusing an up-to-date index), run every variant on every query.

    Args:
        queries: coderag.eval.datasets.Query objects (several corpora may be mixed).
        root_for_corpus: corpus name -> folder to index (default: fetch the pinned corpus).
        overrides: retrieval settings to change for this run, e.g. {"dense_weight": 2.0}.
    """
    from coderag.config import load_settings
    from coderag.pipelines.ingestion import index_repository

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
    by_corpus: dict[str, list] = defaultdict(list)
    for q in queries:
        by_corpus[q.corpus].append(q)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["coderag", *sys.argv[1:]]) if Path(sys.argv[0]).name == "coderag" else None,
        **_git_state(), "variants": list(variants), "max_tokens": max_tokens,
        "rank_top_k": RANK_TOP_K, "rank_max_tokens": RANK_MAX_TOKENS, "overrides": overrides or {},
        "corpora": {}, "relevance": "recall@k: file level (distinct files); hit@k, MRR@10, nDCG@10: chunk level "
                                  "(a result overlapping a gold range of the same file, each gold credited once)"}
    rows: list[dict[str, Any]] = []
    for corpus, qs in by_corpus.items():
        root = Path(root_for_corpus(corpus)).resolve()
        settings = apply_overrides(load_settings(root), overrides or {})
        status.label = corpus
        t0 = time.perf_counter()
        try:
            s = index_repository(root, settings, progress=status.indexing)
        finally:
            status.clear()
        meta["corpora"][corpus] = {"root": str(root), "files": s.files_seen, "indexed_now": s.indexed,
                                   "index_seconds": round(time.perf_counter() - t0, 1),
                                   "retrieval": settings.retrieval.model_dump()}
        rows.extend(_run_corpus(root, settings, qs, variants, max_tokens, rg, status))
    meta["seconds"] = round(time.perf_counter() - started, 1)
    return EvalRun(meta, rows, summarize(rows, variants))


def _run_corpus(root: Path, settings, queries: Sequence, variants: Sequence[str], max_tokens: int,
                rg: Optional[str], status: StatusLine) -> list[dict[str, Any]]:
    from coderag.pipelines.code_index import CodeIndex

    index = CodeIndex.open(root, settings=settings, create=False)
    try:
        for mode in ("hybrid", "bm25", "dense"):  # load the model and the stores outside the timings
            if mode in variants or (mode == "hybrid" and "full" in variants):
                index.search(WARMUP_QUERY, retriever=mode, max_tokens=max_tokens)
        if rg:
            from coderag.eval.ripgrep_baseline import grep

            grep(WARMUP_QUERY, root, rg=rg)  # page the tree into the OS cache, as it is for the other variants
        rows = []
        for i, q in enumerate(queries, 1):
            gold = [Span(*g) for g in q.gold]
            outcomes: dict[str, Outcome] = {}
            for v in variants:
                status.show(f"{q.corpus}: query {i}/{len(queries)} ({v})")
                try:
                    if v == "ripgrep":
                        outcomes[v] = _ripgrep_outcome(root, q.query, gold, index.count_tokens, rg)
                    else:
                        outcomes[v] = _coderag_outcome(index, q.query, v, gold, max_tokens)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a scored miss, never a crash
                    outcomes[v] = _miss(f"{type(exc).__name__}: {exc}")
            rows.append({"id": q.id, "corpus": q.corpus, "kind": q.kind, "query": q.query,
                         "gold": [f"{g.file_path}:{g.start_line}-{g.end_line}" for g in gold], "outcomes": outcomes})
        return rows
    finally:
        status.clear()
        index.close()
