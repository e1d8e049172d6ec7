"""Definitions that are values: a function or class assigned to a name or held by an object literal's member or a
class's field, a constant made by a function called in place, and an object literal of functions (their container).

JavaScript before classes and Lua define most of their functions so (`app.route = function route(path) {...}`,
`_.extend(Model.prototype, {...})`, Lua's `M.setup = function (opts) ... end`). nodes/outline.py reads declarations
and asks this module about the statements it does not know. Nothing here knows about LlamaIndex.
"""

from __future__ import annotations

import re

from coderag.nodes.languages import Grammar, is_comment_like

_FUNCTION_VALUE_TYPES = {"arrow_function": "function", "function_expression": "function", "function": "function",
                         "generator_function": "function", "class": "class",
                         "function_definition": "function"}  # Lua's `function (a) ... end` as a value
# What an assignment may define: a plain name or a member (`exports.parse`, `Foo.prototype.bar`, Lua's `M.setup`),
# or an object literal's key, not a computed one (`handlers[kind]`) or a string.
_ASSIGNMENT_TARGETS = frozenset({"identifier", "member_expression", "dot_index_expression", "property_identifier"})
# A member that gives its value to a name: an object literal's (JS's `pair`, Lua's `field`), a class field's
# (TypeScript's `public_field_definition`, JavaScript's `field_definition`).
_MEMBER_TYPES = frozenset({"pair", "field", "public_field_definition", "field_definition"})
# An object literal: JS's `{ parse (s) {...} }`, Lua's `{ f = function () end }`.
_OBJECT_TYPES = frozenset({"object", "table_constructor"})
# `this.` and `self.` name the enclosing definition, which the symbol's prefix already does; `prototype` is how
# JavaScript before classes spells a method (`Router.prototype.route` is Router's method `route`, and the object of
# `Router.prototype = {...}` holds Router's methods).
_TARGET_NOISE = re.compile(r"^(?:this|self)\.|\.prototype(?=\.|$)")


def node_text(node, src: bytes) -> str:
    """The source text of a node (`src` is the file's bytes, as parsed)."""
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def declared_value(declarator, src: bytes):
    """(value node, kind, name, body) when a variable declarator gives its name a function, a class or an object of
    functions (`const parse = (s) => {...}`, `const proto = module.exports = {...}`), else None."""
    value = declarator.child_by_field_name("value")
    if declarator.type != "variable_declarator" or value is None:
        return None
    _, value = _innermost(None, value)  # `const proto = module.exports = {...}` holds the object
    if value is None:
        return None
    name = declarator.child_by_field_name("name")
    return _function_value(value, node_text(name, src) if name is not None else "<anonymous>")


def assigned_value(node, grammar: Grammar, src: bytes):
    """(value node, kind, name, body) when a statement or member gives a name a function, a class or an object of
    functions, named by its target (`this.`, `self.` and `.prototype` dropped) or, in an export slot, by its own
    name, else None."""
    assigned = _assignment(node)
    if assigned is None or assigned[0].type not in _ASSIGNMENT_TARGETS:
        return None
    target, value = assigned
    name = _TARGET_NOISE.sub("", node_text(target, src))
    own = value.child_by_field_name("name") if name in grammar.export_slots else None
    return _function_value(value, node_text(own, src) if own is not None else name)


def _function_value(value, name: str):
    """(value, kind, name, body) when `value` is a function or class, a call or `new` that wraps one, or an object
    literal of functions (its own body: its members are its children)."""
    if value.type in _FUNCTION_VALUE_TYPES:
        return value, _FUNCTION_VALUE_TYPES[value.type], name, value.child_by_field_name("body")
    if value.type in _OBJECT_TYPES and _holds_functions(value):
        return value, "object", name, value
    wrapped = _wrapped_function(value)
    if wrapped is not None:
        return value, "function", name, wrapped.child_by_field_name("body")
    return None


def _holds_functions(obj) -> bool:
    """An object literal whose members are functions at least half of them: a module's or a prototype's methods
    (`module.exports = { inspect () {...}, toJSON () {...} }`, a Lua module's table). One that is mostly data
    with a hook or two (`{ keyword: "contains", type: "array", code (cxt) {...} }`) is a record, read as code."""
    members = [m for m in obj.named_children if not is_comment_like(m.type)]
    functions = sum(_is_function_member(m) for m in members)
    return functions > 0 and 2 * functions >= len(members)


def _is_function_member(member) -> bool:
    """A method of an object literal (`parse (s) {...}`, `get header () {...}`), or a member whose value is a
    function with a body (`parse: function (s) {...}`, Lua's `parse = function (s) ... end`); an arrow to one
    expression (`message: ({params}) => str`...``) computes a value of the record."""
    if member.type == "method_definition":
        return True
    value = member.child_by_field_name("value")
    if value is None or not _is_function(value):
        return False
    body = value.child_by_field_name("body")
    return value.type != "arrow_function" or (body is not None and body.type == "statement_block")


