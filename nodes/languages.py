"""Language detection and the tree-sitter definition tables per language."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".pyw": "python", ".ipynb": "python",  # a notebook's cells: nodes/notebook.py
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".cs": "csharp", ".rb": "ruby", ".php": "php",
    ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".swift": "swift", ".lua": "lua",
    ".sh": "bash", ".bash": "bash", ".zsh": "bash",
    ".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text",
    ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini",
    ".html": "html", ".htm": "html", ".css": "css", ".scss": "scss", ".sql": "sql",
    ".proto": "proto", ".tf": "hcl", ".xml": "xml", ".vue": "vue", ".svelte": "svelte",
}
FILENAMES: dict[str, str] = {
    "Dockerfile": "dockerfile", "Makefile": "make", "CMakeLists.txt": "cmake",
    "Gemfile": "ruby", "Rakefile": "ruby",
}
SHEBANGS: dict[str, str] = {
    "python": "python", "python3": "python", "node": "javascript", "bash": "bash", "sh": "bash",
    "zsh": "bash", "ruby": "ruby", "php": "php",
}
MARKUP_LANGUAGES = frozenset({"markdown", "rst"})


# A `.h` file is C++ as often as C (fmt, LLVM, most of Google's code name their C++ headers so). C++ shows in
# lines that C never has: a namespace, a template, an access specifier, a `using` declaration, `std::`. A C
# header's `extern "C"` is for C++ callers and does not count.
_CPP_LINE = re.compile(r"^[ \t]*(?:namespace[ \t]+[\w:]*[ \t]*\{|template[ \t]*<|(?:public|private|protected)[ \t]*:"
                       r"|using[ \t]+(?:namespace[ \t]+)?[\w:]+[ \t]*(?:=|;))|\bstd::", re.M)


def detect_language(rel_path: str, head: str = "") -> str:
    """Language of a file from its name, then its shebang; "text" when neither says. A `.h` file is C++ when
    `head` shows C++ (`_CPP_LINE`): pass the whole text where the two must differ (nodes/reader.py, whose
    answer the index keeps); a shorter head reads as C, where either is code."""
    p = PurePosixPath(rel_path)
    if p.name in FILENAMES:
        return FILENAMES[p.name]
    lang = EXTENSIONS.get(p.suffix.lower())
    if lang == "c" and p.suffix.lower() == ".h" and _CPP_LINE.search(head):
        return "cpp"
    if lang:
        return lang
    if head.startswith("#!"):
        words = head[2:].split("\n", 1)[0].split()
        if words:
            prog = words[1] if words[0].endswith("/env") and len(words) > 1 else words[0].rsplit("/", 1)[-1]
            prog = prog.rstrip("0123456789.") or prog
            for name, language in SHEBANGS.items():
                if prog == name or prog == name.rstrip("3"):
                    return language
    return "text"


@dataclass(frozen=True)
class Grammar:
    """Which tree-sitter node types are definitions, containers and wrappers in one language."""

    # definition node type -> kind
    definitions: dict[str, str]
    # definitions whose body holds nested definitions that become children (classes, impls, namespaces)
    containers: frozenset[str] = frozenset()
    # nodes that wrap one definition and carry its decorators/export/template prefix
    wrappers: frozenset[str] = frozenset()
    # nodes whose children are searched for definitions as if they sat at the same level
    transparent: frozenset[str] = frozenset()
    # JS/TS: `const f = () => {}` declares a function
    variable_declarations: frozenset[str] = frozenset()
    # nodes that may give one value to a name: a statement that assigns, a member of an object literal. A function
    # so named is defined there, named by its target (JS's `Router.prototype.route = function (path) {...}` is
    # `Router.route`, Lua's `M.setup = function () end` is `M.setup`), and an object literal that holds functions
    # is their container (`module.exports = { inspect () {...} }`): the ways most JavaScript before classes, and
    # most Lua modules, define their functions; and a class field whose value is a function (React's
    # `handleClick = (e) => {...}`) is a method
    assignments: frozenset[str] = frozenset()
    # targets of an assignment that name the module, not what it holds (CommonJS's `module.exports = class
    # Application {...}`): a function or class assigned to one with a name of its own takes that name, as its
    # code and readers call it; an anonymous one keeps the target's
    export_slots: frozenset[str] = frozenset()
    # a grammar whose definitions have no `name` and `body` fields (Kotlin's): the first child of one of these
    # types is the name, and the first of these the body
    name_types: frozenset[str] = frozenset()
    body_types: frozenset[str] = frozenset()
    # nodes that keep the comments after them inside (Kotlin's package header and import list hold the doc
    # comment of the declaration that follows): such a trailing comment leads the next definition
    comment_hosts: frozenset[str] = frozenset()
    extra_leading: frozenset[str] = field(default_factory=frozenset)


_COMMENT_LIKE = frozenset({"comment", "line_comment", "block_comment", "doc_comment", "attribute_item",
                           "inner_attribute_item", "decorator", "annotation", "marker_annotation",
                           "attribute_list"})

_JS_DEFS = {
    "function_declaration": "function", "generator_function_declaration": "function",
    "class_declaration": "class", "abstract_class_declaration": "class", "class": "class",
    "method_definition": "method", "interface_declaration": "interface", "enum_declaration": "enum",
    "type_alias_declaration": "type", "module": "module", "internal_module": "namespace",
    "abstract_method_signature": "method", "function_signature": "function",
}
_JS = Grammar(
    definitions=_JS_DEFS,
    containers=frozenset({"class_declaration", "abstract_class_declaration", "class", "module", "internal_module",
                          "object"}),
    wrappers=frozenset({"export_statement"}),
    variable_declarations=frozenset({"lexical_declaration", "variable_declaration"}),
    assignments=frozenset({"expression_statement", "pair", "public_field_definition", "field_definition"}),
    export_slots=frozenset({"module.exports", "exports"}),
)

GRAMMARS: dict[str, Grammar] = {
    "python": Grammar(
        definitions={"function_definition": "function", "class_definition": "class"},
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
    ),
    "javascript": _JS,
    "typescript": _JS,
    "tsx": _JS,
    "go": Grammar(
        definitions={"function_declaration": "function", "method_declaration": "method", "type_declaration": "type"},
    ),
    "rust": Grammar(
        definitions={"function_item": "function", "impl_item": "impl", "struct_item": "struct",
                     "enum_item": "enum", "trait_item": "trait", "mod_item": "module", "union_item": "struct",
                     "macro_definition": "macro", "function_signature_item": "function"},
        containers=frozenset({"impl_item", "trait_item", "mod_item"}),
    ),
    "java": Grammar(
        definitions={"class_declaration": "class", "interface_declaration": "interface", "enum_declaration": "enum",
                     "record_declaration": "class", "method_declaration": "method",
                     "constructor_declaration": "method", "annotation_type_declaration": "interface"},
        containers=frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}),
        transparent=frozenset({"enum_body_declarations"}),
    ),
    "c": Grammar(
        definitions={"function_definition": "function", "struct_specifier": "struct", "enum_specifier": "enum",
                     "union_specifier": "struct", "type_definition": "type"},
        # A header's `extern "C" { ... }` (for C++ callers) is a linkage_specification whose body is a
        # declaration_list: read through both, or everything the header defines is one unnamed window.
        transparent=frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "linkage_specification",
                               "declaration_list"}),
    ),
    "cpp": Grammar(
        definitions={"function_definition": "function", "class_specifier": "class", "struct_specifier": "struct",
                     "enum_specifier": "enum", "union_specifier": "struct", "namespace_definition": "namespace",
                     "type_definition": "type"},
        containers=frozenset({"class_specifier", "struct_specifier", "namespace_definition"}),
        wrappers=frozenset({"template_declaration"}),
        transparent=frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "linkage_specification",
                               "declaration_list"}),
    ),
    "csharp": Grammar(
        definitions={"class_declaration": "class", "interface_declaration": "interface", "struct_declaration": "struct",
                     "record_declaration": "class", "enum_declaration": "enum", "method_declaration": "method",
                     "constructor_declaration": "method", "namespace_declaration": "namespace",
                     "file_scoped_namespace_declaration": "namespace", "property_declaration": "property"},
        containers=frozenset({"class_declaration", "interface_declaration", "struct_declaration",
                              "record_declaration", "namespace_declaration", "file_scoped_namespace_declaration"}),
    ),
    "kotlin": Grammar(
        definitions={"class_declaration": "class", "object_declaration": "class", "companion_object": "class",
                     "function_declaration": "function", "secondary_constructor": "method"},
        containers=frozenset({"class_declaration", "object_declaration", "companion_object"}),
        name_types=frozenset({"type_identifier", "simple_identifier"}),
        body_types=frozenset({"class_body", "enum_class_body", "function_body"}),
        comment_hosts=frozenset({"package_header", "import_list"}),
    ),
    "swift": Grammar(
        definitions={"class_declaration": "class", "protocol_declaration": "interface",
                     "function_declaration": "function", "init_declaration": "method",
                     "protocol_function_declaration": "method"},
        containers=frozenset({"class_declaration", "protocol_declaration"}),
    ),
    "scala": Grammar(
        definitions={"class_definition": "class", "object_definition": "class", "trait_definition": "trait",
                     "enum_definition": "enum", "function_definition": "function",
                     "function_declaration": "function"},
        containers=frozenset({"class_definition", "object_definition", "trait_definition", "enum_definition"}),
    ),
    "lua": Grammar(
        definitions={"function_declaration": "function"},  # `function M.add(a, b)` is named `M.add`
        containers=frozenset({"table_constructor"}),
        # `local f = function () end` too, and a table's `setup = function () end`
        assignments=frozenset({"assignment_statement", "variable_declaration", "field"}),
    ),
    "ruby": Grammar(
        definitions={"method": "method", "singleton_method": "method", "class": "class", "module": "module"},
        containers=frozenset({"class", "module"}),
    ),
    "php": Grammar(
        definitions={"function_definition": "function", "class_declaration": "class", "method_declaration": "method",
                     "interface_declaration": "interface", "trait_declaration": "trait", "enum_declaration": "enum",
                     "namespace_definition": "namespace"},
        containers=frozenset({"class_declaration", "interface_declaration", "trait_declaration",
                              "enum_declaration", "namespace_definition"}),
    ),
}


def is_comment_like(node_type: str) -> bool:
    """True for nodes that belong to the definition after them (comments, attributes, decorators)."""
    return node_type in _COMMENT_LIKE or node_type.endswith("comment")
