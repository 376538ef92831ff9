"""CPU-side metrics: DataLoader time, host-device synchronization, top CPU ops."""
from __future__ import annotations

import re
from array import array
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..model import CpuSide, NamedTime
from .. import intervals
from ..load.compat import LAUNCH_CALL
from .events import LAUNCH_CATEGORIES, RankEvents, is_step, name_search, shared
from .kernels import input_dims
from .steps import analyzed_windows, step_windows

#: Event names that block the host until the device catches up.
SYNC_NAMES = (
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "aten::item", "aten::_local_scalar_dense",
)
#: Scalar reads: a synchronization only where the tensor is on a device.
SCALAR_READS = ("aten::item", "aten::_local_scalar_dense")
#: The runtime and driver calls through which a scalar read of a device tensor waits for the device: its
#: copy to the host and the synchronize after it (``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` in
#: ``aten::_local_scalar_dense``; ``cuMemcpyDtoHAsync``, ``hipMemcpyWithStream``, ``hipStreamSynchronize``,
#: a legacy ``cudaMemcpy``). Another call inside a read (a device query) waits for nothing.
READ_CALL = re.compile(r"Memcpy|Synchronize")
#: The shortest a scalar read of a device tensor takes (µs), its copy to the host and the synchronize
#: included: a read shorter than this read a CPU tensor (an optimizer's CPU step counter, a CPU
#: scalar), on a trace that records no runtime call to tell. Half the shortest of the 124 such reads
#: of the field traces with runtime calls (2026-11-29: 11.6 µs ``aten::item`` on an H200, median over
#: 20 µs; the field's 5,428 reads without a copy or synchronize inside: median 0.42 µs, 99th
#: percentile 4.0 µs): two runtime calls and a round trip over the bus cost more.
DEVICE_READ_MIN_US = 5.0


def launches_gpu_work(calls: pd.DataFrame) -> bool:
    """Whether any of the runtime and driver ``calls`` (rows with ``s_name``)
    puts work on the GPU: a kernel launch, copy or set
    (:data:`~hta_report.load.compat.LAUNCH_CALL`, CUDA and HIP)."""
    return bool(name_search(calls["s_name"], LAUNCH_CALL).any())


def is_sync(cpu: pd.DataFrame) -> np.ndarray:
    """Which rows of ``cpu`` (a rank's host events: ``s_name``, ``s_cat``,
    ``ts``, ``end`` µs, ``thread``) block the host until the device catches up
    (:data:`SYNC_NAMES`), boolean array. A scalar read (``aten::item``,
    ``aten::_local_scalar_dense``) counts only where it reads a device
    tensor: where the trace records runtime calls, a copy or synchronize
    (:data:`READ_CALL`) runs inside it on its thread; where it records none
    (a CPU-only run, or a device the profile did not record), it lasts
    :data:`DEVICE_READ_MIN_US` or more. A read of a CPU tensor
    (``bool(cpu_tensor)``, a CPU scalar's ``.item()``, the step counter a
    non-capturable ``torch.optim`` optimizer keeps on the CPU) calls neither
    and waits for nothing. On a rank that launches no GPU work at all, no
    synchronizing call waits for GPU work either."""
    names = cpu["s_name"]
    hit = np.array(names.isin(SYNC_NAMES).to_numpy(dtype=bool), dtype=bool, copy=True)
    scalar = hit & names.isin(SCALAR_READS).to_numpy(dtype=bool)
    rt = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES).to_numpy(dtype=bool)]
    if rt.empty:
        dur = cpu["end"].to_numpy(dtype=float) - cpu["ts"].to_numpy(dtype=float)
        return hit & ~(scalar & (dur < DEVICE_READ_MIN_US))
    # a rank that launches no GPU work at all (a model run on the CPU) queues nothing to wait for: its
    # synchronizing calls wait for CUDA's set-up (analysis.warmup.context_creation). Where it launches, a
    # synchronize before its first traced launch may wait for work queued before the profiler started.
    if not launches_gpu_work(rt):
        return np.zeros(len(cpu), dtype=bool)
    if not scalar.any():
        return hit
    rt = rt[name_search(rt["s_name"], READ_CALL)]
    thread = cpu["thread"].to_numpy()
    ts, end = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float)
    calls = {t: np.sort(g["ts"].to_numpy(dtype=float)) for t, g in rt.groupby("thread", sort=False)}
    for i in np.flatnonzero(scalar).tolist():
        c = calls.get(thread[i])
        if c is None or np.searchsorted(c, end[i], side="left") <= np.searchsorted(c, ts[i], side="left"):
            hit[i] = False
    return hit


