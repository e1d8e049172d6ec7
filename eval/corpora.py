"""Fetching the pinned public code bases that the eval runs retrieval against.

Each corpus (the table: :mod:`coderag.eval.corpus_table`) is a published package archive (a PyPI
sdist or an npm tarball) at an exact version, pinned by its sha256. :func:`fetch` downloads it on first use into a cache
outside the repository (``$CODERAG_CACHE_DIR/corpora``, else ``~/.cache/coderag/corpora``),
checks the hash, extracts it, and returns the directory to index. The code of these
projects is never committed here; the labelled queries in ``eval/datasets/`` refer to
files by POSIX path relative to that directory.

Only the standard library is used: the archive URL is looked up on the registry
(PyPI's simple JSON API, the npm registry's tarball URL) and downloaded with urllib;
for npm, ``npm pack`` is tried when the direct download fails.

A second kind, a *local snapshot* corpus (:mod:`coderag.eval.snapshots`), is a folder of repository
checkouts made by the dataset's own script; :func:`fetch` only locates it and says how to make it.

Command line: ``python -m coderag.eval.corpora [fetch|path|list] [NAME|all]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from coderag.base.model_files import file_digest
from coderag.eval.corpus_table import CORPORA, Corpus
from coderag.eval.snapshots import SNAPSHOTS, SnapshotCorpus, snapshot_name, snapshot_root

__all__ = ["Corpus", "CORPORA", "CorpusError", "CorpusMissingError", "SNAPSHOTS", "SnapshotCorpus", "cache_dir",
           "corpus_root", "fetch", "is_fetched", "snapshot_name", "snapshot_root"]

PYPI_SIMPLE_URL = os.environ.get("CODERAG_PYPI_SIMPLE_URL", "https://pypi.org/simple")
NPM_REGISTRY_URL = os.environ.get("CODERAG_NPM_REGISTRY_URL", "https://registry.npmjs.org")
_MARKER = ".coderag-corpus.json"
_TIMEOUT_S = 120


class CorpusError(RuntimeError):
    """A corpus could not be downloaded, verified or extracted."""


class CorpusMissingError(CorpusError):
    """A local snapshot corpus (or one of its snapshots) is not on this machine; the message says how to make it."""


def cache_dir() -> Path:
    """Where corpora are downloaded and extracted (never inside the repository)."""
    from coderag.base.paths import cache_dir as coderag_cache

    return coderag_cache("corpora")


def _get(name: str) -> Corpus:
    try:
        return CORPORA[name]
    except KeyError:
        raise CorpusError(f"unknown corpus {name!r}; known: {', '.join(sorted([*CORPORA, *SNAPSHOTS]))}") from None


def _extract_dir(corpus: Corpus) -> Path:
    return cache_dir() / f"{corpus.name}-{corpus.version}"


def _archive_path(corpus: Corpus) -> Path:
    return cache_dir() / "archives" / corpus.archive


def _top_dir(extracted: Path) -> Path:
    """The archive's single top-level folder (sdists and npm tarballs have one)."""
    entries = [p for p in extracted.iterdir() if p.name != _MARKER]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return extracted


def corpus_root(name: str) -> Path:
    """The directory to index for ``name`` (gold paths are relative to it).

    Pure path arithmetic when the corpus is not fetched yet: call :func:`fetch` to make
    it exist.
    """
    corpus = _get(name)
    extracted = _extract_dir(corpus)
    top = _top_dir(extracted) if extracted.is_dir() else extracted / "?"
    return top / corpus.subdir if corpus.subdir else top


def is_fetched(name: str) -> bool:
    if name in SNAPSHOTS:
        return SNAPSHOTS[name].folder().is_dir()
    corpus = _get(name)
    marker = _extract_dir(corpus) / _MARKER
    try:
        return json.loads(marker.read_text()).get("sha256") == corpus.sha256
    except (OSError, ValueError):
        return False


sha256_of = file_digest  # an archive's digest, read as the model's files are


def _urlopen(url: str, accept: str | None = None):
    req = urllib.request.Request(url, headers={"User-Agent": "coderag-eval"})
    if accept:
        req.add_header("Accept", accept)
    return urllib.request.urlopen(req, timeout=_TIMEOUT_S)


def _pypi_url(corpus: Corpus) -> str:
    project = corpus.package.lower().replace("_", "-").replace(".", "-")
    index = f"{PYPI_SIMPLE_URL.rstrip('/')}/{project}/"
    with _urlopen(index, accept="application/vnd.pypi.simple.v1+json") as resp:
        files = json.load(resp).get("files", [])
    for entry in files:
        if entry.get("filename") == corpus.archive:
            return entry["url"]
    raise CorpusError(f"{corpus.archive} is not listed on {index}")


def _npm_url(corpus: Corpus) -> str:
    base = corpus.package.rsplit("/", 1)[-1]
    return f"{NPM_REGISTRY_URL.rstrip('/')}/{corpus.package}/-/{base}-{corpus.version}.tgz"


