"""Where an index lives: <root>/.coderag/, found from any folder inside the root like git finds .git.

The index holds the text of every indexed file, so it is private to its user: the folder is 0700 and
its files 0600, whatever the umask (see `private_umask` and `tighten_index`)."""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from coderag.base.errors import IndexAccessError

INDEX_DIR_NAME = ".coderag"
DB_NAME = "index.db"
DB_FILE_SUFFIXES = ("", "-wal", "-shm")  # a SQLite database in WAL mode is these files together
SHARD_NAME = "shard"
LOCK_NAME = "writer.lock"
LOG_NAME = "coderag.log"
OWNER_FILE = "owner.json"  # written by the owner (coderag/service.py) while it serves: its pid, socket, code
SOCKET_NAME = "owner.sock"  # the owner's socket, in the index folder where the path is short enough
PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600

_umask_lock = threading.Lock()
_umask_users = 0
_umask_saved = 0


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created inside the block are 0600 and folders 0700 (umask 077); the umask is restored after.

    The umask is process-wide, so while one thread is inside, files any thread of this process creates are
    private too: callers keep the block to the creation or writing of index files (the SQLite database,
    the shard's segments, owner.json, the log), in processes that write nothing else of the user's meanwhile.
    Nested and concurrent blocks share one saved umask (counted), so the last one out restores the user's."""
    global _umask_users, _umask_saved
    with _umask_lock:
        if _umask_users == 0:
            _umask_saved = os.umask(PRIVATE_UMASK)
        _umask_users += 1
    try:
        yield
    finally:
        with _umask_lock:
            _umask_users -= 1
            if _umask_users == 0:
                os.umask(_umask_saved)


@dataclass
class Tightened:
    """What `tighten_index` changed: the folder's old mode (None when it was private) and the count of
    files and folders that other users could read."""

    folder_mode: int | None = None
    entries: int = 0

    def __bool__(self) -> bool:
        return self.folder_mode is not None or self.entries > 0

    def note(self) -> str:
        if not self:
            return f"private ({DIR_MODE:04o}, files {FILE_MODE:04o})"
        parts = []
        if self.folder_mode is not None:
            parts.append(f"the folder was {self.folder_mode:04o}")
        if self.entries:
            parts.append(f"{self.entries} files or folders were open to other users")
        return f"tightened ({', '.join(parts)}; now {DIR_MODE:04o}, files {FILE_MODE:04o})"


def tighten_index(d: str | Path) -> Tightened:
    """chmod the index folder to 0700 and everything under it (the shard recursively) to 0600 / 0700.

    An index written by an older coderag (or under a loose umask) was 0755/0644: readable by every local
    user. Links are left alone (chmod would follow them out of the index)."""
    d = Path(d)
    done = Tightened()
    try:
        mode = stat.S_IMODE(os.lstat(d).st_mode)
    except OSError:
        return done
    if mode != DIR_MODE:
        os.chmod(d, DIR_MODE)
        done.folder_mode = mode
    for dirpath, dirnames, filenames in os.walk(d):
        for name, want in [(n, DIR_MODE) for n in dirnames] + [(n, FILE_MODE) for n in filenames]:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode) or not stat.S_IMODE(st.st_mode) & 0o077:
                    continue
                os.chmod(p, want if stat.S_ISDIR(st.st_mode) else FILE_MODE)
                done.entries += 1
            except OSError:  # vanished meanwhile, or not ours: nothing to tighten
                continue
    return done


def remove_index_files(idx: Path, keep_db_as: str = "") -> None:
    """Delete the index database (with its WAL) and the shard in index folder `idx`, for a rebuild from
    scratch; the folder, its lock and its log stay. `keep_db_as`: the database is renamed to this name
    in `idx` instead (with its WAL, so nothing it committed is lost), for what the rebuild reuses."""
    import shutil

    for suffix in DB_FILE_SUFFIXES:
        old = idx / (DB_NAME + suffix)
        if keep_db_as and old.exists():
            old.replace(idx / (keep_db_as + suffix))
        else:
            old.unlink(missing_ok=True)
    shutil.rmtree(idx / SHARD_NAME, ignore_errors=True)


def cache_dir(*parts: str) -> Path:
    """coderag's cache outside every repository (ONNX exports of the model, eval corpora, benchmark indexes):
    $CODERAG_CACHE_DIR, else ~/.cache/coderag; `parts` name a folder in it."""
    base = os.environ.get("CODERAG_CACHE_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "coderag").joinpath(*parts)


def index_dir(root: str | Path) -> Path:
    return Path(root) / INDEX_DIR_NAME


def ensure_index_dir(root: str | Path) -> Path:
    """Create <root>/.coderag (0700) with a .gitignore of `*`, so the index never shows up in git status;
    tighten an existing one that other users can read."""
    d = index_dir(root)
    check_access(d)
    d.parent.mkdir(parents=True, exist_ok=True)  # the repository itself: the user's umask
    with private_umask():
        d.mkdir(mode=DIR_MODE, exist_ok=True)
        keep_out_of_git(d, "the index")
    tighten_index(d)
    return d


def keep_out_of_git(folder: Path, what: str) -> None:
    """A `.gitignore` of `*` in `folder`, which coderag made and fills with `what` (derived data): git status
    never shows it, and the walk of any index leaves it out (nodes/ignore.py reads nested .gitignore files)."""
    gi = folder / ".gitignore"
    if not gi.exists():
        gi.write_text(f"# Created by coderag: {what} is derived data.\n*\n", encoding="utf-8")


def check_access(idx: Path) -> None:
    """Refuse, in words, index folder `idx` when this user cannot read and write it: a teammate's in a checkout
    two users share. It holds the text of every file indexed, so it is private to whoever built it
    (`ensure_index_dir`), and each user keeps an index of their own checkout."""
    try:
        st = os.stat(idx)
    except FileNotFoundError:
        return
    except PermissionError:
        st = None  # a folder above it is closed to this user
    if st is not None and os.access(idx, os.R_OK | os.W_OK | os.X_OK):
        return
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name if st is not None else "another user"
    except KeyError:
        owner = f"uid {st.st_uid}"
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = f"uid {os.getuid()}"
    raise IndexAccessError(
        f"The index {idx} belongs to {owner} and only they can use it ({DIR_MODE:04o}: it holds the text of every "
        f"file indexed), so {me} cannot read or update it. Search it as {owner}, or clone the repository for "
        f"yourself and index your clone (coderag index PATH): each checkout keeps its own index.", root=idx.parent)


def find_root(start: str | Path) -> Path | None:
    """The nearest folder at or above `start` that holds an index (IndexAccessError when the nearest one is
    another user's)."""
    p = Path(start).resolve()
    for cand in (p, *p.parents):
        idx = cand / INDEX_DIR_NAME
        check_access(idx)
        if (idx / DB_NAME).is_file():
            return cand
    return None
