"""Where an index lives: <root>/.coderag/, found from any folder inside the root like git finds .git."""

from __future__ import annotations

from pathlib import Path

from coderag.nodes.ignore import INDEX_DIR_NAME

DB_NAME = "index.db"
SHARD_NAME = "shard"
LOCK_NAME = "writer.lock"
LOG_NAME = "coderag.log"


def index_dir(root: str | Path) -> Path:
    return Path(root) / INDEX_DIR_NAME


def ensure_index_dir(root: str | Path) -> Path:
    """Create <root>/.coderag with a .gitignore of `*`, so the index never shows up in git status."""
    d = index_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    gi = d / ".gitignore"
    if not gi.exists():
        gi.write_text("# Created by coderag: the index is derived data.\n*\n", encoding="utf-8")
    return d


def find_root(start: str | Path) -> Path | None:
    """The nearest folder at or above `start` that holds an index."""
    p = Path(start).resolve()
    for cand in (p, *p.parents):
        if (cand / INDEX_DIR_NAME / DB_NAME).is_file():
            return cand
    return None
