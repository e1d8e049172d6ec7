"""The `coderag` command line. Only click and the stdlib at import time: each command imports its own pipeline."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from coderag.cli_eval import eval_command, train_adapter_command, train_ranker_command
from coderag.cli_status import indexed_root, status_command
from coderag.base.budget import DEFAULT_MAX_TOKENS
from coderag.base.errors import CodeRagError, IndexLockedError
from coderag.base.lock import DEFAULT_WAIT_S


WAIT_HELP = ("Seconds to wait while another coderag process holds the index (an indexing run, a search, "
             "an owner starting up); an owner that starts serving meanwhile is used at once.")


def _wait_option(fn):
    return click.option("--wait", type=click.FloatRange(min=0), default=DEFAULT_WAIT_S, show_default=True,
                        metavar="SECONDS", help=WAIT_HELP)(fn)


def _say(line: str) -> None:
    click.echo(line, err=True)


class _Commands(click.Group):
    """The one place the CLI renders the errors a user can fix: one line on stderr with the next step.

    A CodeRagError (a RemoteError is the owner's, already in words) exits 1 with its message; bad search
    options (a pydantic ValidationError here, or one the owner met) exit 2 worded by
    coderag.base.errors.validation_text, as the MCP server's tool errors are. Anything else is a bug: traceback."""

    def invoke(self, ctx: click.Context):
        from coderag.base.errors import error_text

        try:
            return super().invoke(ctx)
        except CodeRagError as exc:
            if getattr(exc, "type", None) == "ValidationError":
                raise click.UsageError(str(exc), ctx) from exc
            raise click.ClickException(str(exc)) from exc
        except ValueError as exc:
            if type(exc).__name__ != "ValidationError":  # pydantic's, not imported at --help time
                raise
            raise click.UsageError(error_text(exc), ctx) from exc


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="coderag")
def main() -> None:
    """coderag: local code retrieval for coding agents.

    \b
    coderag index [PATH]      build or update the index of a repository
    coderag search QUERY      find the code that answers QUERY
    coderag status [PATH]     what is indexed, and what changed since
    coderag init-claude       set up Claude Code in this repository (MCP server, CLAUDE.md, /search)
    coderag mcp               the MCP server (stdio) that Claude Code starts
    coderag serve             keep an index warm in the foreground; other commands become its clients
    coderag eval              recall, MRR, nDCG, tokens and latency on labelled queries, per variant
    """


