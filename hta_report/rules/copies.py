"""Copy rules: C3 pageable memory, C4 blocking copies, C15 exposed memcpy.

A copy's time belongs to the rule of its kind (``claims.OWNERSHIP``): a copy
from pageable memory to C3, with all it costs (the idle after its blocking
``cudaMemcpyAsync``, and after the copy op that waits for it); the other
copies of blocking copy ops to C4; every other exposed copy to C15.
"""
from __future__ import annotations

from typing import List

from ..model import PATTERNS_STEP, AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_PINNED, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step, pct_of_step,
                   per, rule, shares_over, up_to, worst_first)
from .config import AdviceConfig
from .wording import fix_for, specific


def _gpu(result: AnalysisResult) -> List[RankResult]:
    return [r for r in result.ranks if r.has_gpu]


def all_pageable_to_device(r: RankResult) -> bool:
    """True when every copy to the device on ``r`` is from pageable memory
    (the whole trace; device-to-host reads and memsets aside): the copy ops
    that wait for their copies (blocking copies) copy from pageable memory
    too, so what they cost is C3's."""
    to_device = [d for d in r.memcpy.directions if d.direction not in ("DtoH", "Memset")]
    return bool(to_device) and all(d.count == d.pageable_count for d in to_device)


def pageable_gain_us(r: RankResult) -> float:
    """Exposed pageable copy time plus the GPU idle that follows the blocking
    ``cudaMemcpyAsync`` of pageable copies to the device (µs per step), and,
    where every copy to the device is pageable (:func:`all_pageable_to_device`), the
    idle after the copy ops that wait for them."""
    blocked = r.idle_attribution.blocking_copy_us if all_pageable_to_device(r) else 0.0
    return r.memcpy.pageable_exposed_us_per_step + r.idle_attribution.pageable_copy_us + blocked


PAGEABLE_POOLS = ["copy:pageable", "idle:pageable_copy"]


def pageable_pools(r: RankResult) -> List[str]:
    """Where C3 claims on ``r``: :data:`PAGEABLE_POOLS`, and the idle after
    blocking copy ops where their copies are all pageable."""
    return PAGEABLE_POOLS + (["idle:blocking_copy"] if all_pageable_to_device(r) else [])


def _pageable_to_device(r: RankResult) -> int:
    """Pageable copies other than device-to-host reads (those are synchronization, C5)."""
    return sum(d.pageable_count for d in r.memcpy.directions if d.direction != "DtoH")


def _pageable_evidence(r: RankResult) -> str:
    dirs = ", ".join(f"{d.pageable_count} of {d.count} {d.direction}" for d in r.memcpy.directions
                     if d.pageable_count and d.direction != "DtoH")
    text = (f"rank {r.rank}: pageable copies: {dirs}; exposed pageable copy time "
            f"{ms(r.memcpy.pageable_exposed_us_per_step)} {per(r)}, GPU idle after their blocking "
            f"cudaMemcpyAsync {ms(r.idle_attribution.pageable_copy_us)} {per(r)}")
    if all_pageable_to_device(r) and r.memcpy.blocking_copies_per_step:
        ops = ", ".join(f"{o.name} ×{o.count}" for o in r.memcpy.blocking_ops[:4])
        text += (f"; {r.memcpy.blocking_copies_per_step:.1f} of them {per(r)} are issued by copy ops that then wait "
                 f"for the stream ({ops}), and the GPU idles {ms(r.idle_attribution.blocking_copy_us)} {per(r)} "
                 "after those")
    return text


@rule("pageable-memcpy", "C3", "Copies from pageable (unpinned) host memory to the device",
      "Nsight Systems cuda_memcpy_async",
      lambda c: "any copy from pageable memory to the device; severity from its exposed time and the idle after it",
      DOCS_PINNED,
      description=("Copies to the device from pageable (unpinned) host memory: each blocks the host in "
                   "`cudaMemcpyAsync` and cannot overlap compute. The gain is their exposed copy time and "
                   "the GPU idle that begins inside those calls. Device-to-host reads (`.item()`, `.cpu()`) "
                   "count under `sync-in-step`."),
      fix=("Copy from pinned memory without blocking: `DataLoader(..., pin_memory=True)` and "
           "`x.to(device, non_blocking=True)`; pin tensors you copy yourself once (`x = "
           "x.pin_memory()`)."),
      edit=EditLabel.COPIES_PINNED, evidence=('pageable_copy',))
