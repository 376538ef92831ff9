"""C24: step-time outliers."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from ..errors import plural
from ..model import AnalysisResult, RankResult
from .base import (DOCS_PROFILER, EVIDENCE_RANKS, RESIDUAL, Fired, Verdict, claim, fine, ms, not_checked, rule,
                   worst_first)
from .claims import HOST, IDLE
from .config import AdviceConfig


def _analyzed(r: RankResult) -> Tuple[np.ndarray, np.ndarray]:
    """Numbers and durations (µs) of the rank's analyzed steps (warm-up excluded), in trace order."""
    steps = [s for s in r.steps.steps if not s.warmup]
    return (np.array([s.number for s in steps], dtype=np.int64),
            np.array([s.duration_us for s in steps], dtype=float))


def step_outliers(r: RankResult, sigma: float) -> List[Tuple[int, float, float, float]]:
    """Analyzed steps longer than the mean + ``sigma`` standard deviations
    (population) of the *other* analyzed steps, as ``(number, duration, mean,
    std)`` in µs. Leaving the step out keeps one outlier from inflating the
    statistics it is judged by. Fewer than two analyzed steps: none.

    Every step's leave-one-out mean and deviation come from the sums over all
    steps (centred on their mean, so the squares do not lose the digits that
    matter): O(n), where recomputing them per step was O(n²) (issue 56, 8)."""
    numbers, d = _analyzed(r)
    n = len(d)
    if n < 2:
        return []
    c = d - d.mean()
    mean_c = (c.sum() - c) / (n - 1)  # the others' mean, centred
    var = np.maximum((np.dot(c, c) - c * c) / (n - 1) - mean_c * mean_c, 0.0)
    mean, std = mean_c + d.mean(), np.sqrt(var)
    hit = np.flatnonzero(d > mean + sigma * std)
    return [(int(numbers[i]), float(d[i]), float(mean[i]), float(std[i])) for i in hit.tolist()]


def outlier_cost_us(r: RankResult, sigma: float) -> float:
    """Time per analyzed step (µs) the outliers take beyond the median of the
    other steps, averaged over all analyzed steps. Each outlier's "others"
    median is read off the steps sorted once (O(n log n))."""
    numbers, d = _analyzed(r)
    out = step_outliers(r, sigma)
    if not out:
        return 0.0
    s = np.sort(d)
    m = len(s) - 1  # the others
    extra = 0.0
    for _, dur, _, _ in out:
        p = int(np.searchsorted(s, dur, side="left"))  # leave out one copy of the outlier's duration

        def at(q: int) -> float:
            return float(s[q if q < p else q + 1])
        med = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
        extra += dur - med
    return extra / len(d)


@rule("step-time-outliers", "C24", "Some steps take much longer than the others",
      "SageMaker Debugger StepOutlier (3 σ); minimum steps: proposal",
      lambda c: f"a step > mean + {c.step_outlier_sigma:g} σ of the other steps "
                f"(needs >= {c.step_outlier_min_steps} analyzed steps)", DOCS_PROFILER, phase=RESIDUAL,
      description=("Steps longer than the mean plus a number of standard deviations of the other analyzed "
                   "steps (warm-up excluded). It runs after every cause, so its gain is only the outliers' "
                   "extra time no other finding claimed."),
      fix=("See what ran in the slow steps (the trace in Perfetto, or the report's steps chart): "
           "periodic evaluation, checkpointing or logging; garbage collection (`gc.freeze()` after "
           "setup); DataLoader worker restarts (`persistent_workers=True`)."))
def step_time_outliers(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C24: steps longer than the mean + ``step_outlier_sigma`` σ of the other
    analyzed steps (warm-up excluded), on ranks with at least
    ``step_outlier_min_steps`` analyzed steps. The gain is the outliers' extra
    time per step that no cause finding claimed already: the GPU idle left
    (GPU ranks) or host time (ranks without GPU activity). It runs after every
    cause (the residual phase), so it takes only what they left.

    A rank whose host ran ahead of its GPU (``replay.gpu_paced_step_us`` >
    0) is left out: its ``ProfilerStep`` windows time the host's enqueueing,
    and a long one there is the host blocked on a full launch queue (or the
    last step's wait for the GPU), not a slow step (an H200 TF32 run: one
    14.0 ms host step against 5.8 ms, every step 12.4 ms on the GPU)."""
    ranks = [r for r in result.ranks if sum(not s.warmup for s in r.steps.steps) >= cfg.step_outlier_min_steps]
    if not ranks:
        most = max((sum(not s.warmup for s in r.steps.steps) for r in result.ranks), default=0)
        return not_checked(f"needs >= {cfg.step_outlier_min_steps} analyzed steps per rank (found {most})")
    paced = [r for r in ranks if r.replay.gpu_paced_step_us > 0]
    ranks = [r for r in ranks if r.replay.gpu_paced_step_us <= 0]
    if not ranks:
        return not_checked(f"the host ran ahead of the GPU on {plural(len(paced), 'rank')}: its ProfilerStep "
                           "windows time the enqueueing, not the step")
    sigma = cfg.step_outlier_sigma
    hits = worst_first([r for r in ranks if step_outliers(r, sigma)], lambda r: outlier_cost_us(r, sigma))
    if not hits:
        return fine(f"no step beyond mean + {sigma:g} σ of the others")
    c = claim(fired, hits, lambda r: IDLE if r.has_gpu else HOST, lambda r: outlier_cost_us(r, sigma),
              "some steps are far slower than the rest")
    worst = c.worst
    evidence = [f"rank {r.rank}: step {number} took {ms(dur)} vs {ms(mean)} ± {ms(std)} (mean ± σ of the other "
                "steps)" for r in c.hits[:EVIDENCE_RANKS] for number, dur, mean, std in step_outliers(r, sigma)[:4]]
    evidence.append(f"rank {worst.rank}: the outliers add {ms(outlier_cost_us(worst, sigma))} per step on average")
    fix = ("# see what ran in the slow steps (the trace in Perfetto, or this report's steps chart):\n"
           "# periodic evaluation, checkpointing or logging; garbage collection: gc.freeze() after setup;\n"
           "# DataLoader worker restarts: DataLoader(..., persistent_workers=True)")
    return c.verdict(cfg, f"Step-time outliers: {plural(len(step_outliers(worst, sigma)), 'step')} far slower than "
                          "the rest", evidence, fix)
