"""Comparing two analyses: did the change make training faster or slower, and why?

A pure function of two :class:`~hta_report.model.AnalysisResult`; reading or
analyzing a side is :func:`hta_report.api.compare_paths`'s job.
"""
from __future__ import annotations

import math
import sys
from typing import Dict, List, Tuple

import numpy as np

from .model import (ATTRIBUTION_STEP, COMMUNICATION_STEP, CPU_SIDE_STEP, MEMCPY_STEP, STEP_TIMES_STEP, WINDOWS_STEP,
                    AnalysisResult, Comparison, KernelDelta, KernelVariant, MetricDelta, RankComparison, RankResult)
from .names import family

#: Smallest noise band (%) a verdict uses, however steady the steps are.
MIN_NOISE_BAND_PCT = 1.0


def _bounded(x: float) -> float:
    """``x`` as a finite number: a difference or ratio of two finite figures
    that overflows (a saved result may hold any finite number, 1e300 included)
    becomes the largest float of its sign, not infinity, which JSON cannot hold."""
    if math.isnan(x):
        return 0.0
    return x if math.isfinite(x) else math.copysign(sys.float_info.max, x)


def _delta(name: str, unit: str, base: float, new: float) -> MetricDelta:
    d = _bounded(new - base)
    return MetricDelta(name=name, unit=unit, base=base, new=new, delta=d,
                       delta_pct=_bounded(100 * d / base) if base else 0.0)


def _rank_metrics(r: RankResult) -> List[Tuple[str, str, float]]:
    """The rank's compared metrics; those whose analysis step failed on the
    rank (:attr:`RankResult.failures`) are left out rather than compared as 0."""
    out = []
    if not r.failed(STEP_TIMES_STEP):
        out.append(("mean step time", "ms", r.steps.mean_us / 1e3))
    if not r.failed(CPU_SIDE_STEP):
        out += [("DataLoader share of step", "%", r.cpu.dataloader_pct), ("sync share of step", "%", r.cpu.sync_pct)]
    if r.has_gpu:
        if not r.failed(WINDOWS_STEP, ATTRIBUTION_STEP):
            out += [("GPU busy", "%", r.busy_pct), ("kernels running", "%", r.kernel_busy_pct),
                    ("GPU idle", "%", r.idle_pct)]
        if not r.failed(COMMUNICATION_STEP):
            out.append(("exposed communication", "%", r.exposed_comm_window_pct))
        if not r.failed(MEMCPY_STEP):
            out.append(("exposed memcpy", "%", r.exposed_copy_window_pct))
    return out


def _overall(a: AnalysisResult) -> Dict[str, Tuple[str, float]]:
    g = a.aggregate
    out = {"mean step time": ("ms", g.mean_step_us / 1e3), "DataLoader share of step": ("%", g.dataloader_pct)}
    if g.gpu_ranks:
        out.update({
            "GPU busy": ("%", g.busy_pct), "kernels running": ("%", g.kernel_busy_pct), "GPU idle": ("%", g.idle_pct),
            "exposed communication": ("%", g.exposed_comm_pct), "exposed memcpy": ("%", g.exposed_memcpy_pct),
        })
        for k in g.kernel_types:
            out[f"kernel time: {k.kernel_type}"] = ("%", k.pct)
    return out


def step_variation_pct(a: AnalysisResult) -> float:
    """Coefficient of variation (std / mean × 100) of the analyzed step times
    (warm-up excluded) pooled over ranks; 0 without at least two steps."""
    d = np.array([s.duration_us for r in a.ranks for s in r.steps.steps if not s.warmup], dtype=float)
    if d.size < 2 or d.mean() <= 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return _bounded(float(d.std(ddof=1) / d.mean() * 100))


def _kernel_totals(a: AnalysisResult) -> Dict[str, Tuple[str, float]]:
    totals: Dict[str, Tuple[str, float]] = {}
    for r in a.ranks:
        for k in r.top_kernels:
            kind, t = totals.get(k.name, (k.kernel_type, 0.0))
            totals[k.name] = (kind, _bounded(t + k.total_us))
    return totals


