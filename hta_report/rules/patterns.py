"""Code-pattern rules: C23 tensor made on the CPU then copied, C25 convolution
bias before BatchNorm, C28 DDP gradient accumulation without ``no_sync()``."""
from __future__ import annotations

from typing import List

from ..model import PATTERNS_STEP, AnalysisResult, RankResult
from .base import Fired, Verdict, claim, evidence_lines, fine, make_finding, ms, not_checked, per, rule, worst_first
from .config import AdviceConfig

DOCS_NO_SYNC = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync"
DOCS_TARGET_DEVICE = ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#create-tensors-directly-on-the-target-device")
DOCS_CONV_BIAS = ("https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                  "#disable-bias-for-convolutions-directly-followed-by-a-batch-norm")


#: Where the copies of C23 are claimed from: copy time with no kernel running. C23
#: defers to the copy rules (``claims.OWNERSHIP``): its copies are among theirs.
COPY_POOLS = ["copy:pageable", "copy:blocking", "copy:other"]


def _analyzed(result: AnalysisResult) -> List[RankResult]:
    """Ranks whose code-pattern step ran (a failed step leaves its figures at 0, not "none found")."""
    return [r for r in result.ranks if not r.failed(PATTERNS_STEP)]


@rule("cpu-tensor-copied", "C23", "Tensor filled on the CPU, then copied to the GPU",
      "PyTorch profiler pattern matcher (ExtraCUDACopyPattern), performance tuning guide",
      lambda c: "any aten::to with an HtoD copy right after aten::fill_/zero_/normal_/uniform_ on the CPU",
      DOCS_TARGET_DEVICE, needs=(PATTERNS_STEP,),
      description=("Tensors filled on the CPU (`aten::fill_`, `zero_`, `normal_`, `uniform_`) and then "
                   'copied to the GPU (`torch.zeros(n).to("cuda")`) instead of made there. The gain bound is '
                   "those copies' GPU time that no kernel hides."),
      fix=('Make the tensor where it is used: `torch.zeros(n, device="cuda")`, `torch.randn(..., '
           "device=x.device)`."))
def cpu_tensor_copied(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C23: ``torch.zeros(...).to("cuda")``: the tensor is filled by the CPU
    and copied to the GPU instead of made there. The gain bound is the GPU
    time of those copies per step (made on the GPU, the tensor needs no copy;
    the fill becomes a kernel), claimed from the copy time no kernel hides
    (the ``copy:*`` pools): copies that overlap compute cost no step time.
    The copy rules own that time by the kind of copy (C3 pageable, C4
    blocking, C15 the rest) and the model does not say which kind these
    copies are: on a rank where one of them claimed, C23 defers to it
    (``claims.OWNERSHIP``) and leaves the rank out, ``covered`` when none is left."""
    gpu = [r for r in _analyzed(result) if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces (or the code-pattern analysis failed)")
    hits = worst_first([r for r in gpu if r.patterns.cpu_tensor_copies_per_step > 0],
                       lambda r: r.patterns.cpu_tensor_copy_us_per_step)
    if not hits:
        return fine("no tensor filled on the CPU and then copied to the GPU in the analyzed steps")
    c = claim(fired, hits, COPY_POOLS, lambda r: r.patterns.cpu_tensor_copy_us_per_step,
              "tensors filled on the CPU, then copied to the GPU")
    evidence = evidence_lines(c.hits, lambda r: (
        f"rank {r.rank}: {r.patterns.cpu_tensor_copies_per_step:.1f} such copies {per(r)}, their HtoD copies take "
        f"{ms(r.patterns.cpu_tensor_copy_us_per_step)} {per(r)} on the GPU; e.g. "
        + "; ".join(r.patterns.cpu_tensor_examples)))
    fix = ("# make the tensor where it is used, instead of torch.zeros(n).to(\"cuda\"):\n"
           "mask = torch.zeros(n, device=\"cuda\")   # likewise torch.randn(..., device=x.device)")
    return c.verdict(cfg, "Create tensors on the GPU instead of filling them on the CPU and copying", evidence, fix)


@rule("conv-bias-before-bn", "C25", "Convolution with a bias directly followed by BatchNorm",
      "PyTorch performance tuning guide; PyTorch profiler recipes",
      lambda c: "any conv1d/2d/3d with a bias whose next op is aten::batch_norm (needs record_shapes)",
      DOCS_CONV_BIAS, needs=(PATTERNS_STEP,),
      description=("A convolution (`conv1d`/`2d`/`3d`) with a bias whose next op is `aten::batch_norm`: "
                   "BatchNorm subtracts the per-channel mean, so the bias only costs its add and its "
                   "gradient. No step time is measured for it (gain 0). Needs `record_shapes=True`."),
      fix=("Drop the bias of convolutions followed by BatchNorm: `nn.Conv2d(in_channels, "
           "out_channels, kernel_size, bias=False)`."))
def conv_bias_before_bn(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C25: BatchNorm subtracts the per-channel mean, so a bias added by the
    convolution before it does nothing but cost a bias add and its gradient.
    No step time is measured for it (the bias add is often fused into the
    convolution): gain 0."""
    ranks = [r for r in _analyzed(result) if r.patterns.shapes_recorded]
    if not ranks:
        if not any(r.patterns.conv_ops_per_step for r in _analyzed(result)):
            return not_checked("no convolution ops (aten::conv1d/2d/3d) in the analyzed steps")
        return not_checked("the convolutions carry no input shapes (profile with record_shapes=True)")
    hits = worst_first([r for r in ranks if r.patterns.conv_bias_bn_per_step > 0],
                       lambda r: r.patterns.conv_bias_bn_per_step)
    if not hits:
        return fine("no convolution with a bias is followed by BatchNorm")
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: {r.patterns.conv_bias_bn_per_step:.0f} convolutions with a bias followed by BatchNorm "
        f"{per(r)}; e.g. " + "; ".join(r.patterns.conv_bias_examples[:2])))
    fix = ("nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)   # BatchNorm2d follows\n"
           "nn.BatchNorm2d(out_channels)")
    return make_finding(cfg, hits, {}, "Drop the bias of convolutions followed by BatchNorm (bias=False)",
                        evidence, fix)


