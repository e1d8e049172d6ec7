"""OnnxEmbedding: the same sentence-transformers model run by ONNX Runtime, for queries.

Importing torch + transformers costs ~6-7 s; onnxruntime + tokenizers ~0.2 s, and a one-thread
query embedding is as fast or faster. The ONNX file is exported once from the local model folder
(with torch, which the indexer has loaded anyway) into a cache outside the repository, and only
models with mean pooling (+ optional normalisation), like all-MiniLM-L6-v2, take this path.
The fp32 export matches torch to cosine 1.0000 (../shared/notes/stack.md §2).

`precision="int8"` runs a copy with int8 weights (ONNX Runtime dynamic quantization, per channel), made
from the fp32 export on first use: about half the time of a query embedding on one core, at a cosine of
~0.99 to the fp32 vector (documents stay embedded in fp32).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

log = logging.getLogger(__name__)
ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
QUERY_CACHE_SIZE = 256
OPSET = 17


def cache_root() -> Path:
    from coderag.base.paths import cache_dir

    return cache_dir("onnx")


def model_key(model_dir: Path) -> str:
    """Identifies the exact weights: path + size + mtime of the weight file."""
    weights = next((model_dir / n for n in ("model.safetensors", "pytorch_model.bin") if (model_dir / n).exists()), None)
    st = weights.stat() if weights else None
    raw = f"{model_dir.resolve()}|{st.st_size if st else 0}|{st.st_mtime_ns if st else 0}"
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


def onnx_path(model_dir: Path) -> Path:
    return cache_root() / model_key(model_dir) / ONNX_FILE


SOURCE_FILE = "source.json"  # in each export's folder: the model folder it was exported from
LEFTOVER_AGE_S = 3600  # work files older than this are a killed export's or quantization's, not one under way


def _is_work_file(name: str) -> bool:
    """A file an export or a quantization writes before its result is in place: `.NAME.PID.tmp`, a
    `.quantize-*` folder, and the shape-inferred copy the quantizer of older runs left beside the export."""
    return (name.startswith(".") and (name.endswith(".tmp") or name.startswith(".quantize-"))) or \
        name == "model-inferred.onnx"


def _remove_leftovers(folder: Path) -> list[Path]:
    import shutil
    import time

    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            old = time.time() - entry.lstat().st_mtime > LEFTOVER_AGE_S
        except OSError:
            continue
        if _is_work_file(entry.name) and old:
            (shutil.rmtree if entry.is_dir() and not entry.is_symlink() else Path.unlink)(entry)
            removed.append(entry)
    return removed


def prune_exports(model_dir: Path) -> list[Path]:
    """Remove exports that can never be used again (~110 MB each): those of a model folder that no longer
    exists (a deleted virtual environment), and older exports of this one (its weights changed: a
    reinstall). Only folders that say where they came from (`source.json`) are touched. In every folder,
    the work files of an export or quantization that was killed (over an hour old) go too. Returns what
    was removed."""
    import shutil

    keep, here = model_key(model_dir), str(model_dir.resolve())
    removed = []
    try:
        entries = list(cache_root().iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.is_dir():
            continue
        removed += _remove_leftovers(entry)
        if entry.name == keep:
            continue
        try:
            source = json.loads((entry / SOURCE_FILE).read_text(encoding="utf-8"))["model_dir"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if source == here or not Path(source).is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    if removed:
        log.info("removed %d unused ONNX export(s) or work file(s) from %s", len(removed), cache_root())
    return removed


def int8_path(model_dir: Path) -> Path:
    return cache_root() / model_key(model_dir) / INT8_FILE


def quantize_onnx(model_dir: Path) -> Optional[Path]:
    """The int8 copy of the fp32 export (made once, ~2 s); None when there is no export or it fails."""
    src, out = onnx_path(model_dir), int8_path(model_dir)
    if out.exists():
        return out
    if not src.exists():
        return None
    import shutil
    import tempfile

    # In a folder of its own: the quantizer writes a shape-inferred copy beside its input, so two processes
    # quantizing at once (a search and the owner it starts) deleted each other's, and one fell back to fp32.
    work = None
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        work = Path(tempfile.mkdtemp(prefix=".quantize-", dir=out.parent))

        source = work / ONNX_FILE
        try:
            os.link(src, source)
        except OSError:  # another file system, or no hard links: a copy
            shutil.copyfile(src, source)
        tmp = work / INT8_FILE
        # The quantizer logs a hint through the root logger ("consider pre-processing"), which would also
        # install a handler on it: a null handler and a raised level keep our process's logging as it was.
        root, quiet = logging.getLogger(), logging.NullHandler()
        level = root.level
        root.addHandler(quiet)
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.removeHandler(quiet)
            root.setLevel(level)
        os.replace(tmp, out)  # atomic: a reader sees no int8 file, or a whole one
        prune_exports(model_dir)
        return out
    except Exception as exc:
        log.warning("int8 quantization of %s failed (%s); queries use fp32", src, exc)
        return None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def mean_pooling_model(model_dir: Path) -> bool:
    """True when the sentence-transformers pipeline is Transformer -> mean Pooling [-> Normalize]."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text("utf-8"))
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text("utf-8"))
    except (OSError, ValueError, KeyError):
        return False
    # sentence-transformers 6 writes `"pooling_mode": "mean"`; older versions, one flag a mode (the bundled model)
    mean = pooling.get("pooling_mode") in ("mean", ["mean"]) or \
        (pooling.get("pooling_mode_mean_tokens") and not pooling.get("pooling_mode_cls_token"))
    return kinds in (["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"]) and bool(mean)


