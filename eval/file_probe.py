"""A file-level piece of evidence, probed on a saved run before anything is built: does it tell the right file
from the one a search wrongly puts first?

A run saved by ``coderag eval --out DIR`` holds each query's first ten chunks. Their files are the candidates,
in the order the variant gave them. For a score of each candidate file this prints:

- the pairwise odds: where the first file is right and the second wrong, how often the score puts the first
  above the second; where the first file is wrong and a gold file is among the candidates, how often the score
  puts that gold file above the wrong first. Evidence worth a feature wins the second far more often than half
  the time without losing the first;
- "gold first" (the first file is a gold file) with the candidates reordered by ``place - w x (score - best
  score)``, for a few weights w, per corpus.

Four scores are built in:

- ``centroid``: the query's mean cosine to the file's chunks (its dot product with the mean of their unit vectors;
  every chunk of the file in the index, not only the candidates): a file about one thing against a grab-bag of
  helpers;
- ``path``: the cosine of the query to the embedded words of the file's path (``ssr/tsrScript.ts`` is
  "ssr tsr script"): what a file is named for, read by the model rather than word for word;
- ``prose``: the cosine of the query to the embedded comments and docstrings alone of the file's best candidate
  chunk: a question is worded in English, as they are, while a chunk's vector is mostly its code's;
- ``translation``: how much of the query a file's best candidate chunk says in other words, by the associations
  of eval/term_translation.py, learned from the mined commit and test queries of the ranker's training
  repositories (eval/README.md).

Command line (a corpus of the run must be fetched and indexed as ``coderag eval`` left it)::

    python -m coderag.eval.file_probe DIR --evidence centroid|path|prose [--variant=full] [--kind=natural]
    python -m coderag.eval.file_probe DIR --evidence translation --mined DIR [--min-repos 4] [--leave-out NAME]...

``--mined`` is a folder of ``<owner>+<name>.jsonl`` query files of ``eval/history.py`` ``mine`` (commit and test
queries), whose snapshots are under $CODERAG_HISTORY_DIR; ``--leave-out`` drops the repositories whose file
name holds NAME (a training repository that is also a corpus of the run, or every repository the run
searches). A run of mined queries (corpus ``history``: eval/tune_commits.py, ``ranker_data.py heldout``) reads
each query's snapshot under $CODERAG_HISTORY_DIR, named by ``--dataset``, the file the run was made from.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from coderag.eval.datasets import file_lines
from coderag.eval.misses import ranked_files
from coderag.eval.report import RESULTS_NAME
from coderag.eval.term_translation import TermTranslation, mined_pairs

WEIGHTS = (0.0, 2.0, 5.0, 10.0, 20.0)
PROSE_CHARS = 1000  # the model reads 256 tokens: more prose than this is not read
_COMMENT = re.compile(r"^(?:#|//|/\*|\*|--)")
_MARKERS = re.compile(r"^(?:#+|//+|/\*+|\*+/?|--)\s?")


@dataclass
class Candidates:
    """One query of a run: its gold files and its candidate files in the variant's order, each with the spans
    of its candidate chunks. `corpus` is a corpus of eval/corpora.py or, for a mined query, the folder name of
    its repository's snapshot under $CODERAG_HISTORY_DIR (eval/snapshots.py `snapshot_name`)."""

    id: str
    corpus: str
    query: str
    gold: Set[str]
    files: Dict[str, List[Tuple[int, int]]] = field(default_factory=dict)

    @property
    def order(self) -> List[str]:
        return list(self.files)


def read_candidates(queries: Sequence[dict], variant: str = "full", kind: Optional[str] = "natural",
                    corpus_of: Optional[Dict[str, str]] = None) -> List[Candidates]:
    """The candidates of a run's `queries` of `kind` (None: all) under `variant`; `corpus_of` names the corpus of
    a query by its id where the run's own name does not say which tree it searched (a mined query's snapshot)."""
    out = []
    for q in queries:
        outcome = q["outcomes"].get(variant)
        if outcome is None or (kind and q["kind"] != kind):
            continue
        corpus = (corpus_of or {}).get(q["id"], q["corpus"])
        c = Candidates(q["id"], corpus, q["query"], set(ranked_files(q["gold"])))
        for span in outcome["ranked"]:
            path, lines = span.rsplit(":", 1)
            start, end = lines.split("-")
            c.files.setdefault(path, []).append((int(start), int(end)))
        out.append(c)
    return out