#: Loss ops: one call (of the outermost) per forward pass that ends in a loss.
LOSS_OPS = (
    "aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::nll_loss", "aten::nll_loss2d", "aten::mse_loss",
    "aten::l1_loss", "aten::smooth_l1_loss", "aten::huber_loss", "aten::binary_cross_entropy",
    "aten::binary_cross_entropy_with_logits", "aten::kl_div", "aten::ctc_loss", "aten::margin_ranking_loss",
    "aten::cosine_embedding_loss", "aten::hinge_embedding_loss", "aten::soft_margin_loss",
    "aten::multilabel_margin_loss", "aten::poisson_nll_loss",
)
#: Name prefix of the autograd engine's node evaluations (a backward pass runs them).
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
#: Name prefixes of the DataLoader iteration annotations.
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
#: Annotations only the thread running the step loop records: its DataLoader iteration and the
#: optimizer's ``step``/``zero_grad`` (autograd's engine runs backward on threads of its own).
LOOP_MARKERS = DATALOADER_PREFIXES + ("Optimizer.step#", "Optimizer.zero_grad#")


def loop_thread(ev: RankEvents) -> Optional[int]:
    """The host thread running the step loop: the one holding the
    ``ProfilerStep#N`` annotations; without them, the one holding the most
    :data:`LOOP_MARKERS` (the DataLoader's iteration, the optimizer's step);
    None when the trace has neither (callers then take the busiest thread).
    Counting runtime calls or ops instead picks autograd's backward thread
    wherever backward launches more than the rest of the step (a ResNet's
    convolutions: 15,117 calls against the main thread's 10,811)."""
    cpu = ev.cpu
    steps = cpu[is_step(cpu["s_name"])]
    if len(steps):
        return int(steps["thread"].iloc[0])
    names = cpu["s_name"].astype(str)
    marked = cpu[names.str.startswith(LOOP_MARKERS).to_numpy(dtype=bool)]
    if marked.empty:
        return None
    return int(marked["thread"].value_counts().index[0])


def self_times(cpu: pd.DataFrame) -> np.ndarray:
    """Self time (µs) of each row of ``cpu`` (rows of ``RankEvents.df``): its
    duration minus the durations of its direct children on the same thread
    (events nested inside it), clipped at 0.

    Defined by a walk of the rows per thread, parents before children (by
    start, then longest first), with a stack of the events still open
    (:func:`_self_times_walk`), each row taking ``min(end, parent's end) -
    start`` from its parent. The parents are found with numpy instead
    (:func:`_parents`) and the same float subtractions done in the same
    order, so the result is identical (``tests/test_cpu_side.py`` compares
    both on random and real events); the walk runs only where a time is NaN.
    On the 286 MB fractional benchmark rank (643,754 CPU events) 0.245 s
    walked, 0.082 s so.
    """
    self_t = np.maximum(cpu["dur"].to_numpy(dtype=float), 0.0)  # some traces carry dur = -1
    if not len(cpu):
        return self_t
    ts = cpu["ts"].to_numpy(dtype=float)
    end = cpu["end"].to_numpy(dtype=float)
    thread = cpu["thread"].to_numpy()
    order = np.lexsort((-end, ts, thread))  # by thread, then parents before children
    ts_o, end_o, thread_o = ts[order], end[order], thread[order]
    out = self_t[order]
    parent = _parents(ts_o, end_o, thread_o)
    if parent is None:
        out = _self_times_walk(ts_o, end_o, thread_o, out)
    else:
        child = np.flatnonzero(parent >= 0)
        # what the walk subtracts, min(end, parent's end) - ts, in the walk's order (ufunc.at is sequential)
        np.subtract.at(out, parent[child], np.minimum(end_o[child], end_o[parent[child]]) - ts_o[child])
    self_t[order] = out
    return np.maximum(self_t, 0.0)


