"""Stored token counts of lines: a block priced from them costs exactly what its rendered text encodes to."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

import coderag
from coderag.postprocessors.line_tokens import segment_counts, starts_segment
from coderag.postprocessors.lines import split_lines
from coderag.postprocessors.payload import SearchResult, render_result_xml
from coderag.postprocessors.payload_cost import PayloadCost
from coderag.postprocessors.tokenizer import PayloadTokenizer
from coderag.store.state import LINE_TOKENS_ENCODING as ENCODING

# Every line shape the pre-tokenizer treats differently: blank and whitespace-only runs, trailing spaces,
# carriage returns, punctuation before a newline, escapes, special tokens, control characters, non-ASCII.
TRICKY = [
    "", "def f():", "    return 1", "", "", "   ", "\t", "class A:  ", "    x = '</snippet>'  ", "", "  \r",
    "y = 1\r", "\rz", "<|endoftext|>", "a<|endoftext|>b", "  <|endoftext|>", "", "é = 'ünïcödé'  # 日本語",
    "\x0c", "\x1b[31mred", "x = 1;;;", "", "", "):", "]]>", "&amp; &lt;", "    ", "\u2028", "1234567", "end", "",
    "  ", "",
]


def _result(nws: NodeWithScore, text: str, truncated: bool) -> SearchResult:
    m = nws.node.metadata
    return SearchResult(id="0123456789ab", file_path=m["file_path"], start_line=m["start_line"],
                        end_line=m["end_line"], language="python", symbol="A.f", kind="function", score=0.0,
                        last_modified="2024-12-03T13:11:30+00:00", stale=False, text=text, truncated=truncated)


def _odd_result(nws: NodeWithScore, text: str, truncated: bool) -> SearchResult:
    """Header fields that escape, hold a special token, a carriage return or a line break, plus stale and
    also_in lines: the block is still counted exactly (from counts where the header allows it)."""
    r = _result(nws, text, truncated)
    r.symbol, r.language, r.stale = "A<|endoftext|>.f & <g>", "py\u00e9", True
    r.also_in = ["b/c d.py:1-2", "e\rf.py:3-4"] if nws.node.metadata["start_line"] % 2 else ["x\ny.py:5-9"]
    return r


def _check_blocks(lines: list[str], span: int, step: int = 1, result=_result, blank_lead: Optional[list] = None) -> int:
    """Price every block of up to `span` lines (every `step`-th start) from the counts; compare with a full
    count of the block as rendered. Returns how many were priced from the counts; `blank_lead` collects
    whether each block that starts with an empty line was."""
    tok = PayloadTokenizer()
    enc = tok.encoding
    counts = segment_counts(lines, tok)
    assert counts is not None and len(counts) == len(lines)
    coster = PayloadCost("xml", render_result_xml, tok, result, line_tokens={"f.py": counts})
    from_counts, alive = 0, []  # blocks are keyed by id(): keep every node alive
    for s in range(1, len(lines) + 1, step):
        for e in range(s, min(len(lines), s + span) + 1):
            text = "\n".join(lines[s - 1:e])
            nws = NodeWithScore(node=TextNode(text=text, metadata={"file_path": "f.py", "start_line": s,
                                                                    "end_line": e}), score=1.0)
            alive.append(nws)
            want = len(enc.encode(render_result_xml(result(nws, text, False)), allowed_special="all"))
            block = coster._block(nws)
            assert block.total == want, (s, e, text)
            from_counts += block.tokens is None
            if blank_lead is not None and text.startswith("\n") and text.strip("\n"):
                blank_lead.append(block.tokens is None)
    return from_counts


def test_counts_of_tricky_lines_add_up_for_every_block() -> None:
    blank_lead: list = []
    assert _check_blocks(TRICKY, span=len(TRICKY), blank_lead=blank_lead) > 300
    # blocks starting with empty lines (then whitespace-only lines, or a visible one): those whose first
    # non-empty line starts a segment are priced from the counts (68 of 149 here; all were encoded before)
    assert len(blank_lead) > 100 and sum(blank_lead) > 60
    assert _check_blocks(TRICKY, span=len(TRICKY), result=_odd_result) == 0  # a header line with \r or \n


def test_cut_blocks_priced_from_counts_match_their_rendering() -> None:
    """The packer's price of a block cut after k lines (from counts) stays within SLACK of the real count."""
    from coderag.postprocessors.payload_cost import SLACK

    tok = PayloadTokenizer()
    enc = tok.encoding
    lines = split_lines((Path(coderag.__file__).parent / "service.py").read_text(encoding="utf-8"))
    counts = segment_counts(lines, tok)
    coster = PayloadCost("xml", render_result_xml, tok, _result, line_tokens={"f.py": counts})
    alive, from_counts = [], 0
    for s in range(1, len(lines) - 40, 9):
        text = "\n".join(lines[s - 1:s + 39])
        nws = NodeWithScore(node=TextNode(text=text, metadata={"file_path": "f.py", "start_line": s,
                                                                "end_line": s + 39}), score=1.0)
        alive.append(nws)
        for k in range(1, 40, 3):
            r = _result(nws, "\n".join(lines[s - 1:s - 1 + k]), True)
            r.end_line, r.full_end_line = s + k - 1, s + 39
            real = len(enc.encode(render_result_xml(r), allowed_special="all"))
            assert 0 <= coster.prefix_cost(nws, k) - real <= 2 * SLACK, (s, k)
        from_counts += coster._block(nws).counts is not None
    assert from_counts > len(alive) * 0.6


