"""C14: compute kernels too small to fill the GPU's SMs."""
from __future__ import annotations

from ..model import OCCUPANCY_STEP, AnalysisResult, RankResult
from ..names import short_names
from .base import (DOCS_COMPILE, GENERAL, Fired, Verdict, claim, evidence_lines, fine, largest, ms, not_checked, per,
                   rule, shares_over)
from .config import AdviceConfig


def idle_sm_us(r: RankResult) -> float:
    """SM time per step that kernels with < 1 block per SM leave idle (µs):
    Σ dur × (1 − blocks per SM) over them (:class:`~hta_report.model.OccupancySummary`)."""
    return r.occupancy.idle_sm_us_per_step


@rule("low-sm-occupancy", "C14", "Kernels too small to fill the GPU (fewer blocks than SMs)",
      "TensorBoard profiler Est. SM Efficiency / Achieved Occupancy (no published threshold: proposal)",
      lambda c: (f"SM time left idle by compute kernels with < 1 block per SM >= {c.idle_sm_pct:g} % "
                 "of the step"), DOCS_COMPILE, phase=GENERAL, needs=(OCCUPANCY_STEP,),
      description=("Compute kernels launched with fewer blocks than the GPU has SMs leave SMs idle while "
                   "they run. The gain bound is that idle SM time per step (duration × (1 − blocks per SM)); "
                   "kernel latency makes the real gain smaller."),
      fix=("Give each kernel more work: a larger batch (`memory-under-used` gives the headroom), or "
           "fuse the small kernels with `torch.compile(model)`."))
def low_sm_occupancy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C14: compute kernels launched with fewer blocks than the GPU has SMs
    (Kineto's ``blocks per SM`` < 1) leave SMs idle while they run. The gain
    bound is that idle SM time, Σ dur × (1 − blocks per SM) per step: what
    the same work would save if it filled every SM (a larger batch, fused
    kernels); kernel latency makes the real gain smaller. It is claimed from
    the step's kernel time (the ``compute`` pool), after C12/C13's claims."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    failed = [r for r in gpu if r.failed(OCCUPANCY_STEP)]
    ranks = [r for r in gpu if not r.failed(OCCUPANCY_STEP) and r.occupancy.kernels_with_data]
    if not ranks:
        if failed:
            return not_checked(f"the SM occupancy analysis failed on rank {failed[0].rank}")
        reasons = sorted({r.occupancy.missing_reason for r in gpu if r.occupancy.missing_reason})
        return not_checked("; ".join(reasons) or "no compute kernels with occupancy data in the analyzed steps")
    val, hits = shares_over(ranks, idle_sm_us, cfg.idle_sm_pct)
    if not hits:
        w = largest(ranks, val)
        o = w.occupancy
        return fine(f"rank {w.rank}: SM efficiency {o.sm_efficiency_pct:.0f} %, achieved occupancy "
                    f"{o.achieved_occupancy_pct:.0f} % of compute kernel time; kernels with < 1 block per SM leave "
                    f"{val[w.rank]:.1f} % of the step's SM time idle")
    c = claim(fired, hits, ["compute"], idle_sm_us, "kernels with fewer blocks than SMs")
    return c.verdict(cfg, f"Kernels too small for the GPU: {val[c.worst.rank]:.0f} % of the step's SM time idle "
                          "inside kernels with fewer blocks than SMs", evidence_lines(c.hits, _evidence), FIX)


FIX = ("# give each kernel more work: a larger batch (see memory-under-used for the headroom),\n"
       "# or fuse the small kernels:\n"
       "model = torch.compile(model)")


def _evidence(r: RankResult) -> str:
    o = r.occupancy
    shown = o.top_small[:2]
    labels = short_names([k.name for k in shown])
    top = "; ".join(f"{labels[k.name]} ({k.count:,}×, {k.blocks_per_sm:.2f} blocks/SM, "
                    f"{ms(k.total_us)} in the steps)" for k in shown)
    return (f"rank {r.rank}: compute kernels {ms(o.kernel_us_per_step)} {per(r)}, SM efficiency "
            f"{o.sm_efficiency_pct:.0f} %, achieved occupancy {o.achieved_occupancy_pct:.0f} % (duration-weighted); "
            f"kernels with < 1 block per SM {ms(o.small_grid_us_per_step)} {per(r)} ({o.small_grid_pct:.0f} % of "
            f"compute kernel time) leave {ms(idle_sm_us(r))} of SM time idle; largest: {top}")