def pageable_memcpy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C3: any ``Memcpy HtoD (Pageable -> Device)``-style copy. The gain is the
    copies' exposed time plus the GPU idle gaps that begin inside their
    ``cudaMemcpyAsync`` calls (pinned, non-blocking copies overlap both), and,
    on ranks where every copy to the device is pageable, the idle after the
    copy ops that wait for them (``non_blocking=False``: C4 leaves those
    to C3, whose fix removes the wait too).
    Copies *to* pageable memory (``Memcpy DtoH (Device -> Pageable)``) are
    device-to-host reads such as ``.item()``: the host waits because it needs
    the value, which pinning does not change, so they count under C5."""
    ranks = _gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    hits = worst_first([r for r in ranks if _pageable_to_device(r)], pageable_gain_us)
    if not hits:
        copies = sum(d.count for r in ranks for d in r.memcpy.directions if d.direction != "Memset")
        reads = sum(d.pageable_count for r in ranks for d in r.memcpy.directions if d.direction == "DtoH")
        return fine(f"{copies} copies, none from pageable memory to the device"
                    + (f" ({reads} pageable device-to-host reads: synchronization, see sync-in-step)" if reads else ""))
    evidence = evidence_lines(hits, _pageable_evidence)
    on_training_thread = any(r.cpu.dataloader_in_main_process for r in hits)
    if on_training_thread:
        evidence.append(MAIN_PROCESS_PIN)
    fix = (f"loader = DataLoader(ds, ...,{' num_workers=4,' if on_training_thread else ''} pin_memory=True)\n"
           "x = x.to(device, non_blocking=True)\n"
           "# tensors you copy yourself: pin them once (x = x.pin_memory()), then copy with non_blocking=True")
    made = [r for r in hits if not r.failed(PATTERNS_STEP) and r.patterns.cpu_tensor_copies_per_step > 0]
    if made:  # cpu-tensor-copied's fix removes these copies and their CPU fill: it comes first
        m = made[0]
        evidence.append(f"rank {m.rank}: copies of a tensor filled on the CPU just before, "
                        f"{m.patterns.cpu_tensor_copies_per_step:.0f} {per(m)} ("
                        + "; ".join(m.patterns.cpu_tensor_examples[:1]) + "): made on the GPU it needs no copy and "
                        "no CPU fill (cpu-tensor-copied)")
        fix = specific("# tensors filled on the CPU only to be copied: make them on the device (no copy, no CPU fill)\n"
                       "x = torch.zeros(n, device=device)   # or torch.ones / torch.randn / torch.full(..., device=)\n"
                       + fix_for("pageable-memcpy", hits, fix))
    return claim(fired, hits, pageable_pools, pageable_gain_us).verdict(
        cfg, "Pin host memory: copies from pageable memory block the host", evidence, fix)


#: pageable-memcpy's evidence line where batches are loaded on the training thread. On an H200
#: (bench/record_cuda.py collect-pinned, four pairs), pin_memory=True with num_workers=0 did not
#: shorten the step (least disturbed steps 37.0 -> 39.7 ms in the latest pair: the DataLoader's
#: __next__ took 27-29 ms a step before, 31-43 ms after, the pin itself 1.2-1.8 ms of it); with
#: 4 workers (collect-pinned-workers) the same fix took 15.2 -> 9.8 ms.
MAIN_PROCESS_PIN = ("batches are loaded on the training thread (_SingleProcessDataLoaderIter: num_workers=0): "
                    "pin_memory=True would pin each batch there, host time the prediction leaves out; with "
                    "DataLoader workers the loader pins in a thread of its own")


def blocking_gain_us(r: RankResult) -> float:
    """Exposed time of copies issued by blocking copy ops plus the GPU idle
    that follows them (µs per step); pageable copies count under C3."""
    return r.memcpy.blocking_exposed_us_per_step + r.idle_attribution.blocking_copy_us


BLOCKING_POOLS = ["copy:blocking", "idle:blocking_copy"]


def _blocking_evidence(r: RankResult) -> str:
    ops = ", ".join(f"{o.name} ×{o.count}" for o in r.memcpy.blocking_ops[:4])
    return (f"rank {r.rank}: {r.memcpy.blocking_copies_per_step:.1f} blocking copies {per(r)} ({ops}), "
            f"{ms(r.memcpy.blocking_copy_us_per_step)} of host time; their copies run with no kernel "
            f"{ms(r.memcpy.blocking_exposed_us_per_step)} {per(r)} and the GPU then idles "
            f"{ms(r.idle_attribution.blocking_copy_us)} {per(r)}")


@rule("blocking-copy", "C4", "Blocking copies to the device (memcpy followed by a stream synchronization)",
      "Nsight Systems cuda_memcpy_sync",
      lambda c: "any blocking copy to the device inside the steps; severity from its exposed copy and the GPU "
                "idle after it", DOCS_PINNED,
      description=("Copy ops inside the steps that copy to the device and then wait for the copy "
                   "(`non_blocking=False`: a memcpy followed by `cudaStreamSynchronize`, or a synchronous "
                   "`cudaMemcpy`). The gain is their exposed copy time and the GPU idle that begins inside "
                   "them."),
      fix=("Issue the copy ahead and let it overlap: `x.to(device, non_blocking=True)` from pinned "
           "memory; read results through a pinned buffer after an event, or every N steps instead of "
           "every step."),
      edit=EditLabel.COPIES_PINNED, evidence=('blocking_copy',))
def blocking_copy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C4: ``aten::copy_``/``aten::to`` ops that copy to the device, call a
    memcpy and then ``cudaStreamSynchronize`` (``non_blocking=False``) or a
    synchronous ``cudaMemcpy``. The gain is their copies' exposed time plus
    the GPU idle time in gaps that begin inside them (a pinned copy issued
    ahead, non-blocking, overlaps both). Device-to-host reads count under C5;
    on a rank where every copy to the device is from pageable memory, the
    blocking copies are C3's copies and their cost is C3's (``covered``)."""
    ranks = [r for r in _gpu(result) if r.has_runtime]
    if not ranks:
        return not_checked("no GPU activity with cuda_runtime calls in the traces")
    hits = worst_first([r for r in ranks if r.memcpy.blocking_copies_per_step > 0], blocking_gain_us)
    if not hits:
        return fine("no copy op waits for its memcpy")
    c = claim(fired, hits, BLOCKING_POOLS, blocking_gain_us,
              f"{hits[0].memcpy.blocking_copies_per_step:.1f} blocking copies {per(hits[0])} on rank {hits[0].rank}")
    fix = ("x = x.to(device, non_blocking=True)   # source in pinned memory: DataLoader(..., pin_memory=True)\n"
           "# results: copy into a pinned buffer with non_blocking=True and read it after an event,\n"
           "# or read them once every N steps instead of every step")
    return c.verdict(cfg, "Make copies non-blocking: the host waits for each copy to finish",
                     evidence_lines(c.hits, _blocking_evidence), fix)


