"""Ignore rules: nested .gitignore, .git/info/exclude, .coderagignore and built-in noise, as git applies them."""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import pathspec

from coderag.base.paths import INDEX_DIR_NAME
from coderag.nodes.file_classes import DATA, SECRET, data_name, secret_name
from coderag.nodes.file_roles import SOURCE, file_role
from coderag.nodes.git_attributes import ATTRIBUTES_NAME, ThirdPartyMarks
from coderag.nodes.languages import detect_language
from coderag.nodes.rule_files import read_lines

if TYPE_CHECKING:  # scan.py imports this module
    from coderag.nodes.scan import SkipLog

log = logging.getLogger(__name__)

CODERAG_IGNORE_NAME = ".coderagignore"
IGNORE_FILE_NAMES = (".gitignore", CODERAG_IGNORE_NAME)
RULE_FILE_NAMES = IGNORE_FILE_NAMES + (ATTRIBUTES_NAME,)  # a change to one may change what the index holds

# Lowest precedence: a user's .gitignore or .coderagignore can re-include any of these with "!pattern".
# Lock files, CSVs, SVGs, snapshots ... are file_classes.data_name, below these, and counted as "data".
# `.~*` is the copy Jupyter keeps of a notebook while it saves it.
BUILTIN_PATTERNS = """
.git/
.hg/
.svn/
.bzr/
node_modules/
bower_components/
jspm_packages/
vendor/
.venv/
venv/
.tox/
.nox/
__pycache__/
.mypy_cache/
.pytest_cache/
.ruff_cache/
.ipynb_checkpoints/
.~*
*.egg-info/
.eggs/
build/
dist/
target/
.next/
.nuxt/
.svelte-kit/
.gradle/
.terraform/
coverage/
htmlcov/
.idea/
.DS_Store
*.min.js
*.min.css
*.bundle.js
*.map
*_pb2.py
*_pb2_grpc.py
*.pb.go
*.pyc
*.pyo
*.so
*.dylib
*.dll
*.exe
*.o
*.a
*.lib
*.obj
*.class
*.jar
*.war
*.png
*.jpg
*.jpeg
*.gif
*.ico
*.webp
*.bmp
*.tif
*.tiff
*.psd
*.pdf
*.zip
*.tar
*.gz
*.tgz
*.bz2
*.xz
*.7z
*.rar
*.whl
*.woff
*.woff2
*.ttf
*.otf
*.eot
*.mp3
*.mp4
*.wav
*.ogg
*.mov
*.avi
*.db
*.sqlite
*.sqlite3
*.bin
*.dat
*.npy
*.npz
*.pkl
*.pickle
*.pt
*.pth
*.onnx
*.safetensors
*.parquet
*.h5
""".split()


def _compile(lines: list[str], source: str) -> pathspec.GitIgnoreSpec | None:
    """Compile gitignore lines; a malformed line is skipped (as git does) with a warning naming it."""
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:
        good = []
        for ln in lines:
            try:
                pathspec.GitIgnoreSpec.from_lines([ln])
                good.append(ln)
            except Exception as exc:  # re.error and pathspec's own errors
                log.warning("ignoring malformed pattern %r in %s: %s", ln, source, exc)
        return pathspec.GitIgnoreSpec.from_lines(good) if good else None


