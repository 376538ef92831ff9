"""The execution graph of one rank, for :mod:`.schedule` to schedule (issue 30).

Nodes (times µs, the trace's exact times):

* on each host thread that launches GPU work, its runtime and driver calls
  in order: launches (calls whose correlation id has GPU work), synchronizing
  calls (:data:`~.copies.WAIT_APIS`), stream-wait calls
  (:data:`~.gap_causes.STREAM_WAIT_APIS`) and blocking copies (a copy call
  that returns only after its copy ended: ``cudaMemcpy``, pageable
  ``cudaMemcpyAsync``), which become a launch plus a wait node; calls nested
  in another call on the thread fold into the outer one;
* zero-length markers at the analyzed step boundaries (the ``ProfilerStep``
  windows on the host) on the step thread;
* GPU operations (kernels, memcpys, memsets) on each stream.

Edges go from a predecessor's end, with an offset: ``host`` (the thread's
previous item; the offset is the measured host time between them, with the
part inside a DataLoader annotation (:data:`~.cpu_side.DATALOADER_PREFIXES`)
kept apart so an edit can remove it), ``launch`` (launch call -> its GPU
operations; the offset makes the operation start the launch latency after
the call's start: measured where its stream was idle at the launch, else the
median of those), ``stream`` (stream order), ``cross`` (a GPU operation
launched right after a ``cudaStreamWaitEvent`` waits for the operation on
another stream that ended last before it started: the first launch after the
wait on its thread, or on any thread where its own launches nothing more in
the step; the trace carries no event ids, so the edge is inferred), ``wait`` (a synchronizing call waits for
the GPU work it returned after: the last operation launched before it on
the stream whose work ended last before the call returned; a device
synchronize waits for every stream) and ``anchor`` (from the origin: the
first item of a thread, a GPU operation without a launch in the window, at
their measured time).

Each node's replayed start is the latest of its predecessors' ends plus the
edge offsets, plus its own measured ``delay`` (the measured start minus that
latest constraint: back-to-back gaps between queued kernels, waits the trace
does not explain); its end is the start plus ``dur`` (for a waiting call, the
part after what it waited for ended). Replaying the measured graph returns
the measured times.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from ... import intervals
from ..copies import MEMCPY_APIS, WAIT_APIS, htod_from
from ..cpu_side import DATALOADER_PREFIXES, loop_thread
from ..events import RankEvents, is_step, name_strings
from ..gap_causes import STREAM_WAIT_APIS, launching_threads
from ..regions import LAUNCH_CATEGORIES

#: Node kinds.
HOST, GPU, MARKER, ORIGIN = 0, 1, 2, 3
#: Wait kinds of a node: none, a synchronizing call, a blocking device-to-host
#: read (``.item()``'s pageable copy), another blocking copy.
NO_WAIT, SYNC, READ, COPY = 0, 1, 2, 3
#: Edge kinds.
E_HOST, E_LAUNCH, E_STREAM, E_CROSS, E_WAIT, E_ANCHOR = range(6)
#: Device-wide synchronizing calls (every stream).
DEVICE_SYNC_APIS = ("cudaDeviceSynchronize", "hipDeviceSynchronize")
#: Names of device-to-host copies (CUDA, HIP): a blocking one is a read the host waits for.
DTOH_PREFIXES = ("Memcpy DtoH", "hipMemcpy DtoH", "MEMCPY_DTOH")
#: Clock tolerance (µs) between a GPU operation's end and the host call that
#: returned after it (CPU and GPU clocks are aligned to a few µs, as
#: :data:`~.attribution.GAP_START_TOLERANCE_US` assumes).
CLOCK_TOLERANCE_US = 2.0
#: An idle gap on a host thread other than the step thread at least this
#: long (µs) ends with a call that waits for the step thread (:func:`_trigger_edges`).
TRIGGER_GAP_US = 50.0


@dataclass
class Graph:
    """A rank's execution graph (see the module doc). Node 0 is the origin
    (time 0). Edges are in CSR form by target: the edges into node ``i`` are
    ``ptr[i]:ptr[i+1]`` of ``src``/``off``/``ekind``/``dl``.

    Attributes:
        kind, name, thread: per node (``thread``: host thread code, or stream for GPU nodes).
        wait: per node, its wait kind (:data:`SYNC`, :data:`READ`, :data:`COPY`, :data:`NO_WAIT`).
        m_start, m_end: measured times of each node as the schedule sees them (µs).
        dur, delay: per node (µs), see the module doc.
        src, off, ekind, dl: per edge: source node, offset (µs), kind, DataLoader part of a host offset (µs).
        gap: per edge, the measured host interval ``(a, b)`` a host edge spans (NaN otherwise).
        order: a topological order of the nodes.
        markers: measured time -> marker node, on the step thread.
        step_thread: the thread code of the markers.
        dl_names: the thread's DataLoader annotation name (for the critical path).
    """

    kind: np.ndarray
    name: List[str]
    thread: np.ndarray
    wait: np.ndarray
    m_start: np.ndarray
    m_end: np.ndarray
    dur: np.ndarray
    delay: np.ndarray
    ptr: np.ndarray
    src: np.ndarray
    off: np.ndarray
    ekind: np.ndarray
    dl: np.ndarray
    gap: np.ndarray
    order: List[int]
    markers: Dict[float, int] = field(default_factory=dict)
    step_thread: int = -1
    dl_name: str = "DataLoader"
    _lists: Optional[Tuple[List[int], List[str], List[int], List[int], List[float]]] = field(
        default=None, repr=False, compare=False)
    _walk: Optional[Tuple[List[int], ...]] = field(default=None, init=False, repr=False, compare=False)
    _inputs: Optional[Tuple[List[float], List[float], List[float]]] = field(
        default=None, init=False, repr=False, compare=False)
    _backlog: Optional[Tuple[float, np.ndarray]] = field(default=None, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Number of nodes, the origin included."""
        return len(self.kind)

    @property
    def has_gpu(self) -> bool:
        """Whether the graph holds GPU nodes (kernels, copies, sets); the edits
        that model GPU work leave a graph without them as it is."""
        return bool((self.kind == GPU).any())

    def as_lists(self) -> Tuple[List[int], List[str], List[int], List[int], List[float]]:
        """``kind``, ``name``, ``src``, ``ekind`` and ``dl`` as Python lists,
        made once (a walk element by element reads lists several times
        faster than arrays)."""
        if self._lists is None:
            self._lists = (self.kind.tolist(), self.name, self.src.tolist(), self.ekind.tolist(), self.dl.tolist())
        return self._lists

    def input_lists(self) -> Tuple[List[float], List[float], List[float]]:
        """``off``, ``delay`` and ``dur`` as lists (µs), made once."""
        if self._inputs is None:
            self._inputs = (self.off.tolist(), self.delay.tolist(), self.dur.tolist())
        return self._inputs

    def in_order(self) -> Tuple[List[int], ...]:
        """For a walk of the nodes in :attr:`order`, made once: per node in
        that order, its number, its number of incoming edges, its first edge
        and the sources of its first two edges (-1 where it has fewer); then
        every edge's source (lists: read element by element)."""
        if self._walk is None:
            order = np.asarray(self.order, dtype=np.int64)
            first = self.ptr[order]
            count = self.ptr[order + 1] - first
            last = max(len(self.src) - 1, 0)
            src = self.src if len(self.src) else np.full(1, -1, dtype=np.int64)
            src0 = np.where(count >= 1, src[np.minimum(first, last)], -1)
            src1 = np.where(count >= 2, src[np.minimum(first + 1, last)], -1)
            self._walk = (order.tolist(), count.tolist(), first.tolist(), src0.tolist(), src1.tolist(),
                          self.src.tolist())
        return self._walk

    def backlog(self, lo: float) -> np.ndarray:
        """The GPU nodes launched before the analyzed windows, which start at
        ``lo`` (µs): work of earlier steps the GPU had not run yet when the
        first window began (a host that runs ahead of a busy GPU queues it).
        On each stream, the nodes without a launch in the windows that start
        before the stream's first node launched in them (a stream runs its
        work in launch order); on a stream with no such launch, those that
        started before ``lo`` (launched before it, for sure). Made once per ``lo``."""
        if self._backlog is None or self._backlog[0] != lo:
            gpu = self.kind == GPU
            launched = np.zeros(self.size, dtype=bool)
            launched[edge_targets(self.ptr)[self.ekind == E_LAUNCH]] = True
            streams, code = np.unique(self.thread[gpu], return_inverse=True)
            first = np.full(len(streams), np.inf)
            np.minimum.at(first, code[launched[gpu]], self.m_start[gpu][launched[gpu]])
            before = np.where(np.isfinite(first), first, lo)[code]
            nodes = np.flatnonzero(gpu)
            self._backlog = (lo, nodes[~launched[gpu] & (self.m_start[gpu] < before)])
        return self._backlog[1]


