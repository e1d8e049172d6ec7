"""`coderag status`: where the index of a folder is and what it holds. Only click and the stdlib at import time."""

from __future__ import annotations

import os
from pathlib import Path

import click


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _dir_size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


def indexed_root(path: Path) -> Path:
    """The nearest indexed folder at or above `path` (like git), or IndexMissingError saying how to make one."""
    from coderag.base.errors import IndexMissingError
    from coderag.base.paths import find_root

    found = find_root(path)
    if found is None:
        raise IndexMissingError(f'No index at or above {path.resolve()}. Run "coderag index {path}" first.')
    return found


@click.command("status")
@click.argument("path", default=".", type=click.Path(file_okay=False, path_type=Path))
def status_command(path: Path) -> None:
    """Where the index of PATH is, what it holds, and how many files changed since (without indexing)."""
    import json
    from collections import Counter

    from coderag.base.code_id import code_id
    from coderag.daemon import owner_info
    from coderag.base.lock import WriterLock
    from coderag.base.paths import DB_NAME, LOCK_NAME, index_dir, tighten_index
    from coderag.pipelines.changes import detect_changes
    from coderag.pipelines.fingerprint import MODEL_FILES_KEY, MODEL_ID_KEY
    from coderag.pipelines.skip_report import skip_report
    from coderag.store.state import SEARCHABLE, IndexState

    root = indexed_root(path)
    idx = index_dir(root)
    private = tighten_index(idx)  # an index written under a loose umask, or by an older coderag
    state = IndexState(idx / DB_NAME, readonly=True)
    try:
        counts = state.counts()
        changes = detect_changes(root, state)
        manifest = state.files()
        skipped = Counter(skip_report(state, changes.skips)[0])  # read, and never opened: as `index` counts
        notes = state.note_counts()
        built_with = state.get_meta("fingerprint")
        built_model_id = state.get_meta(MODEL_ID_KEY)
        built_model_files = state.get_meta(MODEL_FILES_KEY)
        fp = json.loads(built_with or "{}")
        last = state.get_meta("last_update") or "never"
    finally:
        state.close()
    click.echo(f"root:        {root}")
    click.echo(f"index:       {idx} ({_human_bytes(_dir_size(idx))})")
    click.echo(f"files:       {counts['files']} indexed, {sum(skipped.values())} skipped")  # the list below
    click.echo("skipped:     " + (", ".join(f"{n} {r}" for r, n in sorted(
        skipped.items(), key=lambda x: (x[0] != "secret", x[0] != "data", -x[1], x[0]))) or "none"))
    if notes:
        click.echo("notes:       " + ", ".join(f"{n} {k}" for k, n in sorted(notes.items())))
    click.echo(f"chunks:      {counts['leaves']} leaves, {counts['nodes']} nodes in all, {counts['duplicates']} duplicates")
    click.echo(f"model:       {fp.get('model', 'unknown')}")
    click.echo(f"last update: {last}")
    click.echo(f"permissions: {private.note()}")
    owner = owner_info(root)
    pid = int(owner["pid"]) if owner else None
    writer = WriterLock(idx / LOCK_NAME).held_by()
    if writer is not None and pid is not None and writer.startswith(f"pid {pid}:"):
        writer = None  # the owner's own build: status_lines below says what it is doing
    if owner is None:
        click.echo("owner:       none (the next search " + ("waits for the writer below, then starts one)"
                                                            if writer else "starts one in the background)"))
    else:
        other = "; it runs other coderag code than this command, until restarted" if owner.get("code") != code_id() \
            else ""
        click.echo(f"owner:       pid {pid} (searches and updates go through it{other})")
    from coderag.cli_owner import status_lines

    for line in status_lines(root, pid, built_with, built_model_id, built_model_files):  # the owner's build and settings, or a settings change
        click.echo(line)
    if writer is not None:  # a `coderag index` (or a notebook) at work: what it says it is doing
        click.echo(f"writer:      {writer}")
    # Deleted: files the index holds chunks of. A gone file that was only ever skipped (it vanished while
    # a run read it, say) has nothing in the index to remove.
    deleted = [p for p in changes.removed if manifest[p].status in SEARCHABLE]
    pending = changes.pending()  # not a file skipped as unreadable that still cannot be read
    if pending or deleted:
        todo = "the writer above is at work" if writer else f'run "coderag index {root}"'
        click.echo(f"pending:     {len(pending)} new or modified, {len(deleted)} deleted ({todo})")
    else:
        click.echo("pending:     none, the index is up to date")
