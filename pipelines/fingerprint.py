"""What an index was built with: its fingerprint (the model, the chunking, the model's window and the splitter's
version, on which every chunk and vector depends), and whether a set of settings may write to it. Settings of
another fingerprint build the index again (pipelines/index_repository.py, coderag/store/beside.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from coderag.base.config import Settings
from coderag.base.errors import ConfigError
from coderag.base.paths import index_dir
from coderag.store.state import IndexState

SPLITTER_VERSION = "5"  # 2: small siblings merged (chunking.min_tokens); 3: TypeScript overload signatures;
# 4: JS/TS constants defined by a wrapped function (`const X = make("X", (a) => {...})`); 5: leaves that only
# declare are marked (DECLARATION_KEY). A change that only a few files show is not a new version (which builds
# every index again: an owner answers from the old one meanwhile, but the build takes the user's cores for
# minutes): an upgrade step indexes those files again (pipelines/migrations.py), as for a CR alone ending a line.


def fingerprint(settings: Settings) -> str:
    """What the index content depends on: model and chunking. A change builds the index again."""
    return json.dumps({"model": str(settings.model_dir()), "chunking": settings.chunking.model_dump(),
                       "window": settings.embedding.window_tokens, "splitter": SPLITTER_VERSION}, sort_keys=True)


def built_otherwise(state: IndexState, fp: str) -> bool:
    """Whether the index holds chunks of another model or chunking than fingerprint `fp` (a new index
    holds none)."""
    old = state.get_meta("fingerprint")
    return old is not None and old != fp


def settings_built_with(state: IndexState, settings: Settings) -> Optional[Settings]:
    """The settings an index built with other settings than `settings` is read with: `settings` with the chunking,
    window and model of its fingerprint, for an owner that answers from it while it builds it again beside it.
    None where the index matches `settings` or holds nothing, where its model is no longer on this machine (its
    vectors answer no query another model embeds), or where its fingerprint cannot be read back."""
    from coderag.base.config import ChunkingSettings

    fp = state.get_meta("fingerprint")
    if fp is None or fp == fingerprint(settings):
        return None
    try:
        built = json.loads(fp)
        model = built["model"]
        if model != str(settings.model_dir()) and not (Path(model) / "config.json").is_file():
            return None
        embedding = settings.embedding.model_copy(update={"window_tokens": int(built["window"])})
        if model != str(settings.model_dir()):
            embedding = embedding.model_copy(update={"model_path": model})
        return settings.model_copy(update={"chunking": ChunkingSettings(**built["chunking"]), "embedding": embedding})
    except (ValueError, KeyError, TypeError):  # pydantic's ValidationError is a ValueError
        return None


def check_fingerprint(state: IndexState, fp: str, root: Path) -> None:
    """Refuse to write chunks of one configuration into an index built with another: the index would hold
    two chunkings (or two models' vectors) side by side and say nothing. Every update path checks it."""
    if built_otherwise(state, fp):
        raise ConfigError(
            f"The index in {index_dir(root)} was built with other model or chunking settings. "
            f'Run "coderag index {root}" to rebuild it with the current ones; the vectors of unchanged '
            "chunks are reused.")
