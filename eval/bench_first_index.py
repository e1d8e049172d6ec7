"""First-index timeline: how soon an owner started on an unindexed repository answers, and how soon each class
of files (source, tests, docs, examples) is dense.

Not a test: it prints numbers. A copy of `--repo` (without its .coderag folder) is made under
coderag.base.paths.cache_dir("bench", "first-index"); `coderag serve` is started on it in a child process, as an
agent's first `search_code` would start it; this process then asks the owner, over its socket, every `--poll`
seconds:

* one BM25 search (the first answer with at least one result is "BM25 answers"),
* `status` (its `indexing.dense_by_role`: when the source files are all dense, then everything),

and prints the timeline, the peak RSS of the owner (VmHWM), and the index's counts at the end.

Usage::

    python eval/bench_first_index.py --repo /path/to/a/150k-line/repository
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def _vm_hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _copy(repo: Path) -> Path:
    from coderag.base.paths import cache_dir

    dest = cache_dir("bench", "first-index", repo.name)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(repo, dest, symlinks=True, ignore=shutil.ignore_patterns(".coderag", ".git"))
    return dest


def _lines(root: Path) -> int:
    n = 0
    for p in root.rglob("*"):
        if p.is_file() and ".coderag" not in p.parts:
            try:
                n += p.read_bytes().count(b"\n")
            except OSError:
                pass
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, required=True, help="the repository to index (it is copied first)")
    ap.add_argument("--poll", type=float, default=5.0, help="seconds between status polls")
    ap.add_argument("--limit", type=float, default=1800.0, help="give up after this many seconds")
    ap.add_argument("--query", default="parse the configuration file", help="the BM25 probe query")
    args = ap.parse_args()

    from coderag.client import RemoteError, owner_client

    root = _copy(args.repo.resolve())
    print(f"repository {args.repo} copied to {root}: {_lines(root):,} lines")
    exe = Path(sys.executable).parent / "coderag"
    t0 = time.perf_counter()
    owner = subprocess.Popen([str(exe), "serve", "--root", str(root)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    marks: dict[str, float] = {}
    client = None
    try:
        while time.perf_counter() - t0 < args.limit:
            time.sleep(args.poll)
            now = time.perf_counter() - t0
            if client is None:
                client = owner_client(root)
                if client is None:
                    continue
                marks.setdefault("owner answers", now)
            if "BM25 answers" not in marks:
                try:
                    res = client.call("search", query=args.query, retriever="bm25", max_tokens=1000)
                except RemoteError as exc:  # still opening the index
                    print(f"  [{now:6.0f} s] search: {exc}")
                    res = {}
                if res.get("results"):
                    marks["BM25 answers"] = time.perf_counter() - t0
            st = client.call("status")
            ix = st["indexing"]
            roles = ix.get("dense_by_role") or {}
            src = roles.get("source")
            if ix["phase"] == "dense" and src and src["done"] >= src["total"]:
                marks.setdefault("source files dense", now)
            print(f"  [{now:6.0f} s] {ix['phase']} {ix['done']}/{ix['total']} "
                  + " ".join(f"{r}:{v['done']}/{v['total']}" for r, v in roles.items())
                  + f"  owner VmHWM {_vm_hwm_mb(owner.pid):.0f} MB", flush=True)
            if st.get("dense_ready") and ix["phase"] in ("warming", "idle"):
                marks.setdefault("source files dense", now)
                marks["whole tree dense"] = now
                break
        if client is not None:
            st = client.call("status")
            print("counts at the end:", st["counts"], "skipped:", st["skipped"])
        print("timeline (seconds after `coderag serve` started):")
        for name, t in marks.items():
            print(f"  {name:22s} {t:7.1f}")
        print(f"owner peak RSS (VmHWM): {_vm_hwm_mb(owner.pid):.0f} MB")
    finally:
        if client is not None:
            client.close()
        os.killpg(owner.pid, signal.SIGTERM)
        owner.wait(timeout=60)


if __name__ == "__main__":
    main()
