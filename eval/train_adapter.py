"""Train the dense leg's query adapter (pipelines/query_adapter.py) on the mined queries (eval/ranker_data.py),
choose its strength on training repositories left out, and report it beside the plain embedding on
repositories it never saw.

Two steps, the first cached:

1. Per repository with a dump, every chunk vector of its indexed snapshot and the embedding the dense leg
   makes of each dumped query, in ``<data>/adapter/<owner>+<name>.npz`` (seconds per repository: nothing is
   embedded but the queries).
2. A square matrix W, started at the identity, fitted so that ``normalize(q @ W)`` puts each query's gold
   chunks (those holding a changed line) first among every chunk of its repository: softmax cross-entropy
   over the repository's chunks at temperature TAU, plus ``penalty * |W - I|^2`` so that what the embedder
   knows is kept. The penalty and the epochs are chosen by file R@1 of the nearest chunk on every
   VALIDATION_EVERY-th training repository, left out of the fit; then W is fitted on every training
   repository and scored once on the held-out ones.

Only mined queries train it (no hand-written question): the eval's questions stay unseen by it.

Usage::

    coderag train-adapter --data /work/rank                # choose, report, write the package's adapter
    coderag train-adapter --data /work/rank --no-write     # report only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from coderag.eval.history_repos import HELDOUT, HISTORY_REPOS, TRAIN

TAU = 0.05  # cosines of this embedder lie within ~0.6 of each other: 0.05 spreads them over a useful softmax
GRID = ((0.001, 1), (0.001, 3), (0.01, 1), (0.01, 3), (0.1, 3))  # (penalty, epochs)
VALIDATION_EVERY = 6
BATCH = 32
LEARNING_RATE = 1e-3


def vectors_file(data: Path, repo: str) -> Path:
    return data / "adapter" / (repo.replace("/", "+") + ".npz")


def extract(data: Path, snapshots: Path, repos: Sequence[str]) -> None:
    """Step 1 for every repository of `repos` with a dump and no vectors file yet."""
    import numpy as np

    from coderag.eval.ranker_data import load_dump, snapshot_folder
    from coderag.pipelines.code_index import CodeIndex
    from coderag.pipelines.search_options import SearchOptions

    (data / "adapter").mkdir(parents=True, exist_ok=True)
    for n, repo in enumerate(repos, 1):
        dump = data / "dump" / (repo.replace("/", "+") + ".json.gz")
        out = vectors_file(data, repo)
        if out.is_file() or not dump.is_file():
            continue
        t0 = time.perf_counter()
        queries = load_dump(dump)["queries"]
        with CodeIndex.open(snapshot_folder(snapshots, repo), create=False) as index:
            vectors, fields = index.vector_store.dense_vectors()
            graph, model = index.engine.graph, index.embed_model
            embedded, kept = [], []
            for q in queries:
                req = graph.request(SearchOptions(query=q["query"]))
                if req is not None:
                    embedded.append(model.get_query_embedding(req.dense_text))
                    kept.append({"kind": q["kind"], "gold": q["gold"]})
        tmp = out.with_name(out.name + ".tmp.npz")
        np.savez(tmp, vectors=np.asarray(vectors, dtype=np.float32), queries=np.asarray(embedded, dtype=np.float32),
                 files=np.array([f["file_path"] or "" for f in fields]),
                 starts=np.array([int(f["start_line"] or 0) for f in fields]),
                 ends=np.array([int(f["end_line"] or 0) for f in fields]), meta=np.array(json.dumps(kept)))
        tmp.replace(out)
        print(f"  vectors [{n}/{len(repos)}] {repo}: {len(vectors)} chunks, {len(kept)} queries, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


class Repo:
    """One repository's chunk vectors and its queries: embedding, kind, gold chunks and gold files."""

    def __init__(self, path: Path) -> None:
        import numpy as np
        import torch

        z = np.load(path)
        self.chunks = torch.from_numpy(z["vectors"])
        self.files = z["files"]
        starts, ends = z["starts"], z["ends"]
        self.queries: list[tuple[Any, Any, set[str], str]] = []
        for vec, m in zip(z["queries"], json.loads(str(z["meta"]))):
            gold = np.zeros(len(self.files), dtype=bool)
            for g in m["gold"]:
                gold |= (self.files == g["file_path"]) & (starts <= g["end_line"]) & (ends >= g["start_line"])
            if gold.any():  # a query whose gold lines no chunk holds teaches nothing
                self.queries.append((vec, torch.from_numpy(np.flatnonzero(gold)), {g["file_path"] for g in m["gold"]},
                                     m["kind"]))


def file_recall(W: Any, repos: Sequence[Repo]) -> dict[str, float]:
    """File R@1 of the nearest chunk, per kind and over all, with the queries mapped through W (None: as they are)."""
    import numpy as np
    import torch

    hits: dict[str, list[float]] = defaultdict(list)
    for repo in repos:
        if not repo.queries:
            continue
        q = torch.from_numpy(np.stack([x[0] for x in repo.queries]))
        if W is not None:
            q = torch.nn.functional.normalize(q @ W, dim=1)
        for (_, _, files, kind), best in zip(repo.queries, (q @ repo.chunks.T).argmax(1).tolist()):
            hit = float(repo.files[best] in files)
            hits[kind].append(hit)
            hits["all"].append(hit)
    return {k: sum(v) / len(v) for k, v in hits.items()} | {f"n {k}": len(v) for k, v in hits.items()}