class _Builder:
    """Collects nodes and edges (lists), then packs them into a :class:`Graph`."""

    def __init__(self) -> None:
        self.kind: List[int] = [ORIGIN]
        self.name: List[str] = ["origin"]
        self.thread: List[int] = [-1]
        self.wait: List[int] = [NO_WAIT]
        self.start: List[float] = [0.0]
        self.end: List[float] = [0.0]
        # per edge: dst, src, off, kind, dl, a, b: numpy chunks in the order added, and the single edges
        # added since the last chunk (columns, not tuples: no objects for the collector to track)
        self.chunks: List[Tuple[np.ndarray, ...]] = []
        self.pending: Tuple[List[float], ...] = ([], [], [], [], [], [], [])

    def node(self, kind: int, name: str, thread: int, start: float, end: float, wait: int = NO_WAIT) -> int:
        self.kind.append(kind)
        self.name.append(name)
        self.thread.append(thread)
        self.wait.append(wait)
        self.start.append(start)
        self.end.append(end)
        return len(self.kind) - 1

    def nodes(self, kind: int, names: List[str], threads: List[int], starts: List[float],
              ends: List[float]) -> np.ndarray:
        """Add one node per entry (no waits); returns their indices."""
        first = len(self.kind)
        self.kind += [kind] * len(names)
        self.name += names
        self.thread += threads
        self.wait += [NO_WAIT] * len(names)
        self.start += starts
        self.end += ends
        return np.arange(first, len(self.kind))

    def bulk(self, dst: np.ndarray, src: np.ndarray, off: np.ndarray, kind: int, dl: Optional[np.ndarray] = None,
             a: Optional[np.ndarray] = None, b: Optional[np.ndarray] = None) -> None:
        """Add one edge of ``kind`` per entry (by default no DataLoader part and no host interval)."""
        n = len(dst)
        if not n:
            return
        self._flush()
        nan = np.full(n, np.nan)
        self.chunks.append((np.asarray(dst, dtype=np.int64), np.asarray(src, dtype=float), np.asarray(off, dtype=float),
                            np.full(n, float(kind)), np.zeros(n) if dl is None else np.asarray(dl, dtype=float),
                            nan if a is None else np.asarray(a, dtype=float),
                            nan if b is None else np.asarray(b, dtype=float)))

    def edge(self, dst: int, src: int, off: float, kind: int, dl: float = 0.0,
             a: float = np.nan, b: float = np.nan) -> None:
        for col, v in zip(self.pending, (dst, src, off, kind, dl, a, b)):
            col.append(v)

    def _flush(self) -> None:
        if self.pending[0]:
            self.chunks.append((np.array(self.pending[0], dtype=np.int64),)
                               + tuple(np.array(col, dtype=float) for col in self.pending[1:]))
            self.pending = ([], [], [], [], [], [], [])

    def edge_columns(self) -> Tuple[np.ndarray, ...]:
        """The edges added so far, in that order: ``dst`` (int64), then
        ``src``, ``off``, ``kind``, ``dl``, ``a``, ``b`` (float64)."""
        self._flush()
        if not self.chunks:
            return (np.zeros(0, dtype=np.int64),) + tuple(np.zeros(0) for _ in range(6))
        return tuple(np.concatenate([c[j] for c in self.chunks]) for j in range(7))


