"""Associations between the words developers describe changes in and the terms of the code they changed,
learned from mined (description, changed lines) pairs: a thesaurus from the words of a question to the words of
code, such as prefix -> startswith, case -> insensitive, cache -> lru, timeout -> timer.

For a word w of descriptions and a term t of code (t != w), the association is log(lift) x n / (n + MIN_PAIRS),
where n is the number of pairs that hold both and lift is how much more often that is than chance. It is kept
when n >= MIN_PAIRS, lift >= MIN_LIFT and the pair is seen in `min_repos` repositories, so that what one project
calls a thing does not pass for a synonym. Code terms are the parts of identifiers (MAX_TERM_CHARS), words are
stemmed as the index stems them (nodes/lexical.py `code_terms`).

The pairs are the commit and test queries that eval/history.py `mine` writes (``<owner>+<name>.jsonl``, one file a
repository), read against the repository's snapshot (eval/ranker_data.py `snapshot_folder`). eval/file_probe.py
probes the associations as evidence (``--evidence translation``); eval/RESULTS.md says what they gave.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Set, Tuple

from coderag.nodes.lexical import STOP_WORDS, code_terms

MIN_PAIRS = 5  # an association seen in fewer (description, change) pairs is chance
MIN_LIFT = 2.0  # ... or one that co-occurs less than twice as often as the two terms' frequencies say
MAX_TERM_CHARS = 12  # the parts of identifiers, not whole compound names (one project's words)
CONTEXT_LINES = 3  # lines around a change's lines read with them


def query_words(text: str) -> Set[str]:
    """A description's or a question's words: stemmed, stop words, numbers and words of two letters left out."""
    return {t for t in code_terms(text) if t not in STOP_WORDS and len(t) > 2 and not t.isdigit()}


def code_words(text: str) -> Set[str]:
    """Code's terms: the parts of its identifiers (stemmed), not whole compound names, numbers or short tokens."""
    return {t for t in code_terms(text) if 2 < len(t) <= MAX_TERM_CHARS and "_" not in t and not t.isdigit()}


class TermTranslation:
    """The associations of (description words, code terms, repository) `pairs`, as the module defines them:
    `table[w][t]` is the association of description word w with code term t.

    >>> cache, parse = query_words("the cache"), query_words("parse")  # stemmed as the index stems
    >>> pairs = [(cache, code_words("lru.get()"), repo) for repo in "abcd" for _ in range(3)]
    >>> pairs += [(parse, code_words("token.get()"), repo) for repo in "abcd" for _ in range(3)]
    >>> t = TermTranslation(pairs, min_repos=4)
    >>> [sorted(t.table[w]) for w in (*cache, *parse)]
    [['lru'], ['token']]
    >>> t.score("the cache", "x = lru(y)") > 0.0, t.score("the cache", "cache = lru(y)")
    (True, 0.0)
    """

    def __init__(self, pairs: Iterable[Tuple[Set[str], Set[str], str]], min_repos: int = 4) -> None:
        n = 0
        words, terms, both = Counter(), Counter(), Counter()
        repos: Dict[Tuple[str, str], Set[str]] = defaultdict(set)
        for q, d, repo in pairs:
            n += 1
            words.update(q)
            terms.update(d)
            for w in q:
                for t in d:
                    if t != w:
                        both[(w, t)] += 1
                        repos[(w, t)].add(repo)
        self.table: Dict[str, Dict[str, float]] = defaultdict(dict)
        for (w, t), count in both.items():
            lift = count * n / (words[w] * terms[t])
            if count >= MIN_PAIRS and lift >= MIN_LIFT and len(repos[(w, t)]) >= min_repos:
                self.table[w][t] = math.log(lift) * count / (count + MIN_PAIRS)

    def score(self, query: str, text: str) -> float:
        """The mean over the query's words that `text` lacks of their strongest association among its terms
        (0 for a word it holds), over all the query's words."""
        q, d = query_words(query), code_words(text)
        total = 0.0
        for w in q:
            assoc = self.table.get(w)
            if assoc and w not in d:
                total += max((assoc[t] for t in d if t in assoc), default=0.0)
        return total / len(q) if q else 0.0


def mined_pairs(mined: Path, snapshots: Path, leave_out: Sequence[str] = ()
                ) -> Iterator[Tuple[Set[str], Set[str], str]]:
    """(query words, code terms of the changed lines with CONTEXT_LINES around them, repository) of every mined
    query in `mined` but those of the files whose name holds one of `leave_out`, read against the repository's
    snapshot under `snapshots`."""
    from coderag.eval.datasets import file_lines
    from coderag.eval.ranker_data import snapshot_folder

    for path in sorted(mined.glob("*.jsonl")):
        if any(name in path.name for name in leave_out):
            continue
        repo = path.stem.replace("+", "/", 1)
        folder = snapshot_folder(snapshots, repo)
        lines_of: Dict[str, List[str]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            parts = []
            for g in rec["gold"]:
                if g["file_path"] not in lines_of:  # numbered as the snapshot's gold lines are (`file_lines`)
                    source = folder / g["file_path"]
                    lines_of[g["file_path"]] = file_lines(source) if source.is_file() else []
                lines = lines_of[g["file_path"]]
                start, end = g.get("start_line") or 1, g.get("end_line") or len(lines)
                parts.append("\n".join(lines[max(0, start - 1 - CONTEXT_LINES):end + CONTEXT_LINES]))
            q, d = query_words(rec["query"]), code_words("\n".join(parts))
            if q and d:
                yield q, d, repo
