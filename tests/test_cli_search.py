"""`coderag search`: formats, filters, budgets, exit codes and error messages, in-process and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_files
from coderag.cli import main
from test_query import RETRIEVAL_FILES

CODERAG = str(Path(sys.executable).with_name("coderag"))
# Regression (found by this suite): the CLI printed indented JSON and, off a terminal, rich panels, both past
# the budget that was counted on the compact payload. It now prints exactly what was counted.


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Indexed with `coderag index`, the way a user does it."""
    root = write_files(tmp_path_factory.mktemp("cli") / "shop", RETRIEVAL_FILES)
    res = CliRunner().invoke(main, ["index", str(root)])
    assert res.exit_code == 0, res.output
    assert f"{len(RETRIEVAL_FILES)} indexed" in res.output
    return root


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODERAG_CONFIG", raising=False)


def search(root: Path, *args: str):
    return CliRunner().invoke(main, ["search", *args, "--root", str(root)])


def _tokens(text: str) -> int:
    from llama_index.core.utils import get_tokenizer

    return len(get_tokenizer()(text))


def test_cli_search_default_format_off_a_terminal_is_xml(repo: Path) -> None:
    res = search(repo, "round the sales tax to whole cents")
    assert res.exit_code == 0, res.output
    root = ET.fromstring(res.output)
    assert root.find("result/source_file").text == "src/billing/invoice.py"
    assert root.findtext("meta/query") == "round the sales tax to whole cents"


def test_cli_search_json(repo: Path) -> None:
    res = search(repo, "getUserById", "--format", "json", "--retriever", "bm25")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["strategy"].startswith("bm25") and doc["root"] == str(repo)
    top = doc["results"][0]
    assert top["file_path"] == "web/api/users.ts" and top["start_line"] <= 7 and top["end_line"] >= 13


def test_cli_search_text(repo: Path) -> None:
    res = search(repo, "drop the oldest entries when the cache is full", "--format", "text")
    assert res.exit_code == 0, res.output
    assert "src/cache/lru.py:" in res.output
    assert "evict_least_recently_used" in res.output
    assert " hits, " in res.output and " tokens, " in res.output


def test_cli_search_text_escapes_a_newline_in_a_file_name(tmp_path: Path) -> None:
    """Regression (issue 27): a file name with a newline was printed raw by `--format text`, so a crafted name
    added lines of its own to the output. It is escaped, as JSON and XML escape it."""
    root = write_files(tmp_path / "repo", {
        "src/evil\n── fake.py:1-1  injected  [9.9999]\nname.py":
            "def refund_damaged_parcel(parcel):\n    return parcel.price_cents\n"})
    assert CliRunner().invoke(main, ["index", str(root)]).exit_code == 0
    res = search(root, "refund_damaged_parcel", "--format", "text", "--retriever", "bm25", "--no-daemon")
    assert res.exit_code == 0, res.output
    head = res.output.splitlines()[0]
    assert head.startswith("── src/evil\\n── fake.py:1-1  injected  [9.9999]\\nname.py:1-2  refund_damaged_parcel"), head
    assert not any(line.startswith(("── fake.py", "name.py")) for line in res.output.splitlines()), res.output
    assert "def refund_damaged_parcel(parcel):" in res.output


@pytest.mark.parametrize("fmt, max_tokens", [("xml", 300), ("xml", 1000),
                                             pytest.param("json", 300),
                                             pytest.param("text", 300)])
def test_cli_search_output_fits_max_tokens(repo: Path, fmt: str, max_tokens: int) -> None:
    res = search(repo, "round the sales tax to whole cents", "--format", fmt, "--max-tokens", str(max_tokens))
    assert res.exit_code == 0, res.output
    assert _tokens(res.output.rstrip("\n")) <= max_tokens


def test_cli_search_files_and_keywords(repo: Path) -> None:
    res = search(repo, "request", "--files", "src/**/*.py", "--format", "json")
    assert res.exit_code == 0, res.output
    paths = {r["file_path"] for r in json.loads(res.output)["results"]}
    assert paths and all(p.startswith("src/") and p.endswith(".py") for p in paths)
    res = search(repo, "where is this", "-k", "ROUND_HALF_UP", "--keyword", "quantize", "--exact", "--format", "json")
    results = json.loads(res.output)["results"]
    assert results and all("ROUND_HALF_UP" in r["text"] and "quantize" in r["text"] for r in results)


def test_cli_search_no_results_exits_zero_with_a_message(repo: Path) -> None:
    res = search(repo, "tax", "--files", "vendor/**", "--format", "text")
    assert res.exit_code == 0
    assert "No results for 'tax'" in res.output and "'vendor/**'" in res.output


@pytest.mark.parametrize("args, fragment", [
    (["--files", "[abc"], "--files: Malformed --files '[abc': unclosed '['"),
    (["--max-tokens", "10"], "--max-tokens: Input should be greater than or equal to 50 (got 10)"),
    (["--top-k", "0"], "--top-k: Input should be greater than or equal to 1 (got 0)"),
    (["--retriever", "fuzzy"], "'fuzzy' is not one of 'hybrid', 'bm25', 'dense'"),
    (["--format", "yaml"], "'yaml' is not one of 'text', 'xml', 'json'"),
])
def test_cli_search_bad_options_are_usage_errors(repo: Path, args: list[str], fragment: str) -> None:
    res = search(repo, "tax", *args)
    assert res.exit_code == 2, res.output
    assert fragment in res.output and "Traceback" not in res.output


