"""Fusion of the legs: weighted reciprocal rank fusion plus the evidence a query and its candidates give
(keywords, definitions of the names it spells, tests and docs, a report's noise, file-level evidence)."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from coderag.nodes.file_roles import DOC_LANGUAGES, DOCS, TESTS, file_role
from coderag.nodes.keys import FILE_PATH_KEY, LANGUAGE_KEY
from coderag.nodes.symbols import chunk_defines, defines_symbol
from coderag.pipelines.retrievers import DenseRetriever, retrieve_nodes

DEFAULT_RRF_K = 60.0  # Cormack, Clarke & Buettcher 2009: k = 60 damps the weight of top ranks
DEFAULT_DEFINITION_BOOST = 0.5
_QUERY_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_WORD_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")


def query_identifiers(query: str) -> list[str]:
    """Identifiers the query spells out: compound names (`getUserById`, `get_user_by_id`, `LruCache.get`),
    or the whole query when it is one name. Plain words of a sentence are not identifiers.

    >>> query_identifiers("where is getUserById called"), query_identifiers("retry after login")
    (['getUserById'], [])
    """
    tokens = _QUERY_IDENT.findall(query)
    if len(tokens) == 1 and tokens[0] == query.strip():
        return tokens
    return [t for t in dict.fromkeys(tokens) if "." in t or len(_WORD_PARTS.findall(t)) > 1]


def defines(symbol: str, identifier: str) -> bool:
    """True if a chunk with this symbol defines `identifier` (`LruCache.get` defines `get` and `LruCache.get`)."""
    return defines_symbol(symbol, identifier)


NON_CODE_LANGUAGES = DOC_LANGUAGES | {"json", "yaml", "toml", "ini", "xml", "html", "css", "scss"}


def is_tests_or_docs(path: str, language: str) -> bool:
    """Tests, docs and plain text: usually not where a behaviour is implemented."""
    return file_role(path, language) in (TESTS, DOCS)


_NOISE_NAMES = re.compile(r"^(changelog|changes|history|news|release[-_ ]?notes|whatsnew|authors|contributors"
                          r"|code_of_conduct|contributing)([-_.].*)?$", re.I)


def is_report_noise(path: str) -> bool:
    """Files a bug report resembles without being where it is fixed: issue and PR templates, changelogs
    and release notes (they quote past reports), contributor lists."""
    parts = path.split("/")
    return (parts[0] in (".github", ".gitlab") or _NOISE_NAMES.match(parts[-1]) is not None
            or any(p in ("changelog", "changes", "whatsnew", "release-notes", "changelog.d") for p in parts[:-1]))


class WeightedRRFFusionRetriever(QueryFusionRetriever):
    """QueryFusionRetriever whose reciprocal-rank mode honours `retriever_weights` (core's ignores them),
    keys results by node id, boosts results that contain the query's keywords, and boosts the
    definitions of identifiers the query spells exactly (so `getUserById` ranks the function of that
    name above `get_user_by_id`, which the two legs would otherwise tie in RRF, and above its callers).
    """


    def __init__(self, *args: Any, rrf_k: float = DEFAULT_RRF_K, keywords: Sequence[str] = (),
                 keyword_boost: float = 0.5, definition_boost: float = DEFAULT_DEFINITION_BOOST,
                 tests_docs_weight: float = 1.0, identifiers: Optional[Sequence[str]] = None,
                 noise_weight: float = 1.0, non_code_weight: float = 1.0, file_evidence: float = 0.0, timings: Optional[Dict[str, float]] = None,
                 while_embedding: Optional[Callable[[List[NodeWithScore]], None]] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tests_docs_weight = tests_docs_weight
        # A long report's reading names the functions of its traceback: their definitions are boosted, not
        # those of every compound word it pastes. None: the identifiers the query spells.
        self._identifiers = list(identifiers) if identifiers is not None else None
        self._noise_weight = noise_weight  # issue templates, changelogs: what a report matches but never fixes
        self._non_code_weight = non_code_weight  # docs, config and data files, for a report (fixed in code)
        self._file_evidence = file_evidence  # share of a file's other hits added to each of its chunks
        self._rrf_k = rrf_k
        self._keywords = list(keywords)
        self._keyword_boost = keyword_boost
        self._definition_boost = definition_boost
        self.timings = timings if timings is not None else {}
        # Work on the other legs' results that the caller wants done while a helper process embeds the query
        # (run_search checks their files): time the main thread would otherwise spend waiting.
        self._while_embedding = while_embedding

    def _run_sync_queries(self, queries: List[QueryBundle]) -> Dict[Tuple[str, int], List[NodeWithScore]]:
        """The dense legs' query embeddings start first, in the embedding model's helper process when it
        runs one (`OnnxEmbedding.start_process`), then the other legs run here, then the dense legs with
        the vectors, which are ready by then: the embedding costs no wall time. Without a helper the legs
        run one after the other. (Not threads: qdrant-edge holds the GIL while it searches and the
        embedding needs it around its ONNX call, so on 2 cores a worker thread slowed both legs down; one
        probe measured the embedding at 8 ms on a thread instead of 4.3, see embed_process.py.)"""
        pending: Dict[Tuple[str, int], Any] = {}
        for q in queries:
            for i, r in enumerate(self._retrievers):
                if isinstance(r, DenseRetriever) and q.embedding is None:
                    pending[(q.query_str, i)] = r.start_embedding(r.text_of(q))
        results: Dict[Tuple[str, int], List[NodeWithScore]] = {}
        try:
            for q in queries:
                for i, r in enumerate(self._retrievers):
                    if (q.query_str, i) not in pending:
                        results[(q.query_str, i)] = retrieve_nodes(r, q)
            if self._while_embedding is not None and any(
                    getattr(p, "where", None) == "helper" for p in pending.values()):
                self._while_embedding([n for nodes in results.values() for n in nodes])
        except BaseException:
            for p in pending.values():
                if p is not None:
                    p.cancel()  # a helper's answer is read, so the next search does not get it
            raise
        embeddings = {key: self._embedding(p) for key, p in pending.items() if p is not None}
        for q in queries:
            for i, r in enumerate(self._retrievers):
                if (q.query_str, i) in pending:
                    emb = embeddings.get((q.query_str, i))
                    bundle = QueryBundle(q.query_str, embedding=emb) if emb else q
                    results[(q.query_str, i)] = retrieve_nodes(r, bundle)
        return results

    def _embedding(self, pending: Any) -> List[float]:
        t0 = time.perf_counter()
        vec = pending.result()
        self.timings["embed_ms"] = pending.compute_ms
        self.timings["embed_wait_ms"] = (time.perf_counter() - t0) * 1000
        return vec

    def _reciprocal_rerank_fusion(self, results: Dict[Tuple[str, int], List[NodeWithScore]]) -> List[NodeWithScore]:
        t0 = time.perf_counter()
        fused: Dict[str, float] = {}
        by_id: Dict[str, NodeWithScore] = {}
        for (_, idx), nodes in results.items():
            w = self._retriever_weights[idx]
            for rank, nws in enumerate(sorted(nodes, key=lambda x: x.score or 0.0, reverse=True)):
                nid = nws.node.node_id
                by_id.setdefault(nid, nws)
                fused[nid] = fused.get(nid, 0.0) + w / (rank + self._rrf_k)
        if self._keywords:
            for nid, nws in by_id.items():
                text = nws.node.get_content()
                hits = sum(1 for k in self._keywords if k in text)
                fused[nid] *= 1.0 + self._keyword_boost * hits / len(self._keywords)
        if self._identifiers is not None:
            # A report's reading ranks the names it points at: the boost of a chunk is that of the most
            # telling name it defines (1, 1/2, 1/3 ... of `definition_boost`).
            for nid, nws in by_id.items():
                meta = nws.node.metadata
                rank = next((i for i, name in enumerate(self._identifiers) if chunk_defines(meta, name)), None)
                if rank is not None:
                    fused[nid] *= 1.0 + self._definition_boost / (rank + 1)
        else:
            idents = [i for q in dict.fromkeys(q for q, _ in results) for i in query_identifiers(q)]
            if idents and self._definition_boost:
                for nid, nws in by_id.items():
                    hits = sum(1 for i in idents if chunk_defines(nws.node.metadata, i))
                    fused[nid] *= 1.0 + self._definition_boost * hits / len(idents)
        if self._tests_docs_weight != 1.0 or self._noise_weight != 1.0 or self._non_code_weight != 1.0:
            for nid, nws in by_id.items():
                m = nws.node.metadata
                path, language = m.get(FILE_PATH_KEY, ""), m.get(LANGUAGE_KEY, "")
                if is_tests_or_docs(path, language):
                    fused[nid] *= self._tests_docs_weight
                if language in NON_CODE_LANGUAGES:
                    fused[nid] *= self._non_code_weight
                if is_report_noise(path):
                    fused[nid] *= self._noise_weight
        if self._file_evidence:
            self._add_file_evidence(fused, by_id)
        out = []
        for nid, score in sorted(fused.items(), key=lambda kv: kv[1], reverse=True):
            nws = by_id[nid]
            out.append(NodeWithScore(node=nws.node, score=score))
        self.timings["fusion_ms"] = (time.perf_counter() - t0) * 1000
        return out


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
                bonus[nid] = self._file_evidence * sum(x / (i + 2) for i, x in enumerate(others))
        for nid, extra in bonus.items():
            fused[nid] += extra
