"""OnnxEncoder: tokenizer + ONNX Runtime session + mean pooling, with no LlamaIndex import.

The core of `OnnxEmbedding` (onnx_embedding.py), kept apart so that the query-embedding helper process
(embed_process.py) starts with numpy, onnxruntime and tokenizers only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


class OnnxEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from an exported ONNX transformer.

    >>> enc = OnnxEncoder(model_dir, onnx_file)                          # doctest: +SKIP
    >>> enc.embed(["parse an HTTP date header"]).shape                   # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, model_dir: str, onnx_file: str, max_length: int = 256, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tk = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        tk.enable_truncation(max_length)
        # The file may ask for padding to a fixed length (128 for all-MiniLM-L6-v2): 8x the work of a query.
        tk.enable_padding(pad_id=0, pad_token="[PAD]")
        self._tokenizer = tk
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(onnx_file), so, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}

    def release_memory(self) -> None:
        """Give back the activation memory of the largest batch seen. ONNX Runtime keeps its arena at that
        peak (hundreds of MB after batches of full windows), which a build would otherwise still hold while
        the vector store optimizes, whose own peak comes on top: one tiny run that shrinks the arena frees it."""
        import numpy as np
        import onnxruntime as ort

        opts = ort.RunOptions()
        opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        one = np.ones((1, 1), dtype=np.int64)
        feed = {"input_ids": one, "attention_mask": one, "token_type_ids": np.zeros_like(one)}
        self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs}, opts)

    def embed(self, texts: Sequence[str]) -> Any:
        """A float32 array (len(texts), dim) of unit vectors."""
        import numpy as np

        enc = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        vec = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        vec /= np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
        return vec.astype("float32")
