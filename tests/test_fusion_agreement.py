"""The fusion's first place goes to the file both legs put first (WeightedRRFFusionRetriever.fuse)."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from coderag.config import Settings
from coderag.pipelines.retriever_graph import fusion_of
from coderag.pipelines.retrievers import DenseRetriever, SparseRetriever
from coderag.pipelines.search_request import BM25, DENSE, NAMED, SearchRequest


def _fusion(agreement: bool = True):
    settings = Settings()
    settings.retrieval.leg_agreement = agreement
    return fusion_of(settings, {DENSE: DenseRetriever(None), BM25: SparseRetriever(None),
                                NAMED: SparseRetriever(None, named_files=True)})


def _chunk(path: str, start: int, text: str = "x = 1", symbol: str = "") -> TextNode:
    return TextNode(id_=f"{path}:{start}", text=text,
                    metadata={"file_path": path, "start_line": start, "end_line": start + 9, "symbol": symbol,
                              "language": "python"})


def _leg(*nodes: TextNode) -> list[NodeWithScore]:
    return [NodeWithScore(node=n, score=1.0 - i / 100) for i, n in enumerate(nodes)]


# Each leg puts a different chunk of core.py first and the same chunk of other.py second: chunk-level RRF
# ranks other.py first (two second places beat a first place and a tenth, or a first place alone).
CORE_A, CORE_B, OTHER = _chunk("src/core.py", 10), _chunk("src/core.py", 200), _chunk("src/other.py", 1)
FILLER = [_chunk(f"src/f{i}.py", 1) for i in range(8)]
AGREE = {DENSE: _leg(CORE_A, OTHER, *FILLER), BM25: _leg(CORE_B, OTHER, *FILLER[:7], CORE_A)}


def _order(fused) -> list[str]:
    return [n.node.node_id for n in fused]


def test_fusion_agreement_the_file_both_legs_put_first_comes_first() -> None:
    plain = _fusion(agreement=False).fuse(AGREE, SearchRequest("parse the options"))
    assert _order(plain)[0] == "src/other.py:1"  # what RRF alone gives
    fused = _fusion().fuse(AGREE, SearchRequest("parse the options"))
    assert _order(fused)[0] == "src/core.py:10"  # core.py's best fused chunk
    assert _order(fused)[1:] == [nid for nid in _order(plain) if nid != "src/core.py:10"]  # the rest as RRF made it
    assert fused[0].score > fused[1].score == pytest.approx(plain[0].score)


def test_fusion_agreement_legs_that_disagree_leave_the_order_to_rrf() -> None:
    legs = {DENSE: _leg(CORE_A, OTHER, *FILLER), BM25: _leg(FILLER[0], OTHER, CORE_B, *FILLER[1:])}
    assert _order(_fusion().fuse(legs, SearchRequest("q w e"))) == \
        _order(_fusion(agreement=False).fuse(legs, SearchRequest("q w e")))


def test_fusion_agreement_reads_each_leg_with_the_boosts() -> None:
    """The legs' first files are those the boosts give: here the definition of the name the query spells,
    which is in other.py, so the legs (raw: core.py first in both) do not agree and nothing moves."""
    other = _chunk("src/other.py", 1, text="def parse_options(): ...", symbol="parse_options")
    legs = {DENSE: _leg(CORE_A, other, *FILLER), BM25: _leg(CORE_B, other, *FILLER)}
    fused = _fusion().fuse(legs, SearchRequest("where is parse_options"))
    assert _order(fused)[0] == "src/other.py:1"
    assert _order(fused) == _order(_fusion(agreement=False).fuse(legs, SearchRequest("where is parse_options")))


def test_fusion_agreement_needs_both_legs() -> None:
    legs = {BM25: _leg(CORE_B, OTHER, *FILLER)}
    assert _order(_fusion().fuse(legs, SearchRequest("q w e"))) == \
        _order(_fusion(agreement=False).fuse(legs, SearchRequest("q w e")))
