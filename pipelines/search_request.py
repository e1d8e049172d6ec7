"""SearchRequest: a QueryBundle that carries what one request adds to the query.

The retriever graph and the postprocessors are built once per open index (pipelines/query.py); what differs
from one request to the next (its filters, keywords, the reading of a long query, which legs run, the files
just found unchanged, where timings go) travels with the query itself. LlamaIndex hands the same QueryBundle
from `retrieve()` down to every leg and to `postprocess_nodes()`, so no component is rebuilt or mutated per
request, and two requests on two threads never share state. A plain QueryBundle (a notebook's
`index.retriever.retrieve("...")`) reads as a request with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Callable, Optional

from llama_index.core.schema import QueryBundle

from coderag.nodes.file_roles import asks_for_changes, role_asked_for
from coderag.nodes.lexical import is_pasted_error
from coderag.queries.names import NameQuestion, read_names

DENSE, BM25, NAMED = "dense", "bm25", "named"  # the legs: dense, BM25, BM25 within the files a report names
ALL_LEGS = (DENSE, BM25, NAMED)


class QueryKind(str, Enum):
    """What a request's query is, read once per request (`SearchRequest.kind`)."""

    REPORT = "report"  # a long query, read as a report: its traceback, the names and paths it points at
    USAGES = "usages"  # one name, with words that only ask where it is used, called or tested
    DEFINITION = "definition"  # one name, alone or with words that only ask where it is defined
    QUESTION = "question"  # anything else: a question, a description of a change, a pasted message


@dataclass
class SearchRequest(QueryBundle):
    legs: tuple = ALL_LEGS  # which legs run (the named-files leg only when `named_filters` is set)
    filters: Any = None  # MetadataFilters of the request (file_pattern, exact keywords), or None
    named_filters: Any = None  # `filters` narrowed to the files a long query names, or None
    keywords: list = field(default_factory=list)  # boosted (BM25 terms, fusion), or required when exact
    exact_keywords: list = field(default_factory=list)  # every chunk must contain each of them
    reading: Any = None  # the QueryReading of a long query (coderag/queries/reader.py), None for a short one
    top_k: Optional[int] = None  # fused candidates (None: the index's setting)
    dense_top_k: Optional[int] = None  # the dense leg's candidates (None: the leg's own depth)
    source_quota_depth: int = 0  # how deep the dense and BM25 legs look for source files (0: not beyond their depth)
    timings: dict = field(default_factory=dict)  # stage -> ms, filled by the components
    while_embedding: Optional[Callable[[list], None]] = None  # work done while a helper embeds the query
    unchanged_files: frozenset = frozenset()  # files just found to be the content indexed (merge reads none)
    lines: Any = None  # the request's LineSource: every file read once, as it is now
    # Node id -> the rules' fused score, where the blend reordered the candidates (pipelines/fusion.py): the
    # payload's cut reads these, so the blend changes what comes first and never hides what the rules show.
    cut_scores: dict = field(default_factory=dict)

    @property
    def dense_text(self) -> str:
        """What the dense leg embeds: the prose and errors of a long report, else the query."""
        return self.reading.dense_text if self.reading is not None else self.query_str

    @property
    def bm25_text(self) -> str:
        """What the BM25 legs search: a long report's evidence, each piece once, else the query."""
        return self.reading.bm25_text if self.reading is not None else self.query_str

    @cached_property
    def names(self) -> NameQuestion:
        """What the query asks of the names it spells (coderag/queries/names.py), read once per request."""
        return read_names(self.query_str)

    @cached_property
    def kind(self) -> QueryKind:
        """The query's kind: a report when it was read as one, else what it asks of the names it spells."""
        if self.reading is not None:
            return QueryKind.REPORT
        if self.names.usages:
            return QueryKind.USAGES
        if self.names.definition:
            return QueryKind.DEFINITION
        return QueryKind.QUESTION

    @cached_property
    def word_for_word(self) -> bool:
        """A short query matched word for word, which a dense leg does not read: one code name asked about
        ("who calls parse_header"), or a pasted error message."""
        return self.kind is not QueryKind.REPORT and (self.names.about_a_code_name or is_pasted_error(self.query_str))

    @cached_property
    def role_asked_for(self) -> Optional[str]:
        """The file role a short query asks for ("where is X tested": tests; "docs about X": docs), else None."""
        return None if self.kind is QueryKind.REPORT else role_asked_for(self.query_str)

    @cached_property
    def changes_asked_for(self) -> bool:
        """A short query about what changed, and in which release: the changelog is its answer, not noise."""
        return self.kind is not QueryKind.REPORT and asks_for_changes(self.query_str)


def as_request(query: QueryBundle) -> SearchRequest:
    """`query` itself when it is a SearchRequest, else a request with the defaults for its text."""
    if isinstance(query, SearchRequest):
        return query
    return SearchRequest(query.query_str, embedding=query.embedding,
                         custom_embedding_strs=query.custom_embedding_strs)
