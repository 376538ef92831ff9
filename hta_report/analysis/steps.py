"""Step times from ``ProfilerStep#N`` annotations."""
from __future__ import annotations

import numpy as np

from ..model import StepStats, StepTime
from ..load.iteration import STEP_NUMBER
from .events import RankEvents, is_step, memoized


@memoized
def step_windows(ev: RankEvents) -> np.ndarray:
    """``(n, 3)`` array of ``[number, start_us, end_us]`` per ``ProfilerStep#N``
    on the CPU timeline, sorted by start. Empty when the trace has none.
    Computed once per rank (:func:`~.events.memoized`)."""
    cpu = ev.cpu
    names = cpu["s_name"]
    rows = cpu[is_step(names)]
    out = []
    for name, ts, end in zip(rows["s_name"], rows["ts"], rows["end"]):
        number = STEP_NUMBER.match(name)
        assert number is not None  # is_step kept only the names this pattern matches
        out.append((int(number.group(1)), float(ts), float(end)))
    out.sort(key=lambda r: r[1])
    # one annotation per step number (the CPU one); drop duplicates
    seen, unique = set(), []
    for r in out:
        if r[0] not in seen:
            seen.add(r[0])
            unique.append(r)
    return np.array(unique, dtype=float).reshape(-1, 3)


def analyzed_windows(windows: np.ndarray) -> np.ndarray:
    """The steps the per-step statistics use: all but the first (warm-up) step
    when there are at least two."""
    return windows[1:] if len(windows) >= 2 else windows


def step_stats(ev: RankEvents) -> StepStats:
    """Count, mean, p50, p90 and max step time (µs) of a rank.

    The first step is marked warm-up and excluded from the statistics when
    there are at least two steps. Percentiles use linear interpolation
    (``numpy.percentile``).
    """
    windows = step_windows(ev)
    if len(windows) == 0:
        return StepStats()
    steps = [
        StepTime(number=int(n), duration_us=float(e - s), warmup=(i == 0 and len(windows) >= 2), start_us=float(s))
        for i, (n, s, e) in enumerate(windows)
    ]
    used = analyzed_windows(windows)
    d = used[:, 2] - used[:, 1]
    return StepStats(
        count=len(steps),
        mean_us=float(d.mean()),
        p50_us=float(np.percentile(d, 50)),
        p90_us=float(np.percentile(d, 90)),
        max_us=float(d.max()),
        warmup_excluded=len(windows) >= 2,
        steps=steps,
    )
