"""`coderag init-claude`: .mcp.json, the CLAUDE.md section and /search, merged into what the user has."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.claude_setup import BEGIN, CLAUDE_SECTION, END, SLASH_COMMAND, init_claude, server_entry
from coderag.cli import main

SEARCH_MD = ".claude/commands/search.md"


def run(root: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["init-claude", "--root", str(root), *args])
    assert result.exit_code == 0, result.output
    return result.output


def mcp_json(root: Path) -> dict:
    return json.loads((root / ".mcp.json").read_text())


def test_init_claude_writes_all_three_files(tmp_path: Path) -> None:
    out = run(tmp_path)
    assert out.splitlines()[:3] == ["wrote      .mcp.json", "wrote      CLAUDE.md", f"wrote      {SEARCH_MD}"]

    entry = mcp_json(tmp_path)["mcpServers"]["coderag"]
    assert entry == server_entry()
    assert entry["type"] == "stdio" and entry["args"] == ["mcp"] and Path(entry["command"]).name == "coderag"

    md = (tmp_path / "CLAUDE.md").read_text()
    assert md == CLAUDE_SECTION and md.startswith(BEGIN) and md.rstrip().endswith(END)
    assert "mcp__coderag__search_code" in md

    cmd = (tmp_path / SEARCH_MD).read_text()
    assert cmd == SLASH_COMMAND
    front = cmd.split("---")[1]
    assert "description:" in front and "allowed-tools: mcp__coderag__search_code" in front
    assert "$ARGUMENTS" in cmd


def test_init_claude_is_idempotent(tmp_path: Path) -> None:
    run(tmp_path)
    before = {p: (tmp_path / p).read_bytes() for p in (".mcp.json", "CLAUDE.md", SEARCH_MD)}
    out = run(tmp_path)
    assert out.splitlines()[:3] == ["up to date .mcp.json", "up to date CLAUDE.md", f"up to date {SEARCH_MD}"]
    assert {p: (tmp_path / p).read_bytes() for p in before} == before


def test_init_claude_merges_into_an_existing_mcp_json(tmp_path: Path) -> None:
    other = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"TOKEN": "x"}}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"github": other}, "extra": 1}))
    run(tmp_path)
    data = mcp_json(tmp_path)
    assert data["mcpServers"]["github"] == other and data["extra"] == 1
    assert data["mcpServers"]["coderag"] == server_entry()


def test_init_claude_keeps_a_different_coderag_entry_unless_forced(tmp_path: Path) -> None:
    mine = {"command": "/opt/coderag/bin/coderag", "args": ["mcp", "--root", "/src"]}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"coderag": mine, "other": {"command": "x"}}}))
    out = run(tmp_path)
    assert 'skipped    .mcp.json (it already has a different "coderag" server; --force replaces it)' in out
    assert mcp_json(tmp_path)["mcpServers"]["coderag"] == mine

    out = run(tmp_path, "--force")
    assert "wrote      .mcp.json" in out
    assert mcp_json(tmp_path)["mcpServers"] == {"coderag": server_entry(), "other": {"command": "x"}}


@pytest.mark.parametrize("text, why", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"mcpServers": []}', '"mcpServers" is not a JSON object'),  # once an AttributeError traceback
])
def test_init_claude_leaves_an_invalid_mcp_json_alone(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / ".mcp.json").write_text(text)
    out = run(tmp_path, "--force")
    assert f"skipped    .mcp.json ({why}" in out
    assert (tmp_path / ".mcp.json").read_text() == text
    assert (tmp_path / "CLAUDE.md").exists() and (tmp_path / SEARCH_MD).exists()  # the rest is still set up


def test_init_claude_merges_its_section_into_claude_md(tmp_path: Path) -> None:
    user = "# My project\n\nRun `make test` before committing.\n"
    (tmp_path / "CLAUDE.md").write_text(user)
    run(tmp_path)
    md = (tmp_path / "CLAUDE.md").read_text()
    assert md == user + "\n" + CLAUDE_SECTION

    # The user edits around the section; an outdated section between the markers is replaced, the rest kept.
    edited = md.replace("## Code search (coderag)", "## Old heading") + "\n## Notes\n\nKeep me.\n"
    (tmp_path / "CLAUDE.md").write_text(edited)
    run(tmp_path)
    md = (tmp_path / "CLAUDE.md").read_text()
    assert md == user + "\n" + CLAUDE_SECTION + "\n## Notes\n\nKeep me.\n"
    assert md.count(BEGIN) == md.count(END) == 1
    assert "up to date CLAUDE.md" in run(tmp_path)


def test_init_claude_never_drops_user_text_after_a_lost_end_marker(tmp_path: Path) -> None:
    """With the end marker deleted, a re-run appended a new section, and the run after that replaced
    everything from the old begin marker to the new end marker: the user's notes in between were lost."""
    run(tmp_path)
    md = (tmp_path / "CLAUDE.md").read_text().replace(END + "\n", "") + "\n## My notes\n\nDo not lose me.\n"
    (tmp_path / "CLAUDE.md").write_text(md)
    run(tmp_path)
    run(tmp_path)
    md = (tmp_path / "CLAUDE.md").read_text()
    assert "Do not lose me." in md and md.count(END) == 1 and md.endswith(CLAUDE_SECTION)
    assert "up to date CLAUDE.md" in run(tmp_path)


