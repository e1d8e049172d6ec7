"""Open the stores of an index: the vector store qdrant.yaml picks, and the SQLite docstore."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Optional

from coderag.base.config import Settings, StoreMode
from coderag.base.errors import ConfigError
from coderag.base.paths import DB_NAME, SHARD_NAME, index_dir, keep_out_of_git

log = logging.getLogger("coderag.store")

DEFAULT_DIM = 384


def collection_name(settings: Settings, root: Path) -> str:
    """One server collection per indexed root: <prefix>_<dir name>_<8 hex of the absolute path>."""
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in root.resolve().name) or "root"
    return f"{settings.store.collection_prefix}_{safe}_{digest}"


SHARD_ROOT_NAME = ".coderag-root"  # in a shard set elsewhere: the repository whose vectors it holds


def _claim(shard: Path, root: Path) -> None:
    """A shard set elsewhere (`store.path`) holds the vectors of one repository, named in it: two repositories
    given the same path (a settings file for all of them, CODERAG_CONFIG) would each empty it for their new
    index, or answer with the other's code. Refused in words instead. A shard whose repository has no index
    there any more (it was moved, with its .coderag, or deleted) is taken over: nobody else reads it."""
    marker, mine = shard / SHARD_ROOT_NAME, str(Path(root).resolve())
    try:
        holder = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        holder = None
    if holder == mine:
        return
    if holder is not None and (index_dir(holder) / DB_NAME).exists():
        raise ConfigError(f"store.path {shard} holds the vectors of {holder}, another repository: give each "
                          f"repository a store.path of its own, or none (its own .coderag/shard).")
    if holder is not None:
        log.info("store.path %s held the vectors of %s, which has no index any more: it is %s's now", shard,
                 holder, mine)
    marker.write_text(mine + "\n", encoding="utf-8")


def _batch(fn):
    def encode(texts: list[str]):
        pairs = [fn(t) for t in texts]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return encode


def open_vector_store(settings: Settings, root: Path, folder: Optional[Path] = None, dim: int = DEFAULT_DIM):
    """EdgeVectorStore (embedded, default) or QdrantVectorStore over QdrantClient(url=...) (server). The
    embedded shard is `store.path`, else in `folder` (the index's folder, .coderag/, unless given)."""
    s = settings.store
    if s.mode == StoreMode.Embedded:
        from coderag.store.edge_vector_store import EdgeVectorStore

        path = Path(s.path) if s.path else (folder or index_dir(root)) / SHARD_NAME
        if s.path:  # a shard set elsewhere may lie in a repository: never read back as its code (.coderag is)
            path.mkdir(parents=True, exist_ok=True)
            keep_out_of_git(path, "the vector store")
            _claim(path, root)
        return EdgeVectorStore.open(path, dim=dim, on_disk=s.on_disk, hnsw_m=s.hnsw_m,
                                    hnsw_ef_construct=s.hnsw_ef_construct, quantization=s.quantization.value)
    if not s.url:
        raise ConfigError("store.mode is 'server' but store.url is empty. Set store.url in qdrant.yaml, "
                          "e.g. url: http://localhost:6333")
    # Imported only in server mode: qdrant_client costs ~1 s of import.
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    from coderag.nodes.lexical import doc_sparse, query_sparse

    from qdrant_client.http.exceptions import ApiException

    api_key = os.environ.get(s.api_key_env) or None
    client = QdrantClient(location=":memory:") if s.url == ":memory:" else QdrantClient(url=s.url, api_key=api_key)
    try:  # it asks the server for its collection at once
        return QdrantVectorStore(
            client=client, collection_name=collection_name(settings, root), enable_hybrid=True,
            dense_vector_name="dense", sparse_vector_name="sparse",
            sparse_doc_fn=_batch(doc_sparse), sparse_query_fn=_batch(query_sparse),
            sparse_config=models.SparseVectorParams(modifier=models.Modifier.IDF),
        )
    except ApiException as exc:  # refused, unreachable, or an answer that is not Qdrant's (a wrong port, a bad key)
        raise ConfigError(f"The Qdrant server at {s.url} (store.url) did not answer: {exc}. Start it, or fix "
                          f"store.url (and the key in ${s.api_key_env}), or set store.mode: embedded to keep the "
                          f"vectors in the repository's own .coderag.") from exc


DOCSTORE_NAMESPACE = "nodes"
NODE_COLLECTION_SUFFIX = "/data"  # given to KVDocumentStore, so the collection its nodes are in is ours to name
NODE_COLLECTION = DOCSTORE_NAMESPACE + NODE_COLLECTION_SUFFIX


def open_docstore(state):
    """KVDocumentStore over the index's SQLite KV table: every level of the hierarchy, for auto-merging."""
    from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore

    from coderag.store.kvstore import SqliteKVStore

    return KVDocumentStore(SqliteKVStore(state), namespace=DOCSTORE_NAMESPACE, node_collection_suffix=NODE_COLLECTION_SUFFIX)


class ParentReader:
    """Parents for bounded auto-merging, read from the docstore's KV table and refused on their stored line
    span before a node is built: a parent is a whole class or module, up to hundreds of KB of text, and in a
    large repository many of those a search looks at are too long to merge into."""

    def __init__(self, state) -> None:
        from coderag.store.kvstore import SqliteKVStore

        self.kvstore = SqliteKVStore(state)

    def __call__(self, parent_id: str, max_lines: int):
        from llama_index.core.constants import DATA_KEY
        from llama_index.core.storage.docstore.utils import json_to_doc

        from coderag.nodes.keys import END_LINE_KEY, START_LINE_KEY

        data = self.kvstore.get(parent_id, collection=NODE_COLLECTION)
        if data is None:
            return None
        fields = data.get(DATA_KEY)
        meta = fields.get("metadata") if isinstance(fields, dict) else None
        if isinstance(meta, dict) and int(meta.get(END_LINE_KEY, 0)) - int(meta.get(START_LINE_KEY, 0)) >= max_lines:
            return None
        return json_to_doc(data)