def test_cli_search_empty_query_is_a_usage_error(repo: Path) -> None:
    res = search(repo, "   ")
    assert res.exit_code == 2 and "query is empty" in res.output


def test_cli_search_from_a_subfolder_finds_the_index(repo: Path) -> None:
    res = CliRunner().invoke(main, ["search", "liveness probe", "--root", str(repo / "cmd" / "server"),
                                    "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["results"][0]["file_path"] == "cmd/server/health.go"


def test_cli_search_while_the_index_is_held(repo: Path) -> None:
    from coderag import CodeIndex

    with CodeIndex.open(repo, create=False):
        res = search(repo, "tax", "--wait", "0.5")
    assert res.exit_code == 1
    assert "waiting for pid" in res.output and "--wait SECONDS" in res.output and "Traceback" not in res.output


# -- the real console script ---------------------------------------------------------------------------

def test_cli_search_without_an_index_says_how_to_make_one(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    proc = subprocess.run([CODERAG, "search", "anything", "--root", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f'No index at or above {tmp_path.resolve()}. Run "coderag index {tmp_path}" first.' in proc.stderr


def test_cli_search_help() -> None:
    proc = subprocess.run([CODERAG, "search", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for flag in ("--root", "--files", "--keyword", "--exact", "--max-tokens", "--top-k", "--retriever", "--format"):
        assert flag in proc.stdout


def test_cli_search_real_process(repo: Path) -> None:
    proc = subprocess.run([CODERAG, "search", "stop the server gracefully on ctrl-c", "--format", "xml",
                           "--max-tokens", "500"], cwd=repo / "src", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    root = ET.fromstring(proc.stdout)
    assert root.findtext("result/source_file") == "cmd/server/shutdown.go"
    assert _tokens(proc.stdout.rstrip("\n")) <= 500


# -- one wording for bad options, whoever answers; socket errors carry the request's id ------------------

BAD_OPTIONS = [(["--files", "[abc"], {"file_pattern": "[abc"}), (["--max-tokens", "10"], {"max_tokens": 10})]


@pytest.fixture
def owner(repo: Path):
    """An owner of `repo` in this process (no watcher, no background pass): the CLI and MCP become its clients."""
    from coderag.service import IndexService

    svc = IndexService(repo, watch=False, background=False).start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_bad_options_read_alike_from_the_cli_the_owner_and_mcp(repo: Path, anyio_backend) -> None:
    """One wording whoever answers; the CLI names its flags (--files), the MCP tool its parameters
    (file_pattern), each what its user typed (issue 26)."""
    from mcp import Client

    from coderag.mcp_server import build_server
    from coderag.service import IndexService

    here = {}
    for args, _ in BAD_OPTIONS:  # no owner: this process opens the index and meets the error itself
        res = search(repo, "tax", *args)
        assert res.exit_code == 2, res.output
        here[args[0]] = res.stderr.strip().splitlines()[-1].removeprefix("Error: ")
    assert here["--files"].startswith("Invalid search options: --files: Malformed --files '[abc'")
    assert here["--max-tokens"] == ("Invalid search options: --max-tokens: Input should be greater than or equal "
                                    "to 50 (got 10).")
    svc = IndexService(repo, watch=False, background=False).start()
    try:
        async with Client(build_server(repo)) as mcp:  # a client of the owner above, as a second session is
            for args, arguments in BAD_OPTIONS:
                res = search(repo, "tax", *args)  # through the owner's socket
                assert res.exit_code == 2, res.output
                assert res.stderr.strip().splitlines()[-1].removeprefix("Error: ") == here[args[0]]
                if "max_tokens" in arguments:
                    continue  # the MCP tool's own argument check words a bad max_tokens (test_mcp_malformed.py)
                tool = await mcp.call_tool("search_code", {"query": "tax", **arguments})
                text = tool.content[0].text  # the SDK puts its own "Error executing tool X: " before a tool error
                as_parameter = here[args[0]].replace(args[0], next(iter(arguments)))  # --files -> file_pattern
                assert tool.is_error and text.removeprefix("Error executing tool search_code: ") == as_parameter, text
    finally:
        svc.stop()


def test_socket_errors_answer_with_the_request_id(owner) -> None:
    import socket

    def ask(line: bytes) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(str(owner.socket_path))
            s.sendall(line + b"\n")
            return json.loads(s.makefile("rb").readline())

    assert ask(b'{"id": 7, "method": "ping"}')["id"] == 7
    for line, rid, fragment in [
        (b'{"id": 8, "method": "nope"}', 8, "unknown method 'nope'"),
        (b'{"id": "a", "method": "search", "params": {"query": "tax", "max_tokens": 10}}', "a",
         "Invalid search options: max_tokens: Input should be greater than or equal to 50 (got 10)."),
        (b'{"id": 9, "method": "search", "params": ["tax"]}', 9, "params must be a JSON object"),
        (b'{"id": 10, "method": "search", "params": {"query": "tax", "colour": 1}}', 10, "colour"),
        (b"[1, 2]", None, "one JSON object per line"),
        (b"not json", None, "Expecting value"),
    ]:
        answer = ask(line)
        assert answer["id"] == rid and fragment in answer["error"]["message"], (line, answer)
    assert ask(b'{"id": 11, "method": "ping"}')["id"] == 11  # still serving
