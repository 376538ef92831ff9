"""C24: step-time outliers."""
from __future__ import annotations

import statistics
from typing import List, Tuple

from ..errors import plural
from ..model import AnalysisResult, RankResult
from .base import (DOCS_PROFILER, EVIDENCE_RANKS, RESIDUAL, Fired, Verdict, claim, fine, ms, not_checked, rule,
                   worst_first)
from .claims import HOST, IDLE
from .config import AdviceConfig


def step_outliers(r: RankResult, sigma: float) -> List[Tuple[int, float, float, float]]:
    """Analyzed steps longer than the mean + ``sigma`` standard deviations
    (population) of the *other* analyzed steps, as ``(number, duration, mean,
    std)`` in µs. Leaving the step out keeps one outlier from inflating the
    statistics it is judged by."""
    steps = [s for s in r.steps.steps if not s.warmup]
    out: List[Tuple[int, float, float, float]] = []
    for i, s in enumerate(steps):
        others = [t.duration_us for j, t in enumerate(steps) if j != i]
        mean, std = statistics.fmean(others), statistics.pstdev(others)
        if s.duration_us > mean + sigma * std:
            out.append((s.number, s.duration_us, mean, std))
    return out


def outlier_cost_us(r: RankResult, sigma: float) -> float:
    """Time per analyzed step (µs) the outliers take beyond the median of the
    other steps, averaged over all analyzed steps."""
    steps = [s for s in r.steps.steps if not s.warmup]
    extra = 0.0
    for number, dur, _, _ in step_outliers(r, sigma):
        others = [s.duration_us for s in steps if s.number != number]
        extra += dur - statistics.median(others)
    return extra / len(steps) if steps else 0.0


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
    cause (the residual phase), so it takes only what they left."""
    ranks = [r for r in result.ranks if sum(not s.warmup for s in r.steps.steps) >= cfg.step_outlier_min_steps]
    if not ranks:
        most = max((sum(not s.warmup for s in r.steps.steps) for r in result.ranks), default=0)
        return not_checked(f"needs >= {cfg.step_outlier_min_steps} analyzed steps per rank (found {most})")
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
