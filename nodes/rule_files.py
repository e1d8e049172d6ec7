"""Reading a rule file the repository holds (.gitignore, .coderagignore, .gitattributes, .git/info/*) without
trusting it: a FIFO of that name must not block the walk, and a link is not followed (as git does not since
2.32). A file that cannot be read has no rules."""

from __future__ import annotations

from pathlib import Path


def read_lines(path: Path) -> list[str]:
    """The lines of the rule file at `path`, bytes that are not UTF-8 replaced; [] when it is missing, not a
    regular file, or unreadable."""
    from coderag.nodes.safe_path import open_regular  # deferred: safe_path imports the ignore rules

    fh, _, _ = open_regular(path)
    if fh is None:
        return []
    try:
        with fh:
            return fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
