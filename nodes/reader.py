"""The LlamaIndex Document of one text file, id = its POSIX path relative to the root."""

from __future__ import annotations

from llama_index.core.schema import Document

from coderag.nodes.keys import (CONTENT_HASH_KEY, FILE_PATH_KEY, LANGUAGE_KEY, LAST_MODIFIED_KEY, NON_EMBED_KEYS,
                                SIZE_KEY)
from coderag.nodes.languages import detect_language
from coderag.nodes.scan import FileText


def make_document(ft: FileText) -> Document:
    """The Document of one decoded file; its metadata never reaches the embedded text."""
    rel = ft.entry.rel_path
    return Document(
        text=ft.text,
        id_=rel,
        metadata={
            FILE_PATH_KEY: rel,
            LANGUAGE_KEY: detect_language(rel, ft.text),  # the whole text: a `.h` file may be C++
            SIZE_KEY: ft.entry.size,
            LAST_MODIFIED_KEY: ft.last_modified,
            CONTENT_HASH_KEY: ft.sha256,
        },
        excluded_embed_metadata_keys=list(NON_EMBED_KEYS),
        excluded_llm_metadata_keys=list(NON_EMBED_KEYS),
    )
