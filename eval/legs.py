"""Each leg's candidates for labelled queries, dumped once; the fusion replayed over them offline.

Tuning the fusion by re-running ``coderag eval`` costs a search of every query for every setting. The legs do
not depend on the fusion's settings, so their candidates can be dumped once (deeper than the settings ask)
and each fusion setting replayed over them in seconds. The replay runs the fusion of pipelines/fusion.py
itself on the dumped nodes, cut as the search cuts them under the settings it replays (``dense_top_k``,
``sparse_top_k``, ``source_quota_depth``: pipelines/retriever_graph.py ``legs_as_searched``):
the ranking it scores is ``hybrid``'s, before auto-merging and packing, so its R@k and MRR@10 are those of
the fused list, and ``coderag eval`` remains the judge of a change.

The dump also says how far a setting could go: ``union`` rows are the share of queries whose gold file
or gold chunk is among the candidates at all.

Usage::

    python -m coderag.eval.legs dump --dataset all --out legs.jsonl            # needs dense indexes
    python -m coderag.eval.legs replay legs.jsonl --split tune --set retrieval.dense_weight=1.5
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from coderag.eval.metrics import Result, Span, mean, overlaps, score_ranking
from coderag.nodes.keys import (DECLARATION_KEY, END_LINE_KEY, FILE_PATH_KEY, KIND_KEY, LANGUAGE_KEY, START_LINE_KEY,
                                SYMBOL_KEY, SYMBOLS_KEY)

DEFAULT_DEPTH = 50
# What a dump keeps of a candidate's metadata besides its text: all that the fusion and the ranker's features read.
DUMPED_METADATA = (FILE_PATH_KEY, START_LINE_KEY, END_LINE_KEY, SYMBOL_KEY, SYMBOLS_KEY, KIND_KEY, LANGUAGE_KEY,
                   DECLARATION_KEY)


def dump_settings(root: Path, depth: int):
    """The settings of the index at `root` with every leg `depth` deep, a report's dense leg too: a dump is
    deeper than a search, and a replay cuts it to the depths of the settings it replays (`leg_depths`)."""
    from coderag.base.config import load_settings
    from coderag.eval.runner import apply_overrides

    return apply_overrides(load_settings(root), {"dense_top_k": depth, "report_dense_top_k": depth,
                                                 "sparse_top_k": depth, "source_quota_depth": 0})


def dump(queries: Sequence, root_for: Any, depth: int = DEFAULT_DEPTH) -> Iterable[dict[str, Any]]:
    """One record per query: its labels and each leg's candidates (node id, score, metadata, text), best
    first, `depth` deep. `root_for(query)`: the indexed folder of the query's corpus or snapshot."""
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.search_options import SearchOptions

    by_root: dict[Path, list] = defaultdict(list)
    for q in queries:
        by_root[Path(root_for(q))].append(q)
    for root, group in by_root.items():
        with CodeIndex.open(root, settings=dump_settings(root, depth), create=False) as index:
            graph = index.engine.graph
            for q in group:
                req = graph.request(SearchOptions(query=q.query))
                legs = graph.fusion.run_legs(req) if req is not None else {}
                nodes: dict[str, dict[str, Any]] = {}
                ranked: dict[str, list[list]] = {}
                for leg, found in legs.items():
                    found = sorted(found, key=lambda n: n.score or 0.0, reverse=True)
                    ranked[leg] = [[n.node.node_id, float(n.score or 0.0)] for n in found]
                    for n in found:
                        nodes.setdefault(n.node.node_id, {**{k: n.node.metadata.get(k) for k in DUMPED_METADATA},
                                                          "text": n.node.get_content()})
                yield {**q.to_json(), "legs": ranked, "nodes": nodes}


def offline_fusion(settings):
    """The index's fusion, as RetrieverGraph builds it, over legs that are never queried."""
    from coderag.pipelines.retriever_graph import fusion_of
    from coderag.pipelines.retrievers import DenseRetriever, SparseRetriever
    from coderag.pipelines.search_request import BM25, DENSE, NAMED

    return fusion_of(settings, {DENSE: DenseRetriever(None), BM25: SparseRetriever(None),
                                NAMED: SparseRetriever(None, named_files=True)})


def dumped_nodes(nodes: dict[str, dict[str, Any]]) -> Callable[[str], Any]:
    """A node id -> the TextNode the search would hold, made once: a training dump's queries share nodes."""
    from llama_index.core.schema import TextNode

    made: dict[str, TextNode] = {}

    def node(nid: str) -> TextNode:
        if nid not in made:
            meta = {k: v for k, v in nodes[nid].items() if k != "text" and v is not None}
            made[nid] = TextNode(id_=nid, text=nodes[nid]["text"], metadata=meta)
        return made[nid]

    return node


