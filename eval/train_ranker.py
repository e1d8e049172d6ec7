"""Train the learned ranker (pipelines/ranker.py) on the dumped candidates of mined queries
(eval/ranker_data.py), choose its size by cross-validation by repository, and report it beside the rules on
repositories it never saw.

Each query's candidates are the legs' answers cut to the search's depths; their features are those the search
computes (pipelines/features.py); a candidate's label is 2 when it holds a gold line, 1 when it is in a gold
file, else 0. LightGBM's lambdarank fits the order (a pairwise objective weighted by the change in nDCG: the
standard learner for ranking; it trains in a minute on a few hundred thousand rows and scores a request's
candidates in about a millisecond).

The folds never split a repository: every number below "cv" is on repositories the model of that fold was
not trained on, and held-out repositories (eval/history_repos.py) are scored once, by the model trained on every
training repository with the setting the folds chose. It learns only from the mined queries, none of which
we wrote: the eval's tune-split questions (HAND_WRITTEN), where they are dumped, are scored beside the
held-out repositories as a check it never trained on.

Usage::

    python -m coderag.eval.train_ranker --data /work/rank            # CV, then train and write the model
    python -m coderag.eval.train_ranker --data /work/rank --no-write  # CV and the held-out report only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS, TRAIN
from coderag.eval.metrics import Result, Span, mean, score_ranking

DEFAULT_FOLDS = 5
GRID = ({"num_leaves": 15, "min_data_in_leaf": 50}, {"num_leaves": 31, "min_data_in_leaf": 100})
ROUNDS = (100, 250)
BASE_PARAMS = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [1, 5], "learning_rate": 0.05,
               "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambdarank_truncation_level": 20,
               "verbosity": -1, "num_threads": 2, "seed": 7}
# The last column is the same for every ranking of a query: whether a gold file is among its candidates at all,
# the most that any order of them can reach. What R@1 falls short of it is ranking; the rest is the legs'.
REPORT_KEYS = ("recall@1", "recall@5", "mrr@10", "line_hit@5", "gold_file_found")
# The hand-written questions of the eval's tune split (eval/datasets: click, rich, pydantic-core), dumped as
# `hand+<corpus>` beside the mined repositories (`ranker_data.py hand`): questions in our own words, so a check
# on questions the model never trained on, never its training data. Trained on, they moved the held-out
# corpora's natural questions within noise and made their own split in-sample (eval/RESULTS.md, "Issue 28").
HAND_WRITTEN = ("hand/click", "hand/rich", "hand/pydantic-core", "hand/markdown-it", "hand/cryptography-rust",
                "hand/query-core", "hand/attrs", "hand/router-core")


@dataclass
class QueryRows:
    """One query's candidates: their features, labels and places, and its record (kind, split, repo, gold)."""

    record: dict[str, Any]
    ids: list[str]
    rows: list[list[float]]
    labels: list[int]
    places: list[Result]
    rules: list[Result] = field(default_factory=list)  # the rule-based fusion's top 10, for comparison
    legs: dict[str, list[Result]] = field(default_factory=dict)  # each leg's own top 10

    @property
    def gold(self) -> list[Span]:
        return [Span(g["file_path"], g["start_line"], g["end_line"]) for g in self.record["gold"]]


def _label(meta: dict[str, Any], gold: Sequence[dict[str, Any]]) -> int:
    best = 0
    for g in gold:
        if meta["file_path"] == g["file_path"]:
            best = max(best, 2 if int(meta["start_line"]) <= g["end_line"] and g["start_line"] <= int(meta["end_line"]) else 1)
    return best


