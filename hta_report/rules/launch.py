"""Launch and host rules: C9 launch-bound, C10 launch outliers, C11 full launch queue, C26 host-bound."""
from __future__ import annotations

from typing import List

from ..model import LAUNCH_STEP, AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_COMPILE, DOCS_HTA_COUNTERS, DOCS_HTA_LAUNCH, EVIDENCE_RANKS, GENERAL, Fired, Verdict, claim,
                   evidence_lines, fine, largest, make_finding, ms, not_checked, of_step, pct_of_step, per, per_step,
                   rule, shares_over, step_shares, up_to, worst_first)
from .config import AdviceConfig
from .wording import specific, unreplayed


def _launching(result: AnalysisResult) -> List[RankResult]:
    return [r for r in result.ranks if r.has_gpu and r.launch.launches > 0]


#: Share (%) of a rank's kernels that its direct launch calls (kernel and copy launches, graph
#: launches aside: ``Integrity.launches``) account for, under which, with a graph launch in the
#: trace, its kernels are a CUDA graph's replay: the gaps between them are the graph's own (a few
#: µs between its nodes), not launch overhead, and a graph is already the fix (a field L40 decode:
#: 1,389 kernels from one cudaGraphLaunch and 6 direct launches).
GRAPH_REPLAYED_PCT = 10.0


def graph_replayed(r: RankResult) -> bool:
    """Whether ``r``'s kernels are mostly a CUDA/HIP graph's replay (:data:`GRAPH_REPLAYED_PCT`)."""
    i = r.integrity
    return i.graph_launches > 0 and r.kernel_count > 0 and 100 * i.launches < GRAPH_REPLAYED_PCT * r.kernel_count


def short_kernel_pct(r: RankResult) -> float:
    """% of launches whose GPU work is shorter than the launch call (HTA)."""
    return 100 * r.launch.short_kernels / r.launch.launches if r.launch.launches else 0.0


@rule("launch-bound", "C9", "Launch-bound: the GPU waits between back-to-back kernel launches",
      "XProf kernel launch 3 % / 15 %; HTA launch-delay cutoff 100 µs",
      lambda c: (f"GPU idle in gaps < 100 µs between launches >= {c.launch_pct:g} % of the step and "
                 f">= {c.short_kernel_pct:g} % of kernels shorter than their launch"), DOCS_COMPILE, needs=(LAUNCH_STEP,),
      description=("The GPU idles in many short gaps (under HTA's 100 µs launch-delay cutoff) between "
                   "back-to-back kernels, and enough kernels are shorter than their launch call: per-kernel "
                   "launch overhead. Long gaps while the host runs its own ops are `host-bound` instead."),
      fix=('Launch fewer, larger kernels: `torch.compile(model, mode="reduce-overhead")` (fusion and '
           "CUDA graphs), a larger batch, fused optimizers (`AdamW(..., fused=True)`)."),
      edit=EditLabel.CUDA_GRAPH, evidence=('launch',))
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
    val, over = shares_over(ranks, lambda r: r.idle_attribution.launch_us, cfg.launch_pct)
    hits = [r for r in over if short_kernel_pct(r) >= cfg.short_kernel_pct and not graph_replayed(r)]
    if not hits and any(graph_replayed(r) for r in over):
        w = next(r for r in over if graph_replayed(r))
        return fine(f"rank {w.rank}'s {w.kernel_count:,} kernels are a CUDA graph's replay "
                    f"({w.integrity.graph_launches:,} graph launch{'es' if w.integrity.graph_launches != 1 else ''}, "
                    f"{w.integrity.launches:,} direct launches): the short gaps between them "
                    f"({up_to([w], val)}) are the graph's own, not launch overhead")
    if not hits:
        w = largest(ranks, val)
        return fine(f"GPU idle between back-to-back launches {up_to([w], val)}; {short_kernel_pct(w):.0f} % of "
                    "kernels shorter than their launch")
    c = claim(fired, hits, ["idle:launch"], lambda r: r.idle_attribution.launch_us,
              f"GPU idle between back-to-back launches {val[hits[0].rank]:.1f} % {of_step(hits[0])}")
    fix = ("model = torch.compile(model, mode=\"reduce-overhead\")  # fuses kernels, replays them as a CUDA graph\n"
           "# or raise the batch size so each kernel does more work; fused optimizers: AdamW(..., fused=True)")
    if loop_driven(c.worst):
        fix = LOOP_FIX
    elif dynamic_shapes(c.worst):
        fix = DYNAMIC_FIX
    return c.verdict(cfg, f"Launch-bound: the GPU waits between kernel launches {val[c.worst.rank]:.0f} % "
                          f"{of_step(c.worst)}", evidence_lines(c.hits, _launch_bound_evidence), fix)


