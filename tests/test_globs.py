"""FilePattern: gitignore-style `file_pattern` globs on POSIX paths relative to the root, `!` excludes."""

from __future__ import annotations

import pytest

from coderag.base.globs import FilePattern

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
    # Once a re.error from pathspec (not a ValueError): a bare "Error executing tool search_code" over MCP.
    ("[z-a]", "bad character range z-a in '[z-a]'"),
    ("src/**/[9-0]*.py", "bad character range 9-0"),
    ("*.{py", "unclosed '{'"),
    ("*.py}", "'}' closes no '{'"),
    ("src/{a,b", "unclosed '{'"),
    ("{..,src}/x.py", "'..' cannot leave the indexed root"),
    ("{!tests,src}/**", "'!' excludes only at the start of a pattern"),
    ("{,}", "empty pattern"),
    ("src\\", "ends with a lone '\\'"),
    ("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}", "more than 64 alternatives"),
])
def test_globs_malformed_pattern_is_a_clear_value_error(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError) as exc:
        FilePattern(pattern)
    msg = str(exc.value)
    assert msg.startswith(f"Malformed file_pattern {pattern!r}: ") and problem in msg, msg
    assert "Examples: 'src/**/*.py'" in msg  # the message shows what a good pattern looks like


def test_globs_escaped_bracket_is_not_unclosed() -> None:
    assert FilePattern(r"docs/\[draft\]*.md").select(["docs/[draft]notes.md", "docs/notes.md"]) == [
        "docs/[draft]notes.md"]


def test_globs_a_space_belongs_to_the_path() -> None:
    """Only commas separate patterns: `docs/user guide.md` is one path, not two patterns."""
    fp = FilePattern("docs/user guide.md")
    assert fp.matches("docs/user guide.md") and not fp.matches("docs/user") and not fp.matches("guide.md")


@pytest.mark.parametrize("pattern, expected", [
    # Once silently matched nothing: pathspec takes '{' literally.
    ("**/*.{py,ts}", ["src/app.py", "src/auth/login.py", "src/données/ünï.py", "src/legacy/old.py", "srcx/other.py",
                      "lib/src/vendored.py", "tests/test_app.py", "web/api/users.ts", "web/api/users.test.ts"]),
    ("{docs,tests}/**/*.md", ["docs/guide/setup.md", "tests/data/sample.md"]),
    ("*.{go, md}", ["README.md", "docs/guide/setup.md", "tests/data/sample.md", "cmd/server/main.go"]),  # spaces
    ("web/**/*.{ts,js},!**/*.test.ts", ["web/api/users.ts"]),  # commas in braces do not split patterns
    ("src/{auth,legacy/{old,new}}*", ["src/auth/login.py", "src/legacy/old.py"]),  # nested
    ("!{tests,src}/**", ["README.md", "docs/guide/setup.md", "srcx/other.py", "lib/src/vendored.py",
                         "web/api/users.ts", "web/api/users.test.ts", "cmd/server/main.go"]),
    ("src/app.py{,.bak}", ["src/app.py"]),  # an empty alternative
])
def test_globs_brace_sets_are_alternatives(pattern: str, expected: list[str]) -> None:
    assert FilePattern(pattern).select(PATHS) == expected


def test_globs_literal_braces_commas_and_hashes() -> None:
    names = ["x{y}.md", "a,b.py", "#notes.md", "a.py"]
    assert FilePattern(r"x\{y\}.md").select(names) == ["x{y}.md"]
    assert FilePattern("a[,]b.py").select(names) == ["a,b.py"]  # a comma inside [...] is a character
    assert FilePattern("#notes.md").select(names) == ["#notes.md"]  # not a gitignore comment


def test_globs_alternatives_are_bounded_without_blowing_up() -> None:
    """Twenty {a,b} sets are a million alternatives: refused after 64, at once."""
    import time

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="more than 64 alternatives"):
        FilePattern("{a,b}" * 20)
    assert time.perf_counter() - t0 < 0.5
    assert len(FilePattern("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}").select(["acegik", "bdfhjl", "x"])) == 2  # 64: fine
    with pytest.raises(ValueError, match="more than 64 patterns"):
        FilePattern(",".join(f"f{i}.py" for i in range(65)))  # the bound covers comma lists too
    with pytest.raises(ValueError, match="at most 2000") as exc:
        FilePattern("a" * 5000)
    assert "(5000 characters)" in str(exc.value) and len(str(exc.value)) < 600  # the pattern is quoted, cut


def test_globs_no_input_escapes_as_anything_but_value_error() -> None:
    """Random strings over the glob alphabet: each compiles or is a ValueError naming the pattern."""
    import random

    rng = random.Random(13)
    alphabet = list("[]!^-*?/\\{},.az# ")
    for _ in range(3000):
        pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            FilePattern(pattern).select(PATHS)
        except ValueError as exc:
            assert str(exc).startswith("Malformed file_pattern "), (pattern, exc)