def query_rows(dump: dict[str, Any], settings) -> Iterable[QueryRows]:
    """Every query of a dump as the search would see it: legs cut to the settings' depths, read as the search
    reads it, its features computed by pipelines/features.py; with the rules' ranking of the same legs."""
    from coderag.eval.legs import dumped_nodes, offline_fusion, searched_legs
    from coderag.eval.runner import apply_overrides
    from coderag.pipelines.features import candidate_features
    from coderag.pipelines.search_request import SearchRequest

    r = settings.retrieval
    fusion = offline_fusion(apply_overrides(settings, {"ranker": "rules"}))
    nodes = dump["nodes"]
    node = dumped_nodes(nodes)

    def place(nid: str) -> Result:
        m = nodes[nid]
        return Result.block(m["file_path"], int(m["start_line"]), int(m["end_line"]))

    for rec in dump["queries"]:
        results, reading = searched_legs(rec, r, node)
        req = SearchRequest(rec["query"], legs=tuple(results), reading=reading)
        ids, rows = candidate_features(results, req)
        rules = [place(n.node.node_id) for n in fusion.fuse(results, req)[:10]]
        legs = {leg: [place(n.node.node_id) for n in found[:10]] for leg, found in results.items()}
        yield QueryRows(rec, ids, rows, [_label(nodes[i], rec["gold"]) for i in ids], [place(i) for i in ids],
                        rules, legs)


