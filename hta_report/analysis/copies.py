"""Copies that hold up the host: blocking copies and pageable-memory copies.

Times are µs; "per step" values average the analyzed windows
(:func:`hta_report.analysis.regions.windows`).
"""
from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd

from ..model import MemcpySummary, NamedTime
from . import intervals
from .events import COMMUNICATION, COMPUTATION, MEMORY, RankEvents
from .regions import containing_index, launched_from, per_step, thread_ids

#: CPU ops that copy tensors (``x.to(device)``, ``x.cpu()``, ``copy_``).
COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize")
#: Runtime calls that start a memory copy.
MEMCPY_APIS = ("cudaMemcpyAsync", "cudaMemcpy", "hipMemcpyAsync", "hipMemcpy", "hipMemcpyWithStream")
#: Copy calls that return only when the copy is done (Nsight Systems ``cuda_memcpy_sync``).
SYNC_COPY_APIS = ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream")
#: Calls that wait for a stream or the device.
STREAM_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "hipStreamSynchronize", "hipDeviceSynchronize")


def blocking_copies(ev: RankEvents) -> pd.DataFrame:
    """Outermost copy ops (:data:`COPY_OPS`) that block the host: they call a
    memcpy and then wait for the stream (``non_blocking=False``), or call a
    synchronous copy API. Columns ``ts``, ``end``, ``s_name``, ``pid``, ``tid``, ``thread``."""
    cpu = ev.cpu
    copies = cpu[cpu["s_name"].isin(COPY_OPS)]
    runtime = cpu[cpu["s_cat"].eq("cuda_runtime") & cpu["s_name"].isin(MEMCPY_APIS + STREAM_SYNC_APIS)]
    rows = []
    if copies.empty or runtime.empty:
        return pd.DataFrame(columns=["ts", "end", "s_name", "pid", "tid", "thread"])
    c_thr, r_thr = thread_ids(copies), thread_ids(runtime)
    for thread in np.unique(c_thr).tolist():
        r = runtime[r_thr == thread]
        if r.empty:
            continue
        c = copies[c_thr == thread].sort_values(["ts", "end"], ascending=[True, False])
        u = intervals.union(c["ts"].to_numpy(), c["end"].to_numpy())
        rts = r["ts"].to_numpy(dtype=float)
        idx = containing_index(u, rts)
        names = r["s_name"].to_numpy()
        inside = idx >= 0
        if not inside.any():
            continue
        idx, rts, names = idx[inside], rts[inside], names[inside]
        k = len(u)
        # per copy interval: a synchronous copy call, the first memcpy call, the last stream sync
        sync_copy = np.zeros(k, dtype=bool)
        np.logical_or.at(sync_copy, idx, np.isin(names, SYNC_COPY_APIS))
        first_copy = np.full(k, np.inf)
        is_copy = np.isin(names, MEMCPY_APIS)
        np.minimum.at(first_copy, idx[is_copy], rts[is_copy])
        last_sync = np.full(k, -np.inf)
        is_sync = np.isin(names, STREAM_SYNC_APIS)
        np.maximum.at(last_sync, idx[is_sync], rts[is_sync])
        blocking = sync_copy | (last_sync >= first_copy)
        outer = c.drop_duplicates("ts")  # the first (longest) op at each start
        name_at = dict(zip(outer["ts"].to_numpy(dtype=float), outer["s_name"]))
        pid, tid = c["pid"].iloc[0], c["tid"].iloc[0]
        for j in np.flatnonzero(blocking):
            rows.append((u[j, 0], u[j, 1], name_at.get(u[j, 0], "aten::copy_"), pid, tid, thread))
    return pd.DataFrame(rows, columns=["ts", "end", "s_name", "pid", "tid", "thread"])


def pageable_calls(ev: RankEvents) -> pd.DataFrame:
    """The runtime calls (``cudaMemcpyAsync``...) of copies from or to pageable
    host memory (the GPU event's name says ``Pageable``), linked by correlation."""
    gpu = ev.gpu
    pageable = gpu[gpu["s_name"].str.contains("Pageable", regex=False)]
    if pageable.empty:
        return ev.cpu.iloc[0:0]
    cpu = ev.cpu
    runtime = cpu[cpu["s_cat"].eq("cuda_runtime")]
    return runtime[runtime["correlation"].isin(pageable["correlation"])]


