"""An index built before the secret and data rules loses, on its next upgrade, the files they now class
(pipelines/ingestion.py purge_reclassified), once per rules version (issue 16).

The old index is made by a real build with the content rules switched off (what a coderag of before the
rules read), then the current code runs `index_repository` on it, as `coderag index` would.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import write_files

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_rnd = random.Random(16)
TOKEN = "gh" + "p_" + "Qz" + "".join(_rnd.choice(_BASE62) for _ in range(34))  # a fake of the right shape
ROWS = "".join(f"{i} {i * 0.25:.2f} {i * 7 % 13} {i * 3}\n" for i in range(300))
FILES = {
    "src/shop/settings.py": f'"""Deploy settings."""\n\nDEPLOY_TOKEN = "{TOKEN}"\n',
    "ops/deploy.yaml": f"deploy:\n  token: {TOKEN}\n",
    "bench/timings.txt": "# pricequotient timings\n" + ROWS,
    "src/shop/cart.py": '''\
        """The shopping cart."""


        def cart_total(items):
            """Sum the prices of the items in the cart, in cents."""
            return sum(item.price_cents * item.quantity for item in items)
        ''',
    "README.md": "# Shop\n\nA shop with a cart and deploy settings.\n",
}
PURGED = {"ops/deploy.yaml": "secret", "bench/timings.txt": "data"}
REMASKED = "src/shop/settings.py"  # source code: indexed again with the token masked (issue 27)


def index_before_the_rules(root: Path):
    """Index `root` as a coderag of before the content rules did: no file classed by its content, no token
    masked, and no rules version in the index's meta. Returns the build's summary."""
    from coderag import index_repository
    from coderag.base.config import Settings
    from coderag.nodes import scan
    from coderag.nodes.file_text import DecodedText
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.pipelines.ingestion import FILE_CLASSES_KEY
    from coderag.store.state import IndexState

    mp = pytest.MonkeyPatch()
    mp.setattr(scan, "content_class", lambda rel, data: None)  # the reader of before the content rules,
    mp.setattr(scan, "decode_file",  # and before masking
               lambda data, notebook=False: DecodedText(data.decode("utf-8")))
    try:
        old = index_repository(root, settings=Settings())
    finally:
        mp.undo()
    state = IndexState(index_dir(root) / DB_NAME)
    try:
        state.conn.execute("DELETE FROM meta WHERE key=?", (FILE_CLASSES_KEY,))  # an index that never had it
        state.commit()
    finally:
        state.close()
    return old


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory):
    """(root, summary of the first build without content rules, summary of the run that upgrades it)."""
    from coderag import index_repository
    from coderag.base.config import Settings
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import IndexState

    root = write_files(tmp_path_factory.mktemp("reclassify") / "shop", FILES)
    old = index_before_the_rules(root)
    state = IndexState(index_dir(root) / DB_NAME)
    try:
        assert {p: state.file(p).status for p in [*PURGED, REMASKED]} == {p: "indexed" for p in [*PURGED, REMASKED]}
        assert TOKEN in state.conn.execute("SELECT group_concat(value) FROM kv").fetchone()[0]  # held in clear
    finally:
        state.close()
    return root, old, index_repository(root, settings=Settings())


def test_reclassify_old_index_held_them(upgraded) -> None:
    """The set-up is what it claims: the first build indexed the token file and the rows."""
    _, old, _ = upgraded
    assert old.indexed == len(FILES) and not old.skipped


def test_reclassify_upgrade_drops_secrets_and_data_once(upgraded) -> None:
    from coderag import CodeIndex
    from coderag.base.config import Settings
    from coderag.pipelines.migrations import PURGED_NOTE, REMASKED_NOTE

    root, _, new = upgraded
    assert new.upgraded.get(PURGED_NOTE) == len(PURGED), new.upgraded
    assert new.upgraded.get(REMASKED_NOTE) == 1, new.upgraded
    with CodeIndex.open(root, settings=Settings(), create=False) as idx:
        for path, reason in PURGED.items():
            rec = idx.state.file(path)
            assert (rec.status, rec.n_nodes, rec.n_leaves) == (reason, 0, 0), (path, rec)
            assert idx.docstore.get_ref_doc_info(path) is None, path
            assert idx.vector_store.point_ids(path) == [], path
        assert idx.state.skip_counts().get("secret") == 1 and idx.state.skip_counts().get("data") == 1
        for query in (TOKEN, "DEPLOY_TOKEN", "pricequotient timings"):
            for retriever in ("bm25", "hybrid"):
                res = idx.search(query, retriever=retriever, max_tokens=4000)
                assert not {r.file_path for r in res} & set(PURGED), (query, retriever)
                assert TOKEN not in res.to_xml().replace(query, "")
        # the other files are still served, the source file with its token masked
        assert idx.search("sum the prices in the cart", max_tokens=2000)[0].file_path == "src/shop/cart.py"
        res = idx.search("DEPLOY_TOKEN deploy settings", retriever="bm25", max_tokens=2000)
        assert res[0].file_path == REMASKED and 'DEPLOY_TOKEN = "ghp_[SECRET MASKED]' in res[0].text
        assert idx.state.file(REMASKED).status == "indexed"
        docs = idx.state.conn.execute("SELECT group_concat(value) FROM kv").fetchone()[0]
        assert TOKEN not in docs  # the docstore holds the file's nodes as indexed again: masked


def test_reclassify_runs_once_per_rules_version(upgraded) -> None:
    from coderag import index_repository
    from coderag.base.config import Settings

    root, _, _ = upgraded
    again = index_repository(root, settings=Settings())
    assert again.upgraded == {} and again.indexed == 0
    assert again.unchanged == len(FILES)  # the purged files' rows say what they are: not read again


def test_reclassify_files_skipped_under_older_rules_are_read_again(tmp_path: Path) -> None:
    """Issue 27: an index built under rules 2 left out a source file with a token (as a secret) and a file
    with one bad byte (as "encoding"). The upgrade reads them again, once, and indexes them: the token
    masked, the byte replaced; they are not counted as re-masked, and the next run reads nothing."""
    from coderag import index_repository
    from coderag.base.config import Settings
    from coderag.nodes import scan
    from coderag.nodes.file_classes import SECRET, content_class, secret_content
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.pipelines.changes import SKIPS_RECHECKED_KEY
    from coderag.pipelines.ingestion import FILE_CLASSES_KEY
    from coderag.store.state import IndexState

    root = write_files(tmp_path / "shop", FILES)
    (root / "src/shop/legacy.py").write_bytes("# Ren\xe9\ndef legacy_total():\n    return 1\n".encode("latin-1"))

    def rules_2(rel: str, data: bytes):
        if rel == "src/shop/legacy.py":
            return "encoding", "not UTF-8 at byte 5"
        why = secret_content(data)
        return (SECRET, why) if why else content_class(rel, data)

    mp = pytest.MonkeyPatch()
    mp.setattr(scan, "content_class", rules_2)
    try:
        index_repository(root, settings=Settings())
    finally:
        mp.undo()
    state = IndexState(index_dir(root) / DB_NAME)
    try:
        assert (state.file("src/shop/settings.py").status, state.file("src/shop/legacy.py").status) == \
            (SECRET, "encoding")
        state.set_meta(FILE_CLASSES_KEY, "2")
        state.set_meta(SKIPS_RECHECKED_KEY, "")  # as an index of before has it: no such key
        state.commit()
    finally:
        state.close()

    new = index_repository(root, settings=Settings())
    assert new.indexed == 2 and new.notes == {"secret masked": 1, "decoded with replacement": 1}, new
    assert new.upgraded == {}, new.upgraded  # nothing purged, nothing indexed twice
    again = index_repository(root, settings=Settings())
    assert (again.indexed, again.unchanged, again.upgraded) == (0, len(FILES) + 1, {})
