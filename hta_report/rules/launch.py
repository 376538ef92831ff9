"""Launch and host rules: C9 launch-bound, C10 launch outliers, C11 full launch queue, C26 host-bound."""
from __future__ import annotations

from ..model import LAUNCH_STEP, AnalysisResult, RankResult
from .base import (DOCS_COMPILE, DOCS_HTA_COUNTERS, DOCS_HTA_LAUNCH, GENERAL, Fired, Verdict, covered_by, fine,
                   make_finding, ms, not_checked, of_step, pct_of_step, per, rule)
from .config import AdviceConfig


def _launching(result: AnalysisResult):
    return [r for r in result.ranks if r.has_gpu and r.launch.launches > 0]


def short_kernel_pct(r: RankResult) -> float:
    """% of launches whose GPU work is shorter than the launch call (HTA)."""
    return 100 * r.launch.short_kernels / r.launch.launches if r.launch.launches else 0.0


@rule("launch-bound", "C9", "Launch-bound: the GPU waits between back-to-back kernel launches",
      "XProf kernel launch 3 % / 15 %; HTA launch-delay cutoff 100 µs",
      lambda c: (f"GPU idle in gaps < 100 µs between launches >= {c.launch_pct:g} % of the step and "
                 f">= {c.short_kernel_pct:g} % of kernels shorter than their launch"), DOCS_COMPILE, needs=(LAUNCH_STEP,))
