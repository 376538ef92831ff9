"""What a GPU idle stretch waited for, instant by instant, for :mod:`.attribution`.

Three questions that decide whether the host is to blame for a gap:

* was work already queued (:func:`queued_work`)? From the moment the launch
  call of a GPU operation returns until the operation starts, the GPU has
  work it cannot run yet: it waits on an event from another stream
  (``cudaStreamWaitEvent``/``hipStreamWaitEvent``), a collective's peers or a
  stream dependency, not on the host. A gap is split at the launch of the
  operation that ends it, and work queued on any stream counts;
* did a synchronization wait for anything (:func:`drained_waits`)? A wait
  costs GPU idle only when the GPU still had earlier work to finish when
  the host started waiting; a read on an idle GPU (its own 2 µs copy) drains
  nothing;
* what did the host run (:func:`host_work`, :func:`innermost_names`)? The
  innermost events on the threads that launch GPU work: ops, runtime calls,
  Python frames and leaf annotations, not annotations that only enclose
  them, nor threads that never launch (a progress bar's monitor waiting).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from .. import intervals
from ..model import LATE_START_US
from .events import RankEvents, is_step, linked_calls, name_strings, shared

#: Host event categories counted as the host executing framework code.
HOST_OP_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
#: Python frames: the host runs the code they name (their self time is Python).
PYTHON_CATEGORY = "python_function"
#: User annotations: host work only where no event runs inside them (a leaf
#: annotation); one that holds ops or frames only encloses what they ran.
ANNOTATION_CATEGORY = "user_annotation"
#: A wait counts as draining queued GPU work when earlier work ran at least
#: this long (µs) inside it: CPU and GPU clocks are aligned only to a few µs
#: (the same tolerance as :data:`.attribution.GAP_START_TOLERANCE_US`).
DRAIN_MIN_US = 10.0
#: An enclosing event is named in a gap's evidence only when none of the
#: events inside it covers this share of its overlap with the gap (it is
#: then more than a wrapper around one call).
NESTED_SHARE = 0.9


def launch_ends(ev: RankEvents) -> np.ndarray:
    """For each row of ``ev.gpu``, when its launch call (runtime or driver
    call with the same correlation) returned (µs); NaN without one."""
    gpu, cpu = ev.gpu, ev.cpu
    runtime = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & (cpu["correlation"] > 0)]
    if runtime.empty or gpu.empty:
        return np.full(len(gpu), np.nan)
    end = runtime.groupby("correlation")["end"].max()
    return pd.Series(gpu["correlation"].to_numpy()).map(end).to_numpy(dtype=float)


#: Runtime calls that make a stream wait on an event recorded on another stream.
STREAM_WAIT_APIS = ("cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent")


def _launch_rows(ev: RankEvents) -> pd.DataFrame:
    """Per row of ``ev.gpu``: ``ts``, ``end`` and ``thread`` of its launch
    call (NaN/-1 without one)."""
    runtime = linked_calls(ev)
    first = runtime.sort_values("end").drop_duplicates("correlation", keep="last").set_index("correlation")
    corr = pd.Series(ev.gpu["correlation"].to_numpy())
    return pd.DataFrame({"ts": corr.map(first["ts"]).to_numpy(dtype=float),
                         "end": corr.map(first["end"]).to_numpy(dtype=float),
                         "thread": corr.map(first["thread"]).fillna(-1).to_numpy()})


@shared
def _queue_times(ev: RankEvents) -> Tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``ev.gpu`` (computed once per rank, never changed by a
    caller): its launch call (:func:`_launch_rows`), when that call returned
    and when the operation started (µs), the union of GPU activity, and when
    the GPU last went idle before each start (``-inf`` before the first)."""
    gpu = ev.gpu
    calls = _launch_rows(ev)
    launched, start = calls["end"].to_numpy(dtype=float), gpu["ts"].to_numpy(dtype=float)
    busy = intervals.union(start, gpu["end"].to_numpy(dtype=float))
    j = np.searchsorted(busy[:, 1], start, side="right") - 1  # the GPU activity ending last before each start
    went_idle = np.where(j >= 0, busy[np.maximum(j, 0), 1], -np.inf)
    return calls, launched, start, busy, went_idle


