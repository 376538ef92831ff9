"""First advice: findings computed from the result model, each with its evidence.

Each rule is a small pure function ``rule(result, thresholds) -> Finding | None``
listed in :data:`RULES`; thresholds live in :class:`Thresholds`, with the
source of each default. (A full rule engine is tracked separately.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

from .model import AnalysisResult, Finding, RankResult

DOCS_TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
DOCS_DATALOADER = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
DOCS_PINNED = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
DOCS_HTA_IDLE = "https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html"
DOCS_DDP = "https://pytorch.org/docs/stable/notes/ddp.html"


@dataclass
class Thresholds:
    """Trigger thresholds (percent of step or GPU time).

    * ``gpu_idle_pct`` 20: issue #2's brief (TB flags utilization < 50 %).
    * ``dataloader_pct`` 5: TensorBoard profiler plugin and XProf "moderately input bound".
    * ``high_pct`` 20 / ``medium_pct`` 5: severity bands of the time at stake,
      following XProf's 20 % "highly" / 5 % "moderately" input-bound bands.
    * ``exposed_comm_pct`` 10: TensorBoard profiler plugin.
    * ``sync_pct`` 1: host-device synchronization inside steps above 1 % of the
      step (a proposal: Nsight Systems ``cuda_api_sync`` lists every call and
      no published threshold exists); severity from its share of the step.
    """

    gpu_idle_pct: float = 20.0
    dataloader_pct: float = 5.0
    exposed_comm_pct: float = 10.0
    sync_pct: float = 1.0
    high_pct: float = 20.0
    medium_pct: float = 5.0


def severity(share_pct: float, t: Thresholds) -> str:
    """``high`` / ``medium`` / ``low`` from the % of time at stake."""
    if share_pct >= t.high_pct:
        return "high"
    if share_pct >= t.medium_pct:
        return "medium"
    return "low"


def _fmt_ranks(ranks: List[int]) -> str:
    return "rank " + ", ".join(str(r) for r in ranks) if len(ranks) <= 8 else f"{len(ranks)} ranks"


def gpu_idle(result: AnalysisResult, t: Thresholds) -> Optional[Finding]:
    """GPU idle more than ``gpu_idle_pct`` of GPU time; names the dominant HTA idle cause."""
    hits = [r for r in result.ranks if r.has_gpu and r.temporal.idle_pct > t.gpu_idle_pct]
    if not hits:
        return None
    worst = max(hits, key=lambda r: r.temporal.idle_pct)
    causes = {
        "host wait": worst.idle.host_wait_pct,
        "kernel wait": worst.idle.kernel_wait_pct,
        "other": worst.idle.other_pct,
    }
    cause = max(causes, key=causes.get)
    fixes = {
        "host wait": "The CPU does not launch work fast enough: cut host overhead in the step "
                     "(see the DataLoader and synchronization findings), batch more work per launch, "
                     "or compile the model: model = torch.compile(model)",
        "kernel wait": "Many small back-to-back kernels: fuse them with torch.compile(model) or replay "
                       "them as a CUDA graph: torch.compile(model, mode=\"reduce-overhead\")",
        "other": "Streams wait on each other (events, communication): overlap communication with "
                 "compute and check cross-stream dependencies",
    }
    evidence = [
        f"rank {r.rank}: GPU idle {r.temporal.idle_pct:.1f} % of {r.temporal.total_us / 1e3:.1f} ms "
        f"(host wait {r.idle.host_wait_pct:.0f} %, kernel wait {r.idle.kernel_wait_pct:.0f} %, "
        f"other {r.idle.other_pct:.0f} % of idle)"
        for r in sorted(hits, key=lambda r: -r.temporal.idle_pct)[:8]
    ]
    return Finding(
        id="gpu-idle",
        title=f"GPU idle {worst.temporal.idle_pct:.0f} % of the time, mostly {cause}",
        severity=severity(worst.temporal.idle_pct, t),
        evidence=evidence,
        fix=fixes[cause],
        doc_url=DOCS_HTA_IDLE,
        ranks=[r.rank for r in hits],
        share_pct=worst.temporal.idle_pct,
        threshold=f"idle > {t.gpu_idle_pct:g} % of GPU time (HTA temporal breakdown)",
    )


def dataloader_bound(result: AnalysisResult, t: Thresholds) -> Optional[Finding]:
    """Time inside ``enumerate(DataLoader)#...`` above ``dataloader_pct`` of the step."""
    hits = [r for r in result.ranks if r.cpu.dataloader_pct > t.dataloader_pct]
    if not hits:
        return None
    worst = max(hits, key=lambda r: r.cpu.dataloader_pct)
    main = any(r.cpu.dataloader_in_main_process for r in hits)
    evidence = [
        f"rank {r.rank}: {r.cpu.dataloader_us_per_step / 1e3:.2f} ms of each "
        f"{r.steps.mean_us / 1e3:.2f} ms step waits for data ({r.cpu.dataloader_pct:.1f} %)"
        if r.steps.count else
        f"rank {r.rank}: {r.cpu.dataloader_pct:.1f} % of the traced time waits for data"
        for r in sorted(hits, key=lambda r: -r.cpu.dataloader_pct)[:8]
    ]
    if main:
        evidence.append("batches are loaded in the main process (_SingleProcessDataLoaderIter: num_workers=0)")
    return Finding(
        id="dataloader-bound",
        title=f"Raise DataLoader num_workers: {worst.cpu.dataloader_pct:.0f} % of each step waits for data",
        severity=severity(worst.cpu.dataloader_pct, t),
        evidence=evidence,
        fix="DataLoader(ds, batch_size=..., num_workers=8, pin_memory=True, persistent_workers=True, "
            "prefetch_factor=4)  # num_workers up to the CPU cores per GPU; move heavy augmentation to the GPU",
        doc_url=DOCS_DATALOADER,
        ranks=[r.rank for r in hits],
        share_pct=worst.cpu.dataloader_pct,
        threshold=f"DataLoader > {t.dataloader_pct:g} % of step (TensorBoard profiler, XProf)",
    )


