"""Fusion of the legs: a LlamaIndex QueryFusionRetriever that runs the legs a request asks for and orders
their candidates by the rules (`ranker=rules`, pipelines/rules.py), by the learned ranker (`ranker=learned`,
pipelines/ranker.py), or by the two blended (`ranker=blend`, the default)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from coderag.pipelines.ranker import LEARNED_CUT_RATIO, LEARNED_FLAT_RATIO, LEARNED_FLOOR_RATIO, blend
from coderag.pipelines.retrievers import DenseRetriever
from coderag.pipelines.rules import RRF, SCORES, Rules
from coderag.pipelines.search_request import BM25, DENSE, SearchRequest, as_request

if TYPE_CHECKING:
    from coderag.base.config import RetrievalSettings

# The learned ranker (pipelines/ranker.py) replaces the rules and every boost of theirs; its scores are
# probabilities over the request's candidates. `ranker=rules` keeps the hand-set fusion to compare against.
# `ranker=blend` (the default) orders by the rules' scores times the learned probabilities to the power
# `learned_share`, and keeps the rules' scale (pipelines/ranker.py `blend`): on repositories neither saw, the
# learned ranker wins on commit messages and test descriptions, the rules on questions, and the blend keeps
# most of both (eval/RESULTS.md, "the rules and the learned ranker blended").
LEARNED, RULES, BLEND = "learned", "rules", "blend"


@dataclass(frozen=True)
class PayloadCuts:
    """The ratios to a request's best score that shape its payload, read on the scale of the request's fusion:
    results under `cut` x the best are left out before packing (the long tail after a sharp fall; 0 keeps
    it, and the budget alone bounds the payload); a second file within `flat` of the best means the engine is
    not sure, so the payload lists candidate lines rather than fewer long blocks (postprocessors/candidates.py);
    a place under `floor` x the best is not worth a candidate line."""

    cut: float
    flat: float
    floor: float


# `flat` and `floor` on the rules' two scales: a second file within `flat` of the best means the engine is not
# sure on 64% of the natural questions on both scales, and 80% of a top 40 stays above `floor` on both. Under
# RRF a one-rank difference in both legs is ~2%, and a top that both legs agree on, or one lifted by a
# definition or keyword boost, stands 15% or more above the rest. `cut` on these scales is a setting
# (`retrieval.cut_ratio`, `rrf_cut_ratio`, `report_cut_ratio`); the learned ranker's three are calibrated with
# the model (pipelines/ranker.py).
_FLAT_FLOOR = {RRF: (0.87, 0.3), SCORES: (0.62, 0.06)}


def payload_cuts(mode: str, retrieval: "RetrievalSettings", long_query: bool = False,
                 exact: bool = False) -> PayloadCuts:
    """The cuts of a request fused on the scale `mode` (`WeightedFusionRetriever.mode_for`). A long query (a
    bug report the query reader read) takes `report_cut_ratio` on the rules' scales: its best chunk carries
    boosts (the traceback's functions, the named files) that would cut the rest of the right file at the
    usual ratio. A search that requires its keywords cuts nothing: every chunk that holds them was asked for."""
    if mode == LEARNED:
        cuts = PayloadCuts(LEARNED_CUT_RATIO, LEARNED_FLAT_RATIO, LEARNED_FLOOR_RATIO)
    else:
        cut = (retrieval.report_cut_ratio if long_query
               else retrieval.cut_ratio if mode == SCORES else retrieval.rrf_cut_ratio)
        cuts = PayloadCuts(cut, *_FLAT_FLOOR[mode])
    return replace(cuts, cut=0.0) if exact else cuts


class WeightedFusionRetriever(QueryFusionRetriever):
    """QueryFusionRetriever whose order is the rules' (pipelines/rules.py: the legs' weighted shares, boosted
    by the query's evidence), the learned ranker's, or the two blended; keyed by node id.

    Built once per index over its named legs (pipelines/search_request.py: dense, bm25, named); a request
    says which legs run, its keywords and, for a long report, its reading. `prepare(text)` turns a plain
    QueryBundle into a request (a notebook's `retrieve("...")` reads a long report as a search does). The
    other keyword arguments are the rules' (`Rules`). The settings give every tuned value
    (retriever_graph.fusion_of); a `learned_share` of 0 leaves the blend the rules' order.
    """

    def __init__(self, legs: Dict[str, BaseRetriever], weights: Dict[str, float], *, similarity_top_k: int = 20,
                 prepare: Optional[Callable[[QueryBundle], SearchRequest]] = None, ranker: str = RULES,
                 ranker_model: Optional[str] = None, learned_share: float = 0.0,
                 **rules: Any) -> None:
        from llama_index.core.llms import MockLLM

        # An LLM it never calls (one query, no rewriting), given so that core does not resolve `Settings.llm`
        # (OpenAI by default: an ImportError offline).
        super().__init__(list(legs.values()), llm=MockLLM(), mode="reciprocal_rerank", num_queries=1,
                         use_async=False, similarity_top_k=similarity_top_k,
                         retriever_weights=[weights[name] for name in legs])
        self.legs = dict(legs)
        self.rules = Rules(weights, **rules)
        self.prepare = prepare or as_request
        if ranker not in (BLEND, LEARNED, RULES):
            raise ValueError(f"ranker must be {BLEND!r}, {LEARNED!r} or {RULES!r}, not {ranker!r}")
        if not 0.0 <= learned_share <= 1.0:
            raise ValueError(f"learned_share must be between 0 and 1, not {learned_share!r}")
        self.ranker, self.ranker_model, self.learned_share = ranker, ranker_model, learned_share

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        req = query_bundle if isinstance(query_bundle, SearchRequest) else self.prepare(query_bundle)
        results = self.run_legs(req)
        return self.fuse(results, req)[: req.top_k or self.similarity_top_k]

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        # Core's async path fuses the legs by its own unweighted rank fusion; this one answers as the sync one.
        return self._retrieve(query_bundle)

    def run_legs(self, req: SearchRequest) -> Dict[str, List[NodeWithScore]]:
        """The dense leg's query embedding starts first, in the embedding model's helper process when it
        runs one (`OnnxEmbedding.start_process`), then the other legs run here, then the dense leg with
        the vector, which is ready by then: the embedding costs no wall time. Without a helper the legs
        run one after the other. (Not threads: qdrant-edge holds the GIL while it searches and the
        embedding needs it around its ONNX call, so on 2 cores a worker thread slowed both legs down and
        nearly doubled the embedding's own time; embed_process.py says more.)"""
        legs = {name: r for name, r in self.legs.items() if name in req.legs}
        pending: Dict[str, Any] = {}
        for name, r in legs.items():
            if isinstance(r, DenseRetriever) and req.embedding is None:
                pending[name] = r.start_embedding(req.dense_text)
        results: Dict[str, List[NodeWithScore]] = {}
        try:
            for name, r in legs.items():
                if name not in pending:
                    results[name] = r.retrieve(req)
            if req.while_embedding is not None and any(getattr(p, "where", None) == "helper" for p in pending.values()):
                req.while_embedding([n for nodes in results.values() for n in nodes])
        except BaseException:
            for p in pending.values():
                if p is not None:
                    p.cancel()  # a helper's answer is read, so the next search does not get it
            raise
        for name, p in pending.items():
            emb = self._embedding(p, req) if p is not None else None
            results[name] = legs[name].retrieve(replace(req, embedding=emb) if emb else req)
        return results

    @staticmethod
    def _embedding(pending: Any, req: SearchRequest) -> List[float]:
        t0 = time.perf_counter()
        vec = pending.result()
        req.timings["embed_ms"] = pending.compute_ms
        req.timings["embed_wait_ms"] = (time.perf_counter() - t0) * 1000
        return vec

    def mode_for(self, req: SearchRequest) -> str:
        """The scale a request's scores are on: LEARNED under the learned ranker; with the rules (and the blend,
        which keeps their scale), the rules' (`Rules.mode_for`)."""
        return LEARNED if self.ranker == LEARNED else self.rules.mode_for(req)

    def fuse(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest) -> List[NodeWithScore]:
        """The candidates of the legs' `results`, best first: by the rules' scores, under the blend weighed
        with the learned ranker's probabilities (pipelines/ranker.py `blend`), or by those alone."""
        t0 = time.perf_counter()
        mode = self.mode_for(req)
        if mode == LEARNED:
            out = self._learned(results, req)
        else:
            fused, by_id = self.rules.scores(results, req, mode)
            if self.ranker == BLEND and self.learned_share > 0.0 and fused and {DENSE, BM25} <= results.keys():
                # Only over both legs: the model learned from candidates of both, and a search while the vectors
                # are still being built, or with one leg asked for, would feed it the other leg's evidence as
                # absent. The rules' own scores stay on the request for the payload's cut: the model, trained
                # where no answer is documentation, would otherwise hide a README that answers a question
                # (eval/RESULTS.md, "a README that answers a question").
                req.cut_scores = dict(fused)
                fused = blend(fused, self._learned_probabilities(results, req, by_id), self.learned_share)
            out = [NodeWithScore(node=by_id[nid].node, score=score)
                   for nid, score in sorted(fused.items(), key=lambda kv: kv[1], reverse=True)]
        req.timings["fusion_ms"] = (time.perf_counter() - t0) * 1000
        return out

    def _learned_probabilities(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest,
                               by_id: Dict[str, NodeWithScore]) -> Dict[str, float]:
        """The learned ranker's probability of each candidate (pipelines/ranker.py), by node id. A caller's
        keywords say what it wants, beyond what any query taught the model: they multiply the probabilities as
        they multiply the scores of the score fusion."""
        from coderag.pipelines.features import candidate_features
        from coderag.pipelines.ranker import MODEL_PATH, load_ranker

        ids, rows = candidate_features(results, req)
        probs = dict(zip(ids, load_ranker(self.ranker_model or MODEL_PATH).scores(rows)))
        if req.keywords:
            for nid in probs:
                probs[nid] *= self.rules.keyword_factor(by_id[nid], req.keywords, self.rules.score_power)
        return probs

    def _learned(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest) -> List[NodeWithScore]:
        """The candidates ordered by the learned ranker's probabilities (pipelines/ranker.py)."""
        by_id = {n.node.node_id: n for nodes in results.values() for n in nodes}
        scored = self._learned_probabilities(results, req, by_id)
        return [NodeWithScore(node=by_id[nid].node, score=score)
                for nid, score in sorted(scored.items(), key=lambda kv: kv[1], reverse=True)]
