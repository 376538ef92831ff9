"""Replay a rank's execution graph and predict its step time after an edit (issue 30).

The stage between the loaded events and the advice: :func:`replay` builds
the graph (:mod:`.replay_graph`), schedules it with the measured durations
(:func:`schedule`: every node starts when its latest predecessor allows, one
queue per stream, host threads in order), compares the replayed step times
with the measured ones (the fidelity check), walks the critical path of each
step (:func:`critical_path`) and replays edits of the graph (:data:`EDITS`):
what a fix would buy.

Step time is the step thread's time from one ``ProfilerStep`` boundary to the
next, mapped into replay time (markers in the host chain); GPU work a step
leaves behind counts where a later synchronization waits for it. Without
steps, the whole window: from its start to the last host call's or GPU
operation's end. Where the host ran ahead of the GPU, the what-ifs start from
the :func:`span` per step instead: from the end of the GPU work queued before
the first window (:meth:`~.replay_graph.Graph.backlog`) to the end of the
work the last step launched (``Replay.gpu_paced_step_us``). Times are µs.

Not modelled: collectives keep their measured durations (other ranks are
not replayed), host threads interact only through the GPU (a thread's idle
time waiting for another thread is fixed host time), and the launch queue
has no depth limit.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from itertools import combinations
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

import pandas as pd

from .. import intervals
from ..model import WHATIF_MIN_SAVING_PCT, ALL_EDITS, Replay, ReplayOp, WhatIf, combined_edit, saves
from .cpu_side import DATALOADER_PREFIXES, self_times
from .edits import BEST, CPU_ERROR_PCT, EDITS, MID, WORST, Edit, apply, warmup_nodes
from .events import RankEvents, is_step, name_strings
from .integrity import graph_launches_without_ops
from .launch_calls import KERNEL_LAUNCH_APIS
from .regions import LAUNCH_CATEGORIES, containing_index
from .replay_graph import E_ANCHOR, E_HOST, E_LAUNCH, GPU, MARKER, Graph, build_graph, edge_targets, latest_constraint, step_thread
from .steps import analyzed_windows, step_windows

#: Ops named on a rank's critical path (:attr:`Replay.critical_path`).
TOP_PATH_OPS = 5
#: How many ops (by start) before a host interval's middle are searched for the
#: innermost one holding it; bounds the naming's work (ops nest a few levels deep).
NAME_LOOKBACK = 64
#: Up to this many edits that change a rank, every combination of them is
#: replayed (``Replay.whatifs``, labels :func:`~hta_report.model.combined_edit`);
#: past it only the pairs and all of them (a replay per combination).
MAX_ALL_SUBSETS = 3
#: A host interval at least this long (µs) on the critical path is named by
#: the self time of the ops inside it (:func:`_self_time_split`), not by the
#: op holding its middle: a whole step on a rank without GPU work, long
#: Python between two launches.
SPLIT_HOST_US = 1000.0
#: Where the GPU falls behind the ProfilerStep windows by more than this much (% of the mean
#: step) each step (:func:`gpu_lag_growth`), the host ran ahead of the GPU and the windows measure
#: the host alone (on an H200, 2.0 ms a step for a GPU busy 16.6 ms: bench/record_cuda.py
#: pageable-copy after its fix): the what-ifs then start from the replayed span per step (the
#: steps' time up to the end of the GPU work they launched), the basis their savings are measured
#: on. 5 %: proposal.
HOST_AHEAD_PCT = 5.0
#: With one analyzed step no lag can grow (:func:`gpu_lag_growth` needs two): there the host ran
#: ahead when the step's span (up to the end of the GPU work it launched) exceeds its window by this
#: much (%). Larger than :data:`HOST_AHEAD_PCT` because a synchronous step also ends with its last
#: kernels still running; 25 %: proposal. Without it a one-step trace of a GPU-bound loop measured
#: on its host window predicted "200 µs -> 0 µs" for a fix that shortens the kernels.
ONE_STEP_AHEAD_PCT = 25.0
#: Where the replay's span exceeds the measured windows by more than this (%), a what-if's saving
#: is taken as its share of the span, not as µs off the measured step (:meth:`WhatIfRunner.after`);
#: within it the two agree to the replay's fidelity (median under 3 %) and the µs are kept. 10 %: proposal.
SPAN_PAST_STEP_PCT = 10.0
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
    :func:`whatif`)."""
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