def fit(repos: Sequence[Repo], penalty: float, epochs: int, seed: int = 7) -> Any:
    """W fitted on `repos` (step 2)."""
    import numpy as np
    import torch

    torch.manual_seed(seed)
    dim = repos[0].chunks.shape[1]
    eye = torch.eye(dim)
    W = eye.clone().requires_grad_(True)
    opt = torch.optim.Adam([W], lr=LEARNING_RATE)
    batches = [(r, i) for r in repos for i in range(0, len(r.queries), BATCH)]
    for epoch in range(epochs):
        for k in np.random.default_rng(seed + epoch).permutation(len(batches)):
            repo, i = batches[k]
            batch = repo.queries[i:i + BATCH]
            q = torch.from_numpy(np.stack([x[0] for x in batch]))
            logp = torch.log_softmax(torch.nn.functional.normalize(q @ W, dim=1) @ repo.chunks.T / TAU, dim=1)
            loss = -torch.stack([torch.logsumexp(logp[j, x[1]], 0) for j, x in enumerate(batch)]).mean()
            loss = loss + penalty * ((W - eye) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return W.detach()


def _row(name: str, scores: dict[str, float], kinds: Sequence[str]) -> str:
    return f"| {name} | " + " | ".join(f"{scores.get(k, 0.0):.3f}" for k in kinds) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="coderag train-adapter", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the folder of eval/ranker_data.py (dump/)")
    p.add_argument("--snapshots", type=Path, default=None,
                   help="the indexed snapshots (default: $CODERAG_HISTORY_DIR)")
    p.add_argument("--out", type=Path, default=None, help="adapter file (default: the package's)")
    p.add_argument("--no-write", action="store_true", help="report only; leave the adapter file as it is")
    a = p.parse_args(argv)
    import torch

    from coderag.eval.ranker_data import history_root
    from coderag.pipelines.query_adapter import ADAPTER_PATH, save_adapter

    torch.set_num_threads(2)
    train_names = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == TRAIN]
    heldout_names = [r for r, (_, _, split) in HISTORY_REPOS.items() if split == HELDOUT]
    print("vectors of the dumped repositories...", file=sys.stderr)
    extract(a.data, history_root(str(a.snapshots) if a.snapshots else None), train_names + heldout_names)
    train = {r: Repo(vectors_file(a.data, r)) for r in train_names if vectors_file(a.data, r).is_file()}
    heldout = [Repo(vectors_file(a.data, r)) for r in heldout_names if vectors_file(a.data, r).is_file()]
    validation = sorted(train)[::VALIDATION_EVERY]
    if len(train) < 2 or not validation:
        print(f"error: {len(train)} training repositories have dumps in {a.data / 'dump'}; choosing the adapter "
              f"needs two or more. Make them with `python -m coderag.eval.ranker_data` (eval/README.md says "
              f"how).", file=sys.stderr)
        return 2
    fitting = [train[r] for r in sorted(train) if r not in validation]
    left_out = [train[r] for r in validation]
    kinds = ("all", "commit", "identifier", "docstring")
    lines = [f"## choice, on {len(left_out)} training repositories left out of the fit (dense file R@1)\n",
             "| W | " + " | ".join(kinds) + " |", "| --- |" + " ---: |" * len(kinds),
             _row("identity", file_recall(None, left_out), kinds)]
    best = None
    for penalty, epochs in GRID:
        t0 = time.perf_counter()
        scores = file_recall(fit(fitting, penalty, epochs), left_out)
        lines.append(_row(f"penalty {penalty}, {epochs} epochs", scores, kinds))
        print(f"  penalty {penalty}, {epochs} epochs: R@1 {scores['all']:.3f} ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
        if best is None or scores["all"] > best[0]:
            best = (scores["all"], penalty, epochs)
    _, penalty, epochs = best
    print("\n".join(lines) + f"\n\nchosen: penalty {penalty}, {epochs} epochs\n")
    W = fit(list(train.values()), penalty, epochs)
    plain, adapted = file_recall(None, heldout), file_recall(W, heldout)
    counts = " / ".join(f"{k} {int(plain.get('n ' + k, 0))}" for k in kinds)
    print(f"## held-out repositories ({len(heldout)}; queries: {counts}; dense file R@1)\n\n"
          "| W | " + " | ".join(kinds) + " |\n| --- |" + " ---: |" * len(kinds) + "\n"
          + _row("identity", plain, kinds) + "\n" + _row("adapter", adapted, kinds) + "\n")
    if not a.no_write:
        path = save_adapter(W.numpy(), a.out or ADAPTER_PATH, {
            "trained_on": sorted(train), "queries": sum(len(r.queries) for r in train.values()),
            "penalty": penalty, "epochs": epochs, "tau": TAU, "command": "coderag train-adapter --data DATA"})
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
