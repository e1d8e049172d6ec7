"""The query benchmark's index: its corpus (pinned sdists, or a local folder), its cheap embedders, its build.

Apart from eval/bench_query.py because building is slow, rare and runs in its own process, while the
timing loop runs every time. The build goes through the public API (`CodeIndex.open`, `refresh`), so
the benchmark measures an index made exactly as `coderag index` makes one, bar the chunk embedder.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from coderag.eval.corpora import sha256_of

PYPI_SIMPLE_URL = os.environ.get("CODERAG_PYPI_SIMPLE_URL", "https://pypi.org/simple")
DIM = 384
MARKER = "bench_query.json"  # in the index folder: what the index was built with


@dataclass(frozen=True)
class Sdist:
    name: str
    version: str
    archive: str
    sha256: str
    subdirs: tuple[str, ...] = ()  # folders of the archive's top directory to index; () = all of it

    @property
    def key(self) -> str:
        return f"{self.archive}:{self.sha256}:{','.join(self.subdirs)}"


SOURCES = (
    Sdist("django", "5.1.4", "Django-5.1.4.tar.gz",
          "de450c09e91879fa5a307f696e57c851955c910a438a35e6b4c895e86bedc82a"),
    Sdist("sqlalchemy", "2.0.36", "sqlalchemy-2.0.36.tar.gz",
          "7f2767680b6d2398aea7082e45a774b2b0767b5c8d8ffb9c8b683088ea9b29c5", subdirs=("lib",)),
)


def bench_dir() -> Path:
    from coderag.base.paths import cache_dir

    return cache_dir("bench", "query")


# -- corpus ---------------------------------------------------------------------------------------------

def _download(sd: Sdist, dest: Path) -> None:
    """Find the archive on the PyPI simple index (JSON form) and download it."""
    req = urllib.request.Request(f"{PYPI_SIMPLE_URL.rstrip('/')}/{sd.name}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json",
                                          "User-Agent": "coderag-bench"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        files = json.load(resp)["files"]
    url = next((f["url"] for f in files if f["filename"] == sd.archive), None)
    if url is None:
        raise SystemExit(f"{sd.archive} is not listed on {PYPI_SIMPLE_URL}/{sd.name}/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "coderag-bench"}),
                                timeout=600) as resp, tmp.open("wb") as out:
        shutil.copyfileobj(resp, out)
    tmp.replace(dest)


def fetch_corpus(log: Callable[[str], None]) -> Path:
    """Download, verify and extract every sdist into <cache>/corpus/<name>-<version>; return the corpus root."""
    base = bench_dir()
    corpus = base / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    wanted = {f"{sd.name}-{sd.version}" for sd in SOURCES}
    for old in corpus.iterdir():
        if old.is_dir() and not old.name.startswith(".") and old.name not in wanted:
            log(f"removing {old} (not in the corpus any more)")
            shutil.rmtree(old)
    for sd in SOURCES:
        target = corpus / f"{sd.name}-{sd.version}"
        stamp = base / "sources" / f"{sd.name}-{sd.version}"  # what the extracted folder holds
        try:
            if stamp.read_text() == sd.key and target.is_dir():
                continue
        except OSError:
            pass
        shutil.rmtree(target, ignore_errors=True)
        archive = base / "archives" / sd.archive
        if not archive.is_file() or sha256_of(archive) != sd.sha256:
            log(f"downloading {sd.archive}")
            _download(sd, archive)
        if sha256_of(archive) != sd.sha256:
            raise SystemExit(f"sha256 mismatch for {archive}: expected {sd.sha256}. Delete it and run again.")
        log(f"extracting {sd.archive}")
        _extract(archive, corpus, target, sd.subdirs)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(sd.key)
    return corpus


def _extract(archive: Path, corpus: Path, target: Path, subdirs: tuple[str, ...]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=corpus))
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                       and not m.name.startswith("/") and ".." not in Path(m.name).parts]
            tar.extractall(tmp, members=members, filter="data")
        (top,) = [p for p in tmp.iterdir()]
        if subdirs:
            keep = tmp / "keep"
            keep.mkdir()
            for sub in subdirs:
                (top / sub).rename(keep / sub)
            top = keep
        top.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _link_tree(src: Path, dst: Path) -> None:
    """A copy of `src` in `dst` made of hard links where the file system allows them (same files, no bytes)."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".coderag", ".git"))


def local_corpus(folder: Path) -> tuple[Path, list[str]]:
    """`--corpus PATH`: a linked copy of a local folder under the bench cache (so the benchmark's index,
    and its fake vectors, never land in that folder), and the source keys its marker records."""
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise SystemExit(f"--corpus {folder}: not a folder. Pass a source tree to index, e.g. --corpus src/")
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:8]
    target = bench_dir() / f"local-{folder.name}-{digest}" / folder.name
    from coderag.base.paths import INDEX_DIR_NAME

    target.mkdir(parents=True, exist_ok=True)
    for old in target.iterdir():  # follow the folder as it is now
        if old.name != INDEX_DIR_NAME:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    _link_tree(folder, target)
    return target, [f"local:{folder}"]


def corpus_root(corpus: Path, head_dense: int, keys: list[str]) -> Path:
    """The folder to index: the corpus itself, or for --head-dense a hard-linked copy of it (same relative
    paths, its own index), kept in step with the corpus's sources."""
    if not head_dense:
        return corpus
    target = corpus.with_name(f"{corpus.name}-head{head_dense}")
    stamp = corpus.parent / "sources" / target.name  # beside the sources' stamps, not in the indexed tree
    want = "\n".join(keys)
    try:
        if stamp.read_text() == want:
            return target
    except OSError:
        pass
    from coderag.base.paths import INDEX_DIR_NAME

    target.mkdir(exist_ok=True)
    stamp.parent.mkdir(exist_ok=True)
    for old in target.iterdir():
        if old.name != INDEX_DIR_NAME:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for top in corpus.iterdir():
        if top.is_dir() and not top.name.startswith("."):
            _link_tree(top, target / top.name)
    stamp.write_text(want)
    return target