def launch_bound(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C9: the GPU idles in short gaps (under HTA's 100 µs launch-delay
    cutoff) while the host runs ops and launch calls, or between queued
    kernels (HTA's kernel wait), and enough kernels are shorter than their
    launch call (HTA's short-kernel test): per-kernel launch overhead, which
    CUDA graphs and kernel fusion remove. Long gaps while the host runs ops are a
    host-bound step instead (``host-bound``); the evidence gives both, with
    the host time in launch calls, so the two can be told apart."""
    ranks = _launching(result)
    if not ranks:
        return not_checked("no kernel launches (cuda_runtime) with GPU activity in the traces")
    val = {r.rank: pct_of_step(r.idle_attribution.launch_us, r) for r in ranks}
    hits = sorted([r for r in ranks if val[r.rank] >= cfg.launch_pct and short_kernel_pct(r) >= cfg.short_kernel_pct],
                  key=lambda r: -val[r.rank])
    if not hits:
        w = max(ranks, key=lambda r: val[r.rank])
        return fine(f"GPU idle between back-to-back launches up to {val[w.rank]:.1f} % {of_step(w)}; "
                    f"{short_kernel_pct(w):.0f} % of kernels shorter than their launch")
    worst = hits[0]
    evidence = [f"rank {r.rank}: {r.launch.kernels_per_step:,.0f} kernels {per(r)}, median {r.launch.median_kernel_us:.1f} µs; "
                f"{short_kernel_pct(r):.0f} % shorter than their launch call (median launch "
                f"{r.launch.median_runtime_us:.1f} µs, HTA); the GPU idles {ms(r.idle_attribution.launch_us)} {per(r)} "
                f"({val[r.rank]:.1f} %) in gaps under 100 µs between launches, against "
                f"{ms(r.idle_attribution.host_ops_us)} in longer gaps while the host runs ops; host time in launch "
                f"calls {ms(r.launch.launch_call_us_per_step)} {per(r)}" for r in hits[:8]]
    fix = ("model = torch.compile(model, mode=\"reduce-overhead\")  # fuses kernels, replays them as a CUDA graph\n"
           "# or raise the batch size so each kernel does more work; fused optimizers: AdamW(..., fused=True)")
    claims = {r.rank: fired.take(r, ["idle:launch"], r.idle_attribution.launch_us) for r in hits}
    return make_finding(cfg, hits, claims,
                        f"Launch-bound: the GPU waits between kernel launches {val[worst.rank]:.0f} % {of_step(worst)}",
                        evidence, fix)


@rule("host-bound", "C26", "Host-bound: the GPU waits while the host runs its own work",
      "TensorBoard profiler CPU Exec category; XProf host-bound; threshold: proposal",
      lambda c: (f"GPU idle in gaps >= 100 µs while the host runs ops or annotated code >= {c.host_bound_pct:g} % "
                 "of the step"), DOCS_COMPILE, phase=GENERAL, needs=(LAUNCH_STEP,))
def host_bound(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C26: the GPU idles in gaps of 100 µs or more while the host runs CPU
    ops, Python or annotated code (not DataLoader, copies, synchronization,
    the optimizer or slow launch calls, which earlier rules claim): the host's
    own work per step outlasts the GPU's, so the GPU runs dry. The host time
    in kernel launch calls (small against this idle) tells it apart from
    launch overhead (C9)."""
    ranks = [r for r in result.ranks if r.has_gpu and r.steps_used and r.window_us > 0]
    if not ranks:
        return not_checked("no GPU activity in the traces")
    claims = {r.rank: fired.take(r, ["idle:host_ops"], r.idle_attribution.host_ops_us) for r in ranks}
    gain = {r.rank: sum(claims[r.rank].values()) for r in ranks}
    hits = sorted([r for r in ranks if pct_of_step(gain[r.rank], r) >= cfg.host_bound_pct],
                  key=lambda r: -pct_of_step(gain[r.rank], r))
    if not hits:
        w = max(ranks, key=lambda r: pct_of_step(r.idle_attribution.host_ops_us, r))
        return fine(f"GPU idle in long gaps while the host runs ops up to "
                    f"{pct_of_step(w.idle_attribution.host_ops_us, w):.1f} % {of_step(w)}"
                    + (f" (claimed by {', '.join(fired.claimers(w.rank, ['idle:host_ops']))})"
                       if fired.claimers(w.rank, ["idle:host_ops"]) else ""))
    worst = hits[0]
    evidence = []
    for r in hits[:8]:
        top = ", ".join(f"{o.name[:60]} {ms(o.self_us / max(r.cpu.steps_used, 1))}" for o in r.cpu.top_ops[:3])
        evidence.append(f"rank {r.rank}: the GPU idles {ms(gain[r.rank])} {per(r)} "
                        f"({pct_of_step(gain[r.rank], r):.1f} % {of_step(r)}) in gaps of 100 µs or more while the host "
                        f"runs ops; host time in kernel launch calls only {ms(r.launch.launch_call_us_per_step)} "
                        f"{per(r)} ({r.launch.kernels_per_step:,.0f} kernels): the host's own work, not launching, "
                        f"holds the GPU; top host ops by self time {per(r)}: {top or 'none'}")
        for g in [g for g in r.idle_attribution.gaps if g.cause == "host_ops"][:2]:
            where = f"step {g.step}" if g.step else "trace"
            evidence.append(f"rank {r.rank}, {where}: {ms(g.duration_us)} without GPU work while the host ran "
                            f"{', '.join(g.host_ops) or 'unprofiled code'}")
    fix = ("# move CPU work off the training step: preprocessing into DataLoader workers,\n"
           "# per-step Python bookkeeping out of the loop or every N steps;\n"
           "model = torch.compile(model)   # less Python and framework overhead per op\n"
           "# keep per-step work on the GPU (no CPU tensors or .numpy() in the step)")
    return make_finding(cfg, hits, {r.rank: claims[r.rank] for r in hits},
                        f"Host-bound: the GPU waits {pct_of_step(gain[worst.rank], worst):.0f} % {of_step(worst)} "
                        "while the host runs its own work", evidence, fix)


def outlier_cost_us(r: RankResult) -> float:
    """Per step (µs), the time slow launch calls spent beyond the median
    launch, at most the GPU idle in long gaps while the host runs ops: a slow
    launch costs nothing while the GPU still has queued work."""
    return min(r.launch.runtime_excess_us_per_step, r.idle_attribution.host_ops_us)


@rule("launch-outliers", "C10", "Slow kernel launch calls",
      "HTA runtime cutoff 50 µs; cost share: proposal",
      lambda c: f"launch calls > 50 µs costing >= {c.launch_outlier_pct:g} % of the step", DOCS_HTA_LAUNCH, needs=(LAUNCH_STEP,))
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
        w = max(ranks, key=lambda r: val[r.rank])
        return fine(f"{sum(r.launch.kernel_runtime_outliers for r in ranks)} kernel launch calls > 50 µs "
                    f"(one-off warm-up launches left out), up to {val[w.rank]:.1f} % {of_step(w)} beyond the "
                    "median launch")
    worst = hits[0]
    claims = {r.rank: fired.take(r, ["idle:host_ops"], outlier_cost_us(r)) for r in hits}
    if not any(claims.values()):
        return covered_by(fired, hits, ["idle:host_ops"], f"slow kernel launch calls cost {val[worst.rank]:.1f} % "
                          f"{of_step(worst)}")
    evidence = [f"rank {r.rank}: {r.launch.kernel_runtime_outliers} kernel launch calls in the analyzed steps > "
                f"{r.launch.runtime_cutoff_us:.0f} µs (HTA cutoff), {ms(r.launch.runtime_excess_us_per_step)} {per(r)} beyond "
                f"the median launch ({r.launch.median_runtime_us:.1f} µs) while the GPU idles "
                f"{ms(r.idle_attribution.host_ops_us)} {per(r)} during host ops; {r.launch.delay_outliers} launch delays > "
                f"{r.launch.launch_delay_cutoff_us:.0f} µs" for r in hits[:8]]
    fix = ("# slow launch calls usually mean CPU contention: one rank per GPU with its own cores,\n"
           "torch.set_num_threads(cores_per_rank)   # and OMP_NUM_THREADS=cores_per_rank\n"
           "# keep DataLoader workers below the free cores; warm up (first launches load modules) before profiling")
    return make_finding(cfg, hits, claims,
                        f"Kernel launch calls take too long: {val[worst.rank]:.1f} % {of_step(worst)} in slow launches",
                        evidence, fix)


@rule("full-launch-queue", "C11", "GPU-bound: the launch queue is full",
      "HTA queue limit 1024; 'a significant time': proposal",
      lambda c: f"a stream at 1024 outstanding operations >= {c.full_queue_pct:g} % of the trace", DOCS_HTA_COUNTERS, needs=(LAUNCH_STEP,))
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
    return make_finding(cfg, hits, {},
                        f"GPU-bound: the launch queue is full {worst.launch.full_queue_pct:.0f} % of the time",
                        evidence, fix)
