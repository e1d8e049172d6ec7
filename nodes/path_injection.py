"""PathInjector: the embedded and BM25 text starts with a breadcrumb (path, symbol, language)."""

from __future__ import annotations

from typing import Any, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, TransformComponent

from coderag.nodes.keys import BREADCRUMB_KEY, FILE_PATH_KEY, LANGUAGE_KEY, SYMBOL_KEY
from coderag.nodes.tokens import TokenCounter

DEFAULT_MAX_BREADCRUMB_TOKENS = 52


def breadcrumb(path: str, symbol: str, language: str) -> str:
    """`src/auth/service.py :: AuthService.validate_token (python)`"""
    return f"{path} :: {symbol} ({language})" if symbol else f"{path} ({language})"


class PathInjector(TransformComponent):
    """Put a breadcrumb into metadata that only the embed/LLM views show; the node's text stays the source lines.

    The breadcrumb is shortened (a merged chunk's list of names to its first, then leading folders,
    then the symbol's qualifiers) to fit `max_tokens`, so breadcrumb + chunk fit the model's window.
    """

    tokenizer_path: str = Field(description="tokenizer.json of the embedding model.")
    max_tokens: int = Field(default=DEFAULT_MAX_BREADCRUMB_TOKENS, gt=4, description="Most tokens of a breadcrumb.")

    _counter: TokenCounter = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._counter = TokenCounter(self.tokenizer_path)

    @classmethod
    def class_name(cls) -> str:
        return "PathInjector"

    def make(self, path: str, symbol: str, language: str) -> str:
        text = breadcrumb(path, symbol, language)
        if ", " in symbol and self._counter.count(text) > self.max_tokens:
            # A merged chunk's "A.x, A.y, A.z, ...": its first name says more than the folders do.
            symbol = symbol.split(", ", 1)[0] + ", ..."
            text = breadcrumb(path, symbol, language)
        parts = path.split("/")
        while self._counter.count(text) > self.max_tokens and len(parts) > 1:
            parts = parts[1:]
            text = breadcrumb(".../" + "/".join(parts), symbol, language)
        if self._counter.count(text) > self.max_tokens:
            text = breadcrumb(parts[-1], symbol.split(", ", 1)[0].rsplit(".", 1)[-1][:80], language)
        return text

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        cache: dict[tuple[str, str, str], str] = {}
        for node in nodes:
            m = node.metadata
            key = (m.get(FILE_PATH_KEY, ""), m.get(SYMBOL_KEY, ""), m.get(LANGUAGE_KEY, "text"))
            if key not in cache:
                cache[key] = self.make(*key)
            m[BREADCRUMB_KEY] = cache[key]
            if BREADCRUMB_KEY in node.excluded_embed_metadata_keys:
                node.excluded_embed_metadata_keys.remove(BREADCRUMB_KEY)
        return nodes
