"""The dense leg's query adapter: one linear map applied to a query's embedding before the nearest chunks are
looked up, learned from mined (commit message, changed chunk) pairs by eval/train_adapter.py and shipped in
the package as `ADAPTER_PATH`.

The chunks' vectors are never touched (no index is rebuilt when it changes): the map only moves a query
toward where the code it describes lies, which the bundled embedder, trained on prose pairs, does not know.
It is the model of LlamaIndex's linear adapter (llama-index-finetuning's `EmbeddingAdapterFinetuneEngine`
trains one on query embeddings against the batch's other positives); here each query is trained against
every chunk of its repository and the map is held near the identity, and a search applies it as one NumPy
product, so it needs neither torch nor that package.

The file holds the matrix (`matrix`, dim x dim) and a JSON note of how it was made (`info`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, List, Sequence

from coderag.base.errors import CodeRagError

ADAPTER_PATH = Path(__file__).resolve().parent / "query_adapter.npz"


class QueryAdapterError(CodeRagError):
    """The query adapter's file is missing, unreadable or made for another embedding size."""


class QueryAdapter:
    """Maps a query embedding: `vector @ matrix`, scaled back to unit length (the store compares cosines)."""

    def __init__(self, matrix: Any, info: dict) -> None:
        self.matrix = matrix
        self.info = info

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[0])

    def __call__(self, vector: Sequence[float]) -> List[float]:
        import numpy as np

        if len(vector) != self.dim:
            raise QueryAdapterError(f"The query adapter maps {self.dim}-number embeddings; this model gives "
                                    f"{len(vector)}. Set retrieval.query_adapter: false, or rebuild it with "
                                    f"`coderag train-adapter`.")
        out = np.asarray(vector, dtype=np.float32) @ self.matrix
        norm = float(np.linalg.norm(out))
        return (out / norm).tolist() if norm > 0 else list(vector)


@lru_cache(maxsize=4)
def load_adapter(path: Path = ADAPTER_PATH) -> QueryAdapter:
    """The adapter at `path`, loaded once per process."""
    import numpy as np

    try:
        with np.load(path) as z:
            matrix, info = z["matrix"].astype(np.float32), json.loads(str(z["info"]))
    except (OSError, ValueError, KeyError) as exc:
        raise QueryAdapterError(f"Cannot read the query adapter {path}: {exc}. Reinstall coderag, rebuild it with "
                                f"`coderag train-adapter`, or set retrieval.query_adapter: false.") from exc
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise QueryAdapterError(f"The query adapter {path} holds a {matrix.shape} array, not a square matrix. "
                                f"Rebuild it with `coderag train-adapter`, or set retrieval.query_adapter: false.")
    return QueryAdapter(matrix, info)


def save_adapter(matrix: Any, path: Path, info: dict) -> Path:
    """Write `matrix` and `info` as an adapter file (atomically: a search never reads half a file)."""
    import numpy as np

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, matrix=np.asarray(matrix, dtype=np.float32), info=np.array(json.dumps(info)))
    tmp.replace(path)
    load_adapter.cache_clear()
    return path
