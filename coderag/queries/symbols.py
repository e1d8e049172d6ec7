"""The definitions a chunk holds: its symbol, or every symbol of a chunk of merged small siblings."""

from __future__ import annotations

import functools
import re
from typing import Mapping

from coderag.nodes.keys import SYMBOL_KEY, SYMBOLS_KEY


def chunk_symbols(metadata: Mapping) -> list[str]:
    """`symbols` of a merged chunk (each definition inside it, nested ones too), else its one `symbol`.

    A merged chunk's `symbol` names at most its first three definitions ("A.x, A.y, A.z, ..."), so it
    cannot answer "does this chunk define A.w"; `symbols` can."""
    names = metadata.get(SYMBOLS_KEY)
    if names:
        return list(names)
    symbol = metadata.get(SYMBOL_KEY) or ""
    return [symbol] if symbol else []


_GENERIC_ARGS = re.compile(r"<[^<>]*>")


def bare_symbol(symbol: str) -> str:
    """`symbol` without generic arguments, which a type's name carries in some languages and a question
    never does: `RecursionGuard<'_, S>.new` -> `RecursionGuard.new`, `Map<K, List<V>>.get` -> `Map.get`."""
    while "<" in symbol:
        stripped = _GENERIC_ARGS.sub("", symbol)
        if stripped == symbol:
            break
        symbol = stripped
    return symbol


def defines_symbol(symbol: str, identifier: str) -> bool:
    """True if a definition named `symbol` defines `identifier` (`LruCache.get` defines `get` and `LruCache.get`;
    `RecursionGuard<'_, S>.new` defines `RecursionGuard.new`)."""
    if symbol == identifier or symbol.endswith("." + identifier):
        return True
    if "<" not in symbol:
        return False
    symbol = bare_symbol(symbol)
    return symbol == identifier or symbol.endswith("." + identifier)


def chunk_defines(metadata: Mapping, identifier: str) -> bool:
    """True if the chunk with this metadata holds a definition of `identifier`."""
    return any(defines_symbol(s, identifier) for s in chunk_symbols(metadata))


# A line at column 0 that gives `name` its value: a module's constant or variable (`NAME = ...`, `NAME: T = ...`),
# a JS/TS/Go/Rust `const`/`let`/`var`/`static` (exported or `pub` too), a C `#define`.
_ASSIGNMENT = (r"^(?:export\s+)?(?:(?:pub(?:\([^)\n]*\))?\s+)?(?:const|let|var|static)\s+(?:mut\s+)?)?{name}"
               r"\s*(?::[^=\n]*)?=(?!=)|^#[ \t]*define[ \t]+{name}\b")


@functools.lru_cache(maxsize=512)
def _assignment_of(name: str) -> re.Pattern:
    return re.compile(_ASSIGNMENT.format(name=re.escape(name)), re.M)


def assigns_at_top_level(text: str, name: str) -> bool:
    r"""True if a line of `text` starting at column 0 assigns the plain name `name` (no dots): the definition
    of a constant, which the splitter does not make a symbol of (module-level code is a block or a window).
    Indented lines, a function's locals and a class's attributes, do not count.

    >>> assigns_at_top_level("DEFAULT_STYLES: Dict[str, Style] = {", "DEFAULT_STYLES")
    True
    >>> assigns_at_top_level("    if WINDOWS == x:\nprint(WINDOWS)", "WINDOWS")
    False
    """
    return "." not in name and name in text and _assignment_of(name).search(text) is not None


# The head of a type whose body lists its fields: `class Name`, `struct Name`, `interface Name`, `enum Name`,
# `record Name`, `trait Name`, `union Name`, a TypeScript `type Name = {`, a Go `type Name struct {`, after any
# modifiers (`export`, `pub`, `public final`, `typedef`; a decorator's `@dataclass` line stands above it); or a
# type with no name before its brace (C's `typedef struct {`, whose name follows its body).
_TYPE_HEAD = re.compile(r"^([ \t]*)(?:[\w@()]+[ \t]+)*?(class|struct|interface|enum|record|trait|type|union)"
                        r"(?:[ \t]+([A-Za-z_$][\w$]*)([ \t]+(?:struct|interface)\b)?|[ \t]*(?=\{))")
_MODIFIERS = (r"(?:pub(?:\([^)\n]*\))?|public|private|protected|internal|readonly|static|final|declare|override|"
              r"abstract|const|var|let|val|lateinit|mut)")
# A field declared by name first (Python, TypeScript and JavaScript, Rust, Kotlin, Swift, an enum's member):
# `name: T = ...`, `name = ...`, `name?: T;`, `readonly name: T`, `pub name: T,`, `RED,`; or by Ruby's
# `attr_reader :balance, :name`.
_NAME_FIRST = (r"(?:" + _MODIFIERS + r"[ \t]+)*{name}[?!]?[ \t]*(?::(?!:)|=(?![=>])|;|,|$)"
               r"|attr_(?:reader|writer|accessor)[ \t]+(?::\w+[ \t]*,[ \t]*)*:{name}\b")
# A field declared type first (Java, C#, C and C++, PHP): `private final Map<K, V> name;`, `int a, name = 0;`,
# `char *name[8];`, `unsigned name : 3;`, a C# property `public int Name { get; set; }` or `Name => ...`, PHP's
# `private string $name;`. The name is the last word before what ends a declaration, so a type's name (`String`
# of `String name;`) is not its field. Read only in a body that opens with a brace: in Python's, a docstring's
# prose would look alike.
_TYPE_FIRST = (r"[A-Za-z_](?:[\w.$<>?,\[\]&*]*[ \t]+)+\**\$?{name}[ \t]*(?:\[[^\]\n]*\][ \t]*)*"
               r"(?:=(?![=])|;|,[^;\n]*;|:[ \t]*\d+[ \t]*;|\{{[ \t]*(?:get|set|init)\b)")