def load_rows(data: Path, settings, repos: Sequence[str]) -> dict[str, list[QueryRows]]:
    """Each repository's QueryRows, from its dump; cached in `data`/features (keyed by the feature names and
    depths), so a second run does not compute them again."""
    import pickle

    from coderag.eval.ranker_data import load_dump
    from coderag.pipelines.features import FEATURES

    r = settings.retrieval
    depths = [r.dense_top_k, r.report_dense_top_k, r.sparse_top_k, r.source_quota_depth]
    key = hashlib.sha256(json.dumps([FEATURES, *depths]).encode()).hexdigest()[:12]
    cache = data / "features" / key
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[QueryRows]] = {}
    for n, repo in enumerate(repos, 1):
        name = repo.replace("/", "+")
        dumps = sorted((data / "dump").glob(f"{name}.*json.gz"))  # the repository's dumps, made at one or more times
        cached = cache / f"{name}.pkl"
        if not dumps:
            continue
        if cached.is_file() and cached.stat().st_mtime >= max(p.stat().st_mtime for p in dumps):
            out[repo] = [QueryRows(**fields) for fields in pickle.loads(cached.read_bytes())]
            continue
        t0 = time.perf_counter()
        out[repo] = [q for p in dumps for q in query_rows(load_dump(p), settings)]
        cached.write_bytes(pickle.dumps([vars(q) for q in out[repo]]))  # fields, not the class: it may be __main__'s
        print(f"  features [{n}/{len(repos)}] {repo}: {len(out[repo])} queries, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    return out


def training_matrix(qs: Sequence[QueryRows]):
    """(X, labels, group sizes) of the queries that teach an order."""
    import numpy as np

    qs = [q for q in qs if any(q.labels)]  # a query whose answer no leg found teaches no order
    X = np.array([row for q in qs for row in q.rows], dtype=np.float32)
    y = np.array([lab for q in qs for lab in q.labels], dtype=np.int32)
    return X, y, [len(q.ids) for q in qs]


def fit(qs: Sequence[QueryRows], params: dict[str, Any], rounds: int):
    import lightgbm as lgb

    from coderag.pipelines.features import FEATURES

    X, y, groups = training_matrix(qs)
    data = lgb.Dataset(X, y, group=groups, feature_name=list(FEATURES), free_raw_data=False)
    return lgb.train({**BASE_PARAMS, **params}, data, num_boost_round=rounds)


def ranked_by(booster, q: QueryRows, rounds: int | None = None) -> list[Result]:
    import numpy as np

    if not q.ids:
        return []
    scores = booster.predict(np.array(q.rows, dtype=np.float32), num_iteration=rounds)
    return [q.places[i] for i in np.argsort(-scores, kind="stable")[:10]]


def metrics_of(pairs: Iterable[tuple[QueryRows, list[Result]]]) -> dict[str, dict[str, float]]:
    """Mean metrics per group: all, and per kind."""
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for q, ranking in pairs:
        m = score_ranking(ranking, q.gold) | {"gold_file_found": float(any(q.labels))}
        groups["all"].append(m)
        groups[q.record["kind"]].append(m)
    return {g: {k: mean([m[k] for m in ms]) for k in REPORT_KEYS} | {"n": len(ms)} for g, ms in groups.items()}


def table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: one row per (ranking, group)."""
    lines = ["| ranking | group | n | " + " | ".join(REPORT_KEYS) + " |", "| --- | --- | ---: |" + " ---: |" * len(REPORT_KEYS)]
    for name, groups in rows.items():
        for g in sorted(groups, key=lambda k: (k != "all", k)):
            v = groups[g]
            lines.append(f"| {name} | {g} | {int(v['n'])} | " + " | ".join(f"{v[k]:.3f}" for k in REPORT_KEYS) + " |")
    return "\n".join(lines)


CUT_GRID = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)


def calibration(booster, qs: Sequence[QueryRows]) -> str:
    """What the payload's cuts (pipelines/ranker.py) would cost, read off the model's probabilities: for each
    ratio to the best candidate, the share of gold chunks below it and the candidates kept; and, by how close
    a second file's best chunk comes to the best, how often the first file is right."""
    import numpy as np

    from coderag.pipelines.ranker import LearnedRanker, onnx_twin

    ranker = LearnedRanker(onnx_twin(booster), {})  # the probabilities as a search reads them
    gold = 0
    lost = dict.fromkeys(CUT_GRID, 0)
    kept_at = dict.fromkeys(CUT_GRID, 0)
    flat: dict[int, list[bool]] = defaultdict(list)
    for q in qs:
        if not q.ids:
            continue
        p = np.array(ranker.scores(q.rows))
        ratio, labels, order = p / p.max(), np.array(q.labels), np.argsort(-p)
        gold += int((labels == 2).sum())
        for r in CUT_GRID:
            lost[r] += int(((ratio < r) & (labels == 2)).sum())
            kept_at[r] += int((ratio >= r).sum())
        top = q.places[order[0]].file_path
        second = next((i for i in order if q.places[i].file_path != top), None)
        if second is not None:
            flat[min(int(ratio[second] * 10), 9)].append(bool(labels[order[0]] > 0))
    lines = ["| ratio to the best | gold chunks below it | candidates kept per query |", "| ---: | ---: | ---: |"]
    lines += [f"| {r} | {lost[r] / max(gold, 1):.3f} | {kept_at[r] / max(len(qs), 1):.1f} |" for r in CUT_GRID]
    lines += ["", "| a second file's best, over the best | queries | first file right |", "| --- | ---: | ---: |"]
    lines += [f"| {b / 10:.1f}-{(b + 1) / 10:.1f} | {len(v)} | {mean([float(x) for x in v]):.2f} |"
              for b, v in sorted(flat.items())]
    return "\n".join(lines)


def repository_folds(by_repo: dict[str, list[QueryRows]], folds: int
                     ) -> Iterable[tuple[list[QueryRows], list[QueryRows]]]:
    """(training queries, held-out queries) of each fold. Repositories are dealt round in name order, so every
    fold holds some and none is split; a fold with nothing on either side is left out."""
    repos = sorted(by_repo)
    fold_of = {repo: i % folds for i, repo in enumerate(repos)}
    for k in range(folds):
        train = [q for repo in repos if fold_of[repo] != k for q in by_repo[repo]]
        test = [q for repo in repos if fold_of[repo] == k for q in by_repo[repo]]
        if train and test:
            yield train, test


def cross_validate(by_repo: dict[str, list[QueryRows]], folds: int) -> tuple[dict[str, Any], int, str]:
    """(params, rounds) with the best mean file R@1 over folds of training repositories, and the report."""
    scores: dict[tuple[int, int], list[tuple[QueryRows, list[Result]]]] = defaultdict(list)
    rules: list[tuple[QueryRows, list[Result]]] = []
    for k, (train, test) in enumerate(repository_folds(by_repo, folds)):
        rules += [(q, q.rules) for q in test]
        for gi, params in enumerate(GRID):
            booster = fit(train, params, max(ROUNDS))
            for rounds in ROUNDS:
                scores[(gi, rounds)] += [(q, ranked_by(booster, q, rounds)) for q in test]
        print(f"  fold {k + 1}/{folds}: {len(test)} queries held out", file=sys.stderr, flush=True)
    results = {f"learned {GRID[gi]['num_leaves']} leaves, {rounds} rounds": metrics_of(pairs)
               for (gi, rounds), pairs in scores.items()}
    best = max(scores, key=lambda key: metrics_of(scores[key])["all"]["recall@1"])
    results = {"rules": metrics_of(rules), **results}
    return GRID[best[0]], best[1], table(results)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m coderag.eval.train_ranker", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the folder of eval/ranker_data.py (dump/, queries.jsonl)")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS)
    p.add_argument("--out", type=Path, default=None, help="model file (default: the package's, pipelines/ranker_model.json)")
    p.add_argument("--no-write", action="store_true", help="report only; leave the model file as it is")
    a = p.parse_args(argv)
    from coderag.base.config import Settings
    from coderag.pipelines.ranker import MODEL_PATH, save_model

    settings = Settings()
    train_repos = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == TRAIN]
    heldout_repos = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == HELDOUT]
    print("features of the training repositories...", file=sys.stderr)
    train = load_rows(a.data, settings, train_repos)
    if len(train) < a.folds:
        print(f"error: {len(train)} training repositories have dumps in {a.data / 'dump'}; {a.folds}-fold "
              f"cross-validation by repository needs {a.folds} or more. Make them with `python -m "
              f"coderag.eval.ranker_data` (eval/README.md says how), or pass fewer --folds.", file=sys.stderr)
        return 2
    print("cross-validation by repository...", file=sys.stderr)
    params, rounds, cv = cross_validate(train, a.folds)
    print(f"## cross-validation by repository ({len(train)} repositories)\n\n{cv}\n")
    print(f"chosen: {params}, {rounds} rounds\n")
    every = [q for qs in train.values() for q in qs]
    booster = fit(every, params, rounds)
    heldout = load_rows(a.data, settings, heldout_repos)
    test = [q for qs in heldout.values() for q in qs]
    hand = [q for qs in load_rows(a.data, settings, HAND_WRITTEN).values() for q in qs]
    if hand:
        checks = {"learned": metrics_of((q, ranked_by(booster, q)) for q in hand),
                  "rules (chosen on them)": metrics_of((q, q.rules) for q in hand)}
        print(f"## the tune split's hand-written questions (never trained on)\n\n{table(checks)}\n")
    report = {"learned": metrics_of((q, ranked_by(booster, q)) for q in test),
              "rules": metrics_of((q, q.rules) for q in test),
              "dense leg": metrics_of((q, q.legs.get("dense", [])) for q in test),
              "bm25 leg": metrics_of((q, q.legs.get("bm25", [])) for q in test)}
    print(f"## held-out repositories ({len(heldout)}: {', '.join(sorted(heldout))})\n\n{table(report)}\n")
    per_repo = {repo: {"learned": metrics_of((q, ranked_by(booster, q)) for q in qs)["all"]["recall@1"],
                       "rules": metrics_of((q, q.rules) for q in qs)["all"]["recall@1"]} for repo, qs in heldout.items()}
    print("| held-out repository | learned R@1 | rules R@1 |\n| --- | ---: | ---: |")
    for repo, v in sorted(per_repo.items()):
        print(f"| {repo} | {v['learned']:.3f} | {v['rules']:.3f} |")
    commits = [q for q in test if q.record["kind"] == "commit"]
    print(f"\n## the payload's cuts, on the held-out commit queries\n\n{calibration(booster, commits)}")
    if not a.no_write:
        path = save_model(booster, a.out or MODEL_PATH, {
            "trained_on": sorted(train), "queries": len(every), "params": params, "rounds": rounds,
            "command": "python -m coderag.eval.train_ranker --data DATA"})
        print(f"\nwrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
