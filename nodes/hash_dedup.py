"""HashDeduplicator: content that repeats across the repository (licence headers, vendored copies) is indexed once."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode

from llama_index.core.schema import TransformComponent

from coderag.nodes.keys import CHUNK_HASH_KEY, DUPLICATE_OF_KEY, END_LINE_KEY, FILE_PATH_KEY, IS_LEAF_KEY, START_LINE_KEY

DEFAULT_MAX_COPIES = 2
DEFAULT_MIN_CHARS = 40


def normalized_hash(text: str) -> str:
    """Hash of the text with all whitespace runs collapsed: re-indented copies are the same content."""
    return hashlib.sha1(" ".join(text.split()).encode("utf-8")).hexdigest()


class HashDeduplicator(TransformComponent):
    """Mark leaf chunks whose normalized content already has `max_copies` indexed copies as duplicates.

    A duplicate keeps its place in the docstore with `duplicate_of` = the canonical node id; it gets
    no embedding and no vector. Copies are counted across the whole index through `registry`
    (an IndexState), so the count holds across incremental runs.
    """

    max_copies: int = Field(default=DEFAULT_MAX_COPIES, ge=1, description="Indexed copies kept of one content.")
    min_chars: int = Field(default=DEFAULT_MIN_CHARS, ge=1, description="Shorter chunks are never deduplicated.")

    _registry: Any = PrivateAttr(default=None)

    def __init__(self, registry: Optional[Any] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry = registry

    @classmethod
    def class_name(cls) -> str:
        return "HashDeduplicator"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        seen: Counter = Counter()
        first: dict[str, str] = {}
        for node in nodes:
            if not node.metadata.get(IS_LEAF_KEY, True):
                continue
            text = node.get_content()
            h = normalized_hash(text)
            node.metadata[CHUNK_HASH_KEY] = h
            if self._registry is not None:
                # The registry already counts this batch's earlier copies: add_chunk below writes at once.
                existing, canonical = self._registry.copies(h)
            else:
                existing, canonical = seen[h], first.get(h)
            dup = None
            if len(text.strip()) >= self.min_chars and existing >= self.max_copies and canonical:
                dup = canonical
                node.metadata[DUPLICATE_OF_KEY] = canonical
            else:
                seen[h] += 1
                first.setdefault(h, node.node_id)
            if self._registry is not None:
                m = node.metadata
                self._registry.add_chunk(node.node_id, h, m[FILE_PATH_KEY], m[START_LINE_KEY], m[END_LINE_KEY], dup)
        return nodes
