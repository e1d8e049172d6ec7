"""`coderag index`'s progress: a rich bar with files, chunks, rate and time left on a terminal; one line per
phase in a pipe or a CI log."""

from __future__ import annotations

import io
import re
import time

from coderag.cli_progress import IndexProgress

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_bar_shows_files_chunks_rate_and_time_left() -> None:
    from rich.console import Console

    out = io.StringIO()
    progress = IndexProgress(live=True, console=Console(file=out, force_terminal=True, width=120))
    progress("files", 0, 7)
    progress("embed", 32, 0)  # the first batch: the model has loaded by now
    time.sleep(0.05)
    progress("files", 3, 7)
    progress("embed", 32, 0)
    time.sleep(0.05)
    progress("files", 5, 7)
    progress.close()
    frames = [f for f in re.split(r"[\r\n]", ANSI.sub("", out.getvalue())) if f.strip()]
    last = frames[-1]
    assert re.search(r"indexing .*5/7 files, 64 chunks, \d+\.\d chunks/s", last), frames
    assert re.search(r"\d\d:\d\d left", last), last  # two batches are enough for an estimate
    assert 0 < progress.rate() < 32 / 0.05 * 1.1  # the first batch (model load) is not in the rate


def test_other_phases_get_their_own_line_on_the_bar() -> None:
    from rich.console import Console

    out = io.StringIO()
    progress = IndexProgress(live=True, console=Console(file=out, force_terminal=True, width=120))
    progress("files", 0, 0)  # a run that only removes files: nothing to count
    progress("line tokens", 4, 10)
    progress("optimize", 0, 0)
    progress.close()
    text = ANSI.sub("", out.getvalue())
    assert "counting the tokens of indexed lines" in text and "4/10 files" in text
    assert "building the vector index (HNSW)" in text and "indexing" not in text


def test_off_a_terminal_one_line_per_phase_and_nothing_else() -> None:
    out = io.StringIO()  # not a TTY: what CI logs and pipes get
    progress = IndexProgress(stream=out)
    assert not progress.live
    for phase, done, total in [("files", 0, 7), ("embed", 32, 0), ("files", 3, 7), ("embed", 32, 0),
                               ("files", 7, 7), ("optimize", 0, 0), ("optimize", 0, 0), ("upgrade", 10, 0)]:
        progress(phase, done, total)
    progress.close()
    assert out.getvalue().splitlines() == ["indexing 7 files...", "building the vector index (HNSW)...",
                                           "rewriting stored chunks in the current format..."]
    assert progress.embedded == 64

    out = io.StringIO()
    quiet = IndexProgress(stream=out)
    quiet("files", 0, 0)  # nothing changed but a deletion
    assert out.getvalue() == ""
