"""SqliteKVStore: a LlamaIndex KV store in the index's SQLite file, so the docstore commits with the manifest."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from llama_index.core.storage.kvstore.types import DEFAULT_BATCH_SIZE, DEFAULT_COLLECTION, BaseKVStore

from coderag.store.state import IndexState


class SqliteKVStore(BaseKVStore):
    """Key-value collections in the `kv` table of an IndexState; writes land in its open transaction."""

    def __init__(self, state: IndexState) -> None:
        self._state = state

    def put(self, key: str, val: dict, collection: str = DEFAULT_COLLECTION) -> None:
        self._state.kv_put_many(collection, [(key, val)])

    async def aput(self, key: str, val: dict, collection: str = DEFAULT_COLLECTION) -> None:
        self.put(key, val, collection)

    def put_all(self, kv_pairs: List[Tuple[str, dict]], collection: str = DEFAULT_COLLECTION,
                batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self._state.kv_put_many(collection, list(kv_pairs))

    async def aput_all(self, kv_pairs: List[Tuple[str, dict]], collection: str = DEFAULT_COLLECTION,
                       batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.put_all(kv_pairs, collection)

    def get(self, key: str, collection: str = DEFAULT_COLLECTION) -> Optional[dict]:
        return self._state.kv_get(collection, key)

    async def aget(self, key: str, collection: str = DEFAULT_COLLECTION) -> Optional[dict]:
        return self.get(key, collection)

    def get_all(self, collection: str = DEFAULT_COLLECTION) -> Dict[str, dict]:
        return self._state.kv_get_all(collection)

    async def aget_all(self, collection: str = DEFAULT_COLLECTION) -> Dict[str, dict]:
        return self.get_all(collection)

    def delete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        return self._state.kv_delete(collection, key)

    async def adelete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        return self.delete(key, collection)
