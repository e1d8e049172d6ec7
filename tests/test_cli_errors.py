"""Errors as a user meets them: one wording for a bad search option whoever answers (this process, an owner
over its socket, the MCP server), socket errors that carry the request's id, and `--wait` passed down to
the connection `coderag mcp` makes later instead of through a module global."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from coderag.base.lock import WriterLock
from coderag.base.paths import LOCK_NAME, ensure_index_dir


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_wait_reaches_the_connection_made_later(tiny_repo: Path) -> None:
    """`coderag mcp --wait 0.5`: while another process holds the index, a tool call fails after about half a
    second with the holder and the next step (the default wait is 60 s)."""
    import coderag.client
    from coderag.base.lock import DEFAULT_WAIT_S
    from coderag.mcp_server import build_server

    lock = WriterLock(ensure_index_dir(tiny_repo) / LOCK_NAME).acquire()
    try:
        with anyio.fail_after(30):
            async with Client(build_server(tiny_repo, wait=0.5)) as c:
                t0 = time.monotonic()
                res = await c.call_tool("search_code", {"query": "invoice total"})
                took = time.monotonic() - t0
    finally:
        lock.release()
    text = res.content[0].text
    assert res.is_error, text
    assert "holds the index" in text and "--wait SECONDS" in text, text
    assert "waited 0 s" in text or "waited 1 s" in text, text
    assert took < 15, took
    assert not hasattr(coderag.client, "DEFAULT_WAIT_S") or coderag.client.DEFAULT_WAIT_S == DEFAULT_WAIT_S
