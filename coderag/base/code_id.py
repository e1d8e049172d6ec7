"""Which coderag code a process runs: a short digest of its installed source and model files.

An index's owner can run for hours (a Claude Code session's `coderag mcp`, a `coderag serve`), and a
background owner for minutes after its last request. A command started after coderag was upgraded, or after
a checkout of an editable install, would otherwise be answered by the code the owner started with, with no
sign of it: other secret rules, another ranker. The owner says its digest (owner.json, ping); a command
whose own digest differs replaces a background owner and is told about one that keeps the index
(coderag/client.py).

Files are named by their path inside the package and read whole: two installs of the same code agree (a pipx
install for Claude Code and a virtual environment for the shell, whose files' times differ), and a checkout that
changes a file does not. Reading the 2 MB of the package costs a few milliseconds, once a process.
"""

from __future__ import annotations

import functools
import hashlib
import os
from importlib.util import find_spec

# The packages a search or an update runs (not coderag.eval); their model files (the learned ranker, the
# query adapter) are part of what answers.
PACKAGES = ("coderag", "coderag.pipelines", "coderag.nodes", "coderag.postprocessors")
SUFFIXES = (".py", ".json", ".npz")


@functools.cache
def code_id() -> str:
    """16 hex digits that change when the content of any source or model file of the installed coderag does."""
    files: dict[str, str] = {}
    # An installed wheel holds the subpackages inside coderag/, an editable install beside it: each is walked
    # as its own package, and coderag.eval (no part of an answer) in neither.
    nested = {name.rsplit(".", 1)[1] for name in PACKAGES if "." in name} | {"eval"}
    for name in PACKAGES:
        spec = find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            for dirpath, dirnames, filenames in os.walk(folder):
                top = name == "coderag" and os.path.samefile(dirpath, folder)
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                                     and not (top and d in nested))
                for f in filenames:
                    if f.endswith(SUFFIXES):
                        path = os.path.join(dirpath, f)
                        files[path] = f"{name}/{os.path.relpath(path, folder)}"
    digest = hashlib.sha256()
    for path, label in sorted(files.items(), key=lambda kv: kv[1]):
        try:
            with open(path, "rb") as f:
                content = f.read()
        except OSError:
            continue
        digest.update(f"{label}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:16]
