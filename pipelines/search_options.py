"""One search request as validated at the edge (CLI flags, MCP arguments, API keywords): `SearchOptions`."""

from __future__ import annotations

from enum import Enum
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from coderag.base.agent_text import surrogate_problem
from coderag.base.budget import DEFAULT_MAX_TOKENS, MAX_TOKENS_LIMIT, MIN_TOKENS
from coderag.base.globs import FilePattern

# What of a query is searched. Reading (coderag/queries/reader.py) and BM25 grow with the text: a 1 MB query took
# seconds, for nothing, since the dense leg sees ~256 tokens and BM25 a bag of terms. 20,000 characters hold a bug
# report with its whole traceback; the rest is cut, and the payload says so.
QUERY_SEARCH_CHARS = 20_000
MAX_KEYWORD_CHARS = 200
MAX_KEYWORDS = 16


class RetrieverMode(str, Enum):
    Hybrid = "hybrid"
    BM25 = "bm25"
    Dense = "dense"


class OutputFormat(str, Enum):
    Xml = "xml"
    Json = "json"
    Text = "text"


class SearchOptions(BaseModel):
    """One search request, validated once at the edge (CLI flags, MCP arguments, API keywords)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to find: a behaviour in words, or identifiers.")
    file_pattern: Optional[str] = Field(default=None, description="Globs on relative paths, `!` excludes.")
    keywords: list[str] = Field(default_factory=list, description="Exact identifiers to boost (or require).")
    requires_exact_match: bool = Field(default=False, description="Keep only chunks containing every keyword.")
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=MIN_TOKENS, le=MAX_TOKENS_LIMIT, description="Budget of the payload.")
    top_k: Optional[int] = Field(default=None, ge=1, le=200, description="Fused candidates (default from settings).")
    retriever: RetrieverMode = Field(default=RetrieverMode.Hybrid)
    auto_merge: bool = Field(default=True, description="Merge sibling hits into their parent.")
    merge_adjacent: bool = Field(default=True, description="Merge chunks of one file that touch.")
    format: OutputFormat = Field(default=OutputFormat.Xml, description="Payload format the budget is counted in.")

    _query_chars: int = PrivateAttr(default=0)  # the length of a query longer than QUERY_SEARCH_CHARS

    @field_validator("query")
    @classmethod
    def _query_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query is empty: describe what you are looking for, e.g. 'where are failed logins retried'")
        problem = surrogate_problem("query", v)
        if problem:
            raise ValueError(problem)
        return v.strip()

    @model_validator(mode="after")
    def _cut_long_query(self) -> "SearchOptions":
        if len(self.query) > QUERY_SEARCH_CHARS:
            self._query_chars = len(self.query)
            self.query = self.query[:QUERY_SEARCH_CHARS]
        return self

    @property
    def query_note(self) -> str:
        """Said in the payload when the query was cut for search."""
        if not self._query_chars:
            return ""
        return (f"Only the first {QUERY_SEARCH_CHARS} of the query's {self._query_chars} characters were searched: "
                "keep the error, the frames and the words that matter, and put identifiers in keywords.")

    @field_validator("keywords")
    @classmethod
    def _clean_keywords(cls, v: list[str]) -> list[str]:
        out = [k.strip() for k in v if k and k.strip()]
        if len(out) > MAX_KEYWORDS:
            raise ValueError(f"at most {MAX_KEYWORDS} keywords ({len(out)} given): keep the identifiers that matter most")
        for i, k in enumerate(out):
            problem = surrogate_problem(f"keywords[{i}]", k)
            if problem:
                raise ValueError(problem)
            if len(k) > MAX_KEYWORD_CHARS:
                raise ValueError(f"keywords[{i}] ({k[:40]!r}…) has {len(k)} characters; at most {MAX_KEYWORD_CHARS}: "
                                 "a keyword is one exact identifier, error code or config key; put prose in query")
        return out

    @field_validator("file_pattern")
    @classmethod
    def _valid_glob(cls, v: Optional[str]) -> Optional[str]:
        if v is None or not v.strip():
            return None
        problem = surrogate_problem("file_pattern", v)
        if problem:
            raise ValueError(problem)
        FilePattern(v)  # raises ValueError with examples
        return v.strip()
