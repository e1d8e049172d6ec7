"""coderag: local code retrieval for coding agents.

`from coderag import CodeIndex` is lazy: importing the package costs nothing until CodeIndex is used.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["CodeIndex", "SearchResults", "SearchResult", "index_repository"]

if TYPE_CHECKING:
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.postprocessors.payload import SearchResult, SearchResults


def __getattr__(name: str) -> Any:
    # Deferred so that `coderag --help` never imports LlamaIndex.
    if name == "CodeIndex":
        from coderag.pipelines.code_index import CodeIndex

        return CodeIndex
    if name == "index_repository":
        from coderag.pipelines.index_repository import index_repository

        return index_repository
    if name in ("SearchResults", "SearchResult"):
        from coderag.postprocessors import payload

        return getattr(payload, name)
    raise AttributeError(f"module 'coderag' has no attribute {name!r}")
