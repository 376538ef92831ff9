"""CPU-side metrics: DataLoader time, host-device synchronization, top CPU ops."""
from __future__ import annotations

from array import array
from typing import List

import numpy as np
import pandas as pd

from ..model import CpuSide, NamedTime
from . import intervals
from .events import RankEvents
from .steps import analyzed_windows, step_windows

#: Event names that block the host until the device catches up.
SYNC_NAMES = (
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "aten::item", "aten::_local_scalar_dense",
)
#: Name prefixes of the DataLoader iteration annotations.
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")


def self_times(cpu: pd.DataFrame) -> np.ndarray:
    """Self time (µs) of each row of ``cpu`` (rows of ``RankEvents.df``): its
    duration minus the durations of its direct children on the same thread
    (events nested inside it)."""
    self_t = np.maximum(cpu["dur"].to_numpy(dtype=float), 0.0)  # some traces carry dur = -1
    if not len(cpu):
        return self_t
    ts = cpu["ts"].to_numpy(dtype=float)
    end = cpu["end"].to_numpy(dtype=float)
    thread = cpu["thread"].to_numpy()
    order = np.lexsort((-end, ts, thread))  # by thread, then parents before children
    # the loop walks rows in that order; array.array holds 8 bytes per value
    # (a list of floats ~32), so a million rows cost tens of MB less at the peak
    ts_l, end_l = array("d", ts[order].tobytes()), array("d", end[order].tobytes())
    thread_l = array("q", thread[order].astype(np.int64).tobytes())
    out = array("d", self_t[order].tobytes())
    stack: List[int] = []
    current = None
    for i in range(len(order)):
        if thread_l[i] != current:
            current, stack = thread_l[i], []
        t = ts_l[i]
        while stack and t >= end_l[stack[-1]]:
            stack.pop()
        if stack:
            top = stack[-1]
            out[top] -= min(end_l[i], end_l[top]) - t
        stack.append(i)
    self_t[order] = np.frombuffer(out, dtype=float)
    return np.maximum(self_t, 0.0)


def _named(rows: pd.DataFrame, self_col: np.ndarray = None, limit: int = 0) -> List[NamedTime]:
    if rows.empty:
        return []
    # grouped by the categorical's codes (its categories are sorted: the groups come in the
    # order plain strings would give), not by an object array of one string per row
    df = pd.DataFrame({"name": rows["s_name"].array, "dur": rows["dur"].to_numpy(dtype=float),
                       "selft": self_col if self_col is not None else rows["dur"].to_numpy(dtype=float)})
    g = df.groupby("name", observed=True).agg(count=("dur", "size"), total=("dur", "sum"), selft=("selft", "sum"))
    g = g.sort_values("selft" if self_col is not None else "total", ascending=False)
    if limit:
        g = g.head(limit)
    return [NamedTime(name=str(n), count=int(r["count"]), total_us=float(r["total"]), self_us=float(r["selft"]))
            for n, r in g.iterrows()]


def cpu_side(ev: RankEvents, top: int = 15) -> CpuSide:
    """DataLoader share of step time, synchronization per step and top CPU ops
    by self time for one rank. Per-step figures average the analyzed steps
    (warm-up excluded); without ``ProfilerStep`` annotations they cover the
    whole trace as one window."""
    cpu = ev.cpu
    windows = analyzed_windows(step_windows(ev))
    if len(windows):
        win = windows[:, 1:3]
    elif len(cpu):
        win = np.array([[cpu["ts"].min(), cpu["end"].max()]], dtype=float)
    else:
        return CpuSide()
    step_us = float((win[:, 1] - win[:, 0]).mean())
    in_window = np.zeros(len(cpu), dtype=bool)
    ts, end = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float)
    for s, e in win:
        in_window |= (ts < e) & (end > s)

    names = cpu["s_name"]
    dl = cpu[names.str.startswith(DATALOADER_PREFIXES)]
    dl_u = intervals.union(dl["ts"].to_numpy(), dl["end"].to_numpy())
    dl_per_step = float(intervals.overlap_each(win, dl_u).mean())

    sync = cpu[names.isin(SYNC_NAMES) & in_window]
    sync_u = intervals.union(sync["ts"].to_numpy(), sync["end"].to_numpy())
    sync_per_step = float(intervals.overlap_each(win, sync_u).mean())
    sync_points = len(intervals.union(sync["ts"].to_numpy(), sync["end"].to_numpy()))

    ops_mask = cpu["s_cat"].isin(["cpu_op", "user_annotation", "cuda_runtime"]) & ~names.str.startswith("ProfilerStep#")
    ops = cpu.loc[ops_mask & in_window, ["ts", "end", "dur", "thread", "s_name", "s_cat"]]  # most rows: columns used only
    self_t = self_times(ops)
    is_op = (ops["s_cat"] != "cuda_runtime").to_numpy()
    return CpuSide(
        steps_used=int(len(windows)),
        dataloader_seen=not dl.empty,
        dataloader_in_main_process=bool(dl["s_name"].str.contains("_SingleProcessDataLoaderIter").any()),
        dataloader_us_per_step=dl_per_step,
        dataloader_pct=100 * dl_per_step / step_us if step_us else 0.0,
        sync_calls_per_step=sync_points / len(win),
        sync_us_per_step=sync_per_step,
        sync_pct=100 * sync_per_step / step_us if step_us else 0.0,
        sync_events=_named(sync),
        top_ops=_named(ops.loc[is_op, ["s_name", "dur"]], self_t[is_op], limit=top),
    )
