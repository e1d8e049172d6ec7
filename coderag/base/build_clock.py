"""How far an indexing run has got and how long it has left, from the `progress(phase, done, total)` calls the
indexer makes (pipelines/ingestion.py): the one reckoning that `coderag index`'s bar (coderag/cli_progress.py)
and an owner's status (`coderag status`, the `index_status` tool) both show.

Embedding is nearly all of a run's time, so the time left is the chunks still to embed over the rate so far.
A batch announces how many of its chunks are to be embedded (`to embed`; the rest are cached) before it
starts, so the chunks of the files not split yet are guessed from those announced so far, per file.
"""

from __future__ import annotations

import time
from typing import Optional


# What each counted phase is called, on `coderag index`'s bar and in the holder's line of the writer lock.
PHASE_NAMES = {
    "files": "indexing",
    "vectors": "computing vectors",
    "optimize": "building the vector index (HNSW)",
    "line tokens": "counting the tokens of indexed lines",
    "upgrade": "rewriting stored chunks in the current format",
    "recheck": "checking indexed files against the file classes",
    "reading": "checking how indexed files are read",
}
COUNTED = {"files": "files", "vectors": "files", "line tokens": "files", "recheck": "files", "reading": "files",
           "upgrade": "chunks"}


class BuildClock:
    """Fed every progress call of one run: `files` (done/total files committed), `to embed` (a batch of
    `total` files holds `done` chunks to embed) and `embed` (`done` more chunks embedded); other phases
    are not counted."""

    def __init__(self) -> None:
        self.embedded = 0
        self._first: Optional[tuple[float, int]] = None  # (when, chunks) at the end of the first embedded batch
        self._files = (0, 0)  # files committed, of all
        self._batch = (0, 0, 0)  # the batch in progress: its files, its chunks to embed, chunks embedded before it
        self._planned = (0, 0)  # chunks to embed announced so far, and the files they came from
        self._phase = ("", 0, 0)  # the last named phase (PHASE_NAMES) and its count

    def count(self, phase: str, done: int, total: int) -> None:
        if phase in PHASE_NAMES:
            self._phase = (phase, done, total)
        if phase == "to embed":
            self._batch = (total, done, self.embedded)
            self._planned = (self._planned[0] + done, self._planned[1] + total)
        elif phase == "embed":
            self.embedded += done
            if not self._first:  # the first batch's end: the model is loaded by then
                self._first = (time.monotonic(), self.embedded)
        elif phase == "files":
            self._files, self._batch = (done, total), (0, 0, 0)

    def rate(self) -> float:
        """Chunks embedded per second since the first batch (loading the model is not embedding)."""
        if not self._first or self.embedded == self._first[1]:
            return 0.0
        return (self.embedded - self._first[1]) / max(1e-6, time.monotonic() - self._first[0])

    def seconds_left(self) -> Optional[float]:
        """Chunks still to embed over the rate so far; None before there is a rate."""
        rate, (chunks, files), total = self.rate(), self._planned, self._files[1]
        if not rate or not files or not total:
            return None
        return max(0.0, chunks * max(total, files) / files - self.embedded) / rate

    def doing(self) -> str:
        """The run's phase in words: "indexing: 120 of 347 files, about 3 min left"; "" before the first."""
        phase, done, total = self._phase
        if not phase:
            return ""
        unit = COUNTED.get(phase)
        if phase == "files":
            done = int(self.shown_files())
        text = PHASE_NAMES[phase] + (f": {done} of {total} {unit}" if unit and total else
                                     f": {done} {unit}" if unit else "")
        left = self.seconds_left() if phase == "files" else None
        return text + (f", {worded(left)} left" if left is not None else "")

    def shown_files(self) -> float:
        """Files committed, plus the share of the batch in progress its embedded chunks stand for."""
        files, to_embed, before = self._batch
        done = self._files[0]
        if files and to_embed:
            done += files * min(1.0, (self.embedded - before) / to_embed)
        return min(done, self._files[1]) if self._files[1] else done


def worded(seconds: float) -> str:
    """A time left in words a status line can show: "about 40 s", "about 3 min", "about 1 h 20 min"."""
    if seconds < 60:
        return f"about {max(1, round(seconds / 10) * 10 if seconds >= 10 else round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    return f"about {minutes // 60} h {minutes % 60} min"
