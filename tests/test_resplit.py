"""An index made before a CR alone ended a line holds such a file as one line; its upgrade indexes that file
again, and only that file (pipelines/migrations.py resplit_read_otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import write_files

# Classic Mac line ends; written first with a space where each CR goes (the same size, one line), indexed, then
# given its CRs with the same time: the index holds it as one line, as an older coderag made it.
MAC = "def first_mac_helper():\r    return 1\r\rdef second_mac_helper():\r    return 2\r"


def test_an_upgrade_splits_again_the_files_a_cr_alone_ends_lines_of(tmp_path: Path) -> None:
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY

    root = write_files(tmp_path / "repo", {"src/unix.py": "def unix_helper():\n    return 0\n"})
    mac = root / "src/mac.py"
    mac.write_bytes(MAC.replace("\r", " ").encode())
    index_repository(root)
    st = mac.stat()
    mac.write_bytes(MAC.encode())
    os.utime(mac, ns=(st.st_atime_ns, st.st_mtime_ns))
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, "")  # as an index of before has it: no such key
        idx.state.commit()
        res = idx.search("second_mac_helper", retriever="bm25", refresh=False)
        assert (res[0].file_path, res[0].start_line, res[0].end_line) == ("src/mac.py", 1, 1)  # the control
        unix_before = {n for n in idx.docstore.get_ref_doc_info("src/unix.py").node_ids}

    summary = index_repository(root)
    assert summary.upgraded == {"files whose lines end in a CR alone (a classic Mac file) indexed again with "
                                "their line numbers": 1}
    with CodeIndex.open(root, create=False) as idx:
        res = idx.search("second_mac_helper", retriever="bm25", refresh=False)
        hit = next(r for r in res if r.file_path == "src/mac.py")
        assert (hit.start_line, hit.end_line) != (1, 1) and "second_mac_helper" in hit.text
        assert hit.text.split("\n")[0] == MAC.split("\r")[hit.start_line - 1]
        assert set(idx.docstore.get_ref_doc_info("src/unix.py").node_ids) == unix_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once


# A C header as most libraries write one: an include guard, then `extern "C" {` for C++ callers around its types.
POOL_H = """#ifndef POOL_H
#define POOL_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>

struct pool {
    size_t capacity;
    struct item *free_list;
};

typedef struct pool pool_t;

pool_t *pool_new(size_t capacity);

#ifdef __cplusplus
}
#endif

#endif
"""


def _leaves(idx, path: str) -> list[tuple[str, list[str]]]:
    """(kind, the names it defines) of each leaf of `path`."""
    from coderag.queries.symbols import chunk_symbols

    nodes = idx.docstore.get_nodes(idx.docstore.get_ref_doc_info(path).node_ids)
    return [(n.metadata["kind"], chunk_symbols(n.metadata)) for n in nodes if n.metadata.get("is_leaf")]


def test_a_c_headers_extern_c_block_is_read_for_its_definitions(tmp_path: Path) -> None:
    """The struct inside `extern "C" { ... }` is a definition of its own, named: before, tree-sitter's
    declaration_list stopped the outline and the whole header was unnamed."""
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "repo", {"include/pool.h": POOL_H})
    index_repository(root)
    with CodeIndex.open(root, create=False) as idx:
        leaves = _leaves(idx, "include/pool.h")
    assert leaves == [("group", ["pool", "pool_t"])], leaves  # the header is small: its two definitions, one leaf


def test_an_upgrade_splits_again_the_c_files_an_extern_c_block_hid_definitions_in(tmp_path: Path) -> None:
    """An index made before the outline read `extern "C"` blocks holds such a header as one unnamed leaf; its
    upgrade indexes that header again, and only the C files that have such a block."""
    from dataclasses import replace

    import pytest

    from coderag import CodeIndex
    from coderag.nodes.languages import GRAMMARS
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY
    from coderag.pipelines.migrations import EXTERN_C_NOTE

    root = write_files(tmp_path / "repo", {"include/pool.h": POOL_H,
                                           "src/pool.c": '#include "pool.h"\n\nint pool_size(void) {\n    return 1;\n}\n'})
    mp = pytest.MonkeyPatch()  # the C grammar as an older coderag read it: no way into the declaration_list
    mp.setitem(GRAMMARS, "c", replace(GRAMMARS["c"], transparent=GRAMMARS["c"].transparent - {"declaration_list"}))
    try:
        index_repository(root)
    finally:
        mp.undo()
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, "lf, crlf, cr; notebook cells")  # as the index of a coderag of before has it
        idx.state.commit()
        assert _leaves(idx, "include/pool.h") == [("file", [])]  # the control: the whole header, unnamed
        source_before = set(idx.docstore.get_ref_doc_info("src/pool.c").node_ids)

    assert index_repository(root).upgraded == {EXTERN_C_NOTE: 1}
    with CodeIndex.open(root, create=False) as idx:
        assert _leaves(idx, "include/pool.h") == [("group", ["pool", "pool_t"])]
        assert set(idx.docstore.get_ref_doc_info("src/pool.c").node_ids) == source_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once


WIDGET_H = """#pragma once

