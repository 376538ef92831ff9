"""The host thread's ops as a tree, and what an op costs beyond its arithmetic.

Shared by the edits of the replay that change host work on a rank
(:mod:`.edits`: a vectorized loop, batched passes, a fused optimizer step on
the CPU) and by the rules that name such work. Times are µs.

An op recorded by the profiler costs a fixed amount per call (Python's
argument parsing, the dispatcher, the profiler's own record) plus its work.
The fixed part is read off the trace itself: the median self time of the
ops that hold other ops (wrappers such as ``aten::linear``, which do no
arithmetic of their own: 0.5-3 µs a call on the 2-core machine this project
measures on, under torch 2.13's profiler); the Python between two ops is the
host time no op covers. An op's work has a fixed part per call of its own
(a oneDNN convolution sets up its primitive) and a part per sample:
:func:`batched_us`.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np
import pandas as pd

from .. import intervals
from .cpu_side import _parents, loop_thread, self_times
from .events import RankEvents
from .regions import containing_index

#: Ops that do no arithmetic: views, shape changes and allocations (a CUDA graph's replay skips
#: their dispatch: :func:`~.edits.capturable`).
METADATA_OPS = ("aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::expand", "aten::permute",
                "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::_reshape_alias",
                "aten::reshape", "aten::alias", "aten::detach", "aten::resolve_conj", "aten::resolve_neg",
                "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::lift_fresh", "aten::_unsafe_view")
#: The fixed cost of a recorded call (µs) where the trace has too few wrapper ops to read it
#: from: the median wrapper self time of the fix bench's CPU recordings (0.5-2.9 µs; torch 2.13,
#: 2-core machine).
DEFAULT_CALL_US = 1.0
#: CPU reference kernels (no oneDNN/MKLDNN path: float64, unusual strides or dilation).
SLOW_CPU_OPS = ("aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward", "aten::slow_conv3d_forward",
                "aten::slow_conv3d_backward", "aten::slow_conv_dilated2d", "aten::slow_conv_dilated3d",
                "aten::slow_conv_transpose2d", "aten::slow_conv_transpose3d", "aten::thnn_conv2d")
#: Dropout ops of a model left in training mode (active dropout draws a mask: ``bernoulli_``).
DROPOUT_OPS = ("aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::alpha_dropout",
               "aten::feature_alpha_dropout", "aten::bernoulli_")
#: Events of a training step: autograd's nodes and their engine frame, aten's backward kernels
#: (``aten::convolution_backward``, ``aten::threshold_backward``...), and the optimizer's
#: annotations (``Optimizer.step#AdamW.step``, ``Optimizer.zero_grad#...``).
BACKWARD_MARKERS = ("autograd::engine::evaluate_function", "Backward0", "Backward1", "BackwardBackward",
                    "_backward$", r"^Optimizer\.(?:step|zero_grad)#")


def step_thread_ops(ev: RankEvents, w: np.ndarray, thread: Optional[int] = None) -> pd.DataFrame:
    """The ``cpu_op`` rows of one host thread (default: the thread running the
    step loop, :func:`~.cpu_side.loop_thread`, else the one with the most ops) that start in
    the windows ``w`` (``(n, 2)`` µs), sorted by start (longest first on ties),
    with their ``self_us`` time (µs), ``parent`` (position in this frame of the
    innermost op holding it, -1 for an outermost op), ``leaf`` (holds no op)
    and ``accumulate`` (inside autograd's ``AccumulateGrad``, or the engine's
    sum of one gradient's contributions, :func:`_engine_sums`).
    Kept in ``ev.memo`` per windows and thread."""
    key = f"host_ops.thread.{thread}.{np.asarray(w, dtype=float).tobytes().hex()}"
    held = ev.memo.get(key)
    if held is not None:
        return held
    cpu = ev.cpu
    if thread is None:
        ops_all = cpu[cpu["s_cat"].eq("cpu_op")]
        found = loop_thread(ev)
        if found is not None:
            thread = found
        elif len(ops_all):
            thread = int(ops_all["thread"].value_counts().index[0])
        else:
            thread = -1
    ops = cpu.loc[cpu["s_cat"].eq("cpu_op") & cpu["thread"].eq(thread), ["ts", "end", "dur", "thread", "s_name"]]
    ts = ops["ts"].to_numpy(float)
    inside = np.zeros(len(ops), dtype=bool)
    for a, z in np.asarray(w, dtype=float).reshape(-1, 2):
        inside |= (ts >= a) & (ts < z)
    ops = ops[inside]
    order = np.lexsort((-ops["end"].to_numpy(float), ops["ts"].to_numpy(float)))
    ops = ops.iloc[order]
    parent = _parents(ops["ts"].to_numpy(float), ops["end"].to_numpy(float), ops["thread"].to_numpy()) \
        if len(ops) else np.zeros(0, dtype=np.int64)
    if parent is None:  # a NaN time: no tree, every op its own
        parent = np.full(len(ops), -1, dtype=np.int64)
    has_child = np.zeros(len(ops), dtype=bool)
    has_child[parent[parent >= 0]] = True
    out = ops.assign(**{"self_us": self_times(ops)}, parent=parent, leaf=~has_child)
    out["accumulate"] = _under(out, ACCUMULATE) | _engine_sums(out)
    ev.memo[key] = out
    return out


def call_overhead_us(ops: pd.DataFrame) -> float:
    """The fixed cost of one recorded call (µs): the median self time of the
    ops of ``ops`` (a :func:`step_thread_ops` frame) that hold other ops (a
    wrapper such as ``aten::linear`` over ``aten::addmm`` does no arithmetic
    of its own: its self time is the dispatch and the profiler's record),
    else :data:`DEFAULT_CALL_US`."""
    wrappers = ops[~ops["leaf"].to_numpy()]
    return float(np.median(wrappers["self_us"].to_numpy(float))) if len(wrappers) >= 5 else DEFAULT_CALL_US


def arithmetic_us(ops: pd.DataFrame, overhead_us: float) -> float:
    """An estimate of the work in ``ops`` (µs; rows of a
    :func:`step_thread_ops` frame): every op's self time less ``overhead_us``
    (the fixed cost of a call, :func:`call_overhead_us`), at least 0. What a
    batched or vectorized version of the same ops still spends, before the
    per-call costs inside the ops themselves (:func:`batched_us`)."""
    return float(np.clip(ops["self_us"].to_numpy(float) - overhead_us, 0.0, None).sum())


#: The fixed cost per call inside an op, beyond dispatch, by op family, on the CPU: what a call
#: costs however few samples it gets, which batching pays once per batched call instead of once
#: per sample: ``(pattern, µs, share of the call's work)``, the larger of the two. Read off the fix
#: bench's pairs (docs/FIXBENCH.md; torch 2.13, oneDNN): a 2-sample oneDNN convolution forward
#: cost 74 µs a call and a 16-sample one 217 µs (55 µs fixed, 10 µs a sample), its backward 144
#: and 405 µs (100 µs fixed). A 1-sample convolution takes the reference path
#: (``_slow_conv2d_*``), a different algorithm: batched, the samples run on oneDNN at about half
#: the reference path's time per sample (3x32x32 images through 32 and 64 channels: forward 69 µs
#: a sample on the reference path, 34 µs batched by 16; backward 112 and 64 µs), so the share of
#: its work a batch saves is 0.5 forward, 0.45 backward. A GEMM of a few rows reads all its
#: weights each call, whatever its rows (a one-row 512x512 GEMM, 1 MB of weights: most of its
#: time), 0.95 of its work.
CALL_FIXED = (
    (re.compile(r"_slow_conv2d_backward|slow_conv3d_backward"), 0.0, 0.45),
    (re.compile(r"_slow_conv2d_forward|slow_conv3d_forward|thnn_conv2d"), 0.0, 0.5),
    (re.compile(r"convolution_backward|conv_depthwise2d_backward"), 100.0, 0.0),
    (re.compile(r"mkldnn_convolution|slow_conv_dilated|slow_conv_transpose|conv_depthwise2d$"), 55.0, 0.0),
    (re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|addmv|mv|_addmm_activation)$"), 8.0, 0.95),
    # autograd's engine frames and nodes: the bookkeeping of each node, whatever its tensors
    (re.compile(r"^autograd::engine::|Backward\d*$"), 0.0, 1.0),
)
#: The fixed cost per call inside other ops (µs): elementwise ops, reductions, pooling. Up to this
#: a call's work is its set-up (a scalar add of two losses took 11 µs a call); past it the work
#: grows with the samples (a 2-sample max-pool took 70 µs a call, and 8 times the samples kept
#: 0.93 of the time).
OTHER_CALL_FIXED_US = 8.0


def batched_us(ops: pd.DataFrame, overhead_us: float, calls_kept: float, fixed_scale: float = 1.0) -> float:
    """What ``ops`` (rows of a :func:`step_thread_ops` frame: N small passes)
    cost when batched into passes that make ``calls_kept`` of their calls
    (a share: 1/N for one pass; the dispatch is left out, the caller counts
    it): each op's work (self time less ``overhead_us``) splits into a fixed
    part per call (:data:`CALL_FIXED` by op family, times ``fixed_scale``,
    at most the work), paid ``calls_kept`` as often, and a per-sample part
    that stays."""
    if ops.empty:
        return 0.0
    work = np.clip(ops["self_us"].to_numpy(float) - overhead_us, 0.0, None)
    names = ops["s_name"].astype(str).to_numpy()
    fixed = np.full(len(ops), OTHER_CALL_FIXED_US)
    done = np.zeros(len(ops), dtype=bool)
    for pattern, us, share in CALL_FIXED:  # the first family an op's name matches
        hit = np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names)) & ~done
        fixed[hit] = np.maximum(us, share * work[hit])
        done |= hit
    fixed = np.minimum(fixed * fixed_scale, work)
    acc = ops["accumulate"].to_numpy(dtype=bool)
    fixed[acc] = work[acc]  # one gradient per parameter once batched
    return float((work - fixed).sum() + calls_kept * fixed.sum())


#: The autograd node that adds a backward pass's gradient into a parameter's ``.grad``: N small
#: passes add N times, one batched pass once (its ops are all fixed cost, :func:`batched_us`).
ACCUMULATE = "AccumulateGrad"


#: The frame autograd's engine records around each node it runs (``autograd::engine::evaluate_function:
#: AddmmBackward0``): the node's own ops are under the node's range inside it; an ``aten::add_``
#: directly in the frame is the engine summing a gradient that arrives from several uses of one
#: tensor (its input buffer).
ENGINE_FRAME = "autograd::engine::evaluate_function:"


def _engine_sums(ops: pd.DataFrame) -> np.ndarray:
    """Per row of ``ops`` (a whole :func:`step_thread_ops` frame): an
    ``aten::add_`` whose innermost holder is an :data:`ENGINE_FRAME`: the
    engine adding up one gradient's contributions. A model called once per
    sample with the losses summed has 64 uses of each weight in one backward
    and 63 such adds per weight (930 a step on a 2-layer MLP); one batched pass
    has one use and none: they are all fixed cost, as ``AccumulateGrad``'s."""
    names = ops["s_name"].astype(str).to_numpy()
    parent = ops["parent"].to_numpy()
    out = np.zeros(len(ops), dtype=bool)
    adds = np.flatnonzero((names == "aten::add_") & (parent >= 0))
    out[adds] = [names[p].startswith(ENGINE_FRAME) for p in parent[adds].tolist()]
    return out


def _under(ops: pd.DataFrame, name_part: str) -> np.ndarray:
    """Per row of ``ops`` (a whole :func:`step_thread_ops` frame, whose
    ``parent`` positions are its own): whether it or an op holding it has
    ``name_part`` in its name."""
    names = ops["s_name"].astype(str).to_numpy()
    mark = np.fromiter((name_part in n for n in names), dtype=bool, count=len(names))
    parent = ops["parent"].to_numpy()
    has = parent >= 0
    for _ in range(64):  # ops nest a few levels deep; each pass hands the mark down one level
        new = mark.copy()
        new[has] |= mark[parent[has]]
        if (new == mark).all():
            break
        mark = new
    return mark


def active_dropout(ev: RankEvents, w: np.ndarray) -> pd.DataFrame:
    """The outermost dropout ops (:data:`DROPOUT_OPS`) in the windows ``w``
    that draw a mask (hold an ``aten::bernoulli_`` or ``aten::native_dropout``:
    dropout in training mode; in eval mode ``aten::dropout`` returns its input),
    with those draws, as CPU rows, on every thread."""
    cpu = ev.cpu
    rows = cpu[cpu["s_name"].isin(DROPOUT_OPS)]
    if len(w):
        rows = rows[containing_index(intervals.union(w[:, 0], w[:, 1]), rows["ts"].to_numpy(float)) >= 0]
    draws = rows[rows["s_name"].isin(("aten::bernoulli_", "aten::native_dropout"))]
    if draws.empty:
        return rows.iloc[0:0]
    outer = rows[~rows["s_name"].isin(("aten::bernoulli_", "aten::native_dropout"))]
    at = np.sort(draws["ts"].to_numpy(float))
    a, z = outer["ts"].to_numpy(float), outer["end"].to_numpy(float)
    holds = np.searchsorted(at, z, side="left") > np.searchsorted(at, a, side="left")
    return pd.concat([outer[holds], draws]) if holds.any() else draws


#: GPU kernels of BatchNorm's forward in training mode, which compute the batch's statistics:
#: cuDNN's ``bn_fw_tr_*`` (eval mode runs ``bn_fw_inf_*``), MIOpen's ``MIOpenBatchNormFwdTrain*``
#: (eval: ``...FwdInfer...``), and PyTorch's own ``batch_norm_collect_statistics_kernel`` (eval
#: mode skips it; the normalization kernel runs in both modes). A CPU op's mode is in its
#: ``Concrete Inputs``, which the loader does not read: on the CPU the mode is not checked.
BN_TRAIN_KERNEL = re.compile(r"bn_fw_tr_|BatchNormFwdTrain|batch_norm_collect_statistics", re.IGNORECASE)
#: Those of them eval mode removes outright (the statistics pass); the others it replaces by the
#: inference kernel, which reads the input once instead of twice.
BN_STATS_KERNEL = re.compile(r"batch_norm_collect_statistics", re.IGNORECASE)


def bn_training_kernels(ev: RankEvents, w: np.ndarray) -> pd.DataFrame:
    """The GPU kernels of :data:`BN_TRAIN_KERNEL` that start in the windows
    ``w`` (``(n, 2)`` µs; all of them when empty): GPU rows."""
    gpu = ev.gpu
    if gpu.empty:
        return gpu
    names = gpu["s_name"].astype(str)
    rows = gpu[names.str.contains(BN_TRAIN_KERNEL).to_numpy(dtype=bool)]
    if len(w) and len(rows):
        rows = rows[containing_index(intervals.union(w[:, 0], w[:, 1]), rows["ts"].to_numpy(float)) >= 0]
    return rows


def slow_cpu_ops(ev: RankEvents, w: np.ndarray) -> pd.DataFrame:
    """The ops of :data:`SLOW_CPU_OPS` in the windows ``w`` (CPU rows)."""
    cpu = ev.cpu
    rows = cpu[cpu["s_name"].isin(SLOW_CPU_OPS)]
    if len(w) and len(rows):
        rows = rows[containing_index(intervals.union(w[:, 0], w[:, 1]), rows["ts"].to_numpy(float)) >= 0]
    return rows


def has_backward(ev: RankEvents) -> bool:
    """Whether the rank trains (:data:`BACKWARD_MARKERS`: a backward pass or
    an optimizer step), not only infers."""
    held = ev.memo.get("host_ops.backward")
    if held is None:
        names = pd.Series(ev.cpu["s_name"].unique().astype(str))
        held = bool(names.str.contains("|".join(BACKWARD_MARKERS), regex=True).any())
        ev.memo["host_ops.backward"] = held
    return held
