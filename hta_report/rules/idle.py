"""GPU idle rules: C8 queued work waiting (a cause), and the symptoms C6 low
utilization and C7 GPU gaps.

The symptoms run last and count only the idle time that no finding before
them claimed (:mod:`.claims`); at most one of them gives a finding (the
engine keeps the larger), so a symptom never outranks its cause nor counts
the same idle twice.
"""
from __future__ import annotations

from typing import Dict, List

from ..errors import plural
from ..model import IDLE_CAUSE_LABELS, IDLE_CAUSES, LATE_START_US, AnalysisResult, GpuGap, RankResult
from .base import (DOCS_COMPILE, DOCS_HTA_IDLE, SYMPTOM, Fired, Verdict, claim, covered_by, evidence_lines, fine,
                   largest, make_finding, ms, not_checked, of_step, pct_of_step, per, per_step, rule, shares_over,
                   step_shares, up_to, worst_first)
from .claims import IDLE
from .config import AdviceConfig

LABELS = IDLE_CAUSE_LABELS
#: A symptom below this share of the step (%) is noise, not a finding.
MIN_SYMPTOM_PCT = 1.0


def unexplained_pools(r: RankResult, fired: Fired) -> List[str]:
    """The idle pools of rank ``r`` in which no finding claimed any time so
    far: their causes are not named by a finding. Time a finding's cause
    names but its fix does not remove (a category its prediction released,
    :func:`~.base.follow_prediction`) has a specific cause, so it is not
    counted as idle without one."""
    return [p for p in IDLE if not fired.claimers(r.rank, [p])]


def unexplained_idle_us(r: RankResult, fired: Fired) -> float:
    """GPU idle per step (µs) in the categories no finding claimed so far
    (:func:`unexplained_pools`)."""
    return fired.free_in(r, unexplained_pools(r, fired))


def idle_split(r: RankResult, fired: Fired) -> str:
    """``"DataLoader 4.10 ms (dataloader-bound), no profiled host activity 0.20 ms"``:
    the idle categories with the findings that claimed them."""
    a = r.idle_attribution
    parts = []
    for c in IDLE_CAUSES:
        us = getattr(a, f"{c}_us")
        if us >= 1.0:
            by = ", ".join(fired.claimers(r.rank, [f"idle:{c}"]))
            parts.append(f"{LABELS[c]} {ms(us)}" + (f" ({by})" if by else ""))
    return ", ".join(parts) or "none"


def _stepped_gpu(result: AnalysisResult) -> List[RankResult]:
    return [r for r in result.ranks if r.has_gpu and r.steps_used and r.window_us > 0]


def utilization_pct(r: RankResult) -> float:
    """Kernel-busy time as % of the step (TensorBoard's GPU utilization)."""
    return pct_of_step(r.idle_attribution.kernel_busy_us, r)


@rule("low-gpu-utilization", "C6", "Low GPU utilization (kernels busy < half the step)",
      "TensorBoard profiler, Nsight Systems gpu_time_util (50 %)",
      lambda c: f"kernel-busy time < {c.gpu_utilization_pct:g} % of the step; gain: idle no other finding explains",
      DOCS_COMPILE, phase=SYMPTOM,
      description=("Kernels run for less than the threshold share of the step. A symptom: the gain is only "
                   "the idle time that no cause found by another rule explains, and at most one of "
                   "`low-gpu-utilization` and `gpu-gaps` gives a finding."),
      fix=("Give the GPU more work per launch and the host less per iteration: "
           "`torch.compile(model)`, a larger batch if memory allows; the report's idle split shows "
           "where the time goes."), evidence=('any',))
def low_gpu_utilization(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C6: kernels run less than ``gpu_utilization_pct`` of the step. The gain
    is the idle time that no finding before it claims (DataLoader, copies,
    sync, optimizer, launch overhead, host-bound...)."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = [r for r in ranks if utilization_pct(r) < cfg.gpu_utilization_pct]
    if not hits:
        w = min(ranks, key=utilization_pct)
        return fine(f"kernels busy at least {utilization_pct(w):.0f} % {of_step(w)}")
    left = step_shares(hits, lambda r: unexplained_idle_us(r, fired))
    hits = worst_first(hits, lambda r: left[r.rank])
    worst = hits[0]
    if left[worst.rank] < MIN_SYMPTOM_PCT:
        return covered_by(fired, hits, IDLE, f"kernels busy {utilization_pct(worst):.0f} % {of_step(worst)} on rank "
                          f"{worst.rank}")
    hits = [r for r in hits if left[r.rank] >= MIN_SYMPTOM_PCT]
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: kernels run {utilization_pct(r):.1f} % {of_step(r)}; GPU idle "
        f"{ms(r.idle_attribution.idle_us)} {per(r)}: {idle_split(r, fired)}"))
    title = (f"GPU kernels busy only {utilization_pct(worst):.0f} % {of_step(worst)}; {left[worst.rank]:.0f} % "
             f"{of_step(worst)} idle without a specific cause")
    fix = ("# give the GPU more work per launch and the host less work per iteration:\n"
           "model = torch.compile(model)      # fewer, larger kernels; less Python per iteration\n"
           "# raise the batch size if memory allows; the idle split above shows where the time goes")
    pools = {r.rank: unexplained_pools(r, fired) for r in hits}  # fixed before the claim changes the ledger
    return claim(fired, hits, lambda r: pools[r.rank], lambda r: fired.free_in(r, pools[r.rank])
                 ).verdict(cfg, title, evidence, fix)


