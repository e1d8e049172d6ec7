"""Retrieval metrics over ranked results and gold line ranges (pure functions, no I/O).

A *result* is one returned block: a file and the line spans it shows (a coderag chunk has one
span; a ripgrep file has one span per matching line). A *gold* is a file and a 1-based
inclusive line range. Three relevance levels are used:

- file level (R@k, MRR@10, as issue 15 and the swebench-dev README define them): the ranked list
  is reduced to its distinct files, in order of first appearance (what an agent would open); a
  file is relevant when some gold names it. MRR@10 is 1 / rank of the first gold file among the
  first 10 distinct files.
- line level (line hit@k): one of the first k results shows at most LINE_HIT_MAX_LINES lines and
  overlaps a gold range, so a whole 900-line file returned as one block does not count as a hit.
- chunk level (hit@k, chunk MRR@10, nDCG@10): a result is relevant when one of its spans overlaps
  a gold range of the same file. In chunk MRR and nDCG each gold range is credited once, to the
  first result that covers it, so returning one function in three pieces does not score three times.

Until issue 15, "mrr@10" was the chunk-level MRR; it is the file-level one now (the issue's and
the benchmark's definition), and the chunk-level value is reported as "chunk_mrr@10".

Examples:
    >>> gold = [Span("a.py", 10, 20)]
    >>> ranked = [Result("b.py", ((1, 5),)), Result("a.py", ((15, 30),))]
    >>> file_recall_at(ranked, gold, 1), file_recall_at(ranked, gold, 5)
    (0.0, 1.0)
    >>> chunk_hit_at(ranked, gold, 5), mrr_at(ranked, gold, 10), file_mrr_at(ranked, gold, 10)
    (1.0, 0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Optional


class Span(NamedTuple):
    """A file and a 1-based inclusive line range (a gold label)."""

    file_path: str
    start_line: int
    end_line: int


class Result(NamedTuple):
    """One returned block: a file and the (start, end) line spans it shows."""

    file_path: str
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def block(cls, file_path: str, start_line: int, end_line: int) -> "Result":
        return cls(file_path, ((start_line, end_line),))


def overlaps(result: Result, gold: Span) -> bool:
    """True when the result is in gold's file and one of its spans shares a line with gold's range."""
    if result.file_path != gold.file_path:
        return False
    return any(s <= gold.end_line and gold.start_line <= e for s, e in result.spans)


def ranked_files(ranked: Sequence[Result]) -> list[str]:
    """Distinct files of a ranking, in order of first appearance."""
    seen: dict[str, None] = {}
    for r in ranked:
        seen.setdefault(r.file_path, None)
    return list(seen)


def _gold_files(gold: Sequence[Span]) -> set[str]:
    return {g.file_path for g in gold}


def file_recall_at(ranked: Sequence[Result], gold: Sequence[Span], k: int) -> float:
    """Share of the gold files among the first k distinct files of the ranking."""
    want = _gold_files(gold)
    if not want:
        return 0.0
    return len(want & set(ranked_files(ranked)[:k])) / len(want)


def gold_file_first(ranked: Sequence[Result], gold: Sequence[Span]) -> float:
    """1.0 when the first distinct file of the ranking is a gold file: the right file first, however many files
    the gold has. recall@1 counts a share of them instead, so a change to two files scores at most 0.5 there."""
    files = ranked_files(ranked)
    return 1.0 if files and files[0] in _gold_files(gold) else 0.0


def chunk_hit_at(ranked: Sequence[Result], gold: Sequence[Span], k: int) -> float:
    """1.0 when one of the first k results overlaps a gold range, else 0.0."""
    return 1.0 if any(overlaps(r, g) for r in ranked[:k] for g in gold) else 0.0


LINE_HIT_MAX_LINES = 200


def shown_lines(result: Result) -> int:
    """How many lines a result shows (the sum of its spans)."""
    return sum(e - s + 1 for s, e in result.spans)


def line_hit_at(ranked: Sequence[Result], gold: Sequence[Span], k: int,
                max_lines: int = LINE_HIT_MAX_LINES) -> float:
    """1.0 when one of the first k results shows at most `max_lines` lines and overlaps a gold range."""
    return 1.0 if any(shown_lines(r) <= max_lines and overlaps(r, g) for r in ranked[:k] for g in gold) else 0.0


def file_mrr_at(ranked: Sequence[Result], gold: Sequence[Span], k: int = 10) -> float:
    """File level: 1 / rank of the first gold file among the first k distinct files (0 if none)."""
    want = _gold_files(gold)
    for rank, f in enumerate(ranked_files(ranked)[:k], 1):
        if f in want:
            return 1.0 / rank
    return 0.0


def _chunk_gains(ranked: Sequence[Result], gold: Sequence[Span], k: int) -> list[int]:
    """Binary gain per rank: 1 where a result covers a gold range that no earlier result covered."""
    credited: set[int] = set()
    gains = []
    for r in ranked[:k]:
        new = {i for i, g in enumerate(gold) if i not in credited and overlaps(r, g)}
        credited |= new
        gains.append(1 if new else 0)
    return gains


def mrr_at(ranked: Sequence[Result], gold: Sequence[Span], k: int = 10) -> float:
    """Chunk level: 1 / rank of the first result overlapping a gold range within the first k (0 if none)."""
    for rank, r in enumerate(ranked[:k], 1):
        if any(overlaps(r, g) for g in gold):
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: Sequence[Result], gold: Sequence[Span], k: int = 10) -> float:
    """Chunk level, binary relevance, each gold range credited once; ideal = all gold ranges first."""
    if not gold:
        return 0.0
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(_chunk_gains(ranked, gold, k)))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal


def contains_gold(results: Iterable[Result], gold: Sequence[Span]) -> bool:
    """True when any result overlaps any gold range (used on the packed payload)."""
    return any(overlaps(r, g) for r in results for g in gold)


def contains_gold_file(results: Iterable[Result], gold: Sequence[Span]) -> bool:
    """True when any result is in a gold file (issue 15's "gold file in the payload": the agent sees the file)."""
    want = _gold_files(gold)
    return any(r.file_path in want for r in results)


def tokens_to_gold(blocks: Iterable[tuple[Result, str]], gold: Sequence[Span],
                   count: Callable[[str], int]) -> Optional[int]:
    """Tokens an agent reads, block by block in payload order, until the first line of a gold range; None
    when no block shows one. `blocks` pairs each shown block (one span) with its text.

    Example:
        >>> words = lambda text: len(text.split())
        >>> shown = [(Result.block("b.py", 1, 2), "x = 1\\ny = 2"), (Result.block("a.py", 5, 7), "p\\nq\\nr")]
        >>> tokens_to_gold(shown, [Span("a.py", 6, 9)], words)
        8
    """
    used = 0
    for result, text in blocks:
        start = result.spans[0][0]
        first = min((max(g.start_line, start) for g in gold if overlaps(result, g)), default=None)
        if first is None:
            used += count(text)
            continue
        return used + count("\n".join(text.split("\n")[:first - start + 1]))
    return None


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100 (not {p!r})")
    xs = sorted(values)
    pos = (len(xs) - 1) * p / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


RANK_KS = (1, 5, 10)
LINE_HIT_KS = (1, 5)
RANKING_METRICS = (*(f"recall@{k}" for k in RANK_KS), "gold_first", "mrr@10", *(f"line_hit@{k}" for k in LINE_HIT_KS),
                   *(f"hit@{k}" for k in RANK_KS), "chunk_mrr@10", "ndcg@10")


def score_ranking(ranked: Sequence[Result], gold: Sequence[Span]) -> dict[str, float]:
    """Every ranking metric of one query (RANKING_METRICS): file recall@1/5/10, a gold file first and MRR@10,
    line hit@1/5,
    chunk hit@1/5/10, chunk MRR@10, nDCG@10."""
    out: dict[str, float] = {}
    for k in RANK_KS:
        out[f"recall@{k}"] = file_recall_at(ranked, gold, k)
    out["gold_first"] = gold_file_first(ranked, gold)
    out["mrr@10"] = file_mrr_at(ranked, gold, 10)
    for k in LINE_HIT_KS:
        out[f"line_hit@{k}"] = line_hit_at(ranked, gold, k)
    for k in RANK_KS:
        out[f"hit@{k}"] = chunk_hit_at(ranked, gold, k)
    out["chunk_mrr@10"] = mrr_at(ranked, gold, 10)
    out["ndcg@10"] = ndcg_at(ranked, gold, 10)
    return out