def extra_syncs(r: RankResult) -> float:
    """All-reduce rounds per step beyond one."""
    return max(0.0, r.patterns.synced_micro_steps_per_step - 1)


@rule("no-sync-accumulation", "C28", "Gradient accumulation under DDP all-reduces in every micro-step",
      "PyTorch DDP documentation (no_sync); proposal: more than one synchronized micro-step per step",
      lambda c: "more than one DistributedDataParallel.forward micro-step with an all-reduce per ProfilerStep",
      DOCS_NO_SYNC, needs=(PATTERNS_STEP,),
      description=("Gradient accumulation under DistributedDataParallel (several "
                   "`DistributedDataParallel.forward` per `ProfilerStep`) where more than one micro-step "
                   "all-reduces the gradients: every micro-step but the last should run inside "
                   "`model.no_sync()`."),
      fix=("Accumulate without synchronizing: run every micro-step but the last inside "
           "`model.no_sync()`, so that only the last backward all-reduces."))
def no_sync_accumulation(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C28: with gradient accumulation (several ``DistributedDataParallel.forward``
    per ``ProfilerStep``), every micro-step but the last should run inside
    ``model.no_sync()``; here more than one all-reduces. The gain bound is
    the all-reduce time of the synchronized micro-steps but the last (their
    communication kernels on GPU ranks, host collective time otherwise),
    claimed from exposed communication (GPU ranks) or the host's collective
    wait and other host time (CPU ranks). On a GPU rank where
    exposed-communication fired, the extra rounds are in the transfer it
    claims (its fix names ``no_sync()``): C28 defers to it there."""
    ranks = [r for r in _analyzed(result) if r.patterns.micro_steps_per_step > 0]
    if not ranks:
        return not_checked("no DistributedDataParallel.forward in the analyzed steps (no DDP, or no ProfilerStep)")
    accumulating = [r for r in ranks if r.patterns.micro_steps_per_step > 1]
    if not accumulating:
        return fine("one DDP forward per step: no gradient accumulation")
    hits = worst_first([r for r in accumulating if extra_syncs(r) > 0], lambda r: r.patterns.extra_sync_us_per_step)
    if not hits:
        w = accumulating[0]
        return fine(f"{w.patterns.micro_steps_per_step:.1f} micro-steps per step, one all-reduce round each step "
                    "(no_sync() in use)")
    c = claim(fired, hits, accumulation_pools, lambda r: r.patterns.extra_sync_us_per_step,
              f"{extra_syncs(hits[0]):.0f} extra all-reduce rounds per step on rank {hits[0].rank}")
    worst = max(c.hits, key=c.us, default=hits[0])
    evidence = evidence_lines(c.hits, lambda r: (
        f"rank {r.rank}: {r.patterns.micro_steps_per_step:.1f} micro-steps (DDP forwards) {per(r)}, "
        f"{r.patterns.synced_micro_steps_per_step:.1f} of them all-reduce gradients; the extra rounds take "
        f"{ms(r.patterns.extra_sync_us_per_step)} {per(r)}"))
    fix = ("for i, batch in enumerate(micro_batches):\n"
           "    ctx = model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext()\n"
           "    with ctx:\n"
           "        (loss_fn(model(batch)) / len(micro_batches)).backward()\n"
           "optimizer.step(); optimizer.zero_grad()")
    return c.verdict(cfg, f"Use no_sync() in gradient accumulation: {extra_syncs(worst):.0f} extra all-reduce rounds "
                          "per step", evidence, fix)


def accumulation_pools(r: RankResult) -> List[str]:
    """Where C28 claims on ``r``: exposed communication (GPU ranks: it defers
    to exposed-communication, whose transfer holds the extra rounds), or the
    host's collective wait, its wait for the collectives' transfer (it defers
    to exposed-communication there too) and other host time (ranks without
    GPU activity)."""
    return ["comm:exposed"] if r.has_gpu else ["host:collective_wait", "host:communication", "host:other"]
