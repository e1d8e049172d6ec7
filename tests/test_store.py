"""The embedded store: filter translation, the payload codec, and a real EdgeVectorStore in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.schema import NodeRelationship, ObjectType, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (FilterCondition, FilterOperator, MetadataFilter, MetadataFilters,
                                                  VectorStoreQuery, VectorStoreQueryMode)

from coderag.nodes.keys import NON_EMBED_KEYS
from coderag.store.edge_filters import to_edge_filter
from coderag.store.edge_vector_store import EdgeVectorStore
from coderag.store.node_codec import (DOC_ID_KEY, LIGHT_EXCLUDED_KEYS, NODE_KEY, PARENT_KEY, TEXT_KEY, ancestor_dirs, light_node,
                                      payload_to_node, store_payload)

F = MetadataFilter


def _flt(*filters, condition=FilterCondition.AND) -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=condition)


# -- filter translation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("flt, shown", [
    (F(key="language", value="python"), ['must=[FieldCondition(key="language"', 'MatchValue(value="python")']),
    (F(key="language", value="go", operator=FilterOperator.NE), ['must_not=[FieldCondition(key="language"']),
    (F(key="dirs", value=["src", "web"], operator=FilterOperator.IN), ['MatchAny(value=["src", "web"])']),
    (F(key="kind", value=["class"], operator=FilterOperator.NIN), ['MatchExcept(value=["class"])']),
    (F(key="text", value="getUser", operator=FilterOperator.TEXT_MATCH), ['MatchText(text="getUser")']),
    (F(key="start_line", value=10, operator=FilterOperator.GTE), ["RangeFloat(gte=10, gt=None"]),
    (F(key="end_line", value=3, operator=FilterOperator.LT), ["lte=None, lt=3)"]),
])
def test_filter_translation_of_each_operator(flt: MetadataFilter, shown: list[str]) -> None:
    text = repr(to_edge_filter(_flt(flt)))
    for part in shown:
        assert part in text, text


def test_filter_translation_nests_or_and_not() -> None:
    inner = _flt(F(key="language", value="python"), F(key="language", value="go"), condition=FilterCondition.OR)
    text = repr(to_edge_filter(_flt(inner, _flt(F(key="kind", value="class"), condition=FilterCondition.NOT))))
    assert text.startswith("Filter(must=[Filter(must=None, should=[FieldCondition(key=\"language\"")
    assert 'must_not=[FieldCondition(key="kind"' in text
    assert to_edge_filter(None) is None and to_edge_filter(MetadataFilters(filters=[])) is None


@pytest.mark.parametrize("flt, message", [
    (F(key="dirs", value="src", operator=FilterOperator.IN), "'in' on 'dirs' needs a list of values, not 'src'"),
    (F(key="start_line", value="ten", operator=FilterOperator.GT), "'>' on 'start_line' needs a number, not 'ten'"),
    (F(key="symbol", value="get", operator=FilterOperator.CONTAINS), "'contains' is not supported"),
])
def test_filter_translation_refuses_a_malformed_filter(flt: MetadataFilter, message: str) -> None:
    with pytest.raises(ValueError) as err:
        to_edge_filter(_flt(_flt(flt), condition=FilterCondition.OR))  # found inside a nested filter too
    assert message in str(err.value)


# -- payload codec --------------------------------------------------------------------------------------------

def _leaf(node_id: str = "00000000-0000-0000-0000-00000000000a", path: str = "src/auth/service.py",
          text: str = "def login(user):\n    return check(user)\n", embedding=None) -> TextNode:
    node = TextNode(id_=node_id, text=text, embedding=embedding,
                    metadata={"file_path": path, "start_line": 17, "end_line": 18, "language": "python",
                              "symbol": "AuthService.login", "kind": "method", "symbols": ["login"]},
                    excluded_embed_metadata_keys=["file_path", "start_line"], start_char_idx=120, end_char_idx=160)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=path, node_type=ObjectType.DOCUMENT)
    node.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id="parent-1", node_type=ObjectType.TEXT)
    node.relationships[NodeRelationship.CHILD] = [RelatedNodeInfo(node_id="c1"), RelatedNodeInfo(node_id="c2")]
    node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id="next-1", node_type=ObjectType.TEXT)
    return node


def test_codec_round_trip_of_a_node_with_parent_children_and_metadata() -> None:
    node = _leaf(embedding=[0.1, 0.2, 0.3, 0.4])
    payload = store_payload(node)
    assert payload[TEXT_KEY] == node.text and payload[PARENT_KEY] == "parent-1"
    assert payload["dirs"] == ["src", "src/auth"] and payload["symbol"] == "AuthService.login"
    assert "_node_content" not in payload and "0.1" not in payload[NODE_KEY]  # the vector is the point's, not JSON
    back = payload_to_node(payload)
    want = node.model_dump(mode="json")
    want["embedding"] = None
    assert back.model_dump(mode="json") == want
    assert back.parent_node.node_id == "parent-1" and [c.node_id for c in back.child_nodes] == ["c1", "c2"]
    assert back.get_content(metadata_mode="embed") == node.get_content(metadata_mode="embed")


def test_codec_light_node_is_the_node_less_prev_and_next() -> None:
    node = _leaf()
    payload = store_payload(node)
    assert payload[DOC_ID_KEY] == "src/auth/service.py"
    stored = {k: v for k, v in payload.items() if k not in LIGHT_EXCLUDED_KEYS}  # what a light query reads
    light = light_node(node.node_id, stored)
    assert light.text == node.text and light.metadata == node.metadata
    assert light.parent_node.node_id == "parent-1" and light.ref_doc_id == node.ref_doc_id
    assert light.next_node is None and (light.start_char_idx, light.end_char_idx) == (120, 160)
    assert light_node(node.node_id, {k: v for k, v in stored.items() if k != PARENT_KEY}) is None  # an older point
    assert ancestor_dirs("a.py") == [] and ancestor_dirs("a/b/c.py") == ["a", "a/b"]


# -- a real store ---------------------------------------------------------------------------------------------

def _node(n: int, path: str, text: str, vec: list[float], language: str = "python") -> TextNode:
    node = TextNode(id_=f"00000000-0000-0000-0000-{n:012d}", text=text, embedding=vec,
                    metadata={"file_path": path, "language": language, "start_line": n, "end_line": n + 1})
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=path)
    return node


def test_edge_store_add_query_delete(tmp_path: Path) -> None:
    store = EdgeVectorStore.open(tmp_path / "shard", dim=4)
    try:
        store.add([_node(1, "src/auth.py", "def parse_header(raw): ...", [1.0, 0.0, 0.0, 0.0]),
                   _node(2, "src/auth.py", "def check_token(token): ...", [0.0, 1.0, 0.0, 0.0]),
                   _node(3, "web/api.ts", "function parseHeader(raw) {}", [0.9, 0.1, 0.0, 0.0], "typescript")])
        assert store.count() == 3 and store.file_paths() == {"src/auth.py", "web/api.ts"}

        def sparse(q: str, filters=None) -> list[str]:
            res = store.query(VectorStoreQuery(query_str=q, mode=VectorStoreQueryMode.SPARSE, similarity_top_k=5,
                                               filters=filters))
            return [n.metadata["file_path"] for n in res.nodes]

        assert sorted(sparse("parse header")) == ["src/auth.py", "web/api.ts"]  # snake_case and camelCase meet
        assert sparse("parse header", _flt(F(key="language", value="typescript"))) == ["web/api.ts"]
        assert sparse("parse header", _flt(F(key="dirs", value=["src"], operator=FilterOperator.IN))) == ["src/auth.py"]
        assert sparse("parse header", _flt(F(key="language", value=["python"], operator=FilterOperator.NIN))) == [
            "web/api.ts"]
        dense = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0, 0.0], similarity_top_k=2), light=True)
        assert [n.node_id[-1] for n in dense.nodes] == ["1", "3"] and dense.similarities[0] > dense.similarities[1]
        assert dense.nodes[0].ref_doc_id == "src/auth.py"

        store.delete("src/auth.py")  # every point of one file
        assert store.count() == 1 and store.point_ids("src/auth.py") == []
        assert sparse("parse header") == ["web/api.ts"]
        store.delete_nodes(filters=_flt(F(key="language", value="typescript")))
        assert store.count() == 0 and sparse("parse header") == []
    finally:
        store.close()


def test_edge_store_reopens_and_a_held_shard_is_named(tmp_path: Path) -> None:
    from coderag.base.errors import IndexLockedError

    store = EdgeVectorStore.open(tmp_path / "shard", dim=4)
    try:
        store.add([_node(7, "a.py", "def seven(): ...", [0.0, 0.0, 1.0, 0.0])])
        with pytest.raises(IndexLockedError, match="Another process holds the index shard"):
            EdgeVectorStore.open(tmp_path / "shard", dim=4)
    finally:
        store.close()
    again = EdgeVectorStore.open(tmp_path / "shard", dim=4)
    try:
        (node,) = again.get_nodes(filters=_flt(F(key="file_path", value="a.py")))
        assert node.text == "def seven(): ..." and node.metadata["start_line"] == 7
    finally:
        again.close()


def test_edge_store_light_and_full_queries_agree(tmp_path: Path) -> None:
    """A light query (nodes built from the payload) answers with the stored nodes less their prev/next links;
    a full request is never served a light node from the cache."""
    store = EdgeVectorStore.open(tmp_path / "shard", dim=4)
    try:
        leaves = [_leaf("00000000-0000-0000-0000-0000000000a1", embedding=[1.0, 0.0, 0.0, 0.0]),
                  _leaf("00000000-0000-0000-0000-0000000000b2", path="src/other.py", embedding=[0.8, 0.2, 0.0, 0.0])]
        for leaf in leaves:  # as the code splitter makes every leaf (what a light node takes for granted)
            leaf.excluded_embed_metadata_keys = list(NON_EMBED_KEYS)
            leaf.excluded_llm_metadata_keys = list(NON_EMBED_KEYS)
            leaf.metadata_template, leaf.text_template = "{value}", "{metadata_str}\n{content}"
            leaf.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=leaf.metadata["file_path"])
            del leaf.relationships[NodeRelationship.CHILD]  # a leaf
        store.add(leaves)
        q = VectorStoreQuery(query_str="login user", mode=VectorStoreQueryMode.SPARSE, similarity_top_k=5)
        light, full = store.query(q, light=True), store.query(q)  # the light ones are cached first
        assert light.ids == full.ids and len(full.ids) == 2 and light.similarities == full.similarities
        assert all(n.next_node is not None for n in full.nodes) and all(n.next_node is None for n in light.nodes)
        for ln, fn in zip(light.nodes, full.nodes):
            want = fn.model_copy(deep=True)
            want.relationships.pop(NodeRelationship.NEXT)
            assert ln == want and ln.model_dump() == want.model_dump()
            assert ln.hash == fn.hash and ln.get_content("embed") == fn.get_content("embed")
        assert store.query(q, light=True).nodes == full.nodes  # a light request takes the cached full nodes
    finally:
        store.close()


def test_a_shard_set_elsewhere_serves_one_repository(tmp_path) -> None:
    """Two repositories given one store.path (a settings file for all, CODERAG_CONFIG): the second's new index
    would empty the first's vectors. It is refused, naming the repository the shard holds."""
    import pytest

    from conftest import TINY_FILES, write_files
    from coderag import index_repository
    from coderag.base.config import Settings
    from coderag.base.errors import ConfigError

    settings = Settings()
    settings.store.path = str(tmp_path / "shared-shard")
    first = write_files(tmp_path / "one", TINY_FILES)
    second = write_files(tmp_path / "two", TINY_FILES)
    index_repository(first, settings=settings)
    with pytest.raises(ConfigError, match=f"holds the vectors of {first.resolve()}, another repository"):
        index_repository(second, settings=settings)
    assert index_repository(first, settings=settings).unchanged == len(TINY_FILES)  # still the first's


