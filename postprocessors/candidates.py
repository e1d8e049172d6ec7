"""CandidatePostprocessor: the next distinct places after the full blocks, shown as one line each.

When the ranking is unsure, an agent is better served by ten places it can open than by three long blocks:
the payload shows the best blocks in full, then the next candidates compactly (path, lines, symbol, the
definition's first line), each with an id that expand_result takes. A candidate is one indexed node (a
chunk or an auto-merged parent), its line from the node's stored text: no file is read for it, except while
an ingestion in another thread may be rewriting the store (then its first lines are checked on disk).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from coderag.nodes.keys import END_LINE_KEY, FILE_PATH_KEY, LANGUAGE_KEY, START_LINE_KEY, SYMBOL_KEY
from coderag.postprocessors.payload import Candidate
from coderag.postprocessors.token_budget import FULL_END_LINE_KEY

DEFAULT_MAX_CANDIDATES = 10
DEFAULT_PER_FILE = 2
# The ratios that say which places are worth a line and when the ranking is unsure depend on the scale of
# the scores: the caller gives them (pipelines/fusion.py `payload_cuts`, one set per scale).
# Share of the budget (after the frame) kept for candidate lines when scores are flat.
DEFAULT_FLAT_SHARE = 0.25
SIGNATURE_CHARS = 120
SCAN_LINES = 40  # lines of a node looked at for its signature (a long decorator comes first)
CHECK_LINES = 4  # lines of a node compared with the file when its file was not just found unchanged
JOIN_LINES = 4  # lines of a signature whose parentheses are still open joined into one
_PROSE = {"markdown", "rst", "text", ""}
_COMMENTS = ("//", "/*", "*", "<!--", "--", ";;")
_UNDERLINE = set("=-~^*#`'\"+_:. ")

# check(path, start, first_lines) -> whether the file's lines start..start+k-1 are still first_lines
CheckFn = Callable[[str, int, list[str]], bool]


def candidate_id(path: str, start: int, end: int) -> str:
    """The id of a candidate: its location, which expand_result parses (and an owner restart keeps)."""
    return f"{path}:{start}-{end}"


def _skipped(line: str, language: str, symbol: str = "") -> bool:
    """A line before a definition that does not name it: a decorator, an annotation, an attribute, a comment;
    in prose, a heading the symbol already names, or a heading's underline."""
    if language in _PROSE:
        if set(line) <= _UNDERLINE:
            return True  # an RST underline or overline (or a rule)
        heading = line.lstrip("#").strip()
        return bool(heading) and bool(symbol) and symbol.rsplit(" > ", 1)[-1].strip() == heading
    if line.startswith("@") or line.startswith(("#[", "#![")):
        return True
    if line.startswith(_COMMENTS) and not line.startswith(("*=", "**")):
        return True
    return line.startswith("#") and not line.startswith(("#include", "#define"))


def signature_line(text: str, language: str = "", symbol: str = "") -> str:
    """The line a candidate is shown by: its definition's signature (after decorators, annotations and
    comments; an open parameter list joined with the lines that close it), else its first non-blank line.

    Examples:
        >>> signature_line('@app.route("/")\\ndef index(\\n    request,\\n):\\n    return 1', "python")
        'def index( request, ):'
        >>> signature_line("\\n\\n## Install\\n\\nRun it.", "markdown")
        '## Install'
        >>> signature_line("## Install\\n\\nRun it.", "markdown", "Tiny > Install")
        'Run it.'
    """
    lines = [ln.strip().replace("\r", "") for ln in text.split("\n", SCAN_LINES)[:SCAN_LINES]]
    filled = [i for i, ln in enumerate(lines) if ln]
    if not filled:
        return ""
    first, depth = None, 0
    for i in filled:
        ln = lines[i]
        if depth > 0 or _skipped(ln, language, symbol):  # a decorator's arguments go with it
            depth = max(0, depth + ln.count("(") - ln.count(")"))
            continue
        first = i
        break
    if first is None:  # nothing but decorators and comments in sight: the first of them
        return _cut(lines[filled[0]])
    parts = [lines[first]]
    depth = lines[first].count("(") - lines[first].count(")")
    for ln in lines[first + 1:first + JOIN_LINES]:
        if depth <= 0 or sum(map(len, parts)) > SIGNATURE_CHARS:
            break
        if ln:
            parts.append(ln)
            depth += ln.count("(") - ln.count(")")
    return _cut(" ".join(parts))