def _late(launched: np.ndarray, start: np.ndarray, went_idle: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """Per GPU operation (:func:`_queue_times`' arrays): whether it started
    :data:`LATE_START_US` or more after its launch returned on a GPU idle
    since before that launch: it opens a stretch of GPU activity (``busy``,
    the union) and the one before ended before the launch. An operation
    that starts while another runs (another stream) found the GPU busy."""
    k = np.searchsorted(busy[:, 0], start, side="right") - 1
    opens = (k >= 0) & (busy[np.maximum(k, 0), 0] >= start)
    return np.isfinite(launched) & (start - launched >= LATE_START_US) & (went_idle <= launched) & opens


def late_starts(ev: RankEvents) -> Tuple[np.ndarray, int]:
    """The stretches (a union, µs) from the launch call's return to the start
    of each GPU operation that started :data:`LATE_START_US` or more after it
    on a GPU idle since before the launch (no GPU activity of the rank in
    between): work queued on an idle GPU that did not run; and how many
    stretches of it there are (operations starting at one time count once)."""
    if ev.gpu.empty:
        return np.empty((0, 2)), 0
    _, launched, start, busy, went_idle = _queue_times(ev)
    late = _late(launched, start, went_idle, busy)
    if not late.any():
        return np.empty((0, 2)), 0
    return intervals.union(launched[late], start[late]), int(len(np.unique(start[late])))


def queued_work(ev: RankEvents, idle: np.ndarray) -> np.ndarray:
    """The part of the idle union ``idle`` (µs) during which a GPU operation
    that waits on something else than the host had been launched (its launch
    call had returned) and had not started yet: the GPU had work queued. An
    operation waits on something else when a stream-wait call
    (:data:`STREAM_WAIT_APIS`) on its launching thread came after the GPU last
    went idle before it and before its launch (another stream's event), when
    it is communication (a collective's peers), or, from the first gap that
    began after its launch, when it was queued at that gap's start (HTA's
    "other" idle), or when it started :data:`LATE_START_US` or more after its
    launch on an idle GPU (:func:`late_starts`). A union. Without such
    evidence, a late start after a launch is the host's gap (launch
    latency)."""
    gpu = ev.gpu
    if len(idle) == 0 or gpu.empty:
        return np.empty((0, 2))
    calls, launched, start, busy, went_idle = _queue_times(ev)
    ok = np.isfinite(launched) & (launched < start)
    if not ok.any():
        return np.empty((0, 2))
    b = np.searchsorted(busy[:, 1], np.where(ok, launched, np.inf), side="left")  # first gap beginning after launch
    gap_begin = np.where(b < len(busy), busy[np.minimum(b, len(busy) - 1), 1], np.inf)
    parts = [np.column_stack([gap_begin, start])[ok & (gap_begin < start)]]
    why = np.array(gpu["s_name"].str.startswith(("nccl", "rccl"), na=False), dtype=bool)  # per category
    why |= _late(launched, start, went_idle, busy)
    cpu = ev.cpu
    waits = cpu[cpu["s_name"].isin(STREAM_WAIT_APIS)]
    if len(waits):
        w_ts, w_thr = waits["ts"].to_numpy(dtype=float), waits["thread"].to_numpy()
        l_ts, l_thr = calls["ts"].to_numpy(dtype=float), calls["thread"].to_numpy()
        for thread in np.unique(w_thr).tolist():
            sel = ok & (l_thr == thread)
            if not sel.any():
                continue
            t = np.sort(w_ts[w_thr == thread])
            k = np.searchsorted(t, l_ts[sel], side="right") - 1  # the last wait call before the launch
            last = np.where(k >= 0, t[np.maximum(k, 0)], -np.inf)
            why[sel] |= last >= went_idle[sel]
    parts.append(np.column_stack([launched, start])[ok & why])
    both = np.concatenate(parts)
    if not len(both):
        return np.empty((0, 2))
    return intervals.intersect(intervals.union(both[:, 0], both[:, 1]), idle)


def drained_us(ev: RankEvents, waits: Optional[pd.DataFrame]) -> np.ndarray:
    """For each row of ``waits`` (``ts``, ``end``), how long (µs) GPU work
    launched before the wait began still ran inside it: what the wait
    actually waited for. A read's own copy, launched by the wait itself,
    does not count; an operation without a launch call in the trace (launched
    before the profiler started) counts as launched before every wait."""
    if waits is None or waits.empty:
        return np.empty(0)
    gpu = ev.gpu
    w0, w1 = waits["ts"].to_numpy(dtype=float), waits["end"].to_numpy(dtype=float)
    if gpu.empty:
        return np.zeros(len(w0))
    launched = launch_ends(ev)
    start, end = gpu["ts"].to_numpy(dtype=float), gpu["end"].to_numpy(dtype=float)
    launched = np.where(np.isfinite(launched), np.minimum(launched, start), -np.inf)
    order = np.argsort(launched, kind="stable")
    last_end = np.maximum.accumulate(end[order])  # latest end among ops launched up to each
    j = np.searchsorted(launched[order], w0, side="right") - 1
    pending = np.where(j >= 0, last_end[np.maximum(j, 0)], -np.inf)
    return np.clip(np.minimum(pending, w1) - w0, 0.0, None)


def drained_waits(ev: RankEvents, waits: Optional[pd.DataFrame]) -> np.ndarray:
    """Boolean per row of ``waits``: the host waited for queued GPU work
    (:func:`drained_us` at least :data:`DRAIN_MIN_US`)."""
    return drained_us(ev, waits) >= DRAIN_MIN_US


def launching_threads(cpu: pd.DataFrame) -> np.ndarray:
    """The ``thread`` codes of host threads that issue runtime or driver
    calls linked to GPU work (all threads when none does)."""
    calls = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & (cpu["correlation"] > 0)]
    return np.unique((calls if len(calls) else cpu)["thread"].to_numpy())