def _kernel_deltas(kb: Dict[str, Tuple[str, float]], kn: Dict[str, Tuple[str, float]]) -> List[KernelDelta]:
    """One delta per kernel, template-argument variants grouped (see :class:`KernelDelta`)."""
    groups: Dict[str, List[str]] = {}
    for n in sorted(set(kb) | set(kn)):
        groups.setdefault(family(n), []).append(n)
    out = []
    for key, members in groups.items():
        variants = sorted((KernelVariant(name=n, base_us=kb.get(n, ("", 0.0))[1], new_us=kn.get(n, ("", 0.0))[1])
                           for n in members), key=lambda v: (-abs(v.new_us - v.base_us), v.name))
        b, n_us = _bounded(sum(v.base_us for v in variants)), _bounded(sum(v.new_us for v in variants))
        first = members[0]  # in kb or kn: members come from their keys
        kind = kb[first][0] if first in kb else kn[first][0]
        if len(variants) == 1:
            out.append(KernelDelta(name=first, kernel_type=kind, base_us=b, new_us=n_us,
                                   delta_us=_bounded(n_us - b)))
        else:
            out.append(KernelDelta(name=key, kernel_type=kind, base_us=b, new_us=n_us, delta_us=_bounded(n_us - b),
                                   variants=variants))
    return out


def compare(base: AnalysisResult, new: AnalysisResult, base_label: str = "base", new_label: str = "new",
            top_kernels: int = 15) -> Comparison:
    """Compare two results (see :class:`hta_report.model.Comparison` for the verdict rule).

    Kernel deltas use each side's top 50 kernels per rank by total time (what
    the result model keeps), summed over ranks, template-argument variants of
    one kernel grouped (:func:`hta_report.names.family`), ordered by |delta|;
    kernels whose total did not change are left out.
    """
    ob, on = _overall(base), _overall(new)
    overall = [_delta(name, ob[name][0] if ob[name][0] == "ms" else "pp", ob[name][1], on[name][1])
               for name in ob if name in on]

    base_ranks = {r.rank: r for r in base.ranks}
    new_ranks = {r.rank: r for r in new.ranks}
    pairs = [(r, r) for r in sorted(set(base_ranks) & set(new_ranks))]
    if not pairs and len(base_ranks) == 1 and len(new_ranks) == 1:
        pairs = [(next(iter(base_ranks)), next(iter(new_ranks)))]  # one rank each: pair them
    ranks = []
    for rank, new_rank in pairs:
        mb = dict((n, (u, v)) for n, u, v in _rank_metrics(base_ranks[rank]))
        mn = dict((n, (u, v)) for n, u, v in _rank_metrics(new_ranks[new_rank]))
        ranks.append(RankComparison(rank=rank, new_rank=new_rank, metrics=[
            _delta(n, mb[n][0] if mb[n][0] == "ms" else "pp", mb[n][1], mn[n][1]) for n in mb if n in mn]))

    kernels = sorted((k for k in _kernel_deltas(_kernel_totals(base), _kernel_totals(new)) if k.delta_us != 0),
                     key=lambda k: (-abs(k.delta_us), k.name))[:top_kernels]

    ids_b = {f.id: f for f in base.findings}
    ids_n = {f.id: f for f in new.findings}

    band = max(MIN_NOISE_BAND_PCT, step_variation_pct(base), step_variation_pct(new))
    sb, sn = base.aggregate.mean_step_us, new.aggregate.mean_step_us
    if sb > 0 and sn > 0:
        change = _bounded(100 * (sn - sb) / sb)
        verdict = "regressed" if change > band else "improved" if change < -band else "unchanged"
    else:
        change, verdict = 0.0, "not comparable"
    return Comparison(
        base_label=base_label, new_label=new_label, verdict=verdict, noise_band_pct=band,
        step_time_change_pct=change, overall=overall, ranks=ranks,
        ranks_only_base=sorted(set(base_ranks) - {p[0] for p in pairs}),
        ranks_only_new=sorted(set(new_ranks) - {p[1] for p in pairs}),
        kernels=kernels,
        findings_appeared=[f for i, f in ids_n.items() if i not in ids_b],
        findings_gone=[f for i, f in ids_b.items() if i not in ids_n],
        findings_kept=sorted(set(ids_b) & set(ids_n)),
        base=base, new=new,
    )
