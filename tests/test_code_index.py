"""CodeIndex: opening and locking, its LlamaIndex parts, freshness (changed and deleted files), unicode paths."""

from __future__ import annotations

import os
import textwrap
import unicodedata
from pathlib import Path

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore

from conftest import write_files
from coderag.base.config import Settings
from coderag.base.errors import IndexLockedError, IndexMissingError
from test_query import RETRIEVAL_FILES, assert_exact, file_lines

INDEX_FILES = {
    **RETRIEVAL_FILES,
    "src/données/ünï.py": '''\
        """Accents in paths."""


        def strip_diacritics_from_label(label):
            """Remove accents: 'Crème brûlée' becomes 'Creme brulee'."""
            import unicodedata
            decomposed = unicodedata.normalize("NFKD", label)
            return "".join(ch for ch in decomposed if not unicodedata.combining(ch))
        ''',
    "docs/user guide.md": '''\
        # User guide

        ## Resetting a forgotten password

        Open the sign-in page and follow the reset link sent by e-mail.
        ''',
    "src/mutable/greeting.py": '''\
        def greet_visitor(name):
            """Say hello to a visitor at the front desk."""
            return "Hello, " + name
        ''',
    "src/mutable/farewell.py": '''\
        def wave_goodbye(name):
            """Say goodbye to a departing visitor."""
            return "Goodbye, " + name
        ''',
    "src/mutable/obsolete.py": '''\
        def compute_legacy_checksum(data):
            """Old adler-style checksum kept for the v1 file format."""
            a, b = 1, 0
            for byte in data:
                a = (a + byte) % 65521
                b = (b + a) % 65521
            return (b << 16) | a
        ''',
    "src/mutable/moving.py": '''\
        def measure_river_depth(soundings):
            """Average depth of the river from sonar soundings."""
            return sum(soundings) / len(soundings)
        ''',
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("codeindex") / "shop", INDEX_FILES)
    assert index_repository(root, settings=Settings()).indexed == len(INDEX_FILES)
    return root


@pytest.fixture(scope="module")
def index(repo: Path):
    from coderag import CodeIndex

    with CodeIndex.open(repo, settings=Settings(), create=False) as idx:
        yield idx


def _rewrite(root: Path, rel: str, text: str) -> None:
    p = root / rel
    before = p.stat().st_mtime_ns
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    os.utime(p, ns=(before + 5_000_000_000, before + 5_000_000_000))  # a new mtime even on coarse clocks


# -- opening ------------------------------------------------------------------------------------------

def test_code_index_open_without_index_says_how_to_build_one(tmp_path: Path) -> None:
    from coderag import CodeIndex

    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(IndexMissingError) as exc:
        CodeIndex.open(tmp_path, create=False)
    assert f'Run "coderag index {tmp_path.resolve()}" first.' in str(exc.value)
    assert not (tmp_path / ".coderag").exists()


def test_code_index_empty_index_refuses_to_search(tmp_path: Path) -> None:
    from coderag import CodeIndex

    with CodeIndex.open(tmp_path, settings=Settings()) as idx:
        with pytest.raises(IndexMissingError, match=r"is empty\. Run \"coderag index"):
            idx.search("anything")


def test_code_index_second_handle_is_refused_while_one_is_open(index, repo: Path) -> None:
    from coderag import CodeIndex

    with pytest.raises(IndexLockedError, match="Another coderag process"):
        CodeIndex.open(repo, settings=Settings(), create=False)


def test_code_index_opens_from_a_subfolder(index, repo: Path) -> None:
    from coderag.base.paths import find_root

    assert find_root(repo / "src" / "auth") == repo


# -- LlamaIndex parts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("part", ["retriever", "dense_retriever", "bm25_retriever"])
def test_code_index_parts_are_llamaindex_retrievers(index, part) -> None:
    retriever = getattr(index, part)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("round the sales tax to whole cents")
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    assert nodes[0].node.metadata["file_path"] == "src/billing/invoice.py"


def test_code_index_query_engine_with_a_users_llm(index) -> None:
    from llama_index.core.llms import MockLLM

    response = index.as_query_engine(llm=MockLLM()).query("drop the oldest entries when the cache is full")
    assert response.source_nodes[0].node.metadata["file_path"] == "src/cache/lru.py"