def _self_times_walk(ts: np.ndarray, end: np.ndarray, thread: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The stack walk over rows sorted by thread, start, longest first: each
    row's time inside its parent (the innermost event still open when it
    starts) is taken from the parent's entry of ``out`` (a copy is returned)."""
    # array.array holds 8 bytes per value (a list of floats ~32), so a million rows cost tens of MB less
    ts_l, end_l = array("d", ts.tobytes()), array("d", end.tobytes())
    thread_l = array("q", thread.astype(np.int64).tobytes())
    res = array("d", out.tobytes())
    stack: List[int] = []
    current = None
    for i in range(len(ts_l)):
        if thread_l[i] != current:
            current, stack = thread_l[i], []
        t = ts_l[i]
        while stack and t >= end_l[stack[-1]]:
            stack.pop()
        if stack:
            top = stack[-1]
            res[top] -= min(end_l[i], end_l[top]) - t
        stack.append(i)
    return np.frombuffer(res, dtype=float).copy()


def _parents(ts: np.ndarray, end: np.ndarray, thread: np.ndarray) -> Optional[np.ndarray]:
    """The walk's parent of each row (sorted as for :func:`_self_times_walk`;
    -1: none), found without walking; None when a time is NaN (the walk then
    runs, as comparisons with NaN decide there).

    In the walk a row stays on the stack until a later row starts at or after
    its end, and a row left on the stack after popping has not ended: so the
    parent of row ``i`` is the last row ``j < i`` of its thread with
    ``end[j] > ts[i]``, overlaps or not. As ``ts`` only grows along a
    thread, row ``j`` is that candidate for the rows ``j + 1 .. D[j] - 1``,
    ``D[j]`` being the first row of the thread starting at or after
    ``end[j]``: the parent of ``i`` is the largest ``j`` whose range holds
    ``i``, found with a segment tree (range-max updates, point queries), in
    about ``2 log2(n)`` numpy passes and ``2n`` integers of memory.
    """
    n = len(ts)
    if np.isnan(ts).any() or np.isnan(end).any():
        return None
    last = np.empty(n, dtype=np.int64)  # D[j] - 1: the last row row j can be the parent of
    bounds = np.flatnonzero(np.diff(thread)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
        last[lo:hi] = lo + np.searchsorted(ts[lo:hi], end[lo:hi], side="left") - 1
    rows = np.arange(n, dtype=np.int64)
    can = last > rows
    size = 1 << max(1, int(n - 1).bit_length())
    tree = np.full(2 * size, -1, dtype=np.int64)
    val = rows[can]
    lo_, hi_ = val + 1 + size, last[can] + 1 + size  # [lo_, hi_) in leaf positions
    while len(val):
        odd = (lo_ & 1).astype(bool)
        np.maximum.at(tree, lo_[odd], val[odd])
        lo_ = lo_ + odd
        odd = (hi_ & 1).astype(bool)
        hi_ = hi_ - odd
        np.maximum.at(tree, hi_[odd], val[odd])
        lo_, hi_ = lo_ >> 1, hi_ >> 1
        more = lo_ < hi_
        val, lo_, hi_ = val[more], lo_[more], hi_[more]
    parent = np.full(n, -1, dtype=np.int64)
    node = rows + size
    while node[0] >= 1:
        np.maximum(parent, tree[node], out=parent)
        node >>= 1
    return parent


def _named(rows: pd.DataFrame, self_col: Optional[np.ndarray] = None, limit: int = 0) -> List[NamedTime]:
    if rows.empty:
        return []
    # grouped by the categorical's codes (its categories are sorted: the groups come in the
    # order plain strings would give), not by an object array of one string per row
    df = pd.DataFrame({"name": rows["s_name"].array, "dur": rows["dur"].to_numpy(dtype=float),
                       "selft": self_col if self_col is not None else rows["dur"].to_numpy(dtype=float)})
    g = df.groupby("name", observed=True).agg(count=("dur", "size"), total=("dur", "sum"), selft=("selft", "sum"))
    g = g.sort_values("selft" if self_col is not None else "total", ascending=False)
    if limit:
        g = g.head(limit)
    cats: Dict[str, str] = {}
    if "s_cat" in rows.columns and len(g):
        # each name's category as its last row has it (one row per name, not a string per row)
        kept = rows[rows["s_name"].isin(g.index)].drop_duplicates("s_name", keep="last")
        cats = {str(n): str(c) for n, c in zip(kept["s_name"].astype(str), kept["s_cat"].astype(str))}
    return [NamedTime(name=str(n), count=int(r["count"]), total_us=float(r["total"]), self_us=float(r["selft"]),
                      category=cats.get(str(n), "")) for n, r in g.iterrows()]


#: Host ops that draw random tensors (or fill new ones): on the CPU where they launch no GPU work
#: (``torch.randn(shape).to("cuda")``: ``aten::normal_`` runs on the host), on the GPU where they do.
RANDOM_OPS = re.compile(r"^aten::(normal_|uniform_|random_|randn|rand|randint|randperm|bernoulli_|"
                        r"exponential_|geometric_|cauchy_|log_normal_)$")


def host_random_self_us(ops: pd.DataFrame, self_t: np.ndarray) -> float:
    """Self time (µs, summed) of the random-draw ops among ``ops`` (rows with
    ``ts``, ``end``, ``thread``, ``s_name``, ``s_cat``; ``self_t`` their self
    times) that launched no GPU work: no kernel launch, copy or set call
    (:data:`~hta_report.load.compat.LAUNCH_CALL`) of ``ops`` on their thread
    inside them. Those drew on the CPU; a draw on the GPU (``device="cuda"``)
    launches its kernel from inside the op."""
    random = name_search(ops["s_name"], RANDOM_OPS) & (ops["s_cat"] == "cpu_op").to_numpy()
    if not random.any():
        return 0.0
    launch = (ops["s_cat"].isin(LAUNCH_CATEGORIES).to_numpy() & name_search(ops["s_name"], LAUNCH_CALL))
    on_cpu = random.copy()
    thr = ops["thread"].to_numpy()
    ts, end = ops["ts"].to_numpy(dtype=float), ops["end"].to_numpy(dtype=float)
    for t in np.unique(thr[random]):
        at = np.sort(ts[launch & (thr == t)])
        rows = np.flatnonzero(random & (thr == t))
        first = np.searchsorted(at, ts[rows], side="left")  # the first launch at or after the op's start
        found = first < len(at)
        inside = np.zeros(len(rows), dtype=bool)
        inside[found] = at[first[found]] <= end[rows][found]
        on_cpu[rows] = ~inside
    return float(np.asarray(self_t, dtype=float)[on_cpu].sum())


def without_profiler_records(ops: pd.DataFrame, self_t: np.ndarray, records: pd.DataFrame) -> np.ndarray:
    """``self_t`` (µs per row of ``ops``) less the profiler's own records
    ``records`` (Kineto's ``overhead`` category: buffer requests, CUPTI's
    instrumentation), each taken from the innermost op holding it (the latest
    to start of those whose ``[ts, end]`` holds it), at most that op's self
    time. Kineto logs them on no thread of the workload's, so self times
    counted them as the op's own: ``CompiledFunction`` showed 2.13 ms of which
    1.75 ms was the profiler's record inside it (an A10G run)."""
    if records.empty or ops.empty:
        return self_t
    out = np.array(self_t, dtype=float, copy=True)
    ts, end = ops["ts"].to_numpy(float), ops["end"].to_numpy(float)
    for a, z in zip(records["ts"].to_numpy(float).tolist(), records["end"].to_numpy(float).tolist()):
        holders = np.flatnonzero((ts <= a) & (end >= z))
        if len(holders):
            k = holders[np.lexsort((end[holders], -ts[holders]))[0]]  # latest start, then shortest
            out[k] = max(0.0, out[k] - (z - a))
    return out


#: A worker loader's first batch this long (µs) or longer can be its start-up, and
#: :data:`COLD_BATCH_RATIO` times its later batches' median: the warm-up thresholds
#: (:data:`hta_report.analysis.warmup.WARMUP_CALL_US`, ``COLD_RATIO``), kept here because
#: the DataLoader's share (:func:`cpu_side`) leaves the cold batch out too.
COLD_BATCH_MIN_US = 1000.0
COLD_BATCH_RATIO = 5.0
#: The annotation of a batch drawn from a DataLoader with worker processes (``num_workers`` > 0).
WORKER_LOADER_NEXT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


@shared
def first_worker_batch(ev: RankEvents) -> pd.DataFrame:
    """The first batch of a DataLoader with worker processes, where it is
    cold: the first :data:`WORKER_LOADER_NEXT` annotation of a thread,
    lasting :data:`COLD_BATCH_MIN_US` or more, and either the thread's only one
    or :data:`COLD_BATCH_RATIO` times the median of its later ones or more. The
    first ``__next__`` of a fresh iterator starts the workers (a process
    each, the dataset and its imports in each) and waits for the first batch
    they prefetch, once per epoch without ``persistent_workers``: a
    start-up, not the steady input wait (a ViT inference's 16-worker loader
    on an RTX A5000: 780 ms of a 2.7 s window, one batch; ninth gathering).
    Rows of ``ev.cpu``, computed once per rank (:func:`~.events.shared`: the
    DataLoader's share, the warm-up calls and the replay's DataLoader edit
    ask for it)."""
    cpu = ev.cpu
    rows = cpu[cpu["s_name"].eq(WORKER_LOADER_NEXT)]
    keep = []
    for _, mine in rows.sort_values("ts").groupby("thread", sort=False):
        dur = mine["dur"].to_numpy(float)
        if dur[0] < COLD_BATCH_MIN_US:
            continue
        if len(dur) == 1 or dur[0] >= COLD_BATCH_RATIO * float(np.median(dur[1:])):
            keep.append(mine.index[0])
    return cpu.loc[keep] if keep else cpu.iloc[0:0]


def cpu_side(ev: RankEvents, top: int = 15) -> CpuSide:
    """DataLoader share of step time, synchronization per step and top CPU ops
    by self time for one rank. Per-step figures average the analyzed steps
    (warm-up excluded; a worker loader's cold first batch, :func:`first_worker_batch`,
    too); without ``ProfilerStep`` annotations they cover the whole trace as one window."""
    cpu = ev.cpu
    windows = analyzed_windows(step_windows(ev))
    if len(windows):
        win = windows[:, 1:3]
    elif len(cpu):
        win = np.array([[cpu["ts"].min(), cpu["end"].max()]], dtype=float)
    else:
        return CpuSide()
    step_us = float((win[:, 1] - win[:, 0]).mean())
    in_window = np.zeros(len(cpu), dtype=bool)
    ts, end = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float)
    for s, e in win:
        in_window |= (ts < e) & (end > s)

    names = cpu["s_name"]
    dl = cpu[names.str.startswith(DATALOADER_PREFIXES)]
    dl_u = intervals.union(dl["ts"].to_numpy(), dl["end"].to_numpy())
    cold = first_worker_batch(ev)  # the workers' start-up: warm-up, not the steady input wait
    if len(cold):
        dl_u = intervals.subtract(dl_u, intervals.union(cold["ts"].to_numpy(float), cold["end"].to_numpy(float)))
    dl_per_step = float(intervals.overlap_each(win, dl_u).mean())

    sync = cpu[is_sync(cpu) & in_window]
    sync_u = intervals.union(sync["ts"].to_numpy(), sync["end"].to_numpy())
    sync_per_step = float(intervals.overlap_each(win, sync_u).mean())
    sync_points = len(intervals.union(sync["ts"].to_numpy(), sync["end"].to_numpy()))

    loss_calls, backwards, batch, loss_op = forward_passes(cpu[in_window], win)
    ops_mask = cpu["s_cat"].isin(["cpu_op", "user_annotation", "cuda_runtime"]) & ~is_step(names)
    ops = cpu.loc[ops_mask & in_window, ["ts", "end", "dur", "thread", "s_name", "s_cat"]]  # most rows: columns used only
    self_t = without_profiler_records(ops, self_times(ops), cpu[cpu["s_cat"].eq("overhead") & in_window])
    is_op = (ops["s_cat"] != "cuda_runtime").to_numpy()
    return CpuSide(
        steps_used=int(len(windows)),
        dataloader_seen=not dl.empty,
        dataloader_in_main_process=bool(dl["s_name"].str.contains("_SingleProcessDataLoaderIter").any()),
        dataloader_us_per_step=dl_per_step,
        dataloader_pct=100 * dl_per_step / step_us if step_us else 0.0,
        sync_calls_per_step=sync_points / len(win),
        sync_us_per_step=sync_per_step,
        sync_pct=100 * sync_per_step / step_us if step_us else 0.0,
        sync_events=_named(sync),
        top_ops=_named(ops.loc[is_op, ["s_name", "dur", "s_cat"]], self_t[is_op], limit=top),
        host_random_us=host_random_self_us(ops, self_t),
        loss_calls_per_step=loss_calls,
        backward_passes_per_step=backwards,
        loss_batch=batch,
        loss_op=loss_op,
    )