@pytest.mark.parametrize("name", ["cli.py", "service.py", "store/edge_vector_store.py"])
def test_counts_of_real_files_add_up(name: str) -> None:
    text = (Path(coderag.__file__).parent / name).read_text(encoding="utf-8")
    assert _check_blocks(split_lines(text), span=60, step=7) > 1000


def test_segment_starts() -> None:
    assert starts_segment("x") and starts_segment("  def f():") and starts_segment("\t}")
    assert not starts_segment("") and not starts_segment("   ") and not starts_segment("\u2028")
    assert not starts_segment("y = 1\r") and not starts_segment("\rz")


def test_indexing_stores_counts_and_index_fills_what_is_missing(tiny_repo: Path) -> None:
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.migrations import fill_line_tokens
    from coderag.store.state import IndexState

    index_repository(tiny_repo)
    state = IndexState(index_dir(tiny_repo) / DB_NAME)
    try:
        records = state.files()
        stored = state.line_tokens_of(records, ENCODING)
        assert set(stored) == set(records)
        tok = PayloadTokenizer()
        for p, (sha, blob) in stored.items():
            want = segment_counts(split_lines((tiny_repo / p).read_text(encoding="utf-8")), tok)
            assert sha == records[p].sha256 and blob == want.tobytes()
        # An index from before counts were stored: `coderag index` fills them in, without re-indexing.
        state.conn.execute("DELETE FROM line_tokens")
        state.commit()
        assert state.without_line_tokens(ENCODING) and fill_line_tokens(tiny_repo, state) == len(records)
        assert index_repository(tiny_repo).upgraded == {}  # nothing left to fill
        assert state.line_tokens_of(records, ENCODING) == stored and not state.without_line_tokens(ENCODING)
        assert state.line_tokens_of(records, "other_encoding") == {}
    finally:
        state.close()


def test_search_uses_counts_only_of_the_content_indexed(tiny_repo: Path) -> None:
    """Counts are served for the content they were made from; a search over an edited file prices its blocks
    by encoding them, and its payload still counts exactly."""
    from coderag.pipelines.code_index import CodeIndex

    with CodeIndex.open(tiny_repo) as index:
        index.refresh()
        records = index.state.files()
        rel = "src/auth/service.py"
        current = {p: r.sha256 for p, r in records.items()}
        assert set(index.tokenizer.line_counts(current)) == set(records)
        assert index.tokenizer.line_counts({rel: "0" * 64}) == {}
        index.tokenizer.clear()
        index.warm_up()  # preloads the counts
        assert index.tokenizer.line_counts_kept() == len(records)
        res = index.search("login retries", max_tokens=2000, refresh=False)
        assert res and res.tokens == index.count_tokens(res.to_xml())
        path = tiny_repo / rel
        path.write_text(path.read_text(encoding="utf-8").replace("MAX_RETRIES = 3", "MAX_RETRIES = 33333 # <&>"),
                        encoding="utf-8")
        assert index.check_files([rel]) == {rel: None}
        res = index.search("login retries", max_tokens=2000, refresh=False)
        assert any(r.stale for r in res) and res.tokens == index.count_tokens(res.to_xml())


