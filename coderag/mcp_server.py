"""`coderag mcp`: the stdio MCP server that gives a coding agent the `search_code` tool."""

import json
import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, AsyncIterator, Optional

from mcp.server.mcpserver import Context, MCPServer  # this module is only imported by `coderag mcp`
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from coderag.base.errors import CodeRagError, error_text
from coderag.mcp_args import ArgumentCheck
from coderag.base.paths import LOG_NAME, index_dir
from coderag.base.budget import DEFAULT_MAX_TOKENS, EXPAND_CONTEXT_LINES, MAX_CONTEXT_LINES, MAX_TOKENS_LIMIT, MIN_TOKENS

log = logging.getLogger("coderag.mcp")
SERVER_NAME = "coderag"
INSTRUCTIONS = """\
coderag searches this repository's code index (AST chunks, hybrid semantic + keyword search) and
returns the few code blocks that answer a question, each with its file path and exact line range.
Use search_code before reading files when you need to find where something is implemented, defined,
configured or documented. Cite results as [[path:start-end]]. The index follows saved files.
"""

SEARCH_DESCRIPTION = """\
Search the repository's code and docs by meaning and by identifiers; returns the best matching code blocks.

When to use: to find where behaviour is implemented ("where are failed logins retried?"), where a
symbol is defined (the name alone, or "where is MAX_RETRIES defined") or used ("who calls
parse_header", "where is parse_header tested": callers or tests come first), or which file configures
something -- before opening files, and instead of guessing paths. Phrase `query` as what the code does;
add exact identifiers, error codes or config keys to `keywords`.

Returns XML: <search_results> with <meta> (total_hits, returned_hits, tokens, latency_ms,
search_strategy, index_freshness) and one <result id score> per block with <source_file> (relative
path), <lines> start-end (1-based, inclusive, exact), <language>, <symbol>, <last_modified> and the
code in <snippet> (XML-escaped: &lt; is <). A <truncated> element means the block was cut to fit
max_tokens: call expand_result(id) for the rest. <stale> means the file changed since indexing.
After the blocks, <candidates> may list further places that also match, best first, one line each:
<candidate id="path:start-end" symbol="..."> with the definition's first line. Call expand_result(id)
to see a candidate's code (again for its enclosing definition). They are not counted in returned_hits.

Filtering: `file_pattern` takes globs relative to the repo root, comma-separated, `!` to exclude,
`{a,b}` for alternatives (e.g. "src/**/*.py", "*.md", "**/*.{py,rst}", "src/**/*.ts,!**/*.test.ts").
`requires_exact_match=true` keeps only blocks containing every keyword (use it to find all places
mentioning one identifier). If nothing is found, broaden the query or drop the filters.
"""


def _open(handle) -> None:
    try:
        handle.target()  # become the owner (index in the background) or connect to the one there is
    except CodeRagError as exc:  # in words already: the first tool call tries again and reports it to the agent
        log.warning("could not open the index of %s: %s", handle.root, exc)
    except Exception:  # a bug: its traceback
        log.exception("could not open the index of %s", handle.root)


@asynccontextmanager
async def _lifespan(server, root: Path, settings, wait: Optional[float] = None,
                    tune_gc: bool = False, config_path=None) -> AsyncIterator[dict]:
    from coderag.client import IndexHandle

    handle = IndexHandle(root, settings, wait=wait, tune_gc=tune_gc, config_path=config_path)
    # Opened in the background, so initialize is answered at once: a slow start (imports, or the lock of
    # a running `coderag index`, waited on for up to 30 s) must not trip the client's connection timeout.
    # Tool calls wait for it on the handle's lock.
    threading.Thread(target=_open, args=(handle,), name="coderag-open", daemon=True).start()
    try:
        yield {"handle": handle}
    finally:
        handle.close()


