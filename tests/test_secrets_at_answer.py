"""A file the current rules call a secret never reaches an answer: one that gained a key after it was indexed
(the reader refuses it), and one an index classed by older rules let in (dropped when the index is opened)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from test_file_classes import pem

MARK = "zqsettingsmark"
CONFIG = f"# {MARK}: settings of the shop service\nservice:\n  name: shop\n  port: 8080\n"
KEY = pem("RSA PRIVATE KEY", seed=7)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path / "shop", {
        "config/service.yml": CONFIG,
        "src/shop/service.py": '"""The shop service."""\n\n\ndef start_service(port):\n    return port\n',
    })
    index_repository(root)
    return root


def _add_key(root: Path) -> None:
    (root / "config/service.yml").write_text(CONFIG + "tls_key: |\n" + "".join(f"  {ln}\n" for ln in KEY.splitlines()))


def test_a_file_that_gained_a_key_since_indexing_is_not_shown(repo: Path) -> None:
    from coderag import CodeIndex
    from coderag.pipelines.expand import expand_result
    from coderag.postprocessors.lines import SECRET_NOW, LineSource

    _add_key(repo)
    source = LineSource(repo)
    assert source.lines("config/service.yml") is None and source.refusal["config/service.yml"] == SECRET_NOW
    assert source.lines("src/shop/service.py") is not None
    with CodeIndex.open(repo, create=False) as idx:
        res = idx.search(MARK, retriever="bm25", refresh=False)  # the index still holds the file as it was
        assert "config/service.yml" not in {r.file_path for r in res}
        assert "PRIVATE KEY" not in res.to_xml()
        with pytest.raises(ValueError, match="it holds a secret: never shown"):
            expand_result(idx, "config/service.yml:1-10", None)


def test_an_index_classed_by_older_rules_drops_their_new_secrets_when_opened(repo: Path) -> None:
    """Before a notebook's retriever, which hands out stored text, gets a node of such a file."""
    import os

    from coderag import CodeIndex
    from coderag.pipelines.changes import FILE_CLASSES_KEY
    from test_file_classes import TOKENS

    path = repo / "config/service.yml"
    token = TOKENS["github classic"]
    placeholder = token[:4] + "x" * (len(token) - 4)
    path.write_text(CONFIG + f"deploy_token: {placeholder}\n")
    with CodeIndex.open(repo, create=False) as idx:
        idx.refresh()
        assert "config/service.yml" in {n.node.metadata["file_path"] for n in idx.retriever.retrieve(MARK)}
        idx.state.set_meta(FILE_CLASSES_KEY, "0")
        idx.state.commit()
    st = path.stat()
    path.write_text(CONFIG + f"deploy_token: {token}\n")  # the bytes older rules would have let in
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with CodeIndex.open(repo, create=False) as idx:
        assert idx.state.file("config/service.yml").status == "secret"
        assert "config/service.yml" not in {n.node.metadata["file_path"] for n in idx.retriever.retrieve(MARK)}
