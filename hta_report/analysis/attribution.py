"""GPU idle time inside the analyzed steps, attributed to what the host was doing.

The categories and their order are documented on
:class:`hta_report.model.IdleAttribution`. This is our own interval arithmetic
on HTA's parsed events: HTA's idle-time breakdown says *that* a stream waited
for the host (host wait), not *on what* the host spent that time.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from ..model import IDLE_CAUSES, GpuGap, IdleAttribution, OptimizerProfile
from .. import intervals
from .cpu_side import DATALOADER_PREFIXES, is_sync
from .events import RankEvents
from .host_loops import loops
from .gap_causes import DRAIN_MIN_US, drained_us, host_work, innermost_names, late_starts, queued_work
from .optimizer import step_regions, zero_grad_regions
from .evidence import cause_events
from .regions import containing_index, full_gap_bounds, per_step, rebased_steps
from .steps import analyzed_windows

#: A gap "begins inside" a blocking call when it starts between the call's
#: start and its end plus this tolerance (µs): the call returns right after
#: the GPU drains, and CPU and GPU clocks are aligned only to a few µs.
GAP_START_TOLERANCE_US = 10.0
#: Gaps shorter than this (µs) while the host runs ops are launch overhead
#: between back-to-back kernels (HTA's launch-delay cutoff, 100 µs); longer
#: ones mean the host was busy with other work.
SHORT_GAP_US = 100.0
#: Blocking waits closer than this (µs) count as one (a read's copy, then its stream sync).
MERGE_WAITS_US = 50.0
#: HTA's ``consecutive_kernel_delay`` (µs): a queued operation starting after
#: a shorter gap is kernel wait (launch latency between back-to-back kernels).
KERNEL_WAIT_US = 30.0
CATEGORIES = IDLE_CAUSES


def _u(df: pd.DataFrame) -> np.ndarray:
    if df is None or len(df) == 0:
        return np.empty((0, 2))
    return intervals.union(df["ts"].to_numpy(dtype=float), df["end"].to_numpy(dtype=float))


def gaps_beginning_in(idle: np.ndarray, calls, busy: Optional[np.ndarray] = None) -> np.ndarray:
    """The rows of the idle union ``idle`` whose gap begins inside one of
    ``calls`` (a dataframe with ``ts``/``end``, or a union; extended by
    :data:`GAP_START_TOLERANCE_US`). A gap begins where the GPU activity
    ``busy`` before it ends (a row cut by a window edge keeps its gap's
    start); without ``busy``, at the row's start."""
    if len(idle) == 0 or calls is None or len(calls) == 0:
        return np.empty((0, 2))
    if isinstance(calls, pd.DataFrame):
        starts, ends = calls["ts"].to_numpy(dtype=float), calls["end"].to_numpy(dtype=float)
    else:
        starts, ends = calls[:, 0], calls[:, 1]
    cu = intervals.union(starts, ends + GAP_START_TOLERANCE_US)
    begin = idle[:, 0] if busy is None else full_gap_bounds(idle, busy)[0]
    return idle[containing_index(cu, begin) >= 0]


