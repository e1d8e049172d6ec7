"""The payload's token budget: what a search or an expansion gets when its caller names none, and the bounds a
caller may name (the CLI, the MCP tools, the Python API and the eval read them here; stdlib only, so the CLI
shows them in `--help` without importing pydantic or LlamaIndex)."""

# About a screen and a half of code an agent reads whole: the payload's blocks and then its candidate lines
# (postprocessors/token_budget.py); the eval's payload measures are taken at it (eval/RESULTS.md).
DEFAULT_MAX_TOKENS = 4000
MIN_TOKENS = 50  # less holds no block with its header
MAX_TOKENS_LIMIT = 20_000