#include <string>
#include <vector>

namespace ui {

template <typename T>
class Registry {
public:
    void add(const T& item) { items_.push_back(item); }
    std::size_t size() const { return items_.size(); }

private:
    std::vector<T> items_;
};

class Widget {
public:
    explicit Widget(std::string name) : name_(std::move(name)) {}
    const std::string& name() const { return name_; }

private:
    std::string name_;
};

}  // namespace ui
"""


def test_an_upgrade_splits_again_as_cpp_the_cpp_headers_named_h(tmp_path: Path) -> None:
    """An index made when every `.h` file was C holds a C++ header as C (its class unnamed); its upgrade
    indexes that header again as C++, and leaves the C header beside it alone."""
    import pytest

    from coderag import CodeIndex
    from coderag.nodes import reader
    from coderag.nodes.languages import detect_language
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY
    from coderag.pipelines.migrations import CPP_HEADERS_NOTE

    root = write_files(tmp_path / "repo", {"include/ui/widget.h": WIDGET_H,
                                           "include/point.h": "struct point {\n    int x;\n    int y;\n};\n"})
    mp = pytest.MonkeyPatch()  # the reader as an older coderag had it: a `.h` file is C, by its name
    mp.setattr(reader, "detect_language", lambda rel, head="": detect_language(rel))
    try:
        index_repository(root)
    finally:
        mp.undo()
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, 'lf, crlf, cr; notebook cells; C extern "C" blocks')
        idx.state.commit()
        assert not any("ui.Widget" in names for _, names in _leaves(idx, "include/ui/widget.h"))  # the control
        c_before = set(idx.docstore.get_ref_doc_info("include/point.h").node_ids)

    assert index_repository(root).upgraded == {CPP_HEADERS_NOTE: 1}
    with CodeIndex.open(root, create=False) as idx:
        assert any("ui.Widget" in names for _, names in _leaves(idx, "include/ui/widget.h"))
        assert {r.language for r in idx.search("Widget", refresh=False) if r.file_path == "include/ui/widget.h"} == {"cpp"}
        assert set(idx.docstore.get_ref_doc_info("include/point.h").node_ids) == c_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once


def test_an_upgrade_splits_again_the_kotlin_files_it_held_as_windows(tmp_path: Path) -> None:
    """Before Kotlin and Swift had a grammar their files were line windows; an index of then is upgraded, its
    Kotlin file split along its definitions, and the Python file beside it left alone."""
    import pytest

    from coderag import CodeIndex
    from coderag.nodes.languages import GRAMMARS
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY
    from coderag.pipelines.migrations import OUTLINED_NOTE

    kotlin = ("package demo\n\n/** A point on a plane. */\ndata class Point(val x: Int, val y: Int) {\n"
              "    fun norm(): Int = x * x + y * y\n}\n")
    root = write_files(tmp_path / "repo", {"src/Point.kt": kotlin, "app/main.py": "def main():\n    return 0\n"})
    mp = pytest.MonkeyPatch()  # the grammars as an older coderag had them: none for Kotlin
    mp.delitem(GRAMMARS, "kotlin")
    try:
        index_repository(root)
    finally:
        mp.undo()
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, 'lf, crlf, cr; notebook cells; C extern "C" blocks; C++ headers named .h')
        idx.state.commit()
        assert not any(names for _, names in _leaves(idx, "src/Point.kt"))  # the control: nothing named
        python_before = set(idx.docstore.get_ref_doc_info("app/main.py").node_ids)

    assert index_repository(root).upgraded == {OUTLINED_NOTE: 1}
    with CodeIndex.open(root, create=False) as idx:
        assert any("Point.norm" in names for _, names in _leaves(idx, "src/Point.kt"))
        assert set(idx.docstore.get_ref_doc_info("app/main.py").node_ids) == python_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once