def pageable_memcpy(result: AnalysisResult, t: Thresholds) -> Optional[Finding]:
    """Any memcpy from or to pageable (unpinned) host memory."""
    hits = []
    for r in result.ranks:
        pageable = [d for d in r.memcpy.directions if d.pageable_count]
        if pageable:
            hits.append((r, pageable))
    if not hits:
        return None
    evidence = [
        f"rank {r.rank}: " + ", ".join(f"{d.pageable_count} pageable {d.direction} of {d.count}" for d in ds)
        for r, ds in hits[:8]
    ]
    share = max(r.memcpy.exposed_pct for r, _ in hits)
    return Finding(
        id="pageable-memcpy",
        title="Pin host memory: copies from pageable memory block the CPU",
        severity=severity(share, t),
        evidence=evidence + [f"exposed memcpy time up to {share:.1f} % of GPU time"],
        fix="DataLoader(ds, ..., pin_memory=True)  # then\nx = x.to(device, non_blocking=True)",
        doc_url=DOCS_PINNED,
        ranks=[r.rank for r, _ in hits],
        share_pct=share,
        threshold="any pageable memcpy (Nsight Systems cuda_memcpy_async)",
    )


def sync_in_step(result: AnalysisResult, t: Thresholds) -> Optional[Finding]:
    """Host-device synchronization (``cudaStreamSynchronize``, ``.item()``...) inside steps."""
    hits = [r for r in result.ranks if r.cpu.sync_calls_per_step > 0 and r.cpu.sync_pct > t.sync_pct]
    if not hits:
        return None
    worst = max(hits, key=lambda r: r.cpu.sync_pct)
    evidence = []
    for r in sorted(hits, key=lambda r: -r.cpu.sync_pct)[:8]:
        names = ", ".join(f"{e.name} ×{e.count}" for e in r.cpu.sync_events[:4])
        evidence.append(
            f"rank {r.rank}: {r.cpu.sync_calls_per_step:.1f} sync points per step, "
            f"{r.cpu.sync_us_per_step / 1e3:.2f} ms ({r.cpu.sync_pct:.1f} % of step): {names}"
        )
    return Finding(
        id="sync-in-step",
        title=f"Remove host-device synchronization from the step ({worst.cpu.sync_pct:.0f} % of step)",
        severity=severity(worst.cpu.sync_pct, t),
        evidence=evidence,
        fix="Avoid loss.item(), print(tensor), tensor.cpu() and data-dependent Python control flow "
            "inside the loop; accumulate on the GPU and read once every N steps:\n"
            "running += loss.detach()\nif step % 100 == 0: log(running.item() / 100)",
        doc_url=DOCS_TUNING,
        ranks=[r.rank for r in hits],
        share_pct=worst.cpu.sync_pct,
        threshold=f"synchronization > {t.sync_pct:g} % of step (proposal; Nsight Systems cuda_api_sync lists all)",
    )


def exposed_comm(result: AnalysisResult, t: Thresholds) -> Optional[Finding]:
    """Communication with no compute kernel running above ``exposed_comm_pct`` of GPU time."""
    hits = [r for r in result.ranks if r.comm.exposed_pct > t.exposed_comm_pct]
    if not hits:
        return None
    worst = max(hits, key=lambda r: r.comm.exposed_pct)
    evidence = [
        f"rank {r.rank}: exposed communication {r.comm.exposed_us / 1e3:.1f} ms = {r.comm.exposed_pct:.1f} % "
        f"of GPU time; {r.comm.overlap_pct:.1f} % of communication overlaps compute"
        for r in sorted(hits, key=lambda r: -r.comm.exposed_pct)[:8]
    ]
    return Finding(
        id="exposed-communication",
        title=f"Overlap communication with compute: {worst.comm.exposed_pct:.0f} % of GPU time is exposed communication",
        severity=severity(worst.comm.exposed_pct, t),
        evidence=evidence,
        fix="DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True); use model.no_sync() during "
            "gradient accumulation; raise the batch size per GPU",
        doc_url=DOCS_DDP,
        ranks=[r.rank for r in hits],
        share_pct=worst.comm.exposed_pct,
        threshold=f"exposed communication > {t.exposed_comm_pct:g} % (TensorBoard profiler)",
    )


RULES: List[Callable[[AnalysisResult, Thresholds], Optional[Finding]]] = [
    gpu_idle, dataloader_bound, pageable_memcpy, sync_in_step, exposed_comm,
]


def first_advice(result: AnalysisResult, thresholds: Optional[Thresholds] = None) -> List[Finding]:
    """Run every rule of :data:`RULES`; findings sorted by time at stake, largest first."""
    t = thresholds or Thresholds()
    findings = [f for f in (rule(result, t) for rule in RULES) if f is not None]
    return sorted(findings, key=lambda f: -f.share_pct)
