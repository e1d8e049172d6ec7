"""One variant's answer to one labelled query, scored: coderag's variants, ripgrep and the BM25 baselines.

The runner (eval/runner.py) asks each variant of each query through these functions and aggregates what
they return; a variant that raises is scored as a `miss`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from coderag.eval.metrics import (RANKING_METRICS, Result, Span, contains_gold, contains_gold_file, score_ranking,
                                  tokens_to_gold)

BASELINE_TOP_K = 30  # what a baseline packs its payload from (coderag's legs fetch 25-30 candidates too)
RANK_TOP_K = 10
RANK_MAX_TOKENS = 20_000  # the search API's ceiling: ten chunks always fit, so packing never cuts the ranking


@dataclass
class Outcome:
    """One variant's answer to one query, scored."""

    metrics: dict[str, float]
    tokens: Optional[int] = None
    in_payload: bool = False
    latency_ms: Optional[float] = None
    ranked: list[str] = field(default_factory=list)  # top 10, "path:start-end" (ripgrep: "path (N matches)")
    error: Optional[str] = None
    # A gold place among the payload's blocks or its one-line candidates (`full` lists candidates; None for
    # the other variants: the same as in_payload).
    place_in_payload: Optional[bool] = None
    # A gold file among the payload's blocks or candidate lines (issue 15's "gold file in the payload").
    file_in_payload: bool = False
    # Payload tokens read, block by block, until the first gold line (None: no block shows one); for ripgrep,
    # the matching files read whole in its order (grep-and-read).
    tokens_to_gold: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        d = {"metrics": {k: round(v, 4) for k, v in self.metrics.items()}, "tokens": self.tokens,
             "in_payload": self.in_payload, "place_in_payload": self.place_in_payload,
             "file_in_payload": self.file_in_payload, "tokens_to_gold": self.tokens_to_gold,
             "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1), "ranked": self.ranked}
        if self.error:
            d["error"] = self.error
        return d


def miss(error: str) -> Outcome:
    return Outcome(metrics={m: 0.0 for m in RANKING_METRICS}, error=error)


def _as_results(res) -> list[Result]:
    return [Result.block(r.file_path, r.start_line, r.end_line) for r in res]


def _label(r: Result) -> str:
    return f"{r.file_path}:{r.spans[0][0]}-{r.spans[-1][1]}"


def _payload_reading(res, gold: Sequence[Span], count_tokens: Callable[[str], int]) -> dict[str, Any]:
    """What a coderag payload shows of the gold: a gold line among its blocks, a gold place among its blocks
    or candidate lines, a gold file among either, and the tokens read until the first gold line."""
    shown = _as_results(res)
    places = shown + [Result.block(c.file_path, c.start_line, c.end_line) for c in res.candidates]
    return dict(in_payload=contains_gold(shown, gold), place_in_payload=contains_gold(places, gold),
                file_in_payload=contains_gold_file(places, gold),
                tokens_to_gold=tokens_to_gold(zip(shown, (r.text for r in res)), gold, count_tokens))


def coderag_outcome(index, query: str, variant: str, gold: Sequence[Span], max_tokens: int) -> Outcome:
    """`full`: one call, scored as returned. A raw retriever: ranked from a top-10 call that packing never
    cuts, its payload from a second call packed at `max_tokens`."""
    if variant == "full":
        t0 = time.perf_counter()
        res = index.search(query, max_tokens=max_tokens, format="xml")
        latency = (time.perf_counter() - t0) * 1000
        ranked = _as_results(res)
        return Outcome(score_ranking(ranked, gold), res.tokens, latency_ms=latency,
                       ranked=[_label(r) for r in ranked[:RANK_TOP_K]],
                       **_payload_reading(res, gold, index.count_tokens))
    raw = dict(retriever=variant, auto_merge=False, merge_adjacent=False, format="xml")
    ranked = _as_results(index.search(query, max_tokens=RANK_MAX_TOKENS, top_k=RANK_TOP_K, **raw))
    t0 = time.perf_counter()
    packed = index.search(query, max_tokens=max_tokens, **raw)
    latency = (time.perf_counter() - t0) * 1000
    reading = _payload_reading(packed, gold, index.count_tokens)
    reading["place_in_payload"] = None  # a gold place among candidate lines is counted for `full` only
    return Outcome(score_ranking(ranked, gold), packed.tokens, latency_ms=latency,
                   ranked=[_label(r) for r in ranked[:RANK_TOP_K]], **reading)


def ripgrep_outcome(root: Path, query: str, gold: Sequence[Span], count_tokens: Callable[[str], int],
                    rg: str) -> Outcome:
    """Grep's answer, scored; its tokens to gold are grep-and-read's: matching files read whole, in ripgrep's
    order, until the first gold line (None when the grep matches no gold file)."""
    from coderag.eval.ripgrep_baseline import grep, read_whole_files

    ans = grep(query, root, rg=rg)
    return Outcome(score_ranking(ans.ranked, gold), count_tokens(ans.payload) if ans.payload else 0,
                   contains_gold(ans.payload_results, gold), ans.latency_ms,
                   [f"{r.file_path} ({ans.matches[r.file_path]} matches)" for r in ans.ranked[:RANK_TOP_K]],
                   file_in_payload=contains_gold_file(ans.payload_results, gold),
                   tokens_to_gold=tokens_to_gold(read_whole_files(root, ans.ranked), gold, count_tokens))


def baseline_outcome(baseline, query: str, gold: Sequence[Span], count_tokens: Callable[[str], int],
                     max_tokens: int) -> Outcome:
    from coderag.eval.baselines import pack

    t0 = time.perf_counter()
    hits = baseline.search(query, BASELINE_TOP_K)
    shown, tokens = pack(hits, count_tokens, max_tokens)
    latency = (time.perf_counter() - t0) * 1000
    ranked = [h.result for h in hits[:RANK_TOP_K]]
    return Outcome(score_ranking(ranked, gold), tokens, contains_gold(shown, gold), latency,
                   [_label(r) for r in ranked], file_in_payload=contains_gold_file(shown, gold))
