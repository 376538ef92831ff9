"""Host-side regions shared by the analyses: analyzed windows, events nested
in annotations on the same thread, and the GPU work launched from a region.

Times are µs on HTA's aligned timeline.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import pandas as pd

from .. import intervals
from .events import LAUNCH_CATEGORIES  # noqa: F401 - re-exported: the host categories of launch calls
from .events import RankEvents, linked_calls, memoized, runtime_calls
from .launch_calls import KERNEL_LAUNCH_APIS
from .steps import analyzed_windows, step_windows

#: Runtime and driver calls that put work on a GPU stream: the kernel launches of
#: :data:`~.launch_calls.KERNEL_LAUNCH_APIS` (HTA's list, HIP's, Triton's
#: ``cuLaunchKernel``, graph launches) plus copies and memsets.
LAUNCH_APIS = KERNEL_LAUNCH_APIS + (
    "cudaMemcpyAsync", "cudaMemcpy", "cudaMemsetAsync", "cudaMemset",
    "hipMemcpyAsync", "hipMemcpy", "hipMemcpyWithStream", "hipMemsetAsync",
)


def windows(ev: RankEvents) -> Tuple[np.ndarray, bool]:
    """The analyzed windows of a rank as an ``(n, 2)`` array of ``[start, end]``
    (µs) and whether they are ``ProfilerStep`` windows.

    The analyzed steps are all ``ProfilerStep#N`` but the first (warm-up) when
    there are at least two, re-based to the device as the TensorBoard profiler
    does (:func:`rebased_steps`); without steps, the whole trace (first event
    start to last event end) is one window.
    """
    w = analyzed_windows(rebased_steps(ev))
    if len(w):
        return w[:, 1:3].astype(float), True
    if ev.df.empty:
        return np.empty((0, 2)), False
    return np.array([[float(ev.df["ts"].min()), float(ev.df["end"].max())]]), False


def host_windows(ev: RankEvents) -> np.ndarray:
    """The analyzed ``ProfilerStep`` windows on the host timeline (not
    re-based), ``(n, 2)``, for counting host events per step; the whole trace
    without steps. Same steps, in the same order, as :func:`windows`."""
    w = analyzed_windows(step_windows(ev))
    if len(w):
        return w[:, 1:3].astype(float)
    return windows(ev)[0]


@memoized
def rebased_steps(ev: RankEvents) -> np.ndarray:
    """``ProfilerStep`` windows ``[number, start, end]`` (µs) re-based to the
    device: a step ends when both its host annotation and the GPU work
    launched inside it have ended, and the next step starts there (the
    TensorBoard profiler's step re-basing). When the host runs ahead of the
    GPU, the windows then measure steps as the GPU executes them. Computed
    once per rank (:func:`~.events.memoized`)."""
    steps = step_windows(ev)  # a copy of its own (memoized)
    if len(steps) == 0 or not ev.has_gpu:
        return steps
    runtime = linked_calls(ev)
    gpu_end = ev.gpu.groupby("correlation")["end"].max()
    launched = runtime[["ts", "correlation"]].join(gpu_end, on="correlation", how="inner")
    if launched.empty:
        return steps
    ts = launched["ts"].to_numpy(dtype=float)
    ends = launched["end"].to_numpy(dtype=float)
    idx = containing_index(steps[:, 1:3].astype(float), ts) if _disjoint(steps) else np.full(len(ts), -1)
    prev_end = None
    for i in range(len(steps)):
        mine = ends[idx == i]
        end = max(float(steps[i, 2]), float(mine.max()) if len(mine) else float("-inf"))
        if prev_end is not None:
            steps[i, 1] = max(prev_end, float(steps[i, 1]))
        steps[i, 2] = max(end, steps[i, 1])
        prev_end = steps[i, 2]
    return steps


def _disjoint(steps: np.ndarray) -> bool:
    return bool(np.all(steps[1:, 1] >= steps[:-1, 2])) if len(steps) > 1 else True


def thread_ids(df: pd.DataFrame) -> np.ndarray:
    """The host thread of each row (its ``thread`` code, see
    :func:`~hta_report.analysis.events.thread_codes`), to group host events by thread."""
    return df["thread"].to_numpy()


def starts_inside(events: pd.DataFrame, regions: pd.DataFrame, same_thread: bool = True) -> np.ndarray:
    """Boolean mask over ``events``: the event starts inside one of ``regions``
    (on the same host thread when ``same_thread``)."""
    mask = np.zeros(len(events), dtype=bool)
    if events.empty or regions.empty:
        return mask
    ts = events["ts"].to_numpy(dtype=float)
    if not same_thread:
        u = intervals.union(regions["ts"].to_numpy(), regions["end"].to_numpy())
        return _in_union(u, ts)
    ev_thr, reg_thr = thread_ids(events), thread_ids(regions)
    for thread in np.unique(reg_thr):
        sel = reg_thr == thread
        u = intervals.union(regions["ts"].to_numpy()[sel], regions["end"].to_numpy()[sel])
        rows = np.flatnonzero(ev_thr == thread)
        mask[rows] = _in_union(u, ts[rows])
    return mask


def _in_union(u: np.ndarray, t: np.ndarray) -> np.ndarray:
    if len(u) == 0:
        return np.zeros(len(t), dtype=bool)
    j = np.searchsorted(u[:, 0], t, side="right") - 1
    ok = j >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < u[j[ok], 1]
    return out


def containing_index(u: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``, the row of union ``u`` holding it, or -1."""
    if len(u) == 0:
        return np.full(len(t), -1)
    j = np.searchsorted(u[:, 0], t, side="right") - 1
    ok = (j >= 0) & (t < u[np.maximum(j, 0), 1])
    return np.where(ok, j, -1)


def launched_from(ev: RankEvents, regions: pd.DataFrame) -> pd.DataFrame:
    """GPU events (kernels, memcpys, memsets) launched by runtime or driver
    calls (``cuda_runtime``, ``cuda_driver``: Triton's ``cuLaunchKernel``)
    that start inside ``regions`` on the same thread (linked by ``correlation``)."""
    runtime = runtime_calls(ev)
    runtime = runtime[starts_inside(runtime, regions)]
    corr = runtime["correlation"]
    corr = corr[corr > 0] if len(corr) else corr
    return ev.gpu[ev.gpu["correlation"].isin(corr)]


def in_windows(df: pd.DataFrame, w: np.ndarray) -> pd.DataFrame:
    """Rows of ``df`` that start inside one of the windows ``w``."""
    if df.empty or len(w) == 0:
        return df.iloc[0:0]
    u = intervals.union(w[:, 0], w[:, 1])
    return df[_in_union(u, df["ts"].to_numpy(dtype=float))]


def per_step(total_us: float, n: int) -> float:
    """``total_us`` over ``n`` analyzed windows (0 when none)."""
    return float(total_us) / n if n else 0.0


def full_gap_bounds(idle: np.ndarray, busy: np.ndarray):
    """For each row of ``idle`` (clipped to the analyzed windows), the whole
    GPU gap it belongs to, ``(begin, end)`` arrays: from the end of the GPU
    activity (union ``busy``) before it to the start of the activity after it
    (µs; the row's own start or end where there is none)."""
    if len(idle) == 0 or len(busy) == 0:
        return idle[:, 0].copy(), idle[:, 1].copy()
    j = np.searchsorted(busy[:, 1], idle[:, 0], side="right") - 1  # last activity ending at or before the row
    k = np.searchsorted(busy[:, 0], idle[:, 1], side="left")  # first activity starting at or after its end
    before = np.where(j >= 0, busy[np.maximum(j, 0), 1], idle[:, 0])
    after = np.where(k < len(busy), busy[np.minimum(k, len(busy) - 1), 0], idle[:, 1])
    return before, after
