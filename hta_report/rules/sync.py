"""C5: host-device synchronization inside the steps."""
from __future__ import annotations

from typing import Dict, List

from ..model import AnalysisResult, RankResult, SyncKindCount
from ..replay_terms import EditLabel
from .base import (DOCS_TUNING, EVIDENCE_RANKS, Fired, Verdict, fine, largest, make_finding, ms, not_checked, of_step,
                   per, rule, shares_over, up_to)
from .config import AdviceConfig
from .wording import specific


def sync_cost_us(r: RankResult) -> float:
    """What synchronization costs per step (µs): on GPU ranks the GPU idle in
    gaps that begin inside a synchronization (a synchronizing call, a
    device-to-host read such as ``.item()``, or the op holding one: the GPU
    ran dry while the host waited, and stays idle until the host launches
    again), plus the idle after it that the host's lost lead exposes, up to
    the time it waited (``sync_lead_us``); without GPU activity, host time in
    the synchronizing calls, or in the Python loops of ``.item()`` reads that
    hold them where that is more (the fix, one vectorized read, removes the loop)."""
    a = r.idle_attribution
    if r.has_gpu:
        return a.sync_us + lead_us(r)
    p = r.patterns
    return max(r.cpu.sync_us_per_step, p.loop_us_per_step if p.loop_reads_per_step > 0 else 0.0)


def lead_us(r: RankResult) -> float:
    """The GPU idle after a GPU rank's synchronizations beyond the gaps they
    open (µs per step): the lead the host spent waiting (``sync_lead_us``),
    or, where the reads come from a Python loop over elements
    (``CodePatterns.loop_reads_per_step``: ``x[i].item()`` per element), the
    GPU idle while the host runs its launches and ops, up to those loops' host
    time (``read_loop_us_per_step``; a loop after them that reads nothing is
    not theirs): each read drains the GPU, which then waits for the loop's
    next iteration, and one read of the whole tensor removes both."""
    a, p = r.idle_attribution, r.patterns
    if p.loop_reads_per_step > 0:
        return max(a.sync_lead_us, min(p.read_loop_us_per_step, a.host_ops_us + a.launch_us + a.unattributed_us))
    return a.sync_lead_us


#: Where synchronization's cost is claimed on a GPU rank: the gaps it opens, then the
#: host-caused idle after it (within the lead it threw away, ``sync_lead_us``).
GPU_POOLS = ["idle:sync", "idle:host_ops", "idle:launch", "idle:unattributed"]


def _claim(r: RankResult, fired: Fired) -> Dict[str, float]:
    if not r.has_gpu:
        return fired.take(r, ["host:sync", "host:other"], sync_cost_us(r))
    a = r.idle_attribution
    out = fired.take(r, ["idle:sync"], a.sync_us)
    for pool, us in fired.take(r, GPU_POOLS[1:], lead_us(r)).items():
        out[pool] = out.get(pool, 0.0) + us
    return out


def _reads(r: RankResult) -> str:
    m = r.memcpy
    if not m.dtoh_reads_per_step:
        return ""
    size = (f"{m.dtoh_read_min_bytes:,} bytes" if m.dtoh_read_min_bytes == m.dtoh_read_max_bytes
            else f"{m.dtoh_read_min_bytes:,}–{m.dtoh_read_max_bytes:,} bytes")
    return (f"; {m.dtoh_reads_per_step:.1f} device-to-host reads {per(r)} the host waits for ({size} each: "
            ".item(), .cpu(), .tolist(); pinning memory does not remove the wait)")


@rule("sync-in-step", "C5", "Host-device synchronization in the step",
      "proposal; Nsight Systems cuda_api_sync lists every call",
      lambda c: f"cost of synchronization > {c.sync_pct:g} % of the step", DOCS_TUNING,
      description=("Host-device synchronization inside the steps: `cudaStreamSynchronize`, "
                   "`cudaDeviceSynchronize`, `cudaEventSynchronize`, `.item()` and other device-to-host "
                   "reads. The cost is the GPU idle that follows (the work the host could have queued "
                   "meanwhile)."),
      fix=("Keep values on the GPU inside the loop: no `loss.item()`, `print(tensor)`, "
           "`tensor.cpu()` or data-dependent Python control flow per step; accumulate on the GPU "
           "(`running += loss.detach()`) and read once every N steps."),
      edit=EditLabel.NO_SYNC, evidence=('sync',))
