"""`coderag mcp`'s stdio: the SDK's transport, plus an answer to every line that is not a JSON-RPC message.

The SDK's reader passes such a line to the server as an exception, which the server logs at debug level
and answers with nothing, so the client waits for its timeout. Three kinds reach it: a line that is not JSON
(-32700 here), JSON that is not a message (-32600, with the request's id when it has one), and a string with
an unpaired surrogate escape such as "\\ud800", which JSON allows and the SDK's parser refuses (a tool call
gets a tool error naming the argument; any other request -32602). A fourth never reaches it: a request
whose id is neither a string nor an integer (`{}`, `[]`, `1.5`, `true`, `null`) passes the SDK's parser as
a notification, which is never answered; it gets -32600 here.

How: `stdio_server(stdin=...)` (public) reads our checked lines instead of the process's stdin, and the
answers go out through the same write stream as the server's, so frames never interleave. Two costs: the
SDK's stdin is read here, so the SDK no longer points fd 0 at /dev/null (nothing in coderag reads stdin; the
embedding helper gets a pipe of its own), and the server is driven as MCPServer.run_stdio_async drives it,
through its low-level server, which MCPServer keeps in an attribute the SDK's own Client also reads.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from typing import Any, Optional

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, CallToolResult, ErrorData, JSONRPCError,
                       JSONRPCNotification, JSONRPCResponse, TextContent, jsonrpc_message_adapter)
from pydantic import ValidationError

from coderag.base.agent_text import find_surrogate

log = logging.getLogger("coderag.mcp")
EXAMPLE_REQUEST = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                   '"params": {"name": "search_code", "arguments": {"query": "where are failed logins retried"}}}')
Answer = JSONRPCError | JSONRPCResponse


def _error(req_id: Any, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=req_id, error=ErrorData(code=code, message=message))


def _request_id(obj: Any) -> Any:
    """The id a JSON-RPC answer must carry: the request's, when it is one (a string or an integer), else null."""
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)) else None


def _what_is_wrong(obj: Any) -> str:
    """The envelope's problems, for the kind of message `obj` looks like ('params: Input should be ...')."""
    if not isinstance(obj, dict):
        return f"a message is one JSON object, not {type(obj).__name__} {json.dumps(obj)[:80]}"
    kind = ("JSONRPCRequest" if "id" in obj else "JSONRPCNotification") if "method" in obj else \
        "JSONRPCResponse" if "result" in obj else "JSONRPCError" if "error" in obj else "JSONRPCRequest"
    try:
        jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except ValidationError as exc:
        found = [f"{'.'.join(map(str, e['loc'][1:])) or 'message'}: {e['msg']}" for e in exc.errors()
                 if e["loc"][:1] == (kind,)]
        return "; ".join(found[:5]) or "not a JSON-RPC 2.0 message"
    return "not a JSON-RPC 2.0 message"


def check_line(line: str) -> tuple[Optional[str], Optional[Answer]]:
    """(line, None): a message for the SDK. (None, answer): answer it here. (None, None): drop it (a blank
    line, or a notification with an unpaired surrogate: there is no one to answer).

    Examples:
        >>> check_line('{"jsonrpc": "2.0", "id": 1, "method": "ping"}')[1] is None
        True
        >>> check_line("not json")[1].error.code
        -32700
        >>> check_line('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "x"}')[1].id
        7
        >>> check_line('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}')[1].error.code
        -32600
    """
    if not line.strip():
        return None, None
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        # A request whose id is not a string or an integer (an object, a list, a float, true, null) reads as
        # a notification to the SDK, which ignores the id and answers nothing: only notifications are checked
        # again here, and they are few.
        if not isinstance(message, JSONRPCNotification) or '"id"' not in line or "id" not in json.loads(line):
            return line, None
    except ValidationError:
        pass
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return None, _error(None, PARSE_ERROR, f"Parse error: {exc}. Send one JSON-RPC 2.0 message per line, "
                                               f"as UTF-8 JSON, e.g. {EXAMPLE_REQUEST}")
    if isinstance(obj, dict) and "id" in obj and "method" in obj and _request_id(obj) is None:
        return None, _error(None, INVALID_REQUEST, f"Invalid Request: id must be a string or an integer, not "
                                                   f"{json.dumps(obj['id'])[:80]}. Send a JSON-RPC 2.0 message, "
                                                   f"e.g. {EXAMPLE_REQUEST}")
    rid = _request_id(obj)
    surrogate = find_surrogate(obj.get("params"), "") if isinstance(obj, dict) else None
    if surrogate is None and isinstance(obj, dict):
        surrogate = find_surrogate({k: v for k, v in obj.items() if k != "params"}, "")
    if surrogate is not None and "method" in obj:
        if rid is None:
            return None, None  # a notification: there is no one to answer
        if obj.get("method") == "tools/call":
            tool = (obj.get("params") or {}).get("name") if isinstance(obj.get("params"), dict) else None
            text = f"{tool if isinstance(tool, str) and not find_surrogate(tool, '') else 'tool call'}: " \
                   f"{surrogate.removeprefix('arguments.')}."
            result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
            return None, JSONRPCResponse(jsonrpc="2.0", id=rid,
                                         result=result.model_dump(by_alias=True, exclude_unset=True, mode="json"))
        return None, _error(rid, INVALID_PARAMS, f"Invalid params: {surrogate}.")
    return None, _error(rid, INVALID_REQUEST, f"Invalid Request: {_what_is_wrong(obj)}. Send a JSON-RPC 2.0 "
                                              f"message, e.g. {EXAMPLE_REQUEST}")


class CheckedLines:
    """The lines of stdin the SDK's reader gets: only messages it can read. The others are answered through
    `forward_answers`."""

    def __init__(self, source) -> None:
        self._source = source.__aiter__()
        self._send, self._answers = anyio.create_memory_object_stream[Answer](math.inf)

    def __aiter__(self) -> "CheckedLines":
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                raw = await self._source.__anext__()
            except StopAsyncIteration:
                self._send.close()  # answers already queued still go out
                raise
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw  # as the SDK decodes
            passed, answer = check_line(line)
            if answer is not None:
                shown = line if len(line) <= 200 else f"{line[:200]}… ({len(line)} characters)"
                log.info("answered a malformed line with %s: %r", answer.error.code if isinstance(
                    answer, JSONRPCError) else "a tool error", shown.strip())
                self._send.send_nowait(answer)
            if passed is not None:
                return passed

    async def forward_answers(self, write_stream) -> None:
        try:
            async with self._answers:
                async for answer in self._answers:
                    await write_stream.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):  # the server has stopped writing
            pass


async def run_stdio(server) -> None:
    """MCPServer.run_stdio_async, reading stdin through CheckedLines."""
    lines = CheckedLines(anyio.wrap_file(sys.stdin.buffer))
    lowlevel = server._lowlevel_server  # what run_stdio_async runs; mcp is pinned to 2.x (pyproject)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lines.forward_answers, write_stream)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()
