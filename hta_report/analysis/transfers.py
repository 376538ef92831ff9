"""Memcpy/memset and communication: time, bytes, bandwidth, overlap, exposure."""
from __future__ import annotations

import re
from typing import Dict, List

import numpy as np

from ..model import MAX_COLLECTIVE_LAUNCHES, CollectiveLaunch, CommSummary, MemcpyDirection, MemcpySummary, StepValue
from .. import intervals
from .events import COMMUNICATION, COMPUTATION, MEMORY, RankEvents, linked_calls
from .regions import rebased_steps
from .steps import analyzed_windows, step_windows

#: Byte counts above this are not believed (2**53, the largest integer a
#: float64 holds exactly: 9 PB, beyond any device's memory); such a copy's
#: bytes count as unknown (0), as a negative or non-finite count does.
MAX_COPY_BYTES = 2 ** 53

_DIRECTION = re.compile(r"^(?:hip)?Memcpy\s*(HtoD|DtoH|DtoD|HtoH|PtoP)", re.IGNORECASE)


def memcpy_direction(name: str) -> str:
    """``HtoD``/``DtoH``/``DtoD``/``HtoH``/``PtoP`` from a memcpy event name such
    as ``Memcpy HtoD (Pageable -> Device)``; ``Memset`` for memsets; else ``other``."""
    m = _DIRECTION.match(name)
    if m:
        return m.group(1)[0].upper() + "to" + m.group(1)[-1].upper()
    return "Memset" if "memset" in name.lower() else "other"


def memcpy_summary(ev: RankEvents) -> MemcpySummary:
    """Memcpy and memset time, bytes and bandwidth by direction, pageable and
    pinned counts, and how much memcpy time overlaps compute kernels or is
    exposed (no compute or communication kernel running), in µs. A copy's
    ``bytes`` that is negative, not finite or above :data:`MAX_COPY_BYTES`
    counts as 0 (unknown)."""
    mem = ev.gpu[ev.gpu["kernel_type"].eq(MEMORY)]
    if mem.empty:
        return MemcpySummary()
    directions: Dict[str, MemcpyDirection] = {}
    names = mem["s_name"].to_numpy()
    for name, dur, nbytes in zip(names, mem["dur"].to_numpy(), mem["bytes"].to_numpy()):
        d = directions.setdefault(memcpy_direction(name), MemcpyDirection(direction=memcpy_direction(name)))
        d.count += 1
        d.total_us += float(dur)
        d.total_bytes += int(nbytes) if 0 < nbytes <= MAX_COPY_BYTES else 0  # NaN fails both tests
        d.pageable_count += "Pageable" in name
        d.pinned_count += "Pinned" in name
    for d in directions.values():
        # bytes / µs = MB/s; / 1e3 -> GB/s
        d.bandwidth_gbps = d.total_bytes / d.total_us / 1e3 if d.total_us > 0 else 0.0
    copies = mem[~mem["s_name"].str.contains("Memset", case=False)]
    copy_u = intervals.union(copies["ts"].to_numpy(), copies["end"].to_numpy())
    overlapped = intervals.overlap(copy_u, ev.gpu_union(COMPUTATION))
    busy = ev.gpu_union(COMPUTATION, COMMUNICATION)
    exposed = intervals.total(copy_u) - intervals.overlap(copy_u, busy)
    order = ["HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Memset", "other"]
    return MemcpySummary(
        directions=sorted(directions.values(), key=lambda d: order.index(d.direction)),
        total_us=float(mem["dur"].sum()),
        overlapped_us=overlapped,
        exposed_us=exposed,
        exposed_pct=100 * exposed / ev.gpu_span_us if ev.gpu_span_us else 0.0,
    )