def _outermost(calls: pd.DataFrame) -> np.ndarray:
    """Per row of ``calls`` (sorted by thread, start, longest first): the
    position of the outermost call holding it on its thread (itself when none)."""
    n = len(calls)
    ts, end, thr = (calls[c].to_numpy().tolist() for c in ("ts", "end", "thread"))  # lists: read faster one by one
    outer = list(range(n))
    cur, cur_end, cur_thr = -1, -np.inf, None
    for i in range(n):
        if thr[i] == cur_thr and ts[i] < cur_end:
            outer[i] = cur
        else:
            cur, cur_end, cur_thr = i, end[i], thr[i]
    return np.array(outer, dtype=np.int64)


def _dl_cover(dl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of the union ``dl`` inside each ``[a, b]`` (µs, 0 where b < a)."""
    if len(dl) == 0 or len(a) == 0:
        return np.zeros(len(a))
    return np.clip(intervals.overlap_each(np.column_stack([a, np.maximum(a, b)]), dl), 0.0, None)


def step_thread(ev: RankEvents) -> int:
    """The host thread running the step loop (:func:`~..cpu_side.loop_thread`:
    the ``ProfilerStep#N`` annotations', else the DataLoader's and
    optimizer's); without either, the launching thread with the most runtime
    calls (-1: none)."""
    cpu = ev.cpu
    found = loop_thread(ev)
    if found is not None:
        return found
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES) & (cpu["correlation"] > 0)]
    if calls.empty:
        return -1
    return int(calls["thread"].value_counts().index[0])


def build_graph(ev: RankEvents, bounds: np.ndarray, lo: float, hi: float) -> Graph:
    """The execution graph of ``ev`` for the host calls starting in ``[lo, hi)``
    (µs) and the GPU work they launch, with a marker at each time of
    ``bounds`` (µs, the step boundaries) on the step thread
    (:func:`step_thread`). See the module doc for nodes and edges."""
    cpu, gpu = ev.cpu, ev.gpu
    b = _Builder()
    st = step_thread(ev)
    threads = set(launching_threads(cpu).tolist()) | {st}
    ts_all = cpu["ts"]
    rt = cpu.loc[cpu["s_cat"].isin(LAUNCH_CATEGORIES) & cpu["thread"].isin(threads) & (ts_all >= lo) & (ts_all < hi),
                 ["ts", "end", "thread", "s_name", "correlation"]]
    names = pd.Series(name_strings(rt["s_name"]), dtype=object)  # not the str dtype: a copy of every name
    corr = pd.to_numeric(rt["correlation"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    gcorr = pd.to_numeric(gpu["correlation"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    launches = pd.Series(corr).isin(gcorr[gcorr > 0]).to_numpy() & (corr > 0)  # hashed: np.isin sorts
    keep = launches | names.isin(WAIT_APIS + STREAM_WAIT_APIS).to_numpy()
    calls = pd.DataFrame({"ts": rt["ts"].to_numpy(float), "end": rt["end"].to_numpy(float),
                          "thread": rt["thread"].to_numpy(), "row": np.arange(len(rt)),
                          "corr": corr, "launch": launches})[keep]
    calls = calls.sort_values(["thread", "ts", "end"], ascending=[True, True, False], kind="stable")
    c_names = names.to_numpy()[calls["row"].to_numpy()]
    outer = _outermost(calls)
    # GPU ops launched by the kept calls: correlation -> outermost call position
    is_l = calls["launch"].to_numpy()
    l_corr, l_pos = calls["corr"].to_numpy()[is_l], outer[is_l]
    by_corr = np.argsort(l_corr, kind="stable")
    l_corr, l_pos = l_corr[by_corr], l_pos[by_corr]
    g_ts, g_end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
    g_stream = gpu["stream"].to_numpy().astype(np.int64)
    g_names = name_strings(gpu["s_name"])
    k = np.searchsorted(l_corr, gcorr, side="right") - 1  # the last call of each correlation id
    hit = (k >= 0) & (l_corr[np.maximum(k, 0)] == gcorr) if len(l_corr) else np.zeros(len(gcorr), dtype=bool)
    g_call = np.where(hit, l_pos[np.maximum(k, 0)] if len(l_pos) else -1, -1).astype(np.int64)
    mine = g_call >= 0
    if mine.any():  # and ops without a launch in the window that run while it lasts
        last = float(g_end[mine].max())
        mine |= (g_call < 0) & (g_end > lo) & (g_ts < last)
    gsel = np.flatnonzero(mine)
    gsel = gsel[np.lexsort((g_ts[gsel], g_stream[gsel]))]
    # blocking copies: a copy call that returned after its copy ended
    c_ts, c_end = calls["ts"].to_numpy(), calls["end"].to_numpy()
    ops_end = np.full(len(calls), -np.inf)
    np.maximum.at(ops_end, g_call[gsel][g_call[gsel] >= 0], g_end[gsel][g_call[gsel] >= 0])
    dtoh = np.zeros(len(calls), dtype=bool)
    is_d = gpu["s_name"].str.startswith(DTOH_PREFIXES).fillna(False).to_numpy(dtype=bool)
    sel_d = gsel[(g_call[gsel] >= 0) & is_d[gsel]]
    dtoh[g_call[sel_d]] = True
    # a copy from pageable memory to the device blocks its call until the copy has (nearly) run: the
    # call returns once the last chunk is staged, while that chunk's DMA may still run (CUDA's API
    # sync behavior for memcpy); measured on an H200, calls that ended 15 µs before their 7.5 ms copy
    ops_start = np.full(len(calls), np.inf)
    np.minimum.at(ops_start, g_call[gsel][g_call[gsel] >= 0], g_ts[gsel][g_call[gsel] >= 0])
    paged = np.zeros(len(calls), dtype=bool)
    sel_p = gsel[(g_call[gsel] >= 0) & htod_from(gpu["s_name"], "Pageable")[gsel]]
    paged[g_call[sel_p]] = True
    blocking = (ops_end > -np.inf) & np.isin(c_names, MEMCPY_APIS) & (
        (c_end >= ops_end - CLOCK_TOLERANCE_US) | (paged & (c_end > ops_start)))
    blocking &= outer == np.arange(len(calls))
    # host chains
    first_node = np.full(len(calls), -1)  # the node a call's GPU ops hang on
    last_node = np.full(len(calls), -1)  # the node the host chain continues from
    dl_rows = cpu[cpu["s_name"].str.startswith(DATALOADER_PREFIXES).fillna(False).to_numpy(dtype=bool)]
    dl_name = str(dl_rows["s_name"].iloc[0]) if len(dl_rows) else "DataLoader"
    marks = sorted(set(float(x) for x in bounds))
    markers: Dict[float, int] = {}
    c_thr = calls["thread"].to_numpy()
    waits: List[Tuple[int, int, float, float]] = []  # (node, call position, s, e) of synchronizing calls
    stream_waits: List[Tuple[int, int]] = []  # (thread, call position)
    triggers: List[Tuple[int, float, bool]] = []  # (node, start, first) of other threads' calls after idling
    joined = _joined_waits(calls, outer, c_names, c_thr, st, cpu)  # other threads' waits the step thread sat out
    joins: List[Tuple[int, int, float, float]] = []  # (step-thread node, wait call position, wait end, node start)
    for thr in sorted(threads):
        rows = np.flatnonzero((c_thr == thr) & (outer == np.arange(len(calls))))
        m = np.array(marks if thr == st else [], dtype=float)
        if not len(rows) and not len(m):
            continue
        # the thread's items by (start, marker before call, position): as sorting (t, is_call, p) tuples
        it_t = np.concatenate([c_ts[rows].astype(float), m])
        it_call = np.concatenate([np.ones(len(rows), dtype=bool), np.zeros(len(m), dtype=bool)])
        it_p = np.concatenate([rows, np.full(len(m), -1)]).astype(np.int64)
        o = np.lexsort((it_p, it_call, it_t))
        it_t, it_call, it_p = it_t[o], it_call[o], it_p[o]
        pp = np.where(it_call, it_p, len(calls))  # markers read the padding after the last call

        def at(values: np.ndarray, pad: object) -> np.ndarray:
            return np.append(values, [pad])[pp]
        blk = it_call & at(blocking, False).astype(bool)
        names_it = np.where(it_call, at(c_names, ""), "step boundary")
        is_wait = it_call & ~blk & np.isin(names_it, WAIT_APIS)
        width = np.where(blk, 2, 1)
        head = len(b.kind) + np.concatenate([[0], np.cumsum(width)[:-1]]).astype(np.int64)
        tail = head + width - 1
        ends_it = np.where(it_call, at(c_end, 0.0), it_t).astype(float)
        total = int(width.sum())
        kind = np.full(total, HOST, dtype=np.int64)
        name = np.empty(total, dtype=object)
        start = np.empty(total)
        stop = np.empty(total)
        wait = np.full(total, NO_WAIT, dtype=np.int64)
        h, tl = head - len(b.kind), tail - len(b.kind)
        kind[h] = np.where(it_call, HOST, MARKER)
        name[h], name[tl] = names_it, names_it
        start[h], start[tl] = it_t, it_t
        stop[h] = np.where(blk, it_t, ends_it)
        stop[tl] = ends_it
        wait[h] = np.where(is_wait, SYNC, NO_WAIT)
        wait[tl[blk]] = np.where(at(dtoh, False)[blk], READ, COPY)
        b.kind += kind.tolist()
        b.name += name.tolist()
        b.thread += [int(thr)] * total
        b.wait += wait.tolist()
        b.start += start.tolist()
        b.end += stop.tolist()
        b.bulk(tail[blk], head[blk], np.zeros(int(blk.sum())), E_HOST)
        for n_, p_, s_, e_ in zip(tail[blk | is_wait].tolist(), it_p[blk | is_wait].tolist(),
                                  it_t[blk | is_wait].tolist(), ends_it[blk | is_wait].tolist()):
            waits.append((n_, p_, s_, e_))
        sw = it_call & ~blk & ~is_wait & np.isin(names_it, STREAM_WAIT_APIS)
        stream_waits += [(thr, p_) for p_ in it_p[sw].tolist()]
        first_node[it_p[it_call]], last_node[it_p[it_call]] = head[it_call], tail[it_call]
        for t_, n_ in zip(it_t[~it_call].tolist(), head[~it_call].tolist()):
            markers[t_] = n_
        if thr == st:
            b.edge(int(head[0]), 0, float(it_t[0]), E_ANCHOR)
        else:
            triggers.append((int(head[0]), float(it_t[0]), True))  # anchored by _trigger_edges where nothing triggers it
        du = dl_rows[dl_rows["thread"] == thr]
        dl_u = intervals.union(du["ts"].to_numpy(float), du["end"].to_numpy(float)) if len(du) else np.empty((0, 2))
        if len(it_t) > 1:  # host edges: each item waits for the thread's previous one, for the time between
            a, z = ends_it[:-1], it_t[1:]
            cover = _dl_cover(dl_u, a, z)
            busy = z - a if thr == st else _dl_cover(_thread_ops(cpu, thr), a, z)
            idle = z - a - busy >= TRIGGER_GAP_US  # the thread idled: it waits for the step thread, not the gap
            off = np.where(idle, busy, z - a)
            if thr == st and len(joined):
                off, found = _join_gaps(off, a, z, head[1:], joined)
                joins += found
            b.bulk(head[1:], tail[:-1], off, E_HOST, dl=np.minimum(np.where(idle, np.minimum(cover, busy), cover), off),
                   a=a, b=z)
            triggers += [(n_, t_, False) for n_, t_ in zip(head[1:][idle].tolist(), z[idle].tolist())]
    _trigger_edges(b, triggers, st, dl_rows)
    for node, p_, we, z_ in joins:  # the step thread goes on once the wait it sat out has returned
        if last_node[p_] >= 0:
            b.edge(int(node), int(last_node[p_]), z_ - we, E_HOST, a=we, b=z_)
    # GPU nodes, stream order, launch edges
    gnode = np.full(len(gpu), -1)
    gnode[gsel] = b.nodes(GPU, g_names[gsel].tolist(), g_stream[gsel].tolist(), g_ts[gsel].tolist(),
                          g_end[gsel].tolist())
    _gpu_edges(b, gsel, gnode, g_call, g_ts, g_end, g_stream, c_ts, first_node)
    _wait_edges(b, waits, calls, gsel, g_call, g_ts, g_end, g_stream, gnode, c_names)
    _cross_edges(b, stream_waits, calls, outer, gsel, g_call, g_ts, g_end, g_stream, gnode, np.asarray(marks),
                 _waiting_streams(ev))
    return _pack(b, markers, st, dl_name)


#: CUPTI's synchronization record of a ``cudaStreamWaitEvent`` (``cuda_sync`` events, written with
#: ``_ExperimentalConfig(enable_cuda_sync_events=True)``, as ``hta-report collect`` records on CUDA):
#: its ``stream`` is the stream that waits (the stream waited for is not filled in: -1 on an H200).
STREAM_WAIT_EVENT = "Stream Wait Event"


def _waiting_streams(ev: RankEvents) -> Dict[int, int]:
    """``cudaStreamWaitEvent`` correlation id -> the stream that waits, from
    the trace's ``Stream Wait Event`` records (empty without them)."""
    df = ev.df
    rows = df.loc[df["s_cat"].eq("cuda_sync"), ["s_name", "stream", "correlation"]]
    if rows.empty:
        return {}
    rows = rows[(name_strings(rows["s_name"]) == STREAM_WAIT_EVENT)]
    corr = pd.to_numeric(rows["correlation"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    stream = pd.to_numeric(rows["stream"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    ok = (corr > 0) & (stream >= 0)
    return dict(zip(corr[ok].tolist(), stream[ok].tolist()))


#: A step thread whose own ops cover less than this share of another thread's synchronizing call
#: is sitting it out (joined to that thread), not running work of its own beside it.
JOIN_OWN_OPS_MAX = 0.5


def _joined_waits(calls: pd.DataFrame, outer: np.ndarray, c_names: np.ndarray, c_thr: np.ndarray, st: int,
                  cpu: pd.DataFrame) -> np.ndarray:
    """Synchronizing calls (:data:`~.copies.WAIT_APIS`) of threads other than
    the step thread ``st`` that the step thread sits out: its own CPU ops
    cover under :data:`JOIN_OWN_OPS_MAX` of the call. ``loss.backward()``
    runs on autograd's device thread while the step thread blocks until it
    returns: a synchronization inside backward (a ``.item()`` in a custom
    autograd function) holds the step thread as long as the GPU work it
    waits for. Rows ``(position in calls, start µs, end µs)``, shape ``(n, 3)``,
    by start."""
    if st < 0:
        return np.empty((0, 3))
    pos = np.flatnonzero((c_thr != st) & (outer == np.arange(len(calls))) & np.isin(c_names, WAIT_APIS))
    if not len(pos):
        return np.empty((0, 3))
    ts, end = calls["ts"].to_numpy(float)[pos], calls["end"].to_numpy(float)[pos]
    own = cpu.loc[cpu["thread"].eq(st) & cpu["s_cat"].eq("cpu_op"), ["ts", "end"]]
    union = intervals.union(own["ts"].to_numpy(float), own["end"].to_numpy(float)) if len(own) else np.empty((0, 2))
    covered = _dl_cover(union, ts, end)
    keep = (end > ts) & (covered < JOIN_OWN_OPS_MAX * (end - ts))
    out = np.column_stack([pos[keep], ts[keep], end[keep]])
    return out[np.argsort(out[:, 1], kind="stable")]


def _join_gaps(off: np.ndarray, a: np.ndarray, z: np.ndarray, nodes: np.ndarray,
               joined: np.ndarray) -> Tuple[np.ndarray, List[Tuple[int, int, float, float]]]:
    """The step thread's host offsets (µs, one per gap ``[a, z]`` before
    ``nodes``) less the other threads' waits it sat out inside the gap
    (:func:`_joined_waits`, their union), and per such gap the join: (the
    node, the last-ending wait's call position, its end, the gap's end ``z``).
    Replayed as measured, the node starts at ``z`` through the join edge;
    when the wait returns sooner (the GPU work it waits for is faster), so
    does the step thread."""
    out = off.copy()
    gap = np.searchsorted(a, joined[:, 1], side="right") - 1
    ok = (gap >= 0) & (joined[:, 2] <= z[np.maximum(gap, 0)])
    found: List[Tuple[int, int, float, float]] = []
    for j in np.unique(gap[ok]).tolist():
        w = joined[ok & (gap == j)]
        held = intervals.total(intervals.union(w[:, 1], w[:, 2]))
        out[j] = max(0.0, out[j] - held)
        last = w[int(np.argmax(w[:, 2]))]
        found.append((int(nodes[j]), int(last[0]), float(last[2]), float(z[j])))
    return out, found


def _thread_ops(cpu: pd.DataFrame, thr: int) -> np.ndarray:
    """Union of the CPU ops and annotations of thread ``thr`` (``ProfilerStep``
    aside): when the thread runs code of its own (µs intervals)."""
    rows = cpu.loc[cpu["thread"].eq(thr) & cpu["s_cat"].isin(("cpu_op", "user_annotation")) & ~is_step(cpu["s_name"]),
                   ["ts", "end"]]
    return intervals.union(rows["ts"].to_numpy(float), rows["end"].to_numpy(float)) if len(rows) \
        else np.empty((0, 2))


def _trigger_edges(b: _Builder, triggers: List[Tuple[int, float, bool]], st: int, dl_rows: pd.DataFrame) -> None:
    """``host`` edges from the step thread to the other threads: each call
    that starts another thread's work (its ``first``, or one after the thread
    idled :data:`TRIGGER_GAP_US` or more with no op of its own running, whose
    own-thread edge then keeps only the thread's busy time) waits for the
    step thread's item that ended last before it, for the measured time
    between them: the autograd engine's backward threads, for one, run when
    the training thread calls ``backward()``. The interval is the step
    thread's, DataLoader part included, so an edit that shortens the step
    thread moves the other threads' work with it. A first call that nothing
    on the step thread precedes keeps its measured time (an ``anchor``)."""
    if not triggers:
        return
    kinds = np.array(b.kind)
    mine = np.flatnonzero((np.array(b.thread) == st) & ((kinds == HOST) | (kinds == MARKER)))
    mine = mine[mine > 0].tolist()
    if not mine:
        for node, s, first in triggers:
            if first:
                b.edge(node, 0, s, E_ANCHOR)
        return
    ends = np.array(b.end)[mine]
    order = np.argsort(ends, kind="stable")
    ends_sorted = ends[order]
    du = dl_rows[dl_rows["thread"] == st]
    dl_u = intervals.union(du["ts"].to_numpy(float), du["end"].to_numpy(float)) if len(du) else np.empty((0, 2))
    picked = []
    for node, s, first in triggers:
        k = int(np.searchsorted(ends_sorted, s, side="right")) - 1
        if k >= 0:
            picked.append((node, mine[int(order[k])], float(ends_sorted[k]), s))
        elif first:
            b.edge(node, 0, s, E_ANCHOR)
    if not picked:
        return
    cover = _dl_cover(dl_u, np.array([x[2] for x in picked]), np.array([x[3] for x in picked]))
    for (node, src, a, s), d in zip(picked, cover.tolist()):
        b.edge(node, src, s - a, E_HOST, dl=d, a=a, b=s)


def _gpu_edges(b: _Builder, gsel: np.ndarray, gnode: np.ndarray, g_call: np.ndarray, g_ts: np.ndarray,
               g_end: np.ndarray, g_stream: np.ndarray, c_ts: np.ndarray, first_node: np.ndarray) -> None:
    """``stream``, ``launch`` and ``anchor`` edges of the GPU ops ``gsel``
    (sorted by stream, then start). The launch latency is the measured one
    (op start - call start) where the stream was idle when the call began,
    else the median of those."""
    if not len(gsel):
        return
    node, stream = gnode[gsel], g_stream[gsel]
    same = np.r_[False, stream[1:] == stream[:-1]]  # has a previous op on its stream
    prev_end = np.r_[-np.inf, g_end[gsel][:-1]]
    b.bulk(node[same], np.r_[-1, node[:-1]][same], np.zeros(int(same.sum())), E_STREAM)
    p = g_call[gsel]
    has = p >= 0
    call_ts = np.where(has, c_ts[np.maximum(p, 0)], np.nan)
    idle = has & (~same | (prev_end <= call_ts))
    lat = g_ts[gsel] - call_ts
    med = float(np.median(lat[idle])) if idle.any() else 0.0
    lat = np.where(idle, lat, med)
    head = first_node[np.maximum(p, 0)]
    head_dur = np.array(b.end)[head] - np.array(b.start)[head]
    b.bulk(node[has], head[has], (lat - head_dur)[has], E_LAUNCH)
    anchor = ~has & ~same
    b.bulk(node[anchor], np.zeros(int(anchor.sum()), dtype=np.int64), g_ts[gsel][anchor], E_ANCHOR)


def _launch_time(gsel: np.ndarray, g_call: np.ndarray, g_ts: np.ndarray, c_ts: np.ndarray) -> np.ndarray:
    """When each op of ``gsel`` was launched (its call's start; its own start without one)."""
    p = g_call[gsel]
    return np.where(p >= 0, c_ts[np.maximum(p, 0)], g_ts[gsel])


def _wait_edges(b: _Builder, waits, calls, gsel, g_call, g_ts, g_end, g_stream, gnode, c_names) -> None:
    """``wait`` edges of the synchronizing calls and blocking copies (module doc)."""
    if not waits or not len(gsel):
        return
    c_ts = calls["ts"].to_numpy()
    launched = _launch_time(gsel, g_call, g_ts, c_ts)
    ends = g_end[gsel]
    by_end = np.argsort(ends, kind="stable")
    ends_sorted = ends[by_end]
    streams = g_stream[gsel]
    per_stream: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    for s_ in np.unique(streams).tolist():
        rows = np.flatnonzero(streams == s_)  # in stream order (gsel is sorted by stream, start)
        per_stream[s_] = (rows, np.maximum.accumulate(launched[rows]))
    calls_of = g_call[gsel]
    by_call = np.argsort(calls_of, kind="stable")  # each call's ops (rows of gsel) together, in row order
    calls_sorted = calls_of[by_call]
    # per wait, the op (position by end) that ended last before the call returned, launched before it began
    w_s, w_e = (np.array([x[i] for x in waits], dtype=float) for i in (2, 3))
    before = last_below(launched[by_end], np.searchsorted(ends_sorted, w_e + CLOCK_TOLERANCE_US, side="right") - 1,
                        w_s).tolist()
    for (node, p, s, e), k in zip(waits, before):
        if b.wait[node] != SYNC:  # a blocking copy waits for its own copies (and, by stream order, what came before)
            own = by_call[np.searchsorted(calls_sorted, p, side="left"):np.searchsorted(calls_sorted, p, side="right")]
            for r in own.tolist():  # a pageable copy's call may return before its last chunk lands
                b.edge(node, int(gnode[gsel[r]]), min(0.0, e - float(g_end[gsel[r]])), E_WAIT)
            _finish_wait(b, node, s, e)
            continue
        deps: List[int] = []
        if str(c_names[p]) in DEVICE_SYNC_APIS:
            for rows, lt in per_stream.values():
                k = int(np.searchsorted(lt, s, side="left")) - 1
                if k >= 0:
                    deps.append(int(rows[k]))
        elif k >= 0:
            r = int(by_end[k])
            rows, lt = per_stream[int(streams[r])]
            j = int(np.searchsorted(lt, s, side="left")) - 1
            last = int(rows[j]) if j >= 0 else r
            deps.append(last if ends[last] <= e + CLOCK_TOLERANCE_US else r)
        for r in deps:
            b.edge(node, int(gnode[gsel[r]]), 0.0, E_WAIT)
        _finish_wait(b, node, s, e)


def _finish_wait(b: _Builder, node: int, s: float, e: float) -> None:
    """Set a waiting node's measured start (when what it waited for ended, or
    its call's start) later, in :func:`_pack`, from its wait edges; here its end."""
    b.end[node] = e


def _cross_edges(b: _Builder, stream_waits, calls, outer, gsel, g_call, g_ts, g_end, g_stream, gnode,
                 marks: np.ndarray = np.empty(0), waiting_stream: Optional[Dict[int, int]] = None) -> None:
    """``cross`` edges: the first launch after each ``cudaStreamWaitEvent`` on
    its thread waits for the op of another stream, launched before the wait,
    that ended last before the launched op started. Where the thread launches
    nothing more before the next step boundary (``marks``, µs) the wait is for
    work another thread launches: the first launch after it on any thread in
    that step (DDP's last gradient wait is made on the autograd thread, and the
    optimizer, launched from the main thread, is what waits; 8 of the 124
    waits in the A100 trace_diff control trace's analyzed steps). Where the
    trace names the waiting stream (``waiting_stream``: the wait call's
    correlation id -> stream, from CUPTI's ``Stream Wait Event``), the op that
    waits is the first launched onto that stream after the call."""
    waiting_stream = waiting_stream or {}
    if not stream_waits or not len(gsel):
        return
    c_ts, c_thr = calls["ts"].to_numpy(), calls["thread"].to_numpy()
    is_launch = calls["launch"].to_numpy() & (outer == np.arange(len(calls)))
    launched = _launch_time(gsel, g_call, g_ts, c_ts)
    ends = g_end[gsel]
    by_end = np.argsort(ends, kind="stable")
    ends_sorted = ends[by_end]
    rs = np.flatnonzero(g_call[gsel] >= 0)  # the first op (row of gsel) of each call: earliest start, then row
    rs = rs[np.lexsort((rs, g_ts[gsel[rs]], g_call[gsel[rs]]))]
    calls_of = g_call[gsel[rs]]
    lead = np.r_[True, calls_of[1:] != calls_of[:-1]] if len(rs) else np.zeros(0, dtype=bool)
    lead_calls, lead_rows = calls_of[lead], rs[lead]  # by call position
    w_thr = np.array([t for t, _ in stream_waits])
    w_pos = np.array([p for _, p in stream_waits], dtype=np.int64)
    w_ts = c_ts[w_pos]
    first = np.full(len(stream_waits), -1, dtype=np.int64)  # per wait, the first launch after it (call position)
    for thr in np.unique(w_thr).tolist():
        q = np.flatnonzero(w_thr == thr)
        first[q] = _first_after(np.flatnonzero(is_launch & (c_thr == thr)), c_ts, w_ts[q])
    step_of_wait = np.searchsorted(marks, w_ts, side="right")
    away = (first < 0) | (np.searchsorted(marks, c_ts[np.maximum(first, 0)], side="right") != step_of_wait)
    if away.any():  # the first launch on any thread, in the wait's step
        other = _first_after(np.flatnonzero(is_launch), c_ts, w_ts[away])
        same_step = (other >= 0) & (np.searchsorted(marks, c_ts[np.maximum(other, 0)], side="right")
                                    == step_of_wait[away])
        first[np.flatnonzero(away)[same_step]] = other[same_step]
    j = np.searchsorted(lead_calls, first)
    found = (first >= 0) & (j < len(lead_calls)) & (lead_calls[np.minimum(j, max(len(lead_calls) - 1, 0))] == first) \
        if len(lead_calls) else np.zeros(len(first), dtype=bool)
    r_all = np.full(len(first), -1, dtype=np.int64)  # per wait, the row of gsel of the op that waits
    r_all[found] = lead_rows[j[found]]  # the launched call's first op
    if len(waiting_stream):  # the trace names the stream that waits: the next op launched onto it, from any thread
        w_corr = calls["corr"].to_numpy()[w_pos]
        known = np.array([waiting_stream.get(int(c), -1) for c in w_corr.tolist()], dtype=np.int64)
        for t in np.unique(known[known >= 0]).tolist():
            q = np.flatnonzero(known == t)
            r_all[q] = _first_after(np.flatnonzero(g_stream[gsel] == t), launched, w_ts[q])
    found = r_all >= 0
    if not found.any():
        return
    r = r_all[found]
    wait_ts = w_ts[found].astype(float)
    stream = g_stream[gsel[r]]
    # the op (position by end) that ended last before the launched op started, launched before the wait, on
    # another stream: per other stream, the last of its ops by end that qualifies; the latest of those
    k0 = np.searchsorted(ends_sorted, g_ts[gsel[r]] + CLOCK_TOLERANCE_US, side="right") - 1
    best = np.full(len(r), -1, dtype=np.int64)
    stream_by_end = g_stream[gsel[by_end]]
    launched_by_end = launched[by_end]
    for t in np.unique(stream_by_end).tolist():
        pos = np.flatnonzero(stream_by_end == t)  # positions by end of the stream's ops, ascending
        j = np.searchsorted(pos, k0, side="right") - 1  # its last op that ended by then
        jj = last_below(launched_by_end[pos], j, wait_ts)  # of those, the last launched before the wait
        cand = np.where(jj >= 0, pos[np.maximum(jj, 0)], -1)
        best = np.where((cand >= 0) & (stream != t), np.maximum(best, cand), best)
    hit = best >= 0
    b.bulk(gnode[gsel[r[hit]]], gnode[gsel[by_end[best[hit]]]], np.zeros(int(hit.sum())), E_CROSS)


def last_below(values: np.ndarray, j: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per query ``q``, the largest index ``i <= j[q]`` with ``values[i] < c[q]``
    (-1 where there is none, or ``j[q]`` is -1): how far a wait's inference
    looks back for an operation launched before the wait (``values``: launch
    times by end, µs). A sparse table of range minima lets each query skip
    the run of later launches in O(log n) steps, for all queries at once,
    where stepping back one operation at a time cost up to thousands of
    Python steps per wait (issue 56, item 7). A NaN value never counts as
    launched after the wait."""
    j = np.asarray(j, dtype=np.int64)
    c = np.asarray(c, dtype=float)
    n = len(values)
    cur = np.minimum(j, n - 1).copy()
    if n == 0 or not len(cur):
        return np.full(len(cur), -1, dtype=np.int64)
    levels = [np.asarray(values, dtype=float)]  # levels[k][i]: min of values[i : i + 2**k]
    while 2 ** len(levels) <= n:
        prev, half = levels[-1], 2 ** (len(levels) - 1)
        levels.append(np.minimum(prev[:-half], prev[half:]))
    for k in range(len(levels) - 1, -1, -1):  # skip blocks of 2**k ending at cur, all launched after the wait
        lo = cur - 2 ** k + 1
        fits = lo >= 0
        skip = np.zeros(len(cur), dtype=bool)
        skip[fits] = levels[k][lo[fits]] >= c[fits]
        cur[skip] -= 2 ** k
    return np.maximum(cur, -1)


def _first_after(items: np.ndarray, times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time of ``t`` (µs), the item of ``items`` (indices into ``times``)
    whose time is the earliest after it (ties: the first item), or -1."""
    items = items[np.argsort(times[items], kind="stable")]
    i = np.searchsorted(times[items], t, side="right")
    return np.where(i < len(items), items[np.minimum(i, len(items) - 1)] if len(items) else -1, -1)


def _pack(b: _Builder, markers: Dict[float, int], st: int, dl_name: str) -> Graph:
    """The :class:`Graph` of ``b``: CSR edges, waiting nodes' measured starts,
    each node's delay and a topological order."""
    n = len(b.kind)
    cols = list(b.edge_columns())
    dst = cols[0]
    order_e = np.argsort(dst, kind="stable")
    cols = [col[order_e] for col in cols]
    dst_s = dst[order_e]
    src = cols[1].astype(np.int64)
    off, ekind, dl = cols[2], cols[3].astype(np.int64), cols[4]
    gap = np.column_stack([cols[5], cols[6]])
    ptr = np.concatenate([[0], np.cumsum(np.bincount(dst_s, minlength=n))]).astype(np.int64)
    m_start, m_end = np.array(b.start), np.array(b.end)
    wait = np.array(b.wait)
    kind = np.array(b.kind)
    # a waiting node starts when what it waited for ended, or at its call's start
    w_nodes = np.flatnonzero(wait != NO_WAIT)
    for i in w_nodes.tolist():
        sl = slice(ptr[i], ptr[i + 1])
        dep = ekind[sl] == E_WAIT
        if dep.any():
            m_start[i] = max(m_start[i], float((m_end[src[sl]] + off[sl])[dep].max()))
    dur = np.maximum(m_end - m_start, 0.0)
    # delay: measured start minus the latest constraint
    cons = latest_constraint(ptr, m_end[src] + off)
    delay = np.where(np.isfinite(cons), m_start - cons, m_start)
    delay[0] = 0.0
    return Graph(kind=kind, name=b.name, thread=np.array(b.thread), wait=wait, m_start=m_start, m_end=m_end,
                 dur=dur, delay=delay, ptr=ptr, src=src, off=off, ekind=ekind, dl=dl, gap=gap,
                 order=_order(m_start, ptr, src), markers=markers, step_thread=st, dl_name=dl_name)


def latest_constraint(ptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per node, the largest of ``values`` (µs, one per edge, CSR by target
    as ``ptr``: :class:`Graph`) over its incoming edges, as
    ``np.maximum.at`` gives it; -inf for a node without any (NaN where one
    is NaN)."""
    n = len(ptr) - 1
    cons = np.full(n, -np.inf)
    has = np.flatnonzero(ptr[1:] > ptr[:-1])
    if len(has):
        cons[has] = np.maximum.reduceat(values, ptr[has])
    return cons


def edge_targets(ptr: np.ndarray) -> np.ndarray:
    """The target node of every edge of a graph whose edges into node ``i``
    are ``ptr[i]:ptr[i+1]`` (CSR by target, :class:`Graph`)."""
    return np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))


def _order(m_start: np.ndarray, ptr: np.ndarray, src: np.ndarray) -> List[int]:
    """A topological order of the nodes: by measured start (node number on
    ties), which every edge respects in a well-formed trace (checked here,
    vectorized); else Kahn's (:func:`_topological`: a launch whose kernel
    the clocks put before it, a cycle)."""
    n = len(m_start)
    order = np.argsort(m_start, kind="stable")  # ties by node number
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    dst = edge_targets(ptr)
    if len(src) == 0 or bool((pos[src] < pos[dst]).all()):
        return order.tolist()
    return _topological(n, ptr, src)


def _topological(n: int, ptr: np.ndarray, src: np.ndarray) -> List[int]:
    """Kahn's order of the nodes (edges into ``i``: ``src[ptr[i]:ptr[i+1]]``);
    a node on a cycle (a malformed trace) is left out, as are those after it."""
    indeg = np.diff(ptr).astype(np.int64)
    dst = edge_targets(ptr)
    out_order = np.argsort(src, kind="stable")
    optr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(optr, src + 1, 1)
    optr = np.cumsum(optr)
    succ = dst[out_order].tolist()
    optr_l = optr.tolist()
    deg = indeg.tolist()
    ready = [i for i in range(n) if deg[i] == 0]
    out: List[int] = []
    while ready:
        i = ready.pop()
        out.append(i)
        for k in range(optr_l[i], optr_l[i + 1]):
            j = succ[k]
            deg[j] -= 1
            if deg[j] == 0:
                ready.append(j)
    return out
