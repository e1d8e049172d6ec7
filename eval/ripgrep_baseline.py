"""The ripgrep baseline: what an agent's Grep tool returns for a query, as ranked results and a payload.

The query's identifier-like and content words (stop words dropped) become case-insensitive
regexes; ``rg`` lists every matching line; files are ranked by how many matches they hold
(ties by path); the payload is the first ``max_lines`` matching lines in that order, as
``path:line:text`` (Grep's content mode), and costs what the agent's tokenizer says.

The agent's cost of finding the answer this way is modelled by :func:`read_whole_files`: after the grep,
the agent reads the matching files whole, in ripgrep's order, until it meets a gold line (the figure peers
publish as "grep-and-read" tokens); `coderag eval` reports it as the ripgrep variant's tokens to gold.

Examples:
    >>> query_terms("Where does click split env var values for nargs=2?")
    ['click', 'split', 'env', 'var', 'values', 'nargs']
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from coderag.eval.metrics import Result

DEFAULT_MAX_LINES = 250
# Claude Code's Grep passes the same cap: a minified line must not swallow the budget.
DEFAULT_MAX_COLUMNS = 500
MIN_WORD_CHARS = 3
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

STOP_WORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being below
between both but by can cannot could did do does doing done don't down during each either else even ever every
few for from further get gets getting give given gives go goes going got had has have having he her here hers
him his how however i if in into is isn't it its itself just least less let like made make makes many may me
might more most much must my need needs never no nor not now of off often on once one only or other our out
over own per please put rather really same see seem seems shall she should since so some still such than that
the their them then there these they thing things this those though through thus to too try trying under until
up upon us use used uses using very via want wants was way we well were what whatever when where whether which
while who whom whose why will with within without would yet you your yours e.g i.e etc instead able already
always another anything around back called come comes expected happen happens keep kind know look looks
mean means nothing right says something tell told work works
""".split())


def query_terms(query: str) -> list[str]:
    """Identifier-like and content words of `query`, stop words and very short words dropped, deduplicated."""
    out: list[str] = []
    seen: set[str] = set()
    for w in _WORD_RE.findall(query):
        low = w.lower()
        identifier_like = "_" in w.strip("_") or (w[1:] != w[1:].lower()) or any(c.isdigit() for c in w)
        if low in STOP_WORDS or (len(w) < MIN_WORD_CHARS and not identifier_like):
            continue
        if low not in seen:
            seen.add(low)
            out.append(w)
    return out


def find_rg() -> str:
    """The `rg` binary: next to this Python (the PyPI `ripgrep` wheel installs it there), else on PATH."""
    here = Path(sys.executable).parent / ("rg.exe" if os.name == "nt" else "rg")
    if here.is_file():
        return str(here)
    found = shutil.which("rg")
    if found:
        return found
    raise FileNotFoundError(
        "ripgrep (rg) is not installed: the 'ripgrep' eval variant needs it. "
        'Install it with: pip install "ripgrep==14.1.0" (or apt-get install -y ripgrep), or drop ripgrep from --variants.')


@dataclass
class GrepAnswer:
    """The baseline's answer to one query."""

    terms: list[str]
    ranked: list[Result]  # one Result per file, spans = its matching lines, best file first
    payload: str  # the first max_lines matching lines, as path:line:text
    payload_results: list[Result]  # the lines in the payload, grouped per file
    latency_ms: float
    matches: dict[str, int] = field(default_factory=dict)


def grep(query: str, root: str | os.PathLike, max_lines: int = DEFAULT_MAX_LINES, rg: str | None = None,
         timeout_s: float = 60.0) -> GrepAnswer:
    """Run ripgrep for `query` over `root` the way an agent's Grep tool would."""
    t0 = time.perf_counter()
    terms = query_terms(query)
    if not terms:
        return GrepAnswer(terms, [], "", [], (time.perf_counter() - t0) * 1000)
    cmd = [rg or find_rg(), "--ignore-case", "--line-number", "--with-filename", "--no-heading", "--color=never",
           "--null", f"--max-columns={DEFAULT_MAX_COLUMNS}", "--max-columns-preview"]
    for t in terms:
        cmd += ["-e", re.escape(t)]
    cmd += ["--", "."]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, timeout=timeout_s)
    if proc.returncode not in (0, 1):  # 1 = no match
        raise RuntimeError(f"rg failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    lines: dict[str, list[tuple[int, str]]] = {}
    matches: dict[str, int] = {}
    for raw in proc.stdout.decode("utf-8", errors="replace").splitlines():
        path, sep, rest = raw.partition("\0")  # --null: no path can be confused with a line number
        num, sep2, text = rest.partition(":")
        if not (sep and sep2 and num.isdigit()):
            continue
        path = path[2:] if path.startswith("./") else path
        lines.setdefault(path, []).append((int(num), text))
        matches[path] = matches.get(path, 0) + max(1, len(pattern.findall(text)))
    order = sorted(lines, key=lambda p: (-matches[p], p))
    ranked = [Result(p, tuple((n, n) for n, _ in lines[p])) for p in order]
    shown: list[str] = []
    payload_results: list[Result] = []
    for p in order:
        if len(shown) >= max_lines:
            break
        take = lines[p][: max_lines - len(shown)]
        shown.extend(f"{p}:{n}:{t}" for n, t in take)
        payload_results.append(Result(p, tuple((n, n) for n, _ in take)))
    return GrepAnswer(terms, ranked, "\n".join(shown), payload_results, (time.perf_counter() - t0) * 1000, matches)


def read_whole_files(root: str | os.PathLike, ranked: list[Result]) -> Iterator[tuple[Result, str]]:
    """Each file of a grep's ranking, read whole, in its order: (the file as one block, its text). A file that
    cannot be read any more is passed over, as the agent's Read would fail on it.

    With `coderag.eval.metrics.tokens_to_gold`, the tokens an agent reads after grepping until the first gold
    line: every earlier file whole, then the gold file down to that line.
    """
    for r in ranked:
        try:
            text = (Path(root) / r.file_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        yield Result.block(r.file_path, 1, max(text.count("\n") + (not text.endswith("\n")), 1)), text
