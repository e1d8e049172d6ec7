"""Check the Claude Code integration in Claude Code's own eyes: no model call, no API key, nothing sent anywhere.

    python eval/check_claude_code.py [REPO] [--claude PATH] [--timeout S]

Steps (a throwaway repository is made when REPO is not given; `coderag init-claude` is run in it):

1. ``claude mcp get coderag`` in the repository, with a throwaway CLAUDE_CONFIG_DIR whose settings.json
   approves the project's .mcp.json servers: its health check starts ``coderag mcp`` and lists its tools.
   The command always exits 0, so the verdict is the line ``Status: ✔ Connected``.
2. ``claude -p --input-format stream-json --output-format stream-json --verbose``: Claude Code's own MCP
   client, driven through its control protocol (``mcp_status`` polled until the server is connected,
   then ``mcp_call``), calls ``mcp__coderag__search_code`` and ``mcp__coderag__index_status``, and a bad
   call whose error text must reach Claude Code. These control requests are internal to Claude Code
   (seen in 2.1.197 and 2.1.332), not a documented interface.

Prints what Claude Code answered; exits 0 when every step passed, 1 otherwise, and 0 with a line
starting ``SKIP:`` when Claude Code is not installed (install: ``npm install -g @anthropic-ai/claude-code``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

INSTALL = "npm install -g @anthropic-ai/claude-code"
TOOL = "mcp__coderag__search_code"
FILES = {
    "src/billing/invoice.py": (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass LineItem:\n    price_cents: int\n    quantity: int\n\n\n"
        "def invoice_total(items, tax_rate=0.2):\n"
        '    """Sum the line items and add sales tax, rounding to whole cents."""\n'
        "    subtotal = sum(i.price_cents * i.quantity for i in items)\n"
        "    return round(subtotal * (1 + tax_rate))\n"),
    "web/api.ts": (
        "// Fetches a user record over HTTP.\n"
        "export async function fetchUserRecord(id: string): Promise<unknown> {\n"
        "  const res = await fetch(`/users/${id}`);\n  return res.json();\n}\n"),
    "README.md": "# Demo\n\nA throwaway repository for the Claude Code check.\n",
}
QUERY = {"query": "sum the line items and add sales tax", "max_tokens": 1500}
EXPECTED = ("src/billing/invoice.py", 10)  # file, line of `def invoice_total`


def coderag_exe() -> str:
    here = Path(sys.executable).parent / "coderag"
    return str(here) if here.exists() else (shutil.which("coderag") or "coderag")


def make_repo() -> Path:
    root = Path(tempfile.mkdtemp(prefix="coderag-cc-check-"))
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, "utf-8")
    subprocess.run(["git", "init", "-q", str(root)], check=False)
    return root


def claude_env(config_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CLAUDE_CONFIG_DIR=str(config_dir), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    env.pop("ANTHROPIC_API_KEY", None)  # no model call is made; make sure none could be
    env["PATH"] = f"{Path(coderag_exe()).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def mcp_get(claude: str, root: Path, env: dict, timeout: float) -> bool:
    step("claude mcp get coderag")
    t0 = time.monotonic()
    proc = subprocess.run([claude, "mcp", "get", "coderag"], cwd=root, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    print((proc.stdout + proc.stderr).rstrip())
    ok = "✔ Connected" in proc.stdout
    print(f"-> {'OK' if ok else 'FAIL'} ({time.monotonic() - t0:.1f} s, exit {proc.returncode})")
    return ok


class ControlSession:
    """`claude -p` in stream-json mode, spoken to with control requests (no user message, so no model call)."""

    def __init__(self, claude: str, root: Path, env: dict) -> None:
        cmd = [claude, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
        self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.n = 0

    def request(self, subtype: str, **fields) -> dict:
        self.n += 1
        rid = f"r{self.n}"
        msg = {"type": "control_request", "request_id": rid, "request": {"subtype": subtype, **fields}}
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            try:
                out = json.loads(line)
            except ValueError:
                continue
            if out.get("type") == "control_response" and out["response"].get("request_id") == rid:
                return out["response"]
        raise RuntimeError(f"claude exited before answering {subtype}: {self.proc.stderr.read()[-2000:]}")

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def text_of(response: dict) -> str:
    """The tool's text as Claude Code hands it to the model (content blocks, or a JSON string)."""
    content = response.get("content")
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else json.dumps(response)