def _download_url(url: str, dest: Path, corpus: Corpus) -> None:
    tmp = dest.with_name(dest.name + ".part")
    with _urlopen(url) as resp:
        size = resp.headers.get("Content-Length")
        _say_download(corpus, dest, int(size) if size and size.isdigit() else None)
        with tmp.open("wb") as out:
            shutil.copyfileobj(resp, out)
    tmp.replace(dest)


def _say_download(corpus: Corpus, dest: Path, size: int | None) -> None:
    """One line on stderr before a corpus is downloaded: from where, how much, and where it is kept (a first
    `coderag eval` otherwise fetched tens of megabytes from a registry without a word)."""
    shown = "size unknown" if size is None else f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"
    print(f"downloading corpus {corpus.name!r}: {corpus.registry} {corpus.package}=={corpus.version} ({shown}) "
          f"into {dest.parent}, once; it is kept there for later runs", file=sys.stderr, flush=True)


def _npm_pack(corpus: Corpus, dest: Path) -> None:
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        proc = subprocess.run(
            ["npm", "pack", f"{corpus.package}@{corpus.version}", "--pack-destination", tmp],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
        packed = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(packed) != 1:
            raise CorpusError(f"npm pack failed: {proc.stderr.strip()[-500:]}")
        packed[0].replace(dest)


def download(corpus: Corpus, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    try:
        url = _pypi_url(corpus) if corpus.registry == "pypi" else _npm_url(corpus)
        _download_url(url, dest, corpus)
        return
    except (OSError, urllib.error.URLError, ValueError, CorpusError) as exc:
        errors.append(f"download: {exc}")
    if corpus.registry == "npm" and shutil.which("npm"):
        try:
            _say_download(corpus, dest, None)
            _npm_pack(corpus, dest)
            return
        except (OSError, subprocess.SubprocessError, CorpusError) as exc:
            errors.append(f"npm pack: {exc}")
    raise CorpusError(
        f"could not download corpus {corpus.name!r} ({corpus.registry} {corpus.package}=={corpus.version}): "
        + "; ".join(errors)
        + ". Check that the package registry is reachable (or set CODERAG_PYPI_SIMPLE_URL / "
        f"CODERAG_NPM_REGISTRY_URL), or place {corpus.archive} by hand in {dest.parent}."
    )


def safe_extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts:
                raise CorpusError(f"{archive.name}: unsafe path in archive: {m.name}")
            if m.isfile() or m.isdir():  # no links, devices or fifos
                members.append(m)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tar.extractall(dest, members=members)


def fetch(name: str) -> Path:
    """Download (once), verify and extract corpus ``name``; return the directory to index.

    Idempotent: a corpus already extracted with the pinned hash is returned at once.
    Raises :class:`CorpusError` with what to do when the download fails or the archive's
    sha256 is not the pinned one. For a local snapshot corpus, returns the folder that holds its
    snapshots, or raises :class:`CorpusMissingError` saying how to make it.
    """
    if name in SNAPSHOTS:
        folder = SNAPSHOTS[name].folder()
        if not folder.is_dir():
            raise CorpusMissingError(SNAPSHOTS[name].missing_message(folder))
        return folder
    corpus = _get(name)
    if is_fetched(name):
        return corpus_root(name)

    archive = _archive_path(corpus)
    if not archive.is_file() or sha256_of(archive) != corpus.sha256:
        download(corpus, archive)
    digest = sha256_of(archive)
    if digest != corpus.sha256:
        bad = archive.with_name(archive.name + ".bad")
        archive.replace(bad)
        raise CorpusError(
            f"sha256 mismatch for corpus {corpus.name!r} ({corpus.archive}): expected {corpus.sha256}, "
            f"got {digest}. The file was moved to {bad}. If the registry really republished it, "
            "the pin in eval/corpus_table.py and the gold labels must be re-checked; otherwise "
            "delete the file and run again."
        )

    target = _extract_dir(corpus)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{corpus.name}-", dir=target.parent))
    try:
        safe_extract(archive, tmp)
        (tmp / _MARKER).write_text(
            json.dumps({"name": corpus.name, "version": corpus.version, "sha256": corpus.sha256}) + "\n"
        )
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    root = corpus_root(name)
    if not root.is_dir():
        raise CorpusError(f"corpus {corpus.name!r}: {corpus.subdir or '.'} is not in {corpus.archive}")
    return root


def _main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "list"
    names = argv[1:] or ["all"]
    if names == ["all"]:
        names = [*CORPORA, *SNAPSHOTS]
    if cmd == "list":
        for c in CORPORA.values():
            state = "fetched" if is_fetched(c.name) else "not fetched"
            print(f"{c.name:14} {c.registry:5} {c.package + '==' + c.version:24} {','.join(c.languages):11} {state}")
        for sc in SNAPSHOTS.values():
            state = "present" if is_fetched(sc.name) else "not prepared"
            print(f"{sc.name:14} local {'$' + sc.env:24} {','.join(sc.languages):11} {state} ({sc.folder()})")
        return 0
    if cmd not in ("fetch", "path"):
        print("usage: python -m coderag.eval.corpora [list|fetch|path] [NAME|all]", file=sys.stderr)
        return 2
    status = 0
    for n in names:
        try:
            print(fetch(n) if cmd == "fetch" or n in SNAPSHOTS else corpus_root(n))
        except CorpusError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