#: launch-bound's fix where its launches come from a Python loop over elements (:func:`loop_driven`): the
#: same for every workload, and without the CUDA-graph what-if, which is not its fix (:func:`~.wording.unreplayed`).
LOOP_FIX = unreplayed("# the launches come from a Python loop over a tensor's elements: one op over the whole tensor\n"
                    "total = x.sum()            # not: for i in range(len(x)): total += x[i]\n"
                    "values = x.cpu().tolist()  # one copy, not x[i].item() / x[i].cpu() per element\n"
                    "# a CUDA graph or torch.compile would replay the same tiny per-element kernels")
#: Share of the step (%) the host spends in Python loops over elements
#: (``CodePatterns.loop_us_per_step``) from which launch-bound names the loop
#: as where its launches come from: past half the step, most launches are the
#: loop's, and vectorizing it (one kernel for all elements) removes them, where
#: a CUDA graph would replay the same per-element kernels.
LOOP_DRIVEN_PCT = 50.0


#: Synchronization kinds that give the host a size the next launches depend on
#: (:mod:`hta_report.analysis.sync_kinds`): a graph of the step cannot be captured as is.
DYNAMIC_SYNC_KINDS = ("shape", "splits")
#: launch-bound's fix where the step reads data-dependent sizes: without the CUDA-graph what-if, which
#: replays one static graph of the step (:func:`~.wording.unreplayed`).
DYNAMIC_FIX = unreplayed(
    "# the step reads data-dependent sizes on the host (all-to-all splits, nonzero, unique): one CUDA graph\n"
    "# of the step cannot be captured as is. Fuse the small kernels instead, and capture the static part:\n"
    "model.dense = torch.compile(model.dense, mode=\"reduce-overhead\")   # e.g. the dense layers, fixed shapes\n"
    "# or pad to fixed sizes (static splits, a capacity factor), or give each launch more work (a larger batch)")


def dynamic_shapes(r: RankResult) -> bool:
    """Whether rank ``r``'s step reads sizes its next launches depend on
    (:data:`DYNAMIC_SYNC_KINDS`, at least once per step)."""
    return any(k.kind in DYNAMIC_SYNC_KINDS and k.per_step >= 1 for k in r.cpu.sync_kinds)


def loop_driven(r: RankResult) -> bool:
    """True when Python loops over elements hold at least
    :data:`LOOP_DRIVEN_PCT` of rank ``r``'s step on the host."""
    return r.patterns.loop_us_per_step > 0 and pct_of_step(r.patterns.loop_us_per_step, r) >= LOOP_DRIVEN_PCT


