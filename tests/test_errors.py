"""Errors a user can fix are shown as one message with the next step, never as a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from coderag.cli import main


def test_index_with_a_missing_model_folder_says_what_to_set(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    (repo / "qdrant.yaml").write_text(f"embedding:\n  model_path: {tmp_path / 'no-model'}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["index", str(repo)])
    assert result.exit_code == 1
    assert "embedding.model_path" in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_embedding_device_auto_is_the_cpu_without_a_gpu_and_cuda_says_what_to_do() -> None:
    import pytest
    import torch

    from coderag.base.errors import ModelLoadError
    from coderag.nodes.embedding import resolve_device

    assert resolve_device("cpu") == "cpu"
    if torch.cuda.is_available():  # a machine with a GPU embeds there
        assert resolve_device("auto") == resolve_device("cuda") == "cuda"
    else:
        assert resolve_device("auto") == "cpu"
        with pytest.raises(ModelLoadError, match='embedding.device to "auto" or "cpu"'):
            resolve_device("cuda")
