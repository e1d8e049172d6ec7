"""Outlines of a file: definitions from a tree-sitter AST, sections from Markdown/RST headings.

An outline is a list of `Item`s with exact 1-based inclusive line ranges; the splitter turns
it into parent and child nodes. The definitions that are values (a function assigned to a name, an
object literal of functions) are read by nodes/values.py. Nothing here knows about LlamaIndex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from coderag.nodes.languages import GRAMMARS, Grammar, is_comment_like
from coderag.nodes.values import assigned_value, bodies_called_in_place, declared_value, node_text

CLASS_LIKE_KINDS = frozenset({"class", "impl", "trait", "interface", "struct", "module", "namespace", "enum",
                              "object"})  # an object literal that holds functions (JS, a Lua table)
# How deep definitions are read inside one another (and inside blocks read through). Real code nests a few levels;
# a generated or hostile file nests thousands, past Python's stack, and its deeper definitions stay code.
MAX_NESTING = 64
# Kinds of definition that declare a shape and do nothing: a TypeScript interface or type alias, an enum, a C,
# Go or Rust struct or type. One that holds a method (a C++ struct with member functions) does something.
DECLARATION_KINDS = frozenset({"interface", "type", "enum", "struct"})


@dataclass
class Item:
    """One definition or section: lines start..end (leading comments and decorators included)."""

    start: int
    end: int
    kind: str
    name: str
    container: bool = False
    children: list["Item"] = field(default_factory=list)
    head_end: int = 0  # last line of the signature (or heading)

    @property
    def declares_only(self) -> bool:
        """A declaration kind all the way down: no function or method inside."""
        return self.kind in DECLARATION_KINDS and all(child.declares_only for child in self.children)


def start_line(node) -> int:
    return node.start_point[0] + 1


def end_line(node) -> int:
    """Last line that holds a character of the node (a node ending at column 0 ends on the line before)."""
    row, col = node.end_point
    if col == 0 and row > node.start_point[0]:
        return row
    return row + 1


def _declarator_name(node, src: bytes) -> str:
    """Walk C/C++ declarators down to the declared name (`int *foo(int)` -> foo, `A::m` -> A::m)."""
    for _ in range(16):
        if node is None:
            return "<anonymous>"
        if node.type in ("identifier", "field_identifier", "qualified_identifier", "operator_name",
                         "destructor_name", "type_identifier", "primitive_type"):
            return node_text(node, src)
        node = node.child_by_field_name("declarator") or (node.named_children[0] if node.named_children else None)
    return "<anonymous>"


def _go_receiver_type(node, src: bytes) -> str | None:
    recv = node.child_by_field_name("receiver")
    if recv is None:
        return None
    for param in recv.named_children:
        typ = param.child_by_field_name("type")
        while typ is not None and typ.type in ("pointer_type", "generic_type"):
            typ = typ.child_by_field_name("type") or (typ.named_children[0] if typ.named_children else None)
        if typ is not None:
            return node_text(typ, src)
    return None


def _body_of(node, grammar: Grammar):
    """The node that holds a definition's body: its `body` field, else its first child of `body_types`."""
    body = node.child_by_field_name("body")
    if body is None and grammar.body_types:
        body = next((c for c in node.named_children if c.type in grammar.body_types), None)
    return body


def _name_of(node, src: bytes, grammar: Grammar) -> str:
    t = node.type
    if t == "impl_item":
        typ = node.child_by_field_name("type")
        return node_text(typ, src) if typ is not None else "impl"
    if t == "type_declaration":
        for spec in node.named_children:
            name = spec.child_by_field_name("name")
            if name is not None:
                return node_text(name, src)
    if t == "method_declaration":
        recv = _go_receiver_type(node, src)
        name = node.child_by_field_name("name")
        if recv and name is not None:
            return f"{recv}.{node_text(name, src)}"
    name = node.child_by_field_name("name")
    if name is not None:
        return node_text(name, src)
    decl = node.child_by_field_name("declarator")
    if decl is not None:
        return _declarator_name(decl, src)
    name = next((c for c in node.named_children if c.type in grammar.name_types), None)
    if name is not None:
        return node_text(name, src)
    return "Companion" if t == "companion_object" else "<anonymous>"  # Kotlin names a companion so by default


