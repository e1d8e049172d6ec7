"""Resume benchmark: a build killed with SIGKILL at three points and resumed, against a clean build.

Not a test: it prints numbers. The corpus (``--corpus PATH``; default: Django 5.1.4's ``tests/`` folder of
eval/bench_query.py's corpus, ``<cache>/bench/query/corpus/django-5.1.4/tests``, ~2,450 files) is copied
as hard links into fresh folders under ``<cache>/bench/resume`` (``coderag.base.paths.cache_dir``), never into
the repository. Each build is a child process doing what the owner's first pass does:
``CodeIndex.open(root)`` then ``index.refresh(progress=..., dense=False)`` (BM25 only, no model); with
``--dense``, what ``coderag index`` does: ``refresh(dense=True)``, every chunk embedded by the real model.
Dense vectors are compared within 1e-5 (a resumed run embeds a chunk in another batch, whose padding can
move the last float bits); everything else exactly.

What it prints:

* clean build: wall time, files and chunks, and the child's peak RSS (its own VmHWM);
* three killed builds: the same build on another fresh copy, killed (SIGKILL) once its progress says
  ~25%, ~50% and ~75% of the files are done (after a short delay each, so the kill lands at different
  places inside the next batch), what the kill left (files committed, files in flight), then a new child
  doing the same refresh; its time, and whether the resumed index holds the same content as the clean
  one: the manifest (sha256, status, language, node and leaf counts), every docstore collection (nodes
  with their text, lines and links; ref-doc info), the dedup table, the line-token counts, the leaf chunk
  ids with their lines and text per file, and every store point with its payload and vectors
  (point count included); "no" names the first difference;
* serving: a child that opens the clean index and runs 50 BM25 searches (no model: no warm_up), its VmHWM.

Measured here (default corpus, 2,456 files: 1,856 indexed, 33,201 leaf chunks; 2 busy cores): clean build
78 s, peak RSS 483 MiB; killed at 654, 1,249 (+0.7 s) and 1,861 (+1.4 s) of 2,407 files (0, 34 and 62 files
in flight), resumed in 54, 42 and 19 s (peak RSS 529, 560, 596 MiB), same content all three; serving
445 MiB, p50 20 ms. A resume peaks higher than the clean build because opening a shard that was never
closed replays its WAL (opening the 75% one: 4.9 s and 433 MiB, the clean one 2.5 s and 383 MiB).

Usage::

    python eval/bench_resume.py                         # the default corpus
    python eval/bench_resume.py --files 1000            # its first 1,000 files only
    python eval/bench_resume.py --corpus ~/src/repo --keep
    python eval/bench_resume.py --dense --files 600     # builds with vectors, killed while embedding
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

KILL_POINTS = (0.25, 0.50, 0.75)
# Seconds between the progress line and the kill: the child goes on with the next batch meanwhile, so
# the kills land just after a commit, while a batch is split, and later in a batch (its store writes).
KILL_DELAYS = (0.0, 0.7, 1.4)
META_KEYS = ("fingerprint", "store_format", "file_classes", "schema_version")
SERVE_QUERIES = [
    "test client login", "assertQuerysetEqual", "migration autodetector rename field", "get_absolute_url",
    "CSRF token missing", "override_settings", "select_related prefetch_related", "ManyToManyField through",
    "template filter escape", "QuerySet.bulk_create ignore conflicts", "RequestFactory", "signals post_save",
    "admin changelist search", "ForeignKey on_delete cascade", "cache middleware", "FileField upload_to",
    "timezone aware datetime", "JSONField lookup contains", "paginator page out of range", "SimpleTestCase",
    "url reverse namespace", "forms ValidationError clean", "TransactionTestCase reset sequences",
    "staticfiles storage manifest", "serializers json natural keys", "raw SQL cursor execute",
    "aggregate Count Sum annotate", "send_mail EmailMessage attachments", "ContentType generic relation",
    "inspectdb", "check framework system checks", "LocaleMiddleware language code", "sitemaps lastmod",
    "password reset token", "GIS geometry distance", "Subquery OuterRef", "F expression update",
    "unique_together constraint", "db_table_comment", "async view sync_to_async", "StreamingHttpResponse",
    "test_runner parallel", "makemigrations squash", "model inheritance abstract proxy", "Window function Rank",
    "session engine signed cookies", "logging AdminEmailHandler", "HttpResponseRedirect status 302",
    "select_for_update nowait", "Case When Value",
]


def vm_hwm_kib() -> int:
    """This process's peak resident set (VmHWM), in KiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# -- child processes ----------------------------------------------------------------------------------
