"""No byte from outside the repository: crafted ids and file patterns sent through the real MCP client (an
in-memory session against build_server) to expand_result and search_code. One index build for all of them.

Every file an id must not reach holds MARKER: files outside the root, reached by `..`, absolute paths and
links; the index folder; an ignored file; a file the indexer left out. Errors are expected; the marker is not.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import write_files

pytestmark = pytest.mark.anyio

MARKER = "ZQX-secret-marker-7d41a9"
APP = "def handle_request(user):\n    return user.name\n\n\ndef audit(event):\n    return str(event)\n"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _layout(base: Path) -> tuple[Path, Path]:
    outside = write_files(base / "outside", {"secret.py": f"TOKEN = '{MARKER}'\n" * 5,
                                             "dir/inner.py": f"INNER = '{MARKER}'\n" * 5})
    root = write_files(base / "repo", {
        "src/app.py": APP,
        ".gitignore": "*.env\n",
        "keys.env": f"API_KEY={MARKER}\n",
        "blob.py": f"\x00\x01{MARKER}\n",  # binary: the indexer leaves it out
        ".coderag/planted.py": f"PLANTED = '{MARKER}'\n",
    })
    os.symlink(outside, root / "outside_link")
    os.symlink(outside / "secret.py", root / "src" / "passwd.py")
    os.symlink("/etc/passwd", root / "src" / "etc_passwd.py")
    os.symlink("../.coderag", root / "src" / "dotcoderag")
    os.symlink("keys.env", root / "keys_link.py")
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe.py")
    return root, outside


def _targets(outside: Path) -> list[str]:
    """Paths that must never be read, in the forms an agent (or text that talks it into a call) could write."""
    secret = str(outside / "secret.py")
    return [
        # absolute
        secret, "/etc/passwd", "/etc/shadow", "/proc/self/environ", "/proc/self/cmdline", "//etc/passwd",
        # parent references
        "../outside/secret.py", "../../outside/secret.py", "../" * 30 + "etc/passwd",
        "src/../../outside/secret.py", "src/../../../../../../etc/passwd", "./../outside/secret.py",
        "src//../../outside/secret.py", "outside_link/../../outside/secret.py", "~/../../etc/passwd",
        # through links
        "src/passwd.py", "src/etc_passwd.py", "outside_link/secret.py", "outside_link/dir/inner.py",
        "src/dotcoderag/planted.py", "keys_link.py",
        # the index folder
        ".coderag/planted.py", ".coderag/owner.json", ".coderag/index.db", ".coderag/coderag.log",
        "./.coderag/planted.py", "src/../.coderag/planted.py", ".coderag//planted.py",
        # ignored, left out, not a regular file
        "keys.env", "blob.py", "pipe.py", "src", ".",
        # percent-encoded, backslashes, URLs
        "%2e%2e/outside/secret.py", "..%2foutside%2fsecret.py", "%2Fetc%2Fpasswd", "%252e%252e%252foutside",
        ".coderag%2fplanted.py", "..\\outside\\secret.py", "src\\..\\..\\outside\\secret.py", "\\etc\\passwd",
        "C:\\Windows\\win.ini", ".coderag\\planted.py", "file:///etc/passwd", "$HOME/.ssh/id_rsa",
        # NUL bytes, odd characters, very long
        "src/app.py\x00../../outside/secret.py", "../outside/secret.py\x00", ".coderag/planted.py\x00.py",
        "\uff0e\uff0e/outside/secret.py", "..\u2215outside\u2215secret.py", " ../outside/secret.py",
        "a/" * 3000 + "../" * 3001 + "outside/secret.py", "x" * 100_000, "../" * 5000 + "etc/passwd",
    ]


def _forbidden() -> list[str]:
    """Strings no answer may hold: the marker (and a piece of it), the first line of /etc/passwd."""
    out = [MARKER, MARKER[4:16]]
    try:
        first = Path("/etc/passwd").read_text().splitlines()[0]
        if first:
            out.append(first)
    except (OSError, IndexError):
        pass
    return out


def _alarm(seconds: int):
    """A last guard: a tool call that blocks the event loop (an open() of a FIFO) fails the test."""
    def fail(signum, frame):  # not TimeoutError: an OSError, which code under test may catch
        raise RuntimeError(f"the traversal test ran past {seconds} s: a call blocked")

    signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)


async def _ready(client: Client, timeout: float = 180) -> None:
    import json

    deadline = time.monotonic() + timeout
    while True:
        res = await client.call_tool("index_status", {})
        if not res.is_error:
            st = json.loads(res.content[0].text)
            if st.get("dense_ready") and st["indexing"]["phase"] == "idle":
                return
        assert time.monotonic() < deadline, f"index not ready after {timeout} s: {res.content[0].text}"
        await anyio.sleep(0.2)


async def test_traversal_crafted_ids_and_patterns_get_no_byte_from_outside(tmp_path: Path) -> None:
    from coderag.mcp_server import build_server

    root, outside = _layout(tmp_path)
    targets = _targets(outside)
    ids = [t + r for t in targets for r in (":1-3", ":1-100000")] + [
        targets[0], "../outside/secret.py:0-0", "src/app.py:1-2\n../outside/secret.py:1-3", "/etc/passwd:3-1"]
    assert len(ids) >= 100
    forbidden = _forbidden()
    leaks, answered, too_long = [], [], []
    old = signal.getsignal(signal.SIGALRM)
    _alarm(420)
    try:
        async with Client(build_server(root)) as client:
            await _ready(client)
            # The tool works: a file of the repository is expanded, so the refusals below mean something.
            ok = await client.call_tool("expand_result", {"id": "src/app.py:1-2"})
            assert not ok.is_error and "def handle_request(user):" in ok.content[0].text, ok.content[0].text
            for rid in ids:
                t0 = time.monotonic()
                with anyio.fail_after(30):
                    res = await client.call_tool("expand_result", {"id": rid, "context_lines": 500})
                text = "".join(getattr(c, "text", "") for c in res.content)
                assert time.monotonic() - t0 < 10, f"{rid[:80]!r} took {time.monotonic() - t0:.1f} s"
                if any(f in text for f in forbidden):
                    leaks.append((rid[:120], text[:300]))
                if not res.is_error:
                    answered.append((rid[:120], text[:300]))
                if len(text) >= 4000:
                    too_long.append((rid[:80], len(text)))
            for pattern in ("../outside/**", "/etc/*", str(outside) + "/**", "outside_link/**", ".coderag/**",
                            "**/*.env", "src/passwd.py", "..\\outside\\*", "%2e%2e/**", "**", "src/dotcoderag/*"):
                with anyio.fail_after(60):
                    res = await client.call_tool("search_code", {"query": "secret token api key planted inner",
                                                                 "keywords": ["TOKEN", "API_KEY", "PLANTED", "INNER"],
                                                                 "file_pattern": pattern})
                text = "".join(getattr(c, "text", "") for c in res.content)
                if any(f in text for f in forbidden):
                    leaks.append((f"search_code file_pattern={pattern!r}", text[:300]))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not leaks, f"{len(leaks)} answers hold bytes from outside the repository: {leaks[:5]}"
    assert not answered, f"ids that should have been refused were answered: {answered[:5]}"
    assert not too_long, f"errors that echo too much of the id: {too_long[:5]}"
