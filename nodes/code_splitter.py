"""Code splitter: AST (or heading) hierarchy of parent and child nodes with exact line ranges."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, NodeRelationship, RelatedNodeInfo, TextNode

from coderag.nodes.keys import (
    EMBED_TRUNCATED_KEY, END_LINE_KEY, FILE_PATH_KEY, IS_LEAF_KEY, KIND_KEY, LANGUAGE_KEY, LAST_MODIFIED_KEY,
    NON_EMBED_KEYS, SIGNATURES_ONLY_KEY, START_LINE_KEY, SYMBOL_KEY,
)
from coderag.nodes.languages import GRAMMARS, MARKUP_LANGUAGES
from coderag.nodes.outline import Item, code_outline, markup_outline
from coderag.nodes.tokens import TokenCounter

DEFAULT_MAX_TOKENS = 200
DEFAULT_OVERLAP_LINES = 2
DEFAULT_SIGNATURES_ONLY_BYTES = 1024 * 1024
DEFAULT_SIGNATURES_ONLY_LINES = 20_000
NODE_NAMESPACE = uuid.UUID("5b0f5f0e-7c1a-4f43-9d0c-6f6f64657261")


def node_id_for(path: str, kind: str, symbol: str, ordinal: int) -> str:
    """Stable UUID of a node: the same path, kind, symbol and occurrence give the same id on every run."""
    return str(uuid.uuid5(NODE_NAMESPACE, f"{path}\x00{kind}\x00{symbol}\x00{ordinal}"))


def _ref(node: BaseNode) -> RelatedNodeInfo:
    """A link to `node` by id and type. `as_related_node_info()` also copies the node's metadata and hash
    into every link: two thirds of a stored leaf's bytes, parsed again for every candidate of every search."""
    return RelatedNodeInfo(node_id=node.node_id, node_type=node.get_type())


def _is_filler(line: str) -> bool:
    """Blank lines and lines of bare punctuation (`}`, `);`, `end`) never start or end a block."""
    s = line.strip()
    return not s or s == "end" or not any(ch.isalnum() for ch in s)


class _FileSplit:
    """Builds the nodes of one document."""

    def __init__(self, splitter: "CodeHierarchySplitter", doc: Document, lines: list[str], tokens: list[int]):
        self.sp, self.doc, self.lines, self.tokens = splitter, doc, lines, tokens
        self.path = doc.metadata[FILE_PATH_KEY]
        self.nodes: list[TextNode] = []
        self.children: dict[str, list[TextNode]] = {}
        self.ordinals: Counter = Counter()
        self.offsets = [0]
        for line in lines[:-1]:
            self.offsets.append(self.offsets[-1] + len(line) + 1)
        self.signatures_only = False

    def count(self, start: int, end: int) -> int:
        return sum(self.tokens[start - 1:end])

    def make(self, start: int, end: int, kind: str, symbol: str, parent: TextNode | None, **extra: Any) -> TextNode:
        key = (kind, symbol)
        self.ordinals[key] += 1
        meta = {
            FILE_PATH_KEY: self.path,
            LANGUAGE_KEY: self.doc.metadata.get(LANGUAGE_KEY, "text"),
            LAST_MODIFIED_KEY: self.doc.metadata.get(LAST_MODIFIED_KEY, ""),
            START_LINE_KEY: start,
            END_LINE_KEY: end,
            SYMBOL_KEY: symbol,
            KIND_KEY: kind,
            IS_LEAF_KEY: True,
            **extra,
        }
        if self.signatures_only:
            meta[SIGNATURES_ONLY_KEY] = True
        node = TextNode(
            id_=node_id_for(self.path, kind, symbol, self.ordinals[key]),
            text="\n".join(self.lines[start - 1:end]),
            metadata=meta,
            excluded_embed_metadata_keys=list(NON_EMBED_KEYS),
            excluded_llm_metadata_keys=list(NON_EMBED_KEYS),
            metadata_template="{value}",
            text_template="{metadata_str}\n{content}",
            start_char_idx=self.offsets[start - 1],
            end_char_idx=self.offsets[end - 1] + len(self.lines[end - 1]),
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=self.doc.id_)
        if parent is not None:
            parent.metadata[IS_LEAF_KEY] = False
            node.relationships[NodeRelationship.PARENT] = _ref(parent)
        self.children.setdefault(parent.node_id if parent is not None else "", []).append(node)
        self.nodes.append(node)
        return node

    def windows(self, start: int, end: int, kind: str, symbol: str, parent: TextNode | None, overlap: int) -> None:
        """Line windows of at most max_tokens each, `overlap` lines shared between neighbours."""
        s = start
        while s <= end:
            e, total = s, self.tokens[s - 1]
            while e < end and total + self.tokens[e] <= self.sp.max_tokens:
                e += 1
                total += self.tokens[e - 1]
            extra = {EMBED_TRUNCATED_KEY: True} if total > self.sp.max_tokens else {}
            self.make(s, e, kind, symbol, parent, **extra)
            if e >= end:
                break
            s = max(e + 1 - overlap, s + 1)

    def gap(self, start: int, end: int, symbol: str, parent: TextNode | None) -> None:
        while start <= end and _is_filler(self.lines[start - 1]):
            start += 1
        while end >= start and _is_filler(self.lines[end - 1]):
            end -= 1
        if start <= end:
            self.windows(start, end, "block", symbol, parent, overlap=0)

    def region(self, items: list[Item], start: int, end: int, prefix: str, parent: TextNode | None, sep: str) -> None:
        cursor = start
        for it in items:
            if it.start > cursor:
                self.gap(cursor, it.start - 1, prefix, parent)
            self.item(it, prefix, parent, sep)
            cursor = it.end + 1
        if cursor <= end:
            self.gap(cursor, end, prefix, parent)

    def item(self, it: Item, prefix: str, parent: TextNode | None, sep: str) -> None:
        symbol = f"{prefix}{sep}{it.name}" if prefix else it.name
        if self.signatures_only:
            self.windows(it.start, it.head_end, "signature", symbol, None, overlap=0)
            for child in it.children:
                self.item(child, symbol, None, sep)
            return
        fits = self.count(it.start, it.end) <= self.sp.max_tokens
        if (it.container and it.children) or not fits:
            node = self.make(it.start, it.end, it.kind, symbol, parent)
            if it.children:
                self.region(it.children, it.start, it.end, symbol, node, sep)
            else:
                self.windows(it.start, it.end, "window", symbol, node, overlap=self.sp.overlap_lines)
        else:
            self.make(it.start, it.end, it.kind, symbol, parent)

    def link(self) -> list[BaseNode]:
        by_id = {n.node_id: n for n in self.nodes}
        for parent_id, kids in self.children.items():
            if parent_id:
                by_id[parent_id].relationships[NodeRelationship.CHILD] = [_ref(k) for k in kids]
            for a, b in zip(kids, kids[1:]):
                a.relationships[NodeRelationship.NEXT] = _ref(b)
                b.relationships[NodeRelationship.PREVIOUS] = _ref(a)
        return list(self.nodes)


