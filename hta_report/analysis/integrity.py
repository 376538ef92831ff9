"""What a trace shows of its own gaps: where its GPU figures cannot be trusted.

A Kineto trace can under-record the GPU. These checks look for what the trace
itself shows of that, so that the report says so beside the figure instead
of advising on time that was not idle:

* **work before the first recorded operation**: the first GPU operation of a
  rank starts long after the call that launched it, and the trace holds no
  GPU operation before it. A launch onto an idle GPU starts within tens of
  µs, so the GPU was running work the trace does not hold (launched before
  the profiler started, or not recorded), or its clock is off the host's.
  That stretch is not GPU idle: it becomes the ``unrecorded`` part of the
  idle attribution, which no finding claims.
* **graph replays without their kernels**: a ``cudaGraphLaunch`` /
  ``hipGraphLaunch`` with no GPU operation carrying its correlation. CUPTI's
  activity buffer can drop them (TraceLens #728: about one replay in N
  recorded, 26 % idle shown on a 99 %-busy GPU); the GPU's idle time on the
  rank is then not known, and no rule advises on it.
* **GPU operations without a launch record**: kernels, memcpys or memsets
  whose correlation id matches no runtime call of a trace that has runtime
  calls (launched before the trace started, or records dropped); counted.
* **Stream Sync rows**: ``cuda_sync`` events, written on their own
  ``stream N (sync)`` rows (thread id stream + 1,000,000) since
  pytorch/kineto#1356: host waits shown on the GPU's timeline, not GPU work;
  they are left out of every GPU figure, and counted.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import Integrity
from .events import RankEvents

#: The first GPU operation starting this long (µs) after its launch call, with
#: nothing recorded on the GPU before it, shows unrecorded GPU work.
UNRECORDED_MIN_US = 1000.0
#: Runtime calls that replay a CUDA or HIP graph.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "cuGraphLaunch")


def _launch_calls(ev: RankEvents):
    """``(correlation ids, end times µs, whether a graph launch)`` of the
    rank's runtime and driver calls that carry a correlation id, as arrays."""
    cpu = ev.cpu
    calls = cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy().copy()
    corr = pd.to_numeric(cpu["correlation"], errors="coerce").to_numpy(dtype=float) \
        if "correlation" in cpu.columns else np.full(len(cpu), np.nan)
    calls &= corr > 0
    graph = cpu["s_name"].isin(GRAPH_LAUNCHES).to_numpy()  # on the categorical's categories
    return corr[calls], cpu["end"].to_numpy(dtype=float)[calls], graph[calls]


def unrecorded_lead(ev: RankEvents) -> np.ndarray:
    """The stretch before a rank's first recorded GPU operation during which
    the GPU ran work the trace does not hold (see the module doc), as a
    union: ``(1, 2)`` ``[launch call end, first operation start]`` µs, or ``(0, 2)``."""
    gpu = ev.gpu
    none = np.empty((0, 2))
    if gpu.empty or "correlation" not in gpu.columns:
        return none
    ts = gpu["ts"].to_numpy(dtype=float)
    first = int(np.argmin(ts))
    corr = pd.to_numeric(gpu["correlation"], errors="coerce").to_numpy(dtype=float)[first]
    if not corr > 0:
        return none
    call_corr, call_end, _ = _launch_calls(ev)
    ends = call_end[call_corr == corr]
    if not len(ends):
        return none
    launched, start = float(ends.max()), float(ts[first])
    return np.array([[launched, start]]) if start - launched >= UNRECORDED_MIN_US else none


def integrity(ev: RankEvents) -> Integrity:
    """The checks of the module doc on one rank's events (the whole trace,
    as the profiler recorded it); :attr:`Integrity.notes` says each finding
    in one line."""
    out = Integrity()
    gpu = ev.gpu
    out.sync_rows = int(ev.df["s_cat"].eq("cuda_sync").sum())
    call_corr, _, graphs = _launch_calls(ev)
    if not gpu.empty and len(call_corr) and "correlation" in gpu.columns:
        corr = pd.to_numeric(gpu["correlation"], errors="coerce").fillna(-1).to_numpy(dtype=float)
        unlinked = ~np.isin(corr, call_corr)
        out.unlinked_ops, out.unlinked_us = int(unlinked.sum()), float(gpu["dur"].to_numpy(dtype=float)[unlinked].sum())
        out.graph_launches = int(graphs.sum())
        if out.graph_launches:
            out.graph_launches_without_ops = int((~np.isin(call_corr[graphs], corr)).sum())
    lead = unrecorded_lead(ev)
    if len(lead):
        out.unrecorded_us = float(lead[0, 1] - lead[0, 0])
    out.idle_unreliable = out.graph_launches_without_ops > 0
    out.notes = _notes(out)
    return out


def _notes(i: Integrity) -> list:
    notes = []
    if i.unrecorded_us:
        notes.append(f"the first GPU operation starts {i.unrecorded_us / 1e3:,.2f} ms after its launch call returned, "
                     "with nothing recorded on the GPU before it: the GPU ran work the trace does not hold (launched "
                     "before the profiler started), or its clock is off the host's. That stretch is counted as "
                     "'not recorded', not as idle, and no finding claims it")
    if i.graph_launches_without_ops:
        notes.append(f"{i.graph_launches_without_ops} of {i.graph_launches} graph launches have no GPU operation in "
                     "the trace: the profiler dropped their kernels (CUPTI's activity buffer, TraceLens #728), so "
                     "the GPU's idle time is not known and no rule advises on it; record fewer replays per window")
    if i.unlinked_ops:
        notes.append(f"{i.unlinked_ops:,} GPU operations ({i.unlinked_us / 1e3:,.2f} ms) have no launch call in the "
                     "trace (launched before it started, or its records were dropped): their time counts as GPU "
                     "work, but no host op or line of code can be named for it")
    if i.sync_rows:
        notes.append(f"{i.sync_rows:,} Stream Sync events (cuda_sync, on their own 'stream N (sync)' rows) are host "
                     "waits drawn on the GPU's timeline: left out of every GPU figure")
    return notes
