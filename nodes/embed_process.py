"""The query embedder in a helper process, so that a search's query embedding overlaps its BM25 leg.

Why a process and not a thread: qdrant-edge holds the GIL while it searches, and the embedding needs the
GIL around its ONNX Runtime call (tokenizer, numpy, the call's own entry and exit). On a worker thread the
two take turns with the GIL, so each is slower while the other runs beside it; in a process of its own the
embedding is done before the BM25 leg is, and neither slows the other.

The protocol, over the child's stdin and stdout (native byte order, both ends are this machine):
  parent -> child: u32 length, then the query in UTF-8;
  child -> parent: f32 milliseconds spent embedding, then `dim` f32s (the unit vector).
On start the child embeds a warm-up query and writes `READY` + u32 dim. It exits at end of input, so it
never outlives its parent; it ignores SIGINT, which the terminal sends the whole process group.

The parent side (`EmbedProcess`) serves one request at a time; a caller that finds it busy, dead or slow
embeds in its own process instead.

    python -m coderag.nodes.embed_process MODEL_DIR ONNX_FILE [MAX_LENGTH]
"""

from __future__ import annotations

import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from array import array
from typing import Optional

log = logging.getLogger(__name__)
READY = b"READY"
START_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 5.0  # a query embedding takes ~5 ms; a helper this late is stuck, and is let go


def serve(model_dir: str, onnx_file: str, max_length: int) -> None:
    """The child's loop: read a query, write its vector, until the parent closes the pipe."""
    from coderag.nodes.onnx_encoder import OnnxEncoder

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    enc = OnnxEncoder(model_dir, onnx_file, max_length=max_length, threads=1)
    dim = enc.embed(["warm up"]).shape[1]
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    out.write(READY + struct.pack("=I", dim))
    out.flush()
    try:
        while True:
            head = inp.read(4)
            if len(head) < 4:
                return
            query = inp.read(struct.unpack("=I", head)[0]).decode("utf-8", "replace")
            t0 = time.perf_counter()
            vec = enc.embed([query])[0]
            out.write(struct.pack("=f", (time.perf_counter() - t0) * 1000) + vec.tobytes())
            out.flush()
    except BrokenPipeError:  # the parent went away mid-answer
        return


class EmbedProcess:
    """The parent's handle on a helper process (see the module docstring).

    >>> helper = EmbedProcess(model_dir, onnx_file).start()             # doctest: +SKIP
    >>> if helper.submit("parse an HTTP date header"):                   # doctest: +SKIP
    ...     vec, ms = helper.result()                                    # list of floats, compute time
    """

    def __init__(self, model_dir: str, onnx_file: str, max_length: int = 256) -> None:
        self.args = [sys.executable, "-m", "coderag.nodes.embed_process", str(model_dir), str(onnx_file),
                     str(max_length)]
        self._proc: Optional[subprocess.Popen] = None
        self._dim = 0
        self._busy = threading.Lock()  # held from submit() until result() has read the answer

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> "EmbedProcess":
        """Spawn the helper and wait until its model is loaded; on failure the handle stays dead (logged)."""
        try:
            # PYTHONSAFEPATH: the working directory is not put on sys.path, so a folder named like one of
            # our packages there cannot shadow the installed one (`-m` would otherwise import it first).
            self._proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=None, bufsize=0, close_fds=True,
                                          env={**os.environ, "PYTHONSAFEPATH": "1"})
            hello = self._read(len(READY) + 4, timeout)
            if hello is None or not hello.startswith(READY):
                raise RuntimeError("no READY from the helper")
            self._dim = struct.unpack("=I", hello[len(READY):])[0]
        except Exception as exc:
            log.warning("query embedding helper did not start (%s); queries are embedded in-process", exc)
            self.close()
        return self

    def submit(self, query: str) -> bool:
        """Send `query`; False (nothing sent) when the helper is dead or serving another search. After True
        the caller must call `result()`, which frees the helper for the next request."""
        if not self.alive or not self._busy.acquire(blocking=False):
            return False
        data = query.encode("utf-8", "replace")
        try:
            os.write(self._proc.stdin.fileno(), struct.pack("=I", len(data)) + data)
            return True
        except OSError as exc:
            self._fail(f"write failed: {exc}")
            self._busy.release()
            return False

    def result(self, timeout: float = RESULT_TIMEOUT_S) -> Optional[tuple[list[float], float]]:
        """The vector of the query last submitted and the helper's milliseconds for it; None if the helper
        died or took longer than `timeout` (it is then stopped: its answer would come out of turn)."""
        try:
            raw = self._read(4 + 4 * self._dim, timeout)
            if raw is None:
                self._fail("no answer")
                return None
            ms = struct.unpack("=f", raw[:4])[0]
            return array("f", raw[4:]).tolist(), ms
        finally:
            self._busy.release()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # the helper exits at end of input
            proc.wait(timeout=2)
        except Exception:
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def _fail(self, why: str) -> None:
        log.warning("query embedding helper stopped (%s); queries are embedded in-process", why)
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass

    def _read(self, n: int, timeout: float) -> Optional[bytes]:
        """Exactly n bytes from the helper within `timeout` seconds, else None."""
        if self._proc is None:
            return None
        fd, buf = self._proc.stdout.fileno(), bytearray()
        deadline = time.monotonic() + timeout
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None  # the helper exited
            buf += chunk
        return bytes(buf)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 256)
