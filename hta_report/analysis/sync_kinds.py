"""Which host-device synchronizations a fix can remove, and which the program needs.

A ``.item()`` that only logs a loss can go (accumulate on the device, read
every N steps); the read of a model's output, a value that decides Python
control flow, an op whose output size depends on the data and the
``torch.cuda.synchronize()`` a timing harness makes at a step's start or end cannot: the program needs
them, or they are the measurement, not the model. The replay's ``no
host-device sync`` edit removes only the first kind (:mod:`.edits`), and the
``sync-in-step`` finding says which kind each of its syncs is and why.

Evidence read from the trace, per synchronizing call or scalar read (a
runtime call such as ``cudaStreamSynchronize``, the blocking device-to-host
copy inside ``aten::_local_scalar_dense``, or that op itself on the CPU):
the ops holding it on its thread (``aten::is_nonzero`` for ``if tensor:``,
``aten::nonzero`` for boolean indexing...), the op before it on the thread
(GradScaler's inf check), whether the rank runs a backward pass (training:
a scalar or tensor read is a logged value or a metric; inference: it is the
output) and, for a bare synchronize, whether the thread launches anything
both before and after it in the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np
import pandas as pd

from .. import intervals
from ..model import SyncKindCount
from .cpu_side import is_sync
from .events import RankEvents
from .host_loops import loops, reading
from .host_ops import has_backward
from .launch_calls import KERNEL_LAUNCH_APIS


@dataclass(frozen=True)
class SyncKind:
    """One kind of synchronization: its ``key``, its ``label`` in the report,
    whether a fix removes it (``removable``) and ``why``, in words."""

    key: str
    label: str
    removable: bool
    why: str


#: The kinds, by key.
KINDS: Dict[str, SyncKind] = {k.key: k for k in (
    SyncKind("element", "a read per element in a Python loop (x[i].item(), x[i].cpu())", True,
             "each iteration reads one element and waits for the GPU: one read of the whole tensor "
             "(x.tolist(), or the loop's arithmetic on the device and one .item()) replaces them all"),
    SyncKind("logged", "a scalar read in a training step (.item())", True,
             "nothing in the step needs it on the host: accumulate on the device and read every N steps"),
    SyncKind("metric", "a tensor read in a training step (.cpu(), .tolist(), .numpy())", True,
             "a metric or a logged tensor: keep it on the device and read it every N steps"),
    SyncKind("explicit", "an explicit synchronize inside the step", True,
             "torch.cuda.synchronize() or Event/Stream.synchronize() with GPU work launched before and after it in "
             "the step: a timing or debugging call the step does not need"),
    SyncKind("harness", "a timing harness's synchronize at the step's start or end", False,
             "nothing is launched before it, or after it, in the step: it brackets the step to time it; removing "
             "it changes the measurement, not the model"),
    SyncKind("output", "the read of the model's output", False,
             "an inference step (no backward pass) reads its result on the host: it can be overlapped with the "
             "next step's work (a pinned buffer, non_blocking=True, an event), not removed"),
    SyncKind("splits", "the split sizes of an all-to-all", False,
             "all_to_all_single takes its input and output split sizes on the host (MoE token dispatch, sharded "
             "embeddings' lengths): the read feeds the collective that follows it; overlap it with the previous "
             "batch (a pipelined input distribution: TorchRec's TrainPipelineSparseDist) or use fixed splits"),
    SyncKind("control", "a value that decides Python control flow", False,
             "if tensor:, a stopping criterion or GradScaler's inf check: the host needs the value to go on"),
    SyncKind("shape", "an op whose output size depends on the data", False,
             "nonzero, masked_select, unique, bincount, boolean indexing: the host needs the size to allocate the "
             "output; rewrite with static shapes (torch.where, masks) instead"),
)}
#: Ops whose result the host branches on (``if tensor:``, ``torch.equal``).
CONTROL_OPS = ("aten::is_nonzero", "aten::equal", "aten::allclose")
#: Ops whose output size depends on the data: they read a count from the device (``bincount``: its
#: input's maximum, the output's length; ``repeat_interleave`` without ``output_size``: the repeats' sum).
SHAPE_OPS = ("aten::nonzero", "aten::nonzero_numpy", "aten::argwhere", "aten::masked_select", "aten::bincount",
             "aten::unique",
             "aten::_unique", "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim",
             "aten::repeat_interleave", "aten::_assert_async")
#: Scalar reads.
SCALAR_OPS = ("aten::item", "aten::_local_scalar_dense")
#: Tensor reads (a copy to the host the caller waits for).
TENSOR_READ_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu")
#: GradScaler's ops before its ``found_inf`` read (``GradScaler.step`` skips the step on inf).
AMP_CHECK_OPS = ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")
#: Host ops of an all-to-all with split sizes (``all_to_all_single``: c10d's op, its NCCL record).
ALLTOALL_OPS = ("c10d::alltoall_base_", "c10d::alltoall_", "nccl:all_to_all", "gloo:all_to_all")
#: How many ops back (by start, on the thread) the search for the ops holding a call looks.
LOOKBACK = 64


def classify(ev: RankEvents, rows: pd.DataFrame, windows: np.ndarray) -> List[str]:
    """The :data:`KINDS` key of each synchronization in ``rows`` (``thread``,
    ``ts``, ``end`` µs, ``s_name``: runtime calls or scalar-read ops of
    ``ev``), in their order; ``windows`` (``(n, 2)`` µs) are the analyzed
    steps, which decide a bare synchronize's ``step_end``. A synchronization
    inside a Python loop of per-element reads (:func:`~.host_loops.loops`
    with ``reads``) is ``element``, whatever holds it; one followed on its
    thread by an all-to-all before the next read is ``splits``
    (:func:`_feeds_alltoall`)."""
    if rows.empty:
        return []
    cpu = ev.cpu
    ops = cpu.loc[cpu["s_cat"].eq("cpu_op"), ["ts", "end", "thread", "s_name"]]
    training = has_backward(ev)
    launches = cpu.loc[cpu["s_name"].isin(KERNEL_LAUNCH_APIS + ("cudaMemcpyAsync", "hipMemcpyAsync")),
                       ["ts", "thread"]]
    # one set of arrays per thread, built once: per synchronization they are only indexed
    by_thread = {int(t): (g["ts"].to_numpy(float), g["end"].to_numpy(float), g["s_name"].astype(str).to_numpy())
                 for t, g in (ops.sort_values("ts", kind="stable").groupby("thread", sort=False))}
    launch_ts = {int(t): np.sort(g["ts"].to_numpy(float)) for t, g in launches.groupby("thread", sort=False)}
    w = np.asarray(windows, dtype=float).reshape(-1, 2)
    a2a = cpu.loc[cpu["s_name"].isin(ALLTOALL_OPS), ["ts", "thread"]]
    a2a_ts = {int(t): np.sort(g["ts"].to_numpy(float)) for t, g in a2a.groupby("thread", sort=False)}
    row_thread = rows["thread"].to_numpy()
    row_ts = {int(t): np.sort(rows["ts"].to_numpy(float)[row_thread == t]) for t in pd.unique(row_thread)}
    looped = loops(ev, w) if len(w) else None
    spans = {int(t): (g["ts"].to_numpy(float), g["end"].to_numpy(float))
             for t, g in looped[reading(looped)].groupby("thread", sort=False)} if looped is not None else {}
    out: List[str] = []
    for thr, t, own in zip(rows["thread"].to_numpy().tolist(), rows["ts"].to_numpy(float).tolist(),
                           rows["s_name"].astype(str).tolist()):
        mine = by_thread.get(int(thr))
        holding: List[str] = [own] if own.startswith("aten::") else []
        before = ""
        if mine is not None and len(mine[0]):
            ts, end, names = mine
            j = int(np.searchsorted(ts, t, side="right")) - 1
            for k in range(j, max(-1, j - LOOKBACK), -1):
                if end[k] > t and ts[k] <= t:
                    holding.append(names[k])
            outermost = min((k for k in range(j, max(-1, j - LOOKBACK), -1) if end[k] > t and ts[k] <= t),
                            default=j + 1)
            prev = [names[k] for k in range(outermost - 1, max(-1, outermost - 8), -1) if end[k] <= ts[outermost]] \
                if 0 <= outermost <= j else []
            before = prev[0] if prev else ""
        if _feeds_alltoall(t, a2a_ts.get(int(thr)), row_ts.get(int(thr))):
            out.append("splits")  # the next all-to-all on the thread, before any other read, takes its value
            continue
        span = spans.get(int(thr))
        if span is not None and bool(((span[0] <= t) & (t < span[1])).any()):
            out.append("element")  # inside a Python loop of per-element reads: the loop is what to remove
            continue
        out.append(_kind(holding, before, training, thr, t, w, launch_ts.get(int(thr))))
    return out


def _feeds_alltoall(t: float, a2a: "np.ndarray | None", reads: "np.ndarray | None") -> bool:
    """Whether an all-to-all op (``a2a``: its starts on the thread, sorted)
    follows a read at ``t`` before the thread's next read (``reads``: the
    synchronizations' starts on the thread, sorted): the read gives the
    all-to-all its split sizes."""
    if a2a is None or not len(a2a):
        return False
    k = int(np.searchsorted(a2a, t, side="right"))
    if k >= len(a2a):
        return False
    nxt = np.inf
    if reads is not None and len(reads):
        j = int(np.searchsorted(reads, t, side="right"))
        nxt = float(reads[j]) if j < len(reads) else np.inf
    return float(a2a[k]) < nxt


def _kind(holding: Sequence[str], before: str, training: bool, thread: int, t: float, w: np.ndarray,
          launch_ts: "np.ndarray | None") -> str:
    """The kind of one synchronization from the ops ``holding`` it (innermost
    first), the outermost op's predecessor ``before``, whether the rank
    trains, and for a bare call, whether its thread launches before and
    after ``t`` in its window of ``w``."""
    if any(h in CONTROL_OPS for h in holding):
        return "control"
    if any(h in SHAPE_OPS for h in holding):
        return "shape"
    if any(h in SCALAR_OPS for h in holding):
        if before in AMP_CHECK_OPS:
            return "control"
        return "logged" if training else "output"
    if any(h in TENSOR_READ_OPS for h in holding):
        return "metric" if training else "output"
    k = int(np.searchsorted(w[:, 0], t, side="right")) - 1 if len(w) else -1
    inside = k >= 0 and t < w[k, 1]
    begin, stop = (float(w[k, 0]), float(w[k, 1])) if inside else (-float("inf"), float("inf"))
    later = launch_ts is not None and bool(((launch_ts > t) & (launch_ts < stop)).any())
    earlier = launch_ts is not None and bool(((launch_ts < t) & (launch_ts >= begin)).any())
    return "explicit" if later and earlier else "harness"


def removable(kinds: Sequence[str]) -> np.ndarray:
    """Per key of ``kinds``: whether a fix removes that synchronization."""
    return np.array([KINDS[k].removable for k in kinds], dtype=bool)


def kind_counts(ev: RankEvents, windows: np.ndarray) -> List[SyncKindCount]:
    """The synchronization points of the windows ``windows`` (``(n, 2)`` µs)
    by kind (:class:`~hta_report.model.SyncKindCount`), most time first. A point is a run of
    nested synchronizing events (an ``aten::item`` holding its
    ``aten::_local_scalar_dense``, copy and ``cudaStreamSynchronize``),
    classified by its outermost event."""
    w = np.asarray(windows, dtype=float).reshape(-1, 2)
    cpu = ev.cpu
    rows = cpu[is_sync(cpu)]
    if rows.empty or not len(w):
        return []
    ts = rows["ts"].to_numpy(float)
    win = intervals.union(w[:, 0], w[:, 1])
    rows = rows[intervals_contain(win, ts)]
    if rows.empty:
        return []
    rows = rows.sort_values(["thread", "ts", "end"], ascending=[True, True, False], kind="stable")
    thr, ts, end = rows["thread"].to_numpy(), rows["ts"].to_numpy(float), rows["end"].to_numpy(float)
    outer = np.ones(len(rows), dtype=bool)
    reach = -np.inf
    for i in range(len(rows)):  # a row inside the previous point's span on its thread belongs to that point
        if i and thr[i] == thr[i - 1] and ts[i] < reach:
            outer[i] = False
            reach = max(reach, end[i])
        else:
            reach = end[i]
    points = rows[outer]
    kinds = classify(ev, points, w)
    n = len(w)
    counts: Dict[str, List[float]] = {}
    for k, a, z in zip(kinds, points["ts"].to_numpy(float), points["end"].to_numpy(float)):
        c = counts.setdefault(k, [0.0, 0.0])
        c[0] += 1
        c[1] += max(0.0, float(z - a))
    out = [SyncKindCount(kind=k, per_step=float(c[0] / n), us_per_step=float(c[1] / n), removable=KINDS[k].removable,
                         label=KINDS[k].label, why=KINDS[k].why) for k, c in counts.items()]
    return sorted(out, key=lambda x: -x.us_per_step)


def intervals_contain(u: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time of ``t`` lies inside the union ``u``."""
    if not len(u):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(u[:, 0], t, side="right") - 1
    return (k >= 0) & (t < u[np.maximum(k, 0), 1])
