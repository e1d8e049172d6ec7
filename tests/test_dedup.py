"""HashDeduplicator (nodes/hash_dedup.py): content repeated across files is indexed once, the copies recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.schema import TextNode

from conftest import write_files
from coderag.nodes.code_splitter import CodeHierarchySplitter
from coderag.nodes.hash_dedup import HashDeduplicator, normalized_hash
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.keys import CHUNK_HASH_KEY, DUPLICATE_OF_KEY, FILE_PATH_KEY
from coderag.nodes.reader import make_document
from coderag.nodes.scan import SkipLog, read_text_file, walk
from coderag.store.state import IndexState

pytest.importorskip("tree_sitter_language_pack")

SHARED = '''\
def parse_retry_after(header):
    """Seconds to wait from a Retry-After header, or None when it holds no number."""
    value = header.strip()
    return int(value) if value.isdigit() else None
'''
FILES = {
    "lib/http_a.py": SHARED + "\n\ndef only_in_a():\n    return 'a' * 40 + 'first file'\n",
    "lib/http_b.py": "\n\n" + SHARED + "\n\ndef only_in_b():\n    return 'b' * 40 + 'second file'\n",
}


def _leaves(root: Path, tokenizer_path: str) -> list:
    """The splitter's nodes of every file under root, as ingestion makes them (in path order)."""
    splitter = CodeHierarchySplitter(tokenizer_path=tokenizer_path, min_tokens=0)  # one leaf a function
    nodes = []
    for entry in sorted(walk(root, IgnoreMatcher(root), SkipLog()), key=lambda e: e.rel_path):
        nodes.extend(splitter.split_document(make_document(read_text_file(entry, SkipLog()))))
    return nodes


def _shared(nodes: list, path: str):
    (node,) = [n for n in nodes if n.metadata[FILE_PATH_KEY] == path and "parse_retry_after" in n.text
               and n.metadata.get("is_leaf", True)]
    return node


def test_dedup_identical_chunks_in_two_files_keep_one_and_record_the_other(tmp_path: Path,
                                                                           tokenizer_path: str) -> None:
    root = write_files(tmp_path / "repo", FILES)
    state = IndexState(tmp_path / "index.db")
    try:
        nodes = HashDeduplicator(registry=state, max_copies=1)(_leaves(root, tokenizer_path))
        a, b = _shared(nodes, "lib/http_a.py"), _shared(nodes, "lib/http_b.py")
        assert a.metadata[CHUNK_HASH_KEY] == b.metadata[CHUNK_HASH_KEY]
        assert DUPLICATE_OF_KEY not in a.metadata and b.metadata[DUPLICATE_OF_KEY] == a.node_id
        start, end = b.metadata["start_line"], b.metadata["end_line"]
        assert (start, end) == (3, 6)  # the copy's own lines, not the kept chunk's
        assert state.other_locations_of([a.node_id]) == {a.node_id: [("lib/http_b.py", start, end)]}
        assert state.dependents("lib/http_a.py") == {"lib/http_b.py"}  # re-indexed if the kept one changes
        others = [n for n in nodes if n.metadata[FILE_PATH_KEY] == "lib/http_b.py" and n is not b]
        assert others and all(DUPLICATE_OF_KEY not in n.metadata for n in others)
        assert state.counts()["duplicates"] == 1
    finally:
        state.close()


def test_dedup_counts_copies_across_runs_and_keeps_max_copies(tmp_path: Path) -> None:
    """The registry counts copies already indexed (an incremental run sees the earlier ones); up to
    `max_copies` are kept, whitespace does not make content new, and short chunks are never deduplicated."""
    body = "def f():\n    return compute_the_total_of_every_line_item(items)\n"

    def leaf(i: int, path: str, text: str) -> TextNode:
        return TextNode(id_=f"n{i}", text=text, metadata={FILE_PATH_KEY: path, "start_line": 1, "end_line": 2})

    state = IndexState(tmp_path / "index.db")
    try:
        dedup = HashDeduplicator(registry=state, max_copies=2)
        first = dedup([leaf(1, "a.py", body), leaf(2, "b.py", body.replace("    ", "\t"))])
        assert all(DUPLICATE_OF_KEY not in n.metadata for n in first)  # two copies are allowed
        later = dedup([leaf(3, "c.py", body), leaf(4, "d.py", "x = 1"), leaf(5, "e.py", "x = 1"),
                       leaf(6, "f.py", "x = 1")])
        assert later[0].metadata[DUPLICATE_OF_KEY] == "n1"
        assert all(DUPLICATE_OF_KEY not in n.metadata for n in later[1:])  # under min_chars
        assert normalized_hash(body) == normalized_hash(" ".join(body.split()))
        assert state.other_locations_of(["n1", "n2"]) == {"n1": [("c.py", 1, 2)]}
    finally:
        state.close()
