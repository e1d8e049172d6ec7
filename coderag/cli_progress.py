"""`coderag index`'s progress on stderr: a rich bar on a terminal, one line per phase otherwise.

The indexer reports `progress(phase, done, total)` (pipelines/ingestion.py, migrations.py):
    files        done/total files of this run, after each committed batch
    embed        `done` more chunks embedded (total 0): added up here
    optimize     the HNSW graph is being built (no count)
    line tokens  done/total files whose line token counts are stored (an older index)
    upgrade      done chunks rewritten in the current payload format so far (total 0)
    recheck      done/total indexed files checked against the current file classes
"""

from __future__ import annotations

import sys
import time
from typing import IO, Optional

# What each phase is called on the bar, and its one line off a terminal ({total}: the phase's total).
PHASES = {
    "files": ("indexing", "indexing {total} files..."),
    "optimize": ("building the vector index (HNSW)", "building the vector index (HNSW)..."),
    "line tokens": ("counting the tokens of indexed lines", "counting the tokens of indexed lines ({total} files)..."),
    "upgrade": ("rewriting stored chunks in the current format", "rewriting stored chunks in the current format..."),
    "recheck": ("checking indexed files against the file classes", "checking {total} indexed files against the "
                                                                  "current file classes..."),
}
COUNTED = {"files": "files", "line tokens": "files", "recheck": "files", "upgrade": "chunks"}


class IndexProgress:
    """The `progress` callback of `coderag index`. `live`: draw a bar (default: stderr is a terminal);
    otherwise one line when a phase with work in it begins, and nothing else (logs of CI stay short)."""

    def __init__(self, live: Optional[bool] = None, stream: Optional[IO[str]] = None, console=None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.embedded = 0
        self._said: set[str] = set()
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._console = console
        self._first: Optional[tuple[float, int]] = None  # (when, chunks) at the end of the first embedded batch

    def rate(self) -> float:
        """Chunks embedded per second since the first batch (loading the model is not embedding)."""
        if not self._first or self.embedded == self._first[1]:
            return 0.0
        return (self.embedded - self._first[1]) / max(1e-6, time.monotonic() - self._first[0])

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase == "embed":
            self.embedded += done
            if not self._first:  # the first batch's end: the model is loaded by then
                self._first = (time.monotonic(), self.embedded)
        if not self.live:
            self._line(phase, total)
            return
        bar = self._bar or self._start()
        if phase == "embed":
            task = self._tasks.get("files")
            if task is None:  # chunks embedded outside a files pass (a migration re-reading files)
                task = self._tasks["files"] = bar.add_task(PHASES["files"][0], total=None, chunks=0, unit="files")
            bar.update(task, chunks=self.embedded, rate=self.rate())
            return
        task = self._tasks.get(phase)
        if task is None and not total and phase in ("files", "line tokens", "recheck"):
            return  # nothing to count (a run that only removes files)
        if task is None:
            label = PHASES.get(phase, (phase, ""))[0]
            task = self._tasks[phase] = bar.add_task(label, total=total or None, chunks=self.embedded,
                                                     unit=COUNTED.get(phase, ""))
        if phase == "optimize":
            bar.update(task, total=None)
        else:
            bar.update(task, completed=done, total=total or None, chunks=self.embedded, rate=self.rate())

    def _line(self, phase: str, total: int) -> None:
        if phase in self._said or phase not in PHASES or (phase in ("files", "line tokens", "recheck") and not total):
            return
        self._said.add(phase)
        print(PHASES[phase][1].format(total=total), file=self.stream, flush=True)

    def _start(self):
        # Deferred: rich only when a bar is drawn (`coderag --help` and piped runs never import it).
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

        counts, left = _columns()
        console = self._console or Console(file=self.stream)
        self._bar = Progress(SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                             BarColumn(bar_width=20), counts(), left(), console=console,
                             transient=True, redirect_stdout=False, speed_estimate_period=60.0)
        self._bar.start()
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _columns():
    """The bar's own columns; they subclass rich's, so they are defined once rich is imported."""
    from rich.progress import ProgressColumn, TimeRemainingColumn
    from rich.table import Column
    from rich.text import Text

    class Counts(ProgressColumn):
        """'3/7 files, 32 chunks, 12.5 chunks/s' (or what the phase counts)."""

        def __init__(self) -> None:
            super().__init__(table_column=Column(no_wrap=True))

        def render(self, task) -> Text:
            unit = task.fields.get("unit", "")
            if not unit:
                return Text("")
            done = f"{int(task.completed)}/{int(task.total)}" if task.total else f"{int(task.completed)}"
            text = f"{done} {unit}"
            if unit == "files" and task.fields.get("chunks"):
                text += f", {task.fields['chunks']} chunks"
                if task.fields.get("rate"):
                    text += f", {task.fields['rate']:.1f} chunks/s"
            return Text(text, style="progress.download")

    class TimeLeft(TimeRemainingColumn):
        """rich's estimate from the files done so far, worded."""

        def __init__(self) -> None:
            super().__init__(compact=True, table_column=Column(no_wrap=True))

        def render(self, task) -> Text:
            if task.total is None or task.finished:
                return Text("")
            return Text(f"{super().render(task).plain} left", style="progress.remaining")

    return Counts, TimeLeft
