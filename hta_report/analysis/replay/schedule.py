"""Scheduling a replay graph (:mod:`.graph`) with measured or edited inputs.

:func:`schedule` gives every node's replayed start and end and the edge that
binds it (what :mod:`.path` walks); :func:`schedule_ends` the ends alone (what
a what-if needs); :func:`step_times`, :func:`measured_times` and :func:`span`
turn node ends into the windows' durations; :func:`most_saved` bounds what an
edit can save without scheduling. Times are µs.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .edits import Edit
from .graph import GPU, Graph, latest_constraint


def schedule(g: Graph, edit: Optional[Edit] = None) -> Tuple[List[float], List[float], List[int]]:
    """Replayed ``(start, end, binding edge)`` of every node of ``g`` (µs;
    edge -1: none), with the inputs of ``edit`` (default: the graph's own). A
    node starts at its latest predecessor's end plus the edge's offset, plus
    its own delay; it ends ``dur`` later. A node's first edge binds on ties,
    and a node without a usable edge (none, or all dropped) starts at 0 plus
    its delay."""
    order, count, first, src0, src1, src = g.in_order()
    offs, delay, dur = _inputs(g, edit)
    n = g.size
    start, end = [0.0] * n, [0.0] * n
    arg = [-1] * n
    ninf = float("-inf")
    for i, c, k, a, z in zip(order, count, first, src0, src1):  # nodes with 1 or 2 edges unrolled: most of them
        if c == 1:
            t = end[a] + offs[k]
            if t > ninf:
                s, b = t + delay[i], k
            else:
                s, b = 0.0 + delay[i], -1
        else:
            best, b = ninf, -1
            if c == 2:
                t = end[a] + offs[k]
                if t > best:
                    best, b = t, k
                t = end[z] + offs[k + 1]
                if t > best:
                    best, b = t, k + 1
            else:
                for j in range(k, k + c):
                    t = end[src[j]] + offs[j]
                    if t > best:
                        best, b = t, j
            s = (best if b >= 0 else 0.0) + delay[i]
        start[i], end[i], arg[i] = s, s + dur[i], b
    return start, end, arg


def schedule_ends(g: Graph, edit: Optional[Edit] = None) -> List[float]:
    """The replayed end (µs) of every node of ``g``: :func:`schedule`'s
    second list (the same float operations in the same order), without the
    starts and binding edges (what a what-if needs, :func:`span`)."""
    order, count, first, src0, src1, src = g.in_order()
    offs, delay, dur = _inputs(g, edit)
    end = [0.0] * g.size
    ninf = float("-inf")
    for i, c, k, a, z in zip(order, count, first, src0, src1):
        if c == 1:
            t = end[a] + offs[k]
            end[i] = ((t if t > ninf else 0.0) + delay[i]) + dur[i]
            continue
        best = ninf
        if c == 2:
            t = end[a] + offs[k]
            if t > best:
                best = t
            t = end[z] + offs[k + 1]
            if t > best:
                best = t
        else:
            for j in range(k, k + c):
                t = end[src[j]] + offs[j]
                if t > best:
                    best = t
        end[i] = ((best if best > ninf else 0.0) + delay[i]) + dur[i]
    return end


def _inputs(g: Graph, edit: Optional[Edit]) -> Tuple[List[float], List[float], List[float]]:
    """Edge offsets, node delays and durations (µs) of ``edit`` (default:
    ``g``'s own) as lists; a dropped edge's offset is -inf, so that it never
    binds (a node whose edges are all dropped starts at its delay)."""
    base = g.input_lists()
    if edit is None:
        return base
    off = np.where(edit.drop, -np.inf, edit.off) if edit.drop.any() else edit.off
    return _patched(off, g.off, base[0]), _patched(edit.delay, g.delay, base[1]), _patched(edit.dur, g.dur, base[2])


def _patched(values: np.ndarray, base: np.ndarray, base_list: List[float]) -> List[float]:
    """``values.tolist()``, made from ``base_list`` (``base.tolist()``) where
    few values differ from ``base`` (compared bit for bit: NaN and -0.0 too)."""
    diff = np.flatnonzero(values.view(np.int64) != base.view(np.int64))
    if len(diff) > len(values) // 8:  # patching one by one costs more than converting past some share
        return values.tolist()
    out = base_list.copy()
    for i, v in zip(diff.tolist(), values[diff].tolist()):
        out[i] = v
    return out


def step_times(g: Graph, w: np.ndarray, end: List[float], gpu_tail: bool, last_tail: bool = False) -> np.ndarray:
    """Replayed duration (µs) of each window ``[start, end]`` of ``w`` (the
    markers' replayed times); ``gpu_tail``: every window also lasts until the
    last GPU operation ends (a window without steps); ``last_tail``: the last
    window does (the GPU work the steps leave behind: what a what-if compares,
    :func:`~.whatif.whatif`)."""
    out = []
    last_gpu = float(np.asarray(end)[g.kind == GPU].max()) if (gpu_tail or last_tail) and g.has_gpu \
        else -np.inf
    rows = w.tolist()
    for i, (a, z) in enumerate(rows):
        t0, t1 = end[g.markers[a]], end[g.markers[z]]
        if gpu_tail or (last_tail and i == len(rows) - 1):
            t1 = max(t1, last_gpu)
        out.append(t1 - t0)
    return np.array(out, dtype=float)


def span(g: Graph, w: np.ndarray, end: List[float], steps: bool) -> float:
    """Replayed time (µs) from the first window's start to the last one's
    end, or to the end of the GPU work, whichever is later (the GPU work the
    steps leave behind counts, so a host that gets ahead of a busy GPU gains
    nothing it would lose to that GPU later). Unlike a sum of step times it
    never grows when an edit removes a constraint: the windows' starts are
    not fixed points (a step that starts earlier is longer).

    Symmetrically, it starts once the GPU has run the work queued before the
    first window (:meth:`~.graph.Graph.backlog`), where that is later
    than the window's start: the end of the step before's GPU work, as the
    span ends at the end of the last step's. Without that, a host that ran
    ahead counts the earlier steps' queued work as the analyzed steps':
    recorded on an H200 with a 64 MiB batch pinned and copied with
    ``non_blocking=True``, 18.7 ms a step from the first window's start,
    against 15.36 ms between the GPU's ``ProfilerStep`` marks and 15.33 ms
    without the profiler (2026-11-27)."""
    t1 = step_times(g, w[-1:], end, not steps, last_tail=True)[0] + end[g.markers[float(w[-1, 0])]]
    t0 = end[g.markers[float(w[0, 0])]]
    queued = g.backlog(float(w[0, 0]))
    if len(queued):
        t0 = max(t0, max(end[i] for i in queued.tolist()))
    return float(t1 - t0)


def most_saved(g: Graph, e: Edit) -> float:
    """An upper bound (µs) of what the edit ``e`` can save anywhere in the
    replay of ``g``, without scheduling: the sum over nodes of how much
    earlier each could start and end given its measured predecessors (the
    edited offsets and dropped edges, its edited delay and duration). In a
    schedule where every start is a latest predecessor's end plus an offset,
    no node ends earlier than the sum of these local reductions."""
    cons = latest_constraint(g.ptr, np.where(e.drop, -np.inf, g.m_end[g.src] + e.off))
    start = np.where(np.isfinite(cons), cons, 0.0) + e.delay
    earlier = np.clip(g.m_start - start, 0.0, None)
    earlier[0] = 0.0
    return float(earlier.sum() + np.clip(g.dur - e.dur, 0.0, None).sum())


def measured_times(g: Graph, w: np.ndarray, gpu_tail: bool) -> np.ndarray:
    """Measured duration (µs) of each window of ``w``, as :func:`step_times` replays it."""
    d = w[:, 1] - w[:, 0]
    if gpu_tail and g.has_gpu:
        last_gpu = float(g.m_end[g.kind == GPU].max())
        d = np.maximum(w[:, 1], last_gpu) - w[:, 0]
    return d
