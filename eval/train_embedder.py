"""Fine-tune the bundled embedding model on (doc comment, definition) pairs of the training repositories
(eval/doc_pairs.py) and, given their mined queries, (change description, changed code) pairs (eval/change_pairs.py),
and save it as a sentence-transformers folder that `embedding.model_path` can name.

Both the queries and the chunks are embedded by the one model, so an index built with another model must be
built again (`coderag eval` does it for the eval corpora when `$CODERAG_CONFIG` names the model; give it a cache
folder of its own, `CODERAG_CACHE_DIR`, so the bundled model's indexes stay).

The recipe (eval/RESULTS.md, "the embedder fine-tuned on the training repositories' doc comments"):
- the word embeddings and the first FROZEN_LAYERS of the six layers stay as they are: what the model learned
  from its billion pairs is kept, and only how its top layers combine it moves;
- the loss is the symmetric in-batch softmax (MultipleNegativesRanking, scale SCALE) over batches of BATCH pairs
  of one repository, so that a query's negatives are its own code base's other definitions;
- AdamW, WARMUP of the steps warming up, then a linear decay to zero. A gentle run (half an epoch at 1e-5)
  gained on the tune questions where a full epoch at 3e-5 lost: the default is the gentle one.

Usage::

    python -m coderag.eval.train_embedder --out /work/ft/model        # the training repositories' snapshots
    python -m coderag.eval.train_embedder --out DIR --mined /work/exp/mined   # and their commits' pairs
    python -m coderag.eval.train_embedder --out DIR --mined /work/exp/mined --ship   # the shipped model
    python -m coderag.eval.train_embedder --out DIR --epochs 1 --lr 3e-5
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from coderag.eval.change_pairs import change_pairs
from coderag.eval.doc_pairs import DocPair, doc_pairs
from coderag.eval.history_repos import HISTORY_REPOS, TRAIN

# The training repositories whose code is also asked about in the tune split's question sets: left out, so
# that the tune questions are asked of code the model never trained on.
TUNE_CORPUS_REPOS = ("python-attrs/attrs",)
PAIRS_PER_REPO = 400
CHANGE_PAIRS_PER_REPO = 200
BATCH = 32
SCALE = 20.0  # cosines times 20: the usual temperature of sentence-transformers' in-batch loss
QUERY_TOKENS, CODE_TOKENS = 64, 128
FROZEN_LAYERS = 3
WARMUP = 0.1
DEFAULT_EPOCHS, DEFAULT_LR = 0.5, 1e-5


def training_pairs(snapshots: Path, per_repo: int = PAIRS_PER_REPO, mined: Optional[Path] = None,
                   change_per_repo: int = CHANGE_PAIRS_PER_REPO) -> Dict[str, List[DocPair]]:
    """repo -> its pairs, for each training repository whose snapshot is under `snapshots`: its doc-comment
    pairs and, where `mined` holds its mined queries (``<owner>+<name>.jsonl``), its change pairs."""
    from coderag.eval.ranker_data import snapshot_folder

    out: Dict[str, List[DocPair]] = {}
    for repo, (_, _, split) in sorted(HISTORY_REPOS.items()):
        folder = snapshot_folder(snapshots, repo)
        if split == TRAIN and repo not in TUNE_CORPUS_REPOS and folder.is_dir():
            pairs = doc_pairs(folder, per_repo)
            queries = mined / (repo.replace("/", "+") + ".jsonl") if mined else None
            if queries is not None and queries.is_file():
                pairs += change_pairs(queries, folder, change_per_repo)
            if len(pairs) >= BATCH:
                out[repo] = pairs
    return out


def batches(by_repo: Dict[str, List[DocPair]], rng: random.Random) -> List[List[DocPair]]:
    """Every full batch of one repository's pairs, the batches of all repositories shuffled together."""
    out = []
    for pairs in by_repo.values():
        pairs = list(pairs)
        rng.shuffle(pairs)
        out += [pairs[i:i + BATCH] for i in range(0, len(pairs) - BATCH + 1, BATCH)]
    rng.shuffle(out)
    return out


