"""Secret spans: what the secret rules mask where no secret was planted, and what a new rules version changes.

Not a test: it prints what it finds. A new rules version (nodes/secret_tokens.py, file_classes.RULES_VERSION)
is judged by what it adds over real code: each new span is a secret, an example key of docs or tests (harmless
to mask), or a false positive that would hide code from a search. `dump` reads every text file below the
folders given (as large as 2 MB; `.git`, `.coderag` and `node_modules` left out) and writes each file's spans;
`diff` prints the spans one dump has and the other has not, each with the bytes around it.

The rules before a change come from a copy of their module (it is stdlib only), e.g. from git::

    git show HEAD:nodes/secret_tokens.py > /tmp/rules_before.py
    python eval/secret_spans.py dump /tmp/before.json TREE... --rules /tmp/rules_before.py
    python eval/secret_spans.py dump /tmp/after.json TREE...
    python eval/secret_spans.py diff /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

MAX_BYTES = 2_000_000
SKIPPED_DIRS = frozenset({".git", ".coderag", "node_modules"})
CONTEXT = 30  # bytes shown before a span (and a few after)


def rules_from(path: str | None) -> Callable[[bytes], list]:
    """`secret_spans` of the rules module at `path`, or of the installed coderag's."""
    if path is None:
        from coderag.nodes.secret_tokens import secret_spans

        return secret_spans
    spec = importlib.util.spec_from_file_location("rules_under_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.secret_spans


def text_files(tops: list[str]) -> Iterator[tuple[str, bytes]]:
    for top in tops:
        for dirpath, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    if os.path.islink(path) or os.path.getsize(path) > MAX_BYTES:
                        continue
                    data = Path(path).read_bytes()
                except OSError:
                    continue
                if b"\0" not in data[:4096]:
                    yield path, data


def dump(out: str, tops: list[str], rules: str | None) -> None:
    secret_spans = rules_from(rules)
    spans, files = {}, 0
    for path, data in text_files(tops):
        files += 1
        found = secret_spans(data)
        if found:
            spans[path] = [[s, e, kind, data[max(0, s - CONTEXT):e + 5].decode("utf-8", "replace")]
                           for s, e, kind in found]
    Path(out).write_text(json.dumps({"files": files, "spans": spans}), encoding="utf-8")
    print(f"{files} files, {sum(map(len, spans.values()))} spans in {len(spans)} files -> {out}")


def diff(before: str, after: str) -> None:
    a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in (before, after))
    print(f"files read: {a['files']} before, {b['files']} after")
    added = removed = 0
    for path in sorted(set(a["spans"]) | set(b["spans"])):
        old = {tuple(x[:3]) for x in a["spans"].get(path, [])}
        new = {tuple(x[:3]) for x in b["spans"].get(path, [])}
        for mark, spans, other in (("+", b["spans"].get(path, []), old), ("-", a["spans"].get(path, []), new)):
            for s, e, kind, around in spans:
                if (s, e, kind) not in other:
                    print(f"{mark} {path}:{s}-{e} {kind}: {around[:140]!r}")
                    added, removed = added + (mark == "+"), removed + (mark == "-")
    print(f"{added} spans added, {removed} gone")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="every span below the folders, to a JSON file")
    d.add_argument("out")
    d.add_argument("trees", nargs="+")
    d.add_argument("--rules", help="a copy of nodes/secret_tokens.py to use instead of the installed one")
    f = sub.add_parser("diff", help="the spans two dumps do not share")
    f.add_argument("before")
    f.add_argument("after")
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.out, args.trees, args.rules)
    else:
        diff(args.before, args.after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
