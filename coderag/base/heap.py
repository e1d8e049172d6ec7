"""Give the memory that Python and native libraries freed back to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Optional


@functools.cache
def _libc() -> Optional[ctypes.CDLL]:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None  # glibc only


def trim_heap() -> bool:
    """glibc keeps what a long indexing run freed (tens of thousands of nodes, batches of text) in its
    arenas, counted in the process's memory (a large share of a big build's, hundreds of MB) until the
    store's optimize, which then adds its own peak on top. malloc_trim hands the free pages back. Returns
    False where there is no glibc (macOS, musl): nothing to do there."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
