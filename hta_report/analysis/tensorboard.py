"""The TensorBoard profiler plugin's GPU figures, by its own definitions.

The plugin (``torch_tb_profiler``, pytorch/kineto's ``tb_plugin`` until 2025,
``profiler/gpu_metrics_parser.py``) showed on its overview, per GPU, over
"all steps": from the first ``ProfilerStep``'s start to the last one's end,
each step re-based to the device (:func:`~.regions.rebased_steps`):

* GPU Utilization: the union of kernels (not memcpys or memsets) in that
  range, divided by its length;
* Est. SM Efficiency: per kernel ``min(blocks per SM, 1)``; where kernels
  overlap, their values add up, capped at 1 (``merge_ranges_with_value``);
  that value weighted by time, over the range, divided by its length (so idle
  time counts as 0: "divided by all steps time");
* Est. Achieved Occupancy: ``est. achieved occupancy %`` of each kernel
  weighted by the part of its duration inside the range, over the kernels
  that carry it.

These functions compute the same from the result's events, over any window:
:func:`tensorboard_overview` over the plugin's window (every step of the
analysis), :func:`sm_efficiency` over the report's analyzed steps.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import pandas as pd

from .. import intervals
from ..model import TensorBoardOverview
from .events import RankEvents
from .regions import rebased_steps


def merged_values(ts: np.ndarray, end: np.ndarray, value: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plugin's ``merge_ranges_with_value``: the time ranges where some of
    the intervals ``[ts, end)`` run, each with the sum of their ``value``
    capped at 1. Returns ``(starts, ends, values)`` (µs, µs, 0-1)."""
    if not len(ts):
        empty = np.empty(0)
        return empty, empty, empty
    times = np.concatenate([ts, end])
    delta = np.concatenate([value, -value])
    kind = np.concatenate([np.zeros(len(ts)), np.ones(len(end))])  # a start before an end at one time
    order = np.lexsort((kind, times))
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)
    starts, ends, levels = times[:-1], times[1:], level[:-1]
    keep = (ends > starts) & (levels > 1e-12)
    return starts[keep], ends[keep], np.minimum(levels[keep], 1.0)


def _clipped(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The length of each ``[start, end)`` inside ``[lo, hi)`` (µs)."""
    return np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0.0, None)


def kernel_args(ev: RankEvents) -> pd.DataFrame:
    """Every kernel (not memcpy or memset) of the rank with ``blocks`` (blocks
    per SM, NaN where absent) and ``occupancy`` (est. achieved occupancy %,
    NaN where absent)."""
    k = ev.gpu[ev.gpu["s_cat"].eq("kernel")]
    blocks = pd.to_numeric(k["blocks_per_sm"], errors="coerce") if "blocks_per_sm" in k.columns else np.nan
    occ = pd.to_numeric(k["est_occupancy"], errors="coerce") if "est_occupancy" in k.columns else np.nan
    return pd.DataFrame({"ts": k["ts"].to_numpy(dtype=float), "end": k["end"].to_numpy(dtype=float),
                         "blocks": blocks, "occupancy": occ}, index=k.index)


def sm_efficiency(k: pd.DataFrame, windows: np.ndarray) -> Tuple[float, float, int]:
    """Est. SM Efficiency and Est. Achieved Occupancy (%, the plugin's
    definitions, see the module doc) of the kernels ``k``
    (:func:`kernel_args`) over ``windows`` (``(n, 2)`` µs): SM efficiency is
    of the windows' whole length, occupancy of the kernel time in them.
    Returns ``(sm_efficiency_pct, achieved_occupancy_pct, kernels with the
    args)``; 0 where no kernel carries them."""
    total = float((windows[:, 1] - windows[:, 0]).sum()) if len(windows) else 0.0
    blocks = k["blocks"].to_numpy(dtype=float)
    has = np.isfinite(blocks) & (blocks > 0)  # the plugin skips a value that is not positive
    s, e, v = merged_values(k["ts"].to_numpy()[has], k["end"].to_numpy()[has], blocks[has])
    inside = sum(float((v * _clipped(s, e, lo, hi)).sum()) for lo, hi in windows)
    sm = 100 * inside / total if total > 0 else 0.0
    occ = k["occupancy"].to_numpy(dtype=float)
    with_occ = np.isfinite(occ) & (occ >= 0)
    dur = sum(_clipped(k["ts"].to_numpy()[with_occ], k["end"].to_numpy()[with_occ], lo, hi) for lo, hi in windows) \
        if len(windows) else np.zeros(int(with_occ.sum()))
    weight = float(np.sum(dur))
    occupancy = float(np.sum(dur * occ[with_occ]) / weight) if weight > 0 else 0.0
    return sm, occupancy, int(has.sum())


def tensorboard_overview(ev: RankEvents) -> TensorBoardOverview:
    """The plugin's GPU Utilization, Est. SM Efficiency and Est. Achieved
    Occupancy of the rank over its window: from the first to the last
    ``ProfilerStep`` of the analysis (re-based to the device), warm-up step
    included as the plugin includes it. Empty (``steps`` []) without steps."""
    steps = rebased_steps(ev)
    out = TensorBoardOverview()
    if not len(steps) or not ev.has_gpu:
        return out
    lo, hi = float(steps[0, 1]), float(steps[-1, 2])
    out.steps = [int(n) for n in steps[:, 0]]
    out.window_us = hi - lo
    if out.window_us <= 0:
        return out
    k = kernel_args(ev)
    busy = intervals.union(k["ts"].to_numpy(), k["end"].to_numpy())
    out.gpu_utilization_pct = 100 * intervals.total(intervals.intersect(busy, np.array([[lo, hi]]))) / out.window_us
    out.sm_efficiency_pct, out.achieved_occupancy_pct, out.kernels_with_data = sm_efficiency(k, np.array([[lo, hi]]))
    out.mean_step_us = out.window_us / len(steps)
    return out
