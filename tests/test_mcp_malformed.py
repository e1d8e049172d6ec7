"""Malformed input from an agent, through the real MCP stack: bad tool arguments through the SDK's in-memory
client, malformed JSON-RPC and unpaired surrogates as raw bytes on a real `coderag mcp`'s stdin, bad globs
through the CLI. One index, built once: this process owns it (the in-memory server), and the spawned
`coderag mcp` and the CLI are its clients."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client

from conftest import CODERAG, TINY_FILES, server_env, write_files

READY_TIMEOUT_S = 120
FILES = {**TINY_FILES, "docs/guide.rst": "Guide\n=====\n\nHow invoices add sales tax to the line items.\n"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_files(tmp_path_factory.mktemp("malformed") / "repo", FILES)


@pytest.fixture(scope="module")
async def client(repo: Path):
    """The in-memory MCP client of a server in this process, which owns (and builds) the index of `repo`."""
    from coderag.mcp_server import build_server

    async with Client(build_server(repo)) as c:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            st = json.loads((await c.call_tool("index_status", {})).content[0].text)
            if st["dense_ready"] and st["indexing"]["phase"] == "idle":
                break
            assert time.monotonic() < deadline, st
            await anyio.sleep(0.2)
        yield c


# -- every argument error is a tool error that names the argument ---------------------------------------

BAD_CALLS = [
    ("search_code", {"query": "login", "bogus": 1}, ["unknown argument 'bogus'", "search_code takes query, keywords"]),
    ("search_code", {"qeury": "login"}, ["unknown argument 'qeury'", "query is required"]),
    ("search_code", {}, ["query is required", "pass a string of at least 1 character"]),
    ("search_code", {"query": ""}, ["query", "at least 1 character"]),
    ("search_code", {"query": "  "}, ["query is empty", "describe what you are looking for"]),
    ("search_code", {"query": 3}, ["query = 3", "valid string"]),
    ("search_code", {"query": "\ud800"}, ["query contains an unpaired UTF-16 surrogate", "'\\ud800'"]),
    ("search_code", {"query": "x", "keywords": "MAX_RETRIES"}, ["keywords = 'MAX_RETRIES'", "a list of strings"]),
    ("search_code", {"query": "x", "keywords": [1, 2]}, ["keywords.0 = 1", "valid string"]),
    ("search_code", {"query": "x", "keywords": ["ok", "b\udc00"]}, ["keywords[1] contains an unpaired"]),
    ("search_code", {"query": "x", "keywords": ["k" * 300]}, ["keywords[0]", "at most 200"]),
    ("search_code", {"query": "x", "keywords": [f"k{i}" for i in range(20)]}, ["at most 16 keywords (20 given)"]),
    ("search_code", {"query": "x", "max_tokens": 10}, ["max_tokens = 10", "an integer from 50 to 20000"]),
    ("search_code", {"query": "x", "max_tokens": 10**9}, ["max_tokens", "less than or equal to 20000"]),
    ("search_code", {"query": "x", "max_tokens": "lots"}, ["max_tokens = 'lots'", "valid integer"]),
    ("search_code", {"query": "x", "max_tokens": None}, ["max_tokens = None", "an integer from 50"]),
    ("search_code", {"query": "x", "requires_exact_match": "maybe"}, ["requires_exact_match", "true or false"]),
    ("search_code", {"query": "x", "file_pattern": 5}, ["file_pattern = 5", "a string or null"]),
    ("search_code", {"query": "x", "file_pattern": "[z-a]"},
     ["Malformed file_pattern '[z-a]'", "bad character range z-a", "Examples: 'src/**/*.py'"]),
    ("search_code", {"query": "x", "file_pattern": "src/[abc"}, ["'src/[abc'", "unclosed '['"]),
    ("search_code", {"query": "x", "file_pattern": "**/*.{py,rst"}, ["unclosed '{'", "'{py,rst}'"]),
    ("search_code", {"query": "x", "file_pattern": "{a,b}" * 10}, ["more than 64 alternatives"]),
    ("search_code", {"query": "x", "file_pattern": "../../etc/*"}, ["'..' cannot leave the indexed root"]),
    ("search_code", {"query": "x", "file_pattern": "a\x00b"}, ["NUL character"]),
    ("search_code", {"query": "x", "file_pattern": "src/\ud800"}, ["file_pattern contains an unpaired"]),
    ("expand_result", {}, ["id is required"]),
    ("expand_result", {"id": 42}, ["id = 42", "valid string"]),
    ("expand_result", {"id": ["a"]}, ["id = ['a']", "valid string"]),
    ("expand_result", {"id": "\udfff:1-2"}, ["id contains an unpaired"]),
    ("expand_result", {"id": "nope"}, ["Unknown result id 'nope'"]),
    ("expand_result", {"id": "src/auth/service.py:1-2", "context_lines": -1}, ["context_lines = -1", "from 0 to 500"]),
    ("expand_result", {"id": "src/auth/service.py:1-2", "lines": 3}, ["unknown argument 'lines'"]),
    ("index_status", {"verbose": True}, ["unknown argument 'verbose'", "index_status takes no arguments"]),
]


@pytest.mark.anyio
@pytest.mark.parametrize("tool, args, hints", BAD_CALLS, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(BAD_CALLS)])
async def test_every_bad_argument_is_a_tool_error_that_names_it(client: Client, tool, args, hints) -> None:
    res = await client.call_tool(tool, args)
    text = res.content[0].text
    assert res.is_error, text
    assert text.strip() != f"Error executing tool {tool}", "a bare crash message"
    assert "errors.pydantic.dev" not in text and len(text) < 1500, text  # words, not a pydantic dump
    for hint in hints:
        assert hint in text, f"{hint!r} not in {text!r}"
    text.encode("utf-8")  # what goes back must be sendable


@pytest.mark.anyio
async def test_good_calls_still_work_and_brace_sets_filter(client: Client) -> None:
    res = await client.call_tool("search_code", {"query": "sales tax on invoices", "file_pattern": "**/*.{py,rst}"})
    assert not res.is_error, res.content[0].text
    paths = {r.findtext("source_file") for r in ET.fromstring(res.content[0].text).findall("result")}
    assert paths and paths <= {"src/billing/invoice.py", "src/auth/service.py", "docs/guide.rst"}, paths
    assert "docs/guide.rst" in paths and "src/billing/invoice.py" in paths
    # A list sent as JSON text (as Claude Desktop does) is still accepted.
    res = await client.call_tool("search_code", {"query": "login retries", "keywords": '["MAX_RETRIES"]'})
    assert not res.is_error, res.content[0].text


# -- raw JSON-RPC on the stdin of a real `coderag mcp` --------------------------------------------------

class RawServer:
    """`coderag mcp` spawned with pipes: bytes in, JSON lines out."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen([CODERAG, "mcp", "--root", str(root)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(root),
                                     env=server_env())
        self._buf = b""

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self.proc.stdout], [], [], left)[0], "no answer (silence)"
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            assert chunk, f"the server closed stdout (exit {self.proc.poll()})"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, rid: int, method: str, params: dict) -> dict:
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
        return self.recv()

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def raw(repo: Path, client: Client):
    """A `coderag mcp` on the same repository: a client of this process's owner (no model load), initialized."""
    server = RawServer(repo)
    try:
        init = server.request(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                "clientInfo": {"name": "raw", "version": "1"}})
        assert init["result"]["serverInfo"]["name"] == "coderag", init
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield server
    finally:
        server.close()


