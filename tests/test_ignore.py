"""IgnoreMatcher: git's precedence (deepest level wins, negation re-includes), .coderagignore over .gitignore."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.scan import SkipLog, walk


def _walked(root: Path) -> set[str]:
    return {e.rel_path for e in walk(root, IgnoreMatcher(root), SkipLog())}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_files(tmp_path / "repo", {
        ".gitignore": "*.log\nlogs/\nbuild_out/\ndocs/api.md\n/fixtures/\n!vendor/\n",
        "sub/.gitignore": "!keep.log\n",
        "sub/keep.log": "kept\n",
        "sub/drop.log": "dropped\n",
        "sub/deeper/keep.log": "kept too\n",
        "top.log": "dropped\n",
        "logs/.gitignore": "!important.log\n",
        "logs/important.log": "inside an ignored folder: git never looks\n",
        ".git/info/exclude": "# local excludes\nsecret.txt\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        "secret.txt": "hunter2\n",
        ".coderagignore": "!docs/api.md\nsnapshots/\n",
        "docs/api.md": "# API\n",
        "snapshots/case.py": "EXPECTED = 1\n",
        "fixtures/a.py": "A = 1\n",
        "lib/fixtures/b.py": "B = 1\n",
        "build_out": "a file, not a folder\n",
        "node_modules/left-pad/index.js": "module.exports = 1;\n",
        "web/node_modules/x/index.js": "module.exports = 2;\n",
        "vendor/lib.go": "package lib\n",
        "dist/bundle.js": "var a;\n",
        "web/app.min.js": "var a;\n",
        "package-lock.json": "{}\n",
        "src/main.py": "print(1)\n",
    })


@pytest.mark.parametrize("rel, is_dir, ignored", [
    ("top.log", False, True),                 # root .gitignore
    ("sub/drop.log", False, True),
    ("sub/keep.log", False, False),           # negated one level down
    ("sub/deeper/keep.log", False, False),    # ... and below it
    ("logs", True, True),
    ("secret.txt", False, True),              # .git/info/exclude
    (".git", True, True),
    ("docs/api.md", False, False),            # .coderagignore re-includes what .gitignore drops
    ("snapshots", True, True),                # .coderagignore drops what git tracks
    ("fixtures", True, True),                 # anchored to the root ...
    ("lib/fixtures", True, False),            # ... so not matched deeper
    ("build_out", False, False),              # a folder-only pattern leaves a file alone
    ("node_modules", True, True),             # built-in noise
    ("web/node_modules", True, True),
    ("vendor", True, False),                  # a built-in re-included by the user's "!vendor/"
    ("dist", True, True),
    ("web/app.min.js", False, True),
    ("package-lock.json", False, True),
    (".coderag", True, True),                 # the index itself
    ("src/main.py", False, False),
])
def test_ignore_matcher_follows_git_precedence(repo: Path, rel: str, is_dir: bool, ignored: bool) -> None:
    assert IgnoreMatcher(repo).is_ignored(rel, is_dir=is_dir) is ignored


def test_ignore_walk_keeps_exactly_the_unignored_files(repo: Path) -> None:
    assert _walked(repo) == {
        ".coderagignore", ".gitignore", "sub/.gitignore", "sub/keep.log", "sub/deeper/keep.log",
        "docs/api.md", "lib/fixtures/b.py", "build_out", "vendor/lib.go", "src/main.py",
    }


def test_ignore_negation_cannot_reach_into_an_ignored_folder(repo: Path) -> None:
    """As in git: `logs/` is pruned, so logs/.gitignore's `!important.log` is never read."""
    m = IgnoreMatcher(repo)
    assert m.is_ignored_anywhere("logs/important.log")
    assert "logs/important.log" not in _walked(repo)


def test_ignore_anywhere_checks_parent_folders(repo: Path) -> None:
    m = IgnoreMatcher(repo)
    assert m.is_ignored_anywhere("node_modules/left-pad/index.js")
    assert m.is_ignored_anywhere("snapshots/case.py")
    assert not m.is_ignored_anywhere("lib/fixtures/b.py")
    assert not m.is_ignored_anywhere("sub/deeper/keep.log")


def test_ignore_coderagignore_overrides_gitignore_in_both_directions(tmp_path: Path) -> None:
    root = write_files(tmp_path, {
        ".gitignore": "gen/\n!tracked.py\n",
        ".coderagignore": "!gen/\ntracked.py\n",
        "sub/.gitignore": "notes.md\n",
        "sub/.coderagignore": "!notes.md\n",
        "gen/out.py": "X = 1\n",
        "tracked.py": "Y = 1\n",
        "sub/notes.md": "# Notes\n",
    })
    m = IgnoreMatcher(root)
    assert not m.is_ignored("gen", is_dir=True)
    assert m.is_ignored("tracked.py")
    assert not m.is_ignored("sub/notes.md")


def test_ignore_deeper_gitignore_beats_root_coderagignore(tmp_path: Path) -> None:
    root = write_files(tmp_path, {
        ".coderagignore": "!*.snap\n",
        "a/.gitignore": "*.snap\n",
        "a/x.snap": "s\n",
        "y.snap": "s\n",
    })
    m = IgnoreMatcher(root)
    assert m.is_ignored("a/x.snap")
    assert not m.is_ignored("y.snap")


