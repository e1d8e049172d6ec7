"""Source code a `.gitattributes` marks `linguist-vendored` or `linguist-generated` is left out of the index, as
`vendor/` is; read as git reads attributes, and kept when the owners' own ignore files say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from coderag.nodes.git_attributes import GENERATED, VENDORED, ThirdPartyMarks
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.scan import SkipLog, walk

YYJSON = "size_t yyjson_read_number(const char *s) {\n    return parse_number_digits(s);\n}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_files(tmp_path / "repo", {
        ".gitattributes": "# third-party code\ninclude/yyjson/* linguist-vendored\n"
                          "gen/** linguist-generated\ngen/keep.rs -linguist-generated\n"
                          "*.sql linguist-language=SQL\ntests/** linguist-vendored\n",
        "include/yyjson/yyjson.c": YYJSON,
        "include/yyjson/sub/inner.c": "int inner(void) { return 1; }\n",  # `*` names the folder, not its files
        "include/own.h": "int own(void);\n",
        "gen/dialect/ansi.rs": "pub fn ansi() {}\n",
        "gen/keep.rs": "pub fn keep() {}\n",                   # a later line clears the mark
        "tests/test_read.py": "def test_read():\n    assert True\n",  # a test marked vendored stays
        "src/read.rs": "pub fn read_number() {}\n",
        "src/.gitattributes": "legacy/*.rs linguist-vendored\n",
        "src/legacy/old.rs": "pub fn old() {}\n",             # a deeper file's pattern is relative to it
        "legacy/top.rs": "pub fn top() {}\n",
    })


def _walked(root: Path) -> tuple[set[str], SkipLog]:
    skips = SkipLog()
    return {e.rel_path for e in walk(root, IgnoreMatcher(root, skips=skips), skips)}, skips


def test_git_attributes_marks_follow_git_patterns(repo: Path) -> None:
    marks = ThirdPartyMarks(repo)
    assert marks.mark("include/yyjson/yyjson.c") == VENDORED
    assert marks.mark("include/yyjson/sub/inner.c") is None
    assert marks.mark("gen/dialect/ansi.rs") == GENERATED
    assert marks.mark("gen/keep.rs") is None
    assert marks.mark("src/legacy/old.rs") == VENDORED
    assert marks.mark("legacy/top.rs") is None
    assert marks.mark("src/read.rs") is None


def test_git_attributes_marked_source_is_skipped_and_counted(repo: Path) -> None:
    kept, skips = _walked(repo)
    assert {"include/yyjson/yyjson.c", "gen/dialect/ansi.rs", "src/legacy/old.rs"}.isdisjoint(kept)
    assert {"include/yyjson/sub/inner.c", "include/own.h", "gen/keep.rs", "tests/test_read.py", "src/read.rs",
            "legacy/top.rs"} <= kept
    assert skips.counts == {VENDORED: 2, GENERATED: 1}
    assert ("include/yyjson/yyjson.c", VENDORED, "marked linguist-vendored in .gitattributes") in skips.items


@pytest.mark.parametrize("rules", [
    # .git/info/attributes overrides the tree's, and `=false` clears a mark
    {".gitattributes": "deps/** linguist-vendored\n", ".git/info/attributes": "deps/b.c linguist-vendored=false\n"},
    # as for data: a .gitignore `!pattern` says the file is in git, which a vendored file always is; a
    # .coderagignore `!pattern` brings it back
    {".gitattributes": "deps/** linguist-vendored\n", ".gitignore": "!deps/a.c\n", ".coderagignore": "!deps/b.c\n"},
])
def test_git_attributes_what_brings_marked_code_back(tmp_path: Path, rules: dict[str, str]) -> None:
    root = write_files(tmp_path / "repo", {**rules, "deps/a.c": "int a;\n", "deps/b.c": "int b;\n"})
    m = IgnoreMatcher(root)
    assert m.is_ignored("deps/a.c") and not m.is_ignored("deps/b.c")


def _search_yyjson(repo: Path) -> tuple[str | None, list]:
    """(the manifest status of yyjson.c, the BM25 answers to its names)."""
    from coderag import CodeIndex
    from coderag.base.config import Settings

    with CodeIndex.open(repo, settings=Settings(), create=False) as idx:
        rec = idx.state.file("include/yyjson/yyjson.c")
        res = idx.search("yyjson_read_number parse_number_digits", retriever="bm25", max_tokens=2000)
        return (rec.status if rec else None), [(r.file_path, r.start_line) for r in res]


def test_git_attributes_an_index_follows_a_changed_mark(repo: Path) -> None:
    """Marked code is never searched; clearing the mark brings it in on the next run, and marking it again
    removes it: the ignore rules decide at each walk, so an index of before this rule loses it on update."""
    from coderag import index_repository
    from coderag.base.config import Settings

    first = index_repository(repo, settings=Settings())
    assert first.skipped.get(VENDORED) == 2 and first.skipped.get(GENERATED) == 1, first.skipped
    status, found = _search_yyjson(repo)
    assert status is None and "include/yyjson/yyjson.c" not in {path for path, _ in found}
    attrs = repo / ".gitattributes"
    marked = attrs.read_text(encoding="utf-8")
    attrs.write_text(marked.replace("include/yyjson/* linguist-vendored\n", ""), encoding="utf-8")
    assert index_repository(repo, settings=Settings()).indexed == 2  # the file, and .gitattributes itself
    status, found = _search_yyjson(repo)
    assert status == "indexed" and found[0] == ("include/yyjson/yyjson.c", 1)
    attrs.write_text(marked, encoding="utf-8")
    assert index_repository(repo, settings=Settings()).removed == 1
    status, found = _search_yyjson(repo)
    assert status is None and "include/yyjson/yyjson.c" not in {path for path, _ in found}


def test_git_attributes_a_malformed_pattern_is_skipped_with_a_warning(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    root = write_files(tmp_path / "repo", {
        ".gitattributes": "[z-a] linguist-vendored\n\\ linguist-generated\ndeps/** linguist-vendored\n",
        "deps/a.c": "int a;\n",
        "src/b.c": "int b;\n",
    })
    kept, skips = _walked(root)
    assert "src/b.c" in kept and "deps/a.c" not in kept and skips.counts == {VENDORED: 1}
    assert any("[z-a]" in r.getMessage() for r in caplog.records)