# -- chunk embedders cheaper than the real model ----------------------------------------------------------

def hash_embedding_class():
    """A LlamaIndex BaseEmbedding whose vector is a pure function of the text (seeded Gaussian, unit length)."""
    import numpy as np
    from llama_index.core.base.embeddings.base import BaseEmbedding

    def vec(text: str) -> list[float]:
        seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        return (v / np.linalg.norm(v)).tolist()

    class HashEmbedding(BaseEmbedding):
        @classmethod
        def class_name(cls) -> str:
            return "HashEmbedding"

        def _get_query_embedding(self, query: str) -> list[float]:
            return vec(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return vec(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return vec(text)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [vec(t) for t in texts]

    return HashEmbedding


def head_embedding(settings, max_length: int):
    """The real model through ONNX Runtime on every core, reading only the first `max_length` tokens."""
    from coderag.nodes.onnx_embedding import OnnxEmbedding, export_onnx

    model_dir = settings.model_dir()
    onnx_file = export_onnx(model_dir)
    if onnx_file is None:
        raise SystemExit(f"--head-dense needs an ONNX export of {model_dir} (mean pooling), which failed")
    return OnnxEmbedding(model_dir=str(model_dir), onnx_file=str(onnx_file), max_length=max_length,
                         threads=os.cpu_count() or 1, embed_batch_size=settings.embedding.batch_size)


# -- build (child process) -------------------------------------------------------------------------------

def marker_of(fake_dense: bool, head_dense: int, keys: list[str]) -> dict:
    """What an index was built with (`.coderag/bench_query.json`): rebuilt when it differs."""
    marker: dict = {"fake_dense": fake_dense, "sources": keys}
    if head_dense:
        marker["head_dense"] = head_dense
    return marker


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb(pid: Optional[int] = None) -> float:
    """The resident memory of `pid` (default: this process) now, from Linux /proc; 0 elsewhere."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def build(root: Path, fake_dense: bool, head_dense: int, keys: list[str]) -> None:
    """Index `root` with the default settings through `CodeIndex.refresh`; print one JSON line."""
    from coderag.base.config import Settings
    from coderag.base.paths import INDEX_DIR_NAME
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.migrations import upgrade_index

    settings = Settings()

    class BenchIndex(CodeIndex):
        """A CodeIndex whose chunks are embedded by the benchmark's embedder (when it has one): the one
        public seam, `document_embed_model`, is what `refresh` embeds chunks with. Held where the index
        holds its own model, so that `optimize()` lets it go as in `coderag index`."""

        @property
        def document_embed_model(self):
            if self._doc_embed_model is None and fake_dense:
                self._doc_embed_model = hash_embedding_class()(embed_batch_size=settings.embedding.batch_size)
            elif self._doc_embed_model is None and head_dense:
                self._doc_embed_model = head_embedding(settings, head_dense)
            return super().document_embed_model

    t0 = time.perf_counter()
    last = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if phase in ("files", "embed", "upgrade", "optimize") and (now - last[0] > 15 or phase == "optimize"
                                                                    or done == total):
            last[0] = now
            print(f"  [{now - t0:7.0f} s] {phase} {done}/{total}  (RSS {current_rss_mb():.0f} MB, peak {peak_rss_mb():.0f})",
                  file=sys.stderr, flush=True)

    with BenchIndex.open(root, settings=settings, create=True) as index:
        s = index.refresh(progress=progress)
        if s.chunks:
            index.optimize(progress)  # the HNSW graph over what was just loaded, as `coderag index` builds it
        # an index of an older coderag is brought up to date in place, as `coderag index` does
        for what, n in upgrade_index(index.root, settings, index.state, progress, store=index.vector_store).items():
            print(f"  upgraded: {what}: {n}", file=sys.stderr)
    (root / INDEX_DIR_NAME / MARKER).write_text(json.dumps(marker_of(fake_dense, head_dense, keys)) + "\n")
    print(json.dumps({"files": s.files_seen, "indexed": s.indexed, "chunks": s.chunks, "nodes": s.nodes,
                      "embedded": s.embedded, "seconds": round(time.perf_counter() - t0, 1),
                      "peak_rss_mb": round(peak_rss_mb(), 0)}), flush=True)


def ensure_index(root: Path, fake_dense: bool, head_dense: int, keys: list[str], build_cmd: list[str],
                 log: Callable[[str], None]) -> Optional[dict]:
    """Build the index in a child process (`build_cmd`) unless a complete one with the same options is
    there; returns the build's summary, or None when the index was there."""
    from coderag.base.paths import INDEX_DIR_NAME

    idx = root / INDEX_DIR_NAME
    want = marker_of(fake_dense, head_dense, keys)
    try:
        have = json.loads((idx / MARKER).read_text())
    except (OSError, ValueError):
        have = None
    if have is not None and {k: v for k, v in have.items() if k != "store_format"} == want:
        return None  # (older markers also held a store format: the index's own migrations handle that now)
    if idx.exists():
        log(f"removing {idx} (built with other options, or unfinished)")
        shutil.rmtree(idx)
    kind = "fake" if fake_dense else f"head-{head_dense}-token" if head_dense else "real"
    log(f"building the index of {root} ({kind} dense vectors); this takes a while")
    proc = subprocess.run(build_cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])
