"""Chunk report: how a tree would be chunked, without embedding anything (splitter and breadcrumbs only).

Not a test: it prints numbers. The tree is walked and read exactly as `coderag index` reads it
(ignore rules, secrets and data files, generated and minified files), each file is split by
`CodeHierarchySplitter` and every leaf gets its breadcrumb from `PathInjector`. Then, for each
`chunking.min_tokens` asked (default: 0, i.e. no merging of tiny siblings, and the configured value):

* chunks per 1,000 lines: leaf chunks (what is embedded and BM25-indexed) per 1,000 lines of the
  indexed files;
* tokens embedded per source token: what the model reads (breadcrumb + chunk text, window overlaps
  included, each chunk cut at the model's window as the embedder cuts it) over the model tokens of the
  indexed files. 1.0 would be every token read once and no breadcrumb; hash dedup is not applied;
* the distribution of chunk sizes, in lines and in tokens, and the leaves by kind.

Usage::

    python eval/chunk_report.py PATH                     # min_tokens 0 and the configured value
    python eval/chunk_report.py PATH --min-tokens 0 32 64
    python eval/chunk_report.py PATH --min-tokens 0 --without-file-classes   # as before issue 16
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

TOKEN_BUCKETS = (16, 32, 48, 64, 128, 201)


def read_documents(root: Path, settings) -> tuple[list, Counter]:
    """The Documents `coderag index` would split, and the skips by reason."""
    from coderag.nodes.gitignore_filter import skip_reason
    from coderag.nodes.ignore import IgnoreMatcher
    from coderag.nodes.reader import make_document
    from coderag.nodes.scan import SkipLog, read_text_file, walk

    skips = SkipLog()
    docs = []
    for entry in walk(root, IgnoreMatcher(root, skips=skips), skips):  # the matcher notes secrets and data
        ft = read_text_file(entry, skips, settings.chunking.max_file_bytes)
        if ft is None:
            continue
        reason = skip_reason(ft.text, settings.chunking.max_line_chars)
        if reason:
            skips.add(entry.rel_path, reason)
            continue
        docs.append(make_document(ft))
    return docs, skips.counts


def _without_file_classes() -> None:
    """The reader of before issue 16: no secret or data file left out, by name or by content."""
    from coderag.nodes import ignore, scan

    scan.content_class = lambda rel_path, data: None
    ignore.secret_name = ignore.data_name = lambda rel_path: None


def _quantiles(values: list[int], qs=(0.1, 0.25, 0.5, 0.75, 0.9)) -> list[int]:
    if not values:
        return [0 for _ in qs]
    s = sorted(values)
    return [s[min(len(s) - 1, int(q * len(s)))] for q in qs]


def measure(docs: list, settings, min_tokens: int) -> dict:
    """Split every document with `min_tokens` and count what would be embedded."""
    from coderag.nodes.code_splitter import CodeHierarchySplitter
    from coderag.nodes.keys import BREADCRUMB_KEY
    from coderag.nodes.path_injection import PathInjector
    from coderag.nodes.tokens import TokenCounter

    s = settings
    tok = str(s.model_dir() / "tokenizer.json")
    window = s.embedding.window_tokens - 2  # [CLS] and [SEP]
    splitter = CodeHierarchySplitter(tokenizer_path=tok, max_tokens=s.chunking.max_tokens, min_tokens=min_tokens,
                                     overlap_lines=s.chunking.overlap_lines,
                                     signatures_only_bytes=s.chunking.signatures_only_bytes,
                                     signatures_only_lines=s.chunking.signatures_only_lines)
    injector = PathInjector(tokenizer_path=tok, max_tokens=window - s.chunking.max_tokens)
    counter = TokenCounter(tok)
    crumb_tokens: dict[str, int] = {}
    out = {"lines": 0, "source_tokens": 0, "leaves": 0, "parents": 0, "text_tokens": 0, "crumb_tokens": 0,
           "embedded_tokens": 0, "leaf_lines": [], "leaf_tokens": [], "kinds": Counter()}
    t0 = time.perf_counter()
    for doc in docs:
        lines = doc.text.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines.pop()
        per_line = counter.line_counts(lines)
        out["lines"] += len(lines)
        out["source_tokens"] += sum(per_line)
        nodes = splitter.split_document(doc)
        leaves = [n for n in nodes if n.metadata.get("is_leaf", True)]
        out["parents"] += len(nodes) - len(leaves)
        injector(leaves)
        for n in leaves:
            m = n.metadata
            text = sum(per_line[m["start_line"] - 1:m["end_line"]])  # WordPiece: a join's tokens are the sum
            crumb = m[BREADCRUMB_KEY]
            if crumb not in crumb_tokens:
                crumb_tokens[crumb] = counter.count(crumb)
            out["leaves"] += 1
            out["text_tokens"] += text
            out["crumb_tokens"] += crumb_tokens[crumb]
            out["embedded_tokens"] += min(window, text + crumb_tokens[crumb])
            out["leaf_lines"].append(m["end_line"] - m["start_line"] + 1)
            out["leaf_tokens"].append(text)
            out["kinds"][m["kind"]] += 1
    out["seconds"] = time.perf_counter() - t0
    return out


def render(root: Path, docs: list, skips: Counter, runs: dict[int, dict]) -> str:
    first = next(iter(runs.values()))
    rows = [f"chunk report: {root}",
            f"  files indexed: {len(docs)}, lines: {first['lines']:,}, source tokens: {first['source_tokens']:,}",
            "  skipped: " + (", ".join(f"{k} {v}" for k, v in sorted(skips.items())) or "none"),
            ""]
    head = f"  {'min_tokens':>10} {'leaves':>8} {'parents':>8} {'chunks/1k lines':>16} {'embedded/source tok':>20}" \
           f" {'(text':>7} {'+ crumbs)':>9} {'split s':>8}"
    rows.append(head)
    for mt, r in runs.items():
        lines, src = max(r["lines"], 1), max(r["source_tokens"], 1)
        rows.append(f"  {mt:>10} {r['leaves']:>8,} {r['parents']:>8,} {1000 * r['leaves'] / lines:>16.1f}"
                    f" {r['embedded_tokens'] / src:>20.3f} {r['text_tokens'] / src:>7.3f} {r['crumb_tokens'] / src:>9.3f}"
                    f" {r['seconds']:>8.1f}")
    rows.append("")
    rows.append("  chunk sizes (leaves):      lines p10/p25/p50/p75/p90   <=4 lines   tokens p10/p25/p50/p75/p90")
    for mt, r in runs.items():
        n = max(len(r["leaf_lines"]), 1)
        small = sum(1 for x in r["leaf_lines"] if x <= 4) / n
        lq = "/".join(str(x) for x in _quantiles(r["leaf_lines"]))
        tq = "/".join(str(x) for x in _quantiles(r["leaf_tokens"]))
        rows.append(f"  min_tokens {mt:>3}: {lq:>30} {small:>10.0%}   {tq:>28}")
    rows.append("")
    edges = ["<" + str(TOKEN_BUCKETS[0])] + [f"{a}-{b - 1}" for a, b in zip(TOKEN_BUCKETS, TOKEN_BUCKETS[1:])] + \
        [f">{TOKEN_BUCKETS[-1] - 1}"]
    rows.append("  leaves by tokens:  " + "".join(f"{e:>9}" for e in edges))
    for mt, r in runs.items():
        counts = [0] * (len(TOKEN_BUCKETS) + 1)
        for t in r["leaf_tokens"]:
            counts[next((i for i, b in enumerate(TOKEN_BUCKETS) if t < b), len(TOKEN_BUCKETS))] += 1
        n = max(len(r["leaf_tokens"]), 1)
        rows.append(f"  min_tokens {mt:>3}:   " + "".join(f"{c / n:>9.0%}" for c in counts))
    rows.append("")
    for mt, r in runs.items():
        rows.append(f"  kinds, min_tokens {mt}: " + ", ".join(f"{k} {v:,}" for k, v in r["kinds"].most_common()))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="the tree to chunk")
    ap.add_argument("--min-tokens", type=int, nargs="+", default=None,
                    help="chunking.min_tokens values to compare (default: 0 and the configured value)")
    ap.add_argument("--config", default=None, help="a qdrant.yaml (default: the tree's own, else the defaults)")
    ap.add_argument("--without-file-classes", action="store_true",
                    help="read the tree as coderag did before secrets and data files were left out (issue 16)")
    args = ap.parse_args(argv)
    from coderag.base.config import load_settings

    if args.without_file_classes:
        _without_file_classes()

    root = Path(args.path).resolve()
    settings = load_settings(root, args.config)
    values = args.min_tokens if args.min_tokens is not None else [0, settings.chunking.min_tokens]
    docs, skips = read_documents(root, settings)
    runs = {mt: measure(docs, settings, mt) for mt in dict.fromkeys(values)}
    print(render(root, docs, skips, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
