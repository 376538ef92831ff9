"""Copy rules: C3 pageable memory, C4 blocking copies, C15 exposed memcpy."""
from __future__ import annotations

from ..model import AnalysisResult, RankResult
from .base import DOCS_PINNED, Fired, Verdict, fine, make_finding, ms, not_checked, of_step, pct_of_step, per, rule
from .config import AdviceConfig


def _gpu(result: AnalysisResult):
    return [r for r in result.ranks if r.has_gpu]


def pageable_gain_us(r: RankResult) -> float:
    """Exposed pageable copy time plus the GPU idle that follows the blocking
    ``cudaMemcpyAsync`` of pageable copies to the device (µs per step)."""
    return r.memcpy.pageable_exposed_us_per_step + r.idle_attribution.pageable_copy_us


PAGEABLE_POOLS = ["copy:pageable", "idle:pageable_copy"]


def _pageable_to_device(r: RankResult) -> int:
    """Pageable copies other than device-to-host reads (those are synchronization, C5)."""
    return sum(d.pageable_count for d in r.memcpy.directions if d.direction != "DtoH")


@rule("pageable-memcpy", "C3", "Copies from pageable (unpinned) host memory to the device",
      "Nsight Systems cuda_memcpy_async",
      lambda c: "any copy from pageable memory to the device; severity from its exposed time and the idle after it",
      DOCS_PINNED)
def pageable_memcpy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C3: any ``Memcpy HtoD (Pageable -> Device)``-style copy. The gain is the
    copies' exposed time plus the GPU idle gaps that begin inside their
    ``cudaMemcpyAsync`` calls (pinned, non-blocking copies overlap both).
    Copies *to* pageable memory (``Memcpy DtoH (Device -> Pageable)``) are
    device-to-host reads such as ``.item()``: the host waits because it needs
    the value, which pinning does not change, so they count under C5."""
    ranks = _gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = [r for r in ranks if _pageable_to_device(r)]
    if not hits:
        copies = sum(d.count for r in ranks for d in r.memcpy.directions if d.direction != "Memset")
        reads = sum(d.pageable_count for r in ranks for d in r.memcpy.directions if d.direction == "DtoH")
        return fine(f"{copies} copies, none from pageable memory to the device"
                    + (f" ({reads} pageable device-to-host reads: synchronization, see sync-in-step)" if reads else ""))
    hits.sort(key=lambda r: -pageable_gain_us(r))
    evidence = []
    for r in hits[:8]:
        dirs = ", ".join(f"{d.pageable_count} of {d.count} {d.direction}" for d in r.memcpy.directions
                         if d.pageable_count and d.direction != "DtoH")
        evidence.append(f"rank {r.rank}: pageable copies: {dirs}; exposed pageable copy time "
                        f"{ms(r.memcpy.pageable_exposed_us_per_step)} {per(r)}, GPU idle after their blocking "
                        f"cudaMemcpyAsync {ms(r.idle_attribution.pageable_copy_us)} {per(r)}")
    fix = ("loader = DataLoader(ds, ..., pin_memory=True)\n"
           "x = x.to(device, non_blocking=True)\n"
           "# tensors you copy yourself: pin them once (x = x.pin_memory()), then copy with non_blocking=True")
    claims = {r.rank: fired.take(r, PAGEABLE_POOLS, pageable_gain_us(r)) for r in hits}
    return make_finding(cfg, hits, claims, "Pin host memory: copies from pageable memory block the host",
                        evidence, fix)


def blocking_gain_us(r: RankResult) -> float:
    """Exposed time of copies issued by blocking copy ops plus the GPU idle
    that follows them (µs per step); pageable copies count under C3."""
    return r.memcpy.blocking_exposed_us_per_step + r.idle_attribution.blocking_copy_us


BLOCKING_POOLS = ["copy:blocking", "idle:blocking_copy"]


@rule("blocking-copy", "C4", "Blocking copies to the device (memcpy followed by a stream synchronization)",
      "Nsight Systems cuda_memcpy_sync",
      lambda c: "any blocking copy to the device inside the steps; severity from its exposed copy and the GPU "
                "idle after it", DOCS_PINNED)
def blocking_copy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C4: ``aten::copy_``/``aten::to`` ops that copy to the device, call a
    memcpy and then ``cudaStreamSynchronize`` (``non_blocking=False``) or a
    synchronous ``cudaMemcpy``. The gain is their copies' exposed time plus
    the GPU idle time in gaps that begin inside them (a pinned copy issued
    ahead, non-blocking, overlaps both). Device-to-host reads count under C5."""
    ranks = [r for r in _gpu(result) if r.has_runtime]
    if not ranks:
        return not_checked("no GPU activity with cuda_runtime calls in the traces")
    hits = [r for r in ranks if r.memcpy.blocking_copies_per_step > 0]
    if not hits:
        return fine("no copy op waits for its memcpy")
    hits.sort(key=lambda r: -blocking_gain_us(r))
    evidence = []
    for r in hits[:8]:
        ops = ", ".join(f"{o.name} ×{o.count}" for o in r.memcpy.blocking_ops[:4])
        evidence.append(f"rank {r.rank}: {r.memcpy.blocking_copies_per_step:.1f} blocking copies {per(r)} ({ops}), "
                        f"{ms(r.memcpy.blocking_copy_us_per_step)} of host time; their copies run with no kernel "
                        f"{ms(r.memcpy.blocking_exposed_us_per_step)} {per(r)} and the GPU then idles "
                        f"{ms(r.idle_attribution.blocking_copy_us)} {per(r)}")
    fix = ("x = x.to(device, non_blocking=True)   # source in pinned memory: DataLoader(..., pin_memory=True)\n"
           "# results: copy into a pinned buffer with non_blocking=True and read it after an event,\n"
           "# or read them once every N steps instead of every step")
    claims = {r.rank: fired.take(r, BLOCKING_POOLS, blocking_gain_us(r)) for r in hits}
    return make_finding(cfg, hits, claims, "Make copies non-blocking: the host waits for each copy to finish",
                        evidence, fix)