def build_only(root: Path, dense: bool = False) -> int:
    """The owner's first pass over `root` (with `dense`, a build with vectors): print `files DONE TOTAL` per
    batch, then one `result {json}` line."""
    _offline()
    from coderag.pipelines.code_index import CodeIndex

    t0 = time.perf_counter()

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "files":
            print(f"files {done} {total}", flush=True)

    with CodeIndex.open(root) as index:
        s = index.refresh(progress=progress, dense=dense)
    print("result " + json.dumps({"seconds": round(time.perf_counter() - t0, 2), "seen": s.files_seen,
                                  "indexed": s.indexed, "chunks": s.chunks, "nodes": s.nodes, "embedded": s.embedded,
                                  "peak_rss_kib": vm_hwm_kib()}), flush=True)
    return 0


def serve_only(root: Path, n: int) -> int:
    """Open `root`'s index as a search process does and answer `n` BM25 searches; print one `result` line."""
    _offline()
    from coderag.pipelines.code_index import CodeIndex

    t0 = time.perf_counter()
    lat, hits = [], 0
    with CodeIndex.open(root, create=False) as index:
        open_s = time.perf_counter() - t0
        for q in (SERVE_QUERIES * (n // len(SERVE_QUERIES) + 1))[:n]:
            t = time.perf_counter()
            hits += len(index.search(q, retriever="bm25"))
            lat.append((time.perf_counter() - t) * 1000)
    print("result " + json.dumps({"open_s": round(open_s, 2), "searches": n, "hits": hits,
                                  "first_ms": round(lat[0], 1), "p50_ms": round(statistics.median(lat), 1),
                                  "max_ms": round(max(lat), 1), "peak_rss_kib": vm_hwm_kib()}), flush=True)
    return 0


def _child(mode: str, root: Path, log: Path, kill_at: float | None = None, delay: float = 0.0,
           extra: tuple[str, ...] = ()) -> dict:
    """Run this script as a child in `mode`; with `kill_at` send it SIGKILL once `files DONE TOTAL` reaches
    that fraction (after `delay` s). Returns wall seconds, the `result` dict (if it finished), the last
    progress seen and whether it was killed."""
    cmd = [sys.executable, os.path.abspath(__file__), mode, str(root), *extra]
    t0 = time.perf_counter()
    with open(log, "a", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        out: dict = {"killed": False, "progress": (0, 0), "result": None}
        for line in proc.stdout:
            if line.startswith("files "):
                done, total = (int(x) for x in line.split()[1:3])
                out["progress"] = (done, total)
                if kill_at is not None and total and done >= kill_at * total:
                    time.sleep(delay)
                    proc.send_signal(signal.SIGKILL)
                    out["killed"] = True
                    break
            elif line.startswith("result "):
                out["result"] = json.loads(line[len("result "):])
        proc.stdout.read()
        rc = proc.wait()
    out["seconds"] = time.perf_counter() - t0
    if not out["killed"] and rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {rc}); see {log}")
    return out


# -- corpus copies ---------------------------------------------------------------------------------
def corpus_files(src: Path, limit: int | None) -> list[str]:
    """Relative paths of the corpus's files in path order (its first `limit`), no index or .git inside."""
    from coderag.base.paths import INDEX_DIR_NAME

    rels = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in (INDEX_DIR_NAME, ".git"))
        base = Path(dirpath).relative_to(src)
        rels.extend((base / f).as_posix() for f in sorted(filenames))
    return rels[:limit] if limit else rels


def link_copy(src: Path, rels: list[str], dst: Path) -> None:
    """A fresh copy of those files in `dst`, as hard links where the file system allows (no bytes copied;
    indexing only reads them)."""
    shutil.rmtree(dst, ignore_errors=True)
    for rel in rels:
        a, b = src / rel, dst / rel
        b.parent.mkdir(parents=True, exist_ok=True)
        if a.is_symlink():
            os.symlink(os.readlink(a), b)
            continue
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)


# -- what an index holds -----------------------------------------------------------------------------
def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


DENSE_TOLERANCE = 1e-5


def _vectors(vector) -> object:
    """A point's vectors as plain data (Edge gives a dict of lists and SparseVector objects), the dense one
    left out: `snapshot` keeps it apart, compared within DENSE_TOLERANCE."""
    if isinstance(vector, dict):
        return {k: _vectors(v) for k, v in sorted(vector.items()) if not isinstance(v, (list, tuple))}
    if hasattr(vector, "indices") and hasattr(vector, "values"):
        return {"indices": list(vector.indices), "values": [round(float(x), 6) for x in vector.values]}
    if isinstance(vector, (list, tuple)):
        return [round(float(x), 6) for x in vector]
    return vector


