"""Copies that hold up the host: blocking copies and pageable-memory copies.

Times are µs; "per step" values average the analyzed windows
(:func:`hta_report.analysis.regions.windows`).
"""
from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd

from ..model import MemcpySummary, NamedTime
from .. import intervals
from .cpu_side import is_sync
from .events import COMMUNICATION, COMPUTATION, MEMORY, RankEvents
from .regions import LAUNCH_APIS, containing_index, launched_from, per_step, thread_ids

#: CPU ops that copy tensors (``x.to(device)``, ``x.cpu()``, ``copy_``).
COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize")
#: Runtime calls that start a memory copy.
MEMCPY_APIS = ("cudaMemcpyAsync", "cudaMemcpy", "hipMemcpyAsync", "hipMemcpy", "hipMemcpyWithStream")
#: Copy calls that return only when the copy is done (Nsight Systems ``cuda_memcpy_sync``).
SYNC_COPY_APIS = ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream")
#: Calls that wait for a stream or the device.
STREAM_SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "hipStreamSynchronize", "hipDeviceSynchronize")
#: Copies from the device to the host (``Memcpy DtoH (Device -> Pageable)``).
DTOH = "Memcpy DtoH"
#: Copies from the host to the device (``Memcpy HtoD (Pageable -> Device)``, ``(Pinned -> Device)``).
HTOD = "Memcpy HtoD"


def htod_from(names: pd.Series, memory: str) -> np.ndarray:
    """Per GPU event name, whether it is a copy to the device from host memory
    ``memory`` (``Pageable`` or ``Pinned``, as CUPTI names it): a boolean
    array. On a categorical the tests run on its distinct names."""
    return _copies(names, HTOD, memory)


def _copies(names: pd.Series, direction: str, memory: str) -> np.ndarray:
    """Per GPU event name, whether it is a copy ``direction`` (``Memcpy HtoD``...)
    naming host memory ``memory``: a boolean array."""
    hit = names.str.startswith(direction) & names.str.contains(memory, regex=False)
    return hit.fillna(False).to_numpy(dtype=bool)


def dtoh_to(names: pd.Series, memory: str) -> np.ndarray:
    """Per GPU event name, whether it is a copy from the device to host memory
    ``memory`` (``Pageable`` or ``Pinned``, as CUPTI names it: ``Memcpy DtoH
    (Device -> Pinned)``): a boolean array."""
    return _copies(names, DTOH, memory)


def _dtoh_correlations(ev: RankEvents) -> np.ndarray:
    """Correlation ids of device-to-host copies."""
    gpu = ev.gpu
    return gpu.loc[gpu["s_name"].str.startswith(DTOH) | gpu["s_name"].str.startswith("hip" + DTOH), "correlation"].to_numpy()


def blocking_copies(ev: RankEvents) -> pd.DataFrame:
    """Outermost copy ops (:data:`COPY_OPS`) that block the host: they call a
    memcpy and then wait for the stream (``non_blocking=False``), or call a
    synchronous copy API, and copy to the device (ops whose copies are all
    device-to-host reads are left out: :func:`dtoh_reads`; their wait is a
    synchronization, which ``non_blocking`` alone does not remove). Columns
    ``ts``, ``end``, ``s_name``, ``pid``, ``tid``, ``thread``."""
    cpu = ev.cpu
    copies = cpu[cpu["s_name"].isin(COPY_OPS)]
    runtime = cpu[cpu["s_cat"].eq("cuda_runtime") & cpu["s_name"].isin(MEMCPY_APIS + STREAM_SYNC_APIS)]
    rows = []
    if copies.empty or runtime.empty:
        return pd.DataFrame(columns=["ts", "end", "s_name", "pid", "tid", "thread"])
    dtoh = np.isin(runtime["correlation"].to_numpy(), _dtoh_correlations(ev))
    c_thr, r_thr = thread_ids(copies), thread_ids(runtime)
    for thread in np.unique(c_thr).tolist():
        r = runtime[r_thr == thread]
        r_dtoh = dtoh[r_thr == thread]
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
        idx, rts, names, r_dtoh = idx[inside], rts[inside], names[inside], r_dtoh[inside]
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
        to_device = np.zeros(k, dtype=bool)  # a copy that is not a device-to-host read
        np.logical_or.at(to_device, idx[is_copy], ~r_dtoh[is_copy])
        blocking = (sync_copy | (last_sync >= first_copy)) & to_device
        outer = c.drop_duplicates("ts")  # the first (longest) op at each start
        name_at = dict(zip(outer["ts"].to_numpy(dtype=float), outer["s_name"]))
        pid, tid = c["pid"].iloc[0], c["tid"].iloc[0]
        for j in np.flatnonzero(blocking):
            rows.append((u[j, 0], u[j, 1], name_at.get(u[j, 0], "aten::copy_"), pid, tid, thread))
    return pd.DataFrame(rows, columns=["ts", "end", "s_name", "pid", "tid", "thread"])