@shared
def _host_rows(ev: RankEvents) -> pd.DataFrame:
    """Host events of launching threads that can hold host work (ops,
    runtime calls, frames, annotations other than ``ProfilerStep#N``); made
    once per rank (:func:`~.events.shared`: :func:`host_rows` and
    :func:`host_work` both read them)."""
    cpu = ev.cpu
    cats = HOST_OP_CATEGORIES + (PYTHON_CATEGORY, ANNOTATION_CATEGORY)
    rows = cpu[cpu["s_cat"].isin(cats) & cpu["thread"].isin(launching_threads(cpu))]
    return rows[~is_step(rows["s_name"])]


@dataclass(frozen=True)
class HostRows:
    """:func:`_host_rows` of a rank as arrays, made once per rank
    (:func:`host_rows`): start and end (µs), thread code and name per row."""

    ts: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    names: np.ndarray


def host_rows(ev: RankEvents) -> HostRows:
    """The rank's :class:`HostRows`, computed on the first call and kept in
    ``ev.memo`` (each of the rank's longest gaps asks for them: ten filters
    and name conversions of the whole CPU frame took 0.16 s of a 28 MB
    rank's 1.0 s of analyses)."""
    key = f"{__name__}.host_rows"
    got = ev.memo.get(key)
    if got is None:
        rows = _host_rows(ev)
        got = ev.memo[key] = HostRows(ts=rows["ts"].to_numpy(dtype=float), end=rows["end"].to_numpy(dtype=float),
                                      thread=rows["thread"].to_numpy(), names=name_strings(rows["s_name"]))
    return got


def leaf_annotations(rows: pd.DataFrame) -> np.ndarray:
    """Boolean per row of ``rows``: a user annotation with no other event of
    ``rows`` starting inside it on its thread."""
    ann = (rows["s_cat"] == ANNOTATION_CATEGORY).to_numpy()
    if not ann.any():
        return ann
    ts, end, thr = rows["ts"].to_numpy(dtype=float), rows["end"].to_numpy(dtype=float), rows["thread"].to_numpy()
    order = np.lexsort((-end, ts, thr))  # by thread, start; an enclosing event before what it holds
    nxt_ts = np.append(ts[order][1:], np.inf)
    same = np.append(thr[order][1:] == thr[order][:-1], False)
    holds = same & (nxt_ts < end[order])
    leaf = np.zeros(len(ts), dtype=bool)
    leaf[order] = ~holds
    return ann & leaf


def host_work(ev: RankEvents) -> np.ndarray:
    """When the host runs code on a thread that launches GPU work, as a union
    (µs): CPU ops, runtime and driver calls, Python frames and leaf user
    annotations; annotations that hold other events (``execute_…``,
    ``step[…]``, ``ProfilerStep#N``) add nothing of their own."""
    rows = _host_rows(ev)
    keep = (rows["s_cat"] != ANNOTATION_CATEGORY).to_numpy() | leaf_annotations(rows)
    rows = rows[keep]
    if rows.empty:
        return np.empty((0, 2))
    return intervals.union(rows["ts"].to_numpy(dtype=float), rows["end"].to_numpy(dtype=float))


def innermost_names(ev: RankEvents, g0: float, g1: float, top: int = 3) -> List[str]:
    """Up to ``top`` names of what the host ran during ``[g0, g1)`` (µs),
    longest overlap first, on threads that launch GPU work: an event that
    merely wraps another (one inside it covers :data:`NESTED_SHARE` of its
    overlap with the gap: ``execute_…`` around the model runner, a
    ``__call__`` around the processor it calls) gives way to it, and so
    does one that spans the whole gap while the events inside it cover that
    share of it together (a training loop's frame around the step's calls)."""
    rows = host_rows(ev)
    ts, end, thr, names = rows.ts, rows.end, rows.thread, rows.names
    ov = np.minimum(end, g1) - np.maximum(ts, g0)
    sel = np.flatnonzero(ov > 0)
    if not len(sel):
        return []
    sel = sel[np.lexsort((ts[sel], -ov[sel]))]
    out: List[str] = []
    for i in sel:
        band = sel[(ov[sel] >= NESTED_SHARE * ov[i]) & (sel != i)]
        inside = (thr[band] == thr[i]) & (ts[band] >= ts[i]) & (end[band] <= end[i])
        # of two events with the same span, the later row is the inner one
        inside &= (ts[band] > ts[i]) | (end[band] < end[i]) | (band > i)
        if inside.any():
            continue
        if ts[i] <= g0 and end[i] >= g1:
            held = sel[(sel != i) & (thr[sel] == thr[i]) & (ts[sel] >= ts[i]) & (end[sel] <= end[i])]
            held = held[(ts[held] > ts[i]) | (end[held] < end[i]) | (held > i)]
            if len(held):
                cover = intervals.total(intervals.union(np.maximum(ts[held], g0), np.minimum(end[held], g1)))
                if cover >= NESTED_SHARE * ov[i]:
                    continue
        if names[i] not in out:
            out.append(names[i])
        if len(out) == top:
            break
    return out
