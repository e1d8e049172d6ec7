"""`coderag index`'s progress on stderr: a rich bar on a terminal, one line per phase otherwise.

The indexer reports `progress(phase, done, total)` (pipelines/ingestion.py, migrations.py):
    files        done/total files of this run, after each committed batch
    vectors      done/total files whose vectors an owner computed after its BM25 pass (coderag/cli_owner.py)
    to embed     a batch of `total` files is split and `done` of its chunks are to be embedded (the rest are
                 cached): the file count moves through the batch as they are, and the time left is counted
                 from the chunks to embed (those announced so far, scaled to all the files)
    embed        `done` more chunks embedded (total 0): added up (coderag/base/build_clock.py)
    optimize     the HNSW graph is being built (no count)
    line tokens  done/total files whose line token counts are stored (an older index)
    upgrade      done chunks rewritten in the current payload format so far (total 0)
    recheck      done/total indexed files checked against the current file classes
"""

from __future__ import annotations

import sys
from typing import IO, Optional

from coderag.base.build_clock import COUNTED, PHASE_NAMES, BuildClock

# Each phase's one line off a terminal ({total}: the phase's total); its name on the bar is PHASE_NAMES's.
LINES = {
    "files": "indexing {total} files...",
    "vectors": "computing the vectors of {total} files...",
    "optimize": "building the vector index (HNSW)...",
    "line tokens": "counting the tokens of indexed lines ({total} files)...",
    "upgrade": "rewriting stored chunks in the current format...",
    "recheck": "checking {total} indexed files against the current file classes...",
}


class IndexProgress(BuildClock):
    """The `progress` callback of `coderag index`. `live`: draw a bar (default: stderr is a terminal);
    otherwise one line when a phase with work in it begins, and nothing else (logs of CI stay short). Its
    counts, rate and time left are those of BuildClock (coderag/base/build_clock.py)."""

    def __init__(self, live: Optional[bool] = None, stream: Optional[IO[str]] = None, console=None) -> None:
        super().__init__()
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._said: set[str] = set()
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._console = console

    def __call__(self, phase: str, done: int, total: int) -> None:
        self.count(phase, done, total)
        if phase == "to embed":
            return
        if not self.live:
            self._line(phase, total)
            return
        bar = self._bar or self._start()
        if phase == "embed":
            task = self._tasks.get("files")
            if task is None:  # chunks embedded outside a files pass (a migration re-reading files)
                task = self._tasks["files"] = bar.add_task(PHASE_NAMES["files"], total=None, chunks=0, unit="files")
            bar.update(task, completed=self.shown_files(), chunks=self.embedded, rate=self.rate(),
                       left=self.seconds_left())
            return
        task = self._tasks.get(phase)
        if task is None and not total and phase in ("files", "line tokens", "recheck"):
            return  # nothing to count (a run that only removes files)
        if task is None:
            label = PHASE_NAMES.get(phase, phase)
            task = self._tasks[phase] = bar.add_task(label, total=total or None, chunks=self.embedded,
                                                     unit=COUNTED.get(phase, ""))
        if phase == "optimize":
            bar.update(task, total=None)
        else:
            left = self.seconds_left() if phase == "files" else None
            bar.update(task, completed=done, total=total or None, chunks=self.embedded, rate=self.rate(), left=left)

    def _line(self, phase: str, total: int) -> None:
        if phase in self._said or phase not in LINES or (phase in ("files", "line tokens", "recheck") and not total):
            return
        self._said.add(phase)
        print(LINES[phase].format(total=total), file=self.stream, flush=True)

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
        """The time left from the chunks to embed (IndexProgress.seconds_left), else rich's estimate from the
        count done so far (a phase that embeds nothing), worded."""

        def __init__(self) -> None:
            super().__init__(compact=True, table_column=Column(no_wrap=True))

        def render(self, task) -> Text:
            if task.total is None or task.finished:
                return Text("")
            left = task.fields.get("left")
            if left is None:
                return Text(f"{super().render(task).plain} left", style="progress.remaining")
            minutes, seconds = divmod(int(left + 0.5), 60)
            hours, minutes = divmod(minutes, 60)
            shown = f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"
            return Text(f"{shown} left", style="progress.remaining")

    return Counts, TimeLeft
