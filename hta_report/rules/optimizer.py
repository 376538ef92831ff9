"""Optimizer rules: C21 single-tensor optimizer, C22 zero_grad writing zeros."""
from __future__ import annotations

import re
from typing import Dict, List, Sequence

from ..model import AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_OPTIM, DOCS_ZERO_GRAD, Fired, Verdict, claim, evidence_lines, fine, make_finding, ms,
                   not_checked, pct_of_step, per, rule, worst_first)
from .config import AdviceConfig


def optimizer_cost_us(r: RankResult) -> float:
    """What a single-tensor optimizer step costs per step (µs), the time the
    finding claims of what a fused step (the same arithmetic in a few ops)
    saves: on GPU ranks the GPU idle while the host is inside it
    (per-parameter launch overhead) plus the GPU time of the kernels it
    launched (a fused step runs a few kernels in their place: the per-kernel
    cost of hundreds of tiny kernels goes); without GPU activity its host
    time, an upper bound there.

    The kernels' time is counted since an H200 pair (``bench/record_cuda.py``
    unfused-optimizer, 2026-11-26) saved more than the idle alone: the step
    went to 10.76 ms where the idle-only bound said 15.28 ms at best. It is
    the GPU time this finding claims, not a bound on a host-bound step: there
    the GPU still busy with backward when the step begins is idle again once
    the host reaches the next forward sooner, and without the profiler the
    fix saved 47 % and 50 % of the step on H200 pairs (2026-11-27) where this
    said 40 % and 38 %. The replay's edit ``optimizer fused`` predicts it."""
    if r.has_gpu:
        return r.idle_attribution.optimizer_us + r.optimizer.kernel_us_per_step
    return r.optimizer.step_us_per_step


def _many(r: RankResult, cfg: AdviceConfig) -> bool:
    """A per-parameter step: many kernels (GPU), or many ops (CPU) per step."""
    o = r.optimizer
    return (o.kernels_per_step if r.has_gpu else o.ops_per_step) >= cfg.optimizer_kernels_per_step


@rule("unfused-optimizer", "C21", "Per-parameter (single-tensor) optimizer step",
      "PyTorch profiler pattern matcher; kernel count: proposal",
      lambda c: (f"Optimizer.step without foreach/fused ops launching >= {c.optimizer_kernels_per_step:g} "
                 "kernels (CPU: ops) per step"), DOCS_OPTIM,
      description=("An optimizer step without `foreach` or fused ops (the per-parameter, single-tensor loop) "
                   "launching many kernels per step (on ranks without GPU activity: running many CPU ops)."),
      fix=("Use a fused or foreach optimizer: `torch.optim.AdamW(model.parameters(), lr=..., "
           "fused=True)` (or `foreach=True`); `fused=True` runs on CUDA and, since PyTorch 2.4, on "
           "CPU for Adam, AdamW, SGD and Adagrad."),
      edit=EditLabel.OPTIMIZER_FUSED, evidence=('optimizer',))
