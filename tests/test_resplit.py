"""An index that an older coderag made reads some files otherwise than today (a CR alone did not end a line, a C
header's `extern "C"` block was not read, a C++ header named `.h` was C, Kotlin had no grammar, a function assigned
to a name or a doc comment a blank line above its definition was code between definitions); its upgrade indexes
those files again, and only them (pipelines/migrations.py resplit_read_otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CPP_HEADER, index_as_before, write_files

from coderag.pipelines.migrations import (ASSIGNED_NOTE, CPP_HEADERS_NOTE, EXTERN_C_NOTE, NAMED_VALUES_NOTE,
                                          OUTLINED_NOTE)

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


def _names_in(root: Path, path: str) -> set[str]:
    """Every name the leaves of `path` define, in the index of `root`."""
    from coderag import CodeIndex

    with CodeIndex.open(root, create=False) as idx:
        return {name for _, names in _leaves(idx, path) for name in names}


def _node_ids(root: Path, path: str) -> set[str]:
    from coderag import CodeIndex

    with CodeIndex.open(root, create=False) as idx:
        return set(idx.docstore.get_ref_doc_info(path).node_ids)


def _drop_c_linkage(mp) -> None:
    """The C grammar as an older coderag read it: no way into an `extern "C"` block's declaration_list."""
    from dataclasses import replace

    from coderag.nodes.languages import GRAMMARS

    mp.setitem(GRAMMARS, "c", replace(GRAMMARS["c"], transparent=GRAMMARS["c"].transparent - {"declaration_list"}))


def _headers_by_name(mp) -> None:
    """The reader as an older coderag had it: a `.h` file is C, by its name."""
    from coderag.nodes import reader
    from coderag.nodes.languages import detect_language

    mp.setattr(reader, "detect_language", lambda rel, head="": detect_language(rel))


def _no_kotlin(mp) -> None:
    """The grammars as an older coderag had them: none for Kotlin, whose files were line windows."""
    from coderag.nodes.languages import GRAMMARS

    mp.delitem(GRAMMARS, "kotlin")


def _no_assignments(mp) -> None:
    """The JavaScript grammar as an older coderag had it: a function assigned to a name was code between
    definitions."""
    from dataclasses import replace

    from coderag.nodes.languages import GRAMMARS

    mp.setitem(GRAMMARS, "javascript", replace(GRAMMARS["javascript"], assignments=frozenset()))


def _exports_by_slot(mp) -> None:
    """The JavaScript grammar as an older coderag had it: a class or function that CommonJS exports took the
    name of its slot (`module.exports`)."""
    from dataclasses import replace

    from coderag.nodes.languages import GRAMMARS

    mp.setitem(GRAMMARS, "javascript", replace(GRAMMARS["javascript"], export_slots=frozenset()))


def _no_calls_in_place(mp) -> None:
    """The outline as an older coderag read it: a function called in place, and what it held, were code."""
    from coderag.nodes import values

    mp.setattr(values, "_called_in_place", lambda call: None)


def _no_modules_read(mp) -> None:
    """The outline as an older coderag read it: an AMD module's function, and what it held, were code."""
    from coderag.nodes import values

    mp.setattr(values, "_defines_a_module", lambda given: False)


KOTLIN = ("package demo\n\n/** A point on a plane. */\ndata class Point(val x: Int, val y: Int) {\n"
          "    fun norm(): Int = x * x + y * y\n}\n")


