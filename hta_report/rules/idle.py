"""GPU idle symptom rules: C6 low utilization, C7 GPU gaps, C8 HTA idle breakdown.

They run after the cause rules and count only idle time that no fired cause
rule explains, so a symptom never outranks its cause.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ..errors import plural
from ..model import AnalysisResult, RankResult
from .base import (DOCS_COMPILE, DOCS_CUDA_GRAPHS, DOCS_HTA_IDLE, Fired, Verdict, fine, make_finding, ms,
                   not_checked, pct_of_step, per, rule)
from .config import AdviceConfig
from .launch import outlier_cost_us as launch_outlier_cost_us
from .steps import outlier_cost_us, step_outliers

#: Which cause rules explain which idle category (see IdleAttribution).
EXPLAINED_BY: Dict[str, Tuple[str, ...]] = {
    "dataloader": ("dataloader-bound", "dataloader-main-process"),
    "blocking_copy": ("blocking-copy",),
    "pageable_copy": ("pageable-memcpy",),
    "sync": ("sync-in-step",),
    "zero_grad": ("zero-grad-zeros",),
    "optimizer": ("unfused-optimizer",),
    "host_ops": ("launch-bound",),
}
LABELS = {"dataloader": "DataLoader", "blocking_copy": "blocking copies", "pageable_copy": "pageable copies",
          "sync": "after synchronization", "zero_grad": "zero_grad", "optimizer": "optimizer step",
          "host_ops": "host ops and launches", "unattributed": "unattributed"}


def explained(category: str, rank: int, fired: Fired) -> str:
    """The id of a fired rule that explains ``category`` on ``rank``, or ''."""
    for rule_id in EXPLAINED_BY.get(category, ()):
        if rank in fired.get(rule_id, ()):
            return rule_id
    return ""


def unexplained_idle_us(r: RankResult, fired: Fired, cfg: AdviceConfig) -> float:
    """GPU idle per step (µs) that no fired cause rule explains: the idle
    categories of fired cause rules are subtracted, and so are the gains of
    step-time outliers (their stall is that finding) and slow launch calls
    when those rules fired."""
    a = r.idle_attribution
    known = sum(getattr(a, f"{c}_us") for c in EXPLAINED_BY if explained(c, r.rank, fired))
    if r.rank in fired.get("step-time-outliers", ()):
        known += outlier_cost_us(r, cfg.step_outlier_sigma)
    if r.rank in fired.get("launch-outliers", ()) and not explained("host_ops", r.rank, fired):
        known += launch_outlier_cost_us(r)  # the slow launches' part of the host-ops idle
    return max(0.0, a.idle_us - known)


def idle_split(r: RankResult, fired: Fired) -> str:
    """``"DataLoader 4.10 ms (dataloader-bound), unattributed 0.20 ms"``."""
    a = r.idle_attribution
    parts = []
    for c in list(EXPLAINED_BY) + ["unattributed"]:
        us = getattr(a, f"{c}_us")
        if us >= 1.0:
            by = explained(c, r.rank, fired)
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
      DOCS_COMPILE, symptom=True)
def low_gpu_utilization(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C6: kernels run less than ``gpu_utilization_pct`` of the step. The gain
    is the idle time that the cause findings (DataLoader, copies, sync,
    optimizer, launch-bound) do not already claim."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = [r for r in ranks if utilization_pct(r) < cfg.gpu_utilization_pct]
    if not hits:
        return fine(f"kernels busy at least {min(utilization_pct(r) for r in ranks):.0f} % of the step")
    hits.sort(key=lambda r: -pct_of_step(unexplained_idle_us(r, fired, cfg), r))
    worst = hits[0]
    evidence = [f"rank {r.rank}: kernels run {utilization_pct(r):.1f} % of the step; GPU idle "
                f"{ms(r.idle_attribution.idle_us)} {per(r)}: {idle_split(r, fired)}" for r in hits[:8]]
    rest = pct_of_step(unexplained_idle_us(worst, fired, cfg), worst)
    title = f"GPU kernels busy only {utilization_pct(worst):.0f} % of the step"
    title += f"; {rest:.0f} % of the step idle without a specific cause" if rest >= 1 else " (causes above)"
    fix = ("# give the GPU more work per launch and the host less work per step:\n"
           "model = torch.compile(model)      # fewer, larger kernels; less Python per step\n"
           "# raise the batch size if memory allows; the idle split above shows where the time goes")
    return make_finding(cfg, worst, unexplained_idle_us(worst, fired, cfg), title,
                        evidence, fix, [r.rank for r in hits])


def long_gaps(r: RankResult, cfg: AdviceConfig):
    """Listed GPU gaps longer than ``gap_pct`` of the step."""
    return [g for g in r.idle_attribution.gaps if g.duration_us > cfg.gap_pct / 100 * r.window_us]


def gap_explained_by(g, r: RankResult, cfg: AdviceConfig, fired: Fired) -> str:
    """The fired rule that explains a gap: its dominant cause's rule, or
    step-time-outliers when the gap lies in an outlier step."""
    by = explained(g.cause, r.rank, fired)
    if not by and r.rank in fired.get("step-time-outliers", ()):
        if g.step in {number for number, *_ in step_outliers(r, cfg.step_outlier_sigma)}:
            by = "step-time-outliers"
    return by


def unexplained_gap_us(r: RankResult, cfg: AdviceConfig, fired: Fired) -> float:
    """Long-gap time per step (µs) that no fired rule explains."""
    total = sum(g.duration_us for g in long_gaps(r, cfg) if not gap_explained_by(g, r, cfg, fired))
    return total / r.steps_used if r.steps_used else 0.0


@rule("gpu-gaps", "C7", "Long stretches with no GPU work",
      "proposal (10 % of the step); Nsight Systems gpu_gaps uses 500 ms",
      lambda c: f"a GPU gap longer than {c.gap_pct:g} % of the step; gain: gaps no other finding explains",
      DOCS_HTA_IDLE, symptom=True)
def gpu_gaps(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C7: gaps with no kernel, memcpy or memset longer than ``gap_pct`` of the
    step, with what the host did meanwhile. The gain counts the gaps whose
    dominant cause no fired rule explains (among the 10 longest per rank)."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = [r for r in ranks if long_gaps(r, cfg)]
    if not hits:
        longest = max((g.duration_us for r in ranks for g in r.idle_attribution.gaps), default=0.0)
        return fine(f"longest GPU gap {ms(longest)}")
    hits.sort(key=lambda r: -pct_of_step(unexplained_gap_us(r, cfg, fired), r))
    worst = hits[0]
    evidence = []
    for r in hits[:4]:
        for g in long_gaps(r, cfg)[:3]:
            by = gap_explained_by(g, r, cfg, fired)
            where = f"step {g.step}" if g.step else "trace"
            evidence.append(f"rank {r.rank}, {where}: {ms(g.duration_us)} without GPU work at {ms(g.start_us)}; "
                            f"host in {', '.join(g.host_ops) or 'no profiled op'} ({LABELS.get(g.cause, g.cause)}"
                            + (f", see {by})" if by else ")"))
    n = sum(len(long_gaps(r, cfg)) for r in hits)
    fix = ("# the host ops listed for each gap are what the GPU waited for; typical fixes:\n"
           "# data loading -> DataLoader(num_workers=...), syncs -> drop .item()/.cpu() in the loop,\n"
           "# checkpoint or logging I/O -> move it off the training thread or do it less often")
    return make_finding(cfg, worst, unexplained_gap_us(worst, cfg, fired),
                        f"{plural(n, 'GPU gap')} longer than {cfg.gap_pct:g} % of the step", evidence, fix,
                        [r.rank for r in hits])


def hta_category_us(r: RankResult, share_pct: float) -> float:
    """An HTA idle category's time per step (µs): its share of HTA's idle time,
    scaled from the GPU span to the step."""
    t = r.temporal
    return t.idle_us * share_pct / 100 * r.window_us / t.total_us if t.total_us else 0.0


@rule("gpu-idle", "C8", "GPU idle between kernels or waiting on other streams (HTA idle breakdown)",
      "HTA idle time breakdown; 20 % of GPU time: proposal",
      lambda c: f"HTA idle > {c.gpu_idle_pct:g} % of GPU time, mostly kernel wait or other", DOCS_HTA_IDLE,
      symptom=True)
def gpu_idle(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C8: HTA's idle time above ``gpu_idle_pct`` of GPU time whose dominant
    category is kernel wait (gaps < 30 µs between kernels: launch overhead)
    or other (streams waiting on each other). Host wait is what the host-side
    rules and C6 explain, so it does not fire this rule. The gain is that
    category's idle time per step, at most the idle no fired cause explains."""
    ranks = _stepped_gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    found = []
    for r in ranks:
        if r.temporal.idle_pct <= cfg.gpu_idle_pct:
            continue
        cats = {"kernel wait": r.idle.kernel_wait_pct, "other": r.idle.other_pct, "host wait": r.idle.host_wait_pct}
        top = max(cats, key=cats.get)
        if top != "host wait":
            found.append((r, top, min(hta_category_us(r, cats[top]), unexplained_idle_us(r, fired, cfg))))
    if not found:
        w = max(ranks, key=lambda r: r.temporal.idle_pct)
        return fine(f"HTA idle {w.temporal.idle_pct:.1f} % of GPU time on rank {w.rank}"
                    + (f", mostly host wait ({w.idle.host_wait_pct:.0f} %)" if w.temporal.idle_pct > cfg.gpu_idle_pct else ""))
    found.sort(key=lambda x: -pct_of_step(x[2], x[0]))
    worst, cat, gain = found[0]
    evidence = [f"rank {r.rank}: GPU idle {r.temporal.idle_pct:.1f} % of GPU time (HTA): host wait "
                f"{r.idle.host_wait_pct:.0f} %, kernel wait {r.idle.kernel_wait_pct:.0f} %, other "
                f"{r.idle.other_pct:.0f} % of idle; {c} ≈ {ms(us)} {per(r)}" for r, c, us in found[:8]]
    if cat == "kernel wait":
        title = "GPU idle between back-to-back kernels (HTA kernel wait): replay them as a CUDA graph"
        fix = ("model = torch.compile(model, mode=\"reduce-overhead\")   # CUDA graphs remove per-kernel gaps\n"
               "# or capture the step yourself with torch.cuda.graphs / torch.cuda.make_graphed_callables")
    else:
        title = "GPU streams wait on each other (HTA 'other' idle): check cross-stream dependencies"
        fix = ("# kernels wait on events from other streams (cudaStreamWaitEvent) or on communication:\n"
               "# overlap independent work, avoid torch.cuda.synchronize()/stream.synchronize() between streams,\n"
               "# and give communication its own stream (DDP does)")
    return make_finding(cfg, worst, gain, title, evidence, fix, [r.rank for r, _, _ in found],
                        doc_url=DOCS_CUDA_GRAPHS if cat == "kernel wait" else DOCS_HTA_IDLE)