def searched_legs(rec: dict[str, Any], retrieval, node: Callable[[str], Any] | None = None) -> tuple[dict, Any]:
    """(leg -> its candidates as the search keeps them, the request's reading) for one dumped record, under
    the settings `retrieval`: the legs a search runs, cut by pipelines/retriever_graph.py `legs_as_searched`.
    `node` makes a candidate's node from its id (`dumped_nodes`); by default, from the record's own nodes."""
    from llama_index.core.schema import NodeWithScore

    from coderag.pipelines.retriever_graph import legs_as_searched, report_reading
    from coderag.pipelines.search_request import BM25, DENSE

    node = node or dumped_nodes(rec["nodes"])
    reading = report_reading(rec["query"], retrieval)
    found = {}
    for leg, ranked in rec["legs"].items():
        if leg != DENSE and leg != BM25 and reading is None:
            continue  # the named-files leg runs for a long report only
        found[leg] = [NodeWithScore(node=node(nid), score=score) for nid, score in ranked]
    return legs_as_searched(found, retrieval, reading, rec["query"]), reading


def replay(records: Iterable[dict[str, Any]], settings) -> list[tuple[dict[str, Any], list[Result]]]:
    """Each record with the fused ranking (top 10) that `settings` give over its dumped legs."""
    from coderag.pipelines.search_request import SearchRequest

    fusion, r = offline_fusion(settings), settings.retrieval
    out = []
    for rec in records:
        results, reading = searched_legs(rec, r)
        fused = fusion.fuse(results, SearchRequest(rec["query"], legs=tuple(results), reading=reading))
        ranking = [Result.block(n.node.metadata["file_path"], int(n.node.metadata["start_line"]),
                                int(n.node.metadata["end_line"])) for n in fused[:10]]
        out.append((rec, ranking))
    return out


def gold_spans(rec: dict[str, Any]) -> list[Span]:
    return [Span(g["file_path"], g["start_line"], g["end_line"]) for g in rec["gold"]]


def union_reach(rec: dict[str, Any], retrieval) -> tuple[bool, bool]:
    """(a gold file, a gold chunk) among the candidates the legs keep under the settings `retrieval`."""
    gold = gold_spans(rec)
    legs, _ = searched_legs(rec, retrieval)
    blocks = [Result.block(n.node.metadata["file_path"], int(n.node.metadata["start_line"]),
                           int(n.node.metadata["end_line"])) for nodes in legs.values() for n in nodes]
    return (any(b.file_path == g.file_path for b in blocks for g in gold),
            any(overlaps(b, g) for b in blocks for g in gold))


def report(scored: list[tuple[dict[str, Any], list[Result]]], retrieval) -> str:
    """Markdown rows per group (all, split, kind and split): the fused ranking's metrics and the legs' reach."""
    groups: dict[str, list] = defaultdict(list)
    for rec, ranking in scored:
        scores = (score_ranking(ranking, gold_spans(rec)), union_reach(rec, retrieval))  # once, for each group
        for g in ("all", f"split {rec['split']}", f"{rec['kind']}, {rec['split']}"):
            groups[g].append(scores)
    keys = ("recall@1", "recall@5", "mrr@10", "line_hit@1", "line_hit@5")
    lines = ["| group | n | " + " | ".join(keys) + " | gold file reached | gold chunk reached |",
             "| --- | ---: |" + " ---: |" * (len(keys) + 2)]
    for g in sorted(groups, key=lambda k: (k != "all", k)):
        rows = groups[g]
        vals = [mean([m[k] for m, _ in rows]) for k in keys]
        reach = [mean([float(x[i]) for _, x in rows]) for i in (0, 1)]
        lines.append(f"| {g} | {len(rows)} | " + " | ".join(f"{v:.3f}" for v in vals + reach) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.legs", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="dump each leg's candidates of every query (indexes must be dense)")
    d.add_argument("--dataset", default="all")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--depth", type=int, default=DEFAULT_DEPTH)
    r = sub.add_parser("replay", help="score the fusion of the given settings over a dump")
    r.add_argument("dump", type=Path)
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="retrieval.KEY=VALUE")
    r.add_argument("--split", choices=("tune", "heldout"), default=None, help="only this split's queries")
    a = p.parse_args(argv)
    if a.cmd == "dump":
        from coderag.eval.corpora import CorpusMissingError, fetch
        from coderag.eval.datasets import list_datasets, load_dataset
        from coderag.eval.snapshots import snapshot_root

        names = list_datasets() if a.dataset == "all" else [a.dataset]

        def root_for(q):
            base = Path(fetch(q.corpus))
            return base if q.commit is None else snapshot_root(q.corpus, q.repo, q.commit, folder=base)

        with a.out.open("w", encoding="utf-8") as f:
            for name in names:
                try:
                    for rec in dump(load_dataset(name), root_for, a.depth):
                        f.write(json.dumps(rec) + "\n")
                except CorpusMissingError as exc:
                    print(f"skipping {name}: {exc}", file=sys.stderr)
        print(f"wrote {a.out}", file=sys.stderr)
        return 0
    from coderag.base.config import Settings
    from coderag.eval.runner import apply_overrides, parse_overrides

    try:
        settings = apply_overrides(Settings(), parse_overrides(a.overrides))
    except ValueError as exc:  # a malformed --set, or a value the settings refuse
        p.error(str(exc))
    records = [json.loads(line) for line in a.dump.open(encoding="utf-8")]
    records = [rec for rec in records if a.split is None or rec["split"] == a.split]
    print(report(replay(records, settings), settings.retrieval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
