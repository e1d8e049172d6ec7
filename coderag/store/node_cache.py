"""NodeCache: the decoded leaf nodes of a resident process, by point id, least recently used out first.

Apart from the store because its rule is subtle and its own: a node id names a chunk, not a version
of it (ids are stable across edits of a file), so any write empties the cache, and a read that began
before a write must not put what it read back in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable

DEFAULT_NODE_CACHE_SIZE = 2_000  # decoded leaf nodes kept: the candidates of ~40 searches


class NodeCache:
    """Point id -> (node, light) where `light` says the node was built from the payload (see
    node_codec.light_node); a request for a full node is never served a light one.

    Examples:
        >>> cache = NodeCache(max_size=2)
        >>> gen = cache.generation
        >>> cache.put({"a": ("node a", False)}, gen)
        >>> cache.get(["a", "b"], light=True)
        {'a': 'node a'}
    """

    def __init__(self, max_size: int = DEFAULT_NODE_CACHE_SIZE) -> None:
        self.max_size = max_size
        self._nodes: OrderedDict[str, tuple[Any, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Take it before reading the store; `put` drops what was read if a write came in between."""
        with self._lock:
            return self._generation

    def get(self, keys: Iterable[str], light: bool = False) -> dict[str, Any]:
        """The cached nodes of these ids (a light request takes either kind), marked as recently used."""
        found: dict[str, Any] = {}
        with self._lock:
            for k in keys:
                hit = self._nodes.get(k)
                if hit is not None and (light or not hit[1]):
                    found[k] = hit[0]
                    self._nodes.move_to_end(k)
        return found

    def put(self, entries: dict[str, tuple[Any, bool]], generation: int) -> None:
        """Keep nodes read from the store while `generation` was current; nothing if a write came since."""
        with self._lock:
            if generation != self._generation:
                return
            self._nodes.update(entries)
            while len(self._nodes) > self.max_size:
                self._nodes.popitem(last=False)

    def clear(self) -> None:
        """Forget every node (any write to the store calls this)."""
        with self._lock:
            self._generation += 1
            self._nodes.clear()

    def __len__(self) -> int:
        return len(self._nodes)
