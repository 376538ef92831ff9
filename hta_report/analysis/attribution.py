"""GPU idle time inside the analyzed steps, attributed to what the host was doing.

The categories and their order are documented on
:class:`hta_report.model.IdleAttribution`. This is our own interval arithmetic
on HTA's parsed events: HTA's idle-time breakdown says *that* a stream waited
for the host (host wait), not *on what* the host spent that time.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pandas as pd

from ..model import GpuGap, IdleAttribution, OptimizerProfile
from . import intervals
from .cpu_side import DATALOADER_PREFIXES, SYNC_NAMES
from .events import RankEvents
from .optimizer import step_regions, zero_grad_regions
from .regions import containing_index, per_step, rebased_steps
from .steps import analyzed_windows

#: A gap "begins inside" a blocking call when it starts between the call's
#: start and its end plus this tolerance (µs): the call returns right after
#: the GPU drains, and CPU and GPU clocks are aligned only to a few µs.
GAP_START_TOLERANCE_US = 10.0
#: Host event categories counted as the host executing framework code.
HOST_OP_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
CATEGORIES = ("dataloader", "pageable_copy", "blocking_copy", "sync", "zero_grad", "optimizer", "host_ops",
              "unattributed")


def _u(df: pd.DataFrame) -> np.ndarray:
    if df is None or len(df) == 0:
        return np.empty((0, 2))
    return intervals.union(df["ts"].to_numpy(dtype=float), df["end"].to_numpy(dtype=float))


def gaps_beginning_in(idle: np.ndarray, calls: pd.DataFrame) -> np.ndarray:
    """The rows of the idle union ``idle`` whose start lies inside one of
    ``calls`` (extended by :data:`GAP_START_TOLERANCE_US`)."""
    if len(idle) == 0 or calls is None or len(calls) == 0:
        return np.empty((0, 2))
    cu = intervals.union(calls["ts"].to_numpy(dtype=float),
                         calls["end"].to_numpy(dtype=float) + GAP_START_TOLERANCE_US)
    return idle[containing_index(cu, idle[:, 0]) >= 0]


def idle_attribution(ev: RankEvents, w: np.ndarray, opt: OptimizerProfile, blocking: pd.DataFrame,
                     pageable: pd.DataFrame, top_gaps: int = 10) -> IdleAttribution:
    """Split the GPU idle time of one rank inside the analyzed windows ``w``
    by host activity (µs per step; see :class:`~hta_report.model.IdleAttribution`).

    Args:
        ev: the rank's events.
        w: analyzed windows, ``(n, 2)``.
        opt: the rank's optimizer profile (decides whether zero_grad and
            optimizer regions are categories).
        blocking: blocking copy ops (:func:`~hta_report.analysis.copies.blocking_copies`).
        pageable: runtime calls of pageable copies (:func:`~hta_report.analysis.copies.pageable_calls`).
        top_gaps: how many of the longest gaps to list.
    """
    n = len(w)
    out = IdleAttribution()
    if n == 0 or ev.gpu.empty:
        return out
    wu = intervals.union(w[:, 0], w[:, 1])
    gpu = ev.gpu
    busy = intervals.intersect(_u(gpu), wu)
    kernel_busy = intervals.intersect(_u(gpu[gpu["s_cat"].eq("kernel")]), wu)
    idle = intervals.subtract(wu, busy)
    out.busy_us = per_step(intervals.total(busy), n)
    out.kernel_busy_us = per_step(intervals.total(kernel_busy), n)
    out.idle_us = per_step(intervals.total(idle), n)

    cpu = ev.cpu
    regions: Dict[str, np.ndarray] = {
        "dataloader": _u(cpu[cpu["s_name"].str.startswith(DATALOADER_PREFIXES)]),
        "blocking_copy": gaps_beginning_in(idle, blocking),
        "pageable_copy": gaps_beginning_in(idle, pageable),
        "sync": gaps_beginning_in(idle, cpu[cpu["s_name"].isin(SYNC_NAMES)]),
        "zero_grad": _u(zero_grad_regions(ev, None)) if opt.zero_ops_per_step > 0 else np.empty((0, 2)),
        "optimizer": (_u(step_regions(ev, None)) if opt.step_calls and not opt.multi_tensor
                      else np.empty((0, 2))),
        "host_ops": _u(cpu[cpu["s_cat"].isin(HOST_OP_CATEGORIES)]),
    }
    remaining = idle
    parts: Dict[str, np.ndarray] = {}
    for name in CATEGORIES[:-1]:
        part = intervals.intersect(remaining, regions[name])
        parts[name] = part
        setattr(out, f"{name}_us", per_step(intervals.total(part), n))
        remaining = intervals.subtract(remaining, part)
    parts["unattributed"] = remaining
    out.unattributed_us = per_step(intervals.total(remaining), n)
    out.gaps = _longest_gaps(ev, idle, parts, top_gaps)
    return out


def _longest_gaps(ev: RankEvents, idle: np.ndarray, parts: Dict[str, np.ndarray], top: int) -> List[GpuGap]:
    if len(idle) == 0:
        return []
    steps = analyzed_windows(rebased_steps(ev))
    order = np.argsort(-(idle[:, 1] - idle[:, 0]), kind="stable")[:top]
    cpu = ev.cpu
    host = cpu[cpu["s_cat"].isin(("cpu_op", "user_annotation")) & ~cpu["s_name"].str.startswith("ProfilerStep#")]
    hts, hend = host["ts"].to_numpy(dtype=float), host["end"].to_numpy(dtype=float)
    gaps = []
    for i in order:
        g0, g1 = float(idle[i, 0]), float(idle[i, 1])
        gap = np.array([[g0, g1]])
        cause = max(CATEGORIES, key=lambda c: intervals.overlap(gap, parts[c]))
        ov = np.minimum(hend, g1) - np.maximum(hts, g0)
        sel = np.flatnonzero(ov > 0)
        names: List[str] = []
        for j in sel[np.argsort(-ov[sel], kind="stable")]:
            name = str(host["s_name"].iloc[j])
            if name not in names:
                names.append(name)
            if len(names) == 3:
                break
        step = 0
        if len(steps):
            k = np.searchsorted(steps[:, 1], g0, side="right") - 1
            step = int(steps[k, 0]) if k >= 0 and g0 < steps[k, 2] else 0
        gaps.append(GpuGap(start_us=g0, duration_us=g1 - g0, step=step, cause=cause, host_ops=names))
    return gaps
