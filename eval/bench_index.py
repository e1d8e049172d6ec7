"""Indexing benchmark: a full build of a real, pinned code base, a no-change re-run, and the bare model on the same chunks.

Not a test: it prints numbers. The code base is a pinned public source distribution
(default: click 8.1.8 from PyPI, sha256-checked) fetched by :mod:`coderag.eval.corpora`
into a cache outside the repository (``$CODERAG_CACHE_DIR/corpora``, else
``~/.cache/coderag/corpora``), then copied to a temporary folder that is indexed with the
default settings.

What it measures, in one process:

* full build: files, leaf chunks, seconds and chunks/s of ``index_repository``. The document
  model (the ONNX fp32 twin, exported first if missing) is loaded once *before* the build
  (reported as "model load"), so the build time is the pipeline's own work: walk, read,
  split, breadcrumbs, dedup, embedding, Edge and SQLite writes.
* no-change re-run: in-process, and as a ``coderag index`` process (what a user waits for).
* peak RSS (``resource.getrusage``) after the build and at the end.
* bare models over exactly the texts the build embedded (breadcrumb + chunk, read back from
  the docstore and checked against the chunk-hash cache), same batch size, sorted by length
  as the pipeline sorts them: the document model the build used, and torch
  (``HuggingFaceEmbedding``), with the smallest cosine between their vectors. The ratio
  build/bare compares embedded chunks per second with the document model's (target >= 0.9).

``--files N`` adds a synthetic tree of N files for the "no-change re-run of 2,000 files
under 1 s" target. Embedding N files' worth of new chunks would take many minutes on a
laptop CPU, and the no-change run never looks at chunks (it walks, stats and compares with
the manifest), so the tree is made cheap to build: it holds N copies of a few corpus files
whose chunks are all long enough to be deduplicated, indexed with
``chunking.dedup_max_copies: 1``; each distinct chunk is embedded once and every copy
still goes through reading, splitting and the docstore, and lands in the manifest.

Usage::

    python eval/bench_index.py                      # click 8.1.8, full build
    python eval/bench_index.py --subdir src         # a quicker run on the library code only
    python eval/bench_index.py --files 2000         # plus the 2,000-file no-change target
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_CORPUS = "click"
SYNTH_FILES_PER_DIR = 50
SYNTH_DISTINCT_LEAVES = 120  # chunks the synthetic tree embeds, whatever N is


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _copy_corpus(src: Path, dst: Path, max_files: int | None) -> int:
    """Copy the corpus (all of it, or its first `max_files` files in path order), never an index built in it."""
    from coderag.base.paths import INDEX_DIR_NAME

    if max_files is None:
        shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR_NAME))
        return sum(1 for p in dst.rglob("*") if p.is_file())
    files = sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()
                   and INDEX_DIR_NAME not in p.relative_to(src).parts)[:max_files]
    for p in files:
        out = dst / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, out)
    return len(files)


def _embedded_texts(root: Path, model_id: str) -> tuple[list[str], int]:
    """The texts the build embedded: leaves that are not duplicates, as the embedder saw them.

    Returns (texts sorted by length, how many of them the chunk-hash cache holds)."""
    from llama_index.core.schema import MetadataMode

    from coderag.nodes.embedding import cache_key
    from coderag.base.paths import DB_NAME
    from coderag.pipelines.stores import open_docstore
    from coderag.store.state import IndexState

    state = IndexState(root / ".coderag" / DB_NAME, readonly=True)
    try:
        nodes = open_docstore(state).docs.values()
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes
                 if n.metadata.get("is_leaf", True) and not n.metadata.get("duplicate_of")]
        hits = state.cached_vectors([cache_key(model_id, t) for t in texts])
    finally:
        state.close()
    return sorted(texts, key=len), len(hits)


def _cli_no_change(root: Path, config: Path | None = None) -> float:
    """Wall time of `coderag index ROOT` as its own process when nothing changed."""
    exe = Path(sys.executable).with_name("coderag")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "coderag.cli"]
    cmd += ["index", str(root)] + (["--config", str(config)] if config else [])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0 or " 0 indexed," not in out.stdout:
        raise RuntimeError(f"no-change CLI run did work or failed:\n{out.stdout}\n{out.stderr}")
    return dt


def _pick_synth_sources(root: Path, tokenizer_path: str) -> list[Path]:
    """Corpus code files whose every leaf the deduplicator can catch (>= its min_chars), small ones first."""
    from coderag.nodes.code_splitter import CodeHierarchySplitter
    from coderag.nodes.gitignore_filter import skip_reason
    from coderag.nodes.hash_dedup import DEFAULT_MIN_CHARS
    from coderag.nodes.ignore import IgnoreMatcher
    from coderag.nodes.reader import make_document
    from coderag.nodes.scan import SkipLog, read_text_file, walk

    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path)
    ok: list[tuple[int, Path]] = []
    for e in walk(root, IgnoreMatcher(root), SkipLog()):
        ft = read_text_file(e, SkipLog())
        if ft is None or skip_reason(ft.text):
            continue
        doc = make_document(ft)
        if doc.metadata["language"] in ("text", "rst", "markdown"):
            continue
        leaves = [n for n in sp.split_document(doc) if n.metadata["is_leaf"]]
        if leaves and all(len(n.text.strip()) >= DEFAULT_MIN_CHARS for n in leaves):
            ok.append((len(leaves), Path(e.abs_path)))
    picked, total = [], 0
    for n_leaves, path in sorted(ok, key=lambda x: (x[0], str(x[1]))):
        if total + n_leaves > SYNTH_DISTINCT_LEAVES and picked:
            break
        picked.append(path)
        total += n_leaves
    if not picked:
        raise RuntimeError("no corpus file is fit for the synthetic tree")
    return picked


def _synth_tree(dst: Path, sources: list[Path], n_files: int) -> None:
    for k in range(n_files):
        src = sources[k % len(sources)]
        out = dst / f"pkg_{k // SYNTH_FILES_PER_DIR:03d}" / f"{src.stem}_{k:05d}{src.suffix}"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)


def _row(label: str, value: str) -> None:
    print(f"  {label:<34} {value}")


def run(corpus: str, max_files: int | None, n_synth: int | None, batch_size: int | None, keep: bool,
        subdir: str = "") -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from coderag.base.config import Settings
    from coderag.eval.corpora import CORPORA, fetch
    import numpy as np

    from coderag.nodes.embedding import load_document_model, load_embed_model
    from coderag.pipelines.index_repository import index_repository

    settings = Settings()
    if batch_size:
        settings.embedding.batch_size = batch_size
    model_dir = settings.model_dir()
    c = CORPORA[corpus]
    src = fetch(corpus)  # pinned version + sha256, cached outside the repository
    if subdir:
        src = src / subdir
        if not src.is_dir():
            raise SystemExit(f"{corpus} has no folder {subdir!r}")
    work = Path(tempfile.mkdtemp(prefix="coderag-bench-"))
    try:
        root = work / f"{c.name}-{c.version}"
        n_copied = _copy_corpus(src, root, max_files)
        print(f"coderag index benchmark: {c.package} {c.version}{'/' + subdir if subdir else ''} "
              f"({c.registry}, sha256 {c.sha256[:12]}...), {n_copied} files copied to {root}")
        print(f"  machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
              f"batch size {settings.embedding.batch_size}")

        e = settings.embedding
        t0 = time.perf_counter()
        model = load_document_model(model_dir, e.batch_size, e.threads, e.device, e.window_tokens)
        t_load = time.perf_counter() - t0

        s = index_repository(root, settings=settings)
        rss_build = peak_rss_mb()
        s2 = index_repository(root, settings=settings)
        if s2.embedded or s2.indexed:
            raise RuntimeError(f"the no-change re-run did work: {s2}")
        cli_s = _cli_no_change(root)

        texts, in_cache = _embedded_texts(root, str(model_dir))
        if in_cache != len(texts) or len(texts) != s.embedded:
            print(f"  warning: {len(texts)} texts read back, {in_cache} in the cache, {s.embedded} embedded by the build")
        texts.sort(key=len)
        t0 = time.perf_counter()
        doc_vecs = np.array(model.get_text_embedding_batch(texts))
        bare_s = time.perf_counter() - t0
        torch_model = load_embed_model(model_dir, e.batch_size, e.threads)
        t0 = time.perf_counter()
        torch_vecs = np.array(torch_model.get_text_embedding_batch(texts))
        torch_s = time.perf_counter() - t0
        min_cos = float((doc_vecs * torch_vecs).sum(1).min()) if len(texts) else 1.0

        build_eps = s.embedded / s.seconds if s.seconds else 0.0
        bare_eps = len(texts) / bare_s if bare_s else 0.0
        print("full build")
        _row("files (seen / indexed / skipped)", f"{s.files_seen} / {s.indexed} / {sum(s.skipped.values())}")
        _row("chunks (leaves / embedded / dups)", f"{s.chunks} / {s.embedded} / {s.duplicates}")
        _row(f"model load (before): {type(model).__name__}", f"{t_load:.2f} s")
        _row("seconds", f"{s.seconds:.2f} s")
        _row("chunks/s (leaves written)", f"{s.chunks_per_s:.1f}")
        _row("embedded chunks/s", f"{build_eps:.1f}")
        _row("peak RSS after build", f"{rss_build:.0f} MiB")
        print("no-change re-run")
        _row("in-process", f"{s2.seconds:.3f} s ({s2.unchanged} files unchanged, {s2.embedded} embedded)")
        _row("`coderag index` process", f"{cli_s:.3f} s")
        print(f"bare models (get_text_embedding_batch, the same {len(texts)} texts)")
        _row(f"{type(model).__name__} (the build's)", f"{bare_s:.2f} s, {bare_eps:.1f} chunks/s")
        _row("HuggingFaceEmbedding (torch)", f"{torch_s:.2f} s, {len(texts) / torch_s if torch_s else 0.0:.1f} chunks/s")
        _row("smallest cosine between the two", f"{min_cos:.6f}")
        _row("ratio build/bare (target >= 0.9)", f"{build_eps / bare_eps:.2f}" if bare_eps else "n/a")

        if n_synth:
            sources = _pick_synth_sources(root, str(model_dir / "tokenizer.json"))
            synth = work / f"synthetic-{n_synth}"
            _synth_tree(synth, sources, n_synth)
            sset = settings.model_copy(deep=True)
            sset.chunking.dedup_max_copies = 1
            b = index_repository(synth, settings=sset)
            r = index_repository(synth, settings=sset)
            if r.embedded or r.indexed:
                raise RuntimeError(f"the synthetic no-change re-run did work: {r}")
            cfg = work / "synthetic.yaml"  # the same settings for the CLI process
            cfg.write_text("chunking:\n  dedup_max_copies: 1\n")
            cli_synth = _cli_no_change(synth, cfg)
            print(f"synthetic tree: {n_synth} files = copies of {len(sources)} corpus files "
                  f"(dedup_max_copies 1, so each distinct chunk is embedded once)")
            _row("build", f"{b.seconds:.2f} s ({b.indexed} files, {b.chunks} leaves, {b.embedded} embedded, "
                          f"{b.duplicates} duplicates)")
            _row("no-change re-run, in-process", f"{r.seconds:.3f} s ({r.unchanged} files unchanged)")
            _row("no-change re-run, `coderag index`", f"{cli_synth:.3f} s (target < 1 s)")
        print(f"peak RSS at the end: {peak_rss_mb():.0f} MiB")
        return 0
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="name in coderag.eval.corpora (default: click)")
    p.add_argument("--subdir", default="", metavar="PATH", help="index only this folder of the corpus, e.g. src")
    p.add_argument("--max-files", type=int, default=None, metavar="K", help="index only the first K files")
    p.add_argument("--files", type=int, default=None, metavar="N",
                   help="also build a synthetic tree of N files and time its no-change re-run")
    p.add_argument("--batch-size", type=int, default=None, help="embedding batch size (default: the settings')")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = p.parse_args(argv)
    return run(a.corpus, a.max_files, a.files, a.batch_size, a.keep, a.subdir)


if __name__ == "__main__":
    sys.exit(main())
