"""Ablations of the learned ranker over the dumped legs (eval/ranker_data.py): each variant is the shipped
model's training (eval/train_ranker.py: every training repository's mined queries, the size the model file
records) with one thing changed, scored on the tune split's hand-written questions (never trained on) and on
the held-out repositories, beside the rules. What the learned ranker does with a kind of evidence or data is
a command here, so a claim about it can be run again when the data changes.

A variant is one argument; several changes join with "+" (``weight:docstring=0.25+drop:file``):

    base                      the shipped model's training, unchanged
    weight:KIND=W[,KIND=W]    the queries of a kind weigh W (0 leaves them out)
    drop:NAME                 a feature held at 0, or a group of them: query, leg, file, field, candidate
    objective:NAME            LightGBM's objective: lambdarank, rank_xendcg, or binary (a chunk that holds a
                              gold line against every other candidate, with no query groups)
    leaves:N                  trees of N leaves
    monotone                  the legs' shares and a file's best shares may only raise a score, ranks only lower it
    also:KIND[/KIND]=A        plus A x the scores of a second model trained on those kinds alone
    questions                 trained on the tune split's questions too (weigh them with weight:natural=W):
                              each tune set is scored by a model trained without it (leave one set out), the
                              held-out repositories by one trained with all of them
    add:NAME                  columns of evidence from the whole indexed tree (eval/tree_evidence.py): indeg
                              (the file's import in-degree), size (its chunks), knn (the chunk's k-occurrence
                              among nearest neighbours); each repository's tree must still be indexed

The numbers are file R@1 (and R@5 over all) as train-ranker reports them, over the dumped legs: the search's
payload packing is not in them (`coderag eval` measures that). With `--cv N` each variant is also scored on the
training repositories themselves, each by a model trained on the other folds (N folds by repository, dealt as
train-ranker deals them): the check to choose on, with many more queries than the tune questions.

Usage::

    python -m coderag.eval.ranker_ablations --data /work/rank base drop:file weight:docstring=0 also:test=0.5
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS, TRAIN
from coderag.eval.train_ranker import (BASE_PARAMS, GRID, HAND_WRITTEN, ROUNDS, QueryRows, load_rows, metrics_of,
                                       ranked_by, repository_folds, training_matrix)

OBJECTIVES = ("lambdarank", "rank_xendcg", "binary")
# What `monotone` constrains: more of a leg's score may only help a candidate, a worse rank only hurt it.
RISING = ("dense_share", "bm25_share", "file_dense_max", "file_bm25_max", "best_of_file_dense", "best_of_file_bm25")
FALLING = ("dense_rank", "bm25_rank")
KINDS_SHOWN = ("natural", "issue", "identifier", "docstring", "commit", "test")


class AblationError(ValueError):
    """A variant that cannot be read."""


@dataclass
class Variant:
    spec: str
    weights: dict[str, float] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    objective: str = "lambdarank"
    leaves: int | None = None
    monotone: bool = False
    also: tuple[tuple[str, ...], float] | None = None
    questions: bool = False
    added: list[str] = field(default_factory=list)

    def feature_names(self) -> list[str]:
        from coderag.eval.tree_evidence import COLUMNS
        from coderag.pipelines.features import FEATURES

        return [*FEATURES, *(c for name in self.added for c in COLUMNS[name])]


def feature_groups() -> dict[str, tuple[str, ...]]:
    from coderag.pipelines import features as f

    return {"query": f.QUERY_FEATURES, "leg": f.LEG_FEATURES, "file": f.FILE_FEATURES, "field": f.FIELD_FEATURES,
            "candidate": f.CANDIDATE_FEATURES}


def parse_variant(spec: str) -> Variant:
    """The variant an argument names; AblationError says what is wrong with one that names none."""
    from coderag.pipelines.features import FEATURES

    v = Variant(spec)
    for part in spec.split("+"):
        name, _, arg = part.partition(":")
        try:
            if name == "base" and not arg:
                continue
            if name == "monotone" and not arg:
                v.monotone = True
            elif name == "questions" and not arg:
                v.questions = True
            elif name == "weight":
                for pair in arg.split(","):
                    kind, _, w = pair.partition("=")
                    v.weights[kind] = float(w)
            elif name == "drop":
                group = feature_groups().get(arg)
                if group is None and arg not in FEATURES:
                    raise AblationError(f"{arg!r} is neither a feature nor one of the groups "
                                        f"{', '.join(feature_groups())}")
                v.dropped += list(group or (arg,))
            elif name == "objective":
                if arg not in OBJECTIVES:
                    raise AblationError(f"objective {arg!r}: expected one of {', '.join(OBJECTIVES)}")
                v.objective = arg
            elif name == "leaves":
                v.leaves = int(arg)
            elif name == "add":
                from coderag.eval.tree_evidence import COLUMNS

                if arg not in COLUMNS:
                    raise AblationError(f"add:{arg}: expected one of {', '.join(COLUMNS)}")
                if arg not in v.added:  # a column twice would be two features of one name
                    v.added.append(arg)
            elif name == "also":
                kinds, _, a = arg.partition("=")
                v.also = (tuple(kinds.split("/")), float(a))
            else:
                raise AblationError(f"unknown change {part!r}")
        except AblationError as exc:
            raise AblationError(f"variant {spec!r}: {exc}") from None
        except ValueError:
            raise AblationError(f"variant {spec!r}: {part!r} needs a number where it has {arg!r}") from None
    return v


def _masked(X: Any, dropped: Sequence[int]) -> Any:
    if dropped:
        X = X.copy()
        X[:, list(dropped)] = 0.0
    return X


@dataclass
class Scorer:
    """A variant's trained model, scoring rows of FEATURES like a booster (so train_ranker.ranked_by orders a
    query's candidates by it). `boosters` are the model and, for `also`, the second model, whose scores are
    added `also_weight` times."""

    boosters: list[Any]
    dropped: list[int]
    also_weight: float = 0.0

    def predict(self, X: Any, num_iteration: int | None = None) -> Any:
        X = _masked(X, self.dropped)
        s = self.boosters[0].predict(X, num_iteration=num_iteration)
        for b in self.boosters[1:]:
            s = s + self.also_weight * b.predict(X, num_iteration=num_iteration)
        return s


def train(variant: Variant, qs: Sequence[QueryRows], params: dict[str, Any], rounds: int) -> Scorer:
    """A scorer of one query's candidates, trained on `qs` as the variant says."""
    import lightgbm as lgb
    import numpy as np

    names = variant.feature_names()
    dropped = [names.index(f) for f in variant.dropped]

    def fit(qs: Sequence[QueryRows]):
        qs = [q for q in qs if any(q.labels) and variant.weights.get(q.record["kind"], 1.0) > 0]
        p = {**BASE_PARAMS, **params, "objective": variant.objective}
        if variant.leaves:
            p["num_leaves"] = variant.leaves
        if variant.monotone:
            p["monotone_constraints"] = [1 if f in RISING else -1 if f in FALLING else 0 for f in names]
            p["monotone_constraints_method"] = "intermediate"
        binary = variant.objective == "binary"
        if binary:  # pointwise: no groups, no ranking metric
            p = {k: v for k, v in p.items() if k not in ("eval_at", "lambdarank_truncation_level")} | {"metric": "auc"}
        X, y, groups = training_matrix(qs)
        w = np.array([variant.weights.get(q.record["kind"], 1.0) for q in qs for _ in q.ids])
        data = lgb.Dataset(_masked(X, dropped), (y == 2).astype(np.int32) if binary else y, weight=w,
                           group=None if binary else groups, feature_name=names, free_raw_data=False)
        return lgb.train(p, data, num_boost_round=rounds)

    boosters = [fit(qs)]
    if variant.also:
        boosters.append(fit([q for q in qs if q.record["kind"] in variant.also[0]]))
    return Scorer(boosters, dropped, variant.also[1] if variant.also else 0.0)