def comm_summary(ev: RankEvents, overlap_pct: float) -> CommSummary:
    """Communication kernels of a rank: count, time, HTA's overlap % (passed
    in), and exposed time (no compute kernel running) in µs and % of GPU span."""
    comm = ev.gpu[ev.gpu["kernel_type"].eq(COMMUNICATION)]
    if comm.empty:
        return CommSummary()
    comm_u = intervals.union(comm["ts"].to_numpy(), comm["end"].to_numpy())
    exposed = intervals.total(comm_u) - intervals.overlap(comm_u, ev.gpu_union(COMPUTATION))
    return CommSummary(
        kernel_count=int(len(comm)),
        total_us=float(comm["dur"].sum()),
        overlap_pct=float(overlap_pct),
        exposed_us=float(exposed),
        exposed_pct=100 * exposed / ev.gpu_span_us if ev.gpu_span_us else 0.0,
    )


def comm_overlap(view) -> Dict[int, float]:
    """HTA's ``get_comm_comp_overlap``: rank -> % of communication time overlapped by compute."""
    df = view.get_comm_comp_overlap(visualize=False)
    out = {}
    for r, v in zip(df["rank"], df["comp_comm_overlap_pctg"]):
        out[int(r)] = 0.0 if v is None or np.isnan(v) else float(v)
    return out


#: A communication kernel this many times the median of the same kernel
#: (same name: collective, algorithm, protocol and dtype) on the rank is
#: stalled, not transferring (:func:`collective_stalls`). Calls of one kernel
#: move messages of similar size (DDP buckets up to a cap, one tensor-parallel
#: activation per layer), and a collective's time grows at most linearly with
#: its bytes, so 10x the median is far past what a larger message explains.
STALL_FACTOR = 10.0
#: Calls of a kernel needed before its median is a baseline.
STALL_MIN_CALLS = 3
#: A stall shorter than this (µs) beyond the median is not reported.
STALL_MIN_US = 1000.0
#: Host-side collective ops (CPU backends wait inside them).
CPU_COLLECTIVE_PREFIXES = ("gloo:", "nccl:", "c10d::", "mpi:", "record_param_comms")


def add_comm_metrics(c: CommSummary, ev: RankEvents, w: np.ndarray, hw: np.ndarray) -> CommSummary:
    """Fill the per-step fields of ``c``: communication kernel time and its
    exposed part inside the analyzed (re-based) windows ``w``, and host time
    in collective ops inside the host windows ``hw`` (µs per step), and both
    times in each analyzed ``ProfilerStep``."""
    n = len(w)
    if n == 0:
        return c
    wu = intervals.union(w[:, 0], w[:, 1])
    all_comm = ev.gpu_union(COMMUNICATION) if ev.has_gpu else np.empty((0, 2))
    comm = intervals.intersect(all_comm, wu) if len(all_comm) else np.empty((0, 2))
    c.us_per_step = intervals.total(comm) / n
    compute = ev.gpu_union(COMPUTATION) if len(comm) else np.empty((0, 2))  # stalls are comm kernels too
    c.exposed_us_per_step = intervals.total(intervals.subtract(comm, compute)) / n if len(comm) else 0.0
    cpu = ev.cpu
    coll = cpu[cpu["s_name"].str.startswith(CPU_COLLECTIVE_PREFIXES)]
    coll_u = intervals.union(coll["ts"].to_numpy(), coll["end"].to_numpy()) if len(coll) else np.empty((0, 2))
    if len(coll):
        hu = intervals.union(hw[:, 0], hw[:, 1])
        c.cpu_collective_us_per_step = intervals.total(intervals.intersect(coll_u, hu)) / n
    stalls = collective_stalls(ev, wu)
    if len(stalls):
        c.stalls = len(stalls)
        waits = intervals.union(stalls["ts"].to_numpy(), stalls["wait_end"].to_numpy())
        c.stall_us_per_step = intervals.total(intervals.subtract(intervals.intersect(waits, wu), compute)) / n
        top = stalls.loc[stalls["excess"].idxmax()]
        c.stall_kernel, c.stall_us, c.stall_median_us = str(top["s_name"]), float(top["dur"]), float(top["median"])
        c.stall_calls = int(top["calls"])
    c.launches = collective_launches(ev, wu)
    steps = analyzed_windows(rebased_steps(ev))
    if len(all_comm) and len(steps):
        c.kernel_us_by_step = _by_step(steps, all_comm)
    host_steps = analyzed_windows(step_windows(ev))
    if len(coll_u) and len(host_steps):
        c.host_collective_us_by_step = _by_step(host_steps, coll_u)
    return c