def _as_definition(node, grammar: Grammar, src: bytes):
    """(definition node, kind, name, body) if `node` declares something, else None."""
    t = node.type
    if t in grammar.wrappers:
        inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
        candidates = [inner] if inner is not None else list(node.named_children)
        for cand in candidates:
            found = _as_definition(cand, grammar, src)
            if found is not None:
                return found
        return None
    if t in grammar.definitions:
        return node, grammar.definitions[t], _name_of(node, src, grammar), _body_of(node, grammar)
    if t in grammar.variable_declarations:
        for declarator in node.named_children:
            found = declared_value(declarator, src)
            if found is not None:
                return found
    if t in grammar.assignments:
        return assigned_value(node, grammar, src)
    return None


def _collect(parent, grammar: Grammar, src: bytes, lines: list[str], enclosing_kind: str | None,
             depth: int = 0) -> list[Item]:
    if depth > MAX_NESTING:
        return []  # what lies deeper is code of the definition that holds it
    named = parent.named_children
    items: list[Item] = []
    for idx, child in enumerate(named):
        if child.type in grammar.transparent:
            items.extend(_collect(child, grammar, src, lines, enclosing_kind, depth + 1))
            continue
        bodies = bodies_called_in_place(child) if enclosing_kind is None and child.type in grammar.assignments else []
        if bodies:  # read through, as if the file's top level
            for body in bodies:
                items.extend(_collect(body, grammar, src, lines, None, depth + 1))
            continue
        found = _as_definition(child, grammar, src)
        if found is None:
            continue
        def_node, kind, name, body = found
        if kind == "function" and enclosing_kind in CLASS_LIKE_KINDS:
            kind = "method"
        start, end = start_line(child), end_line(child)
        # Leading comments, attributes and decorators that sit on their own lines right above.
        j = idx - 1
        while j >= 0 and is_comment_like(named[j].type) and _leads(named[j], start, lines, src):
            row, col = named[j].start_point
            if lines[row][:col].strip():
                break
            start = start_line(named[j])
            j -= 1
        if j >= 0 and named[j].type in grammar.comment_hosts:
            start = _hung_comments_start(named[j], start, lines)
        def_line = start_line(def_node) if def_node.start_point[0] >= child.start_point[0] else start_line(child)
        if body is not None:
            body_line = start_line(body)
            # The head ends on the body's first line when the body opens after signature text there (`...) {`),
            # on the line before when the body starts a line of its own (Python blocks, Allman braces).
            opens_inline = src[body.start_byte - body.start_point[1]:body.start_byte].strip()
            head_end = body_line if body_line == def_line or opens_inline else body_line - 1
        else:
            head_end = def_line
        head_end = max(min(head_end, end), start)
        children = _collect(body, grammar, src, lines, kind, depth + 1) if body is not None else []
        items.append(Item(start, end, kind, name, def_node.type in grammar.containers, children, head_end))
    return _drop_overlaps(items)


# The bytes of a file in which `_leads` may join a doc comment to what it documents across blank lines: a
# `/** ... */` with a blank line after it (pipelines/migrations.py splits such a file again for an older index).
DOC_COMMENT_APART = re.compile(rb"/\*\*(?:[^*]|\*+[^*/])*\*+/[ \t]*\r?\n[ \t]*\r?\n")


def _leads(comment, start: int, lines: list[str], src: bytes) -> bool:
    """True if `comment` belongs to what starts on line `start`: it ends on the line above, or it is a doc comment
    (`/** ... */`, which documents the declaration after it) with only blank lines between, as Express and the
    code of its kin write one."""
    last = end_line(comment)
    if last >= start - 1:
        return True
    return src.startswith(b"/**", comment.start_byte) and not any(lines[i].strip() for i in range(last, start - 1))