def _left_out(variant: Variant, mined: Sequence[QueryRows], hand: dict[str, list[QueryRows]], params: dict[str, Any],
              rounds: int) -> list[tuple[QueryRows, list]]:
    """Each tune set's queries, ranked by a model trained on the mined queries and the other tune sets."""
    out = []
    for name, qs in hand.items():
        others = [q for other, rest in hand.items() if other != name for q in rest]
        scorer = train(variant, [*mined, *others], params, rounds)
        out += [(q, ranked_by(scorer, q)) for q in qs]
    return out


def row(name: str, where: str, metrics: dict[str, dict[str, float]]) -> str:
    every = metrics.get("all", {"n": 0, "recall@1": 0.0, "recall@5": 0.0})
    kinds = [f"{metrics[k]['recall@1']:.3f}" if k in metrics else "" for k in KINDS_SHOWN]
    return (f"| {name} | {where} | {int(every['n'])} | {every['recall@1']:.3f} | {every['recall@5']:.3f} | "
            + " | ".join(kinds) + " |")


def shipped_size(model: Path) -> tuple[dict[str, Any], int]:
    """The tree size and rounds the shipped model was trained with (train-ranker's cross-validated choice); for a
    model file that does not say, the largest of train-ranker's grid."""
    info = json.loads(model.read_text(encoding="utf-8")).get("info", {})
    return dict(info.get("params") or GRID[-1]), int(info.get("rounds") or max(ROUNDS))