def long_gaps(r: RankResult, cfg: AdviceConfig) -> List[GpuGap]:
    """Listed GPU gaps longer than ``gap_pct`` of the step (:attr:`~hta_report.model.RankResult.step_us`)."""
    return [g for g in r.idle_attribution.gaps if g.duration_us > cfg.gap_pct / 100 * r.step_us]


def gap_explained_by(g: GpuGap, r: RankResult, fired: Fired) -> str:
    """The findings that claimed the idle category holding most of gap ``g``."""
    return ", ".join(fired.claimers(r.rank, [f"idle:{g.cause}"]))


def unexplained_gap_us(r: RankResult, cfg: AdviceConfig, fired: Fired) -> Dict[str, float]:
    """Per step (µs), by idle category, the long gaps whose main cause no
    finding claimed."""
    out: Dict[str, float] = {}
    for g in long_gaps(r, cfg):
        if f"idle:{g.cause}" in IDLE and not gap_explained_by(g, r, fired):  # "not recorded" is not idle
            out[g.cause] = out.get(g.cause, 0.0) + per_step(g.duration_us, r.steps_used)
    return out


@rule("gpu-gaps", "C7", "Long stretches with no GPU work",
      "proposal (10 % of the step); Nsight Systems gpu_gaps uses 500 ms",
      lambda c: f"a GPU gap longer than {c.gap_pct:g} % of the step; gain: gaps no other finding explains",
      DOCS_HTA_IDLE, phase=SYMPTOM,
      description=("Stretches with no kernel, copy or memset longer than the threshold share of the step, "
                   "with what the host did meanwhile. A symptom: the gain counts only gaps no other finding "
                   "explains."),
      fix=("Look at the host ops listed for each gap: that is what the GPU waited for (data loading: "
           "more DataLoader workers; synchronization: no `.item()`/`.cpu()` in the loop; checkpoint "
           "or logging I/O: off the training thread, or less often)."), evidence=('any',))
