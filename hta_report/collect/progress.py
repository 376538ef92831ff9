"""Progress lines on stderr while collecting (``-q`` turns them off)."""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class Progress:
    """Prints ``[collect rank R] ...`` lines to stderr.

    Step lines are throttled to one per ``interval_s`` seconds (the first and
    last scheduled steps are always shown); file and phase lines always print.

    Args:
        quiet: print nothing.
        rank: shown in the prefix when ``world_size > 1``.
        world_size: number of ranks; step lines print on rank 0 only.
        interval_s: minimum seconds between two step lines.
        stream: where to write; ``sys.stderr`` at call time by default.
    """

    def __init__(self, quiet: bool = False, rank: int = 0, world_size: int = 1,
                 interval_s: float = 1.0, stream: Optional[TextIO] = None) -> None:
        self.quiet = quiet
        self.rank = rank
        self.world_size = world_size
        self.interval_s = interval_s
        self._stream = stream
        self._last = 0.0

    def _prefix(self) -> str:
        return f"[collect rank {self.rank}]" if self.world_size > 1 else "[collect]"

    def message(self, text: str) -> None:
        """Print one line (unless quiet)."""
        if self.quiet:
            return
        stream = self._stream or sys.stderr
        print(f"{self._prefix()} {text}", file=stream, flush=True)

    def step(self, done: int, total: Optional[int], phase: str) -> None:
        """Report ``done`` profiler steps of ``total`` (None: open-ended), in ``phase``."""
        if self.quiet or self.rank != 0 or (total is not None and done > total):
            return
        now = time.monotonic()
        edge = done == 1 or (total is not None and done >= total)
        if not edge and now - self._last < self.interval_s:
            return
        self._last = now
        of = f"/{total}" if total is not None else ""
        self.message(f"step {done}{of} done ({phase})")
