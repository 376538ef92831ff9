"""Code patterns seen in the host ops: a tensor made on the CPU then copied to
the GPU (C23), a convolution with a bias feeding BatchNorm (C25), and DDP
gradient accumulation that all-reduces in every micro-step (C28).

The first two follow PyTorch's profiler pattern matcher
(``torch/profiler/_pattern_matcher.py``: ``ExtraCUDACopyPattern``; and the
tuning guide's "disable bias for convolutions directly followed by a batch
norm"), on the rank's host ops: "the previous op" and "the next op" of an op
are the ops of the same thread that end just before it starts, or start
first after it ends.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pandas as pd

from ..model import CodePatterns
from .. import intervals
from .events import COMMUNICATION, RankEvents, name_strings
from .host_loops import loops, reading
from .host_ops import active_dropout, bn_training_kernels, has_backward, slow_cpu_ops, step_thread_ops
from .kernels import _has_shapes, input_dims
from .regions import in_windows, per_step

#: Ops that fill a CPU tensor (``ExtraCUDACopyPattern.init_ops``).
INIT_OPS = ("aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_")
CONV_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d")
BN_OPS = ("aten::batch_norm",)
#: The DDP forward annotation (``DistributedDataParallel.forward``, one per micro-step).
DDP_FORWARD = "DistributedDataParallel.forward"
#: Host ops of an all-reduce, one family counted (the first one present).
ALLREDUCE_FAMILIES = (("c10d::allreduce_",), ("nccl:all_reduce", "gloo:all_reduce"), ("record_param_comms",))
EXAMPLES = 3


#: The columns of the host ops that the patterns read.
_OP_COLUMNS = ("ts", "end", "s_name", "thread", "input_dims", "input_type")


def _ops(ev: RankEvents, needs) -> pd.DataFrame:
    """The rank's ``cpu_op`` rows in start order, with :data:`_OP_COLUMNS`
    only; empty when none of them is named one of ``needs`` (the pattern
    then has nothing to look at, and the sorted copy is not made)."""
    cpu = ev.cpu
    is_op = cpu["s_cat"].eq("cpu_op")
    columns = [c for c in _OP_COLUMNS if c in cpu.columns]
    if not (is_op & cpu["s_name"].isin(needs)).any():
        return cpu.loc[cpu.index[:0], columns]
    return cpu.loc[is_op, columns].sort_values("ts", kind="stable")


def cpu_tensor_copies(ev: RankEvents, w: np.ndarray) -> Tuple[int, float, List[str]]:
    """``aten::to`` ops in the windows ``w`` that copy a tensor to the GPU
    (an HtoD memcpy launched inside them) right after it was filled on the
    CPU (the op before them on their thread is, or ends in, one of
    :data:`INIT_OPS`); copies between dtypes (``aten::copy_`` inputs of
    different ``Input type``, when recorded) do not count.

    Returns:
        (count, GPU time µs of their HtoD copies (a union), examples
        ``"aten::zero_ -> aten::to (HtoD 4.0 MB)"``). The host time of the
        ``aten::to`` ops is not counted: a pageable copy waits there for the
        GPU's queued work (and the first ``.to("cuda")`` for CUDA's
        initialization: 29.9 s in the shared alexnet trace), which making the
        tensor on the GPU would not save.
    """
    ops = _ops(ev, ("aten::to",))
    to = in_windows(ops[ops["s_name"].eq("aten::to")], w)
    if to.empty or not ev.has_gpu:
        return 0, 0.0, []
    gpu = ev.gpu
    htod = gpu[gpu["s_name"].str.startswith("Memcpy HtoD", na=False)]
    runtime = ev.cpu[ev.cpu["s_cat"].eq("cuda_runtime") & ev.cpu["correlation"].isin(htod["correlation"])]
    runtime = runtime.sort_values("ts", kind="stable")
    copy_ops = ops[ops["s_name"].eq("aten::copy_")]
    # each HtoD copy by correlation: (ts, end, bytes), bytes 0 when not recorded
    nbytes = pd.to_numeric(htod["bytes"], errors="coerce").fillna(0).to_numpy(float) if "bytes" in htod.columns \
        else np.zeros(len(htod))
    by_corr: dict = {}
    for c, t0, t1, b in zip(htod["correlation"].to_numpy(), htod["ts"].to_numpy(float), htod["end"].to_numpy(float),
                            nbytes):
        by_corr.setdefault(c, []).append((t0, t1, b))
    count = 0
    spans: List[Tuple[float, float]] = []
    examples: List[str] = []
    for thread, t_ops in ops.groupby("thread", sort=False):
        t_to = to[to["thread"].eq(thread)]
        if t_to.empty:
            continue
        # the thread's ops in start order (``_ops`` sorts by ts), and by (end, ts) for "the op ending last before"
        ts, end, names = t_ops["ts"].to_numpy(float), t_ops["end"].to_numpy(float), name_strings(t_ops["s_name"])
        by_end = np.lexsort((ts, end))
        ends = end[by_end]
        t_rt = runtime[runtime["thread"].eq(thread)]
        rt_ts, rt_corr = t_rt["ts"].to_numpy(float), t_rt["correlation"].to_numpy()
        t_copy = copy_ops[copy_ops["thread"].eq(thread)]
        copy_ts = t_copy["ts"].to_numpy(float)
        copy_types = t_copy["input_type"].to_numpy() if "input_type" in t_copy.columns else None
        for start, stop in zip(t_to["ts"].to_numpy(float), t_to["end"].to_numpy(float)):
            lo, hi = np.searchsorted(rt_ts, (start, stop), side="left")
            if lo == hi:  # no HtoD copy launched inside
                continue
            k = int(np.searchsorted(ends, start, side="right")) - 1
            if k < 0:  # no op ended before it
                continue
            last_end = ends[k]
            p = by_end[np.searchsorted(ends, last_end, side="left")]  # the outermost op ending last before the copy
            init = _last_child_init(ts, end, names, p)
            if init is None:
                continue
            a, b = int(np.searchsorted(ts, last_end, side="right")), int(np.searchsorted(ts, start, side="left"))
            if a < b and (end[a:b] < stop).any():  # other ops between (not ancestors)
                continue
            if copy_types is not None:
                c0, c1 = np.searchsorted(copy_ts, (start, stop), side="left")
                if not _same_dtype(copy_types[c0:c1]):
                    continue
            copies = [row for c in rt_corr[lo:hi] for row in by_corr.get(c, ())]
            count += 1
            spans += [(t0, t1) for t0, t1, _ in copies]
            if len(examples) < EXAMPLES:
                total = int(sum(b for _, _, b in copies if b > 0))
                size = f"HtoD {total / 1e6:,.1f} MB" if total else "HtoD"
                examples.append(f"{init} -> aten::to ({size})")
    if not count:
        return 0, 0.0, []
    s = np.array(spans, dtype=float).reshape(-1, 2)
    return count, intervals.total(intervals.union(s[:, 0], s[:, 1])), examples


def _last_child_init(ts: np.ndarray, end: np.ndarray, names: np.ndarray, p: int):
    """The fill op (:data:`INIT_OPS`) on the chain of last children of op
    ``p`` (``p`` itself included), as ``ExtraCUDACopyPattern`` descends it,
    or None. The chain is the ops of ``p``'s subtree that hold its latest-
    starting op. ``ts`` is sorted (the ops in start order), so the subtree
    lies in the ops starting from ``ts[p]`` to ``end[p]``."""
    lo, hi = int(np.searchsorted(ts, ts[p], side="left")), int(np.searchsorted(ts, end[p], side="right"))
    inside = lo + np.flatnonzero(end[lo:hi] <= end[p])
    latest = inside[np.argmax(ts[inside])]
    chain = inside[(ts[inside] <= ts[latest]) & (end[inside] >= end[latest])]
    return next((names[i] for i in chain if names[i] in INIT_OPS), None)


#: Input rank of a batched convolution's input by op family (``[N, C, L]``, ``[N, C, H, W]``, ``[N, C, D, H, W]``):
#: one dimension fewer is an unbatched input (batch size 1).
_CONV_INPUT_RANK = (("3d", 5), ("", 4))


def slow_inputs(rows: pd.DataFrame) -> Tuple[List[str], int]:
    """What the reference-kernel ops ``rows`` (:func:`~.host_ops.slow_cpu_ops`)
    ran on: the distinct recorded ``Input type`` of their first input
    (``float``, ``double``...; empty where none was recorded) and the median
    batch size of that input (its first dimension; 1 for an unbatched input,
    one dimension short of :data:`_CONV_INPUT_RANK`; 0 where ``Input Dims``
    were not recorded)."""
    dtypes: List[str] = []
    if "input_type" in rows.columns:
        for value in rows["input_type"].to_numpy():
            first = _types(value)[:1]
            if first and first[0] and first[0] not in dtypes:
                dtypes.append(first[0])
    batches: List[int] = []
    if "input_dims" in rows.columns:
        for name, value in zip(name_strings(rows["s_name"]), rows["input_dims"].to_numpy()):
            dims = input_dims(value)
            if not dims or not dims[0]:
                continue
            full = next(r for key, r in _CONV_INPUT_RANK if key in name)
            shape = dims[0]
            batches.append(int(shape[0]) if len(shape) >= full else 1)
    return sorted(dtypes), int(np.median(batches)) if batches else 0


def _same_dtype(input_types: np.ndarray) -> bool:
    """False when an ``aten::copy_`` (its recorded ``Input type`` values
    given) copied between two recorded types that differ."""
    for value in input_types:
        types = _types(value)
        if len(types) >= 2 and types[0] and types[1] and types[0] != types[1]:
            return False
    return True


def _types(value) -> List[str]:
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value) if value.startswith("[") else []
        except ValueError:
            return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def conv_bias_before_bn(ev: RankEvents, w: np.ndarray) -> Tuple[int, int, bool, List[str]]:
    """Convolutions (:data:`CONV_OPS`) in ``w`` given a bias (their third
    ``Input Dims`` entry is not empty) whose next op on the same thread (ops
    on 0-dim tensors skipped, :func:`_next_op`) is ``aten::batch_norm``:
    BatchNorm subtracts the mean, so the bias does nothing.

    Returns:
        (convolutions, those with a bias before BatchNorm, whether input
        shapes were recorded, examples ``"aten::conv2d input [16, 3, 32, 32]
        weight [8, 3, 3, 3] bias [8] -> aten::batch_norm"``).
    """
    ops = _ops(ev, CONV_OPS)
    convs = in_windows(ops[ops["s_name"].isin(CONV_OPS)], w)
    if "input_dims" not in ops.columns or convs.empty:
        return len(convs), 0, False, []
    recorded = any(map(_has_shapes, convs["input_dims"].to_numpy()))
    if not recorded:
        return len(convs), 0, False, []
    count = 0
    examples: List[str] = []
    for thread, t_ops in ops.groupby("thread", sort=False):
        t_conv = convs[convs["thread"].eq(thread)]
        if t_conv.empty:
            continue
        ts, names = t_ops["ts"].to_numpy(float), name_strings(t_ops["s_name"])
        all_dims = t_ops["input_dims"].to_numpy()
        for stop, name, dims_text in zip(t_conv["end"].to_numpy(float), name_strings(t_conv["s_name"]),
                                         t_conv["input_dims"].to_numpy()):
            dims = input_dims(dims_text)
            if len(dims) < 3 or not dims[2]:
                continue
            nxt = _next_op(np.flatnonzero(ts >= stop), all_dims)
            if nxt is None or names[nxt] not in BN_OPS:
                continue
            count += 1
            if len(examples) < EXAMPLES:
                examples.append(f"{name} input {dims[0]} weight {dims[1]} bias {dims[2]} -> {names[nxt]}")
    return len(convs), count, True, examples


def _next_op(after: np.ndarray, all_dims: np.ndarray):
    """The first of the ops ``after`` (indices, in start order) that is not
    an op on 0-dim tensors only, such as BatchNorm's ``num_batches_tracked
    += 1`` (``aten::add_`` with ``Input Dims`` ``[[], [], []]``) that runs
    between a convolution and its ``aten::batch_norm``; None when there is none."""
    for i in after[:4]:
        dims = input_dims(all_dims[i])
        if dims and not any(dims):
            continue
        return int(i)
    return None


def accumulation_sync(ev: RankEvents, hw: np.ndarray) -> Tuple[float, float, float]:
    """DDP gradient accumulation in the host windows ``hw`` (``ProfilerStep``s,
    one optimizer step each): each ``DistributedDataParallel.forward`` starts a
    micro-step (up to the next one or the step's end); a micro-step that holds
    an all-reduce (:data:`ALLREDUCE_FAMILIES`) synchronized gradients. Under
    ``no_sync()`` only the last micro-step of a step does.

    Returns:
        per step: micro-steps, micro-steps that all-reduced, and the
        all-reduce time of every synchronized micro-step but the last (µs:
        communication kernels starting in it on GPU ranks, else the host
        time of the all-reduce ops): the time ``no_sync()`` would save.
    """
    cpu = ev.cpu
    fwd = cpu[cpu["s_name"].eq(DDP_FORWARD)]
    if fwd.empty or len(hw) == 0:
        return 0.0, 0.0, 0.0
    reduce = cpu.iloc[0:0]
    for family in ALLREDUCE_FAMILIES:
        reduce = cpu[cpu["s_name"].isin(family)]
        if len(reduce):
            break
    comm = ev.gpu[ev.gpu["kernel_type"].eq(COMMUNICATION)] if ev.has_gpu else None
    starts = np.sort(fwd["ts"].to_numpy(float))
    r_ts = reduce["ts"].to_numpy(float)
    micro = synced = 0
    extra = 0.0
    for s, e in hw:
        f = starts[(starts >= s) & (starts < e)]
        if not len(f):
            continue
        bounds = list(f) + [e]
        windows = [(bounds[i], bounds[i + 1]) for i in range(len(f))]
        micro += len(windows)
        with_sync = [(a, b) for a, b in windows if ((r_ts >= a) & (r_ts < b)).any()]
        synced += len(with_sync)
        for a, b in with_sync[:-1]:
            if comm is not None and len(comm):
                extra += float(comm[(comm["ts"] >= a) & (comm["ts"] < b)]["dur"].sum())
            else:
                sel = reduce[(reduce["ts"] >= a) & (reduce["ts"] < b)]
                extra += intervals.total(intervals.union(sel["ts"].to_numpy(float), sel["end"].to_numpy(float)))
    n = len(hw)
    return per_step(micro, n), per_step(synced, n), per_step(extra, n)


def code_patterns(ev: RankEvents, w: np.ndarray, hw: np.ndarray) -> CodePatterns:
    """C23, C25 and C28's figures of one rank over the analyzed windows
    (``w`` device re-based, ``hw`` on the host), per analyzed step."""
    n = max(len(w), 1)
    out = CodePatterns()
    count, us, examples = cpu_tensor_copies(ev, w)
    out.cpu_tensor_copies_per_step, out.cpu_tensor_copy_us_per_step = per_step(count, n), per_step(us, n)
    out.cpu_tensor_examples = examples
    convs, count, out.shapes_recorded, out.conv_bias_examples = conv_bias_before_bn(ev, w)
    out.conv_ops_per_step, out.conv_bias_bn_per_step = per_step(convs, n), per_step(count, n)
    out.micro_steps_per_step, out.synced_micro_steps_per_step, out.extra_sync_us_per_step = accumulation_sync(ev, hw)
    host_patterns(ev, hw, out)
    return out


#: Ops that run only on the CPU: oneDNN's and the reference kernels.
CPU_ONLY_OPS = r"^aten::(?:mkldnn_|_slow_conv|slow_conv|thnn_|_nnpack)"
#: Ops that run only on a GPU: cuDNN's and MIOpen's.
GPU_ONLY_OPS = r"^aten::(?:cudnn_|miopen_|_cudnn|_miopen)"


def host_patterns(ev: RankEvents, hw: np.ndarray, out: CodePatterns) -> None:
    """C30 to C33's figures over the analyzed host windows ``hw`` (``(n, 2)``
    µs), per window, into ``out``: the Python loops over elements
    (:func:`~.host_loops.loops`), active dropout, BatchNorm's training-mode
    GPU kernels and whether the rank runs a backward pass, the CPU's reference kernels, which device the ops ran on
    (:data:`CPU_ONLY_OPS`, :data:`GPU_ONLY_OPS`) and the host time in ops."""
    n = max(len(hw), 1)
    if not len(hw):
        return
    found = loops(ev, hw)
    if len(found):
        out.loops_per_step = per_step(len(found), n)
        out.loop_us_per_step = per_step(float((found["end"] - found["ts"]).sum()), n)
        out.loop_iterations = int(found["iterations"].median())
        read = reading(found)  # the loops that read per element: sync-in-step's
        out.loop_reads_per_step = per_step(float(found["reads"][read].sum()), n)
        out.read_loop_us_per_step = per_step(float((found["end"] - found["ts"])[read].sum()), n)
        out.loop_arithmetic_us_per_step = per_step(float(found["arithmetic_us"].sum()), n)
    out.backward = has_backward(ev)
    drop = active_dropout(ev, hw)
    outer = drop[~drop["s_name"].isin(("aten::bernoulli_", "aten::native_dropout"))] if len(drop) else drop
    counted = outer if len(outer) else drop
    out.dropout_per_step = per_step(len(counted), n)
    out.dropout_us_per_step = per_step(intervals.total(intervals.union(drop["ts"], drop["end"])), n) if len(drop) \
        else 0.0
    bn = bn_training_kernels(ev, hw)
    if len(bn):
        out.bn_training_per_step = per_step(len(bn), n)
        out.bn_training_us_per_step = per_step(float((bn["end"] - bn["ts"]).sum()), n)
    names = pd.Series(ev.cpu["s_name"].unique().astype(str))
    out.cpu_kernel_ops = sorted(names[names.str.contains(CPU_ONLY_OPS)].tolist())[:8]
    out.gpu_kernel_ops = int(names.str.contains(GPU_ONLY_OPS).sum())
    ops = step_thread_ops(ev, hw)
    if len(ops):
        outer = ops[ops["parent"].to_numpy() < 0]
        out.compute_us_per_step = per_step(intervals.total(intervals.union(outer["ts"], outer["end"])), n)
    slow = slow_cpu_ops(ev, hw)
    if len(slow):
        out.slow_cpu_us_per_step = per_step(intervals.total(intervals.union(slow["ts"], slow["end"])), n)
        out.slow_cpu_ops = sorted({str(x) for x in slow["s_name"]})
        out.slow_cpu_dtypes, out.slow_cpu_batch = slow_inputs(slow)