def _flat(by_repo: dict[str, list[QueryRows]]) -> list[QueryRows]:
    return [q for qs in by_repo.values() for q in qs]


def tree_of(repo: str) -> Path:
    """The indexed tree a repository's (or a tune set's, `hand/<corpus>`) queries were dumped from."""
    from coderag.eval.corpora import corpus_root
    from coderag.eval.ranker_data import history_root, snapshot_folder

    if repo in HAND_WRITTEN:
        return Path(corpus_root(repo.split("/", 1)[1]))
    return snapshot_folder(history_root(None), repo)


def with_evidence(by_repo: dict[str, list[QueryRows]], added: Sequence[str], evidence: dict[str, Any],
                  data: Path) -> dict[str, list[QueryRows]]:
    """The queries with the columns of `added` (eval/tree_evidence.py) after their features; each repository's
    evidence is computed once into `evidence`."""
    from coderag.eval.tree_evidence import TreeEvidence

    if not added:
        return by_repo
    out = {}
    for repo, qs in by_repo.items():
        if repo not in evidence:
            cache = data / "tree_evidence" / (repo.replace("/", "+") + ".json")
            evidence[repo] = TreeEvidence(tree_of(repo), cache)
        ev = evidence[repo]
        out[repo] = []
        for q in qs:
            extra = [ev.columns(name, q.places) for name in added]
            rows = [row + [x for cols in extra for x in cols[i]] for i, row in enumerate(q.rows)]
            out[repo].append(QueryRows(q.record, q.ids, rows, q.labels, q.places, q.rules, q.legs))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.ranker_ablations", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the folder of eval/ranker_data.py (dump/)")
    p.add_argument("variants", nargs="+", help="variants, as the module's docstring lists them")
    p.add_argument("--cv", type=int, default=0, metavar="N",
                   help="also score each variant on the training repositories, N folds by repository")
    a = p.parse_args(argv)
    try:
        variants = [parse_variant(s) for s in a.variants]
    except AblationError as exc:
        print(f"error: {exc}. `python -m coderag.eval.ranker_ablations --help` lists the changes.", file=sys.stderr)
        return 2
    from coderag.base.config import Settings
    from coderag.pipelines.ranker import MODEL_PATH

    settings = Settings()
    split = {s: [r for r, (_, _, x) in HISTORY_REPOS.items() if x == s] for s in (TRAIN, HELDOUT)}
    mined = load_rows(a.data, settings, split[TRAIN])
    if not mined:
        print(f"error: no training repository has dumps in {a.data / 'dump'}; make them with `python -m "
              f"coderag.eval.ranker_data` (eval/README.md says how).", file=sys.stderr)
        return 2
    hand = load_rows(a.data, settings, HAND_WRITTEN)
    heldout = load_rows(a.data, settings, split[HELDOUT])
    params, rounds = shipped_size(MODEL_PATH)
    print(f"trained on {sum(map(len, mined.values()))} mined queries of {len(mined)} repositories; {params}, "
          f"{rounds} rounds\n")
    print("| variant | scored on | n | R@1 | R@5 | " + " | ".join(f"{k} R@1" for k in KINDS_SHOWN) + " |")
    print("| --- | --- | ---: | ---: | ---: |" + " ---: |" * len(KINDS_SHOWN))
    cv_label = f"training repositories, {a.cv} folds"
    for where, by_repo in ((cv_label, mined if a.cv else {}), ("tune questions", hand),
                           ("held-out repositories", heldout)):
        if by_repo:
            print(row("rules", where, metrics_of((q, q.rules) for q in _flat(by_repo))), flush=True)
    evidence: dict[str, Any] = {}
    for v in variants:
        v_mined, v_hand, v_heldout = (with_evidence(r, v.added, evidence, a.data) for r in (mined, hand, heldout))
        if a.cv:
            unseen = []
            for fit_on, test in repository_folds(v_mined, a.cv):
                scorer = train(v, fit_on, params, rounds)
                unseen += [(q, ranked_by(scorer, q)) for q in test]
            print(row(v.spec, cv_label, metrics_of(unseen)), flush=True)
        v_mined = _flat(v_mined)
        checks = {"tune questions": _flat(v_hand), "held-out repositories": _flat(v_heldout)}
        if v.questions:  # each tune set is scored by a model that never saw it
            left_out = metrics_of(_left_out(v, v_mined, v_hand, params, rounds))
            print(row(v.spec, "tune questions, each set left out", left_out), flush=True)
            scorer = train(v, [*v_mined, *checks["tune questions"]], params, rounds)
            checks = {"held-out repositories": checks["held-out repositories"]}
        else:
            scorer = train(v, v_mined, params, rounds)
        for where, qs in checks.items():
            if qs:
                print(row(v.spec, where, metrics_of((q, ranked_by(scorer, q)) for q in qs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