def test_init_claude_keeps_a_changed_search_command_unless_forced(tmp_path: Path) -> None:
    run(tmp_path)
    custom = "---\ndescription: my own search\n---\nSearch for $ARGUMENTS my way.\n"
    (tmp_path / SEARCH_MD).write_text(custom)
    out = run(tmp_path)
    assert f"skipped    {SEARCH_MD} (yours differs; --force replaces it)" in out
    assert (tmp_path / SEARCH_MD).read_text() == custom

    assert f"wrote      {SEARCH_MD}" in run(tmp_path, "--force")
    assert (tmp_path / SEARCH_MD).read_text() == SLASH_COMMAND


def _script(folder: Path) -> Path:
    exe = folder / "coderag"
    folder.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_init_claude_warns_when_coderag_is_only_in_the_virtual_environment(monkeypatch, tmp_path: Path) -> None:
    """Issue 26: .mcp.json said "coderag", found only with the virtual environment active; Claude Code started
    from another shell said "Failed to connect", with no hint. The entry stays portable (a teammate clones
    it), and init-claude says what will fail and the two fixes."""
    import sys

    venv = tmp_path / "venv"
    _script(venv / "bin")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    monkeypatch.setenv("PATH", os.pathsep.join([str(venv / "bin"), str(Path(sys.prefix) / "bin"), "/usr/bin", "/bin"]))
    (tmp_path / "repo").mkdir()
    out = run(tmp_path / "repo")
    assert mcp_json(tmp_path / "repo")["mcpServers"]["coderag"]["command"] == "coderag"
    warning = next(line for line in out.splitlines() if line.startswith("warning    "))
    assert "is not on the PATH of a shell without this virtual environment" in warning
    assert "pipx install" in warning and "uv tool install" in warning
    assert f"claude mcp add --scope local coderag -- {Path(sys.executable).with_name('coderag')} mcp" in warning


def test_init_claude_is_quiet_when_every_shell_finds_coderag(monkeypatch, tmp_path: Path) -> None:
    """An install on the PATH outside the environment (pipx, uv tool: ~/.local/bin)."""
    tools = _script(tmp_path / "home" / ".local" / "bin").parent
    monkeypatch.setenv("PATH", os.pathsep.join([str(tools), "/usr/bin", "/bin"]))
    (tmp_path / "repo").mkdir()
    out = run(tmp_path / "repo")
    assert "warning" not in out and mcp_json(tmp_path / "repo")["mcpServers"]["coderag"]["command"] == "coderag"
