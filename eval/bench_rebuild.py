"""What searches get while an owner builds its index again: a chunking setting edited under a running
`coderag serve`, with searches in a loop through the owner's socket before, during and after the rebuild.

Not a test: it prints numbers. ROOT is an indexed folder; it is copied (with its index) to a temporary
folder first, so the original is left as it was. `--in-place` starts the owner with `store.path` set to the
index's own shard, which makes it build the index again in place, as every owner did before the rebuild
beside the index (coderag/store/beside.py); compare the two on the same folder.

    python eval/bench_rebuild.py ROOT              # the default: the new index built beside the old one
    python eval/bench_rebuild.py ROOT --in-place   # the same rebuild in place

Per phase (before the edit; from the edit until the owner is idle with the new index): searches, failed,
empty ("no chunks yet"), answered from BM25 alone, and latency p50 / p95 / max in ms; and the owner's peak
resident memory before the edit and at the end (Linux).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERIES = ["how is a function call resolved", "read the settings file", "where are errors reported to the user",
           "split the text into tokens", "what happens when the cache is full"]
PAUSE_S = 0.2  # between searches: an agent's pace, not a load test
EDIT_AFTER_S = 5.0
CHUNKING_EDIT = "chunking:\n  max_tokens: 160\n"


def _owner(root: Path):
    from coderag.client import connect

    return connect(root, become_owner=False)


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (Linux: VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _summary(rows: list[tuple]) -> str:
    lat = sorted(r[1] for r in rows)
    failed = sum(r[2] < 0 for r in rows)
    empty = sum(r[2] == 0 for r in rows)
    bm25 = sum("BM25" in r[3] for r in rows)
    return (f"{len(rows)} searches, {failed} failed, {empty} empty, {bm25} from BM25 alone; ms p50 "
            f"{statistics.median(lat):.1f} p95 {lat[int(0.95 * (len(lat) - 1))]:.1f} max {lat[-1]:.1f}")


def run(root: Path, in_place: bool) -> None:
    yaml = root / "qdrant.yaml"
    base = f"store:\n  path: {root / '.coderag' / 'shard'}\n" if in_place else ""
    yaml.write_text(base)
    env = {**os.environ, "CODERAG_NO_DAEMON": "1"}
    coderag = Path(sys.executable).with_name("coderag")  # the console script of this environment
    serve = subprocess.Popen([str(coderag), "serve", "--root", str(root)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = None
        for _ in range(600):
            try:
                client = client or _owner(root)
                if client.call("status")["indexing"]["phase"] == "idle":
                    break
            except Exception:
                client = None
            time.sleep(1)
        peak_before = _peak_rss_mb(serve.pid)
        rows, t0, edited, i, st = [], time.time(), None, 0, {}
        while True:
            t = time.time() - t0
            if edited is None and t > EDIT_AFTER_S:
                yaml.write_text(base + CHUNKING_EDIT)
                edited = t
            s = time.perf_counter()
            try:
                r = client.call("search", query=QUERIES[i % len(QUERIES)])
                rows.append((t, (time.perf_counter() - s) * 1000, len(r["results"]), r.get("freshness") or ""))
            except Exception:
                rows.append((t, (time.perf_counter() - s) * 1000, -1, ""))
                client = _owner(root)
            i += 1
            if edited is not None and i % 10 == 0:
                st = client.call("status")
                if st["indexing"]["phase"] == "idle" and st.get("last_build"):
                    break
            time.sleep(PAUSE_S)
        lb = st["last_build"]
        print(f"{'in place' if in_place else 'beside'}: rebuilt in {lb['seconds']:.1f} s ({lb['chunks']} chunks, "
              f"{lb['embedded']} embedded, {lb['cached']} from the cache); the owner's peak memory "
              f"{_peak_rss_mb(serve.pid):.0f} MB, before the edit {peak_before:.0f} MB")
        print("  before the edit:", _summary([r for r in rows if r[0] < edited]))
        print("  from the edit on:", _summary([r for r in rows if r[0] >= edited]))
    finally:
        serve.terminate()
        serve.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="an indexed folder (copied first; left as it is)")
    ap.add_argument("--in-place", action="store_true", help="the owner builds the index again in place")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(args.root, copy, symlinks=True,
                        ignore=shutil.ignore_patterns("owner.json", "owner.sock", "writer.lock", "coderag.log"))
        run(copy.resolve(), args.in_place)


if __name__ == "__main__":
    main()