def overlappable_copy_us(r: RankResult) -> float:
    """Exposed asynchronous copy time per step (µs) that overlapping with
    compute can hide: at most the kernel time of the step. A copy engine and
    the SMs run side by side, so a step of copies ``C`` and kernels ``K``
    run one after the other shrinks to ``max(C, K)`` at best: it saves
    ``min(C, K)``. A step that only copies (a copy benchmark, a loader that
    only moves data) has nothing to overlap with."""
    return min(r.memcpy.other_exposed_us_per_step, max(0.0, r.idle_attribution.kernel_busy_us))


def _exposed_evidence(r: RankResult, share: float) -> str:
    dirs = ", ".join(f"{d.direction} {d.count}× ({d.total_bytes / 1e6:.1f} MB in all)" for d in r.memcpy.directions
                     if d.direction != "Memset")
    exposed = r.memcpy.other_exposed_us_per_step
    bound = ("" if overlappable_copy_us(r) >= exposed else
             f"; kernels run only {ms(r.idle_attribution.kernel_busy_us)} {per(r)}, so overlap hides at most that")
    return (f"rank {r.rank}: copies with no kernel running {ms(exposed)} "
            f"{per(r)} ({pct_of_step(exposed, r):.1f} % {of_step(r)}){bound}; in the trace: {dirs}")


@rule("exposed-memcpy", "C15", "Copies that no compute overlaps",
      "XProf 5 % moderate / 20 % high",
      lambda c: f"exposed asynchronous copy time >= {c.exposed_memcpy_pct:g} % of the step", DOCS_PINNED,
      description=("Asynchronous copy time with no compute or communication kernel running, per step "
                   "(pageable copies are `pageable-memcpy`, copies of blocking copy ops `blocking-copy`), "
                   "as far as overlap can hide it: no more than the step's kernel time (a step of copies "
                   "C and kernels K shrinks to max(C, K) at best)."),
      fix=("Overlap copies with compute: `x.to(device, non_blocking=True)` from pinned memory, "
           "prefetch the next batch on a side stream (`torch.cuda.Stream`), no per-step `.cpu()` of "
           "results."))
def exposed_memcpy(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C15: copy time with no compute or communication kernel running, per
    step, for asynchronous copies (pageable copies are C3, copies of blocking
    copy ops C4), bounded by what overlap can hide (:func:`overlappable_copy_us`)."""
    ranks = _gpu(result)
    if not ranks:
        return not_checked("no GPU activity in the traces")
    if not any(d.direction != "Memset" for r in ranks for d in r.memcpy.directions):
        return fine("no memory copies")
    val, hits = shares_over(ranks, overlappable_copy_us, cfg.exposed_memcpy_pct)
    if not hits:
        return fine(f"exposed copies {up_to(ranks, val)}")
    worst = hits[0]
    fix = ("x = x.to(device, non_blocking=True)   # from pinned memory, so the copy overlaps compute\n"
           "# prefetch the next batch on a side stream (torch.cuda.Stream) while this one computes;\n"
           "# avoid per-step .cpu() of results")
    return claim(fired, hits, ["copy:other"], overlappable_copy_us).verdict(
        cfg, f"Overlap copies with compute: {val[worst.rank]:.0f} % {of_step(worst)} only copies",
        evidence_lines(hits, lambda r: _exposed_evidence(r, val[r.rank])), fix)