@main.command()
@click.argument("path", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--rebuild", is_flag=True, help="Drop the index and build it again from scratch (the vectors of "
              "chunks made again are reused, not embedded again).")
@click.option("--verbose", "-v", is_flag=True, help="List every skipped file with its reason.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="Settings file (default: $CODERAG_CONFIG or PATH/qdrant.yaml).")
@_wait_option
def index(path: Path, rebuild: bool, verbose: bool, config: Path | None, wait: float) -> None:
    """Build or update the index of PATH (default: the current folder).

    Unchanged files cost a stat; changed files replace their chunks; deleted files leave nothing behind.
    """
    # Deferred: the ingestion module pulls LlamaIndex only when files changed.
    from coderag.cli_progress import IndexProgress
    from coderag.client import IndexClient, owner_or_open
    from coderag.base.config import load_settings
    from coderag.base.paths import private_umask
    from coderag.pipelines.index_repository import index_repository

    settings = load_settings(path, config)
    progress = IndexProgress()  # a rich bar on a terminal; one line per phase in a pipe or CI log

    def index_here(lock_wait: float = 0.0):
        with private_umask():  # this command writes only the index's files: 0600 (restored when it returns)
            return index_repository(path, settings, rebuild=rebuild, progress=progress, wait=lock_wait)

    root = _root_for(path)
    try:
        # A running owner (coderag serve / mcp, the background one) does the work when there is one, even one
        # starting up; a rebuild too: it builds again in the background and searches go on meanwhile.
        target = owner_or_open(root, index_here, wait, _say, what="index")
        if isinstance(target, IndexClient):
            from coderag.cli_owner import index_through_owner

            try:
                s = index_through_owner(target, rebuild, progress, _say)
            finally:
                target.close()
        else:
            s = target
    finally:
        progress.close()
    skipped = sum(s.skipped.values())
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(s.skipped.items()))
    click.echo(f"Indexed {s.root} in {s.seconds:.2f} s")
    click.echo(f"  files:  {s.files_seen} seen, {s.indexed} indexed, {s.unchanged} unchanged, {s.removed} removed, "
               f"{skipped} skipped" + (f" ({reasons})" if reasons else ""))
    click.echo(f"  chunks: {s.chunks} written ({s.embedded} embedded, {s.cached} from cache, "
               f"{s.duplicates} duplicates), {s.chunks_per_s:.1f} chunks/s")
    if getattr(s, "started_over", False):  # an owner's summary (a dict) may come from an older coderag
        from coderag.pipelines.fingerprint import SETTINGS_CHANGED

        why = getattr(s, "rebuild_reason", None) or SETTINGS_CHANGED
        click.echo(f"  rebuilt: {why}" + ("; the vectors of unchanged chunks were reused" if s.cached else ""))
    if s.upgraded:
        click.echo("  upgraded from an older coderag: " + ", ".join(f"{v} {k}" for k, v in s.upgraded.items()))
    notes = getattr(s, "notes", {})  # an owner's summary (a dict) may come from an older coderag
    if notes:  # indexed, with their text changed (nodes/file_text.py)
        click.echo("  notes:  " + ", ".join(f"{n} {k}" for k, n in sorted(notes.items())))
    if verbose and s.skip_items:
        click.echo("  skipped:")
        for p, reason, detail in sorted(s.skip_items):
            click.echo(f"    {p}: {reason}" + (f" ({detail})" if detail else ""))
    if verbose and notes:
        click.echo("  indexed with notes:")
        for p, note, detail in sorted(tuple(x) for x in s.note_items):
            click.echo(f"    {p}: {note} ({detail})")


@main.command()
@click.argument("query")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Repository, or any folder inside it (the nearest indexed ancestor is used).")
@click.option("--files", "file_pattern", metavar="GLOB",
              help="Only paths matching: comma-separated globs, '!' excludes, {a,b} alternatives, "
                   "e.g. 'src/**/*.py,!tests/**' or '**/*.{py,rst}'.")
@click.option("--keyword", "-k", "keywords", multiple=True, metavar="K", help="Exact identifier to boost (repeatable).")
@click.option("--exact", is_flag=True, help="Keep only chunks that contain every --keyword.")
@click.option("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, show_default=True, help="Budget for the whole output.")
@click.option("--top-k", type=int, default=None, help="Fused candidates before merging and packing.")
@click.option("--retriever", type=click.Choice(["hybrid", "bm25", "dense"]), default="hybrid", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "xml", "json"]), default=None,
              help="Default: text on a terminal, xml otherwise.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="Settings file.")
@click.option("--no-daemon", is_flag=True, help="Open the index in this process instead of starting a background "
              "owner when none is running (also: CODERAG_NO_DAEMON=1).")
@_wait_option
def search(query: str, root: Path, file_pattern: str | None, keywords: tuple[str, ...], exact: bool,
           max_tokens: int, top_k: int | None, retriever: str, fmt: str | None, config: Path | None,
           no_daemon: bool, wait: float) -> None:
    """Find the code that answers QUERY, with exact line ranges, within --max-tokens.

    With no owner running, the first search starts one in the background (`coderag serve --idle-exit`,
    service.idle_exit_s, 600 s by default) and the searches after it are answered warm."""
    from coderag.client import IndexClient, owner_or_open
    from coderag.base.config import load_settings
    from coderag.daemon import daemon_wanted, owner_for_search
    from coderag.base.paths import private_umask

    fmt = fmt or ("text" if sys.stdout.isatty() else "xml")
    params = dict(file_pattern=file_pattern, keywords=list(keywords), requires_exact_match=exact,
                  max_tokens=max_tokens, top_k=top_k, retriever=retriever, format=fmt)
    _check_search_options(query, params)  # before an owner is started or the index opened
    found = indexed_root(root)
    settings = load_settings(found, config)

    def open_here():
        # Deferred: LlamaIndex and the model load only when a search really runs here.
        from coderag.pipelines.code_index import CodeIndex

        return CodeIndex.open(found, settings=settings, create=False)

    target = None
    if daemon_wanted(no_daemon):
        target = owner_for_search(found, settings.service.idle_exit_s, wait, config, _say)
    if target is None:
        target = owner_or_open(found, open_here, wait, _say, what="search")
    if isinstance(target, IndexClient):  # the warm owner answers: no model load in this process
        from coderag.postprocessors.payload import SearchResults

        try:
            res = SearchResults.from_dict(target.call("search", query=query, **params))
        finally:
            target.close()
    else:
        index = target
        try:
            with private_umask():  # a search may re-index changed files: the index's files only
                res = index.search(query, **params)
        finally:
            index.close()
    if fmt == "json":
        click.echo(res.to_json())  # compact: the budget was counted on exactly this text
    elif fmt == "xml":
        click.echo(res.to_xml())
    else:
        _print_text(res)


# The flags of `coderag search`, by the names of the SearchOptions fields they set (errors name the flags).
SEARCH_FLAGS = {"query": "QUERY", "file_pattern": "--files", "keywords": "--keyword", "requires_exact_match": "--exact",
                "max_tokens": "--max-tokens", "top_k": "--top-k", "retriever": "--retriever", "format": "--format"}


def _check_search_options(query: str, params: dict) -> None:
    """Refuse bad search options as a usage error worded with the flags the user typed."""
    from pydantic import ValidationError

    from coderag.base.errors import validation_text
    from coderag.pipelines.search_options import SearchOptions

    try:
        SearchOptions(query=query, **params)
    except ValidationError as exc:
        raise click.UsageError(validation_text(exc, names=SEARCH_FLAGS)) from exc


def _root_for(path: Path) -> Path:
    from coderag.base.paths import find_root

    return find_root(path) or path.resolve()


@main.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Repository (default: the current folder or its nearest indexed ancestor).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="Settings file.")
@_wait_option
def mcp(root: Path, config: Path | None, wait: float) -> None:
    """Run the MCP server on stdio (Claude Code starts this; see `coderag init-claude`).

    The first coderag process on a repository owns its index and indexes it in the background; later
    ones (more Claude Code sessions, `coderag search`) become its clients.
    """
    from coderag.base.config import load_settings

    from coderag.base.errors import IndexAccessError

    try:
        root = _root_for(root)
    except IndexAccessError as exc:  # another user's index: served all the same, so each tool call says why
        root = exc.root
    settings = load_settings(root, config)
    from coderag.mcp_server import serve_stdio  # mcp SDK: imported only for this command

    serve_stdio(root, settings, wait=wait, config_path=config)  # the server's handle connects later, on its own thread