def _named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Rows of ``df`` named ``name`` (the single-tensor optimizer when several step)."""
    return df[df["s_name"].eq(name)]


def host_activity(ev: RankEvents) -> np.ndarray:
    """When the host runs profiled code, as a union (µs): the innermost
    events on threads that launch GPU work (:func:`.gap_causes.host_work`)."""
    return host_work(ev)


def window_edges(ev: RankEvents, wu: np.ndarray, work: Optional[np.ndarray] = None) -> np.ndarray:
    """Without ``ProfilerStep`` annotations, the traced window's host-only
    edges, a union (µs): from its start to the rank's first GPU operation and
    from its last one to its end, less ``work`` (a union, µs: the workload's
    own host work found there). Empty when the windows are steps (idle at a
    step's start is the step's).

    Why: without steps, the stretches before the first and after the last GPU
    operation are where the profiler started and stopped (inputs made, the
    model built, the profiler's own flush), not a GPU gap of the workload;
    no finding claims them. That holds only where the host does not run the
    workload there: a Python loop over elements (:func:`loop_spans`) that
    runs after the last GPU operation (``x.cpu()``, then ``for i in
    range(len(x)): total += x[i]``) or before the first is the workload's
    own work, with the GPU idle, and its time belongs to the host's causes
    (host ops; ``per-sample-ops``), not to the edge. Other ops there stay
    edge: a one-off op before the first launch (``torch.randn`` of the
    inputs) or after the last GPU operation cannot be told from the
    program's setup and teardown; a loop of 16 or more repeated iterations
    (:data:`~.host_loops.MIN_ITERATIONS`) can."""
    if len(wu) == 0 or ev.gpu.empty or len(analyzed_windows(rebased_steps(ev))):
        return np.empty((0, 2))
    first, last = float(ev.gpu["ts"].min()), float(ev.gpu["end"].max())
    edges = np.array([[wu[0, 0], max(wu[0, 0], first)], [min(last, wu[-1, 1]), wu[-1, 1]]])
    edges = edges[edges[:, 1] > edges[:, 0]]
    if work is not None and len(work) and len(edges):
        edges = intervals.subtract(edges, work)
    return edges


def loop_spans(ev: RankEvents, w: np.ndarray) -> np.ndarray:
    """The stretches of the Python loops over elements in the windows ``w``
    (:func:`~.host_loops.loops`: from a loop's first indexing op to the end of
    its last iteration), a union (µs); empty without loops. The Python
    between a loop's recorded ops is the loop's too."""
    found = loops(ev, w) if len(w) else None
    if found is None or found.empty:
        return np.empty((0, 2))
    return intervals.union(found["ts"].to_numpy(dtype=float), found["end"].to_numpy(dtype=float))


def drained_syncs(sync: np.ndarray, waits: Optional[pd.DataFrame], drained: np.ndarray) -> np.ndarray:
    """The rows of the sync-context union ``sync`` (µs) that hold a blocking
    wait of ``waits`` that waited for queued GPU work (``drained``, per wait,
    :func:`.gap_causes.drained_waits`), or no wait at all (a synchronizing op
    whose wait the trace does not show): a wait that returns at once drains
    nothing, and the idle around it is the host's."""
    if len(sync) == 0 or waits is None or waits.empty:
        return sync
    k = containing_index(sync, waits["ts"].to_numpy(dtype=float))
    has = np.zeros(len(sync), dtype=bool)
    has[k[k >= 0]] = True
    drains = np.zeros(len(sync), dtype=bool)
    hit = (k >= 0) & drained
    drains[k[hit]] = True
    return sync[~has | drains]


def full_gap_length(idle: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """For each row of ``idle``, the length of the whole GPU gap it belongs to
    (:func:`full_gap_bounds`; inf before the first or after the last activity)."""
    if len(idle) == 0:
        return np.empty(0)
    if len(busy) == 0:
        return np.full(len(idle), np.inf)
    j = np.searchsorted(busy[:, 1], idle[:, 0], side="right") - 1
    k = np.searchsorted(busy[:, 0], idle[:, 1], side="left")
    before = np.where(j >= 0, busy[np.maximum(j, 0), 1], -np.inf)
    after = np.where(k < len(busy), busy[np.minimum(k, len(busy) - 1), 0], np.inf)
    return after - before


def whole_rows(parts: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """The rows of ``parts`` (pieces of the union ``idle``, µs) that are a
    whole row of ``idle``."""
    if len(parts) == 0 or len(idle) == 0:
        return np.empty((0, 2))
    k = containing_index(idle, parts[:, 0])
    row = idle[np.maximum(k, 0)]
    same = (k >= 0) & (np.abs(row[:, 0] - parts[:, 0]) < 1e-6) & (np.abs(row[:, 1] - parts[:, 1]) < 1e-6)
    return parts[same]


def lead_lost_us(host_idle: np.ndarray, waits: Optional[pd.DataFrame], drained: np.ndarray) -> float:
    """GPU idle (µs, in ``host_idle``: a union) that follows a blocking wait
    of ``waits`` (rows with ``ts``, ``end``, ``thread``), before the next wait
    on that thread, up to the queued GPU work done during the wait
    (``drained``, µs per wait: :func:`.gap_causes.drained_us`). While the
    host waits, the GPU works off the queue the host had built up; afterwards
    the host has nothing queued ahead, so host work that queue would have
    covered shows as GPU idle, up to its length. A wait on an idle GPU (a
    read whose only GPU work is its own copy) gives up no lead."""
    if waits is None or waits.empty or len(host_idle) == 0:
        return 0.0
    ts, end, thr = waits["ts"].to_numpy(dtype=float), waits["end"].to_numpy(dtype=float), waits["thread"].to_numpy()
    order = np.lexsort((ts, thr))
    ts, end, thr = ts[order], end[order], thr[order]
    wait = np.asarray(drained, dtype=float)[order]
    # waits less than MERGE_WAITS_US apart (a copy, then its stream sync) are one wait
    new = np.ones(len(ts), dtype=bool)
    new[1:] = (thr[1:] != thr[:-1]) | (ts[1:] - end[:-1] >= MERGE_WAITS_US)
    block = np.cumsum(new) - 1
    b_wait = np.bincount(block, weights=wait)
    b_end = np.zeros(len(b_wait))
    np.maximum.at(b_end, block, end)
    b_ts, b_thr = ts[new], thr[new]
    nxt = np.append(b_ts[1:], np.inf)
    nxt[:-1][b_thr[1:] != b_thr[:-1]] = np.inf  # the last wait of a thread runs to the end
    nxt = np.maximum(nxt, b_end)
    avail = intervals.overlap_each(np.column_stack([b_end, nxt]), host_idle)
    return float(np.minimum(b_wait, avail).sum())


def idle_attribution(ev: RankEvents, w: np.ndarray, opt: OptimizerProfile, blocking: pd.DataFrame,
                     pageable: pd.DataFrame, sync: np.ndarray, warmup: pd.DataFrame,
                     waits: Optional[pd.DataFrame] = None, top_gaps: int = 10,
                     unrecorded: Optional[np.ndarray] = None) -> IdleAttribution:
    """Split the GPU idle time of one rank inside the analyzed windows ``w``
    by host activity (µs per step; see :class:`~hta_report.model.IdleAttribution`).

    Args:
        ev: the rank's events.
        w: analyzed windows, ``(n, 2)``.
        opt: the rank's optimizer profile (decides whether zero_grad and
            optimizer regions are categories).
        blocking: blocking copy ops (:func:`~hta_report.analysis.copies.blocking_copies`).
        pageable: runtime calls of pageable copies (:func:`~hta_report.analysis.copies.pageable_calls`).
        sync: synchronization contexts, a union (:func:`~hta_report.analysis.copies.sync_contexts`).
        warmup: one-off warm-up calls (:func:`~hta_report.analysis.warmup.warmup_calls`).
        waits: blocking synchronizations (:func:`~hta_report.analysis.copies.sync_waits`),
            for ``sync_lead_us`` (:func:`lead_lost_us`).
        top_gaps: how many of the longest gaps to list.
        unrecorded: when the GPU ran work the trace lacks, a union
            (:func:`~hta_report.analysis.integrity.unrecorded_lead`).
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
    host = host_activity(ev)
    all_busy = _u(gpu)
    short = idle[full_gap_length(idle, all_busy) < SHORT_GAP_US]
    queued = queued_work(ev, idle)
    late, out.late_starts = late_starts(ev)
    out.late_start_us = per_step(intervals.total(intervals.intersect(late, idle)), n)
    short_q = (queued[:, 1] - queued[:, 0]) < KERNEL_WAIT_US
    q_short = whole_rows(queued[short_q], idle)  # gaps queued from start to end: HTA's kernel wait
    queued = queued[~short_q]  # a short wait after a launch inside a longer gap stays the host's
    drained = drained_us(ev, waits)
    looped = loop_spans(ev, w)
    regions: Dict[str, np.ndarray] = {
        "unrecorded": unrecorded if unrecorded is not None else np.empty((0, 2)),
        "warmup": _u(warmup),
        "edge": window_edges(ev, wu, looped),
        "stream_wait": queued,
        "dataloader": _u(cpu[cpu["s_name"].str.startswith(DATALOADER_PREFIXES)]),
        "pageable_copy": gaps_beginning_in(idle, pageable, all_busy),
        "blocking_copy": gaps_beginning_in(idle, blocking, all_busy),
        "sync": gaps_beginning_in(idle, drained_syncs(sync, waits, drained >= DRAIN_MIN_US), all_busy),
        "zero_grad": _u(zero_grad_regions(ev, None)) if opt.zero_ops_per_step > 0 else np.empty((0, 2)),
        "optimizer": (_u(_named(step_regions(ev, None), opt.step_name)) if opt.step_calls and not opt.multi_tensor
                      else np.empty((0, 2))),
        "launch": intervals.intersect(host, short),
        "host_ops": intervals.union(np.concatenate([host[:, 0], looped[:, 0]]),
                                    np.concatenate([host[:, 1], looped[:, 1]])) if len(looped) else host,
    }
    remaining = idle
    parts: Dict[str, np.ndarray] = {}
    # queued gaps under HTA's kernel-wait cutoff are launch latency: taken out first, counted as launch
    q_launch = intervals.subtract(intervals.subtract(intervals.intersect(remaining, q_short), regions["warmup"]),
                                  regions["edge"])
    remaining = intervals.subtract(remaining, q_launch)
    for name in CATEGORIES[:-1]:
        part = intervals.intersect(remaining, regions[name])
        if name == "launch" and len(q_launch):
            part = intervals.union(np.concatenate([part[:, 0], q_launch[:, 0]]),
                                   np.concatenate([part[:, 1], q_launch[:, 1]]))
        parts[name] = part
        setattr(out, f"{name}_us", per_step(intervals.total(part), n))
        remaining = intervals.subtract(remaining, part)
    parts["unattributed"] = remaining
    out.unattributed_us = per_step(intervals.total(remaining), n)
    out.host_loop_us = per_step(intervals.total(intervals.intersect(parts["host_ops"], looped)), n)
    host_idle = intervals.union(*(np.concatenate([parts[c][:, i] for c in ("launch", "host_ops", "unattributed")])
                                  for i in (0, 1)))
    out.sync_lead_us = per_step(lead_lost_us(host_idle, waits, drained), n)
    out.gaps = _longest_gaps(ev, idle, parts, top_gaps)
    out.events = cause_events(ev.rank, gpu, all_busy, parts, _cause_calls(ev, opt, blocking, pageable, warmup, waits),
                              wu)
    return out


def _cause_calls(ev: RankEvents, opt: OptimizerProfile, blocking: pd.DataFrame, pageable: pd.DataFrame,
                 warmup: pd.DataFrame, waits: Optional[pd.DataFrame]) -> Dict[str, pd.DataFrame]:
    """Cause -> the host calls of that idle cause, with ``ts``/``dur``
    (:func:`~hta_report.analysis.evidence.cause_events`): synchronizing calls
    and ops and the blocking waits, pageable and blocking copies, DataLoader,
    warm-up, and the zero_grad and optimizer annotations where those are causes."""
    cpu = ev.cpu
    sync = cpu[is_sync(cpu)]
    if waits is not None and len(waits):
        sync = pd.concat([sync, cpu.loc[cpu.index.intersection(waits.index)]])
    calls = {"sync": sync[~sync.index.duplicated()], "pageable_copy": pageable,
             "blocking_copy": blocking.assign(dur=blocking["end"] - blocking["ts"]) if len(blocking) else None,
             "dataloader": cpu[cpu["s_name"].str.startswith(DATALOADER_PREFIXES)], "warmup": warmup,
             "zero_grad": zero_grad_regions(ev, None) if opt.zero_ops_per_step > 0 else None,
             "optimizer": (_named(step_regions(ev, None), opt.step_name) if opt.step_calls and not opt.multi_tensor
                           else None)}
    return {k: v for k, v in calls.items() if v is not None and len(v) and "dur" in v.columns}


def _longest_gaps(ev: RankEvents, idle: np.ndarray, parts: Dict[str, np.ndarray], top: int) -> List[GpuGap]:
    if len(idle) == 0:
        return []
    steps = analyzed_windows(rebased_steps(ev))
    order = np.argsort(-(idle[:, 1] - idle[:, 0]), kind="stable")[:top]
    gaps = []
    for i in order:
        g0, g1 = float(idle[i, 0]), float(idle[i, 1])
        gap = np.array([[g0, g1]])
        cause = max(CATEGORIES, key=lambda c: intervals.overlap(gap, parts[c]))
        names = innermost_names(ev, g0, g1)
        step = 0
        if len(steps):
            k = np.searchsorted(steps[:, 1], g0, side="right") - 1
            step = int(steps[k, 0]) if k >= 0 and g0 < steps[k, 2] else 0
        gaps.append(GpuGap(start_us=g0, duration_us=g1 - g0, step=step, cause=cause, host_ops=names))
    return gaps