def pairwise_odds(cands: Sequence[Candidates], scores: Sequence[Dict[str, float]]) -> Tuple[int, int, int, int]:
    """(right firsts the score keeps above the wrong second, such queries, misses whose gold file the score puts
    above the wrong first, such misses)."""
    kept = hits = lifted = misses = 0
    for c, s in zip(cands, scores):
        order = c.order
        if not order:
            continue
        if order[0] in c.gold:
            if len(order) > 1 and order[1] not in c.gold:
                hits += 1
                kept += s[order[0]] > s[order[1]]
            continue
        gold = next((p for p in order if p in c.gold), None)
        if gold is not None:
            misses += 1
            lifted += s[gold] > s[order[0]]
    return kept, hits, lifted, misses


def reordered_gold_first(cands: Sequence[Candidates], scores: Sequence[Dict[str, float]], weight: float
                 ) -> Tuple[float, Dict[str, float]]:
    """The share of queries whose first file is a gold file ("gold first": R@1 where the gold is one file) when
    each query's candidates are ordered by place - weight x (score - best), over all the queries and per
    corpus. Weight 0 is the run's own order."""
    by_corpus: Dict[str, List[bool]] = defaultdict(list)
    for c, s in zip(cands, scores):
        order = c.order
        best = max((s[p] for p in order), default=0.0)
        first = min(order, key=lambda p: order.index(p) - weight * (s[p] - best)) if order else None
        by_corpus[c.corpus].append(first in c.gold)
    every = [hit for hits in by_corpus.values() for hit in hits]
    return (sum(every) / len(every) if every else 0.0,
            {corpus: sum(hits) / len(hits) for corpus, hits in by_corpus.items()})


def _per_corpus(cands: Sequence[Candidates], root_of: Callable[[str], Path]) -> Iterator[Tuple[Path, Any, list]]:
    """(root, its open index, its candidates) for each corpus of `cands`, one index open at a time."""
    from coderag.pipelines.code_index import CodeIndex

    by_corpus: Dict[str, List[Candidates]] = defaultdict(list)
    for c in cands:
        by_corpus[c.corpus].append(c)
    for corpus, members in by_corpus.items():
        root = root_of(corpus)
        with CodeIndex.open(root, create=False) as index:
            yield root, index, members


def _unit(vector: Sequence[float]) -> Any:
    import numpy as np

    v = np.asarray(vector, dtype=np.float32)
    return v / (np.linalg.norm(v) + 1e-9)


def centroid_scores(cands: Sequence[Candidates], root_of: Callable[[str], Path]) -> List[Dict[str, float]]:
    """Per query: each candidate file's mean cosine to the query, as the dot product of the query's unit vector with
    the mean of the unit vectors of the file's chunks."""
    import numpy as np

    out: Dict[str, Dict[str, float]] = {}
    for _, index, members in _per_corpus(cands, root_of):
        vectors, fields = index.vector_store.dense_vectors()
        v = np.asarray(vectors, dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True) + 1e-9
        rows: Dict[str, List[int]] = defaultdict(list)
        for row, f in enumerate(fields):
            rows[f["file_path"]].append(row)
        centroids = {path: v[r].mean(axis=0) for path, r in rows.items()}
        for c in members:
            q = _unit(index.embed_model.get_query_embedding(c.query))
            out[c.id] = {p: float(centroids[p] @ q) if p in centroids else 0.0 for p in c.files}
    return [out[c.id] for c in cands]


