"""C20 and C27: device memory near capacity, or under-used while kernels are small."""
from __future__ import annotations

from typing import List, Tuple

from ..model import MEMORY_STEP, AnalysisResult, RankResult
from .base import (DOCS_TUNING, GENERAL, Fired, Verdict, evidence_lines, fine, make_finding, not_checked, rule,
                   worst_first)
from .config import AdviceConfig

DOCS_CHECKPOINT = "https://pytorch.org/docs/stable/checkpoint.html"
HOW_TO_RECORD = ("no [memory] events in the traces (profile with torch.profiler.profile(profile_memory=True) "
                 "or hta-report collect --profile-memory)")


def gib(n: int) -> str:
    """Bytes as ``"12.3 GiB"``."""
    return f"{n / 2 ** 30:,.1f} GiB"


def peak_pct(r: RankResult) -> float:
    """The larger of peak reserved and peak allocated, % of device memory."""
    return max(r.memory.peak_reserved_pct, r.memory.peak_allocated_pct)


def _measured(result: AnalysisResult) -> Tuple[List[RankResult], str]:
    """(ranks with [memory] events and a device capacity, a reason when there are none)."""
    ranks = [r for r in result.ranks if not r.failed(MEMORY_STEP)]
    recorded = [r for r in ranks if r.memory.recorded]
    if not recorded:
        failed = [r for r in result.ranks if r.failed(MEMORY_STEP)]
        return [], (f"the memory analysis failed on rank {failed[0].rank}" if failed and not ranks else HOW_TO_RECORD)
    sized = [r for r in recorded if r.memory.capacity_bytes > 0]
    unbelieved = [r for r in recorded if r.memory.out_of_range and not r.memory.devices]
    if not sized and unbelieved:
        return [], f"{out_of_range(unbelieved[0])}; no other values to check"
    if not sized:
        return [], (f"no device memory capacity for {recorded[0].memory.device} (deviceProperties[].totalGlobalMem "
                    "is written for GPUs only; CPU-only traces have none)")
    return sized, ""


def out_of_range(r: RankResult) -> str:
    """What the rank's ``[memory]`` events held that no device has, in words
    (empty when nothing): those events are unknown and in no figure."""
    n = r.memory.out_of_range
    if not n:
        return ""
    return (f"rank {r.rank}: {n:,} [memory] event{'s' if n != 1 else ''} with values no device has (a total beyond "
            "2**50 bytes or the device's memory, NaN, a device id outside -1..127) not believed")


def _evidence(r: RankResult) -> str:
    m = r.memory
    unknown = f" ({out_of_range(r)})" if m.out_of_range else ""
    return (f"rank {r.rank} ({m.device}): peak allocated {gib(m.peak_allocated_bytes)} "
            f"({m.peak_allocated_pct:.0f} %), peak reserved {gib(m.peak_reserved_bytes)} ({m.peak_reserved_pct:.0f} %) "
            f"of {gib(m.capacity_bytes)}{unknown}")


@rule("memory-near-capacity", "C20", "Device memory near capacity",
      "TensorBoard profiler memory view (> 90 %)",
      lambda c: f"peak reserved or allocated memory > {c.memory_high_pct:g} % of the device's totalGlobalMem",
      DOCS_CHECKPOINT, phase=GENERAL, needs=(MEMORY_STEP,),
      description=("The caching allocator's peak (reserved, or allocated when larger) near the device "
                   "memory: out-of-memory errors and allocator retries are close. It claims no step time "
                   "(gain 0)."),
      fix=("Lower the peak: bf16/fp16 activations (`torch.autocast`), recomputed activations "
           "(`torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`), smaller "
           "micro-batches with gradient accumulation to keep the global batch."))