# One export at a time in a process: an owner loads its query model and its document model on two threads, and
# two threads importing transformers at once can each find it half imported ("cannot import name 'AutoModel'"),
# so one export failed and its thread fell back to torch. The second to come finds the first's export.
_EXPORT_LOCK = threading.Lock()


def export_onnx(model_dir: Path) -> Optional[Path]:
    """Export the transformer to ONNX (fp32) in the cache; returns the path, or None if not possible."""
    out = onnx_path(model_dir)
    if out.exists():
        return out
    if not mean_pooling_model(model_dir):
        return None
    with _EXPORT_LOCK:
        return out if out.exists() else _export(model_dir, out)


def _export(model_dir: Path, out: Path) -> Optional[Path]:
    try:
        import torch
        from transformers import AutoModel

        class _Wrapper(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # its "Loading weights" bar would land in the middle of `coderag index`
        model = AutoModel.from_pretrained(str(model_dir)).eval()
        ids = torch.ones((2, 8), dtype=torch.long)
        axes = {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # this process's: two may export at once
        import warnings

        with warnings.catch_warnings():  # tracer notes about constant shapes: expected, and noise to a user
            warnings.simplefilter("ignore")
            torch.onnx.export(_Wrapper(model), (ids, ids, torch.zeros_like(ids)), str(tmp),
                              input_names=["input_ids", "attention_mask", "token_type_ids"],
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                              dynamo=False)
        source = out.parent / f".{SOURCE_FILE}.{os.getpid()}.tmp"
        source.write_text(json.dumps({"model_dir": str(model_dir.resolve())}), encoding="utf-8")
        os.replace(source, out.parent / SOURCE_FILE)
        os.replace(tmp, out)
        prune_exports(model_dir)
        return out
    except Exception as exc:  # the torch path stays available; this is only an accelerator
        log.warning("ONNX export of %s failed (%s); queries use torch", model_dir, exc)
        return None


class OnnxEmbedding(BaseEmbedding):
    """Mean-pooled, L2-normalised sentence embeddings from an exported ONNX transformer, one thread.

    A resident process can `start_process()`: queries are then embedded by a helper process
    (embed_process.py) while the search does other work, through `start_query_embedding`.
    """

    model_dir: str = Field(description="The sentence-transformers folder (tokenizer.json, configs).")
    onnx_file: str = Field(description="The exported ONNX transformer.")
    max_length: int = Field(default=256, gt=0, description="Token window, special tokens included.")
    threads: int = Field(default=1, ge=1, description="ONNX Runtime intra-op threads.")

    _encoder: Any = PrivateAttr()
    _helper: Any = PrivateAttr(default=None)
    _recent: Any = PrivateAttr(default_factory=OrderedDict)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from coderag.nodes.onnx_encoder import OnnxEncoder

        self._encoder = OnnxEncoder(self.model_dir, self.onnx_file, self.max_length, self.threads)

    @classmethod
    def class_name(cls) -> str:
        return "OnnxEmbedding"

    def _embed(self, texts: List[str]) -> List[List[float]]:
        return self._encoder.embed(texts).tolist()

    def release_memory(self) -> None:
        """Free what embedding a bulk of chunks left allocated (OnnxEncoder.release_memory)."""
        self._encoder.release_memory()

    # -- queries ------------------------------------------------------------------------------------
    def start_process(self) -> bool:
        """Start the query-embedding helper process (about 0.5 s, ~100 MB); True if it runs."""
        from coderag.nodes.embed_process import EmbedProcess

        if self._helper is None or not self._helper.alive:
            self._helper = EmbedProcess(self.model_dir, self.onnx_file, self.max_length).start()
        return self._helper.alive

    def stop_process(self) -> None:
        helper, self._helper = self._helper, None
        if helper is not None:
            helper.close()

    @property
    def helper_pid(self) -> Optional[int]:
        """The helper process's pid while it runs (benchmarks add its memory to the owner's)."""
        return self._helper.pid if self._helper is not None and self._helper.alive else None

    def start_query_embedding(self, query: str) -> "PendingQueryEmbedding":
        """Begin embedding `query`: sent to the helper process when one runs and is free, so that it is
        computed while the caller works; `.result()` then gives the vector (from the recent-query cache,
        from the helper, or computed here). Call `result()` exactly once."""
        hit = self._cached(query)
        if hit is not None:
            return PendingQueryEmbedding(self, query, hit, None)
        helper = self._helper
        sent = helper is not None and helper.submit(query)
        return PendingQueryEmbedding(self, query, None, helper if sent else None)

    def _cached(self, query: str) -> Optional[List[float]]:
        with self._lock:
            hit = self._recent.get(query)
            if hit is None:
                return None
            self._recent.move_to_end(query)
            return hit.tolist()

    def _remember(self, query: str, vec: List[float]) -> None:
        with self._lock:
            self._recent[query] = array("f", vec)  # not a list of floats: the cyclic GC would visit each one
            while len(self._recent) > QUERY_CACHE_SIZE:
                self._recent.popitem(last=False)

    def _get_query_embedding(self, query: str) -> List[float]:
        # An agent often asks the same question again with another filter or budget: the last few hundred
        # query vectors are kept (1.5 KB each).
        hit = self._cached(query)
        if hit is not None:
            return hit
        vec = self._embed([query])[0]
        self._remember(query, vec)
        return vec

    def clear_cache(self) -> None:
        with self._lock:
            self._recent.clear()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._embed([text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return self._embed(texts)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)


class PendingQueryEmbedding:
    """A query embedding under way (see `OnnxEmbedding.start_query_embedding`)."""

    def __init__(self, model: OnnxEmbedding, query: str, vec: Optional[List[float]], helper: Any) -> None:
        self._model, self.query, self._vec, self._helper = model, query, vec, helper
        self.compute_ms = 0.0  # time spent embedding (in the helper, or here)
        self.where = "cache" if vec is not None else ("helper" if helper is not None else "here")

    def result(self) -> List[float]:
        if self._vec is not None:
            return self._vec
        if self._helper is not None:
            helper, self._helper = self._helper, None
            got = helper.result()
            if got is not None:
                self._vec, self.compute_ms = got
                self._model._remember(self.query, self._vec)
                return self._vec
            self.where = "here"  # the helper died or stalled: embedded in this process after all
        t0 = time.perf_counter()
        self._vec = self._model.get_query_embedding(self.query)
        self.compute_ms = (time.perf_counter() - t0) * 1000
        return self._vec

    def cancel(self) -> None:
        """Not wanted after all: a helper's answer is still read (and dropped), which frees the helper."""
        if self._helper is not None:
            helper, self._helper = self._helper, None
            helper.result()


def load_query_model(model_dir: Path, max_length: int = 256, precision: str = "fp32") -> Optional[OnnxEmbedding]:
    """The ONNX query embedder of this model (`precision`: fp32 or int8), exported first when the cache has no
    export; None when the model has no twin (not mean-pooled) or the export fails, and the caller uses torch.

    Building an index exports the model (pipelines/ingestion.py), but a cache emptied or moved since
    (`CODERAG_CACHE_DIR`) holds none: without the export every process that searches would load torch (seconds
    of imports each time) and embed each query at fp32 on it, where one export serves every later process."""
    path = export_onnx(model_dir)
    if path is None:
        return None
    if precision == "int8":
        path = quantize_onnx(model_dir) or path
    try:
        return OnnxEmbedding(model_dir=str(model_dir), onnx_file=str(path), max_length=max_length)
    except Exception as exc:
        log.warning("could not load %s (%s); queries use torch", path, exc)
        return None
