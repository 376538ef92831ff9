"""C5: host-device synchronization inside the steps."""
from __future__ import annotations

from ..model import AnalysisResult, RankResult
from .base import Fired, DOCS_TUNING, Verdict, fine, make_finding, ms, not_checked, pct_of_step, per, rule
from .config import AdviceConfig


def sync_cost_us(r: RankResult) -> float:
    """What synchronization costs per step (µs): on GPU ranks the GPU idle in
    gaps that begin inside a synchronizing call (the GPU ran dry while the
    host waited, and stays idle until the host launches again); without GPU
    activity, host time in the synchronizing calls."""
    return r.idle_attribution.sync_us if r.has_gpu else r.cpu.sync_us_per_step


@rule("sync-in-step", "C5", "Host-device synchronization in the step",
      "proposal; Nsight Systems cuda_api_sync lists every call",
      lambda c: f"cost of synchronization > {c.sync_pct:g} % of the step", DOCS_TUNING)
def sync_in_step(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C5: ``cudaStreamSynchronize``/``cudaDeviceSynchronize``/``cudaEventSynchronize``,
    ``aten::item``/``aten::_local_scalar_dense`` whose cost (:func:`sync_cost_us`)
    exceeds ``sync_pct`` of the step."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    val = {r.rank: pct_of_step(sync_cost_us(r), r) for r in ranks}
    hits = sorted([r for r in ranks if r.cpu.sync_calls_per_step > 0 and val[r.rank] > cfg.sync_pct],
                  key=lambda r: -val[r.rank])
    if not hits:
        calls = max(r.cpu.sync_calls_per_step for r in ranks)
        return fine(f"up to {calls:.1f} sync points per step costing up to {max(val.values()):.1f} % of the step")
    worst = hits[0]
    evidence = []
    for r in hits[:8]:
        names = ", ".join(f"{e.name} ×{e.count}" for e in r.cpu.sync_events[:4])
        text = (f"rank {r.rank}: {r.cpu.sync_calls_per_step:.1f} sync points {per(r)} ({names}), "
                f"host waits {ms(r.cpu.sync_us_per_step)} {per(r)}")
        if r.has_gpu:
            text += f"; the GPU then idles {ms(r.idle_attribution.sync_us)} {per(r)} until the next launch"
        evidence.append(text)
    fix = ("# avoid loss.item(), print(tensor), tensor.cpu() and data-dependent Python control flow in the loop;\n"
           "# accumulate on the GPU and read once every N steps:\n"
           "running += loss.detach()\n"
           "if step % 100 == 0:\n"
           "    log(running.item() / 100)")
    return make_finding(cfg, worst, sync_cost_us(worst),
                        f"Remove host-device synchronization from the step ({val[worst.rank]:.0f} % of the step)",
                        evidence, fix, [r.rank for r in hits])