def _cut(line: str) -> str:
    return line if len(line) <= SIGNATURE_CHARS else line[:SIGNATURE_CHARS - 1] + "…"


def is_flat(blocks: Iterable[NodeWithScore], ratio: float) -> bool:
    """True when the best block of the second-best file scores at least `ratio` x the best block."""
    best: dict[str, float] = {}
    for n in blocks:
        path = n.node.metadata[FILE_PATH_KEY]
        best[path] = max(best.get(path, float("-inf")), n.get_score())
    top = sorted(best.values(), reverse=True)
    return len(top) >= 2 and top[0] > 0 and top[1] >= ratio * top[0]


def to_candidate(n: NodeWithScore) -> Candidate:
    m = n.node.metadata
    path, start, end = m[FILE_PATH_KEY], int(m[START_LINE_KEY]), int(m[END_LINE_KEY])
    return Candidate(id=candidate_id(path, start, end), file_path=path, start_line=start, end_line=end,
                     symbol=m.get(SYMBOL_KEY, "") or "", score=round(float(n.get_score()), 6),
                     signature=signature_line(n.node.get_content(), m.get(LANGUAGE_KEY, "") or "",
                                             m.get(SYMBOL_KEY, "") or ""))


def fit(candidates: list[Candidate], price: Callable[[Candidate], int], left: int, wrapper: int) -> list[Candidate]:
    """The candidates, best first, whose lines (and the section around them) fit in `left` tokens."""
    out, used = [], wrapper
    for c in candidates:
        cost = price(c)
        if used + cost <= left:
            out.append(c)
            used += cost
    return out