def add_copy_metrics(m: MemcpySummary, ev: RankEvents, w: np.ndarray, hw: np.ndarray, blocking: pd.DataFrame,
                     calls: pd.DataFrame) -> MemcpySummary:
    """Fill the per-step copy fields of ``m`` (see :class:`MemcpySummary`):
    GPU times over the re-based windows ``w``, host calls counted over the
    host windows ``hw``, given the rank's :func:`blocking_copies` and
    :func:`pageable_calls`."""
    n = len(w)
    wu = intervals.union(w[:, 0], w[:, 1]) if n else np.empty((0, 2))
    mem = ev.gpu[ev.gpu["kernel_type"].eq(MEMORY)]
    copies = mem[~mem["s_name"].str.contains("Memset", case=False)]
    busy = ev.gpu_union(COMPUTATION, COMMUNICATION)
    is_pageable = copies["s_name"].str.contains("Pageable", regex=False)

    def exposed(rows: pd.DataFrame) -> float:
        u = intervals.intersect(intervals.union(rows["ts"].to_numpy(), rows["end"].to_numpy()), wu)
        return intervals.total(intervals.subtract(u, busy))

    pageable_u = intervals.union(copies[is_pageable]["ts"].to_numpy(), copies[is_pageable]["end"].to_numpy())
    m.pageable_exposed_us_per_step = per_step(exposed(copies[is_pageable]), n)
    # copies issued by blocking copy ops (and not pageable): C4 owns their exposed time
    from_blocking = copies["correlation"].isin(launched_from(ev, blocking)["correlation"]) if len(blocking) else \
        np.zeros(len(copies), dtype=bool)
    sync_rows = copies[from_blocking & ~is_pageable]
    sync_u = intervals.union(sync_rows["ts"].to_numpy(), sync_rows["end"].to_numpy())
    sync_exposed = intervals.subtract(intervals.subtract(intervals.intersect(sync_u, wu), busy), pageable_u)
    m.blocking_exposed_us_per_step = per_step(intervals.total(sync_exposed), n)
    # the other (asynchronous pinned, device-to-device) copies: C15
    rest = copies[~is_pageable & ~from_blocking]
    other = intervals.union(rest["ts"].to_numpy(), rest["end"].to_numpy())
    other_exposed = intervals.subtract(intervals.subtract(intervals.subtract(intervals.intersect(other, wu), busy),
                                                          pageable_u), sync_u)
    m.other_exposed_us_per_step = per_step(intervals.total(other_exposed), n)

    hu = intervals.union(hw[:, 0], hw[:, 1]) if len(hw) else np.empty((0, 2))
    m.pageable_calls_per_step = per_step(_count_in(calls, hu), n)
    inside = blocking[_starts_in(blocking, hu)] if len(blocking) else blocking
    m.blocking_copies_per_step = per_step(len(inside), n)
    m.blocking_copy_us_per_step = per_step(float((inside["end"] - inside["ts"]).sum()) if len(inside) else 0.0, n)
    m.blocking_ops = _by_name(inside)
    return m


def _starts_in(df: pd.DataFrame, wu: np.ndarray) -> np.ndarray:
    return containing_index(wu, df["ts"].to_numpy(dtype=float)) >= 0


def _count_in(df: pd.DataFrame, wu: np.ndarray) -> int:
    return int(_starts_in(df, wu).sum()) if len(df) else 0


def _by_name(df: pd.DataFrame) -> List[NamedTime]:
    if df.empty:
        return []
    d = df.assign(dur=df["end"] - df["ts"]).groupby("s_name")["dur"].agg(["size", "sum"])
    d = d.sort_values("sum", ascending=False)
    return [NamedTime(name=str(n), count=int(r["size"]), total_us=float(r["sum"])) for n, r in d.iterrows()]
