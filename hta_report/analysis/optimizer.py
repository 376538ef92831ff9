"""The optimizer step and zero_grad, from ``Optimizer.step#...`` and
``Optimizer.zero_grad#...`` annotations (PyTorch's profiler writes them for
every ``torch.optim.Optimizer``)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..model import OptimizerProfile
from . import intervals
from .events import RankEvents
from .regions import in_windows, launched_from, per_step, starts_inside

STEP_PREFIX = "Optimizer.step#"
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
#: CPU ops of the foreach and fused optimizer implementations.
MULTI_TENSOR_OPS = ("aten::_foreach_", "aten::_fused_")
#: Kernel name parts of the foreach and fused implementations.
MULTI_TENSOR_KERNELS = ("multi_tensor_apply", "fused_adam", "fused_sgd", "FusedAdam", "fused_adamw")


def step_regions(ev: RankEvents, w: Optional[np.ndarray]) -> pd.DataFrame:
    """``Optimizer.step#...`` annotations starting in the windows ``w`` (all when None)."""
    cpu = ev.cpu
    rows = cpu[cpu["s_name"].str.startswith(STEP_PREFIX)]
    return rows if w is None else in_windows(rows, w)


def zero_grad_regions(ev: RankEvents, w: Optional[np.ndarray]) -> pd.DataFrame:
    """``Optimizer.zero_grad#...`` annotations starting in the windows ``w`` (all when None)."""
    cpu = ev.cpu
    rows = cpu[cpu["s_name"].str.startswith(ZERO_GRAD_PREFIX)]
    return rows if w is None else in_windows(rows, w)


def zero_writes(ev: RankEvents, zero_grad: pd.DataFrame) -> pd.DataFrame:
    """``aten::zero_`` ops inside ``zero_grad`` regions that are not part of an
    ``aten::zeros`` (which allocates and fills a new tensor)."""
    cpu = ev.cpu
    zero_ = cpu[cpu["s_name"].eq("aten::zero_")]
    zero_ = zero_[starts_inside(zero_, zero_grad)]
    zeros = cpu[cpu["s_name"].eq("aten::zeros")]
    return zero_[~starts_inside(zero_, zeros)]


def optimizer_profile(ev: RankEvents, w: np.ndarray) -> OptimizerProfile:
    """Optimizer step and zero_grad metrics of one rank over the analyzed host
    windows ``w`` (see :class:`~hta_report.model.OptimizerProfile`)."""
    n = len(w)
    out = OptimizerProfile()
    cpu = ev.cpu
    steps = step_regions(ev, w)
    if len(steps):
        out.step_name = str(steps["s_name"].iloc[0])
        out.step_calls = int(len(steps))
        out.step_us_per_step = per_step(intervals.total(intervals.union(steps["ts"], steps["end"])), n)
        ops = cpu[cpu["s_cat"].eq("cpu_op")]
        ops = ops[starts_inside(ops, steps)]
        out.ops_per_step = per_step(len(ops), n)
        launched = launched_from(ev, steps)
        kernels = launched[launched["s_cat"].eq("kernel")]
        out.kernels_per_step = per_step(len(kernels), n)
        out.kernel_us_per_step = per_step(float(kernels["dur"].sum()), n)
        out.median_kernel_us = float(np.median(kernels["dur"])) if len(kernels) else 0.0
        foreach = ops[ops["s_name"].str.startswith(MULTI_TENSOR_OPS)]
        fused_kernels = kernels[kernels["s_name"].str.contains("|".join(MULTI_TENSOR_KERNELS), case=False)]
        if "fused" in out.step_name.lower():
            out.multi_tensor, out.marker = True, out.step_name
        elif len(foreach):
            out.multi_tensor, out.marker = True, str(foreach["s_name"].iloc[0])
        elif len(fused_kernels):
            out.multi_tensor, out.marker = True, str(fused_kernels["s_name"].iloc[0])[:80]
    zg = zero_grad_regions(ev, w)
    if len(zg):
        out.zero_grad_name = str(zg["s_name"].iloc[0])
        out.zero_grad_calls = int(len(zg))
        out.zero_ops_per_step = per_step(len(zero_writes(ev, zg)), n)
        out.zero_grad_us_per_step = per_step(intervals.total(intervals.union(zg["ts"], zg["end"])), n)
        launched = launched_from(ev, zg)
        out.zero_grad_kernel_us_per_step = per_step(float(launched["dur"].sum()), n)
    return out
