"""The optimizer step and zero_grad, from ``Optimizer.step#...`` and
``Optimizer.zero_grad#...`` annotations (PyTorch's profiler writes them for
every ``torch.optim.Optimizer``)."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import pandas as pd

from ..model import OptimizerProfile
from .. import intervals
from .events import RankEvents, runtime_calls
from .regions import in_windows, launched_from, per_step, starts_inside

STEP_PREFIX = "Optimizer.step#"
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
#: CPU ops of the foreach and fused optimizer implementations.
MULTI_TENSOR_OPS = ("aten::_foreach_", "aten::_fused_")
#: Kernel name parts of the foreach and fused implementations.
MULTI_TENSOR_KERNELS = ("multi_tensor_apply", "fused_adam", "fused_sgd", "FusedAdam", "fused_adamw")


#: Kineto's copy of a user annotation on the GPU's timeline: not host time (it starts when the GPU
#: reaches the region and ends when the GPU leaves it).
GPU_ANNOTATION = "gpu_user_annotation"


def _host_annotations(ev: RankEvents, prefix: str) -> pd.DataFrame:
    cpu = ev.cpu
    return cpu[cpu["s_name"].str.startswith(prefix) & ~cpu["s_cat"].eq(GPU_ANNOTATION)]


def step_regions(ev: RankEvents, w: Optional[np.ndarray]) -> pd.DataFrame:
    """``Optimizer.step#...`` annotations on the host (not their
    ``gpu_user_annotation`` copies) starting in the windows ``w`` (all when None)."""
    rows = _host_annotations(ev, STEP_PREFIX)
    return rows if w is None else in_windows(rows, w)


def zero_grad_regions(ev: RankEvents, w: Optional[np.ndarray]) -> pd.DataFrame:
    """``Optimizer.zero_grad#...`` annotations on the host (not their
    ``gpu_user_annotation`` copies) starting in the windows ``w`` (all when None)."""
    rows = _host_annotations(ev, ZERO_GRAD_PREFIX)
    return rows if w is None else in_windows(rows, w)


def zero_writes(ev: RankEvents, zero_grad: pd.DataFrame) -> pd.DataFrame:
    """``aten::zero_`` ops inside ``zero_grad`` regions that are not part of an
    ``aten::zeros`` (which allocates and fills a new tensor)."""
    cpu = ev.cpu
    zero_ = cpu[cpu["s_name"].eq("aten::zero_")]
    zero_ = zero_[starts_inside(zero_, zero_grad)]
    zeros = cpu[cpu["s_name"].eq("aten::zeros")]
    return zero_[~starts_inside(zero_, zeros)]


def _multi_tensor_marker(ev: RankEvents, name: str, ops: pd.DataFrame, kernels: pd.DataFrame) -> str:
    """What shows that the optimizer ``name`` uses a foreach or fused
    implementation (its name, an op or a kernel), or ''."""
    foreach = ops[ops["s_name"].str.startswith(MULTI_TENSOR_OPS)]
    fused_kernels = kernels[kernels["s_name"].str.contains("|".join(MULTI_TENSOR_KERNELS), case=False)]
    if "fused" in name.lower():
        return name
    if len(foreach):
        return str(foreach["s_name"].iloc[0])
    if len(fused_kernels):
        return str(fused_kernels["s_name"].iloc[0])[:80]
    return ""


def implementations(ev: RankEvents) -> Dict[str, str]:
    """Per optimizer stepped in the trace (``Optimizer.step#...`` name), what
    shows it is a foreach or fused one (:func:`_multi_tensor_marker`), or ''
    for a single-tensor one; judged on all of its steps, once per
    :class:`RankEvents` (kept in ``ev.memo``: the optimizer metrics and the
    replay's edit both read it)."""
    held = ev.memo.get("optimizer.implementations")
    if held is None:
        steps = step_regions(ev, None)
        all_ops = ev.cpu[ev.cpu["s_cat"].eq("cpu_op")]
        held = {}
        for name, regions in steps.groupby("s_name", observed=True, sort=False):
            ops = all_ops[starts_inside(all_ops, regions)]
            launched = launched_from(ev, regions)
            held[str(name)] = _multi_tensor_marker(ev, str(name), ops, launched[launched["s_cat"].eq("kernel")])
        ev.memo["optimizer.implementations"] = held
    return held


def single_tensor_step_regions(ev: RankEvents, w: Optional[np.ndarray]) -> pd.DataFrame:
    """The ``Optimizer.step#...`` annotations (CPU rows: ``thread``, ``ts``, ``end``, µs)
    of optimizers with no foreach or fused op or kernel (:func:`implementations`),
    starting in the windows ``w`` (all when None): what ``unfused-optimizer``
    finds and its fix replaces."""
    steps = step_regions(ev, w)
    if steps.empty:
        return steps
    impl = implementations(ev)
    return steps[steps["s_name"].isin([n for n, marker in impl.items() if not marker])]


def optimizer_profile(ev: RankEvents, w: np.ndarray) -> OptimizerProfile:
    """Optimizer step and zero_grad metrics of one rank over the analyzed host
    windows ``w`` (see :class:`~hta_report.model.OptimizerProfile`).

    A model may step several optimizers (``Optimizer.step#SparseAdam.step``
    and ``Optimizer.step#AdamW.step``...): each is judged on its own ops and
    kernels, and the figures describe the single-tensor ones when there are
    any (``multi_tensor`` is False then), else all of them."""
    n = len(w)
    out = OptimizerProfile()
    cpu = ev.cpu
    steps = step_regions(ev, w)
    if len(steps):
        all_ops = cpu[cpu["s_cat"].eq("cpu_op")]
        impl = implementations(ev)
        names = [str(n) for n in pd.unique(steps["s_name"])]
        single = [n for n in names if not impl[n]]
        markers = [impl[n] for n in names if impl[n]]
        chosen = steps[steps["s_name"].isin(single)] if single else steps
        out.step_name = str(chosen["s_name"].iloc[0])
        out.step_calls = int(len(chosen))
        out.step_us_per_step = per_step(intervals.total(intervals.union(chosen["ts"], chosen["end"])), n)
        ops = all_ops[starts_inside(all_ops, chosen)]
        out.ops_per_step = per_step(len(ops), n)
        launched = launched_from(ev, chosen)
        kernels = launched[launched["s_cat"].eq("kernel")]
        out.kernels_per_step = per_step(len(kernels), n)
        out.kernel_us_per_step = per_step(float(kernels["dur"].sum()), n)
        out.median_kernel_us = float(np.median(kernels["dur"])) if len(kernels) else 0.0
        calls = runtime_calls(ev)
        calls = calls[starts_inside(calls, chosen) & calls["correlation"].isin(kernels["correlation"])]
        out.launch_us_per_step = per_step(float(calls["dur"].sum()), n)
        if not single:
            out.multi_tensor, out.marker = True, markers[0]
    zg = zero_grad_regions(ev, w)
    if len(zg):
        out.zero_grad_name = str(zg["s_name"].iloc[0])
        out.zero_grad_calls = int(len(zg))
        out.zero_ops_per_step = per_step(len(zero_writes(ev, zg)), n)
        out.zero_grad_us_per_step = per_step(intervals.total(intervals.union(zg["ts"], zg["end"])), n)
        launched = launched_from(ev, zg)
        out.zero_grad_kernel_us_per_step = per_step(float(launched["dur"].sum()), n)
    return out
