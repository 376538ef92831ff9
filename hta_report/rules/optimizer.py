"""Optimizer rules: C21 single-tensor optimizer, C22 zero_grad writing zeros."""
from __future__ import annotations

from ..model import AnalysisResult, RankResult
from .base import Fired, DOCS_OPTIM, DOCS_ZERO_GRAD, Verdict, fine, make_finding, ms, not_checked, per, rule
from .config import AdviceConfig


@rule("unfused-optimizer", "C21", "Per-parameter (single-tensor) optimizer step",
      "PyTorch profiler pattern matcher; kernel count: proposal",
      lambda c: (f"Optimizer.step without foreach/fused ops launching >= {c.optimizer_kernels_per_step:g} "
                 "kernels per step"), DOCS_OPTIM)
def unfused_optimizer(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C21: ``Optimizer.step#...`` with no ``aten::_foreach_*``/``aten::_fused_*``
    op or fused kernel, launching at least ``optimizer_kernels_per_step``
    kernels per step. The gain is the GPU idle time inside the optimizer step
    (launch overhead a foreach or fused step removes). Needs GPU kernels:
    HTA's parser drops the ``_single_tensor_*`` Python frames."""
    ranks = [r for r in result.ranks if r.optimizer.step_calls]
    if not ranks:
        return not_checked("no Optimizer.step#... annotations in the traces")
    ranks = [r for r in ranks if r.has_gpu]
    if not ranks:
        return not_checked("no GPU activity: the cost of a single-tensor optimizer is its kernel launches")
    hits = sorted([r for r in ranks if not r.optimizer.multi_tensor
                   and r.optimizer.kernels_per_step >= cfg.optimizer_kernels_per_step],
                  key=lambda r: -r.idle_attribution.optimizer_us)
    if not hits:
        multi = [r for r in ranks if r.optimizer.multi_tensor]
        if multi:
            return fine(f"foreach/fused optimizer ({multi[0].optimizer.marker[:60]})")
        return fine(f"{max(r.optimizer.kernels_per_step for r in ranks):.0f} kernels per optimizer step")
    worst = hits[0]
    evidence = [f"rank {r.rank}: {r.optimizer.step_name} launches {r.optimizer.kernels_per_step:,.0f} kernels {per(r)} "
                f"(median {r.optimizer.median_kernel_us:.1f} µs) from {r.optimizer.ops_per_step:,.0f} ops, no foreach or "
                f"fused op; host time {ms(r.optimizer.step_us_per_step)} {per(r)}, GPU idle during it "
                f"{ms(r.idle_attribution.optimizer_us)}" for r in hits[:8]]
    fix = "optimizer = torch.optim.AdamW(model.parameters(), lr=..., fused=True)   # or foreach=True"
    return make_finding(cfg, worst, worst.idle_attribution.optimizer_us,
                        f"Use a fused optimizer: the per-parameter step launches "
                        f"{worst.optimizer.kernels_per_step:,.0f} kernels per step", evidence, fix,
                        [r.rank for r in hits])


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
      lambda c: "any aten::zero_ inside Optimizer.zero_grad (not under aten::zeros)", DOCS_ZERO_GRAD)
def zero_grad_zeros(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C22: ``Optimizer.zero_grad#...`` containing ``aten::zero_`` ops that are
    not part of an ``aten::zeros``: gradients are zero-filled every step."""
    ranks = [r for r in result.ranks if r.optimizer.zero_grad_calls]
    if not ranks:
        return not_checked("no Optimizer.zero_grad#... annotations in the traces")
    hits = sorted([r for r in ranks if r.optimizer.zero_ops_per_step > 0], key=lambda r: -zero_grad_cost_us(r))
    if not hits:
        return fine("zero_grad sets gradients to None (no aten::zero_)")
    worst = hits[0]
    evidence = []
    for r in hits[:8]:
        o = r.optimizer
        text = (f"rank {r.rank}: {o.zero_grad_name} runs {o.zero_ops_per_step:,.0f} aten::zero_ {per(r)}, "
                f"{ms(o.zero_grad_us_per_step)} of host time")
        if r.has_gpu:
            text += (f"; its kernels take {ms(o.zero_grad_kernel_us_per_step)} and the GPU idles "
                     f"{ms(r.idle_attribution.zero_grad_us)} during it")
        evidence.append(text)
    fix = "optimizer.zero_grad(set_to_none=True)   # the default since PyTorch 2.0"
    return make_finding(cfg, worst, zero_grad_cost_us(worst),
                        "Set gradients to None: zero_grad writes zeros every step", evidence, fix,
                        [r.rank for r in hits])
