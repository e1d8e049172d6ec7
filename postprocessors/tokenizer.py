"""PayloadTokenizer: how the payload's tokens are counted (cl100k), and the one cache of what was counted.

Budgets are in the tokens of an agent's context; cl100k_base is the encoding LlamaIndex counts in by default
and the one the index's stored line counts are in (store/state.py LINE_TOKENS_ENCODING). It is loaded here
from the BPE file llama-index-core ships, so counting never needs the network, never depends on
`Settings.tokenizer` or on the TIKTOKEN_CACHE_DIR environment variable, and the Encoding object is ours to
use (payload_cost.py needs its token byte widths) without fishing it out of a global.

One object per open index; every cache of token counts a search keeps lives in it (`cached`), bounded, with
the stored line counts of files (`line_counts`) kept beside it.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
import importlib.util
import os
from typing import Any, Callable, Hashable, Iterable, Mapping

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken_ext/openai_public.py, cl100k_base(): the pre-tokenizer's pattern and the special tokens.
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
CACHE_ENTRIES = 50_000  # counted blocks, header lines and candidate lines (a few hundred bytes each)
LINE_COUNTS_FILES = 20_000  # files whose stored line counts stay in memory (two bytes a line: about a KB each)


def load_cl100k() -> Any:
    """tiktoken's cl100k_base from llama-index-core's copy of its BPE file (tiktoken names cached files by the
    SHA-1 of their URL), checked against the hash tiktoken expects."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    spec = importlib.util.find_spec("llama_index.core")  # found, not imported: the indexer stays light
    base = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
    path = os.path.join(base, "_static", "tiktoken_cache", hashlib.sha1(CL100K_URL.encode()).hexdigest())
    ranks = load_tiktoken_bpe(path, expected_hash=CL100K_SHA256)
    return tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks,
                             special_tokens=CL100K_SPECIAL)


class PayloadTokenizer:
    """Counts text in cl100k (special tokens allowed, as LlamaIndex counts) and keeps what was counted.

    `load_line_counts(paths, encoding)` reads stored line counts: path -> (sha256, counts blob).
    """

    def __init__(self, load_line_counts: Callable[[Iterable[str], str], Mapping[str, tuple]] = lambda p, e: {},
                 encoding: Any = None) -> None:
        self._encoding = encoding
        self._load_line_counts = load_line_counts
        self._lock = threading.Lock()
        self._cache: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._lines: "OrderedDict[tuple, array]" = OrderedDict()
        self._widths: list[int] | None = None

    @property
    def encoding(self) -> Any:
        """The tiktoken Encoding (loaded on first use: ~0.1 s)."""
        if self._encoding is None:
            self._encoding = load_cl100k()
        return self._encoding

    @property
    def name(self) -> str:
        return self.encoding.name

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special="all")

    def count(self, text: str) -> int:
        """Tokens of `text`; without the special-token check where the text holds none (a header line: 4 us
        of wrapper for ~10 us of work)."""
        if "<|" in text:
            return len(self.encode(text))
        return len(self.encoding.encode_ordinary(text))

    def widths(self) -> list[int]:
        """Bytes of every token id (built once, ~50 ms; 100k entries)."""
        if self._widths is None:
            enc, widths = self.encoding, [0] * self.encoding.n_vocab
            for i in range(enc.n_vocab):
                try:
                    widths[i] = len(enc.decode_single_token_bytes(i))
                except KeyError:  # ids between the ranks and the special tokens
                    pass
            self._widths = widths
        return self._widths

    # -- the cache ------------------------------------------------------------------------------------
    def cached(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value remembered under `key`, computed once: a resident process prices the same blocks,
        header lines and candidate lines search after search (an agent refines a query and asks again)."""
        value = self.remembered(key)
        if value is None:
            value = compute()
            self.remember(key, value)
        return value

    def remembered(self, key: Hashable) -> Any:
        """What was remembered under `key`, or None."""
        with self._lock:
            value = self._cache.get(key)
            if value is not None:
                self._cache.move_to_end(key)
            return value

    def remember(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)

    def encode_cached(self, text: str) -> array:
        """The tokens of a rendered block, remembered by a digest of its text."""
        key = ("block", hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        return self.cached(key, lambda: array("I", self.encode(text)))

    def keys(self) -> list:
        """What is remembered now (tests look at which kinds of counts were kept)."""
        with self._lock:
            return list(self._cache)

    def clear(self) -> None:
        """Forget everything counted (benchmarks measure cold searches with it)."""
        with self._lock:
            self._cache.clear()
            self._lines.clear()

    # -- stored line counts ---------------------------------------------------------------------------
    def line_counts(self, files: Mapping[str, str]) -> dict[str, array]:
        """Stored token counts of lines (postprocessors/line_tokens.py) of `files` (path -> sha256 of the
        content wanted), where they were counted from that content."""
        name = self.name
        out, missing = {}, []
        with self._lock:
            for path, sha in files.items():
                hit = self._lines.get((path, sha))
                if hit is not None:
                    out[path] = hit
                else:
                    missing.append(path)
        if missing:
            found = {}
            for path, (sha, blob) in self._load_line_counts(missing, name).items():
                if sha == files[path]:
                    found[(path, sha)] = out[path] = array("I", blob)
            self.keep_line_counts(found)
        return out

    def line_counts_kept(self) -> int:
        """Files whose line counts are in memory now."""
        with self._lock:
            return len(self._lines)

    def keep_line_counts(self, entries: Mapping[tuple, array]) -> None:
        """Remember line counts by (path, sha256) (`warm_up` preloads them)."""
        with self._lock:
            for key, counts in entries.items():
                self._lines[key] = counts
                self._lines.move_to_end(key)
            while len(self._lines) > LINE_COUNTS_FILES:
                self._lines.popitem(last=False)
