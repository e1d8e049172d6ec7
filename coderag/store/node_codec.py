"""The payload a leaf node is stored with in Qdrant Edge, and the nodes read back from it.

Apart from the store because the payload is a format (older indexes hold older forms of it, which
must keep decoding) and because encoding and decoding are pure functions, tested without a shard.
A payload holds the node's metadata as filterable fields, its folders and text (keyword- and
word-indexed), the node itself as slim JSON, and what a *light* node is built from.
"""

from __future__ import annotations

import json
from typing import Optional

from llama_index.core.schema import BaseNode, NodeRelationship, ObjectType, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from coderag.nodes.keys import DIRS_KEY, FILE_PATH_KEY, NON_EMBED_KEYS

DOC_ID_KEY = "doc_id"
TEXT_KEY = "text"  # the chunk's source text, word-indexed for exact keyword filters
NODE_KEY = "_node"  # a TextNode as slim JSON (see node_payload_json); older points hold "_node_content"
LEGACY_NODE_KEY = "_node_content"  # LlamaIndex's own node JSON, as points stored before coderag 0.1 held it
LEGACY_TYPE_KEY = "_node_type"
PARENT_KEY = "parent_id"  # the leaf's parent node ("": none; Qdrant drops null values); with the text and
# metadata, what a light node is built from
CHARS_KEY = "char_span"  # [start_char_idx, end_char_idx] of the leaf in its file's text (light nodes)
NODE_FIELDS = [NODE_KEY, LEGACY_NODE_KEY, LEGACY_TYPE_KEY]  # what a full node is decoded from
# What a light node is not built from: the node JSON, LlamaIndex's copies of the document id, the folders.
LIGHT_EXCLUDED_KEYS = [NODE_KEY, LEGACY_NODE_KEY, LEGACY_TYPE_KEY, "document_id", "ref_doc_id", DIRS_KEY]

# What every node of coderag's splitter carries: left out of the stored JSON and put back when it is read.
_STANDARD = {"excluded_embed_metadata_keys": NON_EMBED_KEYS, "excluded_llm_metadata_keys": NON_EMBED_KEYS,
             "metadata_template": "{value}", "text_template": "{metadata_str}\n{content}"}
_STANDARD_HEAD = json.dumps(_STANDARD, ensure_ascii=False)[:-1] + ","


def ancestor_dirs(rel_path: str) -> list[str]:
    """`a/b/c.py` -> ["a", "a/b"]: a keyword index on these makes "everything under a/" one exact match."""
    parts = rel_path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def node_payload_json(node: TextNode) -> str:
    """A TextNode as the store keeps it: fields at their class default, the embedding (the point's vector)
    and the fields every coderag node has (`_STANDARD`) left out, links reduced to id and type.
    About 1.1 KB for a leaf instead of LlamaIndex's 2.8, and about twice as fast to decode."""
    data = node.model_dump(mode="json", exclude_defaults=True, exclude={"embedding", "class_name"})
    data["id_"] = node.node_id
    for key, value in _STANDARD.items():
        if key in data and data[key] == value:
            del data[key]
        else:
            data[key] = getattr(node, key)  # a value not standard, or the class default: kept explicitly
    rels = {}
    for rel, info in node.relationships.items():
        slim = [{"node_id": i.node_id, "node_type": i.node_type} for i in (info if isinstance(info, list) else [info])]
        rels[rel.value] = slim if isinstance(info, list) else slim[0]
    data["relationships"] = rels
    return json.dumps(data, ensure_ascii=False)


def payload_to_node(payload: dict) -> BaseNode:
    """A stored payload back into its node, parsed and validated by pydantic-core from the JSON string."""
    slim = payload.get(NODE_KEY)
    if slim is not None:
        return TextNode.model_validate_json(_STANDARD_HEAD + slim[1:])
    if payload.get(LEGACY_TYPE_KEY, TextNode.class_name()) != TextNode.class_name():
        return metadata_dict_to_node(payload)
    return TextNode.model_validate_json(payload[LEGACY_NODE_KEY])


def store_payload(node: BaseNode) -> dict:
    """The payload a node is stored with: its metadata as filterable fields, the node itself (slim JSON for a
    TextNode, LlamaIndex's `_node_content` for other types), its folders and its text (word-indexed)."""
    payload = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
    if type(node) is TextNode:
        del payload[LEGACY_NODE_KEY]
        payload[NODE_KEY] = node_payload_json(node)
    payload[DIRS_KEY] = ancestor_dirs(node.metadata.get(FILE_PATH_KEY, ""))
    payload[TEXT_KEY] = node.get_content()
    payload.update(light_fields(node))
    return payload


def light_fields(node: BaseNode) -> dict:
    """What a light node needs beside the text and the metadata the payload holds anyway."""
    parent = node.parent_node
    return {PARENT_KEY: parent.node_id if parent is not None else "",
            CHARS_KEY: [node.start_char_idx, node.end_char_idx]}


def light_node(point_id: str, payload: dict) -> Optional[TextNode]:
    """A leaf from its payload's text, metadata, document id and parent id (None for a point stored before
    coderag kept the parent id there). The same node as the stored JSON but for the links to the previous
    and next chunks, which a search never reads, and cheaper to build than that JSON is to decode.

    Built with `model_copy` of template nodes, which does not validate again: the values are what
    `store_payload` wrote from a validated node. Every list and dict is the node's own (the templates
    are never changed)."""
    if PARENT_KEY not in payload:
        return None
    meta = dict(payload)
    text, parent, doc = meta.pop(TEXT_KEY, ""), meta.pop(PARENT_KEY), meta.pop(DOC_ID_KEY, None)
    start, end = meta.pop(CHARS_KEY, None) or (None, None)
    rels = {}
    if doc is not None:
        rels[NodeRelationship.SOURCE] = _SOURCE.model_copy(update={"node_id": doc})
    if parent:
        rels[NodeRelationship.PARENT] = _PARENT.model_copy(update={"node_id": parent})
    return _LIGHT.model_copy(update={
        "id_": point_id, "text": text, "metadata": meta, "relationships": rels, "start_char_idx": start,
        "end_char_idx": end, "excluded_embed_metadata_keys": list(NON_EMBED_KEYS),
        "excluded_llm_metadata_keys": list(NON_EMBED_KEYS)})


# Templates of light_node: every field a light node does not set comes from these, as validated defaults,
# with the same fields marked as set as in a node decoded from the stored JSON.
_LIGHT = TextNode(id_="", text="", **_STANDARD)
_SOURCE = RelatedNodeInfo(node_id="", node_type=None)  # as the stored links are decoded: both fields set
_PARENT = RelatedNodeInfo(node_id="", node_type=ObjectType.TEXT)
