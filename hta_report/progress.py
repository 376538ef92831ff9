"""Progress and stage timings on stderr.

A :class:`Progress` is set for the duration of a command with :func:`using`;
code anywhere below calls ``progress.current().stage(...)`` or ``.update(...)``.
The default one does nothing, so the Python API stays silent.

- a live status line (rewritten in place) only when stderr is a terminal;
- with ``verbose``, one line per finished stage with its wall time, wherever
  stderr goes.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, List, Optional, TextIO, Tuple

from .escape import terminal


class Progress:
    """Stage timer and status line.

    Args:
        verbose: print each stage's time when it ends.
        stream: where to write (stderr).
        live: show a status line; default: when ``stream`` is a terminal.
    """

    def __init__(self, verbose: bool = False, stream: Optional[TextIO] = None, live: Optional[bool] = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.verbose = verbose
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty())
        self.live = live
        self.times: List[Tuple[str, float]] = []
        self._line = 0

    def update(self, message: str) -> None:
        """Replace the status line (terminal only)."""
        if not self.live:
            return
        text = terminal(message)[:100]
        self.stream.write("\r" + text + " " * max(0, self._line - len(text)))
        self.stream.flush()
        self._line = len(text)

    def clear(self) -> None:
        if self.live and self._line:
            self.stream.write("\r" + " " * self._line + "\r")
            self.stream.flush()
            self._line = 0

    def record(self, name: str, seconds: float) -> None:
        """Record a stage timed elsewhere (e.g. in a worker process)."""
        self.times.append((name, seconds))
        if self.verbose:
            self.clear()
            self.stream.write(f"hta-report: {seconds:8.2f} s  {terminal(name)}\n")
            self.stream.flush()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage; shows ``name...`` while it runs."""
        self.update(name + "...")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.record(name, time.perf_counter() - t0)

    def done(self) -> None:
        self.clear()


_NULL = Progress(stream=None, live=False)
_current: Progress = _NULL


def current() -> Progress:
    """The progress reporter of the running command (a silent one by default)."""
    return _current


@contextlib.contextmanager
def using(p: Progress) -> Iterator[Progress]:
    """Make ``p`` the current reporter inside the block."""
    global _current
    old, _current = _current, p
    try:
        yield p
    finally:
        p.done()
        _current = old
