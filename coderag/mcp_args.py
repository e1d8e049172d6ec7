"""Tool arguments checked before the MCP SDK sees them, so that every mistake comes back as a tool error
that names the argument and says what to pass.

The SDK validates arguments too, but ignores unknown ones (`serach_code(qeury=...)` searched for nothing
without a word), passes strings with unpaired surrogates on to the tool, and words its errors as a
pydantic dump ("1 validation error for search_codeArguments ... For further information visit ...").
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Mapping
from typing import Any, Callable, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from coderag.base.agent_text import find_surrogate


def arguments_model(fn: Callable) -> type[BaseModel]:
    """A pydantic model of `fn`'s tool arguments (its parameters but the MCP Context), unknown ones refused."""
    from mcp.server.mcpserver import Context

    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        hint = hints.get(name, Any)
        if isinstance(hint, type) and issubclass(hint, Context):
            continue
        fields[name] = (hint, ... if param.default is inspect.Parameter.empty else param.default)
    return create_model(f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _describe(schema: dict) -> str:
    """What a JSON schema accepts, in words: 'an integer from 50 to 20000'."""
    if "anyOf" in schema:
        return " or ".join(_describe(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        return "an integer" + (f" from {lo} to {hi}" if lo is not None and hi is not None else
                               f" of at least {lo}" if lo is not None else f" of at most {hi}" if hi is not None else "")
    if kind == "string":
        n = schema.get("minLength")
        return "a string" + (f" of at least {n} character{'s' * (n != 1)}" if n else "")
    if kind == "boolean":
        return "true or false"
    if kind == "array":
        items = _describe(schema.get("items", {}))
        return f"a list of {items.replace('a string', 'strings')}, e.g. [\"MAX_RETRIES\"]" if items else "a list"
    if kind == "null":
        return "null"
    return "a JSON value"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}… ({len(text)} characters)"


class ArgumentCheck:
    """An MCP server middleware: `tools/call` of a registered tool runs only with arguments its model accepts;
    otherwise the answer is an `is_error` result saying what is wrong, argument by argument."""

    def __init__(self) -> None:
        self._models: dict[str, type[BaseModel]] = {}
        self._props: dict[str, dict] = {}  # tool -> its arguments' JSON schemas, for the "pass ..." hints

    def register(self, fn: Callable) -> Callable:
        model = self._models[fn.__name__] = arguments_model(fn)
        self._props[fn.__name__] = model.model_json_schema().get("properties", {})
        return fn

    def problem(self, tool: str, arguments: Any) -> Optional[str]:
        """What is wrong with a call of `tool`, or None (also for a tool not registered here)."""
        model = self._models.get(tool)
        if model is None:
            return None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return f"{tool}: arguments must be a JSON object of named arguments, not {_shown(arguments)}."
        surrogate = find_surrogate(dict(arguments), "")
        if surrogate:
            return f"{tool}: {surrogate}."
        try:
            model.model_validate(self._pre_parse(model, arguments))
        except ValidationError as exc:
            return self._explain(tool, self._props[tool], exc)
        return None

    @staticmethod
    def _pre_parse(model: type[BaseModel], arguments: Mapping) -> dict:
        """A list sent as the JSON text of a list ('["a"]'), as Claude Desktop does: parsed, as the SDK does."""
        out = dict(arguments)
        for name, value in arguments.items():
            field = model.model_fields.get(name)
            if field is not None and field.annotation is not str and isinstance(value, str):
                try:
                    parsed = json.loads(value)
                except (ValueError, RecursionError):
                    continue
                if isinstance(parsed, (list, dict)):
                    out[name] = parsed
        return out

    @staticmethod
    def _explain(tool: str, props: dict, exc: ValidationError) -> str:
        lines = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else ""
            where = ".".join(map(str, err["loc"]))
            if err["type"] == "extra_forbidden":
                lines.append(f"unknown argument {name!r}; {tool} takes " + (", ".join(props) or "no arguments"))
            elif err["type"] == "missing":
                lines.append(f"{name} is required (Field required): pass {_describe(props.get(name, {}))}")
            else:
                lines.append(f"{where} = {_shown(err['input'])}: {err['msg']}; pass {_describe(props.get(name, {}))}")
        return f"Invalid arguments for {tool}: " + "; ".join(lines) + "."

    async def __call__(self, ctx, call_next):
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params
        if not isinstance(params, Mapping) or not isinstance(params.get("name"), str):
            from mcp import MCPError
            from mcp.types import INVALID_PARAMS

            # The SDK's answer is "Invalid request parameters", with no word of which or why.
            raise MCPError(INVALID_PARAMS, "Invalid params for tools/call: 'name' must be the name of a tool ("
                           + ", ".join(self._models) + "), and 'arguments' an object of its arguments, e.g. "
                           '{"name": "search_code", "arguments": {"query": "where are failed logins retried"}}')
        problem = self.problem(params["name"], params.get("arguments"))
        if problem is not None:
            from mcp.types import CallToolResult, TextContent

            return CallToolResult(content=[TextContent(type="text", text=problem)], is_error=True)
        return await call_next(ctx)