def fine_tune(by_repo: Dict[str, List[DocPair]], out: Path, *, epochs: float = DEFAULT_EPOCHS,
              lr: float = DEFAULT_LR, frozen_layers: int = FROZEN_LAYERS, base: Optional[str] = None,
              seed: int = 0, log=print) -> int:
    """Train from `base` (the bundled model) and save to `out`; the number of steps taken."""
    import torch
    from sentence_transformers import SentenceTransformer

    from coderag.base.config import Settings

    torch.manual_seed(seed)
    rng = random.Random(seed)
    settings = Settings()
    model = SentenceTransformer(str(base or settings.model_dir()), device="cpu")
    encoder = model[0].auto_model
    for p in encoder.embeddings.parameters():
        p.requires_grad = False
    for layer in encoder.encoder.layer[:frozen_layers]:
        for p in layer.parameters():
            p.requires_grad = False
    per_epoch = sum(len(pairs) // BATCH for pairs in by_repo.values())
    steps = max(1, math.ceil(per_epoch * epochs))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / (WARMUP * steps)) * max(0.0, (steps - s) / steps))

    def embed(texts: Sequence[str], tokens: int):
        model.max_seq_length = tokens
        return torch.nn.functional.normalize(model(model.preprocess(list(texts)))["sentence_embedding"], dim=-1)

    model.train()
    t0, step = time.time(), 0
    while step < steps:
        for batch in batches(by_repo, rng):
            q = embed([p.query for p in batch], QUERY_TOKENS)
            c = embed([p.code for p in batch], CODE_TOKENS)
            logits = q @ c.T * SCALE
            labels = torch.arange(len(batch))
            loss = (torch.nn.functional.cross_entropy(logits, labels)
                    + torch.nn.functional.cross_entropy(logits.T, labels)) / 2
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 20 == 0 or step == steps:
                spent = time.time() - t0
                left = spent / step * (steps - step)
                log(f"step {step}/{steps}  loss {loss.item():.3f}  {spent:.0f} s, about {left:.0f} s left")
            if step >= steps:
                break
    model.eval()
    model.max_seq_length = settings.embedding.window_tokens
    model.save(str(out))
    return steps


def main(argv: Optional[Sequence[str]] = None) -> int:
    from coderag.eval.ranker_data import history_root

    p = argparse.ArgumentParser(prog="python -m coderag.eval.train_embedder", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the folder the fine-tuned model is saved to")
    p.add_argument("--snapshots", help="the training repositories' snapshots (default: the history snapshots' folder)")
    p.add_argument("--per-repo", type=int, default=PAIRS_PER_REPO, help="doc-comment pairs per repository")
    p.add_argument("--mined", type=Path, help="the training repositories' mined queries (eval/history.py), one "
                   "<owner>+<name>.jsonl each: their change pairs join the doc-comment pairs")
    p.add_argument("--change-per-repo", type=int, default=CHANGE_PAIRS_PER_REPO, help="change pairs per repository")
    p.add_argument("--epochs", type=float, default=DEFAULT_EPOCHS)
    p.add_argument("--lr", type=float, default=DEFAULT_LR)
    p.add_argument("--frozen-layers", type=int, default=FROZEN_LAYERS)
    p.add_argument("--ship", action="store_true", help="also write the trained weights' difference to the bundled "
                   "model into the package (coderag/models/), which makes the model the default")
    a = p.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        p.error(f"{a.out} is not empty: name a new folder, so that no model is written over")
    snapshots = history_root(a.snapshots)
    if a.mined is not None and not a.mined.is_dir():
        p.error(f"--mined {a.mined} is not a folder: give the folder of the mined queries' <owner>+<name>.jsonl files")
    by_repo = training_pairs(snapshots, a.per_repo, a.mined, a.change_per_repo)
    if not by_repo:
        p.error(f"no training repository's snapshot under {snapshots}: make them with "
                "`python -m coderag.eval.ranker_data snapshots --mirror DIR`")
    print(f"{sum(map(len, by_repo.values()))} pairs from {len(by_repo)} repositories", file=sys.stderr)
    steps = fine_tune(by_repo, a.out, epochs=a.epochs, lr=a.lr, frozen_layers=a.frozen_layers,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"saved {a.out} after {steps} steps")
    if a.ship:
        from coderag.base.model_files import DELTA_FILE, wheel_model_dir, write_delta

        n = write_delta(a.out, wheel_model_dir(), DELTA_FILE)
        print(f"wrote the difference of {n} tensors to {DELTA_FILE}: the default model from now on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
