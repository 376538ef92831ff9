"""Where each step's time goes, as the TensorBoard profiler's overview splits it.

TensorBoard's "step time breakdown" (one stacked bar per step) gives each
instant of a step to the first category active then, in this priority order:
kernel, memcpy, memset, runtime, DataLoader, CPU exec, other
(``tb_plugin/torch_tb_profiler/profiler/overall_parser.py``). Steps are
re-based to the device as TensorBoard does (:func:`~hta_report.analysis.regions.rebased_steps`).
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..model import StepBreakdown
from .. import intervals
from .events import RankEvents, is_step
from .regions import rebased_steps

#: Host categories counted as CPU execution: TensorBoard's ``CpuOp`` role
#: (``EventTypes.OPERATOR``, ``USER_ANNOTATION`` and ``PYTHON``), so that
#: Python code running between ops (a preprocessing pipeline in a
#: ``with_stack`` trace) is CPU exec, as the idle attribution's host ops count
#: it, not "other".
CPU_EXEC_CATEGORIES = ("cpu_op", "user_annotation", "python_function")


def _union(df) -> np.ndarray:
    return intervals.union(df["ts"].to_numpy(dtype=float), df["end"].to_numpy(dtype=float))


def category_unions(ev: RankEvents) -> dict:
    """Each category's time of the rank as a union (µs), before priorities."""
    gpu, cpu = ev.gpu, ev.cpu
    names = cpu["s_name"]
    dataloader = names.str.startswith("enumerate(DataLoader)", na=False)
    step = is_step(names)
    return {
        "kernel": _union(gpu[gpu["s_cat"].eq("kernel")]),
        "memcpy": _union(gpu[gpu["s_cat"].eq("gpu_memcpy")]),
        "memset": _union(gpu[gpu["s_cat"].eq("gpu_memset")]),
        "runtime": _union(cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver"))]),
        "dataloader": _union(cpu[dataloader]),
        "cpu_exec": _union(cpu[cpu["s_cat"].isin(CPU_EXEC_CATEGORIES) & ~dataloader & ~step]),
    }


def step_breakdown(ev: RankEvents) -> List[StepBreakdown]:
    """One :class:`~hta_report.model.StepBreakdown` per ``ProfilerStep`` (all
    of them, the first marked ``warmup`` when there are two or more); empty
    without steps. The parts of a step add up to its (re-based) duration."""
    steps = rebased_steps(ev)
    if len(steps) == 0:
        return []
    w = steps[:, 1:3].astype(float)
    out = [StepBreakdown(number=int(n), duration_us=float(e - s), warmup=(i == 0 and len(steps) >= 2))
           for i, (n, s, e) in enumerate(steps)]
    claimed = np.empty((0, 2))
    left = w[:, 1] - w[:, 0]
    for name, u in category_unions(ev).items():
        part = intervals.subtract(u, claimed) if len(claimed) else u
        got = intervals.overlap_each(w, part) if len(part) else np.zeros(len(w))
        got = np.minimum(np.maximum(got, 0.0), left)
        left = left - got
        for b, v in zip(out, got):
            setattr(b, f"{name}_us", float(v))
        if len(u):
            claimed = intervals.union(np.concatenate([claimed[:, 0], u[:, 0]]), np.concatenate([claimed[:, 1], u[:, 1]]))
    for b, rest in zip(out, left):
        b.other_us = float(max(rest, 0.0))
    return out
