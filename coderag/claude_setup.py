"""`coderag init-claude`: register the MCP server in .mcp.json, add usage guidance to CLAUDE.md, add /search."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from coderag.nodes.managed_section import BEGIN, END  # the indexer leaves the section between them out

SERVER_KEY = "coderag"

CLAUDE_SECTION = f"""{BEGIN}
## Code search (coderag)

This repository has a local code index served by the `coderag` MCP server (tool `mcp__coderag__search_code`).

- Use `search_code` first when you need to find where something is implemented, defined, configured or
  documented and it is not already in the conversation; when planning a refactor, to find the code that
  depends on what you change; when debugging, to find where an error message is produced.
- Write `query` as a complete sentence about what the code does ("where are failed logins retried"),
  rewriting vague requests into explicit ones. Put exact identifiers, error codes and config keys in
  `keywords`; use `file_pattern` (e.g. `src/**/*.ts`, `!tests/**`) to narrow the search.
- Cite what you use as [[path:line]] or [[path:start-end]], with the paths and lines of the results.
- Results carry exact line ranges: edit with them, but re-read a block marked `<stale>`. Use
  `expand_result(id)` to see the enclosing function or class of a result instead of reading the file.
- If a search finds nothing relevant, say so; do not invent code. Broaden the query, drop filters, or
  look at the directory structure instead.
- Without the MCP tool (a subagent may not have it), search from the shell instead:
  `coderag search "<what the code does>" --format text` (same index, same answers).
{END}
"""

SLASH_COMMAND = """---
description: Search this repository's code index (coderag) and answer with cited code
argument-hint: <what to find>
allowed-tools: mcp__coderag__search_code, mcp__coderag__expand_result
---
Call the `mcp__coderag__search_code` tool with `query` set to: $ARGUMENTS

Then answer from the results only: list the most relevant blocks as [[path:start-end]] with one line
each on what they do. If nothing relevant came back, say so and suggest a better query.
"""


@dataclass
class SetupReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # user content we did not overwrite, with why
    warnings: list[str] = field(default_factory=list)  # what will not work as written, and the fix

    def lines(self) -> list[str]:
        return ([f"wrote      {p}" for p in self.written] + [f"up to date {p}" for p in self.unchanged]
                + [f"skipped    {p}" for p in self.skipped] + [f"warning    {w}" for w in self.warnings])


def server_entry() -> dict:
    """The .mcp.json entry: `coderag mcp`, found on the PATH of whoever starts Claude Code. The file is
    shared with the repository, so it names no path of this machine (`command_warning` says when the
    command does not resolve)."""
    return {"type": "stdio", "command": "coderag", "args": ["mcp"], "env": {}}


def _venv_bins() -> set[Path]:
    """The bin folders of the virtual environment this runs in (and an activated one): a shell without
    it, such as the one a teammate or a desktop launcher starts Claude Code from, has neither on its PATH."""
    bins = set()
    if sys.prefix != sys.base_prefix:
        bins.add(Path(sys.prefix, "bin").resolve())
    if os.environ.get("VIRTUAL_ENV"):
        bins.add(Path(os.environ["VIRTUAL_ENV"], "bin").resolve())
    return bins


def resolves_outside_venv(command: str = "coderag") -> str | None:
    """Where `command` is found on this PATH without the virtual environment's folders, or None."""
    venv = _venv_bins()
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d).resolve() not in venv]
    return shutil.which(command, path=os.pathsep.join(path))


def command_warning() -> str | None:
    """Why Claude Code started from a shell without this virtual environment cannot start `coderag mcp`,
    and the two fixes (an install on every shell's PATH, or a server entry of this user's alone); None when
    `coderag` resolves there."""
    if resolves_outside_venv() is not None:
        return None
    here = Path(sys.executable).with_name("coderag")
    source = Path(__file__).resolve().parents[1]
    target = source if (source / "pyproject.toml").is_file() else "coderag"
    return (f"`coderag` is not on the PATH of a shell without this virtual environment ({sys.prefix}): Claude Code "
            f'started from such a shell (a teammate\'s, a desktop launcher\'s) says "Failed to connect". Install '
            f"it where every shell finds it, `pipx install {target}` or `uv tool install {target}`, then run "
            f"`coderag init-claude` again; or register this environment's server for you alone: "
            f"claude mcp add --scope local coderag -- {here} mcp")


def _write_mcp_json(root: Path, report: SetupReport, force: bool) -> None:
    path = root / ".mcp.json"
    entry = server_entry()
    data: dict = {}
    if path.exists():
        try:
            data = json.loads(path.read_text("utf-8") or "{}")
        except ValueError as exc:
            report.skipped.append(f".mcp.json (not valid JSON: {exc}; fix it, or add the entry by hand: "
                                  f"claude mcp add --scope project coderag -- coderag mcp)")
            return
        if not isinstance(data, dict):
            report.skipped.append(".mcp.json (not a JSON object)")
            return
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        report.skipped.append('.mcp.json ("mcpServers" is not a JSON object; fix it, or add the entry by hand: '
                              'claude mcp add --scope project coderag -- coderag mcp)')
        return
    current = servers.get(SERVER_KEY)
    if current == entry:
        report.unchanged.append(".mcp.json")
        return
    if current is not None and not force:
        report.skipped.append(f'.mcp.json (it already has a different "{SERVER_KEY}" server; --force replaces it)')
        return
    servers[SERVER_KEY] = entry
    path.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    report.written.append(".mcp.json")


def _write_claude_md(root: Path, report: SetupReport) -> None:
    path = root / "CLAUDE.md"
    text = path.read_text("utf-8") if path.exists() else ""
    end = text.find(END)
    begin = text.rfind(BEGIN, 0, end) if end >= 0 else -1  # the marker pair, even if a stray BEGIN precedes it
    if begin >= 0:
        new = text[:begin] + CLAUDE_SECTION.rstrip("\n") + text[end + len(END):]
    else:
        new = (text.rstrip("\n") + "\n\n" if text.strip() else "") + CLAUDE_SECTION
    if new == text:
        report.unchanged.append("CLAUDE.md")
        return
    path.write_text(new, "utf-8")
    report.written.append("CLAUDE.md")


def _write_slash_command(root: Path, report: SetupReport, force: bool) -> None:
    path = root / ".claude" / "commands" / "search.md"
    rel = ".claude/commands/search.md"
    if path.exists():
        if path.read_text("utf-8") == SLASH_COMMAND:
            report.unchanged.append(rel)
            return
        if not force:
            report.skipped.append(f"{rel} (yours differs; --force replaces it)")
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SLASH_COMMAND, "utf-8")
    report.written.append(rel)


def init_claude(root: str | Path, force: bool = False) -> SetupReport:
    """Set up Claude Code in `root`; never overwrites a user's content without --force (CLAUDE.md is merged)."""
    root = Path(root).resolve()
    report = SetupReport()
    _write_mcp_json(root, report, force)
    _write_claude_md(root, report)
    _write_slash_command(root, report, force)
    warning = command_warning()
    if warning:
        report.warnings.append(warning)
    return report