@pytest.mark.parametrize("kwargs", [{}, {"llm": None}])
def test_code_index_query_engine_without_an_llm_says_how_to_bring_one(index, kwargs) -> None:
    """Issue 26: `as_query_engine()` was a TypeError, and `llm=None` an ImportError about OpenAI."""
    with pytest.raises(ValueError, match=r"needs an LLM .*llama-index-llms-ollama.*index\.search") as exc:
        index.as_query_engine(**kwargs)
    assert "openai" not in str(exc.value).lower()


# -- unicode and odd paths ----------------------------------------------------------------------------

def test_code_index_unicode_path_comes_back_as_posix_relative(index, repo: Path) -> None:
    res = index.search("remove accents from a label")
    top = res[0]
    assert top.file_path == "src/données/ünï.py"
    assert unicodedata.is_normalized("NFC", top.file_path)
    assert not Path(top.file_path).is_absolute() and "\\" not in top.file_path
    assert_exact(repo, res)
    assert index.search("remove accents", file_pattern="src/données/*.py")[0].file_path == "src/données/ünï.py"
    assert "<source_file>src/données/ünï.py</source_file>" in res.to_xml()
    assert '"file_path": "src/données/ünï.py"' in res.to_json()


def test_code_index_path_with_a_space(index, repo: Path) -> None:
    # Docs weigh 0.8 against code by default: the glob (with its space) is what this test is about.
    res = index.search("reset a forgotten password", file_pattern="docs/user guide.md")
    assert res[0].file_path == "docs/user guide.md"
    assert_exact(repo, res)


# -- freshness: changed and deleted files --------------------------------------------------------------

def test_code_index_changed_file_is_reindexed_before_answering(index, repo: Path) -> None:
    rel = "src/mutable/greeting.py"
    assert index.search("say hello to a visitor")[0].file_path == rel
    _rewrite(repo, rel, '''\
        """Greetings, now in two languages."""

        GREETINGS = {"en": "Hello", "fr": "Bonjour"}


        def greet_visitor(name, lang="en"):
            """Say hello to a visitor at the front desk, in their language."""
            return GREETINGS[lang] + ", " + name
        ''')
    res = index.search("say hello to a visitor in their language", auto_merge=False, merge_adjacent=False)
    top = res[0]
    # The new function is small: it shares its leaf with the module's first lines (chunking.min_tokens).
    assert (top.file_path, top.end_line) == (rel, 8) and top.start_line <= 6 and "greet_visitor" in top.symbol
    assert "GREETINGS[lang]" in top.text and not top.stale
    assert res.freshness == "refreshed 1 changed file(s) before answering"
    assert_exact(repo, res)
    again = index.search("say hello to a visitor in their language")
    assert again.freshness == "fresh" and not index.changed_files([rel])
    assert_exact(repo, again)


def test_code_index_deleted_file_never_appears(index, repo: Path) -> None:
    rel = "src/mutable/obsolete.py"
    assert index.search("legacy adler checksum")[0].file_path == rel
    (repo / rel).unlink()
    for opts in (dict(), dict(auto_merge=False, merge_adjacent=False), dict(retriever="bm25"),
                 dict(keywords=["compute_legacy_checksum"], requires_exact_match=True)):
        res = index.search("legacy adler checksum compute_legacy_checksum", **opts)
        assert rel not in [r.file_path for r in res], opts
        assert_exact(repo, res)
    assert rel not in index.indexed_paths()


@pytest.mark.parametrize("merge_adjacent", [True, False])
def test_code_index_change_beyond_the_refresh_limit_is_flagged_stale(repo: Path, index, merge_adjacent) -> None:
    """Too many changed files to re-index during a query: results are flagged stale, and their text is still
    the file's lines as they are now."""
    rel = "src/mutable/moving.py"
    _rewrite(repo, rel, f'''\
        # Hydrography helpers, moved down by this comment block ({merge_adjacent}).
        # (two more lines)
        # (and another)


        def measure_river_depth(soundings):
            """Average depth of the river from sonar soundings."""
            return sum(soundings) / len(soundings)
        ''')
    limit = index.settings.retrieval.freshness_max_files
    index.settings.retrieval.freshness_max_files = 0
    try:
        res = index.search("average depth of the river", merge_adjacent=merge_adjacent, auto_merge=False)
    finally:
        index.settings.retrieval.freshness_max_files = limit
    hit = next(r for r in res if r.file_path == rel)
    assert hit.stale and res.freshness == "stale: 1 file(s) changed since indexing"
    assert "<stale>true" in res.to_xml()
    assert_exact(repo, res)
    assert index.changed_files([rel]) == {rel}  # nothing was re-indexed