def unfused_optimizer(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C21: ``Optimizer.step#...`` with no ``aten::_foreach_*``/``aten::_fused_*``
    op or fused kernel, launching at least ``optimizer_kernels_per_step``
    kernels per step (on ranks without GPU activity: running that many CPU
    ops per step; PyTorch's default on CPU tensors is the single-tensor
    loop). The gain is :func:`optimizer_cost_us` (GPU ranks: from the
    optimizer's idle, then from the kernel time of the ``compute`` pool). HTA's parser drops the
    ``_single_tensor_*`` Python frames, so the ops tell the implementation."""
    ranks = [r for r in result.ranks if r.optimizer.step_calls]
    if not ranks:
        return not_checked("no Optimizer.step#... annotations in the traces")
    hits = worst_first([r for r in ranks if not r.optimizer.multi_tensor and _many(r, cfg)], optimizer_cost_us)
    if not hits:
        multi = [r for r in ranks if r.optimizer.multi_tensor]
        if multi:
            return fine(f"foreach/fused optimizer ({multi[0].optimizer.marker[:60]})")
        return fine(f"{max(r.optimizer.kernels_per_step if r.has_gpu else r.optimizer.ops_per_step for r in ranks):.0f} "
                    "kernels (CPU: ops) per optimizer step")
    fix = fused_fix([r.optimizer.step_name for r in hits])
    c = claim(fired, hits, lambda r: ["idle:optimizer", "compute"] if r.has_gpu else ["host:optimizer"],
              optimizer_cost_us)
    worst = max(hits, key=lambda r: r.optimizer.kernels_per_step if r.has_gpu else r.optimizer.ops_per_step)
    count = (f"{worst.optimizer.kernels_per_step:,.0f} kernels" if worst.has_gpu
             else f"{worst.optimizer.ops_per_step:,.0f} CPU ops")
    kind = "foreach" if all(optimizer_class(r.optimizer.step_name) in FOREACH_ONLY for r in hits) else "fused"
    return c.verdict(cfg, f"Use a {kind} optimizer: the per-parameter step runs {count} per step",
                     evidence_lines(c.hits, _unfused_evidence), fix)


#: ``torch.optim`` classes with a fused implementation (``fused=True``): CUDA, and CPU since
#: PyTorch 2.4 (``inspect.signature`` of torch 2.13's classes; their docstrings).
FUSED = ("Adam", "AdamW", "SGD", "Adagrad")
#: ``torch.optim`` classes with only a foreach implementation (``foreach=True``) besides the loop.
FOREACH_ONLY = ("ASGD", "Adadelta", "Adafactor", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop")
_STEP = re.compile(r"Optimizer\.step#([A-Za-z_][A-Za-z0-9_]*)\.step")


def optimizer_class(step_name: str) -> str:
    """The optimizer's class named by its step annotation
    (``Optimizer.step#SGD.step`` -> ``SGD``), or '' when the name has
    another form."""
    m = _STEP.fullmatch(step_name)
    return m.group(1) if m else ""


def fused_fix(step_names: Sequence[str]) -> str:
    """The fix code for single-tensor steps named ``step_names`` (one per
    rank, worst first), in the trace's own optimizer: ``fused=True`` for the
    classes of :data:`FUSED`, ``foreach=True`` for :data:`FOREACH_ONLY`, and
    for any other class (a user's own, ``LBFGS``...) the advice to move to a
    fused ``torch.optim`` one. One line per distinct class."""
    lines: List[str] = []
    for name in dict.fromkeys(optimizer_class(n) for n in step_names):
        if name in FUSED:
            lines += [f"optimizer = torch.optim.{name}(model.parameters(), lr=..., fused=True)   # or foreach=True"]
        elif name in FOREACH_ONLY:
            lines += [f"optimizer = torch.optim.{name}(model.parameters(), lr=..., foreach=True)   "
                      f"# {name} has no fused implementation"]
        else:
            what = f"{name} has" if name else "this optimizer has"
            lines += [f"# {what} no foreach or fused implementation in torch.optim; one that has, e.g.:",
                      "optimizer = torch.optim.AdamW(model.parameters(), lr=..., fused=True)   # or foreach=True"]
    if any("fused=True)" in line for line in lines):
        lines.append("# fused=True runs on CUDA and, since PyTorch 2.4, on CPU")
    return "\n".join(dict.fromkeys(lines))


def _unfused_evidence(r: RankResult) -> str:
    o = r.optimizer
    if r.has_gpu:
        return (f"rank {r.rank}: {o.step_name} launches {o.kernels_per_step:,.0f} kernels {per(r)} "
                f"(median {o.median_kernel_us:.1f} µs) from {o.ops_per_step:,.0f} ops, no foreach or "
                f"fused op, {ms(o.kernel_us_per_step)} of GPU time; host time {ms(o.step_us_per_step)} {per(r)}, "
                f"GPU idle during it {ms(r.idle_attribution.optimizer_us)}")
    return (f"rank {r.rank} (no GPU activity): {o.step_name} runs {o.ops_per_step:,.0f} CPU ops {per(r)}, "
            f"no foreach or fused op, in {ms(o.step_us_per_step)} of host time {per(r)} "
            f"({pct_of_step(o.step_us_per_step, r):.1f} % of the step); a fused step does the same "
            "arithmetic in a few ops, so it saves at most that time")


def zero_grad_cost_us(r: RankResult) -> float:
    """What writing zeros costs per step (µs): on GPU ranks the GPU idle inside
    ``zero_grad`` plus the GPU time of the kernels it launched; without GPU
    activity its host time. ``set_to_none=True`` removes both."""
    o = r.optimizer
    if r.has_gpu:
        return r.idle_attribution.zero_grad_us + o.zero_grad_kernel_us_per_step
    return o.zero_grad_us_per_step


@rule("zero-grad-zeros", "C22", "zero_grad writes zeros instead of setting gradients to None",
      "PyTorch profiler pattern matcher, performance tuning guide",
      lambda c: "any aten::zero_ inside Optimizer.zero_grad (not under aten::zeros)", DOCS_ZERO_GRAD,
      description=("`Optimizer.zero_grad` writing zeros into every gradient (`aten::zero_` ops, not part of "
                   "`aten::zeros`) every step, instead of dropping the gradients."),
      fix=("Set gradients to None: `optimizer.zero_grad(set_to_none=True)` (the default since "
           "PyTorch 2.0)."),
      edit=EditLabel.ZERO_GRAD_NONE, evidence=('zero_grad',))
def zero_grad_zeros(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C22: ``Optimizer.zero_grad#...`` containing ``aten::zero_`` ops that are
    not part of an ``aten::zeros``: gradients are zero-filled every step."""
    ranks = [r for r in result.ranks if r.optimizer.zero_grad_calls]
    if not ranks:
        return not_checked("no Optimizer.zero_grad#... annotations in the traces")
    hits = worst_first([r for r in ranks if r.optimizer.zero_ops_per_step > 0], zero_grad_cost_us)
    if not hits:
        return fine("zero_grad sets gradients to None (no aten::zero_)")
    fix = "optimizer.zero_grad(set_to_none=True)   # the default since PyTorch 2.0"
    return make_finding(cfg, hits, {r.rank: _zero_grad_claim(r, fired) for r in hits},
                        "Set gradients to None: zero_grad writes zeros every step",
                        evidence_lines(hits, _zero_grad_evidence), fix)


def _zero_grad_claim(r: RankResult, fired: Fired) -> Dict[str, float]:
    """C22's claim on ``r``: the GPU idle inside zero_grad and its kernels' time, or its host time."""
    if not r.has_gpu:
        return fired.take(r, ["host:zero_grad"], r.optimizer.zero_grad_us_per_step)
    out = fired.take(r, ["idle:zero_grad"], r.idle_attribution.zero_grad_us)
    out.update(fired.take(r, ["compute"], r.optimizer.zero_grad_kernel_us_per_step))
    return out


def _zero_grad_evidence(r: RankResult) -> str:
    o = r.optimizer
    text = (f"rank {r.rank}: {o.zero_grad_name} runs {o.zero_ops_per_step:,.0f} aten::zero_ {per(r)}, "
            f"{ms(o.zero_grad_us_per_step)} of host time")
    if r.has_gpu:
        text += (f"; its kernels take {ms(o.zero_grad_kernel_us_per_step)} and the GPU idles "
                 f"{ms(r.idle_attribution.zero_grad_us)} during it")
    return text