@rule("exposed-memcpy", "C15", "Copies that no compute overlaps",
      "XProf 5 % moderate / 20 % high",
      lambda c: f"exposed asynchronous copy time >= {c.exposed_memcpy_pct:g} % of the step", DOCS_PINNED)
def exposed_memcpy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C15: copy time with no compute or communication kernel running, per
    step, for asynchronous copies (pageable copies are C3, copies of blocking
    copy ops C4)."""
    ranks = _gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    if not any(d.direction != "Memset" for r in ranks for d in r.memcpy.directions):
        return fine("no memory copies")
    val = {r.rank: pct_of_step(r.memcpy.other_exposed_us_per_step, r) for r in ranks}
    hits = sorted([r for r in ranks if val[r.rank] >= cfg.exposed_memcpy_pct], key=lambda r: -val[r.rank])
    if not hits:
        w = max(ranks, key=lambda r: val[r.rank])
        return fine(f"exposed copies up to {val[w.rank]:.1f} % {of_step(w)}")
    worst = hits[0]
    evidence = []
    for r in hits[:8]:
        dirs = ", ".join(f"{d.direction} {d.count}× {d.total_bytes / 1e6:.1f} MB" for d in r.memcpy.directions
                         if d.direction != "Memset")
        evidence.append(f"rank {r.rank}: copies with no kernel running {ms(r.memcpy.other_exposed_us_per_step)} "
                        f"{per(r)} ({val[r.rank]:.1f} % {of_step(r)}); in the trace: {dirs}")
    fix = ("x = x.to(device, non_blocking=True)   # from pinned memory, so the copy overlaps compute\n"
           "# prefetch the next batch on a side stream (torch.cuda.Stream) while this one computes;\n"
           "# avoid per-step .cpu() of results")
    claims = {r.rank: fired.take(r, ["copy:other"], r.memcpy.other_exposed_us_per_step) for r in hits}
    return make_finding(cfg, hits, claims,
                        f"Overlap copies with compute: {val[worst.rank]:.0f} % {of_step(worst)} only copies",
                        evidence, fix)