def gpu_gaps(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C7: gaps with no kernel, memcpy or memset longer than ``gap_pct`` of the
    step, with what the host did meanwhile. The gain counts the gaps whose
    main idle category no finding claimed (among the 10 longest per rank),
    at most the idle time left."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = [r for r in ranks if long_gaps(r, cfg)]
    if not hits:
        longest = max((g.duration_us for r in ranks for g in r.idle_attribution.gaps), default=0.0)
        return fine(f"longest GPU gap {ms(longest)}")
    claims: Dict[int, Dict[str, float]] = {}
    for r in hits:
        claims[r.rank] = {}
        for cause, us in unexplained_gap_us(r, cfg, fired).items():
            claims[r.rank].update(fired.take(r, [f"idle:{cause}"], us))
    gain = step_shares(hits, lambda r: sum(claims[r.rank].values()))
    hits = worst_first(hits, lambda r: gain[r.rank])
    worst = hits[0]
    n = sum(len(long_gaps(r, cfg)) for r in hits)
    if gain[worst.rank] < MIN_SYMPTOM_PCT:
        return covered_by(fired, hits, IDLE, f"{plural(n, 'GPU gap')} longer than {cfg.gap_pct:g} % {of_step(worst)}")
    evidence: List[str] = []
    for r in hits[:4]:
        for g in long_gaps(r, cfg)[:3]:
            by = gap_explained_by(g, r, fired)
            where = f"step {g.step}" if g.step else "trace"
            evidence.append(f"rank {r.rank}, {where}: {ms(g.duration_us)} without GPU work at {ms(g.start_us)}; "
                            f"host in {', '.join(g.host_ops) or 'no profiled op'} ({LABELS.get(g.cause, g.cause)}"
                            + (f", see {by})" if by else ")"))
    fix = ("# the host ops listed for each gap are what the GPU waited for; typical fixes:\n"
           "# data loading -> DataLoader(num_workers=...), syncs -> drop .item()/.cpu() in the loop,\n"
           "# checkpoint or logging I/O -> move it off the training thread or do it less often")
    return make_finding(cfg, [r for r in hits if gain[r.rank] > 0] or hits, claims,
                        f"{plural(n, 'GPU gap')} longer than {cfg.gap_pct:g} % {of_step(worst)}", evidence, fix)


@rule("gpu-idle", "C8", "GPU idle with work queued: streams wait on each other or on other ranks",
      "HTA idle time breakdown ('other' idle); threshold: proposal",
      lambda c: (f"GPU idle with the next operation already launched (gaps >= 30 µs) >= {c.stream_wait_pct:g} % "
                 "of the step"), DOCS_HTA_IDLE,
      description=('GPU idle although the operation that ends the gap was already launched (HTA\'s "other" '
                   "idle): the GPU waits on an event from another stream, on a collective's peers or on a "
                   "stream dependency, not on the host."),
      fix=("Overlap independent work across streams, avoid `torch.cuda.synchronize()` and "
           "`stream.synchronize()` between streams, give communication its own stream (DDP does), "
           "and look for a slow peer rank (`rank-straggler`)."), evidence=('stream_wait',))
def gpu_idle(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C8: the GPU idles although the operation that ends the gap had been
    launched before the gap began (HTA's 'other' idle, seen on the whole
    GPU): it waits on an event from another stream, on a collective's peers
    or on a stream dependency, not on the host. The gain is that idle time."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    val, hits = shares_over(ranks, lambda r: r.idle_attribution.stream_wait_us, cfg.stream_wait_pct)
    if not hits:
        w = largest(ranks, val)
        return fine(f"GPU idle with work queued {up_to([w], val)} (GPU idle {w.idle_pct:.1f} % {of_step(w)} on rank "
                    f"{w.rank})")
    worst = hits[0]
    evidence = evidence_lines(hits, lambda r: (
        f"rank {r.rank}: the GPU idles {ms(r.idle_attribution.stream_wait_us)} {per(r)} ({val[r.rank]:.1f} % "
        f"{of_step(r)}) with its next operation already launched, of {r.idle_pct:.1f} % {of_step(r)} idle in all"))
    evidence += [f"rank {r.rank}, {f'step {g.step}' if g.step else 'trace'}: {ms(g.duration_us)} with work queued; "
                 f"host in {', '.join(g.host_ops) or 'no profiled op'}"
                 for r in hits[:2] for g in [g for g in r.idle_attribution.gaps if g.cause == "stream_wait"][:2]]
    fix = ("# kernels wait on events from other streams (cudaStreamWaitEvent) or on communication:\n"
           "# overlap independent work, avoid torch.cuda.synchronize()/stream.synchronize() between streams,\n"
           "# give communication its own stream (DDP does), and look for a slow peer rank (rank-straggler)")
    why = "streams wait on each other or on other ranks"
    if late_start_led(worst):
        a = worst.idle_attribution
        evidence.insert(0, (
            f"rank {worst.rank}: {a.late_starts:,} times, operations launched on an idle GPU start "
            f"{LATE_START_US / 1000:g} ms or more after their launch returned, {ms(a.late_start_us)} {per(worst)}; "
            "a launch on an idle GPU starts within tens of µs: the GPU waited on something this trace does not show"))
        why = "launches start late on an idle GPU, waiting on something the trace does not show"
        fix = ("# the GPU waited on something this trace does not record: another process or the display on the\n"
               "# same GPU (time slicing), a driver holding submissions back (Windows WDDM), or a stream dependency\n"
               "# the profiler does not show (a host callback, an event from another process). Check the GPU is\n"
               "# this process's alone:\n"
               "#   nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\n"
               "# and profile on a GPU of its own (no display; nvidia-smi -i 0 -c EXCLUSIVE_PROCESS)")
    return claim(fired, hits, ["idle:stream_wait"], lambda r: r.idle_attribution.stream_wait_us).verdict(
        cfg, f"GPU idle with work queued {val[worst.rank]:.0f} % {of_step(worst)}: {why}", evidence, fix)


#: Late starts (``IdleAttribution.late_starts``) from which they are a pattern
#: and not a one-off (a first launch after the profiler started, a cold start): proposal.
MIN_LATE_STARTS = 3


def late_start_led(r: RankResult) -> bool:
    """True when most of rank ``r``'s idle with work queued is operations
    starting late on an idle GPU (``IdleAttribution.late_start_us``, see
    :func:`~hta_report.analysis.gap_causes.late_starts`), at least
    :data:`MIN_LATE_STARTS` times."""
    a = r.idle_attribution
    return a.late_starts >= MIN_LATE_STARTS and a.late_start_us > 0 and a.late_start_us >= 0.5 * a.stream_wait_us
