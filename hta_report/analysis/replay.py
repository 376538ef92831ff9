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
operation's end. Times are µs.

Not modelled: collectives keep their measured durations (other ranks are
not replayed), host threads interact only through the GPU (a thread's idle
time waiting for another thread is fixed host time), and the launch queue
has no depth limit.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..model import Replay, ReplayOp, WhatIf
from .events import RankEvents, is_step, name_strings
from .regions import LAUNCH_CATEGORIES
from .replay_graph import E_ANCHOR, E_HOST, E_LAUNCH, E_WAIT, GPU, MARKER, READ, SYNC, Graph, build_graph, step_thread
from .steps import analyzed_windows, step_windows

#: Ops named on a rank's critical path (:attr:`Replay.critical_path`).
TOP_PATH_OPS = 5
#: How many ops (by start) before a host interval's middle are searched for the
#: innermost one holding it; bounds the naming's work (ops nest a few levels deep).
NAME_LOOKBACK = 64
#: The edits replayed on every rank: (label, function of the graph returning
#: the edge offsets and the dropped-edge mask to schedule with).
EDITS: List[Tuple[str, str]] = [
    ("no host-device sync", "every synchronizing call and blocking device-to-host read stops waiting "
                            "for the GPU (keeps its own overhead)"),
    ("DataLoader hidden", "the host's time inside DataLoader iteration annotations goes to 0 (workers hide it)"),
]


def schedule(g: Graph, off: Optional[np.ndarray] = None, drop: Optional[np.ndarray] = None
             ) -> Tuple[List[float], List[float], List[int]]:
    """Replayed ``(start, end, binding edge)`` of every node of ``g`` (µs;
    edge -1: none), with the edge offsets ``off`` (default ``g.off``) and
    without the edges ``drop`` (a boolean mask). A node starts at its latest
    predecessor's end plus the edge's offset, plus its own delay; it ends
    ``g.dur`` later."""
    offs = (g.off if off is None else off).tolist()
    src = g.src.tolist()
    ptr = g.ptr.tolist()
    delay, dur = g.delay.tolist(), g.dur.tolist()
    dropped = drop.tolist() if drop is not None else None
    n = g.size
    start, end = [0.0] * n, [0.0] * n
    arg = [-1] * n
    ninf = float("-inf")
    for i in g.order:
        best, b = ninf, -1
        for k in range(ptr[i], ptr[i + 1]):
            if dropped is not None and dropped[k]:
                continue
            t = end[src[k]] + offs[k]
            if t > best:
                best, b = t, k
        s = (best if b >= 0 else 0.0) + delay[i]
        start[i], end[i], arg[i] = s, s + dur[i], b
    return start, end, arg


def edit_no_sync(g: Graph) -> Tuple[np.ndarray, np.ndarray]:
    """Edit (a): the wait edges into synchronizing calls and blocking reads dropped."""
    dst = np.repeat(np.arange(g.size), np.diff(g.ptr))
    drop = (g.ekind == E_WAIT) & np.isin(g.wait[dst], (SYNC, READ))
    return g.off, drop


def edit_no_dataloader(g: Graph) -> Tuple[np.ndarray, np.ndarray]:
    """Edit (b): the host's DataLoader time removed from the host edges."""
    return g.off - g.dl, np.zeros(len(g.off), dtype=bool)


EDIT_FUNCTIONS: Dict[str, Callable[[Graph], Tuple[np.ndarray, np.ndarray]]] = {
    "no host-device sync": edit_no_sync, "DataLoader hidden": edit_no_dataloader}


def step_times(g: Graph, w: np.ndarray, end: List[float], gpu_tail: bool) -> np.ndarray:
    """Replayed duration (µs) of each window ``[start, end]`` of ``w`` (the
    markers' replayed times); ``gpu_tail``: the window also lasts until the
    last GPU operation ends (a window without steps)."""
    out = []
    last_gpu = float(np.asarray(end)[g.kind == GPU].max()) if gpu_tail and (g.kind == GPU).any() else -np.inf
    for a, z in w.tolist():
        t0, t1 = end[g.markers[a]], end[g.markers[z]]
        if gpu_tail:
            t1 = max(t1, last_gpu)
        out.append(t1 - t0)
    return np.array(out, dtype=float)


