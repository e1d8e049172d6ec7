"""eval/tune_commits.py over real git histories: a seeded sample per project and kind, the same on every run and
for the first projects when one is added, each mined at its pinned snapshot."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from coderag.eval.tune_commits import tune_commits


def _project(mirror: Path, name: str, n: int) -> str:
    """A bare git dir `<mirror>/<owner>+<name>/repo` whose history is `n` commits that each describe a change to
    one source file; returns its last commit."""
    work = mirror.parent / "work" / name
    work.mkdir(parents=True)
    env = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com", "HOME": str(work), "PATH": "/usr/bin:/bin"}

    def git(*args: str, cwd: Path = work) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    for i in range(n):
        (work / f"mod{i}.py").write_text(f"def handler_{i}(request):\n    return request.value * {i + 2}\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"Scale the request value in handler number {i}")
    git("clone", "-q", "--bare", str(work), str(mirror / f"dev+{name}" / "repo"), cwd=mirror.parent)
    return git("rev-parse", "HEAD").strip()


@pytest.fixture()
def mirror(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    m = tmp_path / "mirror"
    m.mkdir()
    return m, {"dev/one": _project(m, "one", 6), "dev/two": _project(m, "two", 5)}


def test_tune_commits_are_a_seeded_sample_of_each_project_mined_at_its_snapshot(tmp_path: Path, mirror) -> None:
    m, repos = mirror
    sizes = {"commit": 3}
    first = tune_commits(m, tmp_path / "snaps", repos, sizes)
    assert [r["repo"] for r in first] == ["dev/one"] * 3 + ["dev/two"] * 3
    assert {r["split"] for r in first} == {"tune"} and {r["corpus"] for r in first} == {"history"}
    assert all(r["commit"] == repos[r["repo"]] for r in first)
    assert (tmp_path / "snaps" / f"dev+one@{repos['dev/one'][:12]}" / "mod5.py").is_file()
    # The same queries again; and the first project's the same when only it is asked for.
    assert json.dumps(tune_commits(m, tmp_path / "snaps", repos, sizes)) == json.dumps(first)
    alone = tune_commits(m, tmp_path / "snaps", {"dev/one": repos["dev/one"]}, sizes)
    assert alone == first[:3]
    with pytest.raises(SystemExit, match="fetch dev/none"):
        tune_commits(m, tmp_path / "snaps", {"dev/none": "0" * 40}, sizes)
