"""Errors the user can act on.

    CodeRagError              base: the CLI shows its message and exits 1
    ├── ConfigError           qdrant.yaml or a flag holds a bad value; the message names the key
    ├── IndexLockedError      another process writes this index; the message names it
    ├── IndexMissingError     no index yet where one is needed; says which command builds it
    ├── IndexAccessError      the index is another user's (private to them); says what to do instead
    └── ModelLoadError        the embedding model cannot be loaded; says which path was tried

A pydantic ValidationError (bad search options, from the CLI, an owner's socket or the MCP server) is
worded by `validation_text`, the one rendering all three front ends show.
"""


class CodeRagError(Exception):
    """Base class: the message is shown to the user as is."""


class ConfigError(CodeRagError, ValueError):
    """A setting in qdrant.yaml, an environment variable or a flag is invalid."""


class IndexLockedError(CodeRagError):
    """Another process holds the index's writer lock."""


class IndexMissingError(CodeRagError):
    """An operation needs an index that does not exist (or is empty)."""


class IndexAccessError(CodeRagError):
    """The index folder is another user's: private to them, as every index is. `root`: the folder it indexes."""

    def __init__(self, message: str, root=None) -> None:
        super().__init__(message)
        self.root = root


class ModelLoadError(CodeRagError):
    """The configured embedding model could not be loaded."""


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}... ({len(text)} characters)"


def validation_text(exc, what: str = "search options", names: dict[str, str] | None = None) -> str:
    """A pydantic ValidationError in one line of words: what was invalid, each argument, its problem and
    the value given (pydantic's str() adds error types and a documentation URL per argument). `names`: the
    words the user typed for each field (the CLI's flags: file_pattern -> --files), in place of its name.

    Examples:
        >>> from pydantic import BaseModel, Field, ValidationError
        >>> class M(BaseModel):
        ...     n: int = Field(ge=1)
        >>> try:
        ...     M(n=0)
        ... except ValidationError as exc:
        ...     print(validation_text(exc))
        Invalid search options: n: Input should be greater than or equal to 1 (got 0).
    """
    import re

    names = names or {}
    parts = []
    for err in exc.errors():
        loc = [names.get(str(p), str(p)) for p in err["loc"]]
        where = ".".join(loc) or "request"
        msg = err["msg"].removeprefix("Value error, ")
        for field, flag in names.items():  # "Malformed file_pattern ..." -> "Malformed --files ..."
            if flag.startswith("--"):  # a flag; not an argument, whose name reads as a word ("query is empty")
                msg = re.sub(rf"\b{re.escape(field)}\b", flag, msg)
        given = err.get("input")
        shown = "" if isinstance(given, (dict, list)) or (isinstance(given, str) and given in msg) else \
            f" (got {_shown(given)})"
        parts.append(f"{where}: {msg}{shown}")
    text = f"Invalid {what}: " + "; ".join(parts)
    return text if text.endswith(".") else text + "."


def error_text(exc: BaseException) -> str:
    """What a user is shown for `exc`: a ValidationError in words, anything else its message."""
    return validation_text(exc) if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors") else str(exc)
