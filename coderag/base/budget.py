"""How much a payload holds: the token budget a search or an expansion gets when its caller names none, the bounds
a caller may name, and the lines an expansion shows around a result that no definition encloses. The CLI, the
MCP tools, the Python API and the eval read them here; stdlib only, so that the CLI shows them in `--help`
without importing pydantic or LlamaIndex."""

# The payload's blocks and then its candidate lines fill it (postprocessors/token_budget.py); the eval's payload
# measures (tokens to the gold, gold in the payload) are taken at it.
DEFAULT_MAX_TOKENS = 4000
MIN_TOKENS = 50  # bounds of a budget a caller names; outside them a request is refused in words
MAX_TOKENS_LIMIT = 20_000
EXPAND_CONTEXT_LINES = 20  # before and after a result that no definition encloses (expand_result)
MAX_CONTEXT_LINES = 500  # the most a caller may ask for there