@pytest.mark.parametrize("files, changed, name, unchanged, patch, reading, note", [
    ({"include/pool.h": POOL_H, "src/pool.c": '#include "pool.h"\n\nint pool_size(void) {\n    return 1;\n}\n'},
     "include/pool.h", "pool", "src/pool.c", _drop_c_linkage, "lf, crlf, cr; notebook cells", EXTERN_C_NOTE),
    ({"include/ui/widget.h": CPP_HEADER, "include/point.h": "struct point {\n    int x;\n    int y;\n};\n"},
     "include/ui/widget.h", "ui.Widget", "include/point.h", _headers_by_name,
     'lf, crlf, cr; notebook cells; C extern "C" blocks', CPP_HEADERS_NOTE),
    # a step the index was read with is not done again: its `extern "C"` header stays as indexed
    ({"src/Point.kt": KOTLIN, "include/pool.h": POOL_H},
     "src/Point.kt", "Point.norm", "include/pool.h", _no_kotlin,
     'lf, crlf, cr; notebook cells; C extern "C" blocks; C++ headers named .h', OUTLINED_NOTE),
    ({"lib/app.js": "var app = exports = module.exports = {};\n\napp.route = function route(path) {\n"
                    "  return this.router.route(path);\n};\n",
      "tools/build.py": "def build(path):\n    return path\n"},
     "lib/app.js", "app.route", "tools/build.py", _no_assignments,
     "lf, crlf, cr; notebook cells; C extern \"C\" blocks; C++ headers named .h; Kotlin, Swift, Scala and Lua outlined",
     ASSIGNED_NOTE),
    ({"lib/application.js": "module.exports = class Application {\n  listen(port) {\n    return port;\n  }\n};\n",
      "lib/context.js": "module.exports = {\n  inspect() {\n    return this;\n  },\n};\n"},
     "lib/application.js", "Application.listen", "lib/context.js", _exports_by_slot,
     "lf, crlf, cr; notebook cells; C extern \"C\" blocks; C++ headers named .h; Kotlin, Swift, Scala and Lua "
     "outlined; functions assigned, and held by fields, doc comments apart", NAMED_VALUES_NOTE),
    ({"lib/ajax.js": "/** Requests, with a verb for each method. */\nconst ajax = (() => {\n"
                     "  const create = (url) => fetch(url);\n  create.get = (url) => create(url);\n  return create;\n"
                     "})();\n",
      "lib/sum.js": "const total = (a + b) * 2;\n"},
     "lib/ajax.js", "ajax", "lib/sum.js", _no_calls_in_place,
     "lf, crlf, cr; notebook cells; C extern \"C\" blocks; C++ headers named .h; Kotlin, Swift, Scala and Lua "
     "outlined; functions assigned, and held by fields, doc comments apart", NAMED_VALUES_NOTE),
    ({"lib/umd.js": "(function (root, factory) {\n  root.lib = factory();\n})(this, function () {\n"
                    "  function parse(s) {\n    return s;\n  }\n  return { parse };\n});\n",
      "lib/sum.js": "const total = (a + b) * 2;\n"},
     "lib/umd.js", "parse", "lib/sum.js", _no_calls_in_place,
     "lf, crlf, cr; notebook cells; C extern \"C\" blocks; C++ headers named .h; Kotlin, Swift, Scala and Lua "
     "outlined; functions assigned, and held by fields, doc comments apart", NAMED_VALUES_NOTE),
    ({"src/access.js": "define([\"./core\"], function (jQuery) {\n  function access(elems) {\n    return elems;\n"
                       "  }\n  return jQuery;\n});\n",
      "lib/sum.js": "const total = (a + b) * 2;\n"},
     "src/access.js", "access", "lib/sum.js", _no_modules_read,
     "lf, crlf, cr; notebook cells; C extern \"C\" blocks; C++ headers named .h; Kotlin, Swift, Scala and Lua "
     "outlined; functions assigned, and held by fields, doc comments apart", NAMED_VALUES_NOTE),
], ids=["extern-c", "cpp-header", "kotlin", "assigned-function", "commonjs-export", "called-in-place", "umd", "amd"])
def test_an_upgrade_splits_again_the_files_an_older_reading_named_nothing_in(
        tmp_path: Path, files, changed, name, unchanged, patch, reading, note) -> None:
    """An index made by an older coderag holds a file it read otherwise without its definitions (a C header's
    `extern "C"` block unread, a C++ header read as C, a Kotlin file as line windows, a JavaScript function
    assigned to a name as code between definitions, a class that CommonJS exports named `module.exports`, a
    function called in place, and what it holds, as code); its upgrade indexes that file again, once, and leaves
    the file beside it alone, even one that a step the index already had reads."""
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "repo", files)
    index_as_before(root, patch, reading)
    assert name not in _names_in(root, changed)  # the control
    unchanged_before = _node_ids(root, unchanged)

    assert index_repository(root).upgraded == {note: 1}
    assert name in _names_in(root, changed)
    assert _node_ids(root, unchanged) == unchanged_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once


# A Javadoc a blank line above its class, long enough to be a leaf of its own when it does not lead the class.
POOL_JAVA = """package pool;

/**
 * A pool of reusable byte buffers, handed out by size class and returned when the caller is done with them, so
 * that a server under load does not allocate a fresh buffer for every request it reads or every reply it writes.
 */

public class Pool {
    private final int capacity;

    public Pool(int capacity) {
        this.capacity = capacity;
    }

    public byte[] take(int size) {
        return new byte[Math.min(size, capacity)];
    }
}
"""
POINT_JAVA = "package pool;\n\n/** A point. */\npublic class Point {\n    int x;\n}\n"


def _doc_comments_touch(mp) -> None:
    """The outline as an older coderag had it: a comment leads a definition only from the line right above."""
    from coderag.nodes import outline

    mp.setattr(outline, "_leads", lambda comment, start, lines, src: outline.end_line(comment) >= start - 1)


def test_an_upgrade_joins_a_doc_comment_a_blank_line_above_to_its_definition(tmp_path: Path) -> None:
    """A Java file whose Javadoc stands a blank line above its class held the comment as a leaf apart; the upgrade
    indexes it again, once, with the comment in the class's leaf, and leaves a file whose Javadoc touches its
    class alone."""
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_STEPS

    def class_leaf_start(root: Path) -> int:
        with CodeIndex.open(root, create=False) as idx:
            nodes = idx.docstore.get_nodes(idx.docstore.get_ref_doc_info("src/Pool.java").node_ids)
        return min(n.metadata["start_line"] for n in nodes if n.metadata.get("is_leaf")
                   and n.metadata.get("symbol", "").startswith("Pool"))

    root = write_files(tmp_path / "repo", {"src/Pool.java": POOL_JAVA, "src/Point.java": POINT_JAVA})
    index_as_before(root, _doc_comments_touch, "; ".join(s for s in READING_STEPS if "doc comments apart" not in s))
    assert class_leaf_start(root) == 8  # the control: the comment was not the class's
    point_before = _node_ids(root, "src/Point.java")

    assert index_repository(root).upgraded == {ASSIGNED_NOTE: 1}
    assert class_leaf_start(root) == 4  # the comment's first words (a leaf starts past a bare "/**")
    assert _node_ids(root, "src/Point.java") == point_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once
