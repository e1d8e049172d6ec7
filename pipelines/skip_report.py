"""The files of a tree left out of its index, one account for `coderag index`, `index --verbose`, `status`
and the owner's index_status: they disagreed (14, 3 and "11 skipped" above a list adding up to 14) when
each counted a part."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from coderag.nodes.scan import SkipLog
from coderag.store.state import IndexState


def skip_report(state: IndexState, walk_skips: SkipLog, details: Iterable[tuple[str, str, str]] = ()
                ) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    """Counts by reason, and (path, reason, detail) of each skipped file: those this walk never opened
    (secrets and data by name, links, unreadable folders: `walk_skips`), and those read once and left out,
    whichever run read them (the manifest: binary, too-large, secret by content, ...). `details`: the
    (path, reason, detail) a run just noted: their details, which the manifest does not keep, and those it
    has no row for (a file that vanished while the run read it)."""
    counts = Counter(walk_skips.counts)
    items = list(walk_skips.items)
    seen = {path for path, _, _ in items}
    noted = {path: (reason, detail) for path, reason, detail in details}
    for path, reason in state.skipped_files():
        if path not in seen:
            seen.add(path)
            counts[reason] += 1
            items.append((path, reason, noted.get(path, (reason, ""))[1]))
    for path, (reason, detail) in noted.items():
        if path not in seen:
            counts[reason] += 1
            items.append((path, reason, detail))
    return dict(counts), items
