"""Progress and stage timings on stderr, with the bytes parsed so far.

A :class:`Progress` is set for the duration of a command with :func:`using`;
code anywhere below calls ``progress.current().stage(...)`` or ``.update(...)``.
The default one does nothing, so the Python API stays silent.

- on a terminal: a live status line drawn by tqdm (the stage, and while
  traces are parsed the bytes read, of how many, the rate and the time left);
- elsewhere (a pipe, a CI log): a plain line once a stage has run for
  :data:`NEW_STAGE_S` seconds, then every :data:`HEARTBEAT_S` seconds while it runs (``hta-report: 20 s  parsing 2 files: 1.2 GB
  of 2.4 GB read (49 %), 61 MB/s``), so that a long parse shows that it moves;
- with ``verbose``, one line per finished stage with its wall time, wherever
  stderr goes.

The trace readers, in this process or in forked workers, count the bytes of
the files as stored (compressed for a gzip) with :func:`add_bytes`: a
counter in shared memory made before any worker is forked
(:data:`hta_report.workers` forks), read by the status line's thread.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import sys
import threading
import time
from typing import Any, Iterator, List, Optional, TextIO, Tuple

from .escape import terminal

#: Seconds between two plain progress lines when stderr is not a terminal.
HEARTBEAT_S = 10.0
#: Seconds a new status message must last before a plain line shows it (then
#: one line every :data:`HEARTBEAT_S` while it lasts).
NEW_STAGE_S = 2.0
#: Seconds between two redraws of the live status line.
TICK_S = 0.25

_counter: Any = None  # a multiprocessing.Value("q"): bytes read by every process of this run


def _shared_counter() -> Any:
    """The run's byte counter, made on first use in the main process (before
    the workers are forked, so that they share it)."""
    global _counter
    if _counter is None:
        _counter = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn").Value("q", 0)
    return _counter


def add_bytes(n: int) -> None:
    """Count ``n`` more bytes of trace read (as stored: compressed bytes of a
    gzip), from any process of this run. Does nothing when no command shows
    progress (the Python API)."""
    counter = _counter
    if counter is not None and n > 0:
        with counter.get_lock():
            counter.value += n


def bytes_read() -> int:
    """Bytes counted by :func:`add_bytes` since the counter was made."""
    return int(_counter.value) if _counter is not None else 0


def _size(n: float) -> str:
    """Bytes as a person reads them: ``812 kB``, ``1.2 GB`` (powers of 1000)."""
    for unit, base in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= base:
            return f"{n / base:.1f} {unit}" if n < 100 * base else f"{n / base:.0f} {unit}"
    return f"{n:.0f} B"


class Progress:
    """Stage timer and status line.

    Args:
        verbose: print each stage's time when it ends.
        stream: where to write (stderr).
        live: show a status line (tqdm); default: when ``stream`` is a terminal.
        heartbeat: seconds between plain lines when not ``live`` (None: none;
            the CLI passes :data:`HEARTBEAT_S`).
    """

    def __init__(self, verbose: bool = False, stream: Optional[TextIO] = None, live: Optional[bool] = None,
                 heartbeat: Optional[float] = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.verbose = verbose
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty())
        self.live = live
        self.heartbeat = None if live else heartbeat
        self.times: List[Tuple[str, float]] = []
        self.message = ""
        self._lock = threading.RLock()
        self._bar: Any = None
        self._stages = 0
        self._t0 = time.monotonic()
        self._bytes0 = 0
        self._expected = 0
        self._tb0 = self._message_since = time.monotonic()
        self._shown = ""  # the message of the last plain line
        self._bytes_depth = -1  # the stage depth whose bytes are shown (-1: none)
        self._last_line = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---------------------------------------------------------------- what code below calls

    def update(self, message: str) -> None:
        """Set the status message (shown on the live line and in plain lines)."""
        with self._lock:
            text = terminal(message)[:100]
            if text != self.message:
                self._message_since = time.monotonic()
            self.message = text
            if self._bar is not None:
                self._bar.set_description_str(self.message, refresh=True)

    def expect_bytes(self, total: int) -> None:
        """The bytes the readers are about to count (the files' sizes as
        stored); progress then shows a share of it and the time left."""
        with self._lock:
            self._bytes0, self._expected = bytes_read(), max(0, int(total))
            self._tb0, self._bytes_depth = time.monotonic(), self._stages  # shown until this stage ends
            if self._bar is not None:
                self._bar.reset(total=self._expected or None)
                self._bar.bar_format = _BAR if self._expected else _NO_TOTAL

    def record(self, name: str, seconds: float) -> None:
        """Record a stage timed elsewhere (e.g. in a worker process)."""
        self.times.append((name, seconds))
        if self.verbose:
            self._write(f"hta-report: {seconds:8.2f} s  {terminal(name)}")

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage; shows ``name...`` while it runs."""
        self.update(name + "...")
        t0 = time.perf_counter()
        with self._lock:
            self._stages += 1
        try:
            yield
        finally:
            with self._lock:
                if self._stages == self._bytes_depth:  # the stage that expected bytes is over
                    self._bytes_depth = -1
                    if self._bar is not None:
                        self._bar.reset(total=None)
                        self._bar.bar_format = _NO_TOTAL
                self._stages -= 1
            self.record(name, time.perf_counter() - t0)

    def clear(self) -> None:
        """Take the live line off the terminal (drawn again on the next tick)."""
        with self._lock:
            if self._bar is not None:
                self._bar.clear()

    # ---------------------------------------------------------------- the command's side

    def start(self) -> None:
        """Start showing progress (:func:`using` calls it): the byte counter is
        made now, before workers fork, and a thread draws the line."""
        if not self.live and self.heartbeat is None:
            return
        _shared_counter()
        self._t0 = self._last_line = time.monotonic()
        if self.live:
            from tqdm import tqdm

            self._bar = tqdm(total=None, file=self.stream, leave=False, dynamic_ncols=True, unit="B",
                             unit_scale=True, bar_format=_NO_TOTAL, mininterval=TICK_S, desc=self.message)
        self._thread = threading.Thread(target=self._tick, name="hta-report progress", daemon=True)
        self._thread.start()

    def done(self) -> None:
        """Stop the thread and take the live line away."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def line(self) -> str:
        """The plain progress line now: elapsed time, message, bytes."""
        with self._lock:
            elapsed = time.monotonic() - self._t0
            read = bytes_read() - self._bytes0 if self._bytes_depth >= 0 else 0
            text = f"hta-report: {elapsed:4.0f} s  {self.message or 'working'}"
            if read > 0:
                rate = read / max(time.monotonic() - self._tb0, 1e-9)
                if self._expected:
                    share = min(100.0, 100.0 * read / self._expected)
                    text += f": {_size(read)} of {_size(self._expected)} read ({share:.0f} %), {_size(rate)}/s"
                else:
                    text += f": {_size(read)} read, {_size(rate)}/s"
            return text

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self._bar is not None:
                    if self._bytes_depth >= 0:
                        self._bar.update(max(0, bytes_read() - self._bytes0 - self._bar.n))
                    else:
                        self._bar.refresh()  # the elapsed time moves
                elif self.heartbeat is not None and self._stages:
                    now = time.monotonic()
                    fresh = self.message != self._shown and now - self._message_since >= min(NEW_STAGE_S,
                                                                                                self.heartbeat)
                    if fresh or now - self._last_line >= self.heartbeat:
                        self._last_line, self._shown = now, self.message
                        self._write(self.line())

    def _write(self, text: str) -> None:
        with self._lock:
            if self.stream is None:
                return
            if self._bar is not None:
                self._bar.write(text, file=self.stream)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()


#: tqdm's line with a total and without one.
_BAR = "{desc} {n_fmt}B/{total_fmt}B {percentage:3.0f}% [{elapsed}<{remaining}, {rate_fmt}]"
_NO_TOTAL = "{desc} [{elapsed}]"

_NULL = Progress(stream=None, live=False)
_current: Progress = _NULL


def current() -> Progress:
    """The progress reporter of the running command (a silent one by default)."""
    return _current


@contextlib.contextmanager
def using(p: Progress) -> Iterator[Progress]:
    """Make ``p`` the current reporter inside the block (started on entry, stopped on exit)."""
    global _current
    old, _current = _current, p
    p.start()
    try:
        yield p
    finally:
        p.done()
        _current = old