def _assignment(node):
    """(target, value) of a statement that assigns one value to one target, or None. JavaScript's statement
    holds an `assignment_expression` (`exports = module.exports = f` assigns `module.exports`, the innermost);
    Lua's `assignment_statement` (inside `local`'s `variable_declaration`) pairs a list of targets with one
    of values; an object literal's member (JS's `pair`, Lua's `field`) gives its value to its key, a class
    field (`handleClick = (e) => {...}`) to its name, and a call that extends a prototype its object literal to
    the prototype (`_prototype_extension`)."""
    if node.named_child_count == 1 and node.type in ("expression_statement", "variable_declaration"):
        node = node.named_children[0]
    if node.type in _MEMBER_TYPES:
        target = next(filter(None, map(node.child_by_field_name, ("key", "name", "property"))), None)
        value = node.child_by_field_name("value")
        return (target, value) if target is not None and value is not None else None
    if node.type == "assignment_expression":
        target, value = _innermost(node.child_by_field_name("left"), node.child_by_field_name("right"))
        return (target, value) if target is not None and value is not None else None
    if node.type == "call_expression":
        return _prototype_extension(node)
    if node.type == "assignment_statement" and node.named_child_count == 2:
        targets, values = node.named_children
        if targets.named_child_count == 1 and values.named_child_count == 1:
            return targets.named_children[0], values.named_children[0]
    return None


def _prototype_extension(call):
    """(prototype, object literal) of a call that gives the object's members to a prototype, as JavaScript before
    classes adds methods (`_.extend(Model.prototype, Events, {...})`, `Object.assign(Foo.prototype, {...})`), else
    None. The arguments after the prototype are names and objects, the literal last: `Object.defineProperty(
    Foo.prototype, "size", { get () {...} })` gives one property its getter, not methods."""
    given = _arguments(call)
    if len(given) < 2 or given[0].type != "member_expression" or given[-1].type != "object":
        return None
    prop = given[0].child_by_field_name("property")
    if prop is None or prop.text != b"prototype":
        return None
    if any(a.type not in ("identifier", "member_expression", "object") for a in given[1:]):
        return None
    return given[0], given[-1]


def _wrapped_function(value):
    """The function a call or `new` wraps, as in `const $ZodObject = core.$constructor("$ZodObject", (inst, def)
    => {...})`, `const Button = forwardRef((props, ref) => ...)` or `const EMPTY = new Observable((s) => ...)`,
    or the function it calls in place (`const ajax = (() => {... return create; })()`, the module pattern of
    JavaScript before modules): the constant is defined by that function's body (the called one, else the longest
    function argument), or None."""
    if value.type not in ("call_expression", "new_expression"):
        return None
    called = _called_in_place(value)
    if called is not None:
        return called
    funcs = [a for a in _arguments(value) if _is_function(a)]
    return max(funcs, key=lambda f: f.end_point[0] - f.start_point[0], default=None)


def _called_in_place(call):
    """The function that `call` calls where it is written (`(() => {...})()`, `(function () {...})()`), or None."""
    callee = call.child_by_field_name("function")
    while callee is not None and callee.type == "parenthesized_expression" and callee.named_child_count == 1:
        callee = callee.named_children[0]
    return callee if callee is not None and _is_function(callee) else None


def bodies_called_in_place(statement) -> list:
    """The bodies of the functions a statement calls where it is written, which hold a file's code: a browser
    script's `(function () { ... })();` and `!function () { ... }();`, both functions of a UMD wrapper,
    `(function (root, factory) { ... })(this, function (_) { ... })`, and the function of an AMD module
    (`_defines_a_module`). Empty for any other statement (a test's `describe("...", function () {...})`)."""
    if statement.type != "expression_statement" or statement.named_child_count != 1:
        return []
    expr = statement.named_children[0]
    while expr.type in ("parenthesized_expression", "unary_expression") and expr.named_child_count == 1:
        expr = expr.named_children[0]
    if expr.type != "call_expression":
        return []
    given = _arguments(expr)
    called = _called_in_place(expr)
    if called is not None:
        functions = [called] + [a for a in given if _is_function(a)]
    elif _defines_a_module(given):
        functions = [given[-1]]
    else:
        return []
    bodies = (f.child_by_field_name("body") for f in functions)
    return [body for body in bodies if body is not None and body.type == "statement_block"]


def _defines_a_module(given: list) -> bool:
    """The arguments of an AMD module, `define(["./core", "./var/slice"], function (jQuery, slice) {...})` (or a
    `require([...], function (...) {...})`): a list of module names, then the function that receives them and
    holds the module's code."""
    return (len(given) >= 2 and given[0].type == "array" and _is_function(given[-1])
            and all(e.type == "string" for e in given[0].named_children if not is_comment_like(e.type)))


def _is_function(node) -> bool:
    """A function as a value (`function () {...}`, an arrow, Lua's `function () ... end`), not a class."""
    return _FUNCTION_VALUE_TYPES.get(node.type) == "function"


def _arguments(call) -> list:
    """The arguments of a call or `new`, comments left out."""
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if not is_comment_like(a.type)] if args is not None else []


def _innermost(target, value):
    """The last (target, value) of a chained JavaScript assignment: `a = b = f` gives (b, f)."""
    while value is not None and value.type == "assignment_expression":
        target, value = value.child_by_field_name("left"), value.child_by_field_name("right")
    return target, value