def test_a_shard_set_elsewhere_follows_its_repository_when_it_moves(tmp_path) -> None:
    """A repository moved with its .coderag keeps its store.path: the shard names a folder with no index any
    more, so the moved repository takes it over, its vectors unchanged; a second repository is still refused."""
    import shutil

    import pytest

    from conftest import TINY_FILES, write_files
    from coderag import CodeIndex, index_repository
    from coderag.base.config import Settings
    from coderag.base.errors import ConfigError

    settings = Settings()
    settings.store.path = str(tmp_path / "shard-elsewhere")
    first = write_files(tmp_path / "one", TINY_FILES)
    index_repository(first, settings=settings)
    moved = tmp_path / "moved"
    shutil.move(str(first), str(moved))
    summary = index_repository(moved, settings=settings)
    assert summary.unchanged == len(TINY_FILES) and summary.embedded == 0
    with CodeIndex.open(moved, settings=settings) as idx:
        res = idx.search("add sales tax to the sum of the line items", max_tokens=600, retriever="dense")
    assert res and res[0].file_path == "src/billing/invoice.py"
    second = write_files(tmp_path / "two", TINY_FILES)
    with pytest.raises(ConfigError, match=f"holds the vectors of {moved.resolve()}, another repository"):
        index_repository(second, settings=settings)
