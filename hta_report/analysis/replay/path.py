"""The critical path of a replayed step, by what holds it.

:func:`critical_path` walks back from a window's end along each node's
binding edge (:func:`~.schedule.schedule`) and adds up time by ``(name,
kind)`` code (:class:`PathLabels`); :func:`name_host_work` names the host
intervals between calls by the ops that hold them. Times are µs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Tuple

import numpy as np
import pandas as pd

from ... import intervals
from ..cpu_side import DATALOADER_PREFIXES, self_times
from ..events import RankEvents, is_step, name_strings
from ..regions import containing_index
from .graph import E_ANCHOR, E_HOST, E_LAUNCH, GPU, MARKER, Graph

#: How many ops (by start) before a host interval's middle are searched for the
#: innermost one holding it; bounds the naming's work (ops nest a few levels deep).
NAME_LOOKBACK = 64
#: A host interval at least this long (µs) on the critical path is named by
#: the self time of the ops inside it (:func:`_self_time_split`), not by the
#: op holding its middle: a whole step on a rank without GPU work, long
#: Python between two launches.
SPLIT_HOST_US = 1000.0


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
