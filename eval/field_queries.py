"""Name queries that ask for a field: the name of a class attribute (a setting, a dataclass's or an enum's
member), an interface's or a class's property (TypeScript), a struct's field (Rust, C), a class's field or an
enum's constant (Java), as written, with the statement that declares it as gold. The gold comes from a parser
(Python's `ast`, tree-sitter for the others), not from the rule that finds fields at search time
(coderag/queries/symbols.py `declares_field`), so the set can judge that rule.

    python -m coderag.eval.field_queries --corpus attrs click rich markdown-it --split tune --out fields.jsonl
    coderag eval --dataset fields.jsonl --variants full

A field gives a query when its name has five characters or more, is a plain identifier (not a dunder, not a
TypeScript `#private` field), no other type of the indexed corpus declares it, and nothing else there is named
so (a function, a class, a module's variable; in TypeScript, Rust and Java any name declared; in C any name
but a member's): the question has one answer. At most `LIMIT` a corpus, drawn with a fixed seed; tests are left out.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
from collections import Counter
from pathlib import Path

from coderag.nodes.file_roles import SOURCE, file_role

LIMIT = 25
MIN_CHARS = 5
_IDENTIFIER = re.compile(r"^[A-Za-z_$][\w$]*$")  # not a TypeScript `#private` field


# The languages read, by file suffix; a field's declaration, by tree-sitter node type, where its parent is a
# type's body (a TypeScript object type only as a `type X = {...}` alias's).
LANGUAGES = {".py": "python", ".ts": "typescript", ".tsx": "tsx", ".rs": "rust", ".java": "java", ".c": "c",
             ".h": "c"}
_TS_FIELDS = {"public_field_definition", "property_signature", "field_declaration"}
_TS_BODIES = {"class_body", "interface_body", "field_declaration_list"}


def _indexed_files(root: Path) -> list[str]:
    """The source files of LANGUAGES the corpus' index holds (`coderag eval` indexes it first)."""
    from coderag.base.paths import DB_NAME, index_dir
    from coderag.store.state import SEARCHABLE, IndexState

    state = IndexState(index_dir(root) / DB_NAME, readonly=True)
    try:
        paths = [path for path, rec in state.files().items() if rec.status in SEARCHABLE]
    finally:
        state.close()
    return sorted(p for p in paths if Path(p).suffix in LANGUAGES
                  and file_role(p, LANGUAGES[Path(p).suffix]) == SOURCE)


def _nodes(source: bytes, language: str):
    """Every node of the file's syntax tree, depth first."""
    from tree_sitter_language_pack import get_parser

    stack = [get_parser(language).parse(source).root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        yield node


def _tree_sitter_names(source: bytes, language: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """`_names` for a language tree-sitter reads: fields of a class, an interface, a struct or a `type X = {}`."""
    fields, others = [], []
    for node in _nodes(source, language):
        name = node.child_by_field_name("name")
        if name is None:
            continue
        parent = node.parent.type if node.parent is not None else ""
        if node.type in _TS_FIELDS and (parent in _TS_BODIES or (
                parent == "object_type" and node.parent.parent is not None
                and node.parent.parent.type == "type_alias_declaration")):
            fields.append((name.text.decode("utf-8", "replace"), node.start_point[0] + 1, node.end_point[0] + 1))
        elif node.type not in _TS_FIELDS:
            others.append(name.text.decode("utf-8", "replace"))
    return fields, others


def _java_names(source: bytes) -> tuple[list[tuple[str, int, int]], list[str]]:
    """`_names` for Java: each variable a class's or an interface's field declaration declares (its lines are the
    declaration's), each constant of an enum; every other name declared (a type, a method, a local)."""
    fields, others = [], []
    for node in _nodes(source, "java"):
        name = node.child_by_field_name("name")
        if name is None:
            continue
        text = name.text.decode("utf-8", "replace")
        owner = node.parent
        if node.type == "variable_declarator" and owner is not None and owner.type == "field_declaration":
            fields.append((text, owner.start_point[0] + 1, owner.end_point[0] + 1))
        elif node.type == "enum_constant":
            fields.append((text, node.start_point[0] + 1, node.end_point[0] + 1))
        else:
            others.append(text)
    return fields, others


def _c_names(source: bytes) -> tuple[list[tuple[str, int, int]], list[str]]:
    """`_names` for C: each member a struct's or a union's field declaration declares (through its pointer and
    array declarators); every other identifier and type name, used or declared (a member is used as a
    `field_identifier`, so any plain identifier of the same name is something else)."""
    fields, others = [], []
    for node in _nodes(source, "c"):
        if node.type in ("identifier", "type_identifier"):
            others.append(node.text.decode("utf-8", "replace"))
        if node.type != "field_declaration":
            continue
        for declarator in node.children_by_field_name("declarator"):
            while declarator is not None and declarator.type != "field_identifier":
                declarator = declarator.child_by_field_name("declarator")
            if declarator is not None:
                fields.append((declarator.text.decode("utf-8", "replace"), node.start_point[0] + 1,
                               node.end_point[0] + 1))
    return fields, others


def _names(tree: ast.AST) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(the fields declared directly in a class body, with their lines; every other name defined)."""
    fields, others = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            others.append(node.name)
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = ([stmt.target] if isinstance(stmt, ast.AnnAssign)
                           else stmt.targets if isinstance(stmt, ast.Assign) else [])
                for t in targets:
                    if isinstance(t, ast.Name):
                        fields.append((t.id, stmt.lineno, stmt.end_lineno or stmt.lineno))
        elif isinstance(node, ast.Module):
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else stmt.targets
                    others.extend(t.id for t in targets if isinstance(t, ast.Name))
    return fields, others


def field_queries(corpus: str, root: Path, split: str, limit: int = LIMIT) -> list[dict]:
    found: list[tuple[str, str, int, int]] = []
    others: Counter = Counter()
    for path in _indexed_files(root):
        language = LANGUAGES[Path(path).suffix]
        if language == "python":
            try:
                fields, names = _names(ast.parse((root / path).read_text(encoding="utf-8")))
            except (SyntaxError, UnicodeDecodeError):
                continue
        elif language == "java":
            fields, names = _java_names((root / path).read_bytes())
        elif language == "c":
            fields, names = _c_names((root / path).read_bytes())
        else:
            fields, names = _tree_sitter_names((root / path).read_bytes(), language)
        found.extend((name, path, start, end) for name, start, end in fields)
        others.update(names)
    declared = Counter(name for name, *_ in found)
    good = [f for f in found if declared[f[0]] == 1 and not others[f[0]] and len(f[0]) >= MIN_CHARS
            and not f[0].startswith("__") and _IDENTIFIER.match(f[0])]
    random.Random(f"fields:{corpus}").shuffle(good)
    return [{"id": f"{corpus}-field-{i + 1}", "corpus": corpus, "query": name,
             "gold": [{"file_path": path, "start_line": start, "end_line": end}], "kind": "identifier",
             "split": split} for i, (name, path, start, end) in enumerate(sorted(good[:limit]))]


def main(argv: list[str] | None = None) -> int:
    from coderag.eval.corpora import corpus_root

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="+", required=True, help="corpora of eval/corpus_table.py, indexed")
    ap.add_argument("--split", required=True, choices=("tune", "heldout"))
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    rows = [q for name in a.corpus for q in field_queries(name, corpus_root(name), a.split)]
    a.out.write_text("".join(json.dumps(q) + "\n" for q in rows))
    print(f"{len(rows)} field queries -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
