"""Lock races between coderag processes, as issue 13 measured them: N runs of "start `coderag mcp`, then
`coderag search` after 0-4 s", and N runs of two `coderag search` at once with no owner. Prints each run
and the successes/failures of both; exits 1 if any run failed.

    python eval/stress_owner.py [--runs 20] [--repo PATH]

Without --repo it indexes a copy of this repository's coderag/ package in a temporary folder first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CODERAG = str(Path(sys.executable).with_name("coderag"))
QUERY = "where does a client find the owner of the index"
TIMEOUT_S = 240


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CODERAG_CONFIG"}
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _search(root: Path) -> subprocess.Popen:
    return subprocess.Popen([CODERAG, "search", QUERY, "--root", str(root), "--format", "json", "--max-tokens", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=str(root))


def _result(p: subprocess.Popen) -> tuple[bool, str]:
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return False, "timed out"
    if p.returncode != 0:
        return False, (err.decode(errors="replace").strip().splitlines() or ["(no stderr)"])[-1][:300]
    try:
        hits = len(json.loads(out)["results"])
    except (ValueError, KeyError):
        return False, "unreadable output: " + out.decode(errors="replace")[:200]
    waited = " (waited)" if b"waiting for" in err else ""
    return hits > 0, f"{hits} hits{waited}"


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.stdin.close()  # the stdio MCP server ends with its input
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def mcp_then_search(root: Path, runs: int) -> tuple[int, int]:
    ok = 0
    for i in range(runs):
        delay = 4.0 * i / max(1, runs - 1)
        mcp = subprocess.Popen([CODERAG, "mcp", "--root", str(root)], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=str(root))
        try:
            time.sleep(delay)
            good, detail = _result(_search(root))
            try:
                owner = json.loads((root / ".coderag" / "owner.json").read_text())["pid"]
            except (OSError, ValueError, KeyError):
                owner = None
        finally:
            _stop(mcp)
        via = "through the mcp owner" if owner == mcp.pid else "opened the index itself"
        print(f"  mcp+search run {i + 1:2d}: search after {delay:.1f} s: {'ok' if good else 'FAILED'}, {detail}, "
              f"{via}", flush=True)
        ok += good
    return ok, runs - ok


def two_searches(root: Path, runs: int) -> tuple[int, int]:
    ok = 0
    for i in range(runs):
        a, b = _search(root), _search(root)
        ra, rb = _result(a), _result(b)
        good = ra[0] and rb[0]
        print(f"  two searches run {i + 1:2d}: {'ok' if good else 'FAILED'}: {ra[1]}; {rb[1]}", flush=True)
        ok += good
    return ok, runs - ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repo", type=Path, help="An indexed repository to use (default: a temporary copy).")
    args = ap.parse_args()
    tmp = None
    root = args.repo
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="coderag-stress-"))
        root = tmp / "repo"
        shutil.copytree(HERE / "coderag", root / "coderag", ignore=shutil.ignore_patterns("__pycache__"))
        t0 = time.perf_counter()
        subprocess.run([CODERAG, "index", str(root)], check=True, env=_env(), stdout=subprocess.DEVNULL)
        print(f"indexed a copy of coderag/ in {root} ({time.perf_counter() - t0:.0f} s)", flush=True)
    try:
        t0 = time.perf_counter()
        a_ok, a_bad = mcp_then_search(root, args.runs)
        b_ok, b_bad = two_searches(root, args.runs)
        print(f"start coderag mcp, then coderag search after 0-4 s: {a_ok} succeeded, {a_bad} failed")
        print(f"two concurrent coderag search (no owner):          {b_ok} succeeded, {b_bad} failed")
        print(f"({time.perf_counter() - t0:.0f} s)")
        return 0 if a_bad == b_bad == 0 else 1
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
