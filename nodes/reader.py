"""RepositoryReader: one LlamaIndex Document per text file, id = POSIX path relative to the root."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document

from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.keys import (CONTENT_HASH_KEY, FILE_PATH_KEY, LANGUAGE_KEY, LAST_MODIFIED_KEY, NON_EMBED_KEYS,
                                SIZE_KEY)
from coderag.nodes.languages import detect_language
from coderag.nodes.scan import DEFAULT_HARD_MAX_BYTES, FileText, SkipLog, read_text_file, walk


def make_document(ft: FileText) -> Document:
    """The Document of one decoded file; its metadata never reaches the embedded text."""
    rel = ft.entry.rel_path
    return Document(
        text=ft.text,
        id_=rel,
        metadata={
            FILE_PATH_KEY: rel,
            LANGUAGE_KEY: detect_language(rel, ft.text[:200]),
            SIZE_KEY: ft.entry.size,
            LAST_MODIFIED_KEY: ft.last_modified,
            CONTENT_HASH_KEY: ft.sha256,
        },
        excluded_embed_metadata_keys=list(NON_EMBED_KEYS),
        excluded_llm_metadata_keys=list(NON_EMBED_KEYS),
    )


class RepositoryReader(BaseReader):
    """Walk a repository (pruning ignored folders) and load every readable text file.

    Examples:
        >>> docs = RepositoryReader("path/to/repo").load_data()        # doctest: +SKIP
        >>> docs[0].id_, docs[0].metadata["language"]                   # doctest: +SKIP
        ('README.md', 'markdown')
    """

    def __init__(self, root: str | Path, hard_max_bytes: int = DEFAULT_HARD_MAX_BYTES) -> None:
        self.root = Path(root)
        self.hard_max_bytes = hard_max_bytes
        self.skips = SkipLog()

    def lazy_load_data(self, paths: Iterable[str] | None = None) -> Iterator[Document]:  # type: ignore[override]
        matcher = IgnoreMatcher(self.root)
        for entry in walk(self.root, matcher, self.skips):
            ft = read_text_file(entry, self.skips, self.hard_max_bytes)
            if ft is not None:
                yield make_document(ft)

    def load_data(self, *args, **kwargs) -> list[Document]:  # type: ignore[override]
        return list(self.lazy_load_data())
