"""`coderag eval`: score retrieval on labelled queries. Only click and the stdlib at import time."""

from __future__ import annotations

from pathlib import Path

import click

from coderag.base.budget import DEFAULT_MAX_TOKENS, MAX_TOKENS_LIMIT, MIN_TOKENS
from coderag.base.errors import CodeRagError
from coderag.base.lock import DEFAULT_WAIT_S


@click.command("eval")
@click.option("--dataset", default="all", show_default=True, metavar="NAME|PATH|all",
              help="A dataset of eval/datasets (e.g. click), a .jsonl file, or all of them.")
@click.option("--variants", default="bm25,dense,hybrid,full,ripgrep,li-bm25,bm25-window", show_default=True,
              help="Comma-separated, among bm25, dense, hybrid, full, ripgrep, li-bm25 (LlamaIndex's BM25Retriever "
                   "over the same leaves), bm25-window (BM25 over 40-line windows of code files). Without dense, "
                   "hybrid and full, corpora are indexed BM25-only (no embedding).")
@click.option("--max-tokens", type=click.IntRange(MIN_TOKENS, MAX_TOKENS_LIMIT), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Budget of the packed payload (full, and the payload share of every variant).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for results.json, summary.md and the chart (default: a new folder in the cache).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N queries of each dataset.")
@click.option("--set", "overrides", multiple=True, metavar="retrieval.KEY=VALUE",
              help="Change a retrieval setting for this run, e.g. --set retrieval.dense_weight=2 (repeatable).")
@click.option("--corpus-root", "corpus_roots", multiple=True, metavar="NAME=PATH",
              help="Index PATH for corpus NAME instead of fetching the pinned corpus; for a snapshot corpus "
                   "(swebench-dev), the folder of its snapshots, else $CODERAG_SWEBENCH_DIR (repeatable).")
@click.option("--wait", type=click.FloatRange(min=0), default=DEFAULT_WAIT_S, show_default=True, metavar="SECONDS",
              help="Seconds to wait while another coderag process holds a corpus' index.")
def eval_command(dataset: str, variants: str, max_tokens: int, out: Path | None, limit: int | None,
                 overrides: tuple[str, ...], corpus_roots: tuple[str, ...], wait: float) -> None:
    """Score retrieval on labelled queries: recall@k, MRR, nDCG, tokens and latency per variant.

    Indexes each corpus once (in <corpus>/.coderag, reused when up to date), runs every query through
    every variant, prints Markdown tables (all, tune and held-out splits, each kind, each corpus) and
    writes per-query results to --out. With --dataset all, a dataset whose local snapshots are not on
    this machine (swebench-dev: see its prepare.sh) is skipped with a note.
    """
    import datetime

    # Deferred: the eval pulls the datasets, the runner and (through it) LlamaIndex only when it runs.
    from coderag.eval.corpora import SNAPSHOTS, CorpusError, CorpusMissingError, cache_dir, fetch
    from coderag.eval.datasets import DatasetError, list_datasets, load_dataset
    from coderag.eval.report import markdown_report, write_run
    from coderag.eval.runner import VARIANTS, StatusLine, parse_overrides, run_eval

    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in chosen if v not in VARIANTS]
    if bad or not chosen:
        raise click.BadParameter(f"expected some of {', '.join(VARIANTS)} (not {', '.join(bad) or 'nothing'!r})",
                                 param_hint="--variants")
    try:
        over = parse_overrides(overrides)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from exc
    roots: dict[str, Path] = {}
    for item in corpus_roots:
        name, sep, path = item.partition("=")
        if not sep or not name or not Path(path).is_dir():
            raise click.BadParameter(f"expected NAME=PATH with an existing folder (not {item!r})",
                                     param_hint="--corpus-root")
        roots[name] = Path(path)
    names = list_datasets() if dataset == "all" else [dataset]
    if not names:
        raise click.ClickException("No datasets in eval/datasets/. Pass --dataset PATH.jsonl.")
    queries = []
    try:
        for name in names:
            qs = load_dataset(name)[:limit]
            # A snapshot corpus is made by hand (prepare.sh): without it, "all" goes on without that dataset.
            absent = [c for c in dict.fromkeys(q.corpus for q in qs) if c in SNAPSHOTS
                      and not (roots[c] if c in roots else SNAPSHOTS[c].folder()).is_dir()]
            if absent and dataset == "all":
                folder = SNAPSHOTS[absent[0]].folder()
                click.echo(f"skipping dataset {Path(name).stem}: the snapshots of {absent[0]} are not in {folder} "
                           f"(make them with its prepare.sh, or set {SNAPSHOTS[absent[0]].env})", err=True)
                continue
            if absent:
                raise CorpusMissingError(SNAPSHOTS[absent[0]].missing_message(SNAPSHOTS[absent[0]].folder()))
            queries.extend(qs)
    except (DatasetError, CorpusError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not queries:
        raise click.ClickException(f"Dataset {dataset!r} has no queries.")
    out = out or cache_dir().parent / "eval" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")

    def root_for(corpus: str) -> Path:
        return roots[corpus] if corpus in roots else fetch(corpus)

    try:
        from pydantic import ValidationError

        run = run_eval(queries, chosen, max_tokens, root_for_corpus=root_for, overrides=over,
                       status=StatusLine(), wait=wait)
    except ValidationError as exc:
        from coderag.base.config import render_errors

        raise click.BadParameter(render_errors(exc, "--set"), param_hint="--set") from exc
    except (CodeRagError, CorpusError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    files = write_run(run, out)
    click.echo(markdown_report(run.summary))
    click.echo(f"per-query results: {files['results']}", err=True)
    if files["chart"]:
        click.echo(f"chart: {files['chart']}", err=True)
    else:
        click.echo('chart skipped: matplotlib is not installed (pip install matplotlib)', err=True)


@click.command("train-ranker")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder made by `python -m coderag.eval.ranker_data` (queries.jsonl and dump/).")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Cross-validation folds; a repository is never split between folds.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Model file to write (default: the one shipped in the package).")
@click.option("--no-write", is_flag=True, help="Report only; leave the model file as it is.")
def train_ranker_command(data: Path, folds: int, out: Path | None, no_write: bool) -> None:
    """Rebuild the learned ranker from mined queries: cross-validation by repository, then a report on the
    held-out repositories beside the rules and each leg (eval/README.md says how the data is made)."""
    from coderag.eval.train_ranker import main as train_main

    args = ["--data", str(data), "--folds", str(folds)] + (["--out", str(out)] if out else [])
    raise SystemExit(train_main(args + (["--no-write"] if no_write else [])))


@click.command("train-adapter")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder made by `python -m coderag.eval.ranker_data` (dump/).")
@click.option("--snapshots", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The indexed snapshots of the mined repositories (default: $CODERAG_HISTORY_DIR).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Adapter file to write (default: the one shipped in the package).")
@click.option("--no-write", is_flag=True, help="Report only; leave the adapter file as it is.")
def train_adapter_command(data: Path, snapshots: Path | None, out: Path | None, no_write: bool) -> None:
    """Rebuild the dense leg's query adapter from mined queries: its strength chosen on training repositories
    left out, then a report on the held-out repositories beside the plain embedding (eval/README.md)."""
    from coderag.eval.train_adapter import main as train_main

    args = ["--data", str(data)] + (["--snapshots", str(snapshots)] if snapshots else [])
    args += (["--out", str(out)] if out else []) + (["--no-write"] if no_write else [])
    raise SystemExit(train_main(args))