def path_words(path: str) -> str:
    """A file's path as the words it is made of, for the embedding model.

    >>> path_words("ssr/tsrScript.ts"), path_words("src/load_client/index.py")
    ('ssr tsr script', 'src load client index')
    """
    stem = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    return " ".join(re.sub(r"[/_.\-]+", " ", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", stem)).lower().split())


def path_scores(cands: Sequence[Candidates], root_of: Callable[[str], Path]) -> List[Dict[str, float]]:
    """Per query: the cosine of the query's vector to that of each candidate file's path words (`path_words`)."""
    out: Dict[str, Dict[str, float]] = {}
    for _, index, members in _per_corpus(cands, root_of):
        embed = index.embed_model.get_query_embedding
        paths = {p: _unit(embed(path_words(p))) for c in members for p in c.files}
        for c in members:
            q = _unit(embed(c.query))
            out[c.id] = {p: float(paths[p] @ q) for p in c.files}
    return [out[c.id] for c in cands]


def prose_of(text: str) -> str:
    r'''The comments and docstrings of a chunk's text, markers gone, as one line of words.

    >>> prose_of('def f(x):\n    """Strip the prefix.\n\n    Case is ignored."""\n    # then cut it\n    return x')
    'Strip the prefix. Case is ignored. then cut it'
    '''
    out, in_doc = [], False
    for line in text.splitlines():
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if in_doc or quotes or _COMMENT.match(stripped):
            out.append(_MARKERS.sub("", stripped.replace('"""', "").replace("'''", "")))
        if quotes % 2:
            in_doc = not in_doc
    return " ".join(" ".join(out).split())


def prose_scores(cands: Sequence[Candidates], root_of: Callable[[str], Path]) -> List[Dict[str, float]]:
    """Per query: each candidate file's best cosine of the query's vector to the embedded prose (`prose_of`, four
    words or more) of one of its candidate chunks, at least 0 (a file whose candidates have none)."""
    out: Dict[str, Dict[str, float]] = {}
    for root, index, members in _per_corpus(cands, root_of):
        embed = index.embed_model.get_query_embedding
        for c in members:
            q = _unit(embed(c.query))
            out[c.id] = {}
            for path, spans in c.files.items():
                lines = _lines(root / path)
                proses = [prose_of("\n".join(lines[start - 1:end])) for start, end in spans]
                out[c.id][path] = max([0.0] + [float(_unit(embed(p[:PROSE_CHARS])) @ q)
                                               for p in proses if len(p.split()) >= 4])
    return [out[c.id] for c in cands]


def _lines(path: Path) -> List[str]:
    """A file's lines numbered as the index numbers them (`file_lines`: str.splitlines would also break at form
    feeds and Unicode line separators, and shift every span after one); none for a file that is not there."""
    return file_lines(path) if path.is_file() else []


def translation_scores(cands: Sequence[Candidates], translation: TermTranslation,
                       root_of: Callable[[str], Path]) -> List[Dict[str, float]]:
    """Per query: each candidate file's best translation score among its candidate chunks."""
    out = []
    for c in cands:
        root = root_of(c.corpus)
        scores = {}
        for path, spans in c.files.items():
            lines = _lines(root / path)
            scores[path] = max(translation.score(c.query, "\n".join(lines[s - 1:e])) for s, e in spans)
        out.append(scores)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.file_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a folder written by coderag eval --out, or its results.json")
    p.add_argument("--evidence", choices=("centroid", "path", "prose", "translation"), required=True)
    p.add_argument("--variant", default="full")
    p.add_argument("--kind", default="natural", help="the queries' kind ('' for all)")
    p.add_argument("--mined", type=Path, help="translation: the folder of mined query files")
    p.add_argument("--min-repos", type=int, default=4)
    p.add_argument("--dataset", type=Path, help="the dataset file of a run of mined queries (corpus 'history'): "
                                                  "each query's repository and snapshot commit")
    p.add_argument("--leave-out", action="append", default=[], metavar="NAME",
                   help="translation: skip mined files whose name holds NAME (repeatable)")
    a = p.parse_args(argv)
    from coderag.eval.corpora import corpus_root
    from coderag.eval.ranker_data import history_root
    from coderag.eval.snapshots import snapshot_name

    snapshots = {}  # a mined query's id -> its snapshot's folder name
    if a.dataset is not None:
        for line in a.dataset.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("repo") and rec.get("commit"):
                snapshots[rec["id"]] = snapshot_name(rec["repo"], rec["commit"])

    snapshot_folders = set(snapshots.values())

    def root_of(corpus: str) -> Path:
        return history_root(None) / corpus if corpus in snapshot_folders else corpus_root(corpus)

    run = a.run / RESULTS_NAME if a.run.is_dir() else a.run
    if not run.is_file():
        p.error(f"no saved run at {run}: give the folder `coderag eval --out DIR` wrote, or its {RESULTS_NAME}")
    cands = read_candidates(json.loads(run.read_text(encoding="utf-8"))["queries"], a.variant, a.kind or None,
                            snapshots)
    if a.evidence == "centroid":
        scores = centroid_scores(cands, root_of)
    elif a.evidence == "path":
        scores = path_scores(cands, root_of)
    elif a.evidence == "prose":
        scores = prose_scores(cands, root_of)
    else:
        if a.mined is None:
            p.error("--evidence translation needs --mined DIR")
        translation = TermTranslation(mined_pairs(a.mined, history_root(None), a.leave_out), a.min_repos)
        print(f"{len(translation.table)} query words with {sum(map(len, translation.table.values()))} associations",
              file=sys.stderr)
        scores = translation_scores(cands, translation, root_of)
    kept, hits, lifted, misses = pairwise_odds(cands, scores)
    print(f"{a.evidence} over {len(cands)} queries: right first kept above the wrong second {kept} / {hits}; "
          f"gold file above the wrong first {lifted} / {misses}")
    for w in WEIGHTS:
        r1, per_corpus = reordered_gold_first(cands, scores, w)
        print(f"w {w:g}: gold first {r1:.3f}  " + "  ".join(f"{k} {v:.3f}" for k, v in sorted(per_corpus.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
