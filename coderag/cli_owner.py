"""`coderag index` and `coderag status` beside a running owner.

`index` goes through the owner: it refreshes the index, or builds it again (`--rebuild`, an edited model or
chunking setting), and the command follows that build to its end with its own progress bar, then prints
the same summary as an index built in the command's own process. `status` says what the owner is doing
and what it made of an edited settings file, or, with no owner, whether the settings differ from those
the index was built with."""

from __future__ import annotations

import time
from types import SimpleNamespace
from pathlib import Path
from typing import Callable, Optional

from coderag.base.errors import CodeRagError

POLL_S = 0.5


def index_through_owner(client, rebuild: bool, progress: Callable[[str, int, int], None],
                        say: Callable[[str], None]) -> SimpleNamespace:
    """What the owner did, as an IndexSummary-like namespace; `say` gets one line when it builds."""
    from coderag.client import RemoteError

    try:
        answer = client.call("build", rebuild=rebuild)
    except RemoteError as exc:  # an owner started by an older coderag, still running after an upgrade
        if "unknown method" not in str(exc):
            raise
        pid = client.call("ping")["pid"]
        if rebuild:
            raise CodeRagError(f"The owner of {client.root} (pid {pid}) runs an older coderag, which cannot rebuild "
                               f'for you: stop it ("kill {pid}"), then run --rebuild again.') from exc
        answer = {"summary": client.call("refresh")}
    if "building" in answer:
        pid = client.call("ping")["pid"]
        say(f"the owner of {client.root} (pid {pid}) builds the index in the background ({answer['building']}); "
            "following it (Ctrl-C stops following, not the build)")
        summary = _follow(client, progress)
    else:
        summary = answer["summary"]
    s = SimpleNamespace(**summary)
    s.chunks_per_s = s.chunks / s.seconds if s.seconds else 0.0
    s.skip_items = [tuple(x) for x in s.skip_items]
    return s


def _follow(client, progress: Callable[[str, int, int], None]) -> dict:
    """Poll the owner's status until its build is over: its file counts drive `progress` ("files" for the
    BM25 pass, "vectors" for the dense one) and its embedded chunks the chunk count."""
    from coderag.owner_changes import BUILDING  # the owner's phases

    embedded = 0
    while True:
        st = client.call("status", build_items=True)
        p = st["indexing"]
        if p["embedded"] > embedded:
            progress("embed", p["embedded"] - embedded, 0)
            embedded = p["embedded"]
        if p["phase"] in ("bm25", "indexing") and p["total"]:
            progress("files", p["done"], p["total"])
        elif p["phase"] == "dense" and p["total"]:
            progress("vectors", p["done"], p["total"])
        if p["phase"] == "failed":
            raise CodeRagError(f"The owner's build of {client.root} failed: {p['error']}. Its log is "
                               f"{st['index_dir']}/coderag.log.")
        if p["phase"] not in BUILDING and st.get("last_build"):
            return st["last_build"]
        time.sleep(POLL_S)


def status_lines(root: Path, owner_pid: Optional[int], built_with: Optional[str],
                 built_model_id: Optional[str] = None, built_model_files: Optional[str] = None) -> list[str]:
    """`coderag status` lines on the settings and the build: the owner's own account when one runs (its
    build phase, what it did with an edited settings file), else a comparison of the settings file with
    `built_with`, the fingerprint of the index (and `built_model_id`, its model's digest: the same model
    moved is no change; `built_model_files`, its files' names, sizes and times: other bytes in the same folder
    are another model)."""
    from coderag.base.build_clock import worded
    from coderag.client import owner_client
    from coderag.base.config import load_settings
    from coderag.base.errors import ConfigError
    from coderag.owner_changes import BUILDING

    client = owner_client(root, replace_other_code=False) if owner_pid else None
    if client is not None:
        try:
            st = client.call("status")
        finally:
            client.close()
        lines, p = [], st["indexing"]
        if p["phase"] in BUILDING:
            why = f" ({p['rebuild']})" if p.get("rebuild") else ""
            left = f", {worded(p['seconds_left'])} left" if p.get("seconds_left") is not None else ""
            meanwhile = "; searches are answered from the index as it was until then" if p.get("beside") else ""
            lines.append(f"building:    {p['phase']} {p['done']}/{p['total']} files{left}{why}{meanwhile}")
        note = (st.get("settings") or {}).get("note")
        lines += [f"settings:    {note}"] if note else []
        return lines + ([f"model:       {st['model_note']}"] if st.get("model_note") else [])
    try:
        settings = load_settings(root)
    except ConfigError as exc:
        return [f"settings:    invalid, the next command refuses them: {exc}"]
    from coderag.pipelines.fingerprint import fingerprint, model_changed, moved_model

    current = fingerprint(settings)
    if built_with and built_with != current and not moved_model(built_with, built_model_id, settings):
        return ['settings:    the model or chunking changed since the index was built: the next "coderag index" '
                "(or the owner the next search starts) builds it again, reusing the vectors of unchanged chunks"]
    if built_with == current and model_changed(settings.model_dir(), built_model_id, built_model_files):
        return [f"model:       its files changed in {settings.model_dir()} since the index was built: the next "
                '"coderag index" (or the owner the next search starts) builds it again, embedding every chunk']
    return []
