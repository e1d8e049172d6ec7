"""Fusion of the legs: the learned ranker's order (`ranker=learned`, pipelines/ranker.py), the rules: a
weighted sum of each leg's normalised scores (or weighted reciprocal rank fusion), times the evidence a query
and its candidates give (keywords, definitions of the names it spells or the uses of the one it asks about,
tests and docs, a report's noise, file-level evidence), or the two blended (`ranker=blend`). What
a candidate is (a phrase match, a report's noise, an unnamed window) is said once, in pipelines/features.py,
for all three."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from coderag.nodes.file_roles import DOCS, TESTS, file_role, role_asked_for
from coderag.nodes.keys import FILE_PATH_KEY, LANGUAGE_KEY
from coderag.queries.literals import message_coverage
from coderag.nodes.lexical import is_pasted_error
from coderag.queries.names import uses_name
from coderag.queries.symbols import defines_symbol
from coderag.pipelines.features import (NON_CODE_LANGUAGES, declares_only, defines_name, is_report_noise,
                                        is_unnamed_window, phrase_of, query_phrase)
from coderag.pipelines.ranker import LEARNED_FLAT_RATIO, LEARNED_FLOOR_RATIO, blend
from coderag.pipelines.retrievers import DenseRetriever
from coderag.pipelines.search_request import BM25, DENSE, SearchRequest, as_request

DEFAULT_RRF_K = 60.0  # Cormack, Clarke & Buettcher 2009: k = 60 damps the weight of top ranks
# Score fusion: a candidate's share of its leg is (score / the leg's best score) ** power. Reciprocal ranks
# with k = 60 are nearly flat at the top (1/61 against 1/63), so a chunk that both legs rank third outscored
# the chunk one leg ranked first by far; the scores say how far. A long report and a query about one name
# keep RRF (`mode_for`): their boosts were set on ranks (eval/RESULTS.md, "questions fuse the legs' scores").
SCORES, RRF = "scores", "rrf"
# The learned ranker (pipelines/ranker.py) replaces the fusion and every boost below; its scores are
# probabilities over the request's candidates. `ranker=rules` keeps the hand-set fusion to compare against.
# `ranker=blend` (the default) orders by the rules' scores times the learned probabilities to the power
# `learned_share`, and keeps the rules' scale (pipelines/ranker.py `blend`): on repositories neither saw, the
# learned ranker wins on commit messages and test descriptions, the rules on questions, and the blend keeps
# most of both (eval/RESULTS.md, "the rules and the learned ranker blended").
LEARNED, RULES, BLEND = "learned", "rules", "blend"
DEFAULT_LEARNED_SHARE = 0.25
DEFAULT_SCORE_POWER = 3.0
# The ratios to the best fused score at which a payload lists candidate lines (postprocessors/candidates.py),
# on each fusion's scale: a second file within FLAT_RATIO of the best means the engine is not sure (64% of
# the natural questions on both scales), and a place under FLOOR_RATIO is not worth a line (80% of a top 40
# stay above it on both). Under RRF a one-rank difference in both legs is ~2%, and a top that both legs
# agree on, or one lifted by a definition or keyword boost, stands 15% or more above the rest.
FLAT_RATIO = {RRF: 0.87, SCORES: 0.62, LEARNED: LEARNED_FLAT_RATIO}
FLOOR_RATIO = {RRF: 0.3, SCORES: 0.06, LEARNED: LEARNED_FLOOR_RATIO}
DEFAULT_DEFINITION_BOOST = 0.5
# A query that is one name (`DEFAULT_STYLES`, "where is MAX_RETRIES defined") asks for its definition, and
# "who calls parse_header" for the places that use it. Such a query is fused on ranks (`mode_for`). Under weighted
# RRF (dense 1.25, BM25 1.0) a chunk both legs rank first scores 2.25x one that BM25 alone ranks first, and the
# dense leg rarely finds a constant's assignment or a call site, so what is asked for gets a factor above 2.25:
# x2.5, the phrase boost's arithmetic (eval/RESULTS.md, "a query about one code name"). Other queries keep DEFAULT_DEFINITION_BOOST:
# at 1.5 for every query, bug reports and questions naming names lost R@1 (0 / 4).
NAME_QUERY_BOOST = 1.5
# A query that is mostly the words of one message template (an error pasted) was printed there; a report
# that quotes a message around its own words is not (its message may come from an error catalogue, its fix
# from where the error is raised: eval/RESULTS.md, "a pasted error message").
PASTED_MESSAGE_SHARE = 0.5
LEXICAL_QUERY_DENSE_FACTOR = 0.5
def defines(symbol: str, identifier: str) -> bool:
    """True if a chunk with this symbol defines `identifier` (`LruCache.get` defines `get` and `LruCache.get`)."""
    return defines_symbol(symbol, identifier)


def _defines(nws: NodeWithScore, name: str) -> bool:
    return defines_name(nws.node.metadata, nws.node.get_content(), name)


def _file(nws: NodeWithScore) -> str:
    return nws.node.metadata.get(FILE_PATH_KEY, "")


class WeightedFusionRetriever(QueryFusionRetriever):
    """QueryFusionRetriever that sums the legs' weighted shares: a question's on their scores (each over its
    leg's best, to `score_power`), a long report's on their reciprocal ranks (core's reciprocal-rank mode
    ignores `retriever_weights`; this one honours them). It keys results by node id, boosts results that
    contain the query's keywords, and boosts the definitions of identifiers the query spells exactly (so
    `getUserById` ranks the function of that name above `get_user_by_id`, which the two legs would otherwise
    tie, and above its callers).

    Built once per index over its named legs (pipelines/search_request.py: dense, bm25, named); a request
    says which legs run, its keywords and, for a long report, its reading. The weights of the legs that
    run are normalised per request, as core normalises the weights it is given. `prepare(text)` turns a
    plain QueryBundle into a request (a notebook's `retrieve("...")` reads a long report as a search does).
    """

    def __init__(self, legs: Dict[str, BaseRetriever], weights: Dict[str, float], *, fusion: str = SCORES,
                 score_weights: Optional[Dict[str, float]] = None, score_power: float = DEFAULT_SCORE_POWER,
                 rrf_k: float = DEFAULT_RRF_K,
                 keyword_boost: float = 0.5, phrase_boost: float = 0.0,
                 definition_boost: float = DEFAULT_DEFINITION_BOOST,
                 tests_docs_weight: float = 1.0, noise_weight: float = 1.0, non_code_weight: float = 1.0,
                 unnamed_window_weight: float = 1.0, declaration_weight: float = 1.0,
                 file_evidence: float = 0.0, leg_agreement: bool = True, similarity_top_k: int = 20,
                 prepare: Optional[Callable[[QueryBundle], SearchRequest]] = None, ranker: str = RULES,
                 ranker_model: Optional[str] = None, learned_share: float = DEFAULT_LEARNED_SHARE) -> None:
        from llama_index.core.llms import MockLLM

        # An LLM it never calls (one query, no rewriting), given so that core does not resolve `Settings.llm`
        # (OpenAI by default: an ImportError offline).
        super().__init__(list(legs.values()), llm=MockLLM(), mode="reciprocal_rerank", num_queries=1,
                         use_async=False, similarity_top_k=similarity_top_k,
                         retriever_weights=[weights[name] for name in legs])
        self.legs, self.weights = dict(legs), dict(weights)  # the RRF weights
        self.score_weights = dict(weights, **(score_weights or {}))
        self.tests_docs_weight = tests_docs_weight
        self.unnamed_window_weight = unnamed_window_weight  # for questions: windows that define nothing
        self.declaration_weight = declaration_weight  # for questions: code that only declares (features.declares_only)
        self.noise_weight = noise_weight  # issue templates, changelogs: what a report matches but never fixes
        self.non_code_weight = non_code_weight  # docs, config and data files, for a report (fixed in code)
        self.file_evidence = file_evidence  # share of a file's other hits added to each of its chunks
        if fusion not in (SCORES, RRF):
            raise ValueError(f"fusion must be {SCORES!r} or {RRF!r}, not {fusion!r}")
        self.fusion, self.score_power, self.rrf_k = fusion, score_power, rrf_k
        self.leg_agreement = leg_agreement
        self.keyword_boost = keyword_boost
        self.phrase_boost = phrase_boost
        self.definition_boost = definition_boost
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
        which keeps their scale), the retriever's fusion for a question; RRF for a long report and for a query
        about one name ("parse_header", "who calls parse_header"), whose boosts (the report's frames, the
        name's definition or uses, NAME_QUERY_BOOST) were set against ranks. Fused on scores, the query
        generators' name questions lost 3-16 points of R@1 (eval/RESULTS.md, "questions fuse the legs' scores")."""
        if self.ranker == LEARNED:
            return LEARNED
        if req.reading is not None or req.names.definition or req.names.usages:
            return RRF
        return self.fusion

    def fuse(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest) -> List[NodeWithScore]:
        """The weighted sum of each candidate's share of each leg (`_shares`), times the request's boosts and
        damping; then the file both legs put first, if they agree, keeps the first place; under the blend,
        blended with the learned ranker's probabilities (pipelines/ranker.py `blend`)."""
        t0 = time.perf_counter()
        mode = self.mode_for(req)
        if mode == LEARNED:
            out = self._learned(results, req)
            req.timings["fusion_ms"] = (time.perf_counter() - t0) * 1000
            return out
        weights = self._leg_weights(results, req, mode)
        total_weight = sum(weights.values()) or 1.0
        base: Dict[str, float] = {}
        by_id: Dict[str, NodeWithScore] = {}
        shares: Dict[str, Dict[str, float]] = {}  # each leg's node ids, best first, with their shares
        for name, nodes in results.items():
            w = weights[name] / total_weight
            shares[name] = self._shares(nodes, mode)
            for nws in nodes:
                by_id.setdefault(nws.node.node_id, nws)
            for nid, share in shares[name].items():
                base[nid] = base.get(nid, 0.0) + w * share
        factor = self._boosts(by_id, req, mode)
        fused = {nid: score * factor[nid] for nid, score in base.items()}
        if req.reading is not None and self.file_evidence:
            self._add_file_evidence(fused, by_id)
        if self.leg_agreement:
            self._first_place_to_the_agreed_file(fused, by_id, shares, factor)
        if self.ranker == BLEND and self.learned_share > 0.0 and fused and {DENSE, BM25} <= results.keys():
            # Only over both legs: the model learned from candidates of both, and a search while the vectors are
            # still being built, or with one leg asked for, would feed it the other leg's evidence as absent.
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
                probs[nid] *= self._keyword_factor(by_id[nid], req.keywords, self.score_power)
        return probs

    def _learned(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest) -> List[NodeWithScore]:
        """The candidates ordered by the learned ranker's probabilities (pipelines/ranker.py)."""
        by_id = {n.node.node_id: n for nodes in results.values() for n in nodes}
        scored = self._learned_probabilities(results, req, by_id)
        return [NodeWithScore(node=by_id[nid].node, score=score)
                for nid, score in sorted(scored.items(), key=lambda kv: kv[1], reverse=True)]

    def _keyword_factor(self, nws: NodeWithScore, keywords: List[str], power: float) -> float:
        """(1 + keyword_boost x the share of the caller's keywords the chunk contains) ** power."""
        text = nws.node.get_content()
        hits = sum(1 for k in keywords if k in text)
        return (1.0 + self.keyword_boost * hits / len(keywords)) ** power

    def _shares(self, nodes: List[NodeWithScore], mode: str) -> Dict[str, float]:
        """Each of one leg's candidates' share, best first: (score / best score) ** score_power, or for RRF
        1 / (rank + k). A leg's scores (cosine, BM25) are on scales of their own; over its best score they
        say how close to its best each candidate is, which reciprocal ranks do not (1/61 and 1/63 for the
        first and the third, however far apart their scores)."""
        best_first = sorted(nodes, key=lambda x: x.score or 0.0, reverse=True)
        if mode == RRF:
            return {nws.node.node_id: 1.0 / (rank + self.rrf_k) for rank, nws in enumerate(best_first)}
        top = (best_first[0].score or 0.0) if best_first else 0.0
        if top <= 0.0:  # no evidence at all (every cosine negative): nothing to scale by
            return {nws.node.node_id: 0.0 for nws in best_first}
        return {nws.node.node_id: (max(nws.score or 0.0, 0.0) / top) ** self.score_power for nws in best_first}

    def _leg_weights(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest, mode: str) -> Dict[str, float]:
        """The weights of the legs that ran, for the fusion `mode`. A query about one code name ("who calls
        parse_header") or a pasted error is matched word for word, which the dense leg does not read: it
        weighs LEXICAL_QUERY_DENSE_FACTOR as much (eval/RESULTS.md, "a query about one code name")."""
        chosen = self.weights if mode == RRF else self.score_weights
        weights = {name: chosen[name] for name in results}
        if DENSE in weights and req.reading is None and (is_pasted_error(req.query_str) or req.names.about_a_code_name):
            weights[DENSE] *= LEXICAL_QUERY_DENSE_FACTOR
        return weights

    def _boosts(self, by_id: Dict[str, NodeWithScore], req: SearchRequest, mode: str) -> Dict[str, float]:
        """Each candidate's factor under the fusion `mode`: from the words of its text the request names
        (`_text_factors`), from the names it defines or uses (`_name_factors`), and from its file and kind
        (`_file_factors`)."""
        factor = dict.fromkeys(by_id, 1.0)
        self._text_factors(factor, by_id, req, mode)
        self._name_factors(factor, by_id, req)
        self._file_factors(factor, by_id, req)
        return factor

    def _text_factors(self, factor: Dict[str, float], by_id: Dict[str, NodeWithScore], req: SearchRequest,
                      mode: str) -> None:
        """Keywords a chunk contains; the query quoted word for word, or a pasted message its template printed.

        The keywords a caller passes say what it wants: their boost multiplies a chunk's place in its legs as
        it did under RRF, so under score fusion it multiplies the scores, its power the shares (1.5 on the
        scores is 3.4 on the shares at power 3). The other boosts were measured on each fusion as they are."""
        if req.keywords:
            power = self.score_power if mode == SCORES else 1.0
            for nid, nws in by_id.items():
                factor[nid] *= self._keyword_factor(nws, req.keywords, power)
        phrase = query_phrase(req.query_str) if self.phrase_boost and req.reading is None else ""
        if phrase:
            longest = max(phrase.split(" "), key=len)  # a cheap first test, which most candidates fail
            for nid, nws in by_id.items():
                text = nws.node.get_content()
                if longest in text.lower() and phrase in phrase_of(text):
                    factor[nid] *= 1.0 + self.phrase_boost
                elif message_coverage(text, req.query_str) >= PASTED_MESSAGE_SHARE:
                    factor[nid] *= 1.0 + self.phrase_boost  # its template printed the message pasted

    def _name_factors(self, factor: Dict[str, float], by_id: Dict[str, NodeWithScore], req: SearchRequest) -> None:
        """Definitions of the names a report points at or a query spells; for "who calls X", X's uses."""
        if req.reading is not None:
            # A report's reading ranks the names it points at: the boost of a chunk is that of the most
            # telling name it defines (1, 1/2, 1/3 ... of `definition_boost`).
            names = req.reading.definitions
            for nid, nws in by_id.items():
                rank = next((i for i, name in enumerate(names) if _defines(nws, name)), None)
                if rank is not None:
                    factor[nid] *= 1.0 + self.definition_boost / (rank + 1)
            return
        names = req.names
        idents = names.idents
        if names.usages:
            for nid, nws in by_id.items():  # the places that use the name, not its definition
                if not _defines(nws, idents[0]) and uses_name(nws.node.get_content(), idents[0]):
                    factor[nid] *= 1.0 + NAME_QUERY_BOOST
            return
        boost = self.definition_boost
        if boost and names.definition:
            boost = max(boost, NAME_QUERY_BOOST)
        if idents and boost:
            for nid, nws in by_id.items():
                hits = sum(1 for i in idents if _defines(nws, i))
                factor[nid] *= 1.0 + boost * hits / len(idents)

    def _file_factors(self, factor: Dict[str, float], by_id: Dict[str, NodeWithScore], req: SearchRequest) -> None:
        """Tests and docs weigh less, as a question asks where a behaviour lives; when it asks for tests
        ("where is the progress bar tested") or docs, that role keeps its weight and the others weigh less.
        For a question, windows that define nothing weigh less, and so does code that only declares (unless
        it declares a name the question spells); for a report, its noise and non-code files."""
        report = req.reading is not None
        noise, non_code = (self.noise_weight, self.non_code_weight) if report else (1.0, 1.0)
        unnamed = 1.0 if report else self.unnamed_window_weight
        name_query = req.names.definition or req.names.usages
        declaration = 1.0 if report or name_query else self.declaration_weight
        wanted = None if report else role_asked_for(req.query_str)
        if self.tests_docs_weight == 1.0 and noise == 1.0 and non_code == 1.0 and unnamed == 1.0 \
                and declaration == 1.0:
            return
        for nid, nws in by_id.items():
            m = nws.node.metadata
            path, language = m.get(FILE_PATH_KEY, ""), m.get(LANGUAGE_KEY, "")
            role = file_role(path, language)
            if (role != wanted) if wanted else role in (TESTS, DOCS):
                factor[nid] *= self.tests_docs_weight
            if is_unnamed_window(m):
                factor[nid] *= unnamed
            if declaration != 1.0 and declares_only(m) \
                    and not any(_defines(nws, name) for name in req.names.idents):
                factor[nid] *= declaration
            if language in NON_CODE_LANGUAGES:
                factor[nid] *= non_code
            if is_report_noise(path):
                factor[nid] *= noise

    def _first_place_to_the_agreed_file(self, fused: Dict[str, float], by_id: Dict[str, NodeWithScore],
                                        shares: Dict[str, Dict[str, float]], factor: Dict[str, float]) -> None:
        """When the dense and the BM25 leg, each with the request's boosts, put the same file first, the
        answer starts in that file: its best chunk takes the first place.

        Chunk-level fusion splits a file's evidence among its chunks: when the legs' first chunks are two
        different chunks of one file, a third file's chunk that both rank second can outscore each of them
        (under RRF, 1/(k+2) twice against 1/(k+1) once plus a low rank). Two legs that read the query
        differently and still name the same file are the strongest evidence a search has (eval/RESULTS.md,
        "the file both legs put first")."""
        firsts = set()
        for name in (DENSE, BM25):
            leg = shares.get(name)
            if not leg:
                return
            best = max(leg, key=lambda nid: factor[nid] * leg[nid])  # the first of equals, as ranked
            firsts.add(_file(by_id[best]))
        top = max(fused, key=fused.__getitem__)
        agreed = firsts.pop()
        if firsts or _file(by_id[top]) == agreed:
            return
        mine = max((nid for nid in fused if _file(by_id[nid]) == agreed), key=fused.__getitem__)
        fused[mine] = fused[top] * (1.0 + 1e-6)  # just above: the rest of the order stays as RRF made it

    def _add_file_evidence(self, fused: Dict[str, float], by_id: Dict[str, NodeWithScore]) -> None:
        """A file hit by several chunks is more likely the answer than one hit once: each chunk gains
        `file_evidence` x the scores of its file's next best chunks (decayed 1/2, 1/3), so among equal
        chunks the one whose file holds more evidence ranks first."""
        by_file: Dict[str, List[Tuple[float, str]]] = {}
        for nid, score in fused.items():
            by_file.setdefault(by_id[nid].node.metadata.get(FILE_PATH_KEY, ""), []).append((score, nid))
        bonus: Dict[str, float] = {}
        for hits in by_file.values():
            hits.sort(reverse=True)
            for score, nid in hits:
                others = [x for x, other in hits[:4] if other != nid][:3]
                bonus[nid] = self.file_evidence * sum(x / (i + 2) for i, x in enumerate(others))
        for nid, extra in bonus.items():
            fused[nid] += extra