class PathLabels:
    """Integer codes of the critical path's ``(name, kind)`` entries for a
    graph ``g`` (:func:`critical_path` adds up time by code, without a key
    made per node walked): per node, its name with kind ``gpu`` (a GPU
    operation) or ``cpu``; and the entries the edges stand for (the
    DataLoader annotation's, ``launch latency``, ``GPU queue``). Equal
    ``(name, kind)`` pairs share a code."""

    def __init__(self, g: Graph) -> None:
        code: Dict[str, int] = {}
        codes = [code.setdefault(name, len(code)) for name in g.name]  # by first appearance
        self.names: List[str] = list(code)
        self.ids: List[int] = (np.array(codes, dtype=np.int64) * 2 + (g.kind == GPU)).tolist()

        def of(name: str, gpu: bool) -> int:
            if name not in code:
                code[name] = len(self.names)
                self.names.append(name)
            return code[name] * 2 + int(gpu)
        self.dl, self.launch, self.queue = of(g.dl_name, False), of("launch latency", True), of("GPU queue", True)

    def key(self, i: int) -> Tuple[str, str]:
        """The ``(name, kind)`` of code ``i``."""
        return self.names[i // 2], "gpu" if i % 2 else "cpu"

    def named(self, acc: Dict[int, float]) -> Dict[Tuple[str, str], float]:
        """``acc`` (µs by code) by ``(name, kind)``, in the same order."""
        return {self.key(i): us for i, us in acc.items()}


def critical_path(g: Graph, start: List[float], end: List[float], arg: List[int], t0: float, t1_node: int,
                  labels: PathLabels) -> Tuple[Dict[int, float], Dict[int, float]]:
    """Time (µs) on the critical path of the window from ``t0`` to node
    ``t1_node``'s end, by ``(name, kind)`` code of ``labels``, and by host
    edge: walking back from that node along each node's binding edge, a
    node's own time goes to its name (kind ``gpu`` for GPU operations, else
    ``cpu``) and an edge's offset to what it stands for (a host edge: the
    host work between two calls, by edge number in the second dict, named
    later by :func:`name_host_work`, its DataLoader part by the annotation;
    a launch edge: ``launch latency``; the measured delays of queued GPU
    work: ``GPU queue``). The times add up to the window's length."""
    acc: Dict[int, float] = defaultdict(float)
    host: Dict[int, float] = defaultdict(float)
    t1 = end[t1_node]
    node = t1_node
    kinds, _, src, ek, dl = g.as_lists()
    ids, dl_id, launch_id, queue_id = labels.ids, labels.dl, labels.launch, labels.queue
    while node > 0:  # min(max(x, t0), t1) written out: the same values, without the calls
        s = start[node]
        s = t0 if t0 > s else s
        s = t1 if t1 < s else s
        e = end[node]
        e = t0 if t0 > e else e
        e = t1 if t1 < e else e
        if e > s and kinds[node] != MARKER:
            acc[ids[node]] += e - s
        k = arg[node]
        if k < 0:
            break
        p = src[k]
        p_end = end[p]
        pe = t0 if t0 > p_end else p_end
        pe = t1 if t1 < pe else pe
        if s > pe:
            kind = ek[k]
            if kind == E_HOST:
                d = dl[k]
                d = s - pe if s - pe < d else d
                if d > 0:
                    acc[dl_id] += d
                if s - pe - d > 0:
                    host[k] += s - pe - d
            elif kind == E_LAUNCH:
                acc[launch_id] += s - pe
            elif kind != E_ANCHOR:
                acc[queue_id] += s - pe
        if p_end <= t0:
            break
        node = p
    return acc, host


def name_host_work(ev: RankEvents, g: Graph, acc: Dict[Tuple[str, str], float], host: Dict[int, float]
                   ) -> Dict[Tuple[str, str], float]:
    """``acc`` (µs by ``(name, kind)``) with the host edges' time ``host``
    (µs by edge number, :func:`critical_path`) added, each named by the
    innermost CPU op or annotation (``ProfilerStep#N`` aside) on the edge's
    thread holding the middle of its measured interval (``host work`` where
    none does), or split by :class:`_SelfTimeSplit` where it is
    :data:`SPLIT_HOST_US` or longer."""
    out: Dict[Tuple[str, str], float] = defaultdict(float)
    for key, us in acc.items():
        out[key] += us
    if not host:
        return out
    cpu = ev.cpu
    keys = np.fromiter(host.keys(), dtype=np.int64, count=len(host))
    spans = g.gap[keys]
    mids = (spans[:, 0] + spans[:, 1]) / 2
    threads = g.thread[g.src[keys]]  # a host edge's interval is its source's thread's (a trigger: the step thread's)
    # a step's annotation holds everything: not a name for its host work
    ops = cpu.loc[cpu["s_cat"].isin(("cpu_op", "user_annotation")) & cpu["thread"].isin(np.unique(threads))
                  & (cpu["ts"] <= float(np.nanmax(spans[:, 1]))) & (cpu["end"] >= float(np.nanmin(spans[:, 0])))
                  & ~is_step(cpu["s_name"]), ["ts", "end", "dur", "thread", "s_name"]]
    ts, en, thr = ops["ts"].to_numpy(float), ops["end"].to_numpy(float), ops["thread"].to_numpy()
    names = name_strings(ops["s_name"])
    order = np.lexsort((ts, thr))
    found = np.full(len(keys), -1, dtype=np.int64)
    for t in np.unique(threads).tolist():
        rows = order[thr[order] == t]  # the thread's ops by start
        q = np.flatnonzero(threads == t)
        j = np.searchsorted(ts[rows], mids[q], side="right") - 1
        stop = np.maximum(-1, j - NAME_LOOKBACK)
        # the latest-starting op still open at the middle is the innermost: step back, all intervals at once
        live = np.flatnonzero(j > stop)
        while len(live):
            hit = en[rows[j[live]]] > mids[q[live]]
            found[q[live[hit]]] = rows[j[live[hit]]]
            live = live[~hit]
            j[live] -= 1
            live = live[j[live] > stop[live]]
    long = (spans[:, 1] - spans[:, 0]) >= SPLIT_HOST_US
    split = _SelfTimeSplit(ops, names, spans[long]) if long.any() else None
    labels = np.where(found >= 0, names[np.maximum(found, 0)] if len(names) else "", "host work").tolist()
    long_at = set(np.flatnonzero(long).tolist()) if split is not None else set()
    for i, (label, us) in enumerate(zip(labels, host.values())):
        if i in long_at and split is not None:
            a, z = spans[i].tolist()
            parts = split.of(a, z, int(threads[i]), float(g.dl[keys[i]]), us)
            if parts:
                for name, part in parts.items():
                    out[(name, "cpu")] += part
                continue
        out[(label, "cpu")] += us
    return out


class _SelfTimeSplit:
    """Names a long host interval (:data:`SPLIT_HOST_US` or more: a whole
    step of a rank without GPU work, long Python between two launches) by
    the self time of the ops of ``ops`` (CPU rows, with their ``names``)
    inside it, computed once for all intervals."""

    def __init__(self, ops: pd.DataFrame, names: np.ndarray, spans: np.ndarray) -> None:
        ts, end = ops["ts"].to_numpy(float), ops["end"].to_numpy(float)
        u = intervals.union(spans[:, 0], spans[:, 1])  # only ops inside one of the long intervals count
        k = containing_index(u, ts)
        inside = (k >= 0) & (end <= u[np.maximum(k, 0), 1])
        ops, names = ops[inside], np.asarray(names)[inside]
        self.ts, self.end = ts[inside], end[inside]
        self.thr = ops["thread"].to_numpy()
        self.own = self_times(ops)  # an op's children lie inside it: the same self time as over all ops
        self.codes, uniq = pd.factorize(pd.Series(names, dtype=object))
        self.uniq = [str(x) for x in uniq]
        dl = ops["s_name"].str.startswith(DATALOADER_PREFIXES).fillna(False).to_numpy(dtype=bool)
        self.keep = np.ones(len(ops), dtype=bool)  # not inside a DataLoader annotation (named apart)
        mid = (self.ts + self.end) / 2
        for t in np.unique(self.thr[dl]).tolist():
            u = intervals.union(self.ts[dl & (self.thr == t)], self.end[dl & (self.thr == t)])
            self.keep &= ~((self.thr == t) & (containing_index(u, mid) >= 0))
        self.by_start = np.lexsort((self.ts, self.thr))
        self.thr_by_start, self.ts_by_start = self.thr[self.by_start], self.ts[self.by_start]

    def of(self, a: float, z: float, thr: int, dl_us: float, us: float) -> Dict[str, float]:
        """The ``us`` µs of ``[a, z]`` on thread ``thr`` by name: the self
        time of the ops that lie entirely inside it and outside DataLoader
        annotations (whose ``dl_us`` the path names apart), scaled to ``us``;
        the rest is ``host work`` (Python outside ops). Empty: no op inside."""
        lo = int(np.searchsorted(self.thr_by_start, thr, side="left"))
        hi = int(np.searchsorted(self.thr_by_start, thr, side="right"))
        ts = self.ts_by_start[lo:hi]
        rows = self.by_start[lo + int(np.searchsorted(ts, a, side="left")):lo + int(np.searchsorted(ts, z, side="right"))]
        rows = rows[(self.end[rows] <= z) & self.keep[rows]]
        if not len(rows):
            return {}
        by = np.bincount(self.codes[rows], weights=self.own[rows], minlength=len(self.uniq))
        room = max(z - a - dl_us, 0.0)
        scale = us / room if room > 0 else 0.0
        out = {self.uniq[i]: float(by[i]) * scale for i in np.flatnonzero(by > 0).tolist()}
        total = float(by.sum())
        if room > total:
            out["host work"] = out.get("host work", 0.0) + (room - total) * scale
        return out


def rank_graph(ev: RankEvents, hw: np.ndarray) -> Union[str, Tuple[Graph, np.ndarray, bool]]:
    """The graph :func:`replay` schedules, the windows it measures (``(n, 2)``
    µs) and whether they are steps; or why the rank is not replayed. A rank
    without GPU work is its host timeline: the step thread's markers and
    the host time between them."""
    if len(hw) == 0:
        return "no analyzed window"
    steps = len(analyzed_windows(step_windows(ev))) > 0
    w = np.asarray(hw, dtype=float)
    lo, hi = float(w[0, 0]), float(w[-1, 1])
    if not steps and ev.has_gpu:  # the window ends at the step thread's last runtime call
        w = np.array([[lo, _last_call_end(ev, lo)]])
        hi = float(w[0, 1]) + 1e-6
    elif not steps:
        w = np.array([[lo, hi]])
        hi += 1e-6
    g = build_graph(ev, w.ravel(), lo, hi)
    if ev.has_gpu and (not g.has_gpu or not ((g.ekind == E_LAUNCH).any())):
        return "no GPU work launched by host calls in the analyzed window"
    if len(g.order) < g.size:
        return "the trace's times order its events in a cycle (a malformed trace)"
    return g, w, steps


def span(g: Graph, w: np.ndarray, end: List[float], steps: bool) -> float:
    """Replayed time (µs) from the first window's start to the last one's
    end, or to the end of the GPU work, whichever is later (the GPU work the
    steps leave behind counts, so a host that gets ahead of a busy GPU gains
    nothing it would lose to that GPU later). Unlike a sum of step times it
    never grows when an edit removes a constraint: the windows' starts are
    not fixed points (a step that starts earlier is longer).

    Symmetrically, it starts once the GPU has run the work queued before the
    first window (:meth:`~.replay_graph.Graph.backlog`), where that is later
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


#: The two-sided 80 % quantile of a normal distribution: a prediction's interval
#: (:func:`interval`) is meant to hold the step measured after the fix 4 times in 5.
Z80 = 1.2816
#: What-ifs are not made on a rank whose analyzed window is this much one-off
#: warm-up (%, :class:`~hta_report.model.Warmup`: context creation, allocator
#: growth, first launches, capture, autotuning): a fix to the steady step
#: cannot be read off cold start (proposal: half the window).
WITHHOLD_WARMUP_PCT = 50.0


class WhatIfRunner:
    """Replays edits of one rank's graph (:func:`whatif`): the graph ``g``,
    its windows ``w`` (``steps``: ProfilerStep windows), the measured mean
    step the savings come off (``measured``, µs), the unmodified replay's
    span ``base`` (µs), the measured per-window times (µs), the rank's
    ``devices``, the warm-up nodes no edit removes (``protect``) and, per
    edge, whether it binds in the unmodified schedule (``binding``). Edits
    that come to the same inputs are scheduled once."""

    def __init__(self, ev: RankEvents, g: Graph, w: np.ndarray, steps: bool, measured: float, base: float,
                 measured_windows: np.ndarray, rank: int = 0, devices: Sequence[str] = (),
                 binding: Optional[np.ndarray] = None, protect: Optional[np.ndarray] = None) -> None:
        self.ev, self.g, self.w, self.steps = ev, g, w, steps
        self.measured, self.base, self.rank = measured, base, rank
        self.measured_windows = measured_windows
        self.devices, self.binding, self.protect = tuple(devices), binding, protect
        self.memo: Dict[bytes, float] = {}

    def edited(self, labels: Sequence[str], setting: str = MID) -> Edit:
        """The inputs after the edits ``labels`` at ``setting`` (:meth:`~.edits.Edit.pick`)."""
        e = Edit.of(self.g, self.devices, self.w, setting)
        apply(self.ev, self.g, e, labels, self.protect)
        return e

    def saved(self, e: Edit) -> float:
        """What the edited inputs ``e`` save of the unmodified replay's :func:`span` (µs)."""
        key = hashlib.blake2b(b"".join(np.ascontiguousarray(a).tobytes() for a in (e.off, e.drop, e.dur, e.delay)),
                              digest_size=16).digest()
        if key not in self.memo:
            self.memo[key] = self.base - span(self.g, self.w, schedule_ends(self.g, e), self.steps)
        return self.memo[key]

    def after(self, saved: float) -> float:
        """The measured step (µs) less ``saved`` µs of the replay's span over
        the ``n`` analyzed windows, bounded both ways. Every edit removes or
        shortens work, so a negative saving is the replay's, not the fix's (a
        backlog of GPU work queued before the first window that an edit
        shortens moves the span's start earlier): no change. The saving per
        window is at most the replayed share ``saved / base`` of the measured
        step where the replay spans more than :data:`SPAN_PAST_STEP_PCT` past
        the measured windows (GPU work past the last window): there the
        absolute saving would reach past what the step holds, down to 0 µs."""
        saved = max(0.0, saved)
        n = len(self.w)
        absolute = self.measured - saved / n
        if self.base > n * self.measured * (1 + SPAN_PAST_STEP_PCT / 100):
            absolute = max(absolute, self.measured * (1.0 - saved / self.base))
        return max(0.0, absolute)

    def whatif(self, labels: Sequence[str]) -> Tuple[WhatIf, bool, bool]:
        """:func:`whatif` of ``labels`` on this rank."""
        g = self.g
        e = self.edited(labels)
        inputs = not (np.array_equal(e.off, g.off) and np.array_equal(e.dur, g.dur)
                      and np.array_equal(e.delay, g.delay))
        changed = inputs or bool(e.drop.any())
        applies = changed if self.binding is None else inputs or bool((e.drop & self.binding).any())
        # an edit that cannot save what counts (saves()) is not scheduled and reported as saving nothing
        scheduled = changed and most_saved(g, e) >= self.base * WHATIF_MIN_SAVING_PCT / 100
        mid = self.saved(e) if scheduled else 0.0
        best = worst = mid
        if scheduled and e.ranged:
            best, worst = self.saved(self.edited(labels, BEST)), self.saved(self.edited(labels, WORST))
        after = self.after(mid)
        low, high = interval(self.measured, after, self.after(best), self.after(worst), self.measured_windows,
                             error_pct(labels) if g.has_gpu else CPU_ERROR_PCT)
        label = combined_edit(labels)
        text = "; ".join(EDITS[x].description for x in labels)
        return WhatIf(edit=label, description=text, step_us_before=self.measured, rank=self.rank, applies=applies,
                      step_us_after=after, step_us_low=low, step_us_high=high), changed, scheduled


def error_pct(labels: Sequence[str]) -> float:
    """The measured error (%) of the edits ``labels`` made together: the
    largest of theirs (:attr:`~.edits.EditSpec.error_pct`)."""
    return max((EDITS[x].error_pct for x in labels), default=0.0)


def interval(before: float, after: float, best: float, worst: float, measured_windows: np.ndarray,
             edit_error_pct: float) -> Tuple[float, float]:
    """The 80 % interval ``(low, high)`` (µs) of a predicted step ``after``
    (µs; ``before`` the step it starts from): from ``best`` to ``worst``, the
    predictions at the ends of the edit's own uncertain parameters
    (:meth:`~.edits.Edit.pick`; both ``after`` where it has none), each
    widened by the relative half-width ``h = sqrt((Z80 * se)^2 + E^2)``: ``se``
    the relative standard error of the mean of the analyzed steps
    (``measured_windows``, µs: the trace's own step-to-step variation, which a
    recording after the fix has too), ``E`` the edit's measured error on
    recorded pairs (``edit_error_pct``, %: how the host's speed differs
    between recordings, and what the edit leaves out). ``high`` is at most
    ``before`` widened by the same ``h``: an edit removes work, and a step
    measured after it differs from one before only by the noise. The steps
    are not replayed one by one for it: an edit moves work across step
    boundaries (a host that no longer waits starts the next step's work
    early), so one step's saving is not that step's own."""
    x = np.asarray(measured_windows, dtype=float)
    mean = float(x.mean()) if len(x) else 0.0
    se = float(np.std(x, ddof=1) / np.sqrt(len(x)) / mean) if len(x) > 1 and mean > 0 else 0.0
    h = float(np.hypot(Z80 * se, edit_error_pct / 100))
    low = max(0.0, min(best, after) * (1 - h))
    high = min(max(worst, after) * (1 + h), before * (1 + h))
    return low, max(high, after)


def whatif(ev: RankEvents, g: Graph, w: np.ndarray, steps: bool, labels: List[str], measured: float,
           base: float, rank: int = 0, devices: Sequence[str] = (),
           binding: Optional[np.ndarray] = None) -> Tuple[WhatIf, bool, bool]:
    """Replay ``g`` with the edits ``labels`` of :data:`~.edits.EDITS` made
    together (in that order): the mean step ``measured`` (µs) less what the
    edit saves of the replayed :func:`span` of the windows ``w``, per window;
    ``base`` is that span on the unmodified replay (µs). Also whether the
    edits changed the graph's inputs at all, and whether they were scheduled
    (not when they change nothing, or :func:`most_saved` says they cannot
    save :data:`~hta_report.model.WHATIF_MIN_SAVING_PCT` of the step);
    ``devices``: the rank's device names (:class:`~.edits.Edit`).
    ``binding``: per edge, whether it binds its target in the unmodified
    schedule; the what-if ``applies`` only where the edits change a duration,
    delay or offset or drop a binding edge (dropping edges that bind nothing
    cannot change this schedule: the finding keeps its bound). Without it,
    any change applies. The prediction carries its 80 % interval
    (:func:`interval`)."""
    runner = WhatIfRunner(ev, g, w, steps, measured, base, measured_times(g, w, not steps), rank, devices, binding)
    return runner.whatif(labels)


def replay(ev: RankEvents, hw: np.ndarray, rank: int = 0, devices: Sequence[str] = (),
           warmup: Optional[pd.DataFrame] = None, warmup_us: float = 0.0) -> Replay:
    """Replay one rank (see the module doc) over its analyzed host windows
    ``hw`` (``(n, 2)`` µs: the analyzed ``ProfilerStep`` windows, or the whole
    trace), with the fidelity figures, the critical path and the what-ifs of
    :data:`~.edits.EDITS`: one by one, the combinations of those that change
    the rank (:data:`MAX_ALL_SUBSETS`), and all of them (:data:`ALL_EDITS`). A
    rank whose GPU work no host call launches in the window is not replayed:
    the ``note`` says why and the figures stay 0. ``devices``: the rank's
    ``deviceProperties`` names (the pinned copy rate's fallback); ``warmup``:
    its one-off warm-up calls (CPU rows), which no edit removes, and
    ``warmup_us`` their time per analyzed step (µs): where it is
    :data:`WITHHOLD_WARMUP_PCT` of the step or more, no what-if is made and
    the note says why. A rank whose host launched kernels that left no GPU
    record, or CUDA-graph launches whose kernels the trace lacks
    (:func:`~.integrity.graph_launches_without_ops`), gets no what-if either."""
    built = rank_graph(ev, hw)
    if isinstance(built, str):
        return Replay(note=f"not replayed: {built}")
    g, w, steps = built
    start, end, arg = schedule(g)
    measured = measured_times(g, w, not steps)
    replayed = step_times(g, w, end, not steps)
    labels = PathLabels(g)
    acc: Dict[int, float] = defaultdict(float)
    host_us: Dict[int, float] = defaultdict(float)
    for a, z in w.tolist():
        on_path, host_edges = critical_path(g, start, end, arg, end[g.markers[a]], g.markers[z], labels)
        for code, us in on_path.items():
            acc[code] += us
        for k, us in host_edges.items():
            host_us[k] += us
    named = name_host_work(ev, g, labels.named(acc), host_us)
    total = sum(named.values())
    top = sorted(named.items(), key=lambda kv: -kv[1])[:TOP_PATH_OPS]
    n = len(w)
    host = sum(us for (_, kind), us in named.items() if kind == "cpu")
    m_mean, r_mean = float(measured.mean()), float(replayed.mean())
    base = span(g, w, end, steps)
    # a host that ran ahead of the GPU: the steps' time counting the GPU work they leave behind
    drift = gpu_lag_growth(g, w) if steps and n > 1 else 0.0
    # one analyzed step shows no growth: there, GPU work that runs well past the window (the span a quarter
    # longer than the window or more, ONE_STEP_AHEAD_PCT) is the host running ahead of a busier GPU
    ahead = drift > m_mean * HOST_AHEAD_PCT / 100 or \
        (steps and n == 1 and m_mean > 0 and base > m_mean * (1 + ONE_STEP_AHEAD_PCT / 100))
    before = base / n if ahead else m_mean  # the basis the savings are measured on (span)
    if ev.has_gpu:
        note = ("collectives keep their measured durations (other ranks are not replayed); another host thread "
                "waits for the training thread after idling, else only through the GPU; cross-stream waits and "
                "synchronizations are inferred from the times (the trace has no event ids)")
    else:
        note = "no GPU work: the step thread's host time alone (nothing overlaps it)"
    if not steps:
        note = ("no ProfilerStep: one window, from the trace's start to the end of the main thread's last "
                "runtime call or of the last GPU operation, whichever is later; " + note)
    if ahead:
        note += (f"; the host ran ahead of the GPU: what-ifs start from {before / 1e3:.2f} ms per step, counting the "
                 f"GPU work the steps leave behind (ProfilerStep measures {m_mean / 1e3:.2f} ms)")
    out = Replay(measured_step_us=m_mean, replayed_step_us=r_mean,
                 error_pct=abs(r_mean - m_mean) / m_mean * 100 if m_mean > 0 else 0.0, steps=n,
                 critical_path=[ReplayOp(name=nm, kind=kind, us=us / n) for (nm, kind), us in top],
                 host_share_pct=min(100.0, max(0.0, 100 * host / total)) if total > 0 else 0.0,
                 note=note, gpu_paced_step_us=before if ahead else 0.0)
    withheld = _withheld(ev, warmup_us, m_mean)
    if withheld:
        out.note = f"{note}; {withheld}"
        return out
    binding = np.zeros(len(g.off), dtype=bool)
    held = np.asarray(arg, dtype=np.int64)
    binding[held[held >= 0]] = True
    runner = WhatIfRunner(ev, g, w, steps, before, base, measured * (before / m_mean) if m_mean > 0 else measured,
                          rank, devices, binding, warmup_nodes(g, warmup) if warmup is not None else None)
    singles = [runner.whatif([label]) for label in EDITS]
    whatifs = [x for x, _, _ in singles]
    # combinations of the edits that save time alone; and all the edits that change the graph at once, since
    # one that saves little alone can save much with another, when both constraints hold the same step
    saving_alone = [label for label, (x, _, _) in zip(EDITS, singles) if saves(x)]
    changing = [label for label, (_, did, _) in zip(EDITS, singles) if did]
    combos = [list(c) for size in range(2, len(saving_alone) + 1) for c in combinations(saving_alone, size)
              if len(saving_alone) <= MAX_ALL_SUBSETS or size in (2, len(saving_alone))]
    whatifs += [runner.whatif(c)[0] for c in combos]
    if len(changing) > 1:
        everything: Optional[WhatIf] = next((x for x in whatifs if x.edit == combined_edit(changing)), None) \
            or runner.whatif(changing)[0]
    else:
        everything = next((x for x in whatifs if x.edit in changing), None)
    whatifs.append(WhatIf(edit=ALL_EDITS, step_us_before=before, rank=rank, applies=bool(changing),
                          description=everything.description if everything else "no edit changes this rank",
                          step_us_after=everything.step_us_after if everything else before,
                          step_us_low=everything.step_us_low if everything else before,
                          step_us_high=everything.step_us_high if everything else before))
    out.whatifs = whatifs
    return out


def _withheld(ev: RankEvents, warmup_us: float, step_us: float) -> str:
    """Why no what-if is made on this rank (empty: they are): a window that
    is mostly one-off warm-up (:data:`WITHHOLD_WARMUP_PCT`), kernel
    launches whose GPU records the trace lost (no GPU operation at all), or
    graph launches whose kernels it lost (any: the GPU time of a replay is
    unknown, and the prediction would leave it out)."""
    if step_us > 0 and warmup_us >= step_us * WITHHOLD_WARMUP_PCT / 100:
        return (f"no what-if made: {100 * warmup_us / step_us:.0f} % of the analyzed window is one-off warm-up "
                "(context creation, allocator growth, first launches, capture or autotuning), which no fix to the "
                "steady step removes; record steady steps (a profiler schedule with wait and warmup steps)")
    if not ev.has_gpu:
        launches = int(ev.cpu["s_name"].isin(KERNEL_LAUNCH_APIS).sum())
        if launches:
            return (f"no what-if made: the host launched {launches:,} kernels and the trace holds no GPU record of "
                    "them (the GPU side was lost or not recorded): a prediction would leave out the GPU's time")
        return ""
    graphs, dropped = graph_launches_without_ops(ev)
    if dropped:
        return (f"no what-if made: {dropped:,} of {graphs:,} CUDA-graph launches have no GPU operation in the trace "
                "(the profiler dropped their kernels: CUPTI's activity buffer, TraceLens #728): a prediction would "
                "leave out the GPU time of those replays; record fewer replays per window")
    return ""


def _last_call_end(ev: RankEvents, lo: float) -> float:
    """The last end of a runtime or driver call on the step thread
    (:func:`~.replay_graph.step_thread`), at least ``lo`` (µs)."""
    cpu = ev.cpu
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES) & cpu["thread"].eq(step_thread(ev))]
    return max(lo, float(calls["end"].max())) if len(calls) else lo