def test_code_index_file_being_indexed_is_not_called_stale(index, repo: Path) -> None:
    """An ingestion in another thread writes a file's points, then its manifest row: a search between the
    two sees the points without the row. The file is in flight, not stale; its text is read from disk."""
    import threading

    rel = "src/mutable/farewell.py"
    res = index.search("say goodbye to a visitor", refresh=False)
    assert any(r.file_path == rel for r in res)
    row = index.state.files()[rel]
    held, release = threading.Event(), threading.Event()

    def ingest() -> None:
        with index.ingest_lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=ingest)
    t.start()
    held.wait(30)
    try:
        index.state.add_inflight([rel])
        index.state.conn.execute("DELETE FROM files WHERE path = ?", (rel,))
        index.state.reload()
        res = index.search("say goodbye to a visitor", refresh=False)
        hit = next(r for r in res if r.file_path == rel)
        assert not hit.stale
        assert_exact(repo, res)
    finally:
        index.state.put_file(row)
        index.state.clear_inflight([rel])
        index.state.commit()
        release.set()
        t.join()
    # Not in flight, no row: that file is not what is indexed.
    index.state.conn.execute("DELETE FROM files WHERE path = ?", (rel,))
    index.state.reload()
    try:
        assert index.changed_files([rel]) == {rel}
    finally:
        index.state.put_file(row)
        index.state.commit()


def test_code_index_refresh_without_search_picks_up_a_change(index, repo: Path) -> None:
    rel = "src/mutable/farewell.py"
    _rewrite(repo, rel, '''\
        def wave_goodbye(name):
            """Say goodbye to a departing visitor and hold the door open."""
            return "Goodbye, " + name + " (door held)"
        ''')
    summary = index.refresh(paths=[rel])
    assert summary.indexed == 1 and not index.changed_files([rel])
    res = index.search("hold the door open", refresh=False)
    assert res[0].file_path == rel and "door held" in res[0].text and not res[0].stale


# -- ids ---------------------------------------------------------------------------------------------------

def test_code_index_ids_survive_a_rebuild(tmp_path: Path) -> None:
    from coderag import CodeIndex, index_repository

    root = write_files(tmp_path / "small", {k: RETRIEVAL_FILES[k] for k in (
        "src/cache/lru.py", "src/billing/invoice.py", "web/api/users.ts")})
    index_repository(root, settings=Settings())

    def ids():
        with CodeIndex.open(root, settings=Settings(), create=False) as idx:
            return [[(r.id, r.file_path, r.start_line, r.end_line) for r in idx.search(q, **opts)]
                    for q in ("cache eviction", "getUserById", "tax")
                    for opts in (dict(), dict(auto_merge=False, merge_adjacent=False))]

    first = ids()
    assert first == ids()
    index_repository(root, settings=Settings(), rebuild=True)
    assert ids() == first
    assert file_lines(root, "src/cache/lru.py")[4] == "class LruCache:"


def test_index_builds_the_vector_graph_after_a_bulk_load_and_embeds_again_after(tmp_path: Path) -> None:
    """`coderag index` builds the HNSW graph when a run wrote `store.hnsw_min_chunks` chunks or more (the
    owner never does: it would hold the GIL while serving); the document model is let go first and loaded
    again by the next run that embeds."""
    from coderag import CodeIndex, index_repository

    root = write_files(tmp_path / "shop", INDEX_FILES)
    phases: list[str] = []
    settings = Settings.model_validate({"store": {"hnsw_min_chunks": 1}})
    s = index_repository(root, settings=settings, progress=lambda phase, done, total: phases.append(phase))
    assert s.chunks >= 1 and phases[-1] == "optimize", phases
    phases.clear()
    index_repository(write_files(tmp_path / "other", INDEX_FILES), progress=lambda p, d, t: phases.append(p))
    assert "optimize" not in phases  # a run below the default's 5,000 chunks leaves dense queries exact

    _rewrite(root, "src/billing/invoice.py", '''
        def invoice_total(items, tax_rate=0.2):
            """Sum the line items and add the sales tax on the subtotal."""
            return sum(i.price * i.qty for i in items) * (1 + tax_rate)
        ''')
    with CodeIndex.open(root, settings=settings, create=False) as idx:
        idx.optimize()  # what `coderag index` does after a bulk load, on the open index
        again = idx.refresh()  # the model was let go by optimize(): loaded again to embed the change
        assert again.indexed == 1 and again.embedded >= 1
        res = idx.search("add the sales tax to the line items")
        assert res[0].file_path == "src/billing/invoice.py"
        assert_exact(root, res)