def control_protocol(claude: str, root: Path, env: dict, timeout: float, query: dict, expected) -> bool:
    step("claude -p stream-json control protocol: mcp_status, mcp_call")
    t0 = time.monotonic()
    session = ControlSession(claude, root, env)
    ok = True
    try:
        session.request("initialize")
        while True:
            servers = session.request("mcp_status")["response"]["mcpServers"]
            mine = next((s for s in servers if s["name"] == "coderag"), None)
            if mine is None or mine["status"] != "pending" or time.monotonic() - t0 > timeout:
                break
            time.sleep(0.1)
        if mine is None:
            print(f"no coderag server in mcp_status: {servers}")
            return False
        tools = sorted(t["name"] for t in mine.get("tools", []))
        print(f"mcp_status: {mine['status']} after {time.monotonic() - t0:.1f} s, serverInfo={mine.get('serverInfo')}, "
              f"tools={tools}" + (f", error={mine['error']}" if mine.get("error") else ""))
        want = {"search_code", "index_status", "expand_result"}
        if mine["status"] != "connected" or not want <= {t.rsplit("__", 1)[-1] for t in tools}:
            return False

        # The first start indexes in the background: poll until the answer holds the expected block.
        deadline = time.monotonic() + timeout
        while True:
            t1 = time.monotonic()
            r = session.request("mcp_call", tool=TOOL, arguments=query)
            call_ms = (time.monotonic() - t1) * 1000
            if r["subtype"] != "success":
                print(f"mcp_call {TOOL} -> {r['subtype']}: {r.get('error')}")
                return False
            text = text_of(r["response"])
            doc = ET.fromstring(text)
            hits = [(x.findtext("source_file"), *map(int, x.findtext("lines").split("-"))) for x in doc.findall("result")]
            if hits or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print(f"mcp_call {TOOL} {json.dumps(query)} -> success in {call_ms:.0f} ms:")
        print(text)
        if expected:
            found = [h for h in hits if h[0] == expected[0] and h[1] <= expected[1] <= h[2]]
            print(f"-> expected block {expected[0]}:{expected[1]} {'found' if found else 'NOT found'}")
        else:
            found = hits
            print(f"-> {len(hits)} block(s) returned")
        ok &= bool(found)

        r = session.request("mcp_call", tool="mcp__coderag__index_status", arguments={})
        status = json.loads(text_of(r.get("response", {}))) if r["subtype"] == "success" else {}
        print(f"mcp_call mcp__coderag__index_status -> {r['subtype']}: files={status.get('counts', {}).get('files')} "
              f"dense_ready={status.get('dense_ready')} indexing={status.get('indexing')}")
        ok &= r["subtype"] == "success"

        r = session.request("mcp_call", tool=TOOL, arguments={"query": "x", "file_pattern": "[abc"})
        print(f"mcp_call {TOOL} with file_pattern='[abc' -> {r['subtype']}: {r.get('error') or text_of(r['response'])}")
        ok &= r["subtype"] == "error" and "file_pattern" in str(r.get("error"))
    finally:
        session.close()
    print(f"-> {'OK' if ok else 'FAIL'} ({time.monotonic() - t0:.1f} s)")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", nargs="?", type=Path, help="Repository to check (default: a throwaway one).")
    ap.add_argument("--claude", default=None, help="The claude executable (default: claude on PATH).")
    ap.add_argument("--timeout", type=float, default=120.0, help="Seconds per step.")
    ap.add_argument("--query", default=None, help="search_code query for REPO (default: one about the throwaway "
                                                  "repo's code, whose block must come back).")
    args = ap.parse_args(argv)

    claude = args.claude or shutil.which("claude")
    if not claude:
        print(f"SKIP: Claude Code (claude) is not installed. Install it with: {INSTALL}")
        return 0
    version = subprocess.run([claude, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(f"claude: {claude} ({version.stdout.strip()})")

    root = args.repo.resolve() if args.repo else make_repo()
    print(f"repository: {root}")
    step("coderag init-claude")
    init = subprocess.run([coderag_exe(), "init-claude", "--root", str(root)], capture_output=True, text=True)
    print((init.stdout + init.stderr).rstrip())
    if init.returncode != 0:
        return 1
    print(".mcp.json: " + json.dumps(json.loads((root / ".mcp.json").read_text())["mcpServers"]["coderag"]))

    with tempfile.TemporaryDirectory(prefix="claude-config-") as cfg:
        (Path(cfg) / "settings.json").write_text(json.dumps({"enableAllProjectMcpServers": True}))
        env = claude_env(Path(cfg))
        results = {"claude mcp get": mcp_get(claude, root, env, args.timeout),
                   "control protocol": control_protocol(
                       claude, root, env, args.timeout, {**QUERY, "query": args.query} if args.query else QUERY,
                       None if args.repo else EXPECTED)}
    step("verdict")
    for name, ok in results.items():
        print(f"{name}: {'OK' if ok else 'FAIL'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