def _launch_bound_evidence(r: RankResult) -> str:
    loop = (f"; the launches come from Python loops over elements: {r.patterns.loop_iterations:,} iterations or "
            f"more, {ms(r.patterns.loop_us_per_step)} of host time {per(r)} "
            f"({pct_of_step(r.patterns.loop_us_per_step, r):.0f} % {of_step(r)})" if loop_driven(r) else "")
    return (f"rank {r.rank}: {r.launch.kernels_per_step:,.0f} kernels {per(r)}, median "
            f"{r.launch.median_kernel_us:.1f} µs; {short_kernel_pct(r):.0f} % shorter than their launch call (median "
            f"launch {r.launch.median_runtime_us:.1f} µs, {r.launch.launch_source or 'HTA'}); the GPU idles {ms(r.idle_attribution.launch_us)} "
            f"{per(r)} ({pct_of_step(r.idle_attribution.launch_us, r):.1f} %) in gaps under 100 µs between launches, "
            f"against {ms(r.idle_attribution.host_ops_us)} in longer gaps while the host runs ops; host time in "
            f"launch calls {ms(r.launch.launch_call_us_per_step)} {per(r)}{loop}")


@rule("host-bound", "C26", "Host-bound: the GPU waits while the host runs its own work",
      "TensorBoard profiler CPU Exec category; XProf host-bound; threshold: proposal",
      lambda c: (f"GPU idle in gaps >= 100 µs while the host runs ops or annotated code >= {c.host_bound_pct:g} % "
                 "of the step"), DOCS_COMPILE, phase=GENERAL, needs=(LAUNCH_STEP,),
      description=("The GPU idles in gaps of 100 µs or more while the host runs its own CPU ops, Python or "
                   "annotated code (not data loading, copies, synchronization, the optimizer or slow launch "
                   "calls, which other rules claim): the host's work per step outlasts the GPU's. The host "
                   "time in launch calls, small against this idle, tells it apart from `launch-bound`."),
      fix=("Move CPU work off the training step: preprocessing into DataLoader workers, per-step "
           "Python bookkeeping out of the loop or every N steps, no CPU tensors or `.numpy()` in the "
           "step; `torch.compile(model)` cuts Python and framework overhead per op."), evidence=('host_ops',))
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
    c = claim(fired, ranks, ["idle:host_ops"], lambda r: r.idle_attribution.host_ops_us)
    gain = step_shares(ranks, c.us)
    hits = worst_first([r for r in c.hits if gain[r.rank] >= cfg.host_bound_pct], lambda r: gain[r.rank])
    if not hits:
        w = largest(ranks, step_shares(ranks, lambda r: r.idle_attribution.host_ops_us))
        by = fired.claimers(w.rank, ["idle:host_ops"])
        return fine(f"GPU idle in long gaps while the host runs ops up to "
                    f"{pct_of_step(w.idle_attribution.host_ops_us, w):.1f} % {of_step(w)}"
                    + (f" (claimed by {', '.join(by)})" if by else ""))
    worst = hits[0]
    evidence: List[str] = []
    for r in hits[:EVIDENCE_RANKS]:
        # ops, not annotations: an annotation's self time is what no recorded op covered inside it
        ops = [o for o in r.cpu.top_ops if o.category != "user_annotation"]
        top = ", ".join(f"{o.name[:60]} {ms(per_step(o.self_us, r.cpu.steps_used))}" for o in ops[:3])
        evidence.append(f"rank {r.rank}: the GPU idles {ms(c.us(r))} {per(r)} "
                        f"({gain[r.rank]:.1f} % {of_step(r)}) in gaps of 100 µs or more while the host "
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
    if cpu_random_led(worst, c.us(worst)):
        fix = specific(CPU_RANDOM_FIX)
    elif sleep_led(worst):
        fix = specific(SLEEP_FIX)
    return make_finding(cfg, hits, {r.rank: c.claims[r.rank] for r in hits},
                        f"Host-bound: the GPU waits {gain[worst.rank]:.0f} % {of_step(worst)} "
                        "while the host runs its own work", evidence, fix)


#: The share (%) of the host-bound idle the CPU random ops' self time must reach to name them as the fix.
CPU_RANDOM_SHARE_PCT = 25.0
CPU_RANDOM_FIX = (
    "# the host draws random tensors on the CPU (the aten::normal_/uniform_/rand* ops above) and copies\n"
    "# them to the GPU: draw them on the GPU, where the same tensor takes microseconds\n"
    "x = torch.randn(shape, device=\"cuda\")   # not torch.randn(shape).to(\"cuda\")\n"
    "# inputs that must come from the CPU: make them once, before the loop, not in every step")


def cpu_random_led(r: RankResult, idle_us: float) -> bool:
    """Whether host ops drawing random tensors on the CPU (``CpuSide.host_random_us``:
    random-draw ops that launched no GPU work; a ``torch.randn(..., device="cuda")``
    launches its kernel and is not one) take at least :data:`CPU_RANDOM_SHARE_PCT`
    of ``idle_us`` (the GPU's host-bound idle per step, µs)."""
    us = per_step(r.cpu.host_random_us, r.cpu.steps_used)
    return idle_us > 0 and us >= idle_us * CPU_RANDOM_SHARE_PCT / 100


#: Python frames of a host that sleeps (``time.sleep``): it waits on purpose, running no work.
SLEEP_FRAMES = ("<built-in function sleep>", "time.sleep")
SLEEP_FIX = (
    "# the host sleeps (time.sleep) while the GPU has nothing queued: take the sleep out of the loop;\n"
    "# to pace the host behind the GPU, wait on an event instead of a fixed time:\n"
    "done = torch.cuda.Event(); done.record(); done.synchronize()")


def sleep_led(r: RankResult) -> bool:
    """Whether at least half of rank ``r``'s listed host-ops gaps' time
    (``IdleAttribution.gaps`` with cause ``host_ops``) ran a ``time.sleep``
    (:data:`SLEEP_FRAMES` among the gap's host ops)."""
    gaps = [g for g in r.idle_attribution.gaps if g.cause == "host_ops"]
    total = sum(g.duration_us for g in gaps)
    asleep = sum(g.duration_us for g in gaps if any(n in SLEEP_FRAMES for n in g.host_ops))
    return total > 0 and asleep >= 0.5 * total


def outlier_cost_us(r: RankResult) -> float:
    """Per step (µs), the time slow kernel launch calls spent beyond the median
    kernel launch call, at most the GPU idle in long gaps while the host runs ops: a slow
    launch costs nothing while the GPU still has queued work."""
    return min(r.launch.runtime_excess_us_per_step, r.idle_attribution.host_ops_us)


@rule("launch-outliers", "C10", "Slow kernel launch calls",
      "HTA runtime cutoff 50 µs; cost share: proposal",
      lambda c: f"launch calls > 50 µs costing >= {c.launch_outlier_pct:g} % of the step", DOCS_HTA_LAUNCH, needs=(LAUNCH_STEP,),
      description=("Kernel launch calls (`cudaLaunchKernel`...) slower than HTA's 50 µs cutoff, beyond the "
                   "median kernel launch call. Copy calls are left out (they wait by design), and so are ranks whose "
                   "launch queue is full (there the GPU is the bottleneck)."),
      fix=("Slow launch calls usually mean CPU contention: one rank per GPU with its own cores, "
           "`torch.set_num_threads(cores_per_rank)` (and `OMP_NUM_THREADS`), DataLoader workers "
           "below the free cores; warm up before profiling (the first launches load modules)."))
def launch_outliers(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C10: kernel launch calls (``cudaLaunchKernel``...) longer than HTA's
    50 µs cutoff (:func:`outlier_cost_us`). Copy calls are left out: they wait
    for the GPU by design (C3-C5); so are ranks whose launch queue is full
    (C11): there a launch call blocks because the GPU is the bottleneck."""
    ranks = _launching(result)
    if not ranks:
        return not_checked("no kernel launches (cuda_runtime) with GPU activity in the traces")
    val, over = shares_over(ranks, outlier_cost_us, cfg.launch_outlier_pct)
    hits = [r for r in over if r.launch.kernel_runtime_outliers and r.launch.full_queue_pct < cfg.full_queue_pct]
    if not hits:
        return fine(f"{sum(r.launch.kernel_runtime_outliers for r in ranks)} kernel launch calls > 50 µs "
                    f"(one-off warm-up launches left out), {up_to(ranks, val)} beyond the median kernel launch")
    c = claim(fired, hits, ["idle:host_ops"], outlier_cost_us,
              f"slow kernel launch calls cost {val[hits[0].rank]:.1f} % {of_step(hits[0])}")
    return c.verdict(cfg, f"Kernel launch calls take too long: {val[c.worst.rank]:.1f} % {of_step(c.worst)} in slow "
                          "launches", evidence_lines(c.hits, _outlier_evidence), OUTLIER_FIX)


OUTLIER_FIX = ("# slow launch calls usually mean CPU contention: one rank per GPU with its own cores,\n"
               "torch.set_num_threads(cores_per_rank)   # and OMP_NUM_THREADS=cores_per_rank\n"
               "# keep DataLoader workers below the free cores; warm up (first launches load modules) before "
               "profiling")


def _outlier_evidence(r: RankResult) -> str:
    n = r.launch
    return (f"rank {r.rank}: {n.kernel_runtime_outliers} kernel launch calls in the analyzed steps > "
            f"{n.runtime_cutoff_us:.0f} µs (HTA cutoff), {ms(n.runtime_excess_us_per_step)} {per(r)} beyond the "
            f"median kernel launch ({n.median_kernel_launch_us:.1f} µs) while the GPU idles "
            f"{ms(r.idle_attribution.host_ops_us)} {per(r)} during host ops; {n.delay_outliers} launch delays > {n.launch_delay_cutoff_us:.0f} µs")


@rule("full-launch-queue", "C11", "GPU-bound: the launch queue is full",
      "HTA queue limit 1024; 'a significant time': proposal",
      lambda c: f"a stream at 1024 outstanding operations >= {c.full_queue_pct:g} % of the trace", DOCS_HTA_COUNTERS, needs=(LAUNCH_STEP,),
      description=("A stream's launch queue at HTA's limit (1024 outstanding operations) for a share of the "
                   "trace: the host blocks on launches because the GPU is the bottleneck. No host-side gain "
                   "exists (the estimate is 0)."),
      fix=("The host is ahead of the GPU: make the kernels faster (`torch.compile(model)` for "
           'fusion, `torch.autocast(device_type="cuda", dtype=torch.bfloat16)` for Tensor Cores).'))
def full_launch_queue(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C11: a stream's launch queue at HTA's limit (1024) for ``full_queue_pct``
    of the trace: the host blocks on launches, the GPU is the bottleneck. No
    host-side gain exists (the estimate is 0): speed comes from faster kernels."""
    ranks = [r for r in _launching(result) if r.launch.queue]
    if not ranks:
        return not_checked("no queue length data (needs kernel launches with correlation ids)")
    hits = worst_first([r for r in ranks if r.launch.full_queue_pct >= cfg.full_queue_pct],
                       lambda r: r.launch.full_queue_pct)
    if not hits:
        return fine(f"max queue length {max(q.max for r in ranks for q in r.launch.queue):.0f} "
                    f"(limit {ranks[0].launch.queue_limit})")
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: a stream held >= {r.launch.queue_limit} outstanding operations for "
        f"{ms(r.launch.full_queue_us)} ({r.launch.full_queue_pct:.1f} % of the trace)"))
    evidence.append("no host-side gain: the GPU is the bottleneck; see the top kernels")
    fix = ("# the host is ahead of the GPU: make the kernels faster\n"
           "model = torch.compile(model)   # fusion\n"
           "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16): ...   # Tensor Cores")
    return make_finding(cfg, hits, {}, f"GPU-bound: the launch queue is full {hits[0].launch.full_queue_pct:.0f} % "
                                       "of the time", evidence, fix)