@main.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=".",
              help="Repository (default: the current folder or its nearest indexed ancestor).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="Settings file.")
@click.option("--idle-exit", type=click.FloatRange(min=0), default=0, show_default=True, metavar="SECONDS",
              help="Stop after this many seconds without a request and with no indexing under way; 0 = never. "
                   "The owner a `coderag search` starts uses service.idle_exit_s.")
@click.option("--background", is_flag=True, hidden=True, help="Started by a search: hand the index over to a "
              "process that opens it (CodeIndex.open) and stop.")
@_wait_option
def serve(root: Path, config: Path | None, idle_exit: float, background: bool, wait: float) -> None:
    """Own the index in the foreground: index what changed, watch the tree, answer other coderag processes."""
    import signal

    from coderag.client import IndexClient, owner_or_open
    from coderag.daemon import IDLE, MOVED, wait_until_idle
    from coderag.base.config import load_settings
    from coderag.service import IndexService

    root = _root_for(root)
    settings = load_settings(root, config)
    service = owner_or_open(root, lambda: IndexService(root, settings, tune_gc=True, config_path=config,
                                                       hands_over=background).start(), wait, _say,
                            what="serve the index")
    if isinstance(service, IndexClient):
        pid = service.call("ping")["pid"]
        service.close()
        raise IndexLockedError(f"{root} is already served by another coderag process (pid {pid}); "
                                   "other commands use it. Stop it first to serve from here.")
    idle = f", stops after {idle_exit:g} s idle" if idle_exit else ""
    click.echo(f"serving {root} on {service.socket_path} (pid {os.getpid()}{idle}); Ctrl-C to stop", err=True)
    stop = service.stop_requested  # set by SIGTERM, or by a process the background owner hands the index to
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        why = wait_until_idle(service, idle_exit, stop)
        if why == IDLE:
            logging.getLogger("coderag.service").info("no request for %g s: the owner of %s stops", idle_exit, root)
        elif why == MOVED:
            logging.getLogger("coderag.service").warning(
                "%s or its index folder was moved or deleted: the owner stops (the next search in the new "
                "place starts one there)", root)
            click.echo(f"{root} or its .coderag was moved or deleted: stopping (run coderag serve again in "
                       "its new place)", err=True)
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()


@main.command("init-claude")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=".", help="Repository.")
@click.option("--force", is_flag=True, help="Replace an existing coderag entry or /search command.")
def init_claude_cmd(root: Path, force: bool) -> None:
    """Set up Claude Code here: .mcp.json server entry, a CLAUDE.md section, and a /search command."""
    from coderag.claude_setup import init_claude

    report = init_claude(root, force=force)
    for line in report.lines():
        click.echo(line)
    click.echo("Next: open Claude Code in this folder, approve the project MCP server, and ask about the code. "
               "The first start indexes in the background; `coderag status` shows progress.")


def _print_text(res) -> None:
    if not res or not sys.stdout.isatty():
        click.echo(res.to_text().rstrip("\n"))  # exactly the payload the budget was counted on
        return
    from coderag.postprocessors.payload import text_name  # names on one line, as the plain text shows them

    try:
        from rich.console import Console
        from rich.syntax import Syntax
    except ImportError:  # plain text without rich
        click.echo(res.to_text())
        return
    console = Console()
    for r in res:
        flags = " [red](stale)[/red]" if r.stale else ""
        where = f"{text_name(r.file_path)}:{r.start_line}-{r.end_line}"
        console.print(f"[bold cyan]{where}[/bold cyan]  {text_name(r.symbol)}  "
                      f"[dim]{r.score:.4f}[/dim]{flags}")
        console.print(Syntax(r.text, r.language if r.language != "text" else "text", line_numbers=True,
                             start_line=r.start_line, word_wrap=False))
        if r.truncated:
            console.print(f"[dim]… truncated: lines {r.end_line + 1}-{r.full_end_line} not shown[/dim]")
    console.print(f"[dim]{len(res)} of {res.total_hits} hits, {res.tokens} tokens, {res.latency_ms:.0f} ms, "
                  f"{res.strategy}[/dim]")


main.add_command(eval_command)  # its own module: the eval's options and wiring
main.add_command(status_command)
main.add_command(train_ranker_command)
main.add_command(train_adapter_command)


if __name__ == "__main__":  # pragma: no cover
    main()