def snapshot(root: Path) -> dict[str, dict[str, str]]:
    """Everything the index of `root` holds, as section -> key -> canonical JSON (compared with `==`)."""
    from llama_index.core.storage.docstore.utils import json_to_doc
    from qdrant_edge import ScrollRequest

    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.stores import NODE_COLLECTION

    snap: dict[str, dict[str, str]] = {}
    with CodeIndex.open(root, create=False) as index:
        st = index.state
        snap["manifest"] = {p: _canon([r.sha256, r.status, r.language, r.n_nodes, r.n_leaves, r.size])
                            for p, r in st.files().items()}
        snap["meta"] = {k: _canon(st.get_meta(k)) for k in META_KEYS}
        snap["counts"] = {k: _canon(v) for k, v in st.counts().items()}
        with st.lock:
            collections = [r[0] for r in st.conn.execute("SELECT DISTINCT collection FROM kv ORDER BY 1")]
            snap["dedup table"] = {r[0]: _canon(r[1:]) for r in st.conn.execute("SELECT * FROM chunks")}
            snap["line tokens"] = {r[0]: _canon([r[1], r[2], r[3].hex()]) for r in
                                   st.conn.execute("SELECT path, sha256, encoding, counts FROM line_tokens")}
            snap["inflight"] = {p: "" for p in st.inflight()}
        leaves: dict[str, list] = {}
        for coll in collections:
            snap["docstore " + coll] = {k: _canon(v) for k, v in st.kv_items(coll)}
            if coll != NODE_COLLECTION:
                continue
            for key, value in st.kv_items(coll):
                node = json_to_doc(value)
                if node.metadata.get("is_leaf", True):
                    leaves.setdefault(node.ref_doc_id or "", []).append(
                        [node.node_id, node.metadata.get("start_line"), node.metadata.get("end_line"), node.text])
        snap["leaf chunks per file"] = {p: _canon(sorted(v)) for p, v in leaves.items()}
        store = index.vector_store
        points, dense, offset = {}, {}, None
        while True:
            recs, offset = store.client.scroll(ScrollRequest(limit=1024, offset=offset, with_payload=True,
                                                             with_vector=True))
            for r in recs:
                points[str(r.id)] = _canon({"payload": r.payload, "vectors": _vectors(r.vector)})
                for name, vec in sorted(r.vector.items()) if isinstance(r.vector, dict) else ():
                    if isinstance(vec, (list, tuple)):
                        dense[f"{r.id} {name}"] = json.dumps([float(x) for x in vec])
            if offset is None:
                break
        snap["store points"] = points
        snap["dense vectors"] = dense
        snap["store count"] = {"count": _canon(store.count())}
    return snap


def differences(clean: dict[str, dict[str, str]], other: dict[str, dict[str, str]]) -> list[str]:
    """One line per section that differs: how many keys, and the first difference."""
    out = []
    for section in sorted(clean.keys() | other.keys()):
        a, b = clean.get(section, {}), other.get(section, {})
        if a == b:
            continue
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        same = _close if section == "dense vectors" else str.__eq__
        changed = sorted(k for k in a.keys() & b.keys() if not same(a[k], b[k]))
        if not (only_a or only_b or changed):
            continue
        first = (f"{only_a[0]!r} only in the clean build" if only_a else
                 f"{only_b[0]!r} only in the resumed one" if only_b else
                 f"{changed[0]!r}: clean {_short(a[changed[0]])} / resumed {_short(b[changed[0]])}")
        out.append(f"{section}: {len(only_a)} only in clean, {len(only_b)} only in resumed, {len(changed)} differ; "
                   f"first: {first}")
    return out


def _close(a: str, b: str) -> bool:
    x, y = json.loads(a), json.loads(b)
    return len(x) == len(y) and all(abs(u - v) <= DENSE_TOLERANCE for u, v in zip(x, y))


def _short(s: str, n: int = 240) -> str:
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def killed_state(root: Path) -> str:
    """What a kill left in the SQLite state: files committed and files in flight (read-only, stdlib)."""
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    db = index_dir(root) / DB_NAME
    if not db.exists():
        return "no index.db yet"
    st = IndexState(db, readonly=True)
    try:
        return f"{len(st.files())} files committed, {len(st.inflight())} in flight"
    finally:
        st.close()


# -- the benchmark -------------------------------------------------------------------------------------
def default_corpus() -> Path:
    from coderag.base.paths import cache_dir

    return cache_dir("bench", "query", "corpus", "django-5.1.4", "tests")


