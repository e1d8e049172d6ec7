"""Code splitter: AST (or heading) hierarchy of parent and child nodes with exact line ranges."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, NodeRelationship, RelatedNodeInfo, TextNode

from coderag.nodes.keys import (
    DECLARATION_KEY, EMBED_TRUNCATED_KEY, END_LINE_KEY, FILE_PATH_KEY, IS_LEAF_KEY, KIND_KEY, LANGUAGE_KEY,
    LAST_MODIFIED_KEY, NON_EMBED_KEYS, SIGNATURES_ONLY_KEY, START_LINE_KEY, SYMBOL_KEY, SYMBOLS_KEY,
)
from coderag.nodes.languages import GRAMMARS, MARKUP_LANGUAGES
from coderag.nodes.outline import Item, code_outline, markup_outline
from coderag.nodes.tokens import TokenCounter

DEFAULT_MAX_TOKENS = 200
DEFAULT_MIN_TOKENS = 48
DEFAULT_OVERLAP_LINES = 2
DEFAULT_SIGNATURES_ONLY_BYTES = 1024 * 1024
DEFAULT_SIGNATURES_ONLY_LINES = 20_000
NODE_NAMESPACE = uuid.UUID("5b0f5f0e-7c1a-4f43-9d0c-6f6f64657261")
MERGED_KIND = "group"  # a leaf of several small siblings, at least one of them a definition
MERGED_SYMBOL_NAMES = 3  # definitions a merged leaf's symbol names (all of them are in SYMBOLS_KEY)
# Files that only declare what code elsewhere does: Python stubs, TypeScript declaration files.
STUB_SUFFIXES = (".pyi", ".d.ts", ".d.mts", ".d.cts")


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


@dataclass
class _Piece:
    """A sibling in a region: a definition (`item`) or the block of lines between two (`item` None)."""

    start: int
    end: int
    item: Item | None
    tokens: int


def _definitions(it: Item, prefix: str, sep: str) -> list[str]:
    """The symbols of a definition and of every definition inside it, in line order."""
    symbol = f"{prefix}{sep}{it.name}" if prefix else it.name
    return [symbol] + [n for child in it.children for n in _definitions(child, symbol, sep)]


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
        self.cumulative = [0, *accumulate(tokens)]  # tokens of lines 1..i: a span's count in O(1)
        self.signatures_only = False
        self.stub = self.path.endswith(STUB_SUFFIXES)

    def count(self, start: int, end: int) -> int:
        return self.cumulative[end] - self.cumulative[start - 1]

    def make(self, start: int, end: int, kind: str, symbol: str, parent: TextNode | None, declaration: bool = False,
             **extra: Any) -> TextNode:
        """A node of lines start..end. `declaration`: it only declares (outline.Item.declares_only), as does
        every node of a stub file; the fusion weighs such code less for a question about behaviour."""
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
        if declaration or self.stub:
            meta[DECLARATION_KEY] = True
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

    def windows(self, start: int, end: int, kind: str, symbol: str, parent: TextNode | None, overlap: int,
                declaration: bool = False) -> None:
        """Line windows of at most max_tokens each. Neighbours share up to `overlap` lines: as many as fit
        beside the first line the previous window did not hold. Where lines are long (prose written one
        paragraph to a line, a table's rows) fewer fit, so every window holds a line its neighbour does not,
        and none is a copy of part of the one before."""
        limit = self.sp.max_tokens
        s = start
        while s <= end:
            e, total = s, self.tokens[s - 1]
            while e < end and total + self.tokens[e] <= limit:
                e += 1
                total += self.tokens[e - 1]
            extra = {EMBED_TRUNCATED_KEY: True} if total > limit else {}
            self.make(s, e, kind, symbol, parent, declaration, **extra)
            if e >= end:
                break
            first_new, lowest = e + 1, max(e + 1 - overlap, s + 1)
            s, held = first_new, self.tokens[first_new - 1]
            while s > lowest and held + self.tokens[s - 2] <= limit:
                s -= 1
                held += self.tokens[s - 1]

    def trim(self, start: int, end: int) -> tuple[int, int]:
        """The lines start..end without leading and trailing filler (start > end: nothing but filler)."""
        while start <= end and _is_filler(self.lines[start - 1]):
            start += 1
        while end >= start and _is_filler(self.lines[end - 1]):
            end -= 1
        return start, end

    def gap(self, start: int, end: int, symbol: str, parent: TextNode | None) -> None:
        start, end = self.trim(start, end)
        if start <= end:
            self.windows(start, end, "block", symbol, parent, overlap=0)

    def pieces(self, items: list[Item], start: int, end: int) -> list[_Piece]:
        """The items of a region and the non-filler blocks between them, in line order."""
        out: list[_Piece] = []

        def gap(s: int, e: int) -> None:
            s, e = self.trim(s, e)
            while s <= e:  # a block longer than max_tokens: its window-sized parts, so a small tail can merge
                cut = s
                while cut < e and self.count(s, cut + 1) <= self.sp.max_tokens:
                    cut += 1
                out.append(_Piece(s, cut, None, self.count(s, cut)))
                s = cut + 1

        cursor = start
        for it in items:
            if it.start > cursor:
                gap(cursor, it.start - 1)
            out.append(_Piece(it.start, it.end, it, self.count(it.start, it.end)))
            cursor = it.end + 1
        if cursor <= end:
            gap(cursor, end)
        return out

    def small(self, p: _Piece) -> bool:
        """Below the floor: one leaf too small to embed and rank well on its own."""
        return p.tokens < self.sp.min_tokens

    def groups(self, pieces: list[_Piece]) -> list[list[_Piece]]:
        """Runs of consecutive small pieces packed into groups until each reaches `min_tokens` (never past
        `max_tokens`, counted over the lines between them too); every other piece is a group of its own."""
        out: list[list[_Piece]] = []
        cur: list[_Piece] | None = None  # the open group of small pieces
        for p in pieces:
            if not self.small(p):
                out.append([p])
                cur = None
            elif cur is not None and self.count(cur[0].start, cur[-1].end) < self.sp.min_tokens \
                    and self.count(cur[0].start, p.end) <= self.sp.max_tokens:
                cur.append(p)
            else:
                cur = [p]
                out.append(cur)
        return self._fold_tails(out)

    def _fold_tails(self, groups: list[list[_Piece]]) -> list[list[_Piece]]:
        """A group of small pieces still below the floor joins the small group before it, if they fit."""
        out: list[list[_Piece]] = []
        for g in groups:
            prev = out[-1] if out else None
            if prev is not None and all(self.small(p) for p in prev + g) \
                    and self.count(g[0].start, g[-1].end) < self.sp.min_tokens \
                    and self.count(prev[0].start, g[-1].end) <= self.sp.max_tokens:
                prev.extend(g)
            else:
                out.append(g)
        return out

    def region(self, items: list[Item], start: int, end: int, prefix: str, parent: TextNode | None, sep: str) -> None:
        if self.sp.min_tokens <= 0:
            cursor = start
            for it in items:
                if it.start > cursor:
                    self.gap(cursor, it.start - 1, prefix, parent)
                self.item(it, prefix, parent, sep)
                cursor = it.end + 1
            if cursor <= end:
                self.gap(cursor, end, prefix, parent)
            return
        for group in self.groups(self.pieces(items, start, end)):
            if len(group) > 1:
                self.merged(group, prefix, parent, sep)
            elif group[0].item is None:  # already trimmed: a part of a long block may end on filler
                self.windows(group[0].start, group[0].end, "block", prefix, parent, overlap=0)
            else:
                self.item(group[0].item, prefix, parent, sep, whole=self.small(group[0]))

    def merged(self, group: list[_Piece], prefix: str, parent: TextNode | None, sep: str) -> None:
        """One leaf of several small siblings (blocks alternate with definitions, so a group holds at least
        one definition). Its symbol names what it defines: its first three definitions, and "..." if there
        are more. `symbols` lists them all, nested ones too, and the enclosing symbol if a block of it is
        inside, so "where is X defined" still finds X (coderag/queries/symbols.py)."""
        # Each name once: TypeScript overload signatures are definitions of one name.
        defined = list(dict.fromkeys(n for p in group if p.item is not None for n in _definitions(p.item, prefix, sep)))
        symbol = ", ".join(defined[:MERGED_SYMBOL_NAMES]) + (", ..." if len(defined) > MERGED_SYMBOL_NAMES else "")
        # A block between definitions belongs to the enclosing one (a class's head, its fields), as a block
        # of its own was named after it: "where is the class defined" still finds the leaf of its head.
        names = ([prefix] if prefix and any(p.item is None for p in group) else []) + defined
        declaration = all(p.item is not None and p.item.declares_only for p in group)
        self.make(group[0].start, group[-1].end, MERGED_KIND, symbol, parent, declaration, **{SYMBOLS_KEY: names})

    def item(self, it: Item, prefix: str, parent: TextNode | None, sep: str, whole: bool = False) -> None:
        """The nodes of one definition; `whole`: one leaf, nested definitions listed in `symbols`."""
        symbol = f"{prefix}{sep}{it.name}" if prefix else it.name
        if self.signatures_only:
            self.windows(it.start, it.head_end, "signature", symbol, None, overlap=0)
            for child in it.children:
                self.item(child, symbol, None, sep)
            return
        fits = self.count(it.start, it.end) <= self.sp.max_tokens
        if fits and it.container and it.children and self.sp.min_tokens > 0:
            # A container whose members would all merge into one leaf is that leaf: a parent over a
            # single child of the same lines is a second copy for auto-merging and nothing else.
            groups = self.groups(self.pieces(it.children, it.start, it.end))
            whole = whole or (len(groups) == 1 and len(groups[0]) > 1)
        declaration = it.declares_only
        if whole:
            names = _definitions(it, prefix, sep)
            extra = {SYMBOLS_KEY: names} if len(names) > 1 else {}
            self.make(it.start, it.end, it.kind, symbol, parent, declaration, **extra)
        elif (it.container and it.children) or not fits:
            node = self.make(it.start, it.end, it.kind, symbol, parent, declaration)
            if it.children:
                self.region(it.children, it.start, it.end, symbol, node, sep)
            else:
                self.windows(it.start, it.end, "window", symbol, node, self.sp.overlap_lines, declaration)
        else:
            self.make(it.start, it.end, it.kind, symbol, parent, declaration)

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

    Siblings below `min_tokens` (imports, constants, one-line fields, accessors, short
    functions) are merged with their small neighbours into one leaf of the same parent
    (kind "group", every definition inside listed in `symbols`), so that each leaf carries
    enough context to embed and rank; a definition of `min_tokens` or more keeps its own
    chunk and symbol, and a container whose members would all merge is one leaf.

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
    min_tokens: int = Field(default=DEFAULT_MIN_TOKENS, ge=0,
                            description="Consecutive small siblings (imports, fields, accessors, short functions) "
                                        "are merged into leaves of at least this many tokens; 0: never merged.")
    overlap_lines: int = Field(default=DEFAULT_OVERLAP_LINES, ge=0, description="Lines shared by neighbouring windows.")
    signatures_only_bytes: int = Field(default=DEFAULT_SIGNATURES_ONLY_BYTES, gt=0,
                                       description="Files larger than this keep only their signatures.")
    signatures_only_lines: int = Field(default=DEFAULT_SIGNATURES_ONLY_LINES, gt=0,
                                       description="Files with more lines than this keep only their signatures.")

    _counter: TokenCounter = PrivateAttr()
    _parsers: dict = PrivateAttr(default_factory=dict)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("include_prev_next_rel", False)
        # The default floor follows a smaller ceiling; a floor asked above the ceiling is an error.
        kwargs.setdefault("min_tokens", min(DEFAULT_MIN_TOKENS, kwargs.get("max_tokens", DEFAULT_MAX_TOKENS)))
        super().__init__(**kwargs)
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens}): "
                             "a merged chunk is never larger than one chunk may be.")
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
