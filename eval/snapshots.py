"""Local snapshot corpora: checkouts of repositories at exact commits, made by a dataset's own script.

SWE-bench's issues name commits of whole git histories, which no package registry serves, so such a
corpus cannot be fetched like the pinned archives of :mod:`coderag.eval.corpora`. The dataset's
``prepare.sh`` writes one folder per (repo, commit), ``<owner>+<name>@<commit[:12]>``, into
``$<env>`` or ``<temp dir>/<name>``; this module only locates them and, when they are missing,
says which command makes them. A query of such a corpus names its snapshot by ``repo`` and
``commit``.

Examples:
    >>> snapshot_name("pvlib/pvlib-python", "04a523fafbd61bc2e49420963b84ed8e2bd1b3cf")
    'pvlib+pvlib-python@04a523fafbd6'
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SNAPSHOTS", "SnapshotCorpus", "snapshot_name", "snapshot_root"]


@dataclass(frozen=True)
class SnapshotCorpus:
    """Checkouts of repositories at given commits, one folder each (``<owner>+<name>@<commit[:12]>``), made
    by ``prepare`` (a script next to the dataset's source) into ``$<env>`` or ``<temp dir>/<name>``."""

    name: str
    env: str  # the environment variable that names the folder of snapshots
    prepare: str  # what writes the snapshots: a script relative to the project root, or a command
    languages: tuple[str, ...]
    description: str = ""

    def folder(self) -> Path:
        # prepare.sh's default is $(dirname "$(mktemp -u)")/<name>, which is tempfile.gettempdir() here.
        explicit = os.environ.get(self.env)
        return Path(explicit).expanduser() if explicit else Path(tempfile.gettempdir()) / self.name

    def missing_message(self, where: Path, snapshot: str | None = None) -> str:
        what = (f"snapshot {snapshot} of corpus {self.name!r} is" if snapshot
                else f"the snapshots of corpus {self.name!r} are")
        mirror = "<folder with <owner>+<name>/repo git dirs>"
        if self.prepare.endswith(".sh"):  # a dataset's own script, relative to the project root
            script = (Path(__file__).resolve().parents[1] / self.prepare).resolve()
            how = f"MIRROR_DIR={mirror} OUT={where} {script}"
        else:  # a command of ours
            how = f"{self.prepare} --mirror {mirror} --out {where}"
        return (f"{what} not in {where}. Make them with:\n  {how}\n"
                f"or point {self.env} (or --corpus-root {self.name}=PATH) at the folder that holds them.")


SNAPSHOTS: dict[str, SnapshotCorpus] = {
    "swebench-dev": SnapshotCorpus(
        name="swebench-dev",
        env="CODERAG_SWEBENCH_DIR",
        prepare="../shared/datasets/swebench-dev/prepare.sh",
        languages=("python",),
        description="28 SWE-bench Lite issues (dev split + astropy) over 6 Python repositories, one checkout "
                    "per (repo, commit).",
    ),
    "bug-reports": SnapshotCorpus(
        name="bug-reports",
        env="CODERAG_BUGREPORTS_DIR",
        prepare="python -m coderag.eval.bug_reports snapshots",
        languages=("python", "typescript", "rust"),
        description="Real bug reports of the five held-out projects (anyio, tomlkit, ajv, orjson, jiter) and of "
                    "marshmallow, astroid and sqlfluff (tune), each searched at the commit before its fix "
                    "(eval/bug_reports.py).",
    ),
    "query-core-repo": SnapshotCorpus(
        name="query-core-repo",
        env="CODERAG_HISTORY_DIR",
        prepare="python -m coderag.eval.tune_commits snapshots",
        languages=("typescript",),
        description="query-core's tune questions asked of the whole TanStack Query repository (its docs, examples "
                    "and sibling packages around query-core), at the snapshot the tune commits are mined at.",
    ),
    "fresh-repos": SnapshotCorpus(
        name="fresh-repos",
        env="CODERAG_HISTORY_DIR",
        prepare="python -m coderag.eval.ranker_data snapshots",
        languages=("python", "typescript", "rust"),
        description="The held-out questions of anyio, tomlkit, ajv, orjson and jiter asked of each whole "
                    "repository (tests, docs, benchmarks and tooling beside the package), at the snapshot its "
                    "held-out commit messages are mined at.",
    ),
    "history": SnapshotCorpus(
        name="history",
        env="CODERAG_HISTORY_DIR",
        prepare="python -m coderag.eval.ranker_data snapshots",
        languages=("python", "javascript", "typescript", "go", "rust", "java", "c", "cpp", "ruby", "php"),
        description="Commit messages, test descriptions and docstrings mined from the histories of the "
                    "repositories of eval/history_repos.py, one snapshot per repository (eval/README.md).",
    ),
}


def snapshot_name(repo: str, commit: str) -> str:
    """The folder prepare.sh writes for `repo` ("owner/name") at `commit`: ``owner+name@<commit[:12]>``."""
    return f"{repo.replace('/', '+')}@{commit[:12]}"


def snapshot_root(name: str, repo: str, commit: str, folder: Path | None = None) -> Path:
    """The checkout of `repo` at `commit` in snapshot corpus `name` (in `folder`, default its configured one).

    Raises :class:`CorpusMissingError`, with the command that makes it, when it is not there."""
    from coderag.eval.corpora import CorpusMissingError  # corpora imports this module

    corpus = SNAPSHOTS[name]
    base = Path(folder) if folder is not None else corpus.folder()
    root = base / snapshot_name(repo, commit)
    if not root.is_dir():
        raise CorpusMissingError(corpus.missing_message(base, None if not base.is_dir() else root.name))
    return root