def run(corpus: Path, limit: int | None, keep: bool, searches: int, dense: bool = False) -> int:
    from coderag.base.paths import cache_dir

    corpus = corpus.expanduser().resolve()
    if not corpus.is_dir():
        raise SystemExit(f"{corpus}: not a folder. Pass --corpus PATH (or build eval/bench_query.py's corpus "
                         "first, or set CODERAG_CACHE_DIR to the cache that holds it).")
    work = cache_dir("bench", "resume")
    work.mkdir(parents=True, exist_ok=True)
    log = work / "children.log"
    log.write_text("")
    rels = corpus_files(corpus, limit)
    print(f"coderag resume benchmark: {corpus} ({len(rels)} files), copies under {work}")
    print(f"  machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"build = CodeIndex.open + refresh(dense={dense}) in a child process")
    build = ("dense",) if dense else ()
    try:
        clean_root = work / "clean" / corpus.name
        link_copy(corpus, rels, clean_root)
        b = _child("--build-only", clean_root, log, extra=build)
        r = b["result"]
        print(f"clean build: {b['seconds']:.1f} s wall ({r['seconds']:.1f} s in refresh), {r['indexed']} of "
              f"{r['seen']} files indexed, {r['chunks']} leaf chunks, {r['nodes']} nodes, "
              f"{r['embedded']} embedded, peak RSS {r['peak_rss_kib'] / 1024:.0f} MiB")
        clean = snapshot(clean_root)
        print(f"  holds: {len(clean['manifest'])} manifest rows, {len(clean['store points'])} store points, "
              f"{sum(len(v) for k, v in clean.items() if k.startswith('docstore '))} docstore entries")
        same_all = True
        for frac, delay in zip(KILL_POINTS, KILL_DELAYS):
            root = work / f"kill{int(frac * 100)}" / corpus.name
            link_copy(corpus, rels, root)
            k = _child("--build-only", root, log, kill_at=frac, delay=delay, extra=build)
            done, total = k["progress"]
            if not k["killed"]:
                print(f"kill at {frac:.0%}: the build finished first ({done}/{total} files); nothing to resume")
                continue
            left = killed_state(root)
            res = _child("--build-only", root, log, extra=build)
            rr = res["result"]
            diffs = differences(clean, snapshot(root))
            same_all &= not diffs
            print(f"kill at {frac:.0%}: SIGKILL {delay:.1f} s after {done}/{total} files done, "
                  f"{k['seconds']:.1f} s into the build; left {left}")
            print(f"  resume: {res['seconds']:.1f} s wall ({rr['seconds']:.1f} s in refresh), {rr['indexed']} files "
                  f"indexed, {rr['chunks']} leaf chunks, {rr['embedded']} embedded, "
                  f"peak RSS {rr['peak_rss_kib'] / 1024:.0f} MiB")
            print(f"  same content: {'yes' if not diffs else 'no'}")
            for line in diffs:
                print(f"    {line}")
            if not keep:
                shutil.rmtree(root.parent, ignore_errors=True)
        s = _child("--serve-only", clean_root, log, extra=(str(searches),))["result"]
        print(f"serving (open + {s['searches']} BM25 searches, no model): peak RSS {s['peak_rss_kib'] / 1024:.0f} MiB; "
              f"open {s['open_s']:.2f} s, first search {s['first_ms']:.0f} ms, p50 {s['p50_ms']:.1f} ms, "
              f"max {s['max_ms']:.0f} ms, {s['hits']} hits")
        print(f"resumed builds {'all hold' if same_all else 'do NOT all hold'} the clean build's content")
        return 0 if same_all else 1
    finally:
        if keep:
            print(f"kept {work} (child stderr in {log})")
        else:
            for name in ("clean", *(f"kill{int(f * 100)}" for f in KILL_POINTS)):
                shutil.rmtree(work / name, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=None,
                   help="folder to index (default: <cache>/bench/query/corpus/django-5.1.4/tests)")
    p.add_argument("--files", type=int, default=None, metavar="N", help="only the corpus's first N files")
    p.add_argument("--searches", type=int, default=50, help="BM25 searches of the serving child (default 50)")
    p.add_argument("--keep", action="store_true", help="keep the copies and their indexes")
    p.add_argument("--dense", action="store_true", help="builds with vectors (coderag index), not BM25 first")
    p.add_argument("--build-only", type=Path, metavar="ROOT", help=argparse.SUPPRESS)
    p.add_argument("--serve-only", type=Path, metavar="ROOT", help=argparse.SUPPRESS)
    a, rest = p.parse_known_args(argv)
    if a.build_only:
        return build_only(a.build_only, dense=rest == ["dense"])
    if a.serve_only:
        return serve_only(a.serve_only, int(rest[0]) if rest else a.searches)
    return run(a.corpus or default_corpus(), a.files, a.keep, a.searches, a.dense)


if __name__ == "__main__":
    sys.exit(main())
