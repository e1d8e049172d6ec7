"""Query benchmark: warm latency per retriever variant and per stage over >= 50,000 leaf chunks of real code,
the cold latency of one ``coderag search`` process, and RSS.

Not a test: it prints numbers. Targets (warm, full pipeline, default options): p50 <= 30 ms at 100,000
chunks (the project's latency budget), p95 <= 60 ms.

Corpus: pinned PyPI source distributions (sha256-checked), downloaded once into a cache outside the
repository (``$CODERAG_CACHE_DIR/bench/query``, else ``~/.cache/coderag/bench/query``); the chosen
folders of each are extracted side by side into one folder and indexed there with the default
settings (``<cache>/bench/query/corpus/.coderag``): all of Django 5.1.4 (code, tests, docs) and
SQLAlchemy 2.0.36's library, about 100,000 leaf chunks. (The whole three sdists of Django,
SQLAlchemy and NumPy make 367,000 leaf chunks and a 7 GB docstore, too much to rebuild often.)

``--fake-dense``: embedding every chunk with the real model costs about 50 ms of CPU per chunk
(40 CPU-minutes per 50,000). With this flag the build runs the very same IngestionPipeline (reader,
filter, AST splitter, breadcrumbs, dedup, CachedEmbedder, Edge + SQLite writes, HNSW build) with a
deterministic cheap embedder: a unit vector drawn from a seed that is the hash of the text (384
floats, like all-MiniLM-L6-v2). Queries are embedded by the real model, so the "embed" stage is
real; dense results are meaningless. Dense timings are pessimistic: random vectors are HNSW's
hardest case (no neighbourhood structure: a dense store query took 2.8 ms on these 102k vectors,
0.76 ms on the 24k real ones of eval/bench_mcp.py in a probe), and the dense leg's hits share no
chunk with the BM25 leg's, so every search handles 60 distinct candidates; the benchmark prints the
store's dense query time alone, to show it. Such an index is marked (``.coderag/bench_query.json``)
and rebuilt when the flag changes; its chunk-hash cache holds fake vectors, so never copy it
elsewhere. Without the flag every chunk is embedded for real.

``--head-dense N``: every chunk embedded by the real model (ONNX Runtime, all cores), but only its first N
tokens (path header, signature, the start of the body): ~15 ms a chunk on both cores at N=64 instead of ~70 at
the model's 256 (a probe on 384 chunks); the whole build of the 102k corpus took 40 minutes here (2,419 s,
101,900 chunks embedded). The vectors are real embeddings of real code, with the
neighbourhood structure HNSW meets on a real index, and the dense leg's hits overlap the BM25 leg's as they
would; they are not the vectors a full index would hold (the rest of each chunk is unseen), so dense
*quality* is not measured here (the eval does that). Built in its own folder, ``corpus-head<N>``, a
hard-linked copy of the corpus (same relative paths), so it and the ``--fake-dense`` index live side by side.

Queries (``--queries N``, default 300, fixed seed): half identifiers sampled from the index's own
symbols, spelled as written, in the other convention (snake_case <-> camelCase), or as spaced
words; half natural language (first sentences of sampled docstrings, and a fixed list).

What it prints:

* the index: files, leaf chunks, nodes, build time (when this run built it);
* per variant (hybrid, bm25, dense, hybrid without auto-merge): warm p50/p95/p99 of the whole
  ``CodeIndex.search`` call and of each stage in ``res.timings`` (query embedding, each leg,
  fusion, parent merge, adjacent merge, packing). "Warm" is a resident process after
  ``CodeIndex.warm_up()`` and 30 searches that are not measured; each variant starts with the
  query caches emptied (decoded nodes, file lines, block encodings, query vectors), so every measured
  query is new to the process, as the first call of a new question is to the owner;
* cold: wall time of ``coderag search`` processes (import, open, model load, first query), and
  the latency the process itself reported;
* RSS: this process after the warm runs (index open, model loaded), its query-embedding helper process
  (``retrieval.embed_process``), and the peak of the ``coderag search`` processes.

``--corpus PATH``: a linked copy of a local folder instead of the sdists (nothing downloaded); with a small
folder the whole benchmark runs in a minute or two, to check it end to end (its numbers say little).

The build (eval/bench_corpus.py) runs in a child process (``--build-only``), so the measuring process's RSS
is that of an open index, not of an indexer; it goes through ``CodeIndex.open`` and ``refresh`` as any
other index update does, with the benchmark's chunk embedder for ``--fake-dense`` / ``--head-dense``.

Usage::

    python eval/bench_query.py --fake-dense             # build once (minutes), then measure
    python eval/bench_query.py --fake-dense --queries 500 --cold 5
    python eval/bench_query.py --head-dense 64            # real-model vectors of each chunk's head (~40 min build)
    python eval/bench_query.py                           # real vectors for every chunk (hours on a laptop CPU)
    python eval/bench_query.py --index-root ~/.cache/coderag/bench/django-5.1.4   # an existing index, as is
    python eval/bench_query.py --fake-dense --corpus ~/src/small-repo --queries 20 --cold 1   # a quick check
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from coderag.nodes.keys import IS_LEAF_KEY, KIND_KEY, LANGUAGE_KEY, SYMBOL_KEY
from coderag.nodes.lexical import identifier_parts
from coderag.eval.bench_corpus import (SOURCES, build, corpus_root, current_rss_mb, ensure_index, fetch_corpus,
                                       local_corpus, peak_rss_mb)

MIN_LEAF_CHUNKS = 50_000
TARGET_P50_MS = 30.0  # the project's budget for a warm search at 100k chunks
TARGET_P95_MS = 60.0
WARMUP_QUERIES = 30
DOCSTORE_NODES = "nodes/data"  # the KV collection KVDocumentStore(namespace="nodes") keeps nodes in (pipelines/stores.py)
VARIANTS = {
    "hybrid": dict(retriever="hybrid"),
    "bm25": dict(retriever="bm25"),
    "dense": dict(retriever="dense"),
    "hybrid, no auto-merge": dict(retriever="hybrid", auto_merge=False),
}
# res.timings: embed_ms (query embedding; in the helper process, beside the BM25 leg), embed_wait_ms (what
# the search then waited for it), dense_ms / bm25_ms (each leg: store query + payload -> nodes), fusion_ms
# (weighted RRF), merge_parents_ms (auto-merge), merge_adjacent_ms (read the files, merge), pack_ms (token
# packing), total_ms (run_search up to the final token count of the payload).
STAGES = ("embed_ms", "embed_wait_ms", "dense_ms", "bm25_ms", "fusion_ms", "merge_parents_ms",
          "merge_adjacent_ms", "pack_ms", "total_ms")
FIXED_NL_QUERIES = [
    "where are database migrations applied", "how is a CSRF token checked on a form post",
    "parse an HTTP date header", "hash a password with a salt", "cache a template after compiling it",
    "escape HTML in a string", "connection pool recycles stale connections", "lazy loading of a relationship",
    "compile a SELECT statement to SQL", "reflect the columns of an existing table", "round a decimal field",
    "send an email with an attachment", "time zone conversion of a datetime", "sign a cookie value",
    "paginate a list of objects", "validate an email address", "the session is flushed before a query",
    "retry a transaction after a deadlock", "serialize a model instance to JSON",
    "load fixtures into the test database",
]
COLD_QUERIES = ["where are database migrations applied", "QuerySet.select_related", "connection pool pre ping",
                "get_object_or_404", "serialize a model instance to JSON"]


# -- queries -----------------------------------------------------------------------------------------------

def other_spelling(name: str) -> str:
    parts = [p.lower() for p in identifier_parts(name)]
    if "_" in name.strip("_"):
        return parts[0] + "".join(p.title() for p in parts[1:])
    return "_".join(parts)


def make_queries(index, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(kind, query) pairs: identifiers from the index's symbols and sentences from its docstrings."""
    rng = random.Random(seed)
    names, sentences = set(), set()
    # Streamed from the docstore's table: loading every node as an object would cost GBs of RSS.
    for _, value in index.state.kv_items(DOCSTORE_NODES):
        data = value["__data__"]
        m = data["metadata"]
        if m.get(KIND_KEY) in ("function", "method", "class") and m.get(SYMBOL_KEY):
            name = m[SYMBOL_KEY].rsplit(".", 1)[-1]
            if len(identifier_parts(name)) >= 2 and not name.startswith("test"):
                names.add(name)
        if m.get(LANGUAGE_KEY) == "python" and m.get(IS_LEAF_KEY, True):
            doc = re.search(r'"""([A-Z][a-z][^".\n]{20,90})[.\n]', data["text"])
            if doc:
                sentences.add(doc.group(1).strip())
    names, sentences = sorted(names), sorted(sentences)
    queries: list[tuple[str, str]] = []
    for i, name in enumerate(rng.sample(names, min(n // 2, len(names)))):
        form = i % 3
        if form == 0:
            queries.append(("identifier", name))
        elif form == 1:
            queries.append(("other spelling", other_spelling(name)))
        else:
            queries.append(("spaced words", " ".join(p.lower() for p in identifier_parts(name))))
    nl = FIXED_NL_QUERIES + rng.sample(sentences, min(max(0, n - len(queries) - len(FIXED_NL_QUERIES)),
                                                      len(sentences)))
    queries += [("natural language", q) for q in nl]
    return queries[:n]


# -- measurement -----------------------------------------------------------------------------------------

def dense_store_ms(index, queries: list[tuple[str, str]]) -> list[float]:
    """The store's dense query alone (HNSW, top dense_top_k, no payload) for each query's vector."""
    from qdrant_edge import Query, QueryRequest

    from coderag.store.edge_vector_store import DENSE_VECTOR_NAME

    shard, k, out = index.vector_store.client, index.settings.retrieval.dense_top_k, []
    for _, q in queries:
        emb = index.embed_model.get_query_embedding(q)
        t0 = time.perf_counter()
        shard.query(QueryRequest(limit=k, query=Query.Nearest(list(emb), using=DENSE_VECTOR_NAME), with_payload=False))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def clear_query_caches(index) -> None:
    """Forget decoded nodes, file lines, block encodings and query vectors; keep the page cache and models."""
    index.vector_store.clear_node_cache()
    index.engine.clear_caches()  # the files read and the tokens counted
    getattr(index.embed_model, "clear_cache", lambda: None)()


def warm_runs(index, queries: list[tuple[str, str]], opts: dict) -> dict[str, Any]:
    walls: list[float] = []
    stages: dict[str, list[float]] = {}
    returned, tokens = [], []
    for _, q in queries:
        t0 = time.perf_counter()
        res = index.search(q, **opts)
        walls.append((time.perf_counter() - t0) * 1000)
        for k, v in res.timings.items():
            stages.setdefault(k, []).append(v)
        returned.append(len(res))
        tokens.append(res.tokens)
    return {"wall": walls, "stages": stages, "returned": statistics.mean(returned), "tokens": statistics.mean(tokens)}


def cold_runs(root: Path, queries: list[str]) -> list[tuple[float, float]]:
    """(wall ms of the process, latency_ms it reported) for one `coderag search` process per query."""
    exe = Path(sys.executable).with_name("coderag")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "coderag.cli"]
    out = []
    for q in queries:
        t0 = time.perf_counter()
        # --no-daemon: this process opens the index itself, the cold path being measured (and no owner is
        # left holding the index that the warm runs open next)
        proc = subprocess.run(cmd + ["search", q, "--root", str(root), "--format", "xml", "--no-daemon"],
                              capture_output=True, text=True)
        wall = (time.perf_counter() - t0) * 1000
        if proc.returncode != 0:
            raise SystemExit(f"coderag search failed: {proc.stderr[-2000:]}")
        reported = float(re.search(r"<latency_ms>([\d.]+)</latency_ms>", proc.stdout).group(1))
        out.append((wall, reported))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fake-dense", action="store_true",
                    help="store deterministic cheap vectors instead of embedding every chunk (queries stay real)")
    ap.add_argument("--head-dense", type=int, default=0, metavar="N",
                    help="embed every chunk with the real model, its first N tokens only (N=64: ~40 min build)")
    ap.add_argument("--queries", type=int, default=300, help="warm queries per variant")
    ap.add_argument("--cold", type=int, default=3, help="coderag search processes for the cold latency")
    ap.add_argument("--index-root", metavar="PATH",
                    help="measure an existing index instead (a repository indexed with `coderag index`, e.g. the "
                         "Django index eval/bench_mcp.py builds with real vectors); nothing is downloaded or built")
    ap.add_argument("--corpus", metavar="PATH",
                    help="index a linked copy of this local folder (under the bench cache) instead of the pinned "
                         "sdists: a small folder checks the benchmark end to end in a minute")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="retrieval.KEY=VALUE",
                    help="search with this setting changed (e.g. retrieval.ranker=learned); repeatable")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.fake_dense and args.head_dense:
        ap.error("--fake-dense and --head-dense exclude each other")
    if args.head_dense < 0 or args.head_dense > 512:
        ap.error("--head-dense N: N between 1 and 512 tokens")
    if args.index_root and args.corpus:
        ap.error("--index-root and --corpus exclude each other")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def log(msg: str) -> None:
        print(f"# {msg}", file=sys.stderr, flush=True)

    if args.index_root:
        from coderag.base.paths import INDEX_DIR_NAME

        root, built = Path(args.index_root).expanduser().resolve(), None
        if not (root / INDEX_DIR_NAME).is_dir():
            raise SystemExit(f"No index at {root}: run `coderag index {root}` first.")
    else:
        corpus, keys = (local_corpus(Path(args.corpus)) if args.corpus else
                        (fetch_corpus(log), [s.key for s in SOURCES]))
        root = corpus_root(corpus, args.head_dense, keys)
        if args.build_only:
            build(root, args.fake_dense, args.head_dense, keys)
            return 0
        cmd = [sys.executable, __file__, "--build-only", *(["--fake-dense"] if args.fake_dense else []),
               *(["--head-dense", str(args.head_dense)] if args.head_dense else []),
               *(["--corpus", args.corpus] if args.corpus else [])]
        built = ensure_index(root, args.fake_dense, args.head_dense, keys, cmd, log)

    print(f"coderag query benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"Python {sys.version.split()[0]}")
    if args.index_root:
        print(f"index: an existing one at {root} (--index-root), its vectors as indexed")
    else:
        print(f"corpus: {args.corpus or ', '.join(f'{s.name} {s.version}' for s in SOURCES)} -> {root}")
        kind = ("fake (hash of the text, --fake-dense); query embedding real" if args.fake_dense else
                f"real model, each chunk's first {args.head_dense} tokens (--head-dense); query embedding real"
                if args.head_dense else "real")
        print(f"dense vectors: {kind}")
    if built:
        print(f"build: {built['files']} files seen, {built['indexed']} indexed, {built['chunks']} leaf chunks, "
              f"{built['nodes']} nodes, {built['embedded']} embedded, {built['seconds']:.0f} s, "
              f"peak RSS {built['peak_rss_mb']:.0f} MB")

    cold = cold_runs(root, COLD_QUERIES[:args.cold])

    from coderag.base.config import Settings
    from coderag.eval.runner import apply_overrides, parse_overrides
    from coderag.pipelines.code_index import CodeIndex

    try:
        settings = apply_overrides(Settings(), parse_overrides(args.overrides))
    except ValueError as exc:
        ap.error(str(exc))
    t0 = time.perf_counter()
    index = CodeIndex.open(root, settings=settings, create=False)
    try:
        counts = index.state.counts()
        leaves = index.vector_store.count()
        open_ms = (time.perf_counter() - t0) * 1000
        # One draw, split: the warm-up queries are never measured, so no measured query finds its own
        # nodes or files in a cache (a fixed list of natural-language queries stays with the measured set).
        drawn = make_queries(index, args.queries + WARMUP_QUERIES)
        fixed = [x for x in drawn if x[1] in FIXED_NL_QUERIES]
        rest = [x for x in drawn if x[1] not in FIXED_NL_QUERIES]
        random.Random(7).shuffle(rest)
        warmup, queries = rest[:WARMUP_QUERIES], fixed + rest[WARMUP_QUERIES:]
        kinds = {}
        for k, _ in queries:
            kinds[k] = kinds.get(k, 0) + 1
        r = index.settings.retrieval
        print(f"index: {counts['files']} files, {leaves} leaf chunks in the store ({counts['nodes']} nodes in all); "
              f"opened in {open_ms:.0f} ms")
        if leaves < MIN_LEAF_CHUNKS:
            print(f"WARNING: fewer than {MIN_LEAF_CHUNKS} leaf chunks")
        print(f"settings: ranker {r.ranker}, dense_top_k {r.dense_top_k}, sparse_top_k {r.sparse_top_k}, fusion_top_k "
              f"{r.fusion_top_k}, max_tokens 4000, format xml")
        print(f"queries: {len(queries)} ({', '.join(f'{v} {k}' for k, v in kinds.items())}); "
              f"e.g. {', '.join(repr(q) for _, q in queries[::max(1, len(queries) // 5)][:5])}")
        print()
        header = f"{'warm, ms':<24}" + "".join(f"{s:>18}" for s in ("p50", "p95", "p99"))
        t1 = time.perf_counter()
        index.warm_up()  # as the resident owner does at start: model, tokenizer, the shard's files in the page cache
        for _, q in warmup:
            index.search(q)
        print(f"warm-up: CodeIndex.warm_up() and {len(warmup)} other searches in {time.perf_counter() - t1:.1f} s; "
              f"GIL switch interval {sys.getswitchinterval() * 1000:.0f} ms, as in the owner process")
        print()
        results = {}
        for name, opts in VARIANTS.items():
            clear_query_caches(index)  # each variant meets the measured queries for the first time
            results[name] = warm_runs(index, queries, opts)
        for name, res in results.items():
            print(f"{name}: {res['returned']:.1f} results, {res['tokens']:.0f} tokens on average")
            print(header)
            print(f"{'CodeIndex.search wall':<24}" + "".join(f"{pct(res['wall'], p):>18.1f}" for p in (50, 95, 99)))
            for stage in STAGES:
                if stage in res["stages"]:
                    v = res["stages"][stage]
                    print(f"{stage:<24}" + "".join(f"{pct(v, p):>18.2f}" for p in (50, 95, 99)))
            print()
        rss_warm = current_rss_mb()
        helper_pid = getattr(index.embed_model, "helper_pid", None)
        rss_helper = current_rss_mb(helper_pid) if helper_pid else 0.0
        dense_alone = dense_store_ms(index, queries)
    finally:
        index.close()

    hybrid = results["hybrid"]["wall"]
    p50, p95 = pct(hybrid, 50), pct(hybrid, 95)
    print(f"target (hybrid, full pipeline, warm): p50 {p50:.1f} ms (<= {TARGET_P50_MS:.0f}: "
          f"{'ok' if p50 <= TARGET_P50_MS else 'MISSED'}), p95 {p95:.1f} ms (<= {TARGET_P95_MS:.0f}: "
          f"{'ok' if p95 <= TARGET_P95_MS else 'MISSED'})")
    by_kind: dict[str, list[float]] = {}
    for (kind, _), ms in zip(queries, hybrid):
        by_kind.setdefault(kind, []).append(ms)
    print("hybrid by query kind, p50/p95 ms: " + ", ".join(
        f"{k} {pct(v, 50):.1f}/{pct(v, 95):.1f}" for k, v in by_kind.items()))
    print(f"the store's dense query alone (HNSW, no payload), p50/p95 ms: {pct(dense_alone, 50):.2f}/"
          f"{pct(dense_alone, 95):.2f}"
          f"{' (random vectors: see --fake-dense)' if args.fake_dense and not args.index_root else ''}")
    print()
    for (wall, reported), q in zip(cold, COLD_QUERIES):
        print(f"cold `coderag search {q!r}`: {wall:.0f} ms wall, {reported:.0f} ms reported by the process "
              "(open + model load + query)")
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"RSS: this process after the warm runs {rss_warm:.0f} MB (peak {peak_rss_mb():.0f} MB), its "
          f"query-embedding helper {rss_helper:.0f} MB; peak of a child process "
          f"(coderag search{', build' if built else ''}) {children:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
