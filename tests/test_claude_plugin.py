"""The Claude Code plugin of this repository (.claude-plugin/marketplace.json -> coderag/claude_plugin/),
added and installed by a real Claude Code with its own plugin commands, in a fresh config folder and a
home in tmp_path, with neither the virtual environment nor coderag on its PATH: the plugin's server is
connected, search_code answers through Claude Code's own MCP client, and the SessionStart hook says the
index is there (issue 26 §2).

Needs the `claude` CLI (npm @anthropic-ai/claude-code; no account or network use): CODERAG_TEST_CLAUDE
names it, else one on the PATH is used; skipped without one. Claude Code's `-p` control requests
(mcp_status, mcp_call) are an internal protocol of its SDK (see the project's notes on MCP clients)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files

REPO = Path(__file__).resolve().parents[1]  # holds .claude-plugin/marketplace.json
CLAUDE = os.environ.get("CODERAG_TEST_CLAUDE") or shutil.which("claude")
SERVER = "plugin:coderag:coderag"
SEARCH_TOOL = "mcp__plugin_coderag_coderag__search_code"
pytestmark = pytest.mark.skipif(not CLAUDE, reason="set CODERAG_TEST_CLAUDE to a Claude Code CLI (npm "
                                                   "@anthropic-ai/claude-code) to run the plugin checks")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A clone as the README's set-up leaves it: the code, an index, and .venv/bin/coderag (this
    environment's console script stands for the clone's own)."""
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "project", TINY_FILES)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "coderag").symlink_to(Path(sys.executable).with_name("coderag"))
    (root / ".coderagignore").write_text(".venv/\n")
    index_repository(root)
    return root


@pytest.fixture
def claude_env(tmp_path: Path) -> dict[str, str]:
    """Claude Code's environment: a fresh config folder and home, and a PATH of system folders only."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"), "PATH": "/usr/bin:/bin",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "60000",
            "CODERAG_CACHE_DIR": os.environ["CODERAG_CACHE_DIR"], "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}  # the coderag this suite tests


def claude(env: dict, cwd: Path, *args: str) -> str:
    proc = subprocess.run([CLAUDE, *args], env=env, cwd=str(cwd), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, f"claude {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


class ControlSession:
    """`claude -p` driven by SDK control requests: no model call, Claude Code's own MCP client."""

    def __init__(self, env: dict, cwd: Path) -> None:
        self.proc = subprocess.Popen([CLAUDE, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                                      "--verbose"], env=env, cwd=str(cwd), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.n = 0

    def request(self, subtype: str, **fields) -> dict:
        self.n += 1
        rid = f"r{self.n}"
        self.proc.stdin.write(json.dumps({"type": "control_request", "request_id": rid,
                                          "request": {"subtype": subtype, **fields}}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg.get("type") == "control_response" and msg["response"].get("request_id") == rid:
                return msg["response"]
        raise AssertionError(f"claude exited before answering {subtype}")

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_plugin_installed_by_claude_code_connects_and_answers_without_the_venv_on_path(
        project: Path, claude_env: dict) -> None:
    assert "Successfully added marketplace: coderag" in claude(claude_env, project, "plugin", "marketplace", "add",
                                                               str(REPO))
    assert "Successfully installed plugin: coderag@coderag" in claude(claude_env, project, "plugin", "install",
                                                                      "coderag@coderag")
    listed = claude(claude_env, project, "mcp", "list")
    assert f"{SERVER}: " in listed and "✔ Connected" in listed.split(f"{SERVER}: ")[1].splitlines()[0], listed

    session = ControlSession(claude_env, project)
    try:
        assert session.request("initialize")["subtype"] == "success"
        deadline = time.monotonic() + 120
        while True:
            servers = {s["name"]: s for s in session.request("mcp_status")["response"]["mcpServers"]}
            if servers.get(SERVER, {}).get("status") not in (None, "pending") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert servers[SERVER]["status"] == "connected", servers
        assert {"search_code", "index_status", "expand_result"} <= {t["name"] for t in servers[SERVER]["tools"]}
        answer = session.request("mcp_call", tool=SEARCH_TOOL, arguments={"query": "sum the line items and add "
                                                                                    "sales tax"})
    finally:
        session.close()
    assert answer["subtype"] == "success", answer
    text = answer["response"]["content"][0]["text"]
    assert "<source_file>src/billing/invoice.py</source_file>" in text, text[:2000]


def test_session_start_hook_says_the_index_is_there_and_how_subagents_search(project: Path, claude_env: dict) -> None:
    """The hook's output becomes the session's context: the index, its counts, and a shell command for
    subagents that cannot see MCP tools; it runs with Claude Code's PATH, not the venv's."""
    hooks = json.loads((REPO / "coderag" / "claude_plugin" / "hooks" / "hooks.json").read_text())
    command = hooks["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    script = command.replace("${CLAUDE_PLUGIN_ROOT}", str(REPO / "coderag" / "claude_plugin"))
    proc = subprocess.run([script], env={**claude_env, "CLAUDE_PROJECT_DIR": str(project)}, cwd=str(project),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "This project has a coderag code index" in proc.stdout and "coderag search" in proc.stdout
    assert "files:       6 indexed" in proc.stdout, proc.stdout  # the five of TINY_FILES and .coderagignore