def summary_files(root: Path) -> dict:
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        return state.files()
    finally:
        state.close()


@pytest.mark.parametrize("by", ["coderag index", "owner"])
@pytest.mark.parametrize("older", ["node_content", "slim without parent id"])
def test_index_rewrites_points_of_the_older_format_once(tiny_repo: Path, older: str, by: str) -> None:
    """Points stored as LlamaIndex's `_node_content` (before slim nodes), or as slim nodes without the parent
    id in the payload (before light nodes), are rewritten by `coderag index`, or by an owner process when
    it starts (with the line counts an older index lacks), payloads only; searches answer the same before
    and after, and the next run does not scan again."""
    from llama_index.core.vector_stores.utils import node_to_metadata_dict
    from qdrant_edge import ScrollRequest, UpdateOperation

    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.migrations import upgrade_store
    from coderag.store.edge_vector_store import NODE_KEY, PARENT_KEY, payload_to_node
    from coderag.store.state import STORE_FORMAT, STORE_FORMAT_KEY

    index_repository(tiny_repo)
    with CodeIndex.open(tiny_repo) as index:
        assert index.state.get_meta(STORE_FORMAT_KEY) == STORE_FORMAT
        want = [(r.file_path, r.start_line, r.end_line, r.text) for r in index.search("login retries")]
        shard = index.vector_store.client
        recs, _ = shard.scroll(ScrollRequest(limit=1000, with_payload=True))
        for r in recs:  # back to an older format, as an index made before slim (or light) nodes stored them
            if older == "node_content":
                node = payload_to_node(r.payload)
                old = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
                shard.update(UpdateOperation.set_payload([r.id], {"_node_content": old["_node_content"]}))
                shard.update(UpdateOperation.delete_payload([r.id], [NODE_KEY]))
            shard.update(UpdateOperation.delete_payload([r.id], [PARENT_KEY]))
        index.state.conn.execute("DELETE FROM meta WHERE key = ?", (STORE_FORMAT_KEY,))
        index.state.conn.execute("DELETE FROM line_tokens")
        index.state.commit()
        index.vector_store.clear_node_cache()
        assert [(r.file_path, r.start_line, r.end_line, r.text) for r in index.search("login retries")] == want
    if by == "owner":
        from coderag.service import IndexService

        svc = IndexService(tiny_repo, watch=False, background=False, serve=False).start()
        try:
            svc._initial_index()  # what start() runs on a thread of its own with background=True
            assert svc.progress["phase"] == "idle"
            assert not svc.index.state.without_line_tokens(ENCODING)
        finally:
            svc.stop()
    else:
        summary = index_repository(tiny_repo)
        assert summary.upgraded == {"files' line token counts stored": len(summary_files(tiny_repo)),
                                    "stored chunks rewritten in the current format": len(recs)}
    with CodeIndex.open(tiny_repo) as index:
        assert index.state.get_meta(STORE_FORMAT_KEY) == STORE_FORMAT and not index.state.without_line_tokens(ENCODING)
        recs, _ = index.vector_store.client.scroll(ScrollRequest(limit=1000, with_payload=True))
        assert len(recs) > 5 and all(NODE_KEY in r.payload and "_node_content" not in r.payload for r in recs)
        parents = [(r.payload[PARENT_KEY], payload_to_node(r.payload).parent_node) for r in recs]
        assert all(pid == (p.node_id if p is not None else "") for pid, p in parents)
        assert {pid == "" for pid, _ in parents} == {True, False}  # leaves with and without a parent
        assert [(r.file_path, r.start_line, r.end_line, r.text) for r in index.search("login retries")] == want
        assert upgrade_store(tiny_repo, index.settings, index.state) == 0  # once: the meta key says it is done
