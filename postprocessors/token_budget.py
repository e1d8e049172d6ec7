"""TokenBudgetPostprocessor: greedy by score into max_tokens; a block that does not fit is cut at a line."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from coderag.base.budget import DEFAULT_MAX_TOKENS
from coderag.nodes.keys import END_LINE_KEY, START_LINE_KEY

TRUNCATED_KEY = "truncated"
FULL_END_LINE_KEY = "full_end_line"
DEFAULT_CUT_RATIO = 0.0
MIN_USEFUL_TOKENS = 24

# cost(node, text, truncated) -> tokens that block takes in the rendered payload
CostFn = Callable[[NodeWithScore, str, bool], int]
# prefix_cost(node, k) -> tokens of the block cut after its first k lines (truncation marker included)
PrefixCostFn = Callable[[NodeWithScore, int], int]


class TokenBudgetPostprocessor(BaseNodePostprocessor):
    """Pack results, best first, into `max_tokens` minus the payload frame.

    A block that does not fit whole is cut after its last fitting line and flagged `truncated`
    (with `full_end_line`), which fills the budget, or skipped when not even one line fits. With `cut_ratio` > 0 results
    scoring below cut_ratio x the best score are dropped first (the long tail after a sharp fall).

    `cost(node, text, truncated)` prices a block as rendered. `prefix_cost(node, k)`, when given, prices
    the block cut after k lines without rendering it (the query pipeline precomputes per-line counts
    once per block); without it each try of the cut renders and counts the shortened block.
    """

    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, gt=0, description="Budget for the whole payload.")
    frame_tokens: int = Field(default=0, ge=0, description="Tokens of the payload around the results.")
    cut_ratio: float = Field(default=DEFAULT_CUT_RATIO, ge=0.0, le=1.0, description="Dynamic cut: 0 keeps the tail.")
    min_keep: int = Field(default=3, ge=1, description="The dynamic cut never keeps fewer than this.")
    min_block_tokens: int = Field(default=MIN_USEFUL_TOKENS, ge=1,
                                  description="No block costs less (its frame): packing stops below it.")
    max_misses: int = Field(default=3, ge=1, description="Blocks in a row that fit not even one line: stop.")
    reserve_tokens: int = Field(default=0, ge=0, description="Kept free for what follows the blocks (candidate lines).")
    min_cut_lines: int = Field(default=1, ge=1, description="A block cut after another needs this many lines "
                               "(fewer say no more than a candidate line): else it is skipped.")

    _cost: CostFn = PrivateAttr()
    _prefix_cost: Optional[PrefixCostFn] = PrivateAttr(default=None)
    _left: int = PrivateAttr(default=0)

    def __init__(self, cost: CostFn, prefix_cost: Optional[PrefixCostFn] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cost = cost
        self._prefix_cost = prefix_cost

    @classmethod
    def class_name(cls) -> str:
        return "TokenBudgetPostprocessor"

    @property
    def tokens_left(self) -> int:
        """After packing: the budget the blocks left free, the reserve included (as priced; the payload's
        final count may differ by a token or two on a cut block)."""
        return self._left

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        nodes = sorted(nodes, key=lambda n: n.get_score(), reverse=True)
        if self.cut_ratio and nodes:
            floor = nodes[0].get_score() * self.cut_ratio
            nodes = nodes[: self.min_keep] + [n for n in nodes[self.min_keep:] if n.get_score() >= floor]
        left = self.max_tokens - self.frame_tokens - self.reserve_tokens
        out: list[NodeWithScore] = []
        misses = 0
        for n in nodes:
            if left < self.min_block_tokens or misses >= self.max_misses:
                break
            text = n.node.get_content()
            cost = self._cost(n, text, False)
            if cost <= left:
                out.append(n)
                left -= cost
                continue
            cut = self._truncate(n, text, left, self.min_cut_lines if out else 1)
            if cut is not None:
                out.append(cut[0])
                left -= cut[1]
                break  # what is left is less than the next line of this block: the budget is full
            misses += 1
        self._left = max(0, left) + self.reserve_tokens
        return out

    def _truncate(self, n: NodeWithScore, text: str, left: int,
                  min_lines: int = 1) -> Optional[tuple[NodeWithScore, int]]:
        """The block cut after its last fitting line, and its price; None if not `min_lines` lines fit."""
        lines = text.split("\n")
        lo, hi, best, best_cost = 1, len(lines) - 1, None, 0
        while lo <= hi:  # the most lines whose block still fits
            mid = (lo + hi) // 2
            if self._prefix_cost is not None:
                cost = self._prefix_cost(n, mid)
            else:
                cost = self._cost(n, "\n".join(lines[:mid]), True)
            if cost <= left:
                best, best_cost, lo = mid, cost, mid + 1
            else:
                hi = mid - 1
        if best is None or best < min_lines:
            return None
        k = best
        meta = dict(n.node.metadata)
        meta[FULL_END_LINE_KEY] = meta[END_LINE_KEY]
        meta[END_LINE_KEY] = meta[START_LINE_KEY] + k - 1
        meta[TRUNCATED_KEY] = True
        node = TextNode(id_=n.node.node_id, text="\n".join(lines[:k]), metadata=meta)
        return NodeWithScore(node=node, score=n.score), best_cost