def forward_passes(cpu: pd.DataFrame, win: np.ndarray) -> Tuple[float, float, int, str]:
    """Forward and backward passes per step, from the loss ops (:data:`LOSS_OPS`):
    the calls per window of ``win`` (rows: start, end in µs) of the loss op
    called most (the outermost of a nested chain, e.g. ``aten::cross_entropy_loss``
    over ``aten::nll_loss``), one per forward pass that ends in a loss; the
    backward passes, loss calls after which a backward node
    (:data:`BACKWARD_PREFIX`) starts before the next loss call (a per-sample
    loop summing N losses has one, gradient accumulation one per micro-batch);
    the median batch, the leading dimension of the loss op's first input
    (0: shapes not recorded); the loss op's name. Means over the windows."""
    loss = cpu[cpu["s_name"].isin(LOSS_OPS)]
    if loss.empty or not len(win):
        return 0.0, 0.0, 0, ""
    by_name = pd.DataFrame({"name": loss["s_name"].astype(str).to_numpy(), "dur": loss["dur"].to_numpy(dtype=float)})
    g = by_name.groupby("name").agg(n=("dur", "size"), total=("dur", "sum")).sort_values(["n", "total"])
    name = str(g.index[-1])
    rows = loss[loss["s_name"].astype(str).to_numpy() == name]
    starts = np.sort(rows["ts"].to_numpy(dtype=float))
    bw = np.sort(cpu.loc[cpu["s_name"].str.startswith(BACKWARD_PREFIX), "ts"].to_numpy(dtype=float))
    calls = backwards = 0
    for s, e in win:
        mine = starts[(starts >= s) & (starts < e)]
        nxt = np.append(mine[1:], e)
        calls += len(mine)
        backwards += int((np.searchsorted(bw, nxt, side="left") > np.searchsorted(bw, mine, side="left")).sum())
    batch = 0
    if "input_dims" in rows.columns:
        lead = [d[0][0] for d in map(input_dims, rows["input_dims"].to_numpy()) if d and d[0]]
        batch = int(np.median(lead)) if lead else 0
    return calls / len(win), backwards / len(win), batch, name