def test_ignore_malformed_pattern_keeps_the_others(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = write_files(tmp_path, {".gitignore": "*.tmp\n!\nbuild2/\n", "a.tmp": "t\n", "a.py": "A = 1\n"})
    m = IgnoreMatcher(root)
    assert m.is_ignored("a.tmp") and m.is_ignored("build2", is_dir=True) and not m.is_ignored("a.py")
    assert any("'!'" in r.getMessage() for r in caplog.records)


def test_ignore_extra_patterns_apply_at_root(tmp_path: Path) -> None:
    root = write_files(tmp_path, {"a/b.tmp": "1,2\n"})
    assert IgnoreMatcher(root, extra_patterns=["*.tmp"]).is_ignored("a/b.tmp")
    assert not IgnoreMatcher(root).is_ignored("a/b.tmp")


# -- secrets and data (issue 16) ------------------------------------------------------------------

def test_ignore_secrets_are_a_hard_rule_no_negation_reaches(tmp_path: Path) -> None:
    """Unlike built-in noise, a secret stays out whatever the user's ignore files say."""
    root = write_files(tmp_path, {
        ".gitignore": "!*.pem\n!.env\n",
        ".coderagignore": "!id_rsa\n!certs/\n!.aws/credentials\n",
        "certs/.gitignore": "!server.key\n",
        "certs/server.pem": "pem\n", "certs/server.key": "key\n", ".env": "A=1\n", "deploy/id_rsa": "k\n",
        ".aws/credentials": "[default]\n", "src/keys.py": "KEYS = {}\n",
    })
    m = IgnoreMatcher(root)
    for rel in ("certs/server.pem", "certs/server.key", ".env", "deploy/id_rsa", ".aws/credentials"):
        assert m.is_ignored(rel) and m.is_ignored_anywhere(rel), rel
    assert not m.is_ignored("src/keys.py")
    assert _walked(root) == {".gitignore", ".coderagignore", "certs/.gitignore", "src/keys.py"}


def test_ignore_data_files_are_skipped_and_a_negation_brings_them_back(tmp_path: Path) -> None:
    root = write_files(tmp_path, {
        ".coderagignore": "!keep/*.csv\n",
        "bench/results.csv": "a,b\n", "keep/table.csv": "a,b\n", "docs/logo.svg": "<svg/>\n",
        "yarn.lock": "x\n", "Pipfile.lock": "{}\n", "composer.lock": "{}\n", "Gemfile.lock": "x\n",
        "web/__snapshots__/App.test.js.snap": "exports[`a`] = `b`;\n", "tests/__snapshots__/view.txt": "v\n",
        "nb/analysis.ipynb": "{}\n", "nb/.~analysis.ipynb": "{}\n", "src/app.py": "A = 1\n",
    })
    skips = SkipLog()
    walked = {e.rel_path for e in walk(root, IgnoreMatcher(root, skips=skips), skips)}
    # a notebook is read for its cells (nodes/notebook.py), so the walk lets it through
    assert walked == {".coderagignore", "keep/table.csv", "src/app.py", "nb/analysis.ipynb"}
    assert skips.counts == {"data": 8}
    assert ("bench/results.csv", "data", "matches *.csv") in skips.items
    assert ("tests/__snapshots__/view.txt", "data", "matches __snapshots__/") in skips.items


def test_ignore_a_gitignore_negation_keeps_data_in_git_not_in_the_index(tmp_path: Path) -> None:
    """pvlib's .gitignore has `!pvlib/data/*.csv` (the data belongs in git): that must not make 38,000
    chunks of CSV rows; only a .coderagignore negation says the user wants them indexed."""
    root = write_files(tmp_path, {
        ".gitignore": "*.csv\n!pkg/data/*.csv\n", ".coderagignore": "!pkg/wanted/*.csv\n",
        "pkg/data/table.csv": "a,b\n", "pkg/wanted/small.csv": "a,b\n", "pkg/mod.py": "A = 1\n",
    })
    skips = SkipLog()
    walked = {e.rel_path for e in walk(root, IgnoreMatcher(root, skips=skips), skips)}
    assert walked == {".gitignore", ".coderagignore", "pkg/mod.py", "pkg/wanted/small.csv"}
    assert ("pkg/data/table.csv", "data", "matches *.csv") in skips.items


def test_ignore_matcher_notes_secrets_and_data_but_not_the_users_own_rules(tmp_path: Path) -> None:
    """A file the user ignores is no skip of ours; a secret is one even when the user ignores it too."""
    root = write_files(tmp_path, {
        ".gitignore": "*.csv\n.env\nbuild_out/\n",
        "a.csv": "1\n", "b.tsv": "1\n", ".env": "A=1\n", "node_modules/x/.env": "B=2\n", "src/app.py": "A = 1\n",
    })
    skips = SkipLog()
    walk(root, IgnoreMatcher(root, skips=skips), skips)
    assert sorted((p, r) for p, r, _ in skips.items) == [(".env", "secret"), ("b.tsv", "data")]
    # without a SkipLog the matcher notes nothing (the filter and the watcher ask it too)
    m = IgnoreMatcher(root)
    assert m.is_ignored(".env") and m.skips is None


def test_a_shard_set_inside_the_repository_is_not_indexed(tmp_path: Path) -> None:
    """`store.path: vectors` put the shard in the tree: its own files were indexed as code (16 of them on a
    probe) and read again after each write. The shard gets a .gitignore of `*`, as .coderag has."""

    from coderag import index_repository
    from coderag.base.config import Settings
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "repo", TINY_FILES)
    settings = Settings()
    settings.store.path = str(root / "vectors")
    first = index_repository(root, settings=settings)
    again = index_repository(root, settings=settings)
    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        indexed = set(state.files())
    finally:
        state.close()
    assert not [p for p in indexed if p.startswith("vectors/")], indexed
    assert first.indexed == len(TINY_FILES) and again.indexed == 0 and again.unchanged == len(TINY_FILES)
