"""What each collective of a rank does: gradient sync, tensor-parallel activations, experts, pipeline.

Exposed communication has a different fix for each parallelism: a data-parallel
gradient all-reduce overlaps with the backward pass (DDP buckets); a
tensor-parallel all-reduce or all-gather sits on every forward's critical path
(fewer tensor-parallel ranks, async TP); an expert-parallel all-to-all moves
tokens to their experts (overlap dispatch and combine with compute); a
pipeline's send/recv hands activations to the next stage (more micro-batches).
The replay's ``gradient reduction overlapped`` edit models only the first.

A collective is classified from the host op that launched it
(``nccl:all_reduce``, ``c10d::alltoall_base_``, ``record_param_comms``...:
NCCL runs small all-reduces and all-to-alls as ``SendRecv`` kernels, and
2.19+'s generic kernel names no operation), else from its kernel's name
(``ncclDevKernel_AllGather_RING_LL``), and from where in the step it was launched: before
the step's first backward event (the forward pass), or after it. In a rank
without a backward pass every collective is the forward's.

* ``ep``: all-to-all (``AllToAll``, ``all_to_all``; DeepEP's dispatch/combine
  kernels, ``ep::internode``/``intranode``, which NCCL does not name): a
  mixture of experts' token exchange, or sharded embeddings' (DLRM);
* ``pp``: send/recv (``SendRecv``, ``Send``, ``Recv``, ``nccl:send``...);
* ``tp``: all-reduce, all-gather or reduce-scatter in the forward pass (or at
  inference), and in the backward of a rank whose forward has them and that
  runs no DDP (``DistributedDataParallel.forward``): a tensor-parallel layer
  reduces in its backward too;
* ``fsdp``: all-gather in the backward pass, or in the forward of a rank with
  FSDP or DeepSpeed ZeRO-3 events (:data:`PARAMETER_SHARDING`: parameters
  gathered before use);
* ``dp``: all-reduce or reduce-scatter in the backward pass otherwise (DDP's
  and ZeRO's gradient reduction), broadcasts. Where the kernels name two
  process groups or more (``Process Group Name``), a backward reduction is
  ``tp`` when its group also runs collectives in the forward pass (a
  tensor-parallel group) and ``dp`` when it does not (Megatron's TP and DP
  groups side by side, with no DDP wrapper to tell them apart);
* ``other``: anything else (a barrier's all-reduce of one element counts with
  its kind).

Times are µs.
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from ..model import CollectiveKind
from .. import intervals
from .events import COMMUNICATION, COMPUTATION, RankEvents, name_search
from .host_ops import BACKWARD_MARKERS
from .transfers import collective_stalls

#: Kernel names of expert-parallel token exchange that NCCL does not name (DeepEP).
EP_KERNEL = re.compile(r"\bep::(?:internode|intranode)|deep_?ep|dispatch.*moe|moe.*(?:dispatch|combine)",
                       re.IGNORECASE)
#: The collective a kernel or host op name says, in order of precedence.
OPERATIONS = (
    ("all_to_all", re.compile(r"all_?to_?all|alltoall", re.IGNORECASE)),
    ("send_recv", re.compile(r"send_?recv|sendrecv|\bsend\b|\brecv\b|nccl:send|nccl:recv|_send|_recv", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("all_reduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
    # to or from one rank (c10d::reduce_, gather_, scatter_; NCCL's Reduce kernels), after the all- forms
    ("reduce", re.compile(r"reduce", re.IGNORECASE)),
    ("gather", re.compile(r"gather", re.IGNORECASE)),
    ("scatter", re.compile(r"scatter", re.IGNORECASE)),
)
#: The kinds, in the order the report lists them.
KINDS = ("dp", "tp", "fsdp", "ep", "pp", "other")
#: Host events of a framework that shards parameters and gathers them before use: PyTorch's FSDP
#: (``FullyShardedDataParallel.forward``, FSDP2's ``FSDP::all_gather``...) and DeepSpeed's ZeRO
#: stage 3 (its optimizer ``DeepSpeedZeroOptimizer_Stage3``, ``zero/partition_parameters.py`` frames):
#: their all-gathers in the forward are parameter gathers, not a tensor-parallel layer's.
PARAMETER_SHARDING = r"FullyShardedDataParallel|FSDP::|DeepSpeedZeroOptimizer_Stage3|zero/partition_parameters|ZeRO-?3"
#: What each kind is, in words for the report.
LABELS = {"dp": "data-parallel gradient reduction", "tp": "tensor-parallel activation collectives",
          "fsdp": "FSDP parameter gathers", "ep": "all-to-all exchanges (MoE token dispatch/combine, sharded embeddings)",
          "pp": "pipeline send/recv", "other": "other collectives"}


def operation(name: str) -> str:
    """The collective a name says (:data:`OPERATIONS`), or ``""``."""
    return next((op for op, pattern in OPERATIONS if pattern.search(name)), "")


#: Host events of a data-parallel wrapper that buckets gradients and reduces them during backward.
DDP_FORWARD = r"^DistributedDataParallel\.forward"


def data_parallel_wrapper(ev: RankEvents) -> str:
    """The data-parallel wrapper the rank's host events show: ``FSDP`` (or
    ZeRO-3: :data:`PARAMETER_SHARDING`), ``DDP`` (``DistributedDataParallel.forward``),
    else ``""`` (none: gradients reduced by hand, or no data parallelism).
    Kept in ``ev.memo`` (the kinds and the rank's summary both read it)."""
    held = ev.memo.get("collectives.wrapper")
    if held is None:
        names = ev.cpu["s_name"]
        held = "" if ev.cpu.empty else "FSDP" if bool(name_search(names, PARAMETER_SHARDING).any()) \
            else "DDP" if bool(name_search(names, DDP_FORWARD).any()) else ""
        ev.memo["collectives.wrapper"] = held
    return held


def collective_kinds(ev: RankEvents, w: np.ndarray, n_steps: int) -> List[CollectiveKind]:
    """The rank's communication kernels in the analyzed (re-based) windows
    ``w`` by kind (see the module doc): per kind, kernel time and its part
    with no compute kernel running and outside the waits of stalled kernels
    (:func:`~.transfers.collective_stalls`: the finding leaves them out, so the
    kind that names its fix does too), µs per step over ``n_steps`` steps, and
    kernels per step; most exposed time first. Empty without communication."""
    comm = kinds_of(ev)
    if comm.empty or not len(w):
        return []
    wu = intervals.union(w[:, 0], w[:, 1])
    k = np.searchsorted(wu[:, 0], comm["ts"].to_numpy(float), side="right") - 1
    comm = comm[(k >= 0) & (comm["ts"].to_numpy(float) < wu[np.maximum(k, 0), 1])]
    if comm.empty:
        return []
    kinds = comm["kind"].to_numpy()
    compute = ev.gpu_union(COMPUTATION)
    stalls = collective_stalls(ev, wu)  # a stalled kernel's wait (a late peer, a cold pass) is no kind's cost
    if len(stalls):
        compute = intervals.union(np.concatenate([compute[:, 0], stalls["ts"].to_numpy(float)]),
                                  np.concatenate([compute[:, 1], stalls["wait_end"].to_numpy(float)]))
    out: List[CollectiveKind] = []
    n = max(n_steps, 1)
    after_all = after_backward(ev, _launch_times(ev, comm))
    for kind in KINDS:
        mine = kinds == kind
        rows = comm[mine]
        if rows.empty:
            continue
        u = intervals.union(rows["ts"].to_numpy(float), rows["end"].to_numpy(float))
        after = int(after_all[mine].sum())
        out.append(CollectiveKind(kind=kind, label=LABELS[kind], calls_per_step=len(rows) / n,
                                  us_per_step=intervals.total(u) / n,
                                  exposed_us_per_step=intervals.total(intervals.subtract(u, compute)) / n,
                                  after_backward_per_step=after / n))
    return sorted(out, key=lambda c: -c.exposed_us_per_step)


def after_backward(ev: RankEvents, issued: np.ndarray) -> np.ndarray:
    """Per collective issued at host time ``issued`` (µs), whether it was
    issued after the backward pass of its step had ended (after the end of
    the step's last backward event, :data:`~.host_ops.BACKWARD_MARKERS` but
    the optimizer's; without ``ProfilerStep``, the trace's last): nothing of
    that backward can overlap it. False everywhere without backward events."""
    issued = np.asarray(issued, dtype=float)
    rows = _backward_rows(ev)
    if rows.empty or not len(issued):
        return np.zeros(len(issued), dtype=bool)
    b_ts, b_end = rows["ts"].to_numpy(float), rows["end"].to_numpy(float)
    steps = _step_starts(ev)
    if not len(steps):
        return issued >= float(np.nanmax(b_end))
    last = np.full(len(steps), -np.inf)
    k = np.searchsorted(steps, b_ts, side="right") - 1
    ok = k >= 0
    np.maximum.at(last, k[ok], b_end[ok])
    step_of = np.searchsorted(steps, issued, side="right") - 1
    out = np.zeros(len(issued), dtype=bool)
    has = (step_of >= 0)
    out[has] = np.isfinite(last[step_of[has]]) & (issued[has] >= last[step_of[has]])
    return out


def _kinds(ev: RankEvents, comm: pd.DataFrame) -> np.ndarray:
    """The kind of each row of ``comm`` (communication kernels)."""
    # the host op names the collective (NCCL runs small all-reduces and all-to-alls as SendRecv kernels, and
    # 2.19+'s generic kernel names none); the kernel's own name where no host op is found
    ops_of = np.array([operation(o) or operation(n) for o, n in zip(_launch_ops(ev, comm),
                                                                    comm["s_name"].astype(str))], dtype=object)
    ep = name_search(comm["s_name"], EP_KERNEL)
    ops_of[ep] = "all_to_all"
    return _classify(ev, ops_of, _launch_times(ev, comm), _groups(comm))


def _classify(ev: RankEvents, ops_of: np.ndarray, launched: np.ndarray, groups: Optional[np.ndarray]) -> np.ndarray:
    """The kind of each collective (see the module doc) from its operation
    (:func:`operation`), the host time it was issued at (µs) and its process
    group where two groups or more are named (else None)."""
    backward_at = _backward_starts(ev)
    in_backward = np.zeros(len(ops_of), dtype=bool)
    if len(backward_at):
        steps = _step_starts(ev)
        if len(steps):  # a collective is the backward's when a backward event started before it in its step
            step_of = np.searchsorted(steps, launched, side="right") - 1
            first_bw = np.full(len(steps), np.inf)
            k = np.searchsorted(steps, backward_at, side="right") - 1
            ok = k >= 0
            np.minimum.at(first_bw, k[ok], backward_at[ok])
            has = step_of >= 0
            in_backward[has] = launched[has] >= first_bw[step_of[has]]
        else:
            in_backward = launched >= float(backward_at.min())
    wrapper = data_parallel_wrapper(ev)
    fsdp = wrapper == "FSDP"
    forward = ~in_backward & np.isin(ops_of, ("all_reduce", "reduce_scatter", "all_gather"))
    forward_reduce = bool(forward.any())
    out = np.full(len(ops_of), "other", dtype=object)
    out[ops_of == "all_to_all"] = "ep"
    out[ops_of == "send_recv"] = "pp"
    gather = ops_of == "all_gather"
    reduce = np.isin(ops_of, ("all_reduce", "reduce_scatter"))
    out[gather & (in_backward | fsdp)] = "fsdp"
    out[gather & ~in_backward & (not fsdp)] = "tp"  # not ~fsdp: ~ of a Python bool is -1, an index
    out[reduce & ~in_backward] = "tp"
    tp_backward = forward_reduce and not wrapper
    out[reduce & in_backward] = "tp" if tp_backward else "dp"
    # a reduce, gather or scatter to one rank after the forward: gradients averaged by hand (COS568's
    # gather-average-scatter); in the forward it is no parallelism the module doc names
    out[np.isin(ops_of, ("reduce", "gather", "scatter")) & in_backward] = "dp"
    if groups is not None:  # two process groups or more: a backward reduction is TP's where its group's is
        in_forward_group = np.isin(groups, list(set(groups[forward])))
        out[reduce & in_backward & in_forward_group] = "tp"
        out[reduce & in_backward & ~in_forward_group] = "dp"
    out[ops_of == "broadcast"] = "dp"
    return out


def _groups(comm: pd.DataFrame) -> Optional[np.ndarray]:
    """Per communication kernel, its process group (``Process Group Name``,
    recorded on NCCL kernels since PyTorch 2.2) as text, where the kernels
    name two groups or more (a tensor-parallel group and a data-parallel one);
    None otherwise: one group, or none recorded, tells nothing apart."""
    if "process_group_name" not in comm.columns:
        return None
    groups = comm["process_group_name"].astype(str).to_numpy()
    named = {g for g in groups.tolist() if g not in ("", "nan", "None")}
    return groups if len(named) >= 2 else None


def _launch_ops(ev: RankEvents, comm: pd.DataFrame, lookback: int = 8) -> List[str]:
    """Per communication kernel, the names of the collective host ops
    (``nccl:*``, ``c10d::*``, ``record_param_comms``...) holding its launch
    call on its thread, joined (``""`` where none is found); the ``lookback``
    latest-starting ops before the call are searched."""
    cpu = ev.cpu
    if "correlation" not in cpu.columns or "correlation" not in comm.columns or comm.empty:
        return [""] * len(comm)
    calls = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver"))]
    corr = pd.to_numeric(calls["correlation"], errors="coerce").to_numpy(float)
    c_thr, c_ts = calls["thread"].to_numpy(), calls["ts"].to_numpy(float)
    order = np.argsort(corr)
    k_corr = pd.to_numeric(comm["correlation"], errors="coerce").to_numpy(float)
    j = np.clip(np.searchsorted(corr[order], k_corr), 0, max(len(order) - 1, 0))
    found = (len(order) > 0) & (corr[order][j] == k_corr) if len(order) else np.zeros(len(comm), dtype=bool)
    holders = cpu[cpu["s_cat"].isin(("cpu_op", "user_annotation"))
                  & name_search(cpu["s_name"], r"nccl:|c10d::|record_param_comms|gloo:|rccl")]
    by_thread = {int(t): (g["ts"].to_numpy(float), g["end"].to_numpy(float), g["s_name"].astype(str).to_numpy())
                 for t, g in holders.sort_values("ts").groupby("thread", sort=False)}
    out: List[str] = []
    for ok, i in zip(np.atleast_1d(found).tolist(), j.tolist()):
        if not ok:
            out.append("")
            continue
        thr, t = int(c_thr[order][i]), float(c_ts[order][i])
        held = by_thread.get(thr)
        if held is None:
            out.append("")
            continue
        ts, end, names = held
        k = int(np.searchsorted(ts, t, side="right"))
        out.append(" ".join(names[m] for m in range(max(0, k - lookback), k) if end[m] >= t))
    return out


def _launch_times(ev: RankEvents, comm: pd.DataFrame) -> np.ndarray:
    """Per communication kernel, the host time of its launch call (its own start where none is found)."""
    cpu = ev.cpu
    ts = comm["ts"].to_numpy(float).copy()
    if "correlation" not in cpu.columns or "correlation" not in comm.columns:
        return ts
    calls = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver"))]
    at = dict(zip(pd.to_numeric(calls["correlation"], errors="coerce").tolist(), calls["ts"].to_numpy(float).tolist()))
    for i, c in enumerate(pd.to_numeric(comm["correlation"], errors="coerce").tolist()):
        if c in at:
            ts[i] = at[c]
    return ts


def _backward_rows(ev: RankEvents) -> pd.DataFrame:
    """The rank's backward events (:data:`~.host_ops.BACKWARD_MARKERS` but the optimizer's annotations)."""
    cpu = ev.cpu
    return cpu[name_search(cpu["s_name"], "|".join(m for m in BACKWARD_MARKERS if "Optimizer" not in m))]


def _backward_starts(ev: RankEvents) -> np.ndarray:
    """Start times (µs) of the rank's backward events (:func:`_backward_rows`), sorted."""
    return np.sort(_backward_rows(ev)["ts"].to_numpy(float))


def _step_starts(ev: RankEvents) -> np.ndarray:
    """Start times (µs) of the rank's ``ProfilerStep`` annotations, sorted."""
    from .events import is_step
    cpu = ev.cpu
    return np.sort(cpu[is_step(cpu["s_name"])]["ts"].to_numpy(float))


def kinds_of(ev: RankEvents) -> pd.DataFrame:
    """The rank's communication kernels (rows of ``ev.gpu``, the whole trace)
    with a ``kind`` column (see the module doc); made once per rank (kept in
    ``ev.memo``: the analysis and the replay's overlap edit both read it)."""
    held = ev.memo.get("collectives.kinds")
    if held is None:
        gpu = ev.gpu
        if gpu.empty:
            held = gpu.assign(kind=pd.Series([], dtype=object))
        else:
            names = gpu["s_name"].astype(str)
            comm = gpu[gpu["kernel_type"].eq(COMMUNICATION).to_numpy() | names.str.contains(EP_KERNEL).to_numpy()]
            held = comm.assign(kind=_kinds(ev, comm) if len(comm) else pd.Series([], dtype=object))
        ev.memo["collectives.kinds"] = held
    return held


def host_collectives(ev: RankEvents, hw: np.ndarray, n_steps: int) -> Tuple[float, List[CollectiveKind]]:
    """A rank without GPU activity: the time its step thread waits for its
    collectives, and that time by kind.

    A CPU backend (gloo, MPI) runs a collective in its own threads; the step
    thread issues it (``c10d::allreduce_``...) and then waits in
    ``Work.wait()``, which the profiler does not record. So the wait is the
    time covered by collective ops on any thread (``gloo:all_reduce`` on
    gloo's worker, the call itself: :data:`~.transfers.CPU_COLLECTIVE_PREFIXES`)
    while the step thread runs no other op: communication that no compute of
    the step overlaps (a DDP all-reduce running in gloo's thread during the
    backward pass is overlapped; a loop of blocking all-reduces after it is
    not). Each piece of it goes to the kind of the latest collective the step
    thread issued before it (:func:`_classify` on the issuing ops' names and
    start times; ``other`` before the first).

    Args:
        ev: the rank's events.
        hw: the host windows (``(n, 2)`` µs) the step's host time is read in.
        n_steps: analyzed steps, the divisor of the per-step figures.

    Returns:
        (exposed µs per step, kinds most exposed first: ``us_per_step`` the
        collective ops' time in the kind's stretch, ``exposed_us_per_step`` its
        waited part, ``calls_per_step`` the issuing ops); (0.0, []) without
        collective ops or windows, or where the step thread records no op
        of its own in the windows (then nothing tells its work from a wait).
    """
    from .cpu_side import loop_thread
    from .transfers import CPU_COLLECTIVE_PREFIXES

    cpu = ev.cpu
    if not len(hw) or cpu.empty:
        return 0.0, []
    names = cpu["s_name"].astype(str)
    is_coll = names.str.startswith(CPU_COLLECTIVE_PREFIXES).to_numpy(dtype=bool)
    coll = cpu[is_coll]
    if coll.empty:
        return 0.0, []
    hu = intervals.union(hw[:, 0], hw[:, 1])
    coll_u = intervals.intersect(intervals.union(coll["ts"].to_numpy(float), coll["end"].to_numpy(float)), hu)
    thread = loop_thread(ev)
    if thread is None:
        ops = cpu[cpu["s_cat"].eq("cpu_op").to_numpy(dtype=bool)]
        thread = int(ops["thread"].value_counts().index[0]) if len(ops) else -1
    on_thread = cpu["thread"].eq(thread).to_numpy(dtype=bool)
    work = cpu[on_thread & cpu["s_cat"].eq("cpu_op").to_numpy(dtype=bool) & ~is_coll]
    busy = intervals.union(work["ts"].to_numpy(float), work["end"].to_numpy(float))
    if not intervals.total(intervals.intersect(busy, hu)) > 0:
        # the step thread records no op in the windows (HTA's cpu_only sample: gloo's threads only):
        # whether it computed or waited meanwhile, the trace does not say
        return 0.0, []
    exposed = intervals.subtract(coll_u, busy)
    n = max(n_steps, 1)
    calls = cpu[on_thread & is_coll & cpu["s_cat"].eq("cpu_op").to_numpy(dtype=bool)]
    ops_of = np.array([operation(x) for x in calls["s_name"].astype(str)], dtype=object)
    keep = ops_of != ""
    calls, ops_of = calls[keep], ops_of[keep]
    if calls.empty:
        return intervals.total(exposed) / n, []
    order = np.argsort(calls["ts"].to_numpy(float), kind="stable")
    calls, ops_of = calls.iloc[order], ops_of[order]
    starts = calls["ts"].to_numpy(float)
    kinds = _classify(ev, ops_of, starts, None)
    k = np.searchsorted(hu[:, 0], starts, side="right") - 1
    inside = (k >= 0) & (starts < hu[np.maximum(k, 0), 1])  # issued inside the windows: counted as calls
    # each call's stretch runs to the next call (a window's first wait may be the previous step's last call)
    stretch = np.column_stack([starts, np.append(starts[1:], np.inf)])
    after_all = after_backward(ev, starts)
    out: List[CollectiveKind] = []
    for kind in KINDS:
        mine = kinds == kind
        segs = stretch[mine]
        if kind == "other":  # before the trace's first call: issued before the profiler started
            segs = np.concatenate([np.array([[-np.inf, starts[0]]]), segs])
        if not len(segs):
            continue
        u = intervals.union(segs[:, 0], segs[:, 1])
        waited = intervals.total(intervals.intersect(exposed, u)) / n
        calls_in = int((mine & inside).sum())
        if not calls_in and waited <= 0:
            continue
        after = int((mine & inside & after_all).sum())
        out.append(CollectiveKind(kind=kind, label=LABELS[kind], calls_per_step=calls_in / n,
                                  us_per_step=intervals.total(intervals.intersect(coll_u, u)) / n,
                                  exposed_us_per_step=waited, after_backward_per_step=after / n))
    return intervals.total(exposed) / n, sorted(out, key=lambda c: -c.exposed_us_per_step)
