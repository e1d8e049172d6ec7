"""The query embedder: the ONNX twin of the bundled model, fp32 and int8, against the torch model."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import write_files
from coderag.base.config import Settings

QUERIES = ["where is the retry after a failed login", "getUserById", "parse the http accept header",
           "round the sales tax to whole cents", "QuerySet.filter"]


@pytest.fixture(scope="module")
def onnx_env(tmp_path_factory: pytest.TempPathFactory):
    """An index built with the real model in a fresh cache folder, so the ONNX export is made here."""
    import os

    from coderag import index_repository

    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("CODERAG_CACHE_DIR")
    os.environ["CODERAG_CACHE_DIR"] = str(cache)
    try:
        root = write_files(tmp_path_factory.mktemp("qm") / "repo", {"a.py": "def add(a, b):\n    return a + b\n"})
        index_repository(root, settings=Settings())
        yield Settings().model_dir(), cache
    finally:
        if old is None:
            os.environ.pop("CODERAG_CACHE_DIR", None)
        else:
            os.environ["CODERAG_CACHE_DIR"] = old


def test_query_model_fp32_and_int8_agree_with_torch(onnx_env) -> None:
    from coderag.nodes.embedding import load_embed_model
    from coderag.nodes.onnx_embedding import int8_path, load_query_model, onnx_path

    model_dir, cache = onnx_env
    assert onnx_path(model_dir).is_relative_to(cache) and onnx_path(model_dir).exists()
    torch_model = load_embed_model(model_dir, 8, threads=1)
    fp32 = load_query_model(model_dir, 256, "fp32")
    int8 = load_query_model(model_dir, 256, "int8")
    assert int8 is not None and Path(int8.onnx_file) == int8_path(model_dir) and int8_path(model_dir).exists()
    for q in QUERIES:
        ref = np.array(torch_model.get_query_embedding(q))
        assert float(ref @ np.array(fp32.get_query_embedding(q))) > 0.9999
        assert float(ref @ np.array(int8.get_query_embedding(q))) > 0.97  # measured ~0.99


def test_query_model_default_is_int8_and_a_cache_without_an_export_gets_one(onnx_env, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache with no export of the model (emptied or moved since the index was built) gets one on the first
    search, so later processes load the ONNX twin instead of torch."""
    from coderag.nodes.onnx_embedding import int8_path, load_query_model, onnx_path

    model_dir, _ = onnx_env
    assert Settings().retrieval.query_precision == "int8"
    monkeypatch.setenv("CODERAG_CACHE_DIR", str(tmp_path))
    assert not onnx_path(model_dir).exists()
    model = load_query_model(model_dir, 256, "int8")
    assert model is not None and Path(model.onnx_file) == int8_path(model_dir)
    assert onnx_path(model_dir).is_relative_to(tmp_path) and onnx_path(model_dir).exists()


def test_query_model_documents_are_embedded_at_full_precision(onnx_env, tmp_path: Path) -> None:
    """int8 is for queries only: chunks embedded by refresh or the owner use the fp32 model, like
    `coderag index` does, so the store and the chunk-hash cache never mix precisions."""
    from llama_index.core.schema import MetadataMode

    from coderag import CodeIndex, index_repository
    from coderag.nodes.embedding import load_embed_model
    from coderag.nodes.onnx_embedding import int8_path, onnx_path

    model_dir, _ = onnx_env
    root = write_files(tmp_path / "repo", {"a.py": "def add(a, b):\n    return a + b\n"})
    index_repository(root, settings=Settings())
    with CodeIndex.open(root, settings=Settings(), create=False) as idx:
        assert Path(idx.embed_model.onnx_file) == int8_path(model_dir)
        assert Path(idx.document_embed_model.onnx_file) == onnx_path(model_dir)
        assert idx.document_embed_model.threads == (os.cpu_count() or 1)  # bulk work: every core
        (root / "b.py").write_text("def mul(a, b):\n    return a * b\n", encoding="utf-8")
        idx.refresh()
        torch_model = load_embed_model(model_dir, 8, threads=1)
        nodes = [n for n in idx.vector_store.get_nodes() if n.metadata["file_path"] == "b.py"]
        assert nodes
        for n in nodes:  # the vector refresh stored: fp32 (cosine ~1.0 to torch), not int8 (~0.99)
            rec = idx.vector_store.client.retrieve([uuid.UUID(n.node_id)], False, True)[0]
            stored = np.array(rec.vector["dense"])
            ref = np.array(torch_model.get_text_embedding(n.get_content(metadata_mode=MetadataMode.EMBED)))
            assert float(stored @ ref) / float(np.linalg.norm(stored) * np.linalg.norm(ref)) > 0.9999


