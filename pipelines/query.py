"""The query pipeline, built once per index: request -> dense + BM25 -> fusion -> auto-merge ->
freshness -> merge -> pack -> payload."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from coderag.nodes.keys import (END_LINE_KEY, FILE_PATH_KEY, KIND_KEY, LANGUAGE_KEY, LAST_MODIFIED_KEY,
                                START_LINE_KEY, SYMBOL_KEY)
from coderag.pipelines.search_options import OutputFormat, SearchOptions
from coderag.postprocessors.payload import (NO_RESULTS_HINTS, SearchResult, SearchResults, budget_message,
                                            no_results_message, render_json, render_result_text,
                                            render_result_xml, render_text, render_xml)
from coderag.postprocessors.token_budget import FULL_END_LINE_KEY, TRUNCATED_KEY

if TYPE_CHECKING:
    from coderag.base.config import Settings
    from coderag.pipelines.fusion import PayloadCuts
    from coderag.pipelines.freshness import FileChecker
    from coderag.pipelines.retriever_graph import RetrieverGraph
    from coderag.postprocessors.tokenizer import PayloadTokenizer


def _renderers(fmt: OutputFormat):
    if fmt == OutputFormat.Json:
        import json
        from dataclasses import asdict

        return (lambda r: json.dumps(asdict(r), ensure_ascii=False) + ",", render_json)
    if fmt == OutputFormat.Text:
        return render_result_text, render_text
    return render_result_xml, render_xml


def _to_result(nws, stale_files: set[str], also_in: list[str]) -> SearchResult:
    m = nws.node.metadata
    return SearchResult(
        id=nws.node.node_id.replace("-", "")[:12], file_path=m[FILE_PATH_KEY], start_line=int(m[START_LINE_KEY]),
        end_line=int(m[END_LINE_KEY]), language=m.get(LANGUAGE_KEY, ""), symbol=m.get(SYMBOL_KEY, ""),
        kind=m.get(KIND_KEY, ""), score=round(float(nws.get_score()), 6), last_modified=m.get(LAST_MODIFIED_KEY, ""),
        stale=m[FILE_PATH_KEY] in stale_files, text=nws.node.get_content(), truncated=bool(m.get(TRUNCATED_KEY)),
        full_end_line=m.get(FULL_END_LINE_KEY), also_in=also_in)


# A block cut after others shows at least this many lines: one or two say no more than a candidate line does.
MIN_CUT_LINES = 3
APPROX_CHARS_PER_TOKEN = 3.2
PRESELECT_SLACK = 1.5


def _preselect(nodes: list, max_tokens: int, cut_ratio: float, cut_scores: Optional[dict] = None) -> list:
    """Best-first candidates until about 1.5x the budget is covered: merging and packing then work on
    what can be shown, so a weak chunk never drags its neighbours into a strong block. A candidate under
    `cut_ratio` x the best is left out unless `cut_scores`, where the request has them (the rules' scores of a
    blended order), put it above: a reordering never hides what the rules would show, nor what it lifts."""
    nodes = sorted(nodes, key=lambda n: n.get_score(), reverse=True)
    if not nodes:
        return nodes
    cut_scores = cut_scores or {}

    def cut_score(n) -> float:
        return max(n.get_score(), cut_scores.get(n.node.node_id, 0.0))

    floor = max(cut_score(n) for n in nodes) * cut_ratio
    out, used = [], 0.0
    for n in nodes:
        if out and used >= max_tokens * PRESELECT_SLACK:
            break
        if out and cut_score(n) < floor:
            continue
        out.append(n)
        used += len(n.node.get_content()) / APPROX_CHARS_PER_TOKEN
    return out


class _Files:
    """What one search learns about the files of its candidates, each file looked up once: whether it is
    the content indexed (stat, then hash), and if so the stored token counts of its lines."""

    def __init__(self, checker: FileChecker, tokenizer: Optional[PayloadTokenizer]) -> None:
        self.checker, self.tokenizer = checker, tokenizer
        self.records: dict = {}  # path -> manifest row if unchanged, else None
        self.counts: dict = {}  # path -> line token counts (unchanged files that have them)

    def changed(self, paths) -> set[str]:
        todo = [p for p in paths if p not in self.records]
        if todo:
            recs = self.checker.check(todo)
            self.records.update(recs)
            if self.tokenizer is not None:
                current = {p: r.sha256 for p, r in recs.items() if r is not None and r.sha256}
                self.counts.update(self.tokenizer.line_counts(current))
        return {p for p in paths if self.records[p] is None}

    def indexed_as_is(self) -> frozenset[str]:
        """The files looked up so far that are indexed (not skipped) with the content on disk now."""
        from coderag.store.state import SEARCHABLE

        return frozenset(p for p, r in self.records.items() if r is not None and r.status in SEARCHABLE)


def strategy_name(opts: SearchOptions) -> str:
    legs = {"hybrid": "dense + bm25 (fused)", "bm25": "bm25", "dense": "dense"}[opts.retriever.value]
    extra = [x for x, on in (("auto-merge", opts.auto_merge), ("merge-adjacent", opts.merge_adjacent)) if on]
    return " + ".join([legs, *extra, "token-packing"])


class SearchEngine:
    """The query pipeline of one open index, built once from explicit parts and reused by every request:
    the retriever graph, the merge postprocessors, the tokenizer and the file checker. `search` answers one
    request and reports the files it found changed since indexing; whether to re-index them and ask again
    is the caller's policy (CodeIndex.search).

    `other_locations(node_ids)`: where else the same chunks are (copies deduplicated at indexing).
    """

    def __init__(self, root: Path, settings: Settings, graph: RetrieverGraph, tokenizer: PayloadTokenizer,
                 checker: FileChecker, other_locations: Callable[[Iterable[str]], dict]) -> None:
        from coderag.postprocessors.lines import FileTexts
        from coderag.postprocessors.merge_adjacent import MergeAdjacentPostprocessor

        self.root, self.settings, self.graph = root, settings, graph
        self.tokenizer, self.checker, self.other_locations = tokenizer, checker, other_locations
        self.texts = FileTexts()  # files read for answers, kept while they do not change
        r = settings.retrieval
        self.merge = MergeAdjacentPostprocessor(gap_lines=r.gap_lines, max_lines=r.merge_max_lines)
        # Each chunk alone, re-read like a merged block: the text shown is the file's lines now (a stale
        # file's chunk included), and chunks of deleted files are dropped.
        self.reread = MergeAdjacentPostprocessor(gap_lines=0)

    def clear_caches(self) -> None:
        """Forget the files read and the tokens counted (benchmarks measure cold searches with it)."""
        self.texts.clear()
        self.tokenizer.clear()

    def search(self, opts: SearchOptions, freshness: Optional[str] = None) -> tuple[SearchResults, set[str]]:
        """Answer one request: (the payload, the files of its candidates that changed since indexing).
        `freshness` overrides the payload's freshness note when no file is stale."""
        from coderag.pipelines.fusion import payload_cuts
        from coderag.postprocessors.lines import LineSource

        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        checker, r = self.checker, self.settings.retrieval
        files = _Files(checker, self.tokenizer if opts.format == OutputFormat.Xml else None)
        quiet = checker.quiet()
        lines = LineSource(self.root, self.texts)

        def check_early(found: list) -> None:
            files.changed({n.node.metadata[FILE_PATH_KEY] for n in found})

        req = self.graph.request(opts, timings=timings, while_embedding=check_early, lines=lines)
        nodes = self.graph.retriever(opts.auto_merge).retrieve(req) if req is not None else []
        checked = {n.node.metadata[FILE_PATH_KEY] for n in nodes}  # files compared with the index
        stale = files.changed(checked)
        if stale and not quiet:
            stale -= checker.being_indexed()  # being indexed right now by another thread: not stale
        note = f"stale: {len(stale)} file(s) changed since indexing" if stale else (freshness or "fresh")
        lines.indexed_as_is = files.indexed_as_is()  # classed when indexed: not classed again when read
        total = len(nodes)
        pool = nodes  # every place found: what is not shown in full may be listed as a candidate line
        mode = self.graph.fusion.mode_for(req) if req is not None else r.fusion
        cuts = payload_cuts(mode, r, long_query=req is not None and req.reading is not None,
                            exact=opts.requires_exact_match)
        nodes = _preselect(nodes, opts.max_tokens, cuts.cut, req.cut_scores if req is not None else None)
        # A lone chunk of a file just found unchanged is shown as indexed, without reading the file; not while
        # an ingestion runs in another thread, when the store and the manifest may briefly disagree.
        unchanged = frozenset(checked - stale) if quiet else frozenset()
        t2 = time.perf_counter()
        if req is not None:
            req.unchanged_files = unchanged
            if opts.merge_adjacent:
                nodes = self.merge.postprocess_nodes(nodes, query_bundle=req)
            else:
                nodes = [m for n in nodes for m in self.reread.postprocess_nodes([n], query_bundle=req)]
        timings["merge_adjacent_ms"] = (time.perf_counter() - t2) * 1000
        out = self._pack(opts, nodes, pool, total, note, stale, unchanged, files, lines, timings, t0, cuts)
        return out, stale

    def _pack(self, opts: SearchOptions, nodes: list, pool: list, total: int, freshness: str, stale: set[str],
              unchanged: frozenset, files: _Files, lines, timings: dict, t0: float,
              cuts: "PayloadCuts") -> SearchResults:
        """The payload: blocks packed into the budget, then candidate lines in what is left, counted exactly;
        what is cut, what is flat and what is worth a line are the request's `cuts`."""
        from coderag.postprocessors.candidates import CandidatePostprocessor, lines_check, pack_with_candidates
        from coderag.postprocessors.payload_cost import PayloadCost
        from coderag.postprocessors.token_budget import TokenBudgetPostprocessor

        meta = dict(query=opts.query, root=str(self.root), strategy=strategy_name(opts), max_tokens=opts.max_tokens)
        count = self.tokenizer.count
        render_one, render_all = _renderers(opts.format)
        frame = SearchResults([], **meta, total_hits=total, tokens=opts.max_tokens, latency_ms=99999.0,
                              freshness=freshness, message=opts.query_note)
        frame_tokens = count(render_all(frame)) + 8

        def result(nws, text, truncated):
            r = _to_result(nws, stale, [])
            r.text, r.truncated = text, truncated
            if truncated:
                r.end_line = r.start_line + text.count("\n")
                r.full_end_line = int(nws.node.metadata[END_LINE_KEY])
            return r

        t3 = time.perf_counter()
        counted = {p: c for p, c in files.counts.items() if p in unchanged}  # blocks priced from line counts
        coster = PayloadCost(opts.format.value, render_one, self.tokenizer, result, line_tokens=counted)
        packer = TokenBudgetPostprocessor(cost=coster.cost, prefix_cost=coster.prefix_cost, max_tokens=opts.max_tokens,
                                          frame_tokens=frame_tokens, cut_ratio=cuts.cut,
                                          min_block_tokens=coster.min_block_tokens(), min_cut_lines=MIN_CUT_LINES)
        picker = CandidatePostprocessor(skip_files=stale, unchanged_files=unchanged, check=lines_check(lines),
                                        floor_ratio=cuts.floor)
        packed, candidates = pack_with_candidates(lambda p, found: p.postprocess_nodes(found), packer, nodes, pool,
                                                  picker, coster.candidate_cost, coster.candidates_frame_cost(),
                                                  flat_ratio=cuts.flat)
        copies = self.other_locations(n.node.node_id for n in packed)
        results = [_to_result(n, stale, copies.get(n.node.node_id, [])) for n in packed]
        out = SearchResults(results, **meta, total_hits=total, tokens=opts.max_tokens, freshness=freshness,
                            timings=timings, message=opts.query_note, candidates=candidates)

        def tokens_of(res: SearchResults) -> int:
            return coster.payload_tokens(res, packed, render_all)

        # Exact guarantee: the rendered payload, frame included, never exceeds the budget. Whole blocks were
        # counted exactly; a cut block's count may be a token or two over or under, so what is over comes off
        # the last block, whole lines at a time. Candidate lines are exact in XML; in JSON and text each was
        # priced alone, so what is over comes off them first.
        while True:
            _measure(out, tokens_of, t0)
            over = out.tokens - opts.max_tokens
            if over <= 0 or not out:
                break
            if out.candidates and opts.format != OutputFormat.Xml:
                out.candidates.pop()
                continue
            last = out[-1]
            text_lines = last.text.split("\n")
            drop, freed = 0, 0
            while drop < len(text_lines) - 1 and freed < over:
                drop += 1
                freed += count(text_lines[-drop]) + 1
            if drop == 0:
                out.pop()
                packed.pop()
                continue
            last.full_end_line = last.full_end_line or last.end_line
            last.end_line -= drop
            last.text = "\n".join(text_lines[:-drop])
            last.truncated = True
        timings["pack_ms"] = (time.perf_counter() - t3) * 1000
        if not out:
            out.candidates = []  # not one block fits: then no line does either (a line costs about a block's frame)
            # Candidates that survived merging but not packing: the budget, not the query, is the problem.
            out.message = budget_message(total, opts.max_tokens) if nodes else no_results_message(
                opts.query, opts.file_pattern, opts.keywords, opts.requires_exact_match)
            out.message = " ".join(m for m in (opts.query_note, out.message) if m)
            _measure(out, tokens_of, t0)
            if out.tokens > opts.max_tokens:
                out.compact = True  # the frame alone is larger than a tiny budget: the message only
                if not nodes:
                    out.message = f"No results. {NO_RESULTS_HINTS[0]}"
                _measure(out, tokens_of, t0)
        out.timings["total_ms"] = out.latency_ms
        return out


def _measure(out: SearchResults, tokens_of, t0: float) -> None:
    """Stamp the latency, then count the payload's tokens as rendered. The count is part of the payload: a
    number with as many digits as the one rendered takes as many tokens (cl100k: every 1-3 digit group is one
    token), so one pass is exact when the width holds; otherwise count again with the new number."""
    out.latency_ms = (time.perf_counter() - t0) * 1000
    for _ in range(4):
        tokens = tokens_of(out)
        same_width = len(str(tokens)) == len(str(out.tokens))
        out.tokens = tokens
        if same_width:
            return