def pageable_calls(ev: RankEvents) -> pd.DataFrame:
    """The runtime calls (``cudaMemcpyAsync``...) of copies from pageable host
    memory (the GPU event's name says ``Pageable``; device-to-host reads are
    left out, see :func:`dtoh_reads`), linked by correlation."""
    gpu = ev.gpu
    pageable = gpu[gpu["s_name"].str.contains("Pageable", regex=False)]
    pageable = pageable[~pageable["correlation"].isin(_dtoh_correlations(ev))]
    if pageable.empty:
        return ev.cpu.iloc[0:0]
    cpu = ev.cpu
    runtime = cpu[cpu["s_cat"].eq("cuda_runtime")]
    return runtime[runtime["correlation"].isin(pageable["correlation"])]


def dtoh_reads(ev: RankEvents) -> pd.DataFrame:
    """Runtime calls of device-to-host copies the host waits for: to pageable
    memory (the ``cudaMemcpyAsync`` returns when the copy is done), through a
    synchronous copy API, or followed by a stream synchronization inside the
    same outermost op (``aten::item``, ``aten::to``...). Rows of ``ev.cpu``
    with a ``bytes`` column (the copy's size)."""
    gpu = ev.gpu
    dtoh = gpu[gpu["correlation"].isin(_dtoh_correlations(ev))]
    cpu = ev.cpu
    if dtoh.empty:
        return cpu.iloc[0:0].assign(bytes=pd.Series(dtype="int64"))
    runtime = cpu[cpu["s_cat"].eq("cuda_runtime") & cpu["s_name"].isin(MEMCPY_APIS)]
    size = dtoh.groupby("correlation")["bytes"].max()
    pageable = set(dtoh.loc[dtoh["s_name"].str.contains("Pageable", regex=False), "correlation"].tolist())
    calls = runtime[runtime["correlation"].isin(size.index)]
    if calls.empty:
        return calls.assign(bytes=pd.Series(dtype="int64"))
    waits = calls["s_name"].isin(SYNC_COPY_APIS).to_numpy() | calls["correlation"].isin(pageable).to_numpy()
    # followed by a stream sync in the same outermost aten:: op
    syncs = cpu[cpu["s_cat"].eq("cuda_runtime") & cpu["s_name"].isin(STREAM_SYNC_APIS)]
    if len(syncs) and not waits.all():
        blocks, thr = outermost_blocks(cpu[cpu["s_cat"].eq("cpu_op") & cpu["s_name"].str.startswith("aten::")])
        if len(blocks):
            call_b = _block_of(blocks, thr, calls)
            sync_b = _block_of(blocks, thr, syncs)
            last_sync = np.full(len(blocks), -np.inf)
            ok = sync_b >= 0
            np.maximum.at(last_sync, sync_b[ok], syncs["ts"].to_numpy(dtype=float)[ok])
            has = call_b >= 0
            waits[has] |= last_sync[call_b[has]] >= calls["ts"].to_numpy(dtype=float)[has]
    out = calls[waits]
    return out.assign(bytes=out["correlation"].map(size).fillna(0).astype("int64"))


#: Calls that block the host until GPU work is done.
WAIT_APIS = STREAM_SYNC_APIS + ("cudaEventSynchronize", "hipEventSynchronize")


def sync_waits(ev: RankEvents, reads: pd.DataFrame) -> pd.DataFrame:
    """The host's blocking waits for the GPU: synchronizing runtime calls and
    device-to-host reads (``reads``, :func:`dtoh_reads`), with ``ts``, ``end``, ``thread``."""
    cpu = ev.cpu
    calls = cpu[cpu["s_cat"].eq("cuda_runtime") & cpu["s_name"].isin(WAIT_APIS)]
    parts = [calls[["ts", "end", "thread"]]]
    if len(reads):
        parts.append(reads[["ts", "end", "thread"]])
    return pd.concat(parts).drop_duplicates()


def outermost_blocks(ops: pd.DataFrame):
    """The outermost of ``ops`` per host thread: ``(blocks, threads)`` where
    ``blocks`` is ``(n, 2)`` ``[start, end]`` (µs) of ops not nested in
    another (an op starting at or after the end of the ones before it starts
    a block) and ``threads`` the thread code of each block."""
    if ops.empty:
        return np.empty((0, 2)), np.empty(0, dtype=np.int64)
    out, thr = [], []
    threads = thread_ids(ops)
    ts_all, end_all = ops["ts"].to_numpy(dtype=float), ops["end"].to_numpy(dtype=float)
    for thread in np.unique(threads).tolist():
        sel = threads == thread
        ts, end = ts_all[sel], end_all[sel]
        order = np.lexsort((-end, ts))
        ts, end = ts[order], end[order]
        run = np.maximum.accumulate(end)
        start = np.ones(len(ts), dtype=bool)
        start[1:] = ts[1:] >= run[:-1]
        block = np.cumsum(start) - 1
        b_end = np.zeros(int(block[-1]) + 1)
        np.maximum.at(b_end, block, end)
        out.append(np.column_stack([ts[start], b_end]))
        thr.append(np.full(int(start.sum()), thread, dtype=np.int64))
    blocks, threads_out = np.concatenate(out), np.concatenate(thr)
    order = np.lexsort((blocks[:, 0], threads_out))
    return blocks[order], threads_out[order]