def critical_path(g: Graph, start: List[float], end: List[float], arg: List[int], t0: float, t1_node: int
                  ) -> Dict[Tuple[str, str], float]:
    """Time (µs) on the critical path of the window from ``t0`` to node
    ``t1_node``'s end, by ``(name, kind)``: walking back from that node along
    each node's binding edge, a node's own time goes to its name (kind
    ``gpu`` for GPU operations, else ``cpu``) and an edge's offset to what it
    stands for (a host edge: the host work between two calls, named later by
    :func:`name_host_work`, its DataLoader part by the annotation; a launch
    edge: ``launch latency``; the measured delays of queued GPU work: ``GPU
    queue``). The times add up to the window's length."""
    acc: Dict[Tuple[str, str], float] = defaultdict(float)
    t1 = end[t1_node]
    node = t1_node
    clip = (lambda t: min(max(t, t0), t1))
    kinds, names, src, ek = g.kind, g.name, g.src, g.ekind
    while node > 0:
        s, e = clip(start[node]), clip(end[node])
        if e > s and kinds[node] != MARKER:
            acc[(names[node], "gpu" if kinds[node] == GPU else "cpu")] += e - s
        k = arg[node]
        if k < 0:
            break
        p = int(src[k])
        pe = clip(end[p])
        if s > pe:
            kind = int(ek[k])
            if kind == E_HOST:
                d = min(float(g.dl[k]), s - pe)
                if d > 0:
                    acc[(g.dl_name, "cpu")] += d
                if s - pe - d > 0:
                    acc[(f"@host:{k}", "cpu")] += s - pe - d
            elif kind == E_LAUNCH:
                acc[("launch latency", "gpu")] += s - pe
            elif kind != E_ANCHOR:
                acc[("GPU queue", "gpu")] += s - pe
        if end[p] <= t0:
            break
        node = p
    return acc


def name_host_work(ev: RankEvents, g: Graph, acc: Dict[Tuple[str, str], float]) -> Dict[Tuple[str, str], float]:
    """``acc`` with its host-edge entries (``@host:K``) named by the innermost
    CPU op or annotation (``ProfilerStep#N`` aside) on the edge's thread
    holding the middle of its measured interval (``host work`` where none does)."""
    out: Dict[Tuple[str, str], float] = defaultdict(float)
    todo = [(key, us) for key, us in acc.items() if key[0].startswith("@host:")]
    for key, us in acc.items():
        if not key[0].startswith("@host:"):
            out[key] += us
    if not todo:
        return out
    cpu = ev.cpu
    keys = np.array([int(label.split(":")[1]) for (label, _), _ in todo], dtype=np.int64)
    spans = g.gap[keys]
    mids = (spans[:, 0] + spans[:, 1]) / 2
    dst = np.searchsorted(g.ptr, keys, side="right") - 1
    threads = g.thread[dst]
    ops = cpu[cpu["s_cat"].isin(("cpu_op", "user_annotation")) & cpu["thread"].isin(np.unique(threads))
              & (cpu["ts"] <= float(np.nanmax(spans[:, 1]))) & (cpu["end"] >= float(np.nanmin(spans[:, 0])))]
    ops = ops[~is_step(ops["s_name"])]  # a step's annotation holds everything: not a name for its host work
    ts, en, thr = ops["ts"].to_numpy(float), ops["end"].to_numpy(float), ops["thread"].to_numpy()
    names = name_strings(ops["s_name"])
    order = np.lexsort((ts, thr))
    found = np.full(len(keys), -1, dtype=np.int64)
    for t in np.unique(threads).tolist():
        rows = order[thr[order] == t]  # the thread's ops by start
        q = np.flatnonzero(threads == t)
        j = np.searchsorted(ts[rows], mids[q], side="right") - 1
        for qi, jj in zip(q.tolist(), j.tolist()):
            stop = max(-1, jj - NAME_LOOKBACK)
            while jj > stop:  # the latest-starting op still open at the middle is the innermost
                if en[rows[jj]] > mids[qi]:
                    found[qi] = rows[jj]
                    break
                jj -= 1
    for (_, us), f in zip(todo, found.tolist()):
        out[(str(names[f]) if f >= 0 else "host work", "cpu")] += us
    return out