def _tool_call(rid: int, name: str, arguments_json: str) -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {rid}, "method": "tools/call", '
            f'"params": {{"name": "{name}", "arguments": {arguments_json}}}}}').encode()


MALFORMED = [
    # (bytes, expected id, expected error code or "tool" for an is_error tool result, a fragment of the text)
    (b"not json", None, -32700, "Parse error"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', None, -32700, "Parse error"),
    (b"\xff\xfe\x00garbage", None, -32700, "Parse error"),
    (b"[" * 100_000, None, -32700, "Parse error"),  # deeper than any parser's stack
    (b"42", None, -32600, "a message is one JSON object"),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', None, -32600, "one JSON object"),  # a batch
    (b'{"foo": 1}', None, -32600, "jsonrpc: Field required"),
    (b'{"jsonrpc": "1.0", "id": 11, "method": "ping"}', 11, -32600, "jsonrpc: Input should be '2.0'"),
    (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": "x"}', 12, -32600, "params: Input should be"),
    (b'{"jsonrpc": "2.0", "id": 13, "method": 7}', 13, -32600, "method: Input should be a valid string"),
    (b'{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": 3}}', 14, -32602,
     "'name' must be the name of a tool"),
    (b'{"jsonrpc": "2.0", "id": 15, "method": "no/such/method"}', 15, -32601, "Method not found"),
    # The case: a lone surrogate escape in any argument once got no answer at all.
    (_tool_call(16, "search_code", '{"query": "\\ud800"}'), 16, "tool", "query contains an unpaired UTF-16 surrogate"),
    (_tool_call(17, "search_code", '{"query": "x", "keywords": ["a\\udc00"]}'), 17, "tool", "keywords[0] contains"),
    (_tool_call(18, "search_code", '{"query": "x", "file_pattern": "\\udfff"}'), 18, "tool", "file_pattern contains"),
    (_tool_call(19, "expand_result", '{"id": "\\ud83d:1-2"}'), 19, "tool", "expand_result: id contains"),
    (_tool_call(20, "\\ud800", "{}"), 20, "tool", "tool call: name contains an unpaired"),
    (b'{"jsonrpc": "2.0", "id": 21, "method": "ping", "params": {"_meta": {"x": "\\ud800"}}}', 21, -32602,
     "_meta.x contains an unpaired"),
    # The SDK's own checks, through the same pipe.
    (_tool_call(22, "search_code", '{"query": "x", "file_pattern": "[z-a]"}'), 22, "tool", "bad character range z-a"),
    (_tool_call(23, "search_code", '{"query": "x", "nope": 1}'), 23, "tool", "unknown argument 'nope'"),
    (_tool_call(24, "no_such_tool", "{}"), 24, "tool", "no_such_tool"),
    # Regression (issue 27): an id that is neither a string nor an integer read as a notification to the SDK,
    # and nothing was answered. JSON-RPC answers an id it cannot echo with null.
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', None, -32600, "id must be a string or an integer"),
    (b'{"jsonrpc": "2.0", "id": [25], "method": "ping"}', None, -32600, "not [25]"),
    (b'{"jsonrpc": "2.0", "id": 2.5, "method": "tools/list"}', None, -32600, "not 2.5"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, -32600, "not true"),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', None, -32600, "not null"),
]


@pytest.mark.parametrize("line, rid, code, fragment", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_every_malformed_line_on_stdin_gets_an_answer(raw: RawServer, line: bytes, rid, code, fragment) -> None:
    raw.send(line)
    answer = raw.recv()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == rid, answer
    if code == "tool":
        result = answer["result"]
        assert result["isError"] is True, answer
        text = result["content"][0]["text"]
    else:
        assert answer["error"]["code"] == code, answer
        text = answer["error"]["message"]
    assert fragment in text, f"{fragment!r} not in {text!r}"
    assert len(json.dumps(answer)) < 2000, "an answer never echoes the whole line"
    # ... and the server goes on answering, in order.
    assert raw.request(1000, "ping", {}) == {"jsonrpc": "2.0", "id": 1000, "result": {}}


def test_blank_lines_and_bad_notifications_get_no_answer_and_stop_nothing(raw: RawServer) -> None:
    raw.send(b"")
    raw.send(b"   ")
    raw.send(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": "\\ud800"}}')
    reply = raw.request(1001, "tools/call", {"name": "search_code", "arguments": {"query": "invoice total with tax"}})
    assert reply["id"] == 1001, reply  # the first thing back is the answer to this request
    doc = ET.fromstring(reply["result"]["content"][0]["text"])
    assert doc.find("result/source_file").text == "src/billing/invoice.py"


def test_a_huge_query_over_stdio_gets_results_within_budget(raw: RawServer) -> None:
    query = "sum the line items and add sales tax " * 30_000  # 1.1 MB on one line
    reply = raw.request(1002, "tools/call", {"name": "search_code",
                                             "arguments": {"query": query, "max_tokens": 1000}})
    text = reply["result"]["content"][0]["text"]
    assert not reply["result"].get("isError"), text
    doc = ET.fromstring(text)
    assert doc.find("result/source_file").text == "src/billing/invoice.py"
    assert int(doc.findtext("meta/tokens")) <= 1000 and len(doc.findtext("meta/query")) < 300
    assert "were searched" in doc.findtext("message")


# -- the CLI --------------------------------------------------------------------------------------------

def test_cli_search_bad_and_brace_globs(repo: Path, client: Client) -> None:
    from coderag.cli import main

    res = CliRunner().invoke(main, ["search", "tax", "--root", str(repo), "--files", "[z-a]", "--format", "xml"])
    assert res.exit_code == 2, res.output  # a usage error, not a traceback
    assert "--files: Malformed --files '[z-a]'" in res.output and "Examples:" in res.output, res.output
    assert "errors.pydantic.dev" not in res.output

    res = CliRunner().invoke(main, ["search", "sales tax on invoices", "--root", str(repo),
                                    "--files", "**/*.{rst,go}", "--format", "json"])
    assert res.exit_code == 0, res.output
    paths = {r["file_path"] for r in json.loads(res.output)["results"]}
    assert paths and paths <= {"docs/guide.rst", "cmd/server/main.go"}, paths

    help_text = CliRunner().invoke(main, ["search", "--help"]).output
    assert "{py,rst}" in help_text
