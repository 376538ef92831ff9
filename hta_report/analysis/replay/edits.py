"""The edits the replay makes to a rank's execution graph: what each fix removes, and nothing else.

Each edit is the graph change one fix means (:mod:`.whatif` schedules the
edited graph and predicts the step). The registry :data:`EDITS` holds, per
edit, its label (an :class:`~hta_report.replay_terms.EditLabel`, which
``Rule.edit`` names), what it changes in words, the
function that changes the graph and its measured error on recorded fix pairs
(the part of a prediction's interval that the trace cannot show:
:attr:`EditSpec.error_pct`). ``docs/EDITS.md`` states the rule of every edit
with the trace evidence it relies on; adding one is a recipe in
``docs/ARCHITECTURE.md``.

Rules every edit keeps:

* it removes only what its fix removes: a CUDA graph takes the launch cost
  and the host gaps between the launches of the region it can capture, not
  the host work outside that region or CPU work inside it; a sync goes only
  where nothing after it needs the value on the host (:mod:`.sync_kinds`);
* one-off warm-up calls (:mod:`.warmup`: context creation, allocator growth,
  first launches, capture, autotuning) are never removed or shortened: cold
  start is not what a fix to the steady step buys (:func:`apply`);
* where the trace cannot fix a parameter of the fix's physics (how much CPU
  the DataLoader's workers take from the training's threads, how much faster
  a batched pass runs), the edit reads it with :meth:`Edit.pick` from a range
  measured on recorded pairs, and the prediction's interval spans it.

Times are µs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, TypeVar

import numpy as np
import pandas as pd

from ... import intervals
from ...model import TF32_TO_16_BIT_SPEEDUP
from ...replay_terms import EditLabel
from ..collectives import collective_kinds, kinds_of
from ..copies import MEMCPY_APIS, WAIT_APIS, htod_from
from ..cpu_side import DATALOADER_PREFIXES, first_worker_batch, is_sync
from ..events import RankEvents, is_step, name_search
from ..host_loops import loops, reading
from ..host_ops import (BN_STATS_KERNEL, METADATA_OPS, active_dropout, arithmetic_us, batched_us, bn_training_kernels,
                       call_overhead_us, has_backward, slow_cpu_ops, step_thread_ops)
from ..kernels import matmuls_without_tensor_cores, tensor_core_speedup, tf32_matmuls
from ..launch_calls import KERNEL_LAUNCH_APIS
from ..optimizer import single_tensor_step_regions, step_regions, zero_grad_regions, zero_writes
from ..pinned_copy import pinned_htod_gbps
from ..regions import LAUNCH_CATEGORIES, containing_index, starts_inside
from .graph import (COPY, E_CROSS, E_HOST, E_LAUNCH, E_WAIT, GPU, HOST, NO_WAIT, READ, SYNC, TRIGGER_GAP_US, Graph,
                    edge_targets)
from ..sync_kinds import classify, removable
from ..warmup import OVERHEAD_CATEGORY
from ..workload import GRAPH_LAUNCHES

#: Which end of an edit's uncertain parameters a replay takes (:meth:`Edit.pick`):
#: the one that gives the shortest step, the middle, the longest.
BEST, MID, WORST = "best", "mid", "worst"
#: Gap (µs) between consecutive operations of one stream in a CUDA graph's
#: replay: the median 0.10 µs measured on an H200 (bench/record_cuda.py
#: cuda-graphs after its fix: 917 operations, p90 0.13 µs).
GRAPH_GAP_US = 0.1
#: The Tensor-Core edit is made on a rank whose GEMM/convolution time is on Tensor Cores less
#: than this share (%): tensor-cores-unused's default threshold (rules/config.py, 50 %), so the
#: edit is replayed where its finding can fire and not on every rank with one fp32 GEMM.
TENSOR_CORE_EDIT_MAX_PCT = 50.0
#: The autograd node that accumulates a parameter's gradient (its ``aten::add_`` adds into the old gradient).
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
#: A CPU op inside a capturable region that launches nothing and lasts at least this long (µs)
#: is CPU work a CUDA graph cannot hold (a tensor made or converted on the CPU, numpy, decoding):
#: it stays. Shorter ones are the dispatch of views and allocations, which a graph replay skips.
NONCAPTURE_OP_US = 20.0
#: Host time with no op and no runtime call, between two launches, at least this long (µs) is
#: Python doing work of its own (tokenizing, decoding, bookkeeping), not the few µs of module
#: calls between two launches of a forward (proposal: 1 ms; 10-50 µs between launches is usual).
NONCAPTURE_GAP_US = 1000.0
#: The same where the thread's ops were not recorded (a trace of runtime calls only: CUPTI without
#: the CPU activity): host time between two launches with no call is then unexplained, and past
#: the 10-50 µs of Python a forward spends between two launches it is taken as host work of its
#: own that a graph keeps (µs; the split HTA's launch-delay view and ``launch-bound`` use).
NONCAPTURE_GAP_UNRECORDED_US = 100.0
#: The share of the DataLoader's loading time a CPU-only step still pays once the loading moves
#: to worker processes (best, mid, worst): the workers run on the cores the training's own
#: intra-op threads use, which the trace does not show. Measured on the project's 2-core
#: machine: ``collect --workload cnn --slow-data 5``, num_workers 0 -> 2, kept 0.73 of the
#: 5.62 ms (2026-11-27); with one intra-op thread, 0.10-0.14 (bench/record_cpu.py); the
#: fix bench's dataloader_workers pairs kept 0.35 and 0.61 on a busy machine (2026-11-28); on a
#: quiet one the heavy-augmentation pair's loading went whole, and the light one's step grew
#: 16-26 % (workers costing more than the loading they hid: not modelled; docs/FIXBENCH.md).
CPU_LOADER_KEPT = (0.25, 0.45, 0.70)
#: The share of the Python between a single-tensor optimizer step's per-parameter ops that its
#: fix removes on a CPU-only rank (best, mid, worst). On the CPU ``foreach=True`` still runs the
#: per-parameter ops, dispatched from C++ instead of Python (PyTorch's CPU foreach kernels loop
#: over the tensors), so the ops stay and the Python between them goes: the fix bench's
#: foreach_optimizer pairs saved 0.82-1.06 ms of 1.69-1.88 ms of Python (AdamW) and 0.07-0.18 of
#: 0.32-0.54 ms (SGD) (docs/FIXBENCH.md). ``fused=True`` can save more (one op over all tensors).
CPU_OPTIMIZER_PYTHON_REMOVED = (0.75, 0.5, 0.3)
#: The fixed cost per call inside an op, as a multiple of :data:`~.host_ops.CALL_FIXED`, for a
#: batched pass (best, mid, worst): the fix bench's micro-batch and per-sample pairs (8, both
#: modes, recorded on a quiet machine) were predicted within -20 to +14 % with 1.0 and the
#: reference path's own share (:data:`~.host_ops.CALL_FIXED`); one scale for every convolution
#: (0.7) left them within -20 to +42 % (docs/FIXBENCH.md).
BATCHED_FIXED_SCALE = (1.5, 1.0, 0.6)
#: The fixed cost (µs) of each op a vectorized loop still calls once (Python, dispatch, the
#: profiler's record): the median outermost op of the fix bench's CPU recordings.
VECTORIZED_CALL_US = 10.0
#: How much faster the float32/oneDNN path runs what the reference kernels ran (best, mid, worst):
#: the fix bench's float64 CNN pair ran 4.0 times faster in its reference kernels (docs/FIXBENCH.md).
SLOW_CPU_SPEEDUP = (6.0, 4.0, 2.5)


#: The error (%) of a prediction on a rank without GPU work beyond the edit's own range: how
#: much a recording's step moves from one recording to the next on a shared CPU (the fix
#: bench's paired rounds of one pair scatter by 5-20 % around their median, docs/FIXBENCH.md).
#: GPU ranks use each edit's own :attr:`EditSpec.error_pct`.
CPU_ERROR_PCT = 10.0


@dataclass
class Edit:
    """The schedule's inputs after an edit (:func:`~.schedule.schedule`): per
    edge, its offset ``off`` (µs) and whether it is dropped (``drop``); per
    node, its ``dur`` and ``delay`` (µs). Edit functions change them in place.

    ``devices`` (the rank's ``deviceProperties`` names) is what an edit may
    read of the hardware; ``windows`` (``(n, 2)`` µs) are the analyzed steps;
    ``setting`` (:data:`BEST`, :data:`MID`, :data:`WORST`) is which end of the
    edit's uncertain parameters to take, and ``ranged`` is set by an edit
    that read one (:meth:`pick`): the replay then replays the other two."""

    off: np.ndarray
    drop: np.ndarray
    dur: np.ndarray
    delay: np.ndarray
    devices: Tuple[str, ...] = ()
    windows: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))
    setting: str = MID
    ranged: bool = False
    #: thread -> intervals (``(n, 2)`` µs) of one-off host time no edit removes (:func:`apply`)
    keep_host: Dict[Any, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, g: Graph, devices: Sequence[str] = (), windows: Optional[np.ndarray] = None,
           setting: str = MID) -> "Edit":
        """The unmodified graph's inputs (copies)."""
        return cls(off=g.off.copy(), drop=np.zeros(len(g.off), dtype=bool), dur=g.dur.copy(), delay=g.delay.copy(),
                   devices=tuple(devices), windows=np.empty((0, 2)) if windows is None else np.asarray(windows),
                   setting=setting)

    def pick(self, values: Tuple[float, float, float]) -> float:
        """The value of an uncertain parameter for this replay's ``setting``,
        from ``(best, mid, worst)``; marks the edit ranged."""
        self.ranged = True
        return values[(BEST, MID, WORST).index(self.setting)]


EditFunction = Callable[[RankEvents, Graph, Edit], None]
T = TypeVar("T")


@dataclass(frozen=True)
class EditSpec:
    """One edit of the registry :data:`EDITS`.

    Attributes:
        label: its name (``Rule.edit``, ``WhatIf.edit``).
        description: what it changes, in words for the report.
        fn: the function that makes it (``fn(events, graph, edit)``).
        error_pct: its predictions' 80th-percentile |error| against the step
            measured after the fix in recorded pairs (%): the part of the
            interval (``WhatIf.step_us_low``/``high``) the trace itself
            cannot show: how the host's speed differs between recordings and
            what the edit leaves out.
        error_source: where ``error_pct`` was measured.
        fix: whether it is a fix's edit (a rule's ``Rule.edit``, replayed
            among a rank's what-ifs); False for :attr:`EditLabel.NO_PROFILER`,
            which the replay makes only for the profiler-cost note.
    """

    label: EditLabel
    description: str
    fn: EditFunction
    error_pct: float
    error_source: str
    fix: bool = True


#: The edits, by label, in the order they are replayed (that of
#: :class:`~hta_report.replay_terms.EditLabel`: :func:`check_registry`).
EDITS: Dict[str, EditSpec] = {}  # keys: EditLabel members


def edit(label: EditLabel, *, description: str, error_pct: float,
         error_source: str, fix: bool = True) -> Callable[[EditFunction], EditFunction]:
    """Register the decorated function as the edit ``label`` of :data:`EDITS`
    (``fix``: :attr:`EditSpec.fix`).

    Raises:
        ValueError: ``label`` is not an :class:`~hta_report.replay_terms.EditLabel`
            or is taken, or the description or error source is empty.
    """
    def wrap(fn: EditFunction) -> EditFunction:
        if not isinstance(label, EditLabel):
            raise ValueError(f"edit {label!r} is not an EditLabel (hta_report/replay_terms.py)")
        if label in EDITS:
            raise ValueError(f"edit {label!r} is registered already")
        if not description.strip() or not error_source.strip():
            raise ValueError(f"edit {label!r} needs a description and where its error was measured")
        EDITS[label] = EditSpec(label=label, description=" ".join(description.split()), fn=fn,
                                error_pct=float(error_pct), error_source=" ".join(error_source.split()), fix=fix)
        return fn
    return wrap


def fixes() -> Tuple[str, ...]:
    """The labels of :data:`EDITS` that are fixes' edits (:attr:`EditSpec.fix`), in replay
    order: the what-ifs a rank gets (:func:`~.run.whatifs`)."""
    return tuple(label for label, spec in EDITS.items() if spec.fix)


def apply(ev: RankEvents, g: Graph, e: Edit, labels: Sequence[str], protect: Optional[np.ndarray] = None,
          protect_host: Optional[Dict[Any, np.ndarray]] = None) -> None:
    """Make the edits ``labels`` on ``e`` (in :data:`EDITS` order), then give
    the nodes of ``protect`` (a node mask: one-off warm-up calls) back their
    measured duration, delay and waits; the host time of ``protect_host``
    (thread -> intervals, :func:`warmup_host_intervals`) is kept by every edit
    that removes host time by span (:func:`replace_host_ops`): no edit
    removes cold start or the profiler's own records."""
    e.keep_host = protect_host or {}
    for label in EDITS:
        if label in labels:
            EDITS[label].fn(ev, g, e)
    if protect is not None and protect.any():
        e.dur[protect] = g.dur[protect]
        e.delay[protect] = g.delay[protect]
        e.drop &= ~protect[edge_targets(g.ptr)]


def _per_graph(ev: RankEvents, g: Graph, key: str, make: Callable[[], T]) -> T:
    """``make()``, kept in ``ev.memo`` for the graph ``g`` (an edit made several times in one
    replay, alone and in combinations, looks its nodes up once)."""
    held = ev.memo.get(f"replay.{key}")
    if held is None or held[0] is not g:
        held = ev.memo[f"replay.{key}"] = (g, make())
    return held[1]


# ---------------------------------------------------------------- host time


def _gone(g: Graph, ops: pd.DataFrame, keep: Optional[Dict[Any, np.ndarray]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """What removing the host time of ``ops`` (CPU rows: ``thread``, ``ts``,
    ``end``, µs) takes: per edge, the µs of its measured host interval they
    cover (host edges of their threads), and per node, whether it goes (a host
    call starting inside them, and the GPU operations such calls launch); but
    not the intervals of ``keep`` (thread -> ``(n, 2)`` µs: one-off host time
    no fix removes, :attr:`Edit.keep_host`)."""
    cut = np.zeros(len(g.off))
    gone = np.zeros(g.size, dtype=bool)
    if ops.empty:
        return cut, gone
    host = np.flatnonzero(g.ekind == E_HOST)
    for thr, rows in ops.groupby("thread", sort=False):
        u = intervals.union(rows["ts"].to_numpy(float), rows["end"].to_numpy(float))
        if keep and thr in keep:
            u = intervals.subtract(u, keep[thr])
        on = host[g.thread[g.src[host]] == thr]  # a host edge spans its source's thread
        if len(on):
            cut[on] = np.clip(intervals.overlap_each(g.gap[on], u), 0.0, None)
        calls = np.flatnonzero((g.kind == HOST) & (g.thread == thr))
        gone[calls[containing_index(u, g.m_start[calls]) >= 0]] = True
    launched = (g.ekind == E_LAUNCH) & gone[g.src]
    gone[edge_targets(g.ptr)[launched]] = True
    return cut, gone


def replace_host_ops(g: Graph, e: Edit, ops: pd.DataFrame, keep_us: float = 0.0,
                     keep_nodes: Optional[np.ndarray] = None) -> None:
    """Remove the host time of ``ops`` (CPU rows: ``thread``, ``ts``, ``end``,
    µs) from ``e``, and put ``keep_us`` back (µs, over the whole replay: what
    the replacement still costs, spread over the same host edges in proportion
    to what each lost): host edges lose the part of their interval the ops
    cover, host calls starting inside them take no time and wait for nothing,
    and the GPU operations those calls launch take no time; but the nodes of
    ``keep_nodes`` (a mask), which the replacement still makes."""
    cut, gone = _gone(g, ops, e.keep_host)
    if keep_nodes is not None:
        gone &= ~keep_nodes
    total = float(cut.sum())
    e.off -= cut
    if keep_us > 0 and total > 0:
        e.off += keep_us * cut / total
    e.off = np.where(g.ekind == E_HOST, np.maximum(e.off, np.minimum(g.off, 0.0)), e.off)
    e.dur[gone] = 0.0
    e.delay[gone & (g.kind == GPU)] = 0.0
    e.drop |= (g.ekind == E_WAIT) & gone[edge_targets(g.ptr)]


def remove_host_ops(g: Graph, e: Edit, ops: pd.DataFrame) -> None:
    """:func:`replace_host_ops` with nothing put back."""
    replace_host_ops(g, e, ops)


def _spans(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` as the CPU rows :func:`replace_host_ops` takes."""
    return pd.DataFrame({"thread": rows["thread"].to_numpy(), "ts": rows["ts"].to_numpy(float),
                         "end": rows["end"].to_numpy(float)})


# ---------------------------------------------------------------- the edits


@edit(EditLabel.NO_SYNC,
      description=("the synchronizations a fix can remove are gone (a .item() or .cpu() whose value the step does not "
                   "need on the host: a logged loss, a metric; an explicit synchronize with work after it): the host "
                   "no longer waits for the GPU there; a Python loop of .item() reads becomes one vectorized read; the "
                   "read of an inference step's output, values that decide control flow, data-dependent shapes and "
                   "the step-end synchronize of a timing harness stay"),
      error_pct=20.0,
      error_source=("H200 .item() pairs, 8 rounds scored paired (docs/whatif.md, 2026-11-27): rounds within -29.1 to "
                    "+18.9 %, median -11.7 %; injected .item() causes within 6.5 %"))
def edit_no_sync(ev: RankEvents, g: Graph, e: Edit) -> None:
    """Removable synchronizations (:mod:`.sync_kinds`) gone: on a rank with GPU
    work their wait edges are dropped and they take no time; on a rank
    without, the host time of the removable scalar reads goes. Loops of
    scalar reads (:func:`~.host_loops.loops` with reads) become one vectorized
    read: :func:`vectorize_loops`."""
    w = e.windows
    if g.has_gpu:
        nodes = np.flatnonzero(np.isin(g.wait, (SYNC, READ)))

        def kinds() -> np.ndarray:
            rows = pd.DataFrame({"thread": g.thread[nodes], "ts": g.m_start[nodes],
                                 "s_name": [g.name[i] for i in nodes.tolist()]})
            return removable(classify(ev, rows, w)) if len(nodes) else np.zeros(0, dtype=bool)
        ok = _per_graph(ev, g, "removable syncs", kinds)
        mask = np.zeros(g.size, dtype=bool)
        mask[nodes[ok]] = True
        e.drop |= (g.ekind == E_WAIT) & mask[edge_targets(g.ptr)]
        e.dur[mask] = 0.0
    else:
        cpu = ev.cpu
        reads = cpu[is_sync(cpu)]
        if len(w):
            reads = reads[containing_index(intervals.union(w[:, 0], w[:, 1]), reads["ts"].to_numpy(float)) >= 0]
        if len(reads):
            ok = _per_graph(ev, g, "removable reads", lambda: removable(classify(ev, reads, w)))
            remove_host_ops(g, e, reads[ok])
    vectorize_loops(ev, g, e, with_reads=True)


def vectorize_loops(ev: RankEvents, g: Graph, e: Edit, with_reads: bool) -> None:
    """The Python loops over elements (:func:`~.host_loops.loops`) that hold
    scalar reads (``with_reads``) or none replaced by one vectorized op each:
    the loop's host time goes (its calls and the GPU work they launch too),
    and its ops' work batched over its iterations
    (:func:`~.host_ops.batched_us`: each op's fixed cost paid once, the
    per-element work kept) plus one call per op of an iteration
    (:data:`VECTORIZED_CALL_US`) is put back; on a rank
    with GPU work the loop's first synchronization stays (the vectorized read
    still waits for the GPU once)."""
    if g.has_gpu and not with_reads:  # a loop of GPU ops becomes GPU work of its own, which the trace does not show
        return
    found = loops(ev, e.windows) if len(e.windows) else pd.DataFrame()
    if found.empty:
        return
    found = found[reading(found) == with_reads]
    if found.empty:
        return
    per_iteration = (found["ops"] / found["iterations"].clip(lower=1)).clip(lower=1)
    ops = step_thread_ops(ev, e.windows)
    overhead = call_overhead_us(ops)
    keep = float((per_iteration.to_numpy(float) * VECTORIZED_CALL_US).sum())
    scale = e.pick(BATCHED_FIXED_SCALE)
    for a, z, n in zip(found["ts"].tolist(), found["end"].tolist(), found["iterations"].tolist()):
        mine = ops[(ops["ts"].to_numpy(float) >= a) & (ops["ts"].to_numpy(float) < z)]
        keep += batched_us(mine, overhead, 1.0 / max(1, int(n)), scale)
    kept = None
    if g.has_gpu:
        kept = np.zeros(g.size, dtype=bool)
        waits = np.flatnonzero(np.isin(g.wait, (SYNC, READ)))
        for thr, a, z in zip(found["thread"].tolist(), found["ts"].tolist(), found["end"].tolist()):
            inside = waits[(g.thread[waits] == thr) & (g.m_start[waits] >= a) & (g.m_start[waits] < z)]
            if len(inside):
                kept[inside[0]] = True
    replace_host_ops(g, e, _spans(found), keep_us=keep, keep_nodes=kept)


@edit(EditLabel.LOOP_VECTORIZED,
      description=("a Python loop over a tensor's elements or samples (one small op per element) becomes one "
                   "vectorized op: the loop's host time goes, its arithmetic stays"),
      error_pct=25.0,
      error_source=("fix bench CPU pairs per_sample_preprocess (docs/FIXBENCH.md); the arithmetic's share is a "
                    "range measured there"))
def edit_vectorize(ev: RankEvents, g: Graph, e: Edit) -> None:
    """:func:`vectorize_loops` for the loops without scalar reads (those are
    ``no host-device sync``'s), on a rank without GPU work: on a GPU the loop's
    many small kernels become one whose time the trace does not show."""
    vectorize_loops(ev, g, e, with_reads=False)


@edit(EditLabel.DATALOADER_HIDDEN,
      description=("the host's time inside DataLoader iteration is hidden by worker processes that prepare the "
                   "batches ahead: all of it on a rank with GPU work (assumes CPU cores the training leaves free), "
                   "part of it on a CPU-only rank, where the workers take their CPU time from the cores the "
                   "training's threads use"),
      error_pct=15.0,
      error_source=("H200 pairs num_workers 0 -> 4: +6.0 %, -15.0 % (docs/whatif.md, 2026-11-27); CPU: fix bench "
                    "dataloader_workers (docs/FIXBENCH.md)"))
def edit_no_dataloader(ev: RankEvents, g: Graph, e: Edit) -> None:
    """The host's time inside DataLoader iteration annotations removed from
    the host edges (workers hide the loading) on a rank with GPU work. On a
    rank without, only part of it goes: the workers' CPU time is taken from
    the cores the training's own intra-op threads use (one per physical core
    by default), which a trace does not show, so the step keeps
    :data:`CPU_LOADER_KEPT` of the loading time (a range). A worker
    loader's cold first batch (:func:`~..cpu_side.first_worker_batch`: the
    workers' start-up) is one-off warm-up and stays."""
    host = g.dl > 0  # host edges only (a launch edge's offset may be negative)
    kept = 0.0 if g.has_gpu else e.pick(CPU_LOADER_KEPT)
    dl = g.dl[host]
    cold = first_worker_batch(ev)
    if len(cold):
        edges = np.flatnonzero(host)
        for thr, rows in cold.groupby("thread", sort=False):
            u = intervals.union(rows["ts"].to_numpy(float), rows["end"].to_numpy(float))
            on = g.thread[g.src[edges]] == thr
            if on.any():
                dl[on] = np.maximum(dl[on] - np.clip(intervals.overlap_each(g.gap[edges[on]], u), 0.0, None), 0.0)
    e.off[host] = np.maximum(e.off[host] - (1.0 - kept) * dl, 0.0)


def capturable(ev: RankEvents, windows: np.ndarray) -> Dict[int, np.ndarray]:
    """Per host thread that launches kernels, the union (µs) of what a CUDA
    graph of the step can hold: in each analyzed window, from the thread's
    first kernel launch to its last (graph launches aside: that work is
    captured already), less the host time a graph cannot replay: CPU ops that
    launch nothing and last :data:`NONCAPTURE_OP_US` or more (views and
    allocations aside), host time with no op or call for
    :data:`NONCAPTURE_GAP_US` or more (:data:`NONCAPTURE_GAP_UNRECORDED_US`
    on a thread none of whose ops were recorded), DataLoader annotations, and
    each synchronizing call (:data:`~..copies.WAIT_APIS`) with the host time
    after it up to the thread's next kernel launch: a graph cannot capture a
    synchronization (``torch.compile`` breaks the graph at ``.item()``), so
    the host runs that stretch eagerly between two graphs."""
    cpu = ev.cpu
    w = np.asarray(windows, dtype=float).reshape(-1, 2)
    names = cpu["s_name"]
    kl = cpu[names.isin(KERNEL_LAUNCH_APIS).to_numpy() & ~names.isin(GRAPH_LAUNCHES).to_numpy()]
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES)]
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    dl = cpu[names.str.startswith(DATALOADER_PREFIXES).fillna(False).to_numpy(dtype=bool)]
    out: Dict[int, np.ndarray] = {}
    for thr, rows in kl.groupby("thread", sort=False):
        ts, end = rows["ts"].to_numpy(float), rows["end"].to_numpy(float)
        spans = []
        for a, z in w:
            sel = (ts >= a) & (ts < z)
            if sel.any():
                spans.append((float(ts[sel].min()), float(end[sel].max())))
        if not spans:
            continue
        u = intervals.union([s for s, _ in spans], [z for _, z in spans])
        lo, hi = float(u[0, 0]), float(u[-1, 1])
        mine = ops[ops["thread"].eq(thr) & (ops["ts"] < hi) & (ops["end"] > lo)]
        c_ts = np.sort(calls.loc[calls["thread"].eq(thr), "ts"].to_numpy(float))
        o_ts, o_end = mine["ts"].to_numpy(float), mine["end"].to_numpy(float)
        holds = np.searchsorted(c_ts, o_end, side="left") > np.searchsorted(c_ts, o_ts, side="left")
        cpu_work = ~holds & (o_end - o_ts >= NONCAPTURE_OP_US) & ~mine["s_name"].isin(METADATA_OPS).to_numpy()
        no = [np.column_stack([o_ts[cpu_work], o_end[cpu_work]])]
        busy = intervals.union(np.r_[o_ts, calls.loc[calls["thread"].eq(thr), "ts"].to_numpy(float)],
                               np.r_[o_end, calls.loc[calls["thread"].eq(thr), "end"].to_numpy(float)])
        idle = intervals.intersect(u, intervals.complement(busy))
        gap_us = NONCAPTURE_GAP_US if ops["thread"].eq(thr).any() else NONCAPTURE_GAP_UNRECORDED_US
        no.append(idle[idle[:, 1] - idle[:, 0] >= gap_us])
        d = dl[dl["thread"].eq(thr)]
        no.append(np.column_stack([d["ts"].to_numpy(float), d["end"].to_numpy(float)]))
        # a synchronization cannot be captured (a graph breaks at .item()): from the wait to the next
        # launch the host runs eagerly between two graphs, and that time stays
        waits = calls[calls["thread"].eq(thr).to_numpy(dtype=bool) & calls["s_name"].isin(WAIT_APIS).to_numpy(dtype=bool)]
        if len(waits):
            w_ts, w_end = waits["ts"].to_numpy(float), waits["end"].to_numpy(float)
            k_ts = np.sort(ts)
            nxt = np.searchsorted(k_ts, w_end, side="left")
            resume = np.where(nxt < len(k_ts), k_ts[np.minimum(nxt, len(k_ts) - 1)], hi)
            no.append(np.column_stack([w_ts, np.maximum(resume, w_end)]))
        stack = np.concatenate([x for x in no if len(x)]) if any(len(x) for x in no) else np.empty((0, 2))
        out[int(thr)] = intervals.subtract(u, intervals.union(stack[:, 0], stack[:, 1]) if len(stack) else stack)
    return out


@edit(EditLabel.CUDA_GRAPH,
      description=("the region of the step a CUDA graph can capture (from its first kernel launch to its last) is "
                   "replayed as one graph: the host's time in its launch calls and the Python between them goes and "
                   "its kernels run back to back; host work outside it (data loading, pre- and post-processing) and "
                   "CPU work inside it stay, as do synchronizations"),
      error_pct=22.0,
      error_source=("H200 CUDA-graph pairs, 8 rounds scored paired (docs/whatif.md, 2026-11-27): -12.5 to -22.1 % against "
                    "the profiled after-step (the profiler slows a graph's kernels), -3.3 to -12.6 % against the "
                    "step without the profiler"))
def edit_cuda_graph(ev: RankEvents, g: Graph, e: Edit) -> None:
    """The capturable region of each analyzed step (:func:`capturable`) in a
    CUDA graph, on a rank with GPU work: host edges lose the part of their
    interval inside it, host calls starting inside it that do not wait for
    the GPU take no time, and the GPU operations they launch start at most
    :data:`GRAPH_GAP_US` after what they wait for. The one graph launch per
    step (a few µs of host time) is left out. Assumes the region can be
    captured: static shapes, no host-dependent control flow inside it."""
    if not g.has_gpu:
        return
    regions = _per_graph(ev, g, "capturable", lambda: capturable(ev, e.windows))
    if not regions:
        return
    host = np.flatnonzero(g.ekind == E_HOST)
    inside = np.zeros(g.size, dtype=bool)
    for thr, u in regions.items():
        if not len(u):
            continue
        on = host[g.thread[g.src[host]] == thr]
        if len(on):
            cut = np.clip(intervals.overlap_each(g.gap[on], u), 0.0, None)
            e.off[on] = np.maximum(e.off[on] - cut, 0.0)
        calls = np.flatnonzero((g.kind == HOST) & (g.thread == thr))
        inside[calls[containing_index(u, g.m_start[calls]) >= 0]] = True
    calls = inside & (g.wait == NO_WAIT)
    e.dur[calls] = 0.0
    e.delay[calls] = np.minimum(e.delay[calls], 0.0)
    launched = np.zeros(g.size, dtype=bool)
    lk = (g.ekind == E_LAUNCH) & inside[g.src]
    launched[edge_targets(g.ptr)[lk]] = True
    gpu = launched & (g.kind == GPU)
    e.delay[gpu] = np.minimum(e.delay[gpu], GRAPH_GAP_US)


@edit(EditLabel.COPIES_PINNED,
      description=("host-to-device copies stop blocking the host (pinned memory, non_blocking=True) and copies from "
                   "pageable memory run at the pinned rate (the trace's own pinned copies, else the device's PCIe "
                   "link)"),
      error_pct=15.0,
      error_source=("H200 pinned 16 and 64 MiB pairs: paired +0.2, +0.7 %; least disturbed -7.5 to -13.9 %; "
                    "pin_memory with 4 workers +4.0 % (docs/whatif.md, 2026-11-27)"))
def edit_async_copies(ev: RankEvents, g: Graph, e: Edit) -> None:
    """Copies made from pinned memory with ``non_blocking=True``: a blocking
    copy call (pageable ``cudaMemcpyAsync``, ``cudaMemcpy``) and a
    synchronization right after a copy call on its thread stop waiting for
    the GPU, and each copy from pageable memory to the device runs at the
    pinned rate (:func:`~.pinned_copy.pinned_htod_gbps`: the trace's own
    pinned copies, else the device's PCIe link; never longer than measured;
    where neither is known the copies keep their measured durations)."""
    dst = edge_targets(g.ptr)
    after_copy = np.zeros(g.size, dtype=bool)
    host = g.ekind == E_HOST
    after_copy[dst[host]] = np.isin(np.asarray(g.name, dtype=object)[g.src[host]], MEMCPY_APIS)
    waiting = (g.wait[dst] == COPY) | ((g.wait[dst] == SYNC) & after_copy[dst])
    e.drop |= (g.ekind == E_WAIT) & waiting
    copies = _per_graph(ev, g, "pageable copies", lambda: pageable_htod_nodes(ev, g))
    if len(copies[0]):
        rate, _ = pinned_htod_gbps(ev, e.devices)
        if rate:
            nodes, nbytes = copies
            e.dur[nodes] = np.minimum(e.dur[nodes], nbytes / (rate * 1e3))  # bytes / (bytes per µs)


def pageable_htod_nodes(ev: RankEvents, g: Graph) -> Tuple[np.ndarray, np.ndarray]:
    """The GPU nodes of ``g`` that are copies from pageable memory to the
    device, and their sizes (bytes; matched to the trace's ``bytes`` by
    stream and start): two arrays of the same length, empty when the rank
    has none or its copies carry no size."""
    gpu = ev.gpu
    empty = (np.empty(0, dtype=np.int64), np.empty(0))
    if gpu.empty or "bytes" not in gpu.columns:
        return empty
    rows = gpu[htod_from(gpu["s_name"], "Pageable")]
    size = pd.to_numeric(rows["bytes"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(size) & (size > 0)
    nodes, at = gpu_nodes(g, rows[ok])
    return nodes, size[ok][at]


def gpu_nodes(g: Graph, rows: pd.DataFrame) -> Tuple[np.ndarray, np.ndarray]:
    """The GPU nodes of ``g`` of the GPU events ``rows`` (``stream``, ``ts``
    µs), matched by stream and measured start, and for each the position of
    its row in ``rows``; events the graph does not hold are left out."""
    if rows.empty:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    where = {(int(s), float(t)): i for i, (s, t) in enumerate(zip(rows["stream"].to_numpy(),
                                                                   rows["ts"].to_numpy(float)))}
    hits = [(int(n), where[key]) for n in np.flatnonzero(g.kind == GPU).tolist()
            if (key := (int(g.thread[n]), float(g.m_start[n]))) in where]
    if not hits:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    nodes, at = zip(*hits)
    return np.asarray(nodes, dtype=np.int64), np.asarray(at, dtype=np.int64)


#: A GEMM or convolution kernel's fixed cost (µs): launch ramp, prologue, tail, which no
#: precision shortens. The shortest Tensor Core GEMM kernels in the field traces run 1.5 µs
#: (MI300X), 5.5 µs (RTX 4090), 6 µs (H100): a kernel does not get below this.
MATMUL_FIXED_US = 2.0
#: Matrix-vector kernels (cuBLAS ``gemv*``) read each weight once: memory-bound, they gain
#: from 16-bit inputs only the halved bytes (at most 2x), never the Tensor Cores' peak.
GEMV_SPEEDUP = 2.0
#: cuBLAS's matrix-vector kernels (``gemv2T_kernel_val``, ``gemvx``, ``gemv2N``...).
GEMV_KERNEL = re.compile(r"gemv", re.IGNORECASE)


def matmul_nodes(g: Graph, rows: pd.DataFrame) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph nodes of the GEMM/convolution kernel ``rows`` (rows of
    ``ev.gpu``, :func:`gpu_nodes`), per node whether it is a matrix-vector
    kernel (:data:`GEMV_KERNEL`: memory-bound, at most :data:`GEMV_SPEEDUP`
    faster in 16 bits), and per node its stall (µs: ``dur - matmul_us``,
    :func:`~.kernels.stall_excess`; 0 where ``rows`` has no ``matmul_us``),
    which no precision shortens."""
    nodes, at = gpu_nodes(g, rows)
    names = rows["s_name"].to_numpy()[at] if "s_name" in rows.columns else np.array([""] * len(at))
    stall = (rows["dur"].to_numpy(float) - rows["matmul_us"].to_numpy(float))[at] \
        if "matmul_us" in rows.columns else np.zeros(len(at))
    return nodes, np.array([bool(GEMV_KERNEL.search(str(n))) for n in names], dtype=bool), np.maximum(stall, 0.0)


def _matmul_edit(e: Edit, nodes: np.ndarray, gemv: np.ndarray, stall: np.ndarray, k: float) -> None:
    """Durations of the GEMM ``nodes`` after a move to matrix math ``k``
    times faster (:func:`matmul_after_16_bit`; a matrix-vector kernel at most
    :data:`GEMV_SPEEDUP`), their ``stall`` (µs) kept as it was."""
    stall = np.minimum(stall, e.dur[nodes])
    e.dur[nodes] = matmul_after_16_bit(e.dur[nodes] - stall, np.where(gemv, min(k, GEMV_SPEEDUP), k)) + stall


def matmul_after_16_bit(dur: np.ndarray, k) -> np.ndarray:
    """Kernel durations (µs) after a move to 16-bit matrix math with speedup
    ``k`` (a scalar or one per kernel): the fixed cost
    (:data:`MATMUL_FIXED_US`, or the whole kernel where shorter) stays, the
    rest takes ``1/k`` of its time."""
    fixed = np.minimum(dur, MATMUL_FIXED_US)
    return fixed + (dur - fixed) / k


@edit(EditLabel.TENSOR_CORES,
      description=("GEMM and convolution kernels that ran without Tensor Cores take 1/k of their time beyond "
                   "a 2 µs fixed cost, k the device's 16-bit Tensor-Core peak over its fp32 peak (14.8 on "
                   "H100/H200, 16 on A100; bf16 autocast); matrix-vector kernels, memory-bound, 1/2"),
      error_pct=8.0,
      error_source="H200 bf16 autocast pairs: -6.1 %, +2.4 % (docs/whatif.md, 2026-11-27)")
def edit_tensor_cores(ev: RankEvents, g: Graph, e: Edit) -> None:
    """GEMMs and convolutions moved onto Tensor Cores (bf16/fp16 autocast):
    each kernel of :func:`~.kernels.matmuls_without_tensor_cores` takes
    ``1/k`` of its time, ``k`` the device's dense 16-bit Tensor-Core peak over
    its fp32 peak (:func:`~.kernels.tensor_core_speedup`; no change on a
    device the table does not know), on a rank whose GEMMs and convolutions
    spend less than :data:`TENSOR_CORE_EDIT_MAX_PCT` of their time on Tensor
    Cores (elsewhere the rank already uses them: no edit). Only the part of a
    kernel beyond its fixed cost scales (:func:`matmul_after_16_bit`), and a
    matrix-vector kernel, memory-bound, at most by :data:`GEMV_SPEEDUP`; a
    stalled kernel's time past its name's median stays
    (:func:`~.kernels.stall_excess`).
    Left out: the casts autocast adds and the 16-bit elementwise kernels,
    which move half the bytes."""
    k = tensor_core_speedup(e.devices)
    if not k:
        return

    def lookup() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, share = matmuls_without_tensor_cores(ev)
        if share >= TENSOR_CORE_EDIT_MAX_PCT:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=bool), np.empty(0)
        return matmul_nodes(g, rows)
    nodes, gemv, stall = _per_graph(ev, g, "tensor-core nodes", lookup)
    _matmul_edit(e, nodes, gemv, stall, k)


@edit(EditLabel.TF32_TO_BF16,
      description=("GEMM and convolution kernels that ran on Tensor Cores in TF32 take 1/2 of their time beyond "
                   "a 2 µs fixed cost (bf16 autocast: the dense 16-bit Tensor-Core peak is twice the TF32 peak "
                   "on every device with TF32); matrix-vector kernels at most 1/2 as well"),
      error_pct=8.0,
      error_source=("one H200 pair, TF32 -> bf16 autocast, 8-layer 4096-wide MLP: predicted 7.32 ms for "
                    "6.79 ms measured, +7.9 % (docs/whatif.md, 2026-11-28)"))
def edit_tf32_to_bf16(ev: RankEvents, g: Graph, e: Edit) -> None:
    """TF32 matmuls moved to bf16 (autocast): each kernel of
    :func:`~.kernels.tf32_matmuls` (Tensor Core GEMMs and convolutions whose
    inputs are TF32) takes ``1/k`` of its time beyond its fixed cost
    (:func:`matmul_after_16_bit`), ``k`` = :data:`~hta_report.model.TF32_TO_16_BIT_SPEEDUP`; a
    matrix-vector kernel at most :data:`GEMV_SPEEDUP`. Every device with
    TF32 has bf16 at twice its rate, so the device's name is not needed.
    Left out: the casts autocast adds and the 16-bit elementwise kernels,
    which move half the bytes."""
    def lookup() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return matmul_nodes(g, tf32_matmuls(ev))
    nodes, gemv, stall = _per_graph(ev, g, "tf32 nodes", lookup)
    _matmul_edit(e, nodes, gemv, stall, TF32_TO_16_BIT_SPEEDUP)


@edit(EditLabel.ZERO_GRAD_NONE,
      description=("the aten::zero_ ops inside zero_grad, and backward's adds into the zeroed gradients, are gone "
                   "with the GPU work they launch (zero_grad(set_to_none=True))"),
      error_pct=5.0,
      error_source="CPU pairs zero-grad-zeros recorded in one process: -0.2 % (docs/whatif.md, 2026-11-27)")
def edit_no_zero_fill(ev: RankEvents, g: Graph, e: Edit) -> None:
    """``zero_grad(set_to_none=True)``: the ``aten::zero_`` ops inside
    ``Optimizer.zero_grad`` (:func:`~.optimizer.zero_writes`) removed with
    the GPU work they launch, and so are the ``aten::add_`` ops of
    backward's gradient accumulation (``AccumulateGrad`` then takes the new
    gradient as it is instead of adding it to zeros) when there are no more
    accumulations than zero-fills (one backward per step: with several, the
    later ones still add)."""
    zeros = zero_writes(ev, zero_grad_regions(ev, None))
    if zeros.empty:
        return
    cpu = ev.cpu
    names = cpu["s_name"]
    acc = cpu[names.eq(ACCUMULATE_GRAD)]
    adds = cpu.iloc[0:0]
    if 0 < len(acc) <= len(zeros):
        adds = cpu[names.eq("aten::add_")]
        adds = adds[starts_inside(adds, acc)]
    remove_host_ops(g, e, pd.concat([zeros, adds]) if len(adds) else zeros)


@edit(EditLabel.OPTIMIZER_FUSED,
      description=("the single-tensor optimizer step's host time (its per-parameter ops and the Python loop between "
                   "them) goes with the kernels it launched; on a GPU rank the fused step's own cost (a few hundred µs "
                   "of host time, a few short kernels) is left out, on a CPU-only rank its arithmetic stays"),
      error_pct=20.0,
      error_source=("H200 fused AdamW pairs, 8 rounds scored paired: median -3.1 %, rounds -22.1 to +24.4 % "
                    "(docs/whatif.md, 2026-11-27); CPU: fix bench foreach_optimizer (docs/FIXBENCH.md)"))
def edit_fused_optimizer(ev: RankEvents, g: Graph, e: Edit) -> None:
    """A fused optimizer step (``AdamW(fused=True)``, or ``foreach=True``) in
    place of the single-tensor one: the host time of the single-tensor
    ``Optimizer.step`` regions (:func:`~.optimizer.single_tensor_step_regions`:
    their ops, their calls and the Python loop between them) goes with the
    kernels they launched. On a rank with GPU work the fused step's own cost
    is left out, so the predicted step is low by it: on an H200
    (``bench/record_cuda.py`` unfused-optimizer and unfused-optimizer-wide,
    2026-11-27) its host time was 0.3-1.0 ms under the profiler for 34 to 96
    parameters and its kernels took 0.011 and 0.041 ms a step, where the
    per-parameter kernels took 0.84 and 0.20 ms. On a rank without, the
    per-parameter ops stay (the CPU's foreach kernels still run them) and
    :data:`CPU_OPTIMIZER_PYTHON_REMOVED` of the Python between them goes."""
    regions = _per_graph(ev, g, "single-tensor optimizer", lambda: single_tensor_step_regions(ev, None))
    if regions.empty:
        return
    keep = 0.0
    if not g.has_gpu and len(e.windows):  # the analyzed windows' regions: the host edges the replay has
        regions = _per_graph(ev, g, "analyzed optimizer", lambda: single_tensor_step_regions(ev, e.windows))
        ops_us, python_us = _per_graph(ev, g, "optimizer ops", lambda: _region_ops(ev, e.windows, regions))
        keep = ops_us + (1.0 - e.pick(CPU_OPTIMIZER_PYTHON_REMOVED)) * python_us
    replace_host_ops(g, e, _spans(regions), keep_us=keep)


def _region_ops(ev: RankEvents, w: np.ndarray, regions: pd.DataFrame) -> Tuple[float, float]:
    """Of the annotations ``regions`` (CPU rows) in the windows ``w``: the
    time of their outermost ops and the rest (the Python between the ops),
    µs over all windows."""
    ops = step_thread_ops(ev, w)
    if ops.empty:
        return 0.0, 0.0
    inside = starts_inside(ops, regions)
    pos = np.flatnonzero(inside)
    parent = ops["parent"].to_numpy()
    outer = pos[(parent[pos] < 0) | ~inside[np.maximum(parent[pos], 0)]]
    region = intervals.total(intervals.union(regions["ts"].to_numpy(float), regions["end"].to_numpy(float)))
    op_us = intervals.total(intervals.union(ops["ts"].to_numpy(float)[outer], ops["end"].to_numpy(float)[outer]))
    return op_us, max(0.0, region - op_us)


@edit(EditLabel.PASSES_BATCHED,
      description=("the many small forward/backward passes of a step become fewer, larger ones (one over the whole "
                   "batch for a model called per sample; micro-batches of 16 for gradient accumulation): each op's "
                   "fixed cost per call (Python, dispatch, the profiler, and its own set-up) is paid once per larger "
                   "pass, the per-sample work stays"),
      error_pct=25.0,
      error_source="fix bench CPU pairs per_sample_loop and micro_batches (docs/FIXBENCH.md)")
def edit_batched(ev: RankEvents, g: Graph, e: Edit) -> None:
    """On a rank without GPU work whose steps run N forward passes (loss op
    calls, N >= 2): the fix the finding gives is M passes instead of N
    (:func:`target_passes`); the host time of the passes (each window less its
    DataLoader, optimizer and zero_grad annotations) is replaced by M/N of its
    dispatch and Python (everything but the ops' work) plus the ops' work
    batched (:func:`~.host_ops.batched_us`: each op's fixed cost per call paid
    M/N as often, its per-sample work kept)."""
    if g.has_gpu or not len(e.windows):
        return
    passes = _per_graph(ev, g, "passes", lambda: _passes(ev, e.windows))
    if passes is None:
        return
    spans, ops, overhead, ratio, total_us = passes
    work = batched_us(ops, overhead, ratio, e.pick(BATCHED_FIXED_SCALE))
    rest = max(0.0, total_us - arithmetic_us(ops, overhead))
    replace_host_ops(g, e, spans, keep_us=ratio * rest + work)


#: The micro-batch (samples) the tiny-batches fix proposes for gradient accumulation.
FIX_MICRO_BATCH = 16


def target_passes(n: float, backwards: float, batch: int) -> float:
    """The passes per step the tiny-batches fix leaves of ``n`` (with
    ``backwards`` backward passes and ``batch`` samples per pass, 0 unknown):
    one where the losses are summed into one backward (a model called per
    sample: one batched forward), else micro-batches of :data:`FIX_MICRO_BATCH`
    (a pass of ``n * batch`` samples split in 16s; a tiny batch of unknown
    size is taken as 2)."""
    if backwards <= n / 2:
        return 1.0
    return float(max(1, int(np.ceil(n * (batch or 2) / FIX_MICRO_BATCH))))


def _passes(ev: RankEvents, w: np.ndarray) -> Optional[Tuple[pd.DataFrame, pd.DataFrame, float, float, float]]:
    """The forward/backward passes of the windows ``w``: their host spans
    (CPU rows), their ops (a :func:`~.host_ops.step_thread_ops` frame), the
    fixed cost of a call (µs), the share of the passes the fix keeps
    (:func:`target_passes` / passes per step) and their total host time (µs,
    over all windows); None below two passes a step."""
    from ..cpu_side import forward_passes
    cpu = ev.cpu
    ops = step_thread_ops(ev, w)
    if ops.empty:
        return None
    n, backwards, batch, _ = forward_passes(cpu[containing_index(intervals.union(w[:, 0], w[:, 1]),
                                                                 cpu["ts"].to_numpy(float)) >= 0], w)
    if n < 2:
        return None
    thread = int(ops["thread"].iloc[0])
    others = pd.concat([cpu[cpu["s_name"].str.startswith(DATALOADER_PREFIXES).fillna(False).to_numpy(dtype=bool)],
                        step_regions(ev, w), zero_grad_regions(ev, w)])
    no = intervals.union(others["ts"].to_numpy(float), others["end"].to_numpy(float)) if len(others) else \
        np.empty((0, 2))
    u = intervals.subtract(intervals.union(w[:, 0], w[:, 1]), no)
    inside = containing_index(u, ops["ts"].to_numpy(float)) >= 0
    spans = pd.DataFrame({"thread": thread, "ts": u[:, 0], "end": u[:, 1]})
    return spans, ops[inside], call_overhead_us(ops), target_passes(n, backwards, batch) / n, intervals.total(u)


#: The share of a training-mode BatchNorm kernel's time (cuDNN ``bn_fw_tr``, MIOpen
#: ``BatchNormFwdTrain``) its inference kernel keeps (best, mid, worst): a memory-bound pass that
#: reads the input once and writes the output, where training mode reads it twice (the batch's
#: statistics, then the normalization): 2 of 3 transfers. PyTorch's own statistics kernel
#: (``batch_norm_collect_statistics``) goes whole.
BN_INFERENCE_KEPT = (0.5, 0.67, 0.85)


@edit(EditLabel.EVAL_MODE,
      description=("an inference step's model in eval mode: the dropout ops a model left in training mode runs "
                   "(each draws a random mask) are gone with their GPU work, and BatchNorm's training-mode kernels "
                   "run as inference kernels (no batch statistics)"),
      error_pct=10.0,
      error_source="fix bench CPU pairs train_mode_inference (docs/FIXBENCH.md)")
def edit_eval_mode(ev: RankEvents, g: Graph, e: Edit) -> None:
    """``model.eval()`` in an inference step (a rank without a backward
    pass; no change on one that trains): the outermost active dropout ops
    (:func:`~.host_ops.active_dropout`) removed with the work they launch,
    and BatchNorm's training-mode GPU kernels
    (:func:`~.host_ops.bn_training_kernels`) shortened to
    :data:`BN_INFERENCE_KEPT` of their time (the statistics kernel of
    PyTorch's own BatchNorm removed)."""
    if has_backward(ev):
        return
    rows = _per_graph(ev, g, "active dropout", lambda: active_dropout(ev, e.windows))
    if len(rows):
        remove_host_ops(g, e, rows)
    if not g.has_gpu:
        return
    bn = _per_graph(ev, g, "bn training kernels", lambda: bn_training_kernels(ev, np.empty((0, 2))))
    if len(bn):
        nodes, at = gpu_nodes(g, bn)
        stats = name_search(bn["s_name"], BN_STATS_KERNEL)[at]
        e.dur[nodes] = e.dur[nodes] * np.where(stats, 0.0, e.pick(BN_INFERENCE_KEPT))


@edit(EditLabel.FAST_CPU_KERNELS,
      description=("the CPU's reference kernels (the slow convolution path taken for float64, dilated or "
                   "unusual layouts) replaced by the oneDNN/float32 path, several times faster"),
      error_pct=30.0,
      error_source="fix bench CPU pairs float64 (docs/FIXBENCH.md)")
def edit_fast_cpu_kernels(ev: RankEvents, g: Graph, e: Edit) -> None:
    """On a rank without GPU work: the outermost reference-kernel ops
    (:data:`~.host_ops.SLOW_CPU_OPS`) run :data:`SLOW_CPU_SPEEDUP` times faster."""
    if g.has_gpu or not len(e.windows):
        return
    rows = _per_graph(ev, g, "slow cpu ops", lambda: slow_cpu_ops(ev, e.windows))
    if rows.empty:
        return
    total = intervals.total(intervals.union(rows["ts"].to_numpy(float), rows["end"].to_numpy(float)))
    replace_host_ops(g, e, rows, keep_us=total / e.pick(SLOW_CPU_SPEEDUP))


#: Collective kernels whose result only the optimizer reads: the gradient reduction of
#: DDP, FSDP and ZeRO (NCCL/RCCL kernel names, e.g. ``ncclKernel_AllReduce_RING_LL_Sum_float``,
#: ``ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL``). All-gathers (parameters the next layer
#: needs), send/recv and all-to-all (activations, embeddings) feed compute and are not moved;
#: NCCL 2.19+'s ``ncclDevKernel_Generic`` does not say which collective it runs.
GRADIENT_COLLECTIVE = re.compile(r"^(nccl|rccl).*(allreduce|reducescatter|reduce_scatter)", re.IGNORECASE)


@edit(EditLabel.GRADIENT_OVERLAP,
      description=("compute no longer waits for the gradient all-reduces and reduce-scatters, but the last of each "
                   "step, which the optimizer needs; the collectives keep their measured durations"),
      error_pct=8.0,
      error_source="DDP without overlap injected into the A100/V100 trace_diff traces: +2.1, +5.2 % (docs/whatif.md)")
def edit_overlap_gradient_collectives(ev: RankEvents, g: Graph, e: Edit) -> None:
    """Gradient reduction overlapped with compute (DDP buckets that start
    during backward, ``no_sync`` where it applies, FSDP's backward prefetch):
    the compute streams' waits for the gradient collectives (the
    data-parallel ones of :mod:`.collectives`, :func:`_gradient_nodes`; the
    cross-stream edges inferred from ``cudaStreamWaitEvent``) are dropped,
    on a rank whose exposed communication is mostly those (elsewhere its
    fix is another: the edit changes nothing), but the wait for the last one of
    each step (by measured end; a collective belongs to the step whose
    window its launch call falls in, between two step markers), which the
    optimizer needs. The collectives keep their measured durations, and
    host synchronizations still wait for them. Where the trace names no
    collective (NCCL's generic kernel) nothing changes."""
    cross = np.flatnonzero(g.ekind == E_CROSS)
    if not len(cross):
        return
    dp = _per_graph(ev, g, "gradient collectives", lambda: _gradient_nodes(ev, g, e.windows))
    if dp is None:
        return
    cross = cross[np.isin(g.src[cross], dp)]
    if not len(cross):
        return
    src = np.unique(g.src[cross])
    marks = np.sort(np.fromiter(g.markers, dtype=float, count=len(g.markers)))
    # a collective belongs to the step that launched it (a GPU behind the host runs it in a later window)
    launched = [next((float(g.m_start[g.src[i]]) for i in range(g.ptr[n], g.ptr[n + 1]) if g.ekind[i] == E_LAUNCH),
                     float(g.m_start[n])) for n in src.tolist()]
    step = np.searchsorted(marks, launched, side="right")
    last = {int(b): int(n) for b, n in sorted(zip(step.tolist(), src.tolist()), key=lambda x: g.m_end[x[1]])}
    keep = np.isin(g.src[cross], list(last.values()))
    e.drop[cross[~keep]] = True


#: The share (%) of a rank's exposed communication its data-parallel gradient reduction must
#: have for the overlap edit to be the fix for it: where tensor-parallel, all-to-all or pipeline
#: traffic is most of it, overlapping gradient buckets is not what the finding's fix does.
DP_EXPOSED_MIN_PCT = 50.0


def _gradient_nodes(ev: RankEvents, g: Graph, w: np.ndarray) -> Optional[np.ndarray]:
    """The GPU nodes of ``g`` that are data-parallel gradient reductions
    (:mod:`.collectives` kind ``dp``, and named all-reduce or reduce-scatter
    where the kernel says: :data:`GRADIENT_COLLECTIVE`), or None where the
    rank's exposed communication is mostly of other kinds
    (:data:`DP_EXPOSED_MIN_PCT`)."""
    kinds = collective_kinds(ev, w, max(len(w), 1)) if len(w) else []
    exposed = sum(k.exposed_us_per_step for k in kinds)
    dp_exposed = sum(k.exposed_us_per_step for k in kinds if k.kind == "dp")
    if exposed > 0 and dp_exposed < exposed * DP_EXPOSED_MIN_PCT / 100:
        return None
    comm = kinds_of(ev)
    rows = comm[comm["kind"].to_numpy() == "dp"]
    nodes = gpu_nodes(g, rows)[0]
    named = np.fromiter((GRADIENT_COLLECTIVE.search(g.name[n]) is not None or "Generic" in g.name[n]
                         or "SendRecv" in g.name[n] for n in nodes.tolist()), dtype=bool, count=len(nodes))
    return nodes[named]


# ---------------------------------------------------------------- the profiler's own cost (not a fix)

#: The host events the profiler records at a cost each (:data:`NO_PROFILER_EVENT_US`): ops,
#: annotations, runtime and driver calls. Not CUPTI's ``cuda_sync`` records, nor ``with_stack``'s
#: Python frames (their cost was not measured).
PROFILED_HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
#: The profiler's own host cost per recorded host event (µs; best, mid, worst: the shortest
#: step first), removed by :attr:`EditLabel.NO_PROFILER`. Calibrated on round 0 of the H200 fix
#: pairs (bench/noprof.py, docs/whatif.md "profiler's own cost"), checked on their round 1: the
#: mid is the one cost of 2, 3, 3.5, 4, 5, 6 µs with the least median |error| on round 0
#: (3 µs: 6.5 %); the ends span the costs round 0's host-bound pairs imply, (profiled -
#: unprofiled step) / events a step: 2.1 to 7.0 µs, taken as 2 and 6 (the 3-6 µs measured
#: before, :data:`~.run.PROFILER_EVENT_US`, rounded out at the low end).
NO_PROFILER_EVENT_US = (6.0, 3.0, 2.0)


def profiled_events(ev: RankEvents, g: Graph) -> np.ndarray:
    """Per edge of ``g``, the recorded host events (:data:`PROFILED_HOST_CATEGORIES`) whose
    cost the edge's measured interval holds (``(edges,)``, counts; 0 off host edges):

    * those of the edge's own thread starting inside its interval ``(a, b]`` (the call that
      ends it included: its records are made before it starts);
    * on the step thread, where it idled :data:`~.graph.TRIGGER_GAP_US` or more inside the
      interval with no op of its own running (``backward()`` waiting for autograd's thread),
      also the other launching threads' events starting in that idle time: the wait ends
      when their work does, so it is shorter by their cost."""
    cpu = ev.cpu
    cpu = cpu[cpu["s_cat"].isin(PROFILED_HOST_CATEGORIES)]
    n = np.zeros(len(g.off))
    host = np.flatnonzero(g.ekind == E_HOST)
    if cpu.empty or not len(host):
        return n
    starts = {thr: np.sort(rows["ts"].to_numpy(float)) for thr, rows in cpu.groupby("thread", sort=False)}
    for thr, ts in starts.items():
        on = host[g.thread[g.src[host]] == thr]
        if len(on):
            n[on] = np.searchsorted(ts, g.gap[on, 1], side="right") - np.searchsorted(ts, g.gap[on, 0], side="right")
    st = g.step_thread
    on = host[g.thread[g.src[host]] == st]
    others = [starts[t] for t in np.unique(g.thread[g.kind == HOST]).tolist() if t != st and t in starts]
    if not len(on) or not others:
        return n
    own = cpu[cpu["thread"].eq(st) & cpu["s_cat"].isin(("cpu_op", "user_annotation")) & ~is_step(cpu["s_name"])]
    busy = intervals.union(own["ts"].to_numpy(float), own["end"].to_numpy(float)) if len(own) else np.empty((0, 2))
    span = g.gap[on]
    idle = (span[:, 1] - span[:, 0]) - np.clip(intervals.overlap_each(span, busy), 0.0, None) >= TRIGGER_GAP_US
    for i in on[idle].tolist():
        free = intervals.subtract(g.gap[i:i + 1], busy)
        for ts in others:
            n[i] += int((containing_index(free, ts) >= 0).sum())
    return n


@edit(EditLabel.NO_PROFILER,
      description=("the profiler's own host cost is gone: each recorded host event (op, annotation, runtime or driver "
                   "call) takes 3-6 µs less host time, and a training thread waiting for autograd's thread waits less "
                   "by that thread's savings"),
      error_pct=30.0,
      error_source=("H200 fix pairs (slow-data, pinned-workers, pinned, amp; docs/whatif.md, 2026-11-29), calibrated "
                    "on round 0 (8 traces: 80th-percentile |error| 58.8 %), checked on round 1 held out (8 traces): "
                    "80th-percentile |error| 30.2 %, median 8.8 %, against the median step timed without the "
                    "profiler"),
      fix=False)
def edit_no_profiler(ev: RankEvents, g: Graph, e: Edit) -> None:
    """The step without the profiler: every host edge's offset less ``c`` µs per recorded
    host event its interval holds (:func:`profiled_events`), ``c`` read from
    :data:`NO_PROFILER_EVENT_US` (:meth:`Edit.pick`), floored at 0 (at the measured offset
    where it is negative, as :func:`replace_host_ops` floors): an interval cannot lose more
    than it lasted. Runtime calls keep their measured duration. Not a fix: no rule names it."""
    n = _per_graph(ev, g, "profiled events", lambda: profiled_events(ev, g))
    c = e.pick(NO_PROFILER_EVENT_US)
    host = g.ekind == E_HOST
    e.off = np.where(host, np.maximum(e.off - c * n, np.minimum(g.off, 0.0)), e.off)


def warmup_host_intervals(g: Graph, warmup: Optional[pd.DataFrame]) -> Dict[Any, np.ndarray]:
    """Per host thread of ``g``'s host edges, the intervals (``(n, 2)`` µs) of
    one-off host time there that no edit removes (:attr:`Edit.keep_host`):
    the profiler's own records (``overhead``: CUPTI's buffer requests and
    flushes, logged on no thread of the workload's, so taken on every thread)
    and the other warm-up rows of ``warmup`` (CPU rows: ``thread``, ``ts``,
    ``end``, ``s_cat``: first library calls, cold first calls, set-up calls)
    on their own thread. Empty where there is none. Without it, the fused
    optimizer's edit removed a 2.6 ms buffer request the profiler made inside
    an optimizer step's first ``aten::mul_`` (an RTX 5090 run), which no fix
    of the step removes and the window finding already names."""
    if warmup is None or warmup.empty:
        return {}
    over = warmup["s_cat"].astype(str).to_numpy() == OVERHEAD_CATEGORY
    ts, end = warmup["ts"].to_numpy(float), warmup["end"].to_numpy(float)
    thread = warmup["thread"].to_numpy()
    out: Dict[Any, np.ndarray] = {}
    for thr in np.unique(g.thread[g.src[g.ekind == E_HOST]]).tolist():
        mine = over | (thread == thr)
        if mine.any():
            out[thr] = intervals.union(ts[mine], end[mine])
    return out


def warmup_nodes(g: Graph, warmup: pd.DataFrame) -> np.ndarray:
    """A node mask of ``g``'s host calls that are the one-off warm-up calls
    ``warmup`` (CPU rows: ``thread``, ``ts``), matched by thread and start."""
    mask = np.zeros(g.size, dtype=bool)
    if warmup is None or warmup.empty:
        return mask
    keys = set(zip(warmup["thread"].to_numpy().tolist(), warmup["ts"].to_numpy(float).tolist()))
    host = np.flatnonzero(g.kind == HOST)
    hit = [i for i, k in zip(host.tolist(), zip(g.thread[host].tolist(), g.m_start[host].tolist())) if k in keys]
    mask[hit] = True
    return mask


def check_registry() -> None:
    """Check that :data:`EDITS` holds every :class:`~hta_report.replay_terms.EditLabel`,
    in its order (run at import: a label without its edit, or an edit out of
    order, fails the import, not a report).

    Raises:
        RuntimeError: the registry's labels differ from :class:`EditLabel`'s.
    """
    if list(EDITS) != list(EditLabel):
        raise RuntimeError(f"edits registered {[str(x) for x in EDITS]}, labels declared {[str(x) for x in EditLabel]} "
                           "(hta_report/replay_terms.py): register one edit per label, in the labels' order")


check_registry()
