"""Regression tests of issue 56: analyses an adversarial trace made slow or wrong.

Each test is built from the repro of one item of the issue (numbered as
there): a run with thousands of streams, a replay's cross-stream look-back
over many ``cudaStreamWaitEvent`` calls, the step-time outlier statistics,
a rank whose CUDA-graph kernels were dropped, and a per-step share taken of
a device window shorter than the step. Performance items assert on scaling
(the work at n against 4n), never on absolute times.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, List

import pytest

from hta_report.model import RankResult, StepStats, StepTime
from hta_report.rules.steps import outlier_cost_us, step_outliers


def _best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """The least wall time (s) of ``repeat`` calls of ``fn``: the noise of a
    shared machine only ever adds time."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


# --- item 8: step-time-outliers was O(n²) ------------------------------------------------------------


def _rank_with_steps(durations: List[float]) -> RankResult:
    """A rank whose ``ProfilerStep`` durations (µs) are ``durations``, the first one warm-up."""
    steps = [StepTime(number=i + 1, duration_us=d, warmup=i == 0) for i, d in enumerate(durations)]
    return RankResult(rank=0, file="rank-0.json", steps=StepStats(count=len(steps), steps=steps))


def _durations(n: int) -> List[float]:
    """``n`` steps around 10 ms with a spread, every 7th one far slower (and a tie among them)."""
    return [10_000.0 + (37 * i) % 101 + (25_000.0 if i % 7 == 3 else 0.0) for i in range(n)]


def _reference(r: RankResult, sigma: float):
    """The rule's statistics computed step by step with :mod:`statistics` (the O(n²) definition)."""
    steps = [s for s in r.steps.steps if not s.warmup]
    out = []
    for i, s in enumerate(steps):
        others = [t.duration_us for j, t in enumerate(steps) if j != i]
        mean, std = statistics.fmean(others), statistics.pstdev(others)
        if s.duration_us > mean + sigma * std:
            out.append((s.number, s.duration_us, mean, std))
    extra = sum(dur - statistics.median([s.duration_us for s in steps if s.number != number])
                for number, dur, _, _ in out)
    return out, extra / len(steps)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 3.0])
@pytest.mark.parametrize("n", [3, 4, 9, 60])
def test_step_outliers_match_the_leave_one_out_definition(n, sigma):
    """Same outliers, means, deviations and cost as the statistics of the other steps, step by step."""
    r = _rank_with_steps(_durations(n))
    want, cost = _reference(r, sigma)
    got = step_outliers(r, sigma)
    assert [(a, b) for a, b, _, _ in got] == [(a, b) for a, b, _, _ in want]
    assert [x for _, _, m, s in got for x in (m, s)] == pytest.approx([x for _, _, m, s in want for x in (m, s)],
                                                                      rel=1e-9, abs=1e-6)
    assert outlier_cost_us(r, sigma) == pytest.approx(cost, rel=1e-9)


def test_step_time_outliers_scale_linearly_with_the_steps():
    """Repro: each step's statistics were recomputed over all the others
    (``statistics.pstdev`` per step): O(n²), 4× the steps took 16× the time.
    Linear work takes about 4×; 8× leaves room for noise and is still half
    of what quadratic work takes."""
    small, large = _rank_with_steps(_durations(300)), _rank_with_steps(_durations(1200))

    def run(r):
        return lambda: (step_outliers(r, 3.0), outlier_cost_us(r, 3.0))
    t_small, t_large = _best_of(run(small)), _best_of(run(large))
    assert t_large < 8 * t_small, (t_small, t_large)