def build_server(root: "str | Path" = ".", settings=None, wait: Optional[float] = None,
                 tune_gc: bool = False, config_path=None) -> MCPServer:
    """The MCPServer with its three tools, bound to the index of `root`. `wait`: seconds its first
    connection waits for another process that holds the index (default coderag.base.lock.DEFAULT_WAIT_S).
    `tune_gc`: the process is `coderag mcp` itself, so an owner it becomes tunes the process's GC
    (coderag/owner_build.py tune_gc_for_serving); an in-process server leaves its host's collector alone.
    `config_path`: the `--config` file `settings` came from, which an owner reads again when it changes.

    Examples:
        >>> server = build_server("path/to/repo")      # doctest: +SKIP
        >>> server.run()                                # stdio                        # doctest: +SKIP
    """
    from coderag.postprocessors.payload import SearchResults

    root = Path(root).resolve()

    @asynccontextmanager
    async def lifespan(server):
        async with _lifespan(server, root, settings, wait, tune_gc, config_path) as ctx:
            yield ctx

    from importlib.metadata import version

    mcp = MCPServer(SERVER_NAME, version=version("coderag"), instructions=INSTRUCTIONS, lifespan=lifespan)
    checked = ArgumentCheck()  # arguments are checked here first: unknown ones refused, errors in words
    mcp.middleware.append(checked)

    def call(ctx: Context, method: str, **params):
        """Run a request on the index; every failure comes back as a tool error in words (the SDK's own
        answer to an unexpected exception is "Error executing tool X", with no reason)."""
        handle = ctx.request_context.lifespan_context["handle"]
        try:
            return handle.call(method, **params)
        except (ValidationError, ValueError, CodeRagError) as exc:  # the agent or the user can fix these
            raise ToolError(error_text(exc)) from exc
        except Exception as exc:
            log.exception("%s failed", method)
            raise ToolError(f"{method} failed: {type(exc).__name__}: {exc}. This is not something the arguments "
                            f"can fix; the traceback is in {index_dir(handle.root) / LOG_NAME}.") from exc

    @mcp.tool(description=SEARCH_DESCRIPTION, structured_output=False)
    @checked.register
    def search_code(
        query: Annotated[str, Field(min_length=1, description="What the code does, in words and/or identifiers.")],
        ctx: Context,
        keywords: Annotated[list[str], Field(description="Exact identifiers, error codes or config keys to boost.")] = [],  # noqa: B006
        file_pattern: Annotated[Optional[str], Field(
            description="Globs on repo-relative paths, e.g. 'src/**/*.py,!tests/**' or '**/*.{py,rst}'.")] = None,
        requires_exact_match: Annotated[bool, Field(description="Only blocks containing every keyword.")] = False,
        max_tokens: Annotated[int, Field(ge=MIN_TOKENS, le=MAX_TOKENS_LIMIT, description="Budget for the whole answer.")] = DEFAULT_MAX_TOKENS,
    ) -> str:
        res = call(ctx, "search", query=query, keywords=list(keywords), file_pattern=file_pattern,
                               requires_exact_match=requires_exact_match, max_tokens=max_tokens, format="xml")
        return SearchResults.from_dict(res).to_xml()

    @mcp.tool(description="State of the code index: root, file and chunk counts, model, last update, "
                          "changed files not yet indexed, and background indexing progress (with the "
                          "seconds left of a build under way, once it can be reckoned).",
              structured_output=False)
    @checked.register
    def index_status(ctx: Context) -> str:
        return json.dumps(call(ctx, "status"), indent=1)

    @mcp.tool(description="Show more around a search result without reading the file: the enclosing "
                          "definition (class or function) of result `id`, or `context_lines` lines around it. "
                          "`id` is a result id from search_code, or a location 'path:START-END'.",
              structured_output=False)
    @checked.register
    def expand_result(
        id: Annotated[str, Field(min_length=1, description="Result id from search_code, or 'path:START-END'.")],
        ctx: Context,
        context_lines: Annotated[int, Field(ge=0, le=MAX_CONTEXT_LINES, description="Lines before and after when there is no enclosing definition.")] = EXPAND_CONTEXT_LINES,
        max_tokens: Annotated[int, Field(ge=MIN_TOKENS, le=MAX_TOKENS_LIMIT)] = DEFAULT_MAX_TOKENS,
    ) -> str:
        res = call(ctx, "expand", id=id, context_lines=context_lines, max_tokens=max_tokens)
        return SearchResults.from_dict(res).to_xml()

    return mcp


def serve_stdio(root: str | Path = ".", settings=None, wait: Optional[float] = None, config_path=None) -> None:
    """Serve on stdin/stdout until stdin closes; every malformed line gets an answer (coderag/mcp_stdio.py)."""
    import anyio

    from coderag.mcp_stdio import run_stdio

    anyio.run(run_stdio, build_server(root, settings, wait, tune_gc=True, config_path=config_path))
