"""Metadata keys: each named once here and imported everywhere."""

FILE_PATH_KEY = "file_path"
LANGUAGE_KEY = "language"
SIZE_KEY = "size"
LAST_MODIFIED_KEY = "last_modified"
CONTENT_HASH_KEY = "content_hash"
START_LINE_KEY = "start_line"
END_LINE_KEY = "end_line"
SYMBOL_KEY = "symbol"
SYMBOLS_KEY = "symbols"  # every definition a merged chunk holds (coderag/queries/symbols.py)
KIND_KEY = "kind"
BREADCRUMB_KEY = "breadcrumb"
SIGNATURES_ONLY_KEY = "signatures_only"
EMBED_TRUNCATED_KEY = "embed_truncated"
DUPLICATE_OF_KEY = "duplicate_of"
CHUNK_HASH_KEY = "chunk_hash"
DIRS_KEY = "dirs"
IS_LEAF_KEY = "is_leaf"
DECLARATION_KEY = "declaration"  # a leaf that only declares: types, fields, signatures (code_splitter.py)

# Keys that never reach the embedding text or the BM25 text: the breadcrumb carries what matters.
NON_EMBED_KEYS = [
    FILE_PATH_KEY, LANGUAGE_KEY, SIZE_KEY, LAST_MODIFIED_KEY, CONTENT_HASH_KEY, START_LINE_KEY,
    END_LINE_KEY, SYMBOL_KEY, KIND_KEY, SIGNATURES_ONLY_KEY, EMBED_TRUNCATED_KEY, DUPLICATE_OF_KEY,
    CHUNK_HASH_KEY, DIRS_KEY, IS_LEAF_KEY, SYMBOLS_KEY, DECLARATION_KEY,
]