def rank_graph(ev: RankEvents, hw: np.ndarray) -> Union[str, Tuple[Graph, np.ndarray, bool]]:
    """The graph :func:`replay` schedules, the windows it measures (``(n, 2)``
    µs) and whether they are steps; or why the rank is not replayed."""
    if not ev.has_gpu:
        return "the rank has no GPU work"
    if len(hw) == 0:
        return "no analyzed window"
    steps = len(analyzed_windows(step_windows(ev))) > 0
    w = np.asarray(hw, dtype=float)
    lo, hi = float(w[0, 0]), float(w[-1, 1])
    if not steps:  # the window ends at the step thread's last runtime call
        w = np.array([[lo, _last_call_end(ev, lo)]])
        hi = float(w[0, 1]) + 1e-6
    g = build_graph(ev, w.ravel(), lo, hi)
    if not (g.kind == GPU).any() or not ((g.ekind == E_LAUNCH).any()):
        return "no GPU work launched by host calls in the analyzed window"
    if len(g.order) < g.size:
        return "the trace's times order its events in a cycle (a malformed trace)"
    return g, w, steps


def replay(ev: RankEvents, hw: np.ndarray) -> Replay:
    """Replay one rank (see the module doc) over its analyzed host windows
    ``hw`` (``(n, 2)`` µs: the analyzed ``ProfilerStep`` windows, or the whole
    trace), with the fidelity figures, the critical path and the what-ifs of
    :data:`EDITS`. A rank without GPU work or without host launches is not
    replayed: the ``note`` says why and the figures stay 0."""
    built = rank_graph(ev, hw)
    if isinstance(built, str):
        return Replay(note=f"not replayed: {built}")
    g, w, steps = built
    start, end, arg = schedule(g)
    measured = measured_times(g, w, not steps)
    replayed = step_times(g, w, end, not steps)
    acc: Dict[Tuple[str, str], float] = defaultdict(float)
    for a, z in w.tolist():
        t0 = end[g.markers[a]]
        for key, us in critical_path(g, start, end, arg, t0, g.markers[z]).items():
            acc[key] += us
    named = name_host_work(ev, g, acc)
    total = sum(named.values())
    top = sorted(named.items(), key=lambda kv: -kv[1])[:TOP_PATH_OPS]
    n = len(w)
    host = sum(us for (_, kind), us in named.items() if kind == "cpu")
    m_mean, r_mean = float(measured.mean()), float(replayed.mean())
    whatifs = []
    for label, _ in EDITS:
        off, drop = EDIT_FUNCTIONS[label](g)
        _, e2, _ = schedule(g, off, drop)
        whatifs.append(WhatIf(edit=label, step_us_before=m_mean,
                              step_us_after=float(step_times(g, w, e2, not steps).mean())))
    note = ("collectives keep their measured durations (other ranks are not replayed); host threads wait for "
            "each other only through the GPU; cross-stream waits and synchronizations are inferred from the "
            "times (the trace has no event ids)")
    if not steps:
        note = ("no ProfilerStep: one window, from the trace's start to the end of the main thread's last "
                "runtime call or of the last GPU operation, whichever is later; " + note)
    return Replay(measured_step_us=m_mean, replayed_step_us=r_mean,
                  error_pct=abs(r_mean - m_mean) / m_mean * 100 if m_mean > 0 else 0.0, steps=n,
                  critical_path=[ReplayOp(name=nm, kind=kind, us=us / n) for (nm, kind), us in top],
                  host_share_pct=min(100.0, max(0.0, 100 * host / total)) if total > 0 else 0.0,
                  whatifs=whatifs, note=note)


def _last_call_end(ev: RankEvents, lo: float) -> float:
    """The last end of a runtime or driver call on the step thread
    (:func:`~.replay_graph.step_thread`), at least ``lo`` (µs)."""
    cpu = ev.cpu
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES) & cpu["thread"].eq(step_thread(ev))]
    return max(lo, float(calls["end"].max())) if len(calls) else lo


def measured_times(g: Graph, w: np.ndarray, gpu_tail: bool) -> np.ndarray:
    """Measured duration (µs) of each window of ``w``, as :func:`step_times` replays it."""
    d = w[:, 1] - w[:, 0]
    if gpu_tail:
        last_gpu = float(g.m_end[g.kind == GPU].max())
        d = np.maximum(w[:, 1], last_gpu) - w[:, 0]
    return d