def collective_stalls(ev: RankEvents, windows: np.ndarray):
    """The communication kernels of the rank starting inside ``windows``
    (union, ``(k, 2)`` µs) that ran :data:`STALL_FACTOR` times the median of
    the same kernel name or longer (at least :data:`STALL_MIN_CALLS` calls,
    and :data:`STALL_MIN_US` past the median): a rank's NCCL kernel spins
    until its peers arrive, so beyond the time its message takes (the
    median of its calls) it waited for a late peer, a host stall elsewhere or
    the window's end, and no overlap with compute can hide that.

    Returns:
        A frame with ``s_name``, ``ts``, ``dur``, ``median``, ``calls``,
        ``excess`` (``dur - median``) and ``wait_end`` (``end - median``: the
        wait comes first, the transfer last), empty when there is none.
    """
    import pandas as pd

    if not ev.has_gpu or not len(windows):
        return pd.DataFrame()
    g = ev.gpu[ev.gpu["kernel_type"].eq(COMMUNICATION)]
    if len(g) < STALL_MIN_CALLS:
        return pd.DataFrame()
    ts, end = g["ts"].to_numpy(dtype=float), g["end"].to_numpy(dtype=float)
    inside = intervals.overlap_each(np.column_stack([ts, np.maximum(ts, end)]), windows) > 0
    g = g[inside].assign(dur=(end - ts)[inside])
    if len(g) < STALL_MIN_CALLS:
        return pd.DataFrame()
    by = g.groupby("s_name", sort=False)["dur"]
    g = g.assign(median=by.transform("median"), calls=by.transform("size"))
    g = g.assign(excess=g["dur"] - g["median"])
    hit = (g["calls"] >= STALL_MIN_CALLS) & (g["dur"] >= STALL_FACTOR * g["median"]) & (g["excess"] >= STALL_MIN_US)
    out = g.loc[hit, ["s_name", "ts", "dur", "median", "calls", "excess"]]
    return out.assign(wait_end=out["ts"] + out["excess"])


def collective_launches(ev: RankEvents, windows: np.ndarray) -> List[CollectiveLaunch]:
    """The communication kernels of the rank starting inside ``windows``
    (union, ``(k, 2)`` µs) that are linked to a launch call (by
    correlation), with the call's start and the kernel's start and end (µs),
    in launch order; the first :data:`~hta_report.model.MAX_COLLECTIVE_LAUNCHES`."""
    if not ev.has_gpu or not len(windows):
        return []
    g = ev.gpu[ev.gpu["kernel_type"].eq(COMMUNICATION)]
    if g.empty:
        return []
    ts = g["ts"].to_numpy(dtype=float)
    g = g[intervals.overlap_each(np.column_stack([ts, np.maximum(ts, g["end"].to_numpy(dtype=float))]),
                                 windows) > 0]
    calls = linked_calls(ev)
    calls = calls[~calls["correlation"].duplicated(keep="first")].set_index("correlation")["ts"].rename("launch")
    joined = g[["correlation", "ts", "end"]].join(calls, on="correlation", how="inner")
    joined = joined.sort_values(["launch", "ts"], kind="stable").head(MAX_COLLECTIVE_LAUNCHES)
    return [CollectiveLaunch(launch_us=float(a), start_us=float(b), end_us=float(z))
            for a, b, z in zip(joined["launch"].tolist(), joined["ts"].tolist(), joined["end"].tolist())]


def _by_step(steps: np.ndarray, u: np.ndarray) -> List[StepValue]:
    """The time of union ``u`` inside each ``[number, start, end]`` row of ``steps``."""
    inside = intervals.overlap_each(steps[:, 1:3].astype(float), u)
    return [StepValue(number=int(num), us=float(us)) for num, us in zip(steps[:, 0], inside)]
