"""FilePattern: gitignore-style `file_pattern` globs on POSIX paths relative to the root, `!` excludes."""

from __future__ import annotations

import pytest

from coderag.globs import FilePattern

PATHS = [
    "README.md",
    "docs/guide/setup.md",
    "src/app.py",
    "src/auth/login.py",
    "src/données/ünï.py",
    "src/legacy/old.py",
    "srcx/other.py",
    "lib/src/vendored.py",
    "tests/test_app.py",
    "tests/data/sample.md",
    "web/api/users.ts",
    "web/api/users.test.ts",
    "cmd/server/main.go",
]


@pytest.mark.parametrize("pattern, expected", [
    ("src/**/*.py", ["src/app.py", "src/auth/login.py", "src/données/ünï.py", "src/legacy/old.py"]),
    ("src/*.py", ["src/app.py"]),
    ("*.md", ["README.md", "docs/guide/setup.md", "tests/data/sample.md"]),
    ("/README.md", ["README.md"]),
    ("docs/", ["docs/guide/setup.md"]),
    ("*.go", ["cmd/server/main.go"]),
    ("!tests/**", [p for p in PATHS if not p.startswith("tests/")]),
    ("web/**/*.ts,!**/*.test.ts", ["web/api/users.ts"]),
    ("src/**/*.py , !src/legacy/**", ["src/app.py", "src/auth/login.py", "src/données/ünï.py"]),
    ("src/**/*.py, *.md, !tests/**", ["README.md", "docs/guide/setup.md", "src/app.py", "src/auth/login.py",
                                      "src/données/ünï.py", "src/legacy/old.py"]),
    ("src/données/*.py", ["src/données/ünï.py"]),
    ("src/[al]*/*.py", ["src/auth/login.py", "src/legacy/old.py"]),
    ("nothing/**", []),
])
def test_globs_select(pattern: str, expected: list[str]) -> None:
    assert FilePattern(pattern).select(PATHS) == expected


def test_globs_matches_agrees_with_select() -> None:
    fp = FilePattern("src/**/*.py,!src/legacy/**")
    assert [p for p in PATHS if fp.matches(p)] == fp.select(PATHS)
    assert fp.matches("src/app.py") and not fp.matches("src/legacy/old.py") and not fp.matches("README.md")


def test_globs_only_excludes_means_everything_else() -> None:
    assert FilePattern("!**/*.md").select(PATHS) == [p for p in PATHS if not p.endswith(".md")]


@pytest.mark.parametrize("pattern, problem", [
    ("[abc", "unclosed '['"),
    ("src/[a-", "unclosed '['"),
    ("src/**/*.py,[x", "unclosed '['"),
    ("", "empty pattern"),
    ("  ,  ", "empty pattern"),
    ("!", "empty pattern"),
    ("../secrets/*", "'..' cannot leave the indexed root"),
    ("src/../../etc/passwd", "'..' cannot leave the indexed root"),
    ("!../x", "'..' cannot leave the indexed root"),
    ("a\x00b", "NUL character"),
])
def test_globs_malformed_pattern_is_a_clear_value_error(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError) as exc:
        FilePattern(pattern)
    msg = str(exc.value)
    assert msg.startswith(f"Malformed file_pattern {pattern!r}: {problem}.")
    assert "Examples: 'src/**/*.py'" in msg  # the message shows what a good pattern looks like


def test_globs_escaped_bracket_is_not_unclosed() -> None:
    assert FilePattern(r"docs/\[draft\]*.md").select(["docs/[draft]notes.md", "docs/notes.md"]) == [
        "docs/[draft]notes.md"]


def test_globs_a_space_belongs_to_the_path() -> None:
    """Only commas separate patterns: `docs/user guide.md` is one path, not two patterns."""
    fp = FilePattern("docs/user guide.md")
    assert fp.matches("docs/user guide.md") and not fp.matches("docs/user") and not fp.matches("guide.md")