class CandidatePostprocessor(BaseNodePostprocessor):
    """From the retrieved nodes, the best `max_candidates` distinct places not shown in full.

    A node is left out when it overlaps a shown block (`shown`: path, start, end, the whole range of a cut
    block) or a better candidate, when its file already has `per_file` candidates, when it scores below
    `floor_ratio` x the best retrieved score, when its file is stale or gone (`skip_files`: its stored lines
    may no longer be the file's), or when `check` (given for files not just found unchanged) says its first
    lines moved. Nodes come out best first.
    """

    max_candidates: int = Field(default=DEFAULT_MAX_CANDIDATES, ge=0, description="Lines at most.")
    per_file: int = Field(default=DEFAULT_PER_FILE, ge=1, description="Candidates of one file at most.")
    floor_ratio: float = Field(ge=0.0, le=1.0, description="Nodes below this x the best score are never listed.")

    _shown: dict = PrivateAttr(default_factory=dict)  # path -> [(start, end)]
    _skip: frozenset = PrivateAttr(default=frozenset())
    _unchanged: frozenset = PrivateAttr(default=frozenset())
    _check: Optional[CheckFn] = PrivateAttr(default=None)

    def __init__(self, shown: Iterable[tuple[str, int, int]] = (), skip_files: Iterable[str] = (),
                 unchanged_files: Iterable[str] = (), check: Optional[CheckFn] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.show(shown)
        self._skip, self._unchanged, self._check = frozenset(skip_files), frozenset(unchanged_files), check

    @classmethod
    def class_name(cls) -> str:
        return "CandidatePostprocessor"

    def show(self, shown: Iterable[tuple[str, int, int]]) -> None:
        """The blocks shown in full (path, start, end), which no candidate may overlap."""
        self._shown = {}
        for path, start, end in shown:
            self._shown.setdefault(path, []).append((start, end))

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        nodes = sorted(nodes, key=lambda n: n.get_score(), reverse=True)
        if not nodes or not self.max_candidates:
            return []
        floor = nodes[0].get_score() * self.floor_ratio
        # Locals: a pydantic model's private attributes are looked up through __getattr__.
        most, per_file_most, skip, unchanged = self.max_candidates, self.per_file, self._skip, self._unchanged
        taken = {p: list(spans) for p, spans in self._shown.items()}
        per_file: dict[str, int] = {}
        out: list[NodeWithScore] = []
        for n in nodes:
            if len(out) >= most or n.get_score() < floor:
                break
            m = n.node.metadata
            path, start, end = m[FILE_PATH_KEY], int(m[START_LINE_KEY]), int(m[END_LINE_KEY])
            if path in skip or per_file.get(path, 0) >= per_file_most:
                continue
            if any(s <= end and start <= e for s, e in taken.get(path, ())):
                continue
            if path not in unchanged and not self._still_there(n, path, start):
                continue
            out.append(n)
            taken.setdefault(path, []).append((start, end))
            per_file[path] = per_file.get(path, 0) + 1
        return out

    def _still_there(self, n: NodeWithScore, path: str, start: int) -> bool:
        if self._check is None:
            return True
        return self._check(path, start, n.node.get_content().split("\n", CHECK_LINES)[:CHECK_LINES])


def lines_check(lines: Any) -> CheckFn:
    """A `check` reading a LineSource: whether a file's lines at `start` are still a node's first lines (for
    files an ingestion in another thread may be rewriting); a slice of the cached file, no split."""
    def check(path: str, start: int, first: list[str]) -> bool:
        got = lines.span(path, start, start + len(first) - 1)
        return got is not None and got[0] == "\n".join(first)
    return check


def shown_spans(packed: Iterable[NodeWithScore]) -> list[tuple[str, int, int]]:
    """(path, start, end) of each packed block; a cut block by its whole range (expand_result shows the rest)."""
    out = []
    for n in packed:
        m = n.node.metadata
        out.append((m[FILE_PATH_KEY], int(m[START_LINE_KEY]), int(m.get(FULL_END_LINE_KEY) or m[END_LINE_KEY])))
    return out


def pack_with_candidates(run: Callable, packer: Any, blocks: list[NodeWithScore], pool: list[NodeWithScore],
                         picker: CandidatePostprocessor, price: Callable[[Candidate], int], wrapper: int,
                         flat_ratio: float, flat_share: float = DEFAULT_FLAT_SHARE
                         ) -> tuple[list[NodeWithScore], list[Candidate]]:
    """The blocks `packer` (a TokenBudgetPostprocessor) fits, then candidate lines from `pool` in what it
    leaves, all within its budget. When scores are flat (`is_flat`) up to `flat_share` of the budget is kept
    for candidates, so they are listed even where the blocks would fill it, unless the best block would then
    not fit (not even cut). `run(postprocessor, nodes)` runs a postprocessor; `price(c)` is a line's tokens,
    `wrapper` the section's around them."""
    made: dict[int, Candidate] = {}

    def candidates(shown: list[NodeWithScore]) -> list[Candidate]:
        picker.show(shown_spans(shown))
        out = []
        for n in run(picker, pool):
            if id(n) not in made:
                made[id(n)] = to_candidate(n)
            out.append(made[id(n)])
        return out

    if not picker.max_candidates:
        return run(packer, blocks), []
    best = max(blocks, key=lambda n: n.get_score()) if blocks else None  # the packer's first, if it fits
    if flat_share > 0 and best is not None and is_flat(blocks, flat_ratio):
        # Sized on the places outside the best block, the one block sure to be shown: when the flat places
        # are the blocks themselves (twelve handlers of one shape), most will not fit as blocks, and they
        # are the candidates the reserve is for. One packing, not two.
        share = int((packer.max_tokens - packer.frame_tokens) * flat_share)
        want = fit(candidates([best]), price, share, wrapper)
        packer.reserve_tokens = wrapper + sum(map(price, want)) if want else 0
    packed = run(packer, blocks)
    if packer.reserve_tokens and best is not None and (not packed or packed[0].node.node_id != best.node.node_id):
        packer.reserve_tokens = 0  # the reserve never takes the place of the best block (whole or cut)
        packed = run(packer, blocks)
    return packed, fit(candidates(packed), price, packer.tokens_left, wrapper)
