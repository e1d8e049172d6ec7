"""The settings file an owner was started with, read again when it changes (coderag/service.py applies it).

A stat per request costs microseconds, so the owner looks at every search, status and index request,
and when its watcher sees the file change: an edit of qdrant.yaml is never answered from old settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from coderag.base.config import CONFIG_ENV, CONFIG_FILE_NAME, Settings, load_settings


class SettingsFile:
    """Where the settings of `root` come from (`--config`, else $CODERAG_CONFIG as it was when the owner
    started, else <root>/qdrant.yaml), and whether that file changed since the last look."""

    def __init__(self, root: Path, config_path: Optional[str | os.PathLike] = None) -> None:
        self.root = Path(root)
        explicit = config_path or os.environ.get(CONFIG_ENV)
        self.explicit = Path(explicit).resolve() if explicit else None
        self.path = self.explicit or self.root / CONFIG_FILE_NAME
        self._stamp = self._stat()

    def _stat(self) -> Optional[tuple[int, int, int]]:
        try:
            st = self.path.stat()
        except OSError:
            return None  # no file: the defaults
        return st.st_mtime_ns, st.st_size, st.st_ino

    def reread(self) -> Optional[Settings]:
        """The settings as the file says now, when it changed (or appeared, or went) since the last look;
        None when it did not. A file that is now invalid raises ConfigError once; its next change is read."""
        stamp = self._stat()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        return load_settings(self.root, self.explicit)

    def relative_to_root(self) -> Optional[str]:
        """The file's path inside the root (what the watcher reports), or None for a file outside it."""
        try:
            return self.path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return None

    def describe(self) -> str:
        return str(self.path) if self.explicit else CONFIG_FILE_NAME