def _block_of(blocks: np.ndarray, threads: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    """For each row (by its start and thread), the index of the block of
    :func:`outermost_blocks` holding it, or -1."""
    out = np.full(len(rows), -1)
    ts, thr = rows["ts"].to_numpy(dtype=float), thread_ids(rows)
    for thread in np.unique(thr).tolist():
        idx = np.flatnonzero(threads == thread)
        if not len(idx):
            continue
        sel = thr == thread
        j = containing_index(blocks[idx], ts[sel])
        out[sel] = np.where(j >= 0, idx[np.maximum(j, 0)], -1)
    return out


def sync_contexts(ev: RankEvents, reads: pd.DataFrame, extra_names=()) -> np.ndarray:
    """Where a GPU idle gap that begins counts as synchronization, as a union
    (µs): every synchronizing call (stream/device/event synchronization,
    ``aten::item``, ``aten::_local_scalar_dense`` and ``extra_names``), every
    device-to-host read the host waits for (``reads``, :func:`dtoh_reads`),
    the outermost ``aten::`` op on the same thread that holds one of them
    (the GPU may drain a moment before the host reaches the call itself
    inside ``aten::item`` or ``aten::nonzero``), and the time from each of
    them to the thread's next launch call (the host has no work queued
    ahead then; another stream may still run when the call returns, so the
    GPU can go idle after it)."""
    cpu = ev.cpu
    points = cpu[is_sync(cpu) | cpu["s_name"].isin(tuple(extra_names)).to_numpy(dtype=bool)]
    if len(reads):
        points = pd.concat([points, cpu.loc[cpu.index.intersection(reads.index)]])
    if points.empty:
        return np.empty((0, 2))
    parts = [points[["ts", "end"]].to_numpy(dtype=float)]
    blocks, thr = outermost_blocks(cpu[cpu["s_cat"].eq("cpu_op") & cpu["s_name"].str.startswith("aten::")])
    if len(blocks):
        b = _block_of(blocks, thr, points)
        parts.append(blocks[np.unique(b[b >= 0])])
    # after a synchronization the host has no work queued ahead: until its next launch on that
    # thread, the GPU idles because of it (other streams may still run when the call returns)
    launches = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & cpu["s_name"].isin(LAUNCH_APIS)]
    if len(launches):
        p_end, p_thr = points["end"].to_numpy(dtype=float), thread_ids(points)
        l_ts, l_thr = launches["ts"].to_numpy(dtype=float), thread_ids(launches)
        for thread in np.unique(p_thr).tolist():
            sel = p_thr == thread
            nxt = np.sort(l_ts[l_thr == thread])
            if not len(nxt):
                continue
            j = np.searchsorted(nxt, p_end[sel], side="left")
            ok = j < len(nxt)
            parts.append(np.column_stack([p_end[sel][ok], nxt[j[ok]]]))
    both = np.concatenate(parts)
    return intervals.union(both[:, 0], both[:, 1])


def add_copy_metrics(m: MemcpySummary, ev: RankEvents, w: np.ndarray, hw: np.ndarray, blocking: pd.DataFrame,
                     calls: pd.DataFrame, reads: pd.DataFrame) -> MemcpySummary:
    """Fill the per-step copy fields of ``m`` (see :class:`MemcpySummary`):
    GPU times over the re-based windows ``w``, host calls counted over the
    host windows ``hw``, given the rank's :func:`blocking_copies`,
    :func:`pageable_calls` and :func:`dtoh_reads`."""
    n = len(w)
    wu = intervals.union(w[:, 0], w[:, 1]) if n else np.empty((0, 2))
    mem = ev.gpu[ev.gpu["kernel_type"].eq(MEMORY)]
    copies = mem[~mem["s_name"].str.contains("Memset", case=False)]
    busy = ev.gpu_union(COMPUTATION, COMMUNICATION)
    is_dtoh = copies["correlation"].isin(_dtoh_correlations(ev))
    is_pageable = copies["s_name"].str.contains("Pageable", regex=False) & ~is_dtoh

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
    in_reads = reads[_starts_in(reads, hu)] if len(reads) else reads
    m.dtoh_reads_per_step = per_step(len(in_reads), n)
    if len(in_reads):
        m.dtoh_read_min_bytes = int(in_reads["bytes"].min())
        m.dtoh_read_max_bytes = int(in_reads["bytes"].max())
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
