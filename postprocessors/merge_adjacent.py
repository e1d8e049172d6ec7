"""MergeAdjacentPostprocessor: chunks of one file that overlap or nearly touch become one block."""

from __future__ import annotations

import uuid
from typing import Any, Iterable, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from coderag.nodes.keys import END_LINE_KEY, FILE_PATH_KEY, KIND_KEY, START_LINE_KEY, SYMBOL_KEY
from coderag.postprocessors.lines import LineSource

DEFAULT_GAP_LINES = 3
MERGED_NAMESPACE = uuid.UUID("a3c1b8de-55a4-4f0c-9a55-6d6572676564")


class MergeAdjacentPostprocessor(BaseNodePostprocessor):
    """Merge chunks of one file whose line ranges overlap or lie within `gap_lines` of each other.

    The merged block is read from the file as it is now, so the lines between the chunks are filled
    in and the text is exactly lines start_line..end_line. It keeps the best member's score and
    symbol. Chunks of files that no longer exist are dropped. Blocks come out best first. Chunks that only
    lie close are not joined beyond `max_lines` (overlapping ones always are, so no line is shown twice):
    one block of a 400-line stretch is a file, not a place.

    `unchanged_files` names files the caller has just checked against the index (same size and mtime, or
    same hash): a lone chunk of such a file is its lines already and is kept without reading the file.
    Built once, a postprocessor takes both from the query of each request instead (its `lines`, a
    LineSource, and its `unchanged_files`: pipelines/search_request.py).
    """

    gap_lines: int = Field(default=DEFAULT_GAP_LINES, ge=0, description="Largest gap (in lines) that is filled in.")
    max_lines: Optional[int] = Field(default=None, ge=1, description="Longest block made by joining close chunks.")
    _lines: Optional[LineSource] = PrivateAttr(default=None)
    _unchanged: frozenset = PrivateAttr(default=frozenset())

    def __init__(self, lines: Optional[LineSource] = None, unchanged_files: Iterable[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines = lines
        self._unchanged = frozenset(unchanged_files)

    @classmethod
    def class_name(cls) -> str:
        return "MergeAdjacentPostprocessor"

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        lines = getattr(query_bundle, "lines", None) or self._lines
        unchanged = getattr(query_bundle, "unchanged_files", None) or self._unchanged
        by_file: dict[str, list[NodeWithScore]] = {}
        for n in nodes:
            by_file.setdefault(n.node.metadata[FILE_PATH_KEY], []).append(n)
        out: list[NodeWithScore] = []
        for path, group in by_file.items():
            group.sort(key=lambda n: (n.node.metadata[START_LINE_KEY], -n.node.metadata[END_LINE_KEY]))
            runs: list[list[NodeWithScore]] = [[group[0]]]
            end = group[0].node.metadata[END_LINE_KEY]
            for n in group[1:]:
                start = n.node.metadata[START_LINE_KEY]
                run_start = runs[-1][0].node.metadata[START_LINE_KEY]
                too_long = self.max_lines is not None and \
                    max(end, n.node.metadata[END_LINE_KEY]) - run_start + 1 > self.max_lines
                if start <= end or (start <= end + self.gap_lines + 1 and not too_long):
                    runs[-1].append(n)
                    end = max(end, n.node.metadata[END_LINE_KEY])
                else:
                    runs.append([n])
                    end = n.node.metadata[END_LINE_KEY]
            for run in runs:
                block = self._merge(path, run, lines, unchanged)
                if block is not None:
                    out.append(block)
        out.sort(key=lambda n: n.get_score(), reverse=True)
        return out

    def _merge(self, path: str, run: list[NodeWithScore], lines: Optional[LineSource],
               unchanged: frozenset) -> Optional[NodeWithScore]:
        best = max(run, key=lambda n: n.get_score())
        start = min(n.node.metadata[START_LINE_KEY] for n in run)
        end = max(n.node.metadata[END_LINE_KEY] for n in run)
        if len(run) == 1 and path in unchanged:
            return best  # the indexer's text of a file that has not changed is exactly its lines
        if lines is not None:
            got = lines.span(path, start, end)
            if got is None:
                return None  # the file is gone: never answer from a deleted file
            text, n = got
            end = min(end, n)
            if end < start:
                return None
        elif len(run) == 1:
            text = best.node.get_content()
        else:
            raise ValueError("merging several chunks needs a LineSource to fill the lines between them")
        if len(run) == 1 and text == best.node.get_content():
            node = best.node
        else:
            meta = dict(best.node.metadata)
            meta[START_LINE_KEY], meta[END_LINE_KEY] = start, end
            # The best member's symbol first: the list is cut at four, and it names what matched.
            symbols = list(dict.fromkeys(n.node.metadata.get(SYMBOL_KEY, "") for n in [best, *run]
                                         if n.node.metadata.get(SYMBOL_KEY)))
            if len(run) > 1:
                meta[KIND_KEY] = "merged"
                meta[SYMBOL_KEY] = ", ".join(symbols[:4])
            node_id = best.node.node_id if len(run) == 1 else str(uuid.uuid5(
                MERGED_NAMESPACE, "\x00".join(sorted(n.node.node_id for n in run))))
            node = TextNode(id_=node_id, text=text, metadata=meta,
                            excluded_embed_metadata_keys=best.node.excluded_embed_metadata_keys,
                            excluded_llm_metadata_keys=best.node.excluded_llm_metadata_keys,
                            metadata_template=best.node.metadata_template, text_template=best.node.text_template)
        return NodeWithScore(node=node, score=best.get_score())
