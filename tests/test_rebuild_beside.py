"""An owner that builds its index again while it serves (`coderag index --rebuild` through it, an edited model or
chunking setting) builds the new index beside the old one: every search until the swap is answered from the
old index, whole; a build that fails or is killed leaves it as it was; a swap killed half way is finished by
whoever opens the index next."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from conftest import TINY_FILES, write_files
from coderag.base.config import Settings
from coderag.base.paths import DB_NAME, LOCK_NAME, SHARD_NAME, index_dir
from coderag.pipelines.fingerprint import fingerprint

QUERY = "add sales tax to the sum of the line items"


def _other_chunking() -> Settings:
    settings = Settings()
    settings.chunking.max_tokens = 64
    return settings


def _built_with(root: Path) -> str:
    conn = sqlite3.connect(str(index_dir(root) / DB_NAME))
    try:
        return conn.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()[0]
    finally:
        conn.close()


def _files(res: dict) -> list[str]:
    return [r["file_path"] for r in res["results"]]


@pytest.fixture()
def built(tmp_path: Path) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    return root


@pytest.fixture()
def owner(built: Path):
    from coderag.service import IndexService

    svc = IndexService(built, settings=Settings(), watch=False, background=False, serve=False).start()
    yield svc
    svc.stop()


def _indexer(svc) -> threading.Thread:
    return next(t for t in svc._threads if t.name == "coderag-indexer" and t.is_alive())


def _wait_until(test, what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_searches_are_answered_from_the_old_index_until_the_new_one_takes_its_place(owner, built: Path) -> None:
    """Built in place, the index answered "being built and has no chunks yet", then from BM25 alone, until the
    vectors of the new chunks were computed. Here the swap is held back (the owner's request gate taken, which
    the swap takes to hold new requests) to search while the new index is being built and once it is complete
    but not yet in place."""
    before = owner.dispatch("search", {"query": QUERY})
    old_index = owner.index
    assert _files(before) and before["results"][0]["file_path"] == "src/billing/invoice.py", before
    owner.settings = _other_chunking()
    with owner._requests:  # a Condition over an RLock: this thread's requests still pass
        owner.start_over("the chunking changed")
        building = owner.dispatch("search", {"query": QUERY})  # the new index has nothing yet
        assert _files(building) == _files(before) and not building.get("message"), building
        _wait_until(lambda: (index_dir(built) / "next" / DB_NAME).is_file() and owner.progress["total"] > 0
                    and owner.progress["done"] == owner.progress["total"], "the new index holds every file")
        time.sleep(0.5)  # its second pass (files changed meanwhile: none), then it waits for the lock
        assert owner.index is old_index and owner.progress["phase"] == "indexing", owner.progress
        complete = owner.dispatch("search", {"query": QUERY})
        assert _files(complete) == _files(before), complete
        assert _built_with(built) == fingerprint(Settings())  # the old index is still the one in place
        building = [p for p in (index_dir(built) / "next").rglob("*")]
        assert building and all(p.stat().st_mode & 0o077 == 0 for p in building), building  # private as the index
    _indexer(owner).join(120)
    assert owner.progress["phase"] == "idle", owner.progress
    assert owner.index is not old_index and owner.dense_ready
    assert _built_with(built) == fingerprint(_other_chunking())
    assert not (index_dir(built) / "next").exists()
    assert owner.last_build["rebuild_reason"] == "the chunking changed" and owner.last_build["chunks"] > 0
    after = owner.dispatch("search", {"query": QUERY})
    assert after["results"][0]["file_path"] == "src/billing/invoice.py", after


def test_a_rebuild_that_fails_leaves_the_old_index_serving(owner, built: Path) -> None:
    bad = Settings()
    bad.chunking.max_tokens = 250  # leaves no room for the breadcrumb in the model's window: refused by the build
    owner.settings = bad
    owner.start_over("the chunking changed")
    _indexer(owner).join(120)
    assert owner.progress["phase"] == "failed", owner.progress
    assert "the index as it was still answers searches" in owner.progress["error"], owner.progress
    assert not (index_dir(built) / "next").exists()
    assert _built_with(built) == fingerprint(Settings())
    assert owner.dispatch("search", {"query": QUERY})["results"][0]["file_path"] == "src/billing/invoice.py"


def _build_beside(root: Path, settings: Settings) -> None:
    """A complete index of `settings` in .coderag/next/, as an owner leaves it just before its swap."""
    from coderag.base.lock import WriterLock
    from coderag.pipelines.code_index import CodeIndex

    lock = WriterLock(index_dir(root) / LOCK_NAME).acquire()
    try:
        new = CodeIndex.open_beside(root, settings, lock)
        new.refresh()
        new.close(release_lock=False)
    finally:
        lock.release()


def test_a_build_beside_killed_before_its_end_is_deleted_and_the_old_index_opens(built: Path) -> None:
    from coderag import CodeIndex

    _build_beside(built, _other_chunking())  # no mark: as if killed before the swap began
    with CodeIndex.open(built, settings=Settings()) as index:
        assert index.search(QUERY)[0].file_path == "src/billing/invoice.py"
    assert not (index_dir(built) / "next").exists()
    assert _built_with(built) == fingerprint(Settings())


@pytest.mark.parametrize("moved", ["nothing", "database"])
def test_a_swap_killed_half_way_is_finished_by_the_next_open(built: Path, moved: str) -> None:
    """Killed after the mark, with the new database moved in or not yet: the next open ends the swap, and the
    index in place is the new one, whole (its shard with it)."""
    from coderag import CodeIndex
    from coderag.store.beside import mark_ready

    idx = index_dir(built)
    _build_beside(built, _other_chunking())
    mark_ready(idx)
    if moved == "database":
        for suffix in ("-wal", "-shm"):
            (idx / (DB_NAME + suffix)).unlink(missing_ok=True)
        (idx / "next" / DB_NAME).replace(idx / DB_NAME)
    with CodeIndex.open(built, settings=_other_chunking()) as index:
        res = index.search(QUERY)
        assert res[0].file_path == "src/billing/invoice.py"
        assert index.state.counts()["pending_dense"] == 0
    assert not (idx / "next").exists() and (idx / SHARD_NAME).is_dir()
    assert _built_with(built) == fingerprint(_other_chunking())


def test_a_rebuild_with_the_store_elsewhere_is_built_in_place(built: Path, tmp_path: Path) -> None:
    from coderag.store.beside import can_build_beside

    elsewhere = Settings()
    elsewhere.store.path = str(tmp_path / "shard")
    assert not can_build_beside(elsewhere, index_dir(built)) and can_build_beside(Settings(), index_dir(built))


@contextlib.contextmanager
def _searching(owner, allowed: tuple = ()):
    """Searches in a loop from another thread while the block runs: yields (answers' result counts, failures);
    an exception of the `allowed` types is an answer the test permits, not a failure."""
    errors: list[BaseException] = []
    answers: list[int] = []
    stop = threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                answers.append(len(owner.dispatch("search", {"query": QUERY})["results"]))
            except allowed:
                pass
            except BaseException as exc:  # noqa: BLE001 (any other failure is the test's finding)
                errors.append(exc)

    searcher = threading.Thread(target=search_loop)
    searcher.start()
    try:
        yield answers, errors
    finally:
        stop.set()
        searcher.join(60)


def test_searches_during_the_whole_rebuild_and_its_swap_all_answer(owner, built: Path) -> None:
    """Searches in a loop from another thread while the index is built again and swapped: none fails (the
    swap waits for the one under way and holds the next) and none comes back empty."""
    with _searching(owner) as (answers, errors):
        owner.settings = _other_chunking()
        owner.start_over("the chunking changed")
        _indexer(owner).join(120)
        time.sleep(0.3)  # searches of the new index too
    assert owner.progress["phase"] == "idle" and _built_with(built) == fingerprint(_other_chunking())
    assert not errors, errors[:3]
    assert answers and min(answers) > 0, (len(answers), min(answers))


def test_a_rebuild_beside_embeds_no_chunk_the_old_index_had_embedded(owner, built: Path) -> None:
    """`coderag index --rebuild` through the owner, settings unchanged: every vector comes from the old index's
    cache (next/previous.db), which goes with the swap."""
    from coderag.owner_changes import REBUILD_ASKED

    owner.build(rebuild=True)
    _indexer(owner).join(120)
    assert owner.progress["phase"] == "idle", owner.progress
    assert owner.last_build["embedded"] == 0 and owner.last_build["cached"] > 0, owner.last_build
    assert owner.last_build["rebuild_reason"] == REBUILD_ASKED
    assert not list(index_dir(built).rglob("previous.db*")) and not (index_dir(built) / "next").exists()


def test_an_owner_opening_an_index_of_other_chunking_answers_from_it_while_it_builds_the_new_one(
        built: Path) -> None:
    """A chunking setting edited while no owner ran (or a coderag whose splitter changed): the owner that
    opens the index answers from it as it was built, with the chunking it was built with, until the index of
    the new settings takes its place. Before, it set the index aside at once and answered "no chunks yet",
    then from BM25 alone."""
    from coderag.service import IndexService

    svc = IndexService(built, settings=_other_chunking(), watch=False, serve=False).start()
    try:
        first = svc.dispatch("search", {"query": QUERY})
        if svc.progress["phase"] != "idle":  # the rebuild still runs: the old index, whole, answers
            assert svc.index.settings.chunking.max_tokens == Settings().chunking.max_tokens
            assert svc.progress["beside"] and svc.progress["rebuild"].startswith("the index had been built with")
        assert first["results"][0]["file_path"] == "src/billing/invoice.py" and not first.get("message"), first
        assert "BM25" not in (first.get("freshness") or ""), first
        _indexer(svc).join(120)
        assert svc.progress["phase"] == "idle", svc.progress
        assert svc.index.settings.chunking.max_tokens == 64
        assert _built_with(built) == fingerprint(_other_chunking())
        assert svc.dispatch("search", {"query": QUERY})["results"][0]["file_path"] == "src/billing/invoice.py"
    finally:
        svc.stop()


def test_an_index_of_a_model_no_longer_here_is_not_answered_from(built: Path) -> None:
    """Its vectors answer no query another model embeds: the owner builds the new index in place."""
    import json

    from coderag.pipelines.index_repository import servable_while_rebuilt
    from coderag.store.state import IndexState

    assert servable_while_rebuilt(index_dir(built), Settings()) is None  # current: nothing to rebuild
    as_built = servable_while_rebuilt(index_dir(built), _other_chunking())
    assert as_built is not None and fingerprint(as_built) == fingerprint(Settings())
    state = IndexState(index_dir(built) / DB_NAME)
    try:
        fp = json.loads(state.get_meta("fingerprint"))
        state.set_meta("fingerprint", json.dumps({**fp, "model": "/elsewhere/another-model"}))
        state.commit()
    finally:
        state.close()
    assert servable_while_rebuilt(index_dir(built), _other_chunking()) is None


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_an_owner_that_drops_secrets_on_open_builds_a_store_without_their_bytes(tmp_path: Path) -> None:
    """An index of an older coderag held a token the current rules drop: opening it drops the file from every
    answer at once, but the store's files kept its bytes until `coderag index --rebuild`. The owner now builds
    the index again beside it, and after the swap no file of the index holds them."""
    from test_reclassify import FILES, TOKEN, index_before_the_rules

    from coderag.service import SCRUB, IndexService

    root = write_files(tmp_path / "shop", FILES)
    index_before_the_rules(root)
    assert any(f.startswith(SHARD_NAME) for f in _files_holding(index_dir(root), TOKEN.encode()))

    svc = IndexService(root, settings=Settings(), watch=False, serve=False).start()
    try:
        assert svc.progress.get("rebuild") == SCRUB, svc.progress
        assert TOKEN not in json.dumps(svc.dispatch("search", {"query": "deploy token settings"}))
        _indexer(svc).join(120)
        assert svc.progress["phase"] == "idle", svc.progress
        assert svc.last_build["embedded"] == 0  # every vector from the old index's cache
    finally:
        svc.stop()
    assert _files_holding(index_dir(root), TOKEN.encode()) == []


def test_a_disk_without_room_for_a_second_index_builds_it_in_place(owner, built: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A build beside that ran out of disk would fail and leave the new settings unapplied: where the disk has
    not room for a second index, the owner builds it again in place, as before (BM25 first). The disk is made
    too small by asking for more room than it has free."""
    from coderag.store import beside

    assert beside.room_beside(index_dir(built))
    monkeypatch.setattr(beside, "ROOM_FACTOR", shutil.disk_usage(index_dir(built)).free)
    assert not beside.room_beside(index_dir(built))
    owner.settings = _other_chunking()
    owner.start_over("the chunking changed")
    assert owner.progress["beside"] is False
    _indexer(owner).join(120)
    assert owner.progress["phase"] == "idle" and _built_with(built) == fingerprint(_other_chunking())


def test_an_owners_status_gives_the_time_left_of_its_build(tmp_path: Path) -> None:
    """`coderag status` and the index_status tool showed a build's files done, not its time left (which only
    `coderag index`'s bar showed): the owner reckons it as the bar does (coderag/base/build_clock.py)."""
    from coderag import index_repository
    from coderag.service import IndexService

    files = {f"src/mod{i}.py": "".join(f"def handler_{i}_{j}(event):\n    '''Handle event {j} of module {i}.'''\n"
                                       f"    return event.get('k{j}', {j}) * {i}\n\n\n" for j in range(12))
             for i in range(24)}
    root = write_files(tmp_path / "repo", files)
    index_repository(root, settings=Settings())
    svc = IndexService(root, settings=Settings(), watch=False, serve=False).start()
    try:
        _indexer(svc).join(120)
        assert "seconds_left" not in svc.status()["indexing"]  # idle: nothing to reckon
        svc.settings = _other_chunking()
        with svc._requests:  # the swap waits: the build's last state can be read
            svc.start_over("the chunking changed")
            _wait_until(lambda: svc._clock.embedded > 0 and svc.progress["done"] == svc.progress["total"] > 0,
                        "the new index holds every file")
            st = svc.status()["indexing"]
            assert st["phase"] == "indexing" and isinstance(st.get("seconds_left"), int), st
        _indexer(svc).join(120)
        assert svc.progress["phase"] == "idle" and "seconds_left" not in svc.status()["indexing"]
    finally:
        svc.stop()


def test_an_owner_given_another_model_answers_from_the_old_index_with_the_old_model(built: Path,
                                                                                   tmp_path: Path) -> None:
    """`embedding.model_path` changed while no owner ran: the owner answers from the index as it was, with the
    model that embedded it, while it builds the new index beside it (before: "no chunks yet", then BM25 alone
    over a part-built index for as long as every chunk took to embed). The new model here is a copy of the bundled
    one with a file of its own: another model to the index, which tells models apart by their files."""
    from coderag.service import IndexService

    bundled = Settings().model_dir()
    other = Settings()
    other.embedding.model_path = str(tmp_path / "model")
    shutil.copytree(bundled, tmp_path / "model")
    (tmp_path / "model" / "README.md").write_text("A model of its own.\n")
    assert fingerprint(other) != fingerprint(Settings())
    svc = IndexService(built, settings=other, watch=False, serve=False).start()
    try:
        if svc.progress["phase"] != "idle":
            assert svc.index.settings.model_dir() == bundled and svc.progress["beside"], svc.progress
        first = svc.dispatch("search", {"query": QUERY})
        assert first["results"][0]["file_path"] == "src/billing/invoice.py" and not first.get("message"), first
        _indexer(svc).join(120)
        assert svc.progress["phase"] == "idle" and svc.index.settings.model_dir() == tmp_path / "model"
        assert _built_with(built) == fingerprint(other)
    finally:
        svc.stop()


def test_a_rebuild_in_place_waits_for_the_searches_under_way(owner, built: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the index is built again in place (no room beside it), the old index closes under searches from
    another thread: none of them may meet it closed. A search during the build may say there is nothing to
    answer from yet (the IndexLockedError of an owner not serving, or no results), but never fails otherwise.
    A rebuild a request asks for (`coderag index --rebuild`) does not wait for that request itself."""
    from coderag.base.errors import CodeRagError
    from coderag.service import HOLD_WAIT_S
    from coderag.store import beside

    monkeypatch.setattr(beside, "ROOM_FACTOR", shutil.disk_usage(index_dir(built)).free)
    with _searching(owner, allowed=(CodeRagError,)) as (answers, errors):
        for max_tokens in (64, 96):
            time.sleep(0.3)
            owner.settings = Settings()
            owner.settings.chunking.max_tokens = max_tokens
            owner.start_over("the chunking changed")
            assert owner.progress["beside"] is False
            _indexer(owner).join(120)
        time.sleep(0.3)
        t0 = time.monotonic()
        assert "building" in owner.dispatch("build", {"rebuild": True})
        assert time.monotonic() - t0 < HOLD_WAIT_S and owner.progress["beside"] is False
        _indexer(owner).join(120)
        time.sleep(0.3)
    assert not errors, errors[:3]
    assert answers and answers[-1] > 0


def test_a_file_written_while_the_new_index_waits_for_its_swap_is_counted_in_the_build(owner, built: Path) -> None:
    """The build's account (`coderag status`, what `coderag index` prints) counts what the passes after the
    first indexed: it counted the first pass alone, and a file written during the build was indexed and
    left out of it."""
    from coderag.store.state import STATUS_INDEXED

    owner.settings = _other_chunking()
    with owner._requests:  # the swap waits for this gate: the file comes after the new index's first pass
        owner.start_over("the chunking changed")
        _wait_until(lambda: (index_dir(built) / "next" / DB_NAME).is_file() and owner.progress["total"] > 0
                    and owner.progress["done"] == owner.progress["total"], "the new index holds every file")
        write_files(built, {"src/billing/refund.py": "def refund_order(order):\n    return -order.total\n"})
    _indexer(owner).join(120)
    assert owner.progress["phase"] == "idle", owner.progress
    indexed = [p for p, r in owner.index.state.files().items() if r.status == STATUS_INDEXED]
    assert "src/billing/refund.py" in indexed
    assert owner.last_build["indexed"] == len(indexed), (owner.last_build["indexed"], indexed)
    assert owner.last_build["files_seen"] == len(owner.index.state.files()), owner.last_build