class IgnoreMatcher:
    """Decides whether a path under `root` is ignored.

    Levels are applied from the root down, the deepest match wins, and a negation (`!x`)
    re-includes, as in git. At each level `.gitignore` comes before `.coderagignore`, so the
    latter can override the former. The index folder is always ignored, and so is every file whose
    name says it is a secret (file_classes.secret_name): a hard rule no `!pattern` overrides. Files
    whose name says they are data (file_classes.data_name) are ignored unless a `.coderagignore`
    re-includes them with `!pattern`: a `.gitignore` negation only says the data belongs in git
    (pvlib's `!pvlib/data/*.csv` made 38,000 chunks of CSV rows out of 39,000). Source files that a
    `.gitattributes` marks `linguist-vendored` or `linguist-generated` (nodes/git_attributes.py) are ignored
    the same way: the owners said the code is not theirs. A test, doc or example so marked stays (some
    projects mark their tests vendored only to keep them out of GitHub's language statistics).

    The walk never opens an ignored file, so the matcher is where secrets, data files and marked code are
    seen: with `skips`, each file ignored for one of those reasons is noted there ("secret", "data",
    "vendored", "generated").

    Examples:
        >>> m = IgnoreMatcher("/repo")                      # doctest: +SKIP
        >>> m.is_ignored("node_modules", is_dir=True)       # doctest: +SKIP
        True
    """

    def __init__(self, root: str | os.PathLike, extra_patterns: list[str] | None = None,
                 skips: "SkipLog | None" = None) -> None:
        self.root = Path(root)
        self.skips = skips
        root_lines = list(BUILTIN_PATTERNS) + list(extra_patterns or [])
        root_lines += read_lines(self.root / ".git" / "info" / "exclude")
        self._root_extra = root_lines
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._coderag_specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._marks = ThirdPartyMarks(self.root)

    def _spec_for(self, dir_rel: str) -> pathspec.GitIgnoreSpec | None:
        if dir_rel not in self._specs:
            d = self.root / dir_rel if dir_rel else self.root
            lines = list(self._root_extra) if not dir_rel else []
            for name in IGNORE_FILE_NAMES:
                lines += read_lines(d / name)
            self._specs[dir_rel] = _compile(lines, str(d))
        return self._specs[dir_rel]

    def _coderag_spec_for(self, dir_rel: str) -> pathspec.GitIgnoreSpec | None:
        if dir_rel not in self._coderag_specs:
            d = self.root / dir_rel if dir_rel else self.root
            self._coderag_specs[dir_rel] = _compile(read_lines(d / CODERAG_IGNORE_NAME), str(d))
        return self._coderag_specs[dir_rel]

    def _coderagignore_includes(self, parts: tuple[str, ...]) -> bool:
        """True if the deepest `.coderagignore` rule matching the file is a negation (`!pattern`)."""
        included = False
        for depth in range(len(parts)):
            spec = self._coderag_spec_for("/".join(parts[:depth]))
            if spec is not None:
                result = spec.check_file("/".join(parts[depth:]))
                if result.include is not None:
                    included = not result.include
        return included

    def is_ignored(self, rel_path: str, is_dir: bool = False) -> bool:
        """True if `rel_path` (POSIX, relative to the root) is ignored. Parents are not checked:
        the walker prunes ignored directories before it looks inside them."""
        parts = PurePosixPath(rel_path).parts
        if not parts:
            return False
        if parts[0] == INDEX_DIR_NAME:
            return True
        low_hit = None  # (reason, detail) of a rule below every ignore file: any of them overrides it
        if not is_dir:
            why = secret_name(rel_path)
            if why is not None:  # before every ignore file: no negation reaches it
                self._note(rel_path, SECRET, why)
                return True
            low_hit = self._low_hit(rel_path)
        ignored, matched = low_hit is not None, False
        for depth in range(len(parts)):
            dir_rel = "/".join(parts[:depth])
            spec = self._spec_for(dir_rel)
            if spec is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = spec.check_file(sub)
            if result.include is not None:
                ignored, matched = result.include, True
        if low_hit is not None and matched:
            if not ignored and not self._coderagignore_includes(parts):
                ignored = True  # re-included by a .gitignore `!pattern` only: in git, still data or others' code to us
            else:
                low_hit = None  # the user's rule decided: ignored by it, or re-included by a .coderagignore
        if low_hit is not None:  # ignored as data, or as vendored or generated code
            self._note(rel_path, *low_hit)
        return ignored

    def _low_hit(self, rel_path: str) -> tuple[str, str] | None:
        """Why the file is ignored below every ignore file: its name says it is data, or it is source code
        that a `.gitattributes` marks vendored or generated. None when neither."""
        data_hit = data_name(rel_path)
        if data_hit is not None:
            return DATA, f"matches {data_hit}"
        mark = self._marks.mark(rel_path)
        if mark is None or file_role(rel_path, detect_language(rel_path)) != SOURCE:
            return None
        return mark, f"marked linguist-{mark} in {ATTRIBUTES_NAME}"

    def _note(self, rel_path: str, reason: str, detail: str) -> None:
        if self.skips is not None:
            self.skips.add(rel_path, reason, detail)

    def is_ignored_anywhere(self, rel_path: str) -> bool:
        """True if the file or any of its parent directories is ignored (for paths not found by walking)."""
        parts = PurePosixPath(rel_path).parts
        for i in range(1, len(parts)):
            if self.is_ignored("/".join(parts[:i]), is_dir=True):
                return True
        return self.is_ignored(rel_path, is_dir=False)