def gpu_lag_growth(g: Graph, w: np.ndarray) -> float:
    """How much later (µs per step) the GPU finishes each step's work than the
    step's window ends, growing from the first analyzed window to the last:
    ``(lag_last - lag_first) / (n - 1)``, where a window's lag is the latest
    measured end of the GPU work launched up to its end, less that end (0
    when the GPU is done first). A host throttled by the GPU (syncs, blocking
    copies) keeps a constant lag: 0; a host that runs ahead of a busier GPU
    adds the GPU's surplus every step: its windows measure the host alone."""
    dst = edge_targets(g.ptr)
    launch = g.ekind == E_LAUNCH
    if not launch.any() or len(w) < 2:
        return 0.0
    t_call = g.m_start[g.src[launch]]
    o = np.argsort(t_call, kind="stable")
    t_call = t_call[o]
    ends = np.maximum.accumulate(g.m_end[dst[launch]][o])
    marks = np.array([g.m_end[g.markers[float(z)]] for z in w[:, 1]])
    i = np.searchsorted(t_call, marks, side="right") - 1
    lag = np.where(i >= 0, np.maximum(ends[np.maximum(i, 0)] - marks, 0.0), 0.0)
    return float(max(0.0, (lag[-1] - lag[0]) / (len(w) - 1)))


def measured_times(g: Graph, w: np.ndarray, gpu_tail: bool) -> np.ndarray:
    """Measured duration (µs) of each window of ``w``, as :func:`step_times` replays it."""
    d = w[:, 1] - w[:, 0]
    if gpu_tail and g.has_gpu:
        last_gpu = float(g.m_end[g.kind == GPU].max())
        d = np.maximum(w[:, 1], last_gpu) - w[:, 0]
    return d