# An enum's constant given arguments (Java's `GREEN(2),`); in a type's body such a line can only be that, a
# method or a constructor, each a definition.
_CALLED = r"{name}[ \t]*\("
# A Go struct's field: `Name Type`, `a, Name Type`, an embedded `Name` alone, with any tag after it; read only
# in the body of a Go `type X struct {`, where a line has no other meaning.
_GO_FIELD = r"(?:\w+[ \t]*,[ \t]*)*{name}(?:[ \t]*,[ \t]*\w+)*(?:[ \t]+[^\s=:]|[ \t]*$)"


# Annotations, decorators and attributes before a declaration on its line: Java's `@Inject private Foo foo;`,
# TypeScript's `@Input() name: string;`, C#'s `[JsonProperty("x")] public int X { get; set; }`.
_ANNOTATED = r"(?:@[\w.]+(?:\([^)\n]*\))?[ \t]+|\[[^\]\n]*\][ \t]*)*"
# A property declared in a type's head, among its parameters: Kotlin's `class User(val id: Long)`, and every
# component of a Java or C# record (`record Point(int x, int y)`), whose name is its last word.
_HEAD_PROPERTY = r"(?:(?:@[\w.]+(?:\([^)]*\))?|private|protected|public|internal|override|open|final)\s+)*" \
                 r"(?:val|var)\s+{name}\s*:"
_RECORD_COMPONENT = r"(?:@[\w.]+(?:\([^)]*\))?\s+)*[\w.$<>?\[\], \t\n]*[\w>\]?]\s+{name}\s*(?:=.*)?"
_OPEN_PARAMETERS = re.compile(r"[ \t]*(?:<[^()\n]*>)?[ \t]*\(")
_MOST_HEAD_LINES = 40  # a head's parameter list longer than this is read no further


@functools.lru_cache(maxsize=512)
def _field_of(name: str) -> tuple[re.Pattern, re.Pattern, re.Pattern, re.Pattern, re.Pattern]:
    """The patterns of `name`'s declaration: in a type's body that opens with no brace (Python's), with a brace,
    in a Go struct's, among a head's parameters, and as a record's component."""
    name = re.escape(name)
    name_first = _NAME_FIRST.format(name=name)
    in_braces = (f"{_ANNOTATED}(?:(?:{name_first})|(?:{_TYPE_FIRST.format(name=name)})"
                 f"|(?:{_CALLED.format(name=name)}))")
    return (re.compile(name_first), re.compile(in_braces), re.compile(_GO_FIELD.format(name=name)),
            re.compile(_HEAD_PROPERTY.format(name=name)), re.compile(_RECORD_COMPONENT.format(name=name)))


def _head_parameters(lines: list[str], i: int, start: int) -> list[str]:
    """The parameters of the list that opens right after a type's name (line `i`, column `start`), across lines,
    split at its own commas (not those inside `<...>`, `(...)`, `[...]`); [] where the head opens none."""
    opened = _OPEN_PARAMETERS.match(lines[i], start)
    if opened is None:
        return []
    text = "\n".join([lines[i][opened.end():], *lines[i + 1:i + _MOST_HEAD_LINES]])
    params, depth, begin = [], 0, 0
    for pos, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}" or (ch == ">" and text[pos - 1:pos] != "-"):
            if depth == 0:
                if ch == ")":
                    params.append(text[begin:pos])
                    return [p.strip() for p in params if p.strip()]
                return []  # unbalanced: not a parameter list
            depth -= 1
        elif ch == "," and depth == 0:
            params.append(text[begin:pos])
            begin = pos + 1
    return []


def declares_field(text: str, name: str) -> bool:
    """True if `text` holds the head of a type (a class, struct, interface, enum) and a line of its body, at the
    body's own indentation, declares the field `name` (`Type.name` asks for that type's). A field is a
    definition an agent asks for by name (a setting, a dataclass's attribute, a struct's member), though the
    splitter makes no symbol of it. Deeper lines are a method's locals and do not count; nor does a type whose
    head is not in the chunk, since a window of a long function looks the same as one of a long class.

    >>> declares_field("class Settings(Base):\\n    top_k: int = Field(default=25)\\n", "top_k")
    True
    >>> declares_field("class Settings:\\n    def run(self):\\n        top_k = 3\\n", "top_k")
    False
    >>> declares_field("pub struct Opts {\\n    pub depth: usize,\\n}", "Opts.depth")
    True
    >>> declares_field("public class Opts {\\n    private int depth = 25;\\n}", "depth")
    True
    """
    owner, _, field = name.rpartition(".")
    if not field or field not in text or "." in owner:
        return False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        head = _TYPE_HEAD.match(line)
        if head is None or (owner and head.group(3) != owner):
            continue
        in_python, in_braces, in_go_struct, in_head, component = _field_of(field)
        record = head.group(2) == "record"
        if any(in_head.match(p) or (record and component.fullmatch(p)) for p in _head_parameters(lines, i, head.end())):
            return True
        braces = "{" in line or next((ln.strip() for ln in lines[i + 1:] if ln.strip()), "").startswith("{")
        declares = (in_go_struct if head.group(2) == "type" and head.group(4)
                    else in_braces if braces else in_python).match
        outer, body = len(head.group(1)), None
        for later in lines[i + 1:]:
            stripped = later.strip()
            if not stripped or (body is None and stripped == "{"):
                continue  # a blank line, or the body's brace on a line of its own (C#, C)
            indent = len(later) - len(later.lstrip())
            if indent <= outer:
                break  # the type's body ended (its closing brace, or the next statement at the head's level)
            if body is None:
                body = indent
            if indent == body and declares(stripped):
                return True
    return False
