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


def test_time_left_comes_from_the_chunks_to_embed_and_files_move_within_a_batch() -> None:
    """Issue 26: the bar showed `--:-- left` for minutes and sat at 0/241 files while the first batch of 64
    files was embedded. The chunks a batch is to embed are announced before it starts: the file count moves
    with them, and the time left is those chunks (scaled to all the files) over the rate."""
    from rich.console import Console

    out = io.StringIO()
    progress = IndexProgress(live=True, console=Console(file=out, force_terminal=True, width=120))
    progress("files", 0, 128)
    progress("to embed", 100, 64)  # the first 64 files hold 100 chunks to embed
    progress("embed", 16, 0)  # the end of the first model call: the rate counts from here
    time.sleep(0.05)
    progress("embed", 16, 0)
    assert int(progress.shown_files()) == 20  # 64 files x 32/100 chunks
    left = progress.seconds_left()
    assert left is not None and abs(left * progress.rate() - (200 - 32)) < 8  # 200: 100 per 64 files, 128 files
    progress.close()
    frames = [f for f in re.split(r"[\r\n]", ANSI.sub("", out.getvalue())) if f.strip()]
    assert re.search(r"indexing .*20/128 files, 32 chunks", frames[-1]), frames
    assert re.search(r"\d\d:\d\d left", frames[-1]) and "--:--" not in frames[-1], frames[-1]


def test_a_time_left_in_words() -> None:
    from coderag.base.build_clock import worded

    assert [worded(s) for s in (4, 44, 61, 179, 3600 + 20 * 60)] == [
        "about 4 s", "about 40 s", "about 1 min", "about 3 min", "about 1 h 20 min"]
