"""LlamaIndex MetadataFilters -> Qdrant Edge filters.

Apart from the store because it changes for its own reasons (a new operator, a new filter a search
builds) and because it is pure: a translation can be tested without opening a shard.
"""

from __future__ import annotations

from typing import Any, Optional

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

_BOUNDS = {FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte"}
_LIST_OPERATORS = (FilterOperator.IN, FilterOperator.ANY, FilterOperator.NIN)


def edge_condition(f: MetadataFilter) -> Any:
    """One MetadataFilter as an Edge condition; ValueError for what Edge cannot express, naming the filter."""
    from qdrant_edge import FieldCondition, Filter, MatchAny, MatchExcept, MatchText, MatchValue, RangeFloat

    op, key, value = f.operator, f.key, f.value
    if op in _LIST_OPERATORS and not isinstance(value, (list, tuple)):
        # list("py") would silently become the characters "p" and "y"
        raise ValueError(f"filter {op.value!r} on {key!r} needs a list of values, not {value!r}")
    if op == FilterOperator.EQ:
        return FieldCondition(key=key, match=MatchValue(value=value))
    if op == FilterOperator.NE:
        return Filter(must_not=[FieldCondition(key=key, match=MatchValue(value=value))])
    if op in (FilterOperator.IN, FilterOperator.ANY):
        return FieldCondition(key=key, match=MatchAny(any=list(value)))
    if op == FilterOperator.NIN:
        # positional: the stub names it `except_`, the native class takes only `except` (a keyword Python refuses)
        return FieldCondition(key=key, match=MatchExcept(list(value)))
    if op == FilterOperator.TEXT_MATCH:
        return FieldCondition(key=key, match=MatchText(text=value))
    if op in _BOUNDS:
        try:
            bound = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"filter {op.value!r} on {key!r} needs a number, not {value!r}") from None
        return FieldCondition(key=key, range=RangeFloat(**{_BOUNDS[op]: bound}))
    raise ValueError(f"filter operator {op.value!r} is not supported by EdgeVectorStore (key {key!r}); "
                     f"use one of {', '.join(o.value for o in (*_BOUNDS, *_LIST_OPERATORS))}, ==, !=, text_match")


def to_edge_filter(filters: Optional[MetadataFilters]) -> Any:
    """MetadataFilters -> qdrant_edge Filter (AND, OR and NOT nest); None for no filter at all."""
    if filters is None or not filters.filters:
        return None
    from qdrant_edge import Filter

    conds = [to_edge_filter(f) if isinstance(f, MetadataFilters) else edge_condition(f) for f in filters.filters]
    conds = [c for c in conds if c is not None]
    if filters.condition == FilterCondition.OR:
        return Filter(should=conds)
    if filters.condition == FilterCondition.NOT:
        return Filter(must_not=conds)
    return Filter(must=conds)