def _hung_comments_start(host, start: int, lines: list[str]) -> int:
    """`start` moved up over the comments that end `host` (its last descendants, each on lines of its own,
    the last right above `start`): tree-sitter hung them inside the node before the definition they lead."""
    tail = []
    node = host
    while node is not None and node.named_children:
        kids = node.named_children
        k = len(kids) - 1
        while k >= 0 and is_comment_like(kids[k].type):
            tail.append(kids[k])
            k -= 1
        node = kids[k] if k >= 0 and not tail else None
    for comment in tail:  # the last first
        row, col = comment.start_point
        if end_line(comment) < start - 1 or lines[row][:col].strip():
            break
        start = start_line(comment)
    return start


def _drop_overlaps(items: list[Item]) -> list[Item]:
    """Keep items in order and disjoint: one that starts inside the previous one is left to it."""
    items.sort(key=lambda it: (it.start, -it.end))
    out: list[Item] = []
    for it in items:
        if out and it.start <= out[-1].end:
            continue
        out.append(it)
    return out


def code_outline(language: str, text: str, lines: list[str], parser) -> list[Item] | None:
    """Definitions of a code file, or None when the language has no grammar table or the parse failed."""
    grammar = GRAMMARS.get(language)
    if grammar is None or parser is None:
        return None
    src = text.encode("utf-8")
    tree = parser.parse(src)
    root = tree.root_node
    if root.type == "ERROR" or (root.named_child_count and root.named_children[0].type == "ERROR" and
                                root.named_child_count == 1):
        return None
    return _collect(root, grammar, src, lines, None)


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_.:<>])\1{2,}\s*$")


def _markdown_headings(lines: list[str]) -> list[tuple[int, int, str, int]]:
    """(line, level, title, last line of the heading) of every heading outside fenced code."""
    out, fence = [], None
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence:
            continue
        m = _ATX.match(line)
        if m:
            out.append((i + 1, len(m.group(1)), (m.group(2) or "").strip(), i + 1))
            continue
        if i > 0 and _SETEXT.match(line) and lines[i - 1].strip() and not _ATX.match(lines[i - 1]) \
                and not lines[i - 1].lstrip().startswith(("-", "*", ">", "|")) and (not out or out[-1][0] != i):
            out.append((i, 1 if line.strip()[0] == "=" else 2, lines[i - 1].strip(), i + 1))
    return out


def _rst_headings(lines: list[str]) -> list[tuple[int, int, str, int]]:
    out, styles = [], []
    i = 0
    while i < len(lines) - 1:
        title, under = lines[i], lines[i + 1]
        over = i > 0 and _RST_UNDERLINE.match(lines[i - 1]) is not None
        if title.strip() and not _RST_UNDERLINE.match(title) and _RST_UNDERLINE.match(under) \
                and len(under.rstrip()) >= len(title.rstrip()):
            style = (under.strip()[0], over)
            if style not in styles:
                styles.append(style)
            out.append((i if over else i + 1, styles.index(style) + 1, title.strip(), i + 2))
            i += 2
            continue
        i += 1
    return out


def markup_outline(language: str, lines: list[str]) -> list[Item]:
    """Sections of a Markdown or RST file, nested by heading level."""
    heads = _markdown_headings(lines) if language == "markdown" else _rst_headings(lines)
    n = len(lines)
    items: list[Item] = []
    stack: list[tuple[int, Item]] = []
    for idx, (line, level, title, head_end) in enumerate(heads):
        end = n
        for line2, level2, _, _ in heads[idx + 1:]:
            if level2 <= level:
                end = line2 - 1
                break
        while end > line and not lines[end - 1].strip():
            end -= 1
        item = Item(line, end, "section", title or "(untitled)", container=True, head_end=min(head_end, end))
        while stack and stack[-1][0] >= level:
            stack.pop()
        (stack[-1][1].children if stack else items).append(item)
        stack.append((level, item))
    return items
