"""The rules: the hand-set fusion of the legs. Each candidate's weighted share of each leg (its score over the
leg's best, to a power, or its reciprocal rank), times the evidence a query and its candidates give (keywords,
definitions of the names it spells or the uses of the one it asks about, tests and docs, changelogs and issue
templates, file-level evidence); then the file both legs put first takes the first place. `retrieval.ranker: rules`
orders by these scores alone, `blend` weighs them with the learned ranker's (pipelines/fusion.py). Which rules
apply to a request is one row of `KIND_RULES` per kind of query. What a candidate is (a phrase match, a
changelog, an unnamed window) is said once, in pipelines/features.py, for the rules and the learned ranker
alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from llama_index.core.schema import NodeWithScore

from coderag.nodes.file_roles import DOCS, TESTS, file_role
from coderag.nodes.keys import FILE_PATH_KEY, LANGUAGE_KEY
from coderag.pipelines.features import (NON_CODE_LANGUAGES, declares_only, defines_name, holds_phrase,
                                        is_report_noise, is_unnamed_window, query_phrase, quote_counts)
from coderag.pipelines.search_request import BM25, DENSE, QueryKind, SearchRequest
from coderag.queries.literals import message_coverage
from coderag.queries.names import uses_name

DEFAULT_RRF_K = 60.0  # Cormack, Clarke & Buettcher 2009: k = 60 damps the weight of top ranks
# Score fusion: a candidate's share of its leg is (score / the leg's best score) ** power. Reciprocal ranks
# with k = 60 are nearly flat at the top (1/61 against 1/63), so a chunk that both legs rank third outscored
# the chunk one leg ranked first by far; the scores say how far. A long report and a query about one name
# keep RRF (`mode_for`): their boosts were set on ranks (eval/RESULTS.md, "questions fuse the legs' scores").
SCORES, RRF = "scores", "rrf"

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

# Which code a request's names boost (`KindRules.names`): the names it spells, at their definitions; the uses
# of the one name it asks about; or the definitions a report's reading ranks (1, 1/2, 1/3 ... of the boost).
SPELLED, USES, READ = "spelled", "uses", "read"


@dataclass(frozen=True)
class KindRules:
    """Which of the rules apply to a request of one kind (`KIND_RULES`). Every value the rules weigh with is
    a setting or a constant above; this says only where each applies, so the kinds differ in one table and
    nowhere in the code that scores."""

    on_scores: bool  # fused on the legs' scores (`retrieval.fusion`); else on reciprocal ranks (`Rules.mode_for`)
    quotes: bool  # the query quoted word for word, or a message its template printed, gets `phrase_boost`
    names: str  # whose code the names boost: SPELLED, USES or READ
    name_boost_floor: float  # a definition boost of at least this, when the boost is on
    unnamed_windows: bool  # windows that define nothing weigh `unnamed_window_weight`
    declarations: bool  # code that only declares weighs `declaration_weight`
    non_code: bool  # docs, configuration and data files weigh `non_code_weight`
    file_evidence: bool  # a file's other hits add `file_evidence` of their scores to each of its chunks


# Each rule applies to the kinds it was measured on (eval/RESULTS.md). A question fuses on scores ("questions
# fuse the legs' scores") and weighs down code that only declares ("code that only declares"). A query about
# one name was tuned on ranks and asks for its definition (NAME_QUERY_BOOST) or its uses ("a query about one
# code name"). A long report was tuned on ranks; it is never taken for a quote, its reading ranks the
# definitions it points at, and its non-code files weigh less where its windows do not ("reading bug reports").
KIND_RULES = {
    QueryKind.QUESTION: KindRules(on_scores=True, quotes=True, names=SPELLED, name_boost_floor=0.0,
                                  unnamed_windows=True, declarations=True, non_code=False, file_evidence=False),
    QueryKind.DEFINITION: KindRules(on_scores=False, quotes=True, names=SPELLED, name_boost_floor=NAME_QUERY_BOOST,
                                    unnamed_windows=True, declarations=False, non_code=False, file_evidence=False),
    QueryKind.USAGES: KindRules(on_scores=False, quotes=True, names=USES, name_boost_floor=0.0,
                                unnamed_windows=True, declarations=False, non_code=False, file_evidence=False),
    QueryKind.REPORT: KindRules(on_scores=False, quotes=False, names=READ, name_boost_floor=0.0,
                                unnamed_windows=False, declarations=False, non_code=True, file_evidence=True),
}


def _defines(nws: NodeWithScore, name: str) -> bool:
    return defines_name(nws.node.metadata, nws.node.get_content(), name)


def _file(nws: NodeWithScore) -> str:
    return nws.node.metadata.get(FILE_PATH_KEY, "")


class Rules:
    """The rules' scores of one request's candidates (`scores`), on the scale `mode_for` says: a question's on
    the legs' scores, a long report's and a one-name query's on their reciprocal ranks (weighted: core's
    reciprocal-rank mode ignores `retriever_weights`). `weights` are the legs' RRF weights, `score_weights`
    their weights under score fusion; the weights of the legs that ran are normalised per request, as core
    normalises the weights it is given. The boosts lift chunks that hold the caller's keywords and the
    definitions of identifiers the query spells exactly (so `getUserById` ranks the function of that name above
    `get_user_by_id`, which the two legs would otherwise tie, and above its callers).

    The settings give the tuned values (retriever_graph.fusion_of). The definition boost, which no setting
    names, is DEFAULT_DEFINITION_BOOST; any other value left out here has no effect (a boost of 0, a weight
    of 1)."""

    def __init__(self, weights: Dict[str, float], *, score_power: float, fusion: str = SCORES,
                 score_weights: Optional[Dict[str, float]] = None,
                 rrf_k: float = DEFAULT_RRF_K, keyword_boost: float = 0.0, phrase_boost: float = 0.0,
                 definition_boost: float = DEFAULT_DEFINITION_BOOST, tests_docs_weight: float = 1.0,
                 noise_weight: float = 1.0, non_code_weight: float = 1.0, unnamed_window_weight: float = 1.0,
                 declaration_weight: float = 1.0, file_evidence: float = 0.0, leg_agreement: bool = True) -> None:
        if fusion not in (SCORES, RRF):
            raise ValueError(f"fusion must be {SCORES!r} or {RRF!r}, not {fusion!r}")
        self.weights = dict(weights)  # the RRF weights
        self.score_weights = dict(weights, **(score_weights or {}))
        self.fusion, self.score_power, self.rrf_k = fusion, score_power, rrf_k
        self.keyword_boost = keyword_boost
        self.phrase_boost = phrase_boost
        self.definition_boost = definition_boost
        self.tests_docs_weight = tests_docs_weight
        self.unnamed_window_weight = unnamed_window_weight  # windows that define nothing (where: KIND_RULES)
        self.declaration_weight = declaration_weight  # code that only declares (features.declares_only)
        self.noise_weight = noise_weight  # issue templates, changelogs: what a change's description matches, never where it is made
        self.non_code_weight = non_code_weight  # docs, config and data files (a report is fixed in code)
        self.file_evidence = file_evidence  # share of a file's other hits added to each of its chunks
        self.leg_agreement = leg_agreement

    def mode_for(self, req: SearchRequest) -> str:
        """The scale of a request's scores: the configured fusion for a question; RRF for a long report and for
        a query about one name ("parse_header", "who calls parse_header"), whose boosts (the report's frames,
        the name's definition or uses, NAME_QUERY_BOOST) were set against ranks. Fused on scores, the query
        generators' name questions lost 3-16 points of R@1 (eval/RESULTS.md, "questions fuse the legs' scores")."""
        return self.fusion if KIND_RULES[req.kind].on_scores else RRF

    def scores(self, results: Dict[str, List[NodeWithScore]], req: SearchRequest, mode: str
               ) -> Tuple[Dict[str, float], Dict[str, NodeWithScore]]:
        """(node id -> score, node id -> candidate): the weighted sum of each candidate's share of each leg
        (`_shares`), times the request's boosts and damping; then the file both legs put first, if they
        agree, keeps the first place."""
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
        if self.file_evidence and KIND_RULES[req.kind].file_evidence:
            self._add_file_evidence(fused, by_id)
        if self.leg_agreement:
            self._first_place_to_the_agreed_file(fused, by_id, shares, factor)
        return fused, by_id

    def keyword_factor(self, nws: NodeWithScore, keywords: List[str], power: float) -> float:
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
        if DENSE in weights and req.word_for_word:
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
                factor[nid] *= self.keyword_factor(nws, req.keywords, power)
        phrase = query_phrase(req.query_str) if self.phrase_boost and KIND_RULES[req.kind].quotes else ""
        if phrase:
            for nid, nws in by_id.items():
                text = nws.node.get_content()
                if (holds_phrase(text, phrase) or message_coverage(text, req.query_str) >= PASTED_MESSAGE_SHARE) \
                        and quote_counts(file_role(nws.node.metadata.get(FILE_PATH_KEY, ""),
                                                   nws.node.metadata.get(LANGUAGE_KEY, "")), req.role_asked_for):
                    factor[nid] *= 1.0 + self.phrase_boost  # a docstring quoted, or a message its template printed

    def _name_factors(self, factor: Dict[str, float], by_id: Dict[str, NodeWithScore], req: SearchRequest) -> None:
        """Definitions of the names a report points at or a query spells; for "who calls X", X's uses
        (`KindRules.names`)."""
        rules = KIND_RULES[req.kind]
        if rules.names == READ:
            # The boost of a chunk is that of the most telling name it defines (1, 1/2, 1/3 ... of the boost).
            names = req.reading.definitions
            for nid, nws in by_id.items():
                rank = next((i for i, name in enumerate(names) if _defines(nws, name)), None)
                if rank is not None:
                    factor[nid] *= 1.0 + self.definition_boost / (rank + 1)
            return
        idents = req.names.idents
        if rules.names == USES:
            for nid, nws in by_id.items():  # the places that use the name, not its definition
                if not _defines(nws, idents[0]) and uses_name(nws.node.get_content(), idents[0]):
                    factor[nid] *= 1.0 + NAME_QUERY_BOOST
            return
        boost = max(self.definition_boost, rules.name_boost_floor) if self.definition_boost else 0.0
        if idents and boost:
            for nid, nws in by_id.items():
                hits = sum(1 for i in idents if _defines(nws, i))
                factor[nid] *= 1.0 + boost * hits / len(idents)

    def _file_factors(self, factor: Dict[str, float], by_id: Dict[str, NodeWithScore], req: SearchRequest) -> None:
        """Tests and docs weigh less, as a question asks where a behaviour lives; when it asks for tests
        ("where is the progress bar tested") or docs, that role keeps its weight and the others weigh less.
        For a question, windows that define nothing weigh less, and so does code that only declares (unless
        it declares a name the question spells); for a report, its non-code files. For every query, the files
        that describe changes (changelogs, release notes, issue templates): a description of a change or of a
        bug matches them best, word for word, and they are never where it is made; unless the query asks what
        changed in a release, which they answer."""
        rules = KIND_RULES[req.kind]
        noise = 1.0 if req.changes_asked_for else self.noise_weight
        non_code = self.non_code_weight if rules.non_code else 1.0
        unnamed = self.unnamed_window_weight if rules.unnamed_windows else 1.0
        declaration = self.declaration_weight if rules.declarations else 1.0
        wanted = req.role_asked_for
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
            if is_report_noise(path, language):
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