def test_exports_say_their_source_and_unusable_ones_are_pruned(onnx_env, tmp_path: Path, monkeypatch) -> None:
    """An export records its model folder; a new export removes exports of folders that are gone and older
    exports of the same folder, and leaves those of other live folders and folders without a record."""
    import json

    from coderag.nodes.onnx_embedding import SOURCE_FILE, model_key, onnx_path, prune_exports

    model_dir, cache = onnx_env
    made = json.loads((onnx_path(model_dir).parent / SOURCE_FILE).read_text())
    assert made == {"model_dir": str(model_dir.resolve())}

    monkeypatch.setenv("CODERAG_CACHE_DIR", str(tmp_path))
    root = tmp_path / "onnx"
    live = tmp_path / "other-venv-model"
    live.mkdir()
    entries = {"gone": str(tmp_path / "deleted-venv-model"), "older": str(model_dir.resolve()),
               "other": str(live), "legacy": None, model_key(model_dir): str(model_dir.resolve())}
    for name, source in entries.items():
        (root / name).mkdir(parents=True)
        (root / name / "model.onnx").write_bytes(b"x")
        if source is not None:
            (root / name / SOURCE_FILE).write_text(json.dumps({"model_dir": source}))
    removed = prune_exports(model_dir)
    assert sorted(p.name for p in removed) == ["gone", "older"]
    assert sorted(p.name for p in root.iterdir()) == sorted(["other", "legacy", model_key(model_dir)])


QUANTIZE = ("from coderag.base.config import Settings\n"
            "from coderag.nodes.onnx_embedding import quantize_onnx\n"
            "print(quantize_onnx(Settings().model_dir()))\n")


def test_processes_quantizing_one_export_at_once_all_get_the_int8_model(tmp_path: Path) -> None:
    """Issue 26: a search and the owner it started quantized the same export at once; the quantizer's
    shape-inferred copy beside the export was deleted under one of them, which warned and used fp32."""
    import os
    import shutil
    import subprocess
    import sys

    from coderag.nodes.onnx_embedding import INT8_FILE, ONNX_FILE, SOURCE_FILE, onnx_path

    model_dir = Settings().model_dir()
    made = onnx_path(model_dir)  # the suite's export (conftest); copied to a cache of this test's own
    env = {**os.environ, "CODERAG_CACHE_DIR": str(tmp_path / "cache")}
    export = tmp_path / "cache" / made.relative_to(made.parents[2])  # onnx/<key>/model.onnx
    export.parent.mkdir(parents=True)
    shutil.copyfile(made, export)
    shutil.copyfile(made.parent / SOURCE_FILE, export.parent / SOURCE_FILE)
    procs = [subprocess.Popen([sys.executable, "-c", QUANTIZE], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "failed" not in err, err[-2000:]
        assert out.strip() == str(export.parent / INT8_FILE), out
    assert sorted(p.name for p in export.parent.iterdir()) == sorted([ONNX_FILE, INT8_FILE, SOURCE_FILE])


def test_work_files_of_killed_exports_are_pruned_once_stale(tmp_path: Path, monkeypatch) -> None:
    import os
    import time

    from coderag.nodes.onnx_embedding import LEFTOVER_AGE_S, model_key, prune_exports

    monkeypatch.setenv("CODERAG_CACHE_DIR", str(tmp_path))
    model_dir = Settings().model_dir()
    folder = tmp_path / "onnx" / model_key(model_dir)
    (folder / ".quantize-abc").mkdir(parents=True)
    stale = [folder / ".model.onnx.123.tmp", folder / "model-inferred.onnx", folder / ".quantize-abc"]
    for p in stale[:2]:
        p.write_bytes(b"x")
    for p in stale:
        os.utime(p, (time.time() - LEFTOVER_AGE_S - 60,) * 2)
    (folder / ".model.int8.onnx.456.tmp").write_bytes(b"x")  # another process's, at work now
    (folder / "model.onnx").write_bytes(b"x")
    assert sorted(prune_exports(model_dir)) == sorted(stale)
    assert sorted(p.name for p in folder.iterdir()) == [".model.int8.onnx.456.tmp", "model.onnx"]


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's memory from /proc")
def test_document_model_gives_back_its_batch_memory(onnx_env) -> None:
    """ONNX Runtime keeps its arena at the largest batch it ran; release_memory frees it (an indexing run does
    so before the store optimizes) and the model embeds as before afterwards."""
    from coderag.nodes.embedding import load_document_model

    model_dir, _ = onnx_env
    model = load_document_model(model_dir, 32, threads=1, device="cpu")
    texts = [f"def handler_{i}(request):\n" + "    value = compute(request, attempt) + offset\n" * 40
             for i in range(32)]  # 32 windows of the model's full 256 tokens
    before = np.array(model.get_text_embedding_batch(texts))
    grown = _rss_mb()
    model.release_memory()
    assert grown - _rss_mb() > 100  # measured: ~600 MB held after such a batch, ~20 after the release
    assert np.allclose(np.array(model.get_text_embedding_batch(texts)), before, atol=1e-6)


def test_a_model_the_installed_sentence_transformers_saves_takes_the_onnx_path(tmp_path: Path) -> None:
    """A model a user fine-tunes and names in embedding.model_path is saved by today's sentence-transformers,
    whose pooling config says `"pooling_mode": "mean"` where older ones set one flag a mode: both are mean
    pooling, and CLS pooling is not."""
    import json

    from sentence_transformers import SentenceTransformer

    from coderag.nodes.onnx_embedding import mean_pooling_model

    saved = tmp_path / "saved"
    SentenceTransformer(str(Settings().model_dir()), device="cpu").save(str(saved))
    assert mean_pooling_model(saved)
    assert mean_pooling_model(Settings().model_dir())  # the bundled folder, in the older format
    (saved / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": "cls"}))
    assert not mean_pooling_model(saved)