def sync_in_step(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C5: ``cudaStreamSynchronize``/``cudaDeviceSynchronize``/``cudaEventSynchronize``,
    ``aten::item``/``aten::_local_scalar_dense`` and device-to-host reads
    whose cost (:func:`sync_cost_us`) exceeds ``sync_pct`` of the step."""
    ranks = [r for r in result.ranks if r.steps_used]
    if not ranks:
        return not_checked("no events in the traces")
    val, over = shares_over(ranks, sync_cost_us, cfg.sync_pct, strict=True)
    hits = [r for r in over if r.cpu.sync_calls_per_step > 0 or r.memcpy.dtoh_reads_per_step > 0]
    if not hits:
        calls = max(r.cpu.sync_calls_per_step for r in ranks)
        return fine(f"up to {calls:.1f} sync points {per(largest(ranks, val))} costing {up_to(ranks, val)}")
    worst = hits[0]
    evidence: List[str] = []
    for r in hits[:EVIDENCE_RANKS]:
        names = ", ".join(f"{e.name} ×{e.count}" for e in r.cpu.sync_events[:4])
        text = (f"rank {r.rank}: {r.cpu.sync_calls_per_step:.1f} sync points {per(r)} ({names or 'none named'}), "
                f"host waits {ms(r.cpu.sync_us_per_step)} {per(r)}")
        if r.has_gpu:
            a = r.idle_attribution
            text += f"; the GPU then idles {ms(a.sync_us)} {per(r)} until the next launch"
            if lead_us(r) >= 1.0:
                text += (f", and {ms(lead_us(r))} more while the host, its queued lead spent in the wait, runs "
                         "its next work" + (" (the next iteration of a Python loop over elements)"
                                            if lead_us(r) > a.sync_lead_us else ""))
        evidence.append(text + _reads(r) + _kinds(r))
    claims = {r.rank: _claim(r, fired) for r in hits}
    required = [k for k in worst.cpu.sync_kinds if not k.removable]
    if required and all(k.kind == "harness" for k in required):
        # the harness's synchronize is no cost of the model: the step measured is the harness's, and its fix
        # (CUDA events, one synchronize after many steps) takes it out of the loop
        title = (f"The step includes its timing harness's synchronize ({val[worst.rank]:.0f} % {of_step(worst)}): "
                 "the harness's cost, not the model's; time with CUDA events")
        return make_finding(cfg, hits, claims, title, evidence, _required_fix(required))
    if worst.cpu.sync_kinds and not any(k.removable for k in worst.cpu.sync_kinds):
        names = ", ".join(k.label for k in required)
        title = (f"Host-device synchronization the program needs ({val[worst.rank]:.0f} % {of_step(worst)}): "
                 f"{names}; overlap it, it cannot be removed")
        return make_finding(cfg, hits, claims, title, evidence, _required_fix(required))
    fix = ("# avoid loss.item(), print(tensor), tensor.cpu() and data-dependent Python control flow in the loop;\n"
           "# accumulate on the GPU and read once every N steps:\n"
           "running += loss.detach()\n"
           "if step % 100 == 0:\n"
           "    log(running.item() / 100)")
    if worst.workload.kind in ("inference", "graph-capture"):
        fix = INFERENCE_FIX
    if any(k.kind in ("element", "logged", "metric") for k in worst.cpu.sync_kinds) and worst.patterns.loop_reads_per_step:
        fix = ("# a Python loop reads one element at a time (.item() per element): compute on the whole tensor\n"
               "correct = (pred == y).sum()          # not: for i in range(len(y)): pred[i].item() == y[i].item()\n"
               "# and read it once (or every N steps): correct.item()")
    return make_finding(cfg, hits, claims,
                        f"Remove host-device synchronization from the step ({val[worst.rank]:.0f} % {of_step(worst)})",
                        evidence, fix)


def _kinds(r: RankResult) -> str:
    """The rank's synchronization points by kind, in words: which a fix removes and which the program needs."""
    if not r.cpu.sync_kinds:
        return ""
    parts = [f"{k.per_step:.1f} × {k.label} ({'removable' if k.removable else 'required'}: {k.why})"
             for k in r.cpu.sync_kinds]
    return f"; by kind, {per(r)}: " + "; ".join(parts)


#: The fix of removable synchronizations in an inference step (a rule's text for training speaks of the loss).
INFERENCE_FIX = specific("# read results once per batch, not per token or per op: no .item()/.tolist()/print(tensor)\n"
                         "# inside the forward or the decoding loop, no Python branches on GPU values;\n"
                         "# copy outputs into a pinned buffer without blocking and wait on an event when needed:\n"
                         "out_host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)\n"
                         "out_host.copy_(out, non_blocking=True)\n"
                         "done = torch.cuda.Event(); done.record()\n"
                         "# ... launch the next batch ...\n"
                         "done.synchronize()")
#: What to do about each kind of synchronization the program needs (:mod:`hta_report.analysis.sync_kinds`).
REQUIRED_FIXES = {
    "output": ("# the host needs the output: overlap its copy with the next batch's work instead of waiting\n"
               "out_host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)\n"
               "out_host.copy_(out, non_blocking=True)\n"
               "done = torch.cuda.Event(); done.record()\n"
               "# ... launch the next batch ...\n"
               "done.synchronize()"),
    "harness": ("# the synchronize that brackets each step is the timing harness's, not the model's cost:\n"
                "# time with CUDA events and synchronize once after many steps\n"
                "start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n"
                "start.record(); run_steps(); end.record(); end.synchronize(); ms = start.elapsed_time(end)"),
    "control": ("# a GPU value decides Python control flow: keep the decision on the GPU (torch.where, masks)\n"
                "# or check it every N steps instead of every step"),
    "shape": ("# nonzero / masked_select / boolean indexing read a count from the GPU to size their output:\n"
              "y = torch.where(mask, x, 0)   # fixed-size ops instead of x[mask]"),
}


def _required_fix(required: List[SyncKindCount]) -> str:
    """The fix text for synchronizations that cannot be removed, by kind (most time first)."""
    return specific("\n".join(REQUIRED_FIXES[k.kind] for k in required if k.kind in REQUIRED_FIXES)
                    or REQUIRED_FIXES["output"])