def memory_near_capacity(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C20: the caching allocator's peak (reserved, or allocated when larger)
    passes ``memory_high_pct`` of the device memory: out-of-memory errors and
    allocator retries (``cudaFree`` and re-allocation) are near. It claims no
    step time (the risk is not measured in time): gain 0."""
    ranks, reason = _measured(result)
    if not ranks:
        return not_checked(reason)
    hits = worst_first([r for r in ranks if peak_pct(r) > cfg.memory_high_pct], peak_pct)
    if not hits:
        w = max(ranks, key=peak_pct)
        return fine(_evidence(w))
    fix = ("# lower the peak: bf16/fp16 activations, recomputed activations, smaller micro-batches\n"
           "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n"
           "    out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
           "# keep the global batch with gradient accumulation (under DDP, inside model.no_sync())")
    worst = hits[0]
    return make_finding(cfg, hits, {},
                        f"Memory near capacity: {peak_pct(worst):.0f} % of {gib(worst.memory.capacity_bytes)} at peak "
                        "(no step time measured at stake)",
                        evidence_lines(hits, _evidence), fix)


def batch_headroom(r: RankResult, cfg: AdviceConfig) -> float:
    """How many times the batch could grow before the peak reaches
    ``memory_high_pct`` of the device, if all of the peak grew with the batch:
    ``memory_high_pct`` % × capacity / max(peak reserved, peak allocated).
    Weights and optimizer state do not grow with the batch, so the real
    headroom is at least this."""
    m = r.memory
    peak = max(m.peak_reserved_bytes, m.peak_allocated_bytes)
    return cfg.memory_high_pct / 100 * m.capacity_bytes / peak if peak > 0 else 0.0


@rule("memory-under-used", "C27", "Device memory under-used while kernels are too small: raise the batch size",
      "SageMaker Debugger BatchSize rule (GPU memory p95 < 70 %); DLProf; with low-sm-occupancy",
      lambda c: (f"peak reserved and allocated memory < {c.memory_low_pct:g} % of the device's totalGlobalMem "
                 "and low-sm-occupancy fired on the rank"), DOCS_TUNING, phase=GENERAL, needs=(MEMORY_STEP,),
      description=("The memory peak stays low while `low-sm-occupancy` fired on the same rank: a larger "
                   "batch would fill both. The time at stake is `low-sm-occupancy`'s, so this finding claims "
                   "none (gain 0)."),
      fix=("Raise the batch size toward the headroom the finding gives (to the "
           "`memory-near-capacity` threshold), and scale the learning rate with it (linear or "
           "square-root rule), then re-check convergence."))
def memory_under_used(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C27 (C20's other half): the peak stays under ``memory_low_pct`` of the
    device memory while low-sm-occupancy fired on the same rank: a larger
    batch fills both. The headroom is :func:`batch_headroom`. The time at
    stake is low-sm-occupancy's, so this finding claims none: gain 0."""
    ranks, reason = _measured(result)
    if not ranks:
        return not_checked(reason)
    low = [r for r in ranks if peak_pct(r) < cfg.memory_low_pct]
    if not low:
        w = min(ranks, key=peak_pct)
        return fine(f"peak memory at least {peak_pct(w):.0f} % of the device (rank {w.rank})")
    small = fired.fired("low-sm-occupancy")
    hits: List[RankResult] = sorted([r for r in low if r.rank in small], key=peak_pct)
    if not hits:
        w = min(low, key=peak_pct)
        return fine(f"memory under-used ({peak_pct(w):.0f} % of the device on rank {w.rank}), but low-sm-occupancy "
                    "did not fire (kernels with fewer blocks than SMs leave under its threshold of the step idle): "
                    "nothing says a larger batch would use the GPU better")
    worst = hits[0]
    k = batch_headroom(worst, cfg)
    evidence = evidence_lines(hits, lambda r: f"{_evidence(r)}; batch could grow at least "
                                              f"{batch_headroom(r, cfg):.1f}× before {cfg.memory_high_pct:g} %")
    fix = (f"# the peak leaves room for a batch at least {k:.1f}x larger (to {cfg.memory_high_pct:g} % of the device):\n"
           f"loader = DataLoader(dataset, batch_size={max(2, int(k))} * batch_size, ...)\n"
           "# scale the learning rate with it (linear or square-root rule) and re-check convergence")
    return make_finding(cfg, hits, {},
                        f"Raise the batch size: memory peaks at {peak_pct(worst):.0f} % of the device while kernels "
                        f"leave SMs idle (room for at least {k:.1f}× the batch)",
                        evidence, fix)
