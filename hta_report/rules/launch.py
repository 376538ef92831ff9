"""Launch rules: C9 launch-bound, C10 launch outliers, C11 full launch queue."""
from __future__ import annotations

from ..model import AnalysisResult, RankResult
from .base import (Fired, DOCS_COMPILE, DOCS_HTA_COUNTERS, DOCS_HTA_LAUNCH, Verdict, fine, make_finding, ms,
                   not_checked, pct_of_step, per, rule)
from .config import AdviceConfig


def _launching(result: AnalysisResult):
    return [r for r in result.ranks if r.has_gpu and r.launch.launches > 0]


def short_kernel_pct(r: RankResult) -> float:
    """% of launches whose GPU work is shorter than the launch call (HTA)."""
    return 100 * r.launch.short_kernels / r.launch.launches if r.launch.launches else 0.0


@rule("launch-bound", "C9", "Launch-bound: many small kernels, the GPU waits for launches",
      "XProf kernel launch 3 % / 15 %; HTA short-kernel test (share: proposal)",
      lambda c: (f"GPU idle while the host runs ops >= {c.launch_pct:g} % of the step and "
                 f">= {c.short_kernel_pct:g} % of kernels shorter than their launch"), DOCS_COMPILE)
def launch_bound(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C9: the GPU idles while the host executes ops and launch calls (not
    DataLoader, copies, synchronization or the optimizer), and most kernels
    are shorter than their launch call: per-kernel host overhead bounds the step."""
    ranks = _launching(result)
    if not ranks:
        return not_checked("no kernel launches (cuda_runtime) with GPU activity in the traces")
    val = {r.rank: pct_of_step(r.idle_attribution.host_ops_us, r) for r in ranks}
    hits = sorted([r for r in ranks if val[r.rank] >= cfg.launch_pct and short_kernel_pct(r) >= cfg.short_kernel_pct],
                  key=lambda r: -val[r.rank])
    if not hits:
        w = max(ranks, key=lambda r: val[r.rank])
        return fine(f"GPU idle during host ops up to {val[w.rank]:.1f} % of the step; "
                    f"{short_kernel_pct(w):.0f} % of kernels shorter than their launch")
    worst = hits[0]
    evidence = [f"rank {r.rank}: {r.launch.kernels_per_step:,.0f} kernels {per(r)}, median {r.launch.median_kernel_us:.1f} µs; "
                f"{short_kernel_pct(r):.0f} % shorter than their launch call (median launch "
                f"{r.launch.median_runtime_us:.1f} µs, HTA); GPU idle while the host runs ops "
                f"{ms(r.idle_attribution.host_ops_us)} {per(r)} ({val[r.rank]:.1f} %)" for r in hits[:8]]
    fix = ("model = torch.compile(model, mode=\"reduce-overhead\")  # fuses kernels, replays them as a CUDA graph\n"
           "# or raise the batch size so each kernel does more work; fused optimizers: AdamW(..., fused=True)")
    return make_finding(cfg, worst, worst.idle_attribution.host_ops_us,
                        f"Launch-bound: the GPU waits for kernel launches {val[worst.rank]:.0f} % of the step",
                        evidence, fix, [r.rank for r in hits])


def outlier_cost_us(r: RankResult) -> float:
    """Per step (µs), the time slow launch calls spent beyond the median
    launch, at most the GPU idle while the host runs ops: a slow launch costs
    nothing while the GPU still has queued work."""
    return min(r.launch.runtime_excess_us_per_step, r.idle_attribution.host_ops_us)


@rule("launch-outliers", "C10", "Slow kernel launch calls",
      "HTA runtime cutoff 50 µs; cost share: proposal",
      lambda c: f"launch calls > 50 µs costing >= {c.launch_outlier_pct:g} % of the step", DOCS_HTA_LAUNCH)
def launch_outliers(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C10: kernel launch calls (``cudaLaunchKernel``...) longer than HTA's
    50 µs cutoff (:func:`outlier_cost_us`). Copy calls are left out: they wait
    for the GPU by design (C3-C5); so are ranks whose launch queue is full
    (C11): there a launch call blocks because the GPU is the bottleneck."""
    ranks = _launching(result)
    if not ranks:
        return not_checked("no kernel launches (cuda_runtime) with GPU activity in the traces")
    val = {r.rank: pct_of_step(outlier_cost_us(r), r) for r in ranks}
    hits = sorted([r for r in ranks if r.launch.kernel_runtime_outliers and val[r.rank] >= cfg.launch_outlier_pct
                   and r.launch.full_queue_pct < cfg.full_queue_pct], key=lambda r: -val[r.rank])
    if not hits:
        return fine(f"{sum(r.launch.kernel_runtime_outliers for r in ranks)} kernel launch calls > 50 µs, "
                    f"up to {max(val.values()):.1f} % of the step beyond the median launch")
    worst = hits[0]
    evidence = [f"rank {r.rank}: {r.launch.kernel_runtime_outliers} kernel launch calls in the analyzed steps > "
                f"{r.launch.runtime_cutoff_us:.0f} µs (HTA cutoff), {ms(r.launch.runtime_excess_us_per_step)} {per(r)} beyond "
                f"the median launch ({r.launch.median_runtime_us:.1f} µs) while the GPU idles "
                f"{ms(r.idle_attribution.host_ops_us)} {per(r)} during host ops; {r.launch.delay_outliers} launch delays > "
                f"{r.launch.launch_delay_cutoff_us:.0f} µs" for r in hits[:8]]
    fix = ("# slow launch calls usually mean CPU contention: one rank per GPU with its own cores,\n"
           "torch.set_num_threads(cores_per_rank)   # and OMP_NUM_THREADS=cores_per_rank\n"
           "# keep DataLoader workers below the free cores; warm up (first launches load modules) before profiling")
    return make_finding(cfg, worst, outlier_cost_us(worst),
                        f"Kernel launch calls take too long: {val[worst.rank]:.1f} % of the step in slow launches",
                        evidence, fix, [r.rank for r in hits])


@rule("full-launch-queue", "C11", "GPU-bound: the launch queue is full",
      "HTA queue limit 1024; 'a significant time': proposal",
      lambda c: f"a stream at 1024 outstanding operations >= {c.full_queue_pct:g} % of the trace", DOCS_HTA_COUNTERS)
def full_launch_queue(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C11: a stream's launch queue at HTA's limit (1024) for ``full_queue_pct``
    of the trace: the host blocks on launches, the GPU is the bottleneck. No
    host-side gain exists (the estimate is 0): speed comes from faster kernels."""
    ranks = [r for r in _launching(result) if r.launch.queue]
    if not ranks:
        return not_checked("no queue length data (needs kernel launches with correlation ids)")
    hits = sorted([r for r in ranks if r.launch.full_queue_pct >= cfg.full_queue_pct],
                  key=lambda r: -r.launch.full_queue_pct)
    if not hits:
        return fine(f"max queue length {max(q.max for r in ranks for q in r.launch.queue):.0f} "
                    f"(limit {ranks[0].launch.queue_limit})")
    worst = hits[0]
    evidence = [f"rank {r.rank}: a stream held >= {r.launch.queue_limit} outstanding operations for "
                f"{ms(r.launch.full_queue_us)} ({r.launch.full_queue_pct:.1f} % of the trace)" for r in hits[:8]]
    evidence.append("no host-side gain: the GPU is the bottleneck; see the top kernels")
    fix = ("# the host is ahead of the GPU: make the kernels faster\n"
           "model = torch.compile(model)   # fusion\n"
           "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16): ...   # Tensor Cores")
    return make_finding(cfg, worst, 0.0,
                        f"GPU-bound: the launch queue is full {worst.launch.full_queue_pct:.0f} % of the time",
                        evidence, fix, [r.rank for r in hits])
