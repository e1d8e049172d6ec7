"""The CLAUDE.md section `coderag init-claude` writes is not in the index (issue 26): it answered the README's
own example question first. The rest of CLAUDE.md is, with its line numbers."""

from __future__ import annotations

from pathlib import Path

from coderag.claude_setup import BEGIN, END, init_claude
from coderag.nodes.file_text import decode_file
from conftest import TINY_FILES, write_files

USER_NOTES = "# Notes for agents\n\nRun the billing checks with `make invoices` before pushing.\n"


def test_the_section_is_blanked_line_for_line(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text(USER_NOTES)
    init_claude(tmp_path)
    raw = (tmp_path / "CLAUDE.md").read_bytes()
    text = decode_file(raw).text
    assert text.count("\n") == raw.count(b"\n") and text.startswith(USER_NOTES)
    assert BEGIN in text and END in text and "search_code" not in text and "Cite what you use" not in text
    assert decode_file(b"a\n" + BEGIN.encode() + b"\nkept: no end marker\n").text.endswith("kept: no end marker\n")


def test_an_index_answers_from_the_users_claude_md_not_from_the_section(tmp_path: Path) -> None:
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "repo", {**TINY_FILES, "CLAUDE.md": USER_NOTES})
    init_claude(root)
    index_repository(root)
    with CodeIndex.open(root) as index:
        res = index.search("cite what you use with the paths and lines of the results", retriever="bm25",
                           max_tokens=4000)
        assert all(r.file_path != "CLAUDE.md" for r in res), [(r.file_path, r.start_line) for r in res]
        res = index.search("run the billing checks before pushing", retriever="bm25", max_tokens=4000)
        hit = next(r for r in res if r.file_path == "CLAUDE.md")
        assert hit.start_line <= 3 <= hit.end_line