class CodeHierarchySplitter(NodeParser):
    """Split source files into a hierarchy of nodes along their syntax.

    Code files are parsed with tree-sitter: classes, impls and namespaces become parent
    nodes whose children are their methods and the blocks between them; a definition too
    long for one chunk becomes a parent of line windows. Markdown and RST split by
    headings. Other text becomes line windows. Every node's text is exactly lines
    `start_line..end_line` (1-based, inclusive) of its file, and chunks are sized in the
    embedding model's own tokens so nothing is truncated at embedding time.

    Examples:
        >>> from llama_index.core import Document
        >>> sp = CodeHierarchySplitter(tokenizer_path=default_tokenizer_path())   # doctest: +SKIP
        >>> nodes = sp([Document(text="def f():\\n    return 1\\n", id_="a.py",
        ...                      metadata={"file_path": "a.py", "language": "python"})])  # doctest: +SKIP
        >>> nodes[0].metadata["symbol"], nodes[0].metadata["start_line"], nodes[0].metadata["end_line"]  # doctest: +SKIP
        ('f', 1, 2)
    """

    tokenizer_path: str = Field(description="tokenizer.json of the embedding model; chunks are counted in its tokens.")
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, gt=8, description="Most tokens of source text in one leaf.")
    overlap_lines: int = Field(default=DEFAULT_OVERLAP_LINES, ge=0, description="Lines shared by neighbouring windows.")
    signatures_only_bytes: int = Field(default=DEFAULT_SIGNATURES_ONLY_BYTES, gt=0,
                                       description="Files larger than this keep only their signatures.")
    signatures_only_lines: int = Field(default=DEFAULT_SIGNATURES_ONLY_LINES, gt=0,
                                       description="Files with more lines than this keep only their signatures.")

    _counter: TokenCounter = PrivateAttr()
    _parsers: dict = PrivateAttr(default_factory=dict)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("include_prev_next_rel", False)
        super().__init__(**kwargs)
        self._counter = TokenCounter(self.tokenizer_path)
        self._parsers = {}

    @classmethod
    def class_name(cls) -> str:
        return "CodeHierarchySplitter"

    def _parser(self, language: str):
        if language not in self._parsers:
            # Imported here: the grammars are only needed when a file is actually split.
            from tree_sitter_language_pack import get_parser
            try:
                self._parsers[language] = get_parser(language) if language in GRAMMARS else None
            except LookupError:
                self._parsers[language] = None
        return self._parsers[language]

    def split_document(self, doc: Document) -> list[BaseNode]:
        """All nodes of one document, parents before their children, in line order."""
        text = doc.get_content()
        lines = text.split("\n")
        if lines and lines[-1] == "" and len(lines) > 1:
            lines.pop()  # a trailing newline ends the last line, it does not start a new one
        tokens = self._counter.line_counts(lines)
        fs = _FileSplit(self, doc, lines, tokens)
        language = doc.metadata.get(LANGUAGE_KEY, "text")
        fs.signatures_only = (len(text.encode("utf-8")) > self.signatures_only_bytes
                              or len(lines) > self.signatures_only_lines)
        n = len(lines)
        if language in MARKUP_LANGUAGES:
            items, sep = markup_outline(language, lines), " > "
        else:
            items, sep = code_outline(language, text, lines, self._parser(language)), "."
        if fs.signatures_only:
            if items:
                for it in items:
                    fs.item(it, "", None, sep)
            return fs.link()  # a huge file without an outline keeps nothing but its manifest entry
        if not items:
            if fs.count(1, n) <= self.max_tokens:
                fs.gap(1, n, "", None)
                if fs.nodes:
                    fs.nodes[0].metadata[KIND_KEY] = "file"
            else:
                fs.windows(1, n, "window", "", None, overlap=self.overlap_lines)
            return fs.link()
        fs.region(items, 1, n, "", None, sep)
        return fs.link()

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        out: list[BaseNode] = []
        for doc in nodes:
            out.extend(self.split_document(doc))  # type: ignore[arg-type]
        return out

    def _postprocess_parsed_nodes(self, nodes: list[BaseNode], parent_doc_map: dict) -> list[BaseNode]:
        # The base class re-derives char offsets with str.find, which lands on the wrong copy of a
        # repeated chunk; ours come from line offsets and are exact.
        return nodes
