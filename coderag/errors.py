"""Errors the user can act on.

    CodeRagError              base: the CLI shows its message and exits 1
    ├── ConfigError           qdrant.yaml or a flag holds a bad value; the message names the key
    ├── IndexLockedError      another process writes this index; the message names it
    ├── IndexMissingError     no index yet where one is needed; says which command builds it
    └── ModelLoadError        the embedding model cannot be loaded; says which path was tried
"""


class CodeRagError(Exception):
    """Base class: the message is shown to the user as is."""


class ConfigError(CodeRagError, ValueError):
    """A setting in qdrant.yaml, an environment variable or a flag is invalid."""


class IndexLockedError(CodeRagError):
    """Another process holds the index's writer lock."""


class IndexMissingError(CodeRagError):
    """An operation needs an index that does not exist (or is empty)."""


class ModelLoadError(CodeRagError):
    """The configured embedding model could not be loaded."""
