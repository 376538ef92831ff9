"""Input pipeline rules: C1 DataLoader-bound, C2 DataLoader in the main process."""
from __future__ import annotations

from typing import List

from ..errors import plural
from ..model import AnalysisResult, RankResult
from ..replay_terms import EditLabel
from .base import (DOCS_DATALOADER, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step, pct_of_step,
                   per, rule, shares_over, step_words, up_to, worst_first)
from .config import AdviceConfig

#: Why a DataLoader finding on a CPU-only rank predicts a range (see
#: :func:`hta_report.analysis.replay.edits.edit_no_dataloader`).
CPU_ONLY_RANGE = ("on a rank without GPU work the workers take their CPU time from the cores the training's own "
                  "threads use (PyTorch's intra-op threads default to one per physical core), which the trace does "
                  "not show: the prediction keeps 25-70 % of the loading time in the step, and its interval spans "
                  "that; where the loading is light, workers can cost more than they hide (on a 2-core machine, 2 "
                  "workers saved half the step with heavy augmentation and made it 16-26 % slower with light)")
#: C2's fix on CPU-only ranks: no GPU to divide the cores by, and the workers need cores the
#: training's own threads leave them.
CPU_WORKERS_FIX = ("loader = DataLoader(ds, batch_size=..., num_workers=N, persistent_workers=True)\n"
                   "# CPU-only training: the workers share the cores with the training's own threads;\n"
                   "# leave them theirs: torch.set_num_threads(max(1, os.cpu_count() - N))")
WORKERS_FIX = ("loader = DataLoader(ds, batch_size=..., num_workers=8, pin_memory=True,\n"
               "                    persistent_workers=True, prefetch_factor=4)\n"
               "# num_workers up to the CPU cores per GPU; move heavy augmentation to the GPU")


def dataloader_wait_us(r: RankResult) -> float:
    """Time per step the DataLoader costs (µs): GPU idle while the host is in
    the DataLoader on GPU ranks, host time in it on ranks without GPU activity."""
    return r.idle_attribution.dataloader_us if r.has_gpu else r.cpu.dataloader_us_per_step


def pools(r: RankResult) -> List[str]:
    """Where the DataLoader's time is claimed from on ``r`` (see :mod:`.claims`)."""
    return ["idle:dataloader"] if r.has_gpu else ["host:dataloader"]


def _evidence(r: RankResult) -> str:
    if r.has_gpu:
        return (f"rank {r.rank}: the GPU idles {ms(dataloader_wait_us(r))} {per(r)} while the host waits for the "
                f"DataLoader ({pct_of_step(dataloader_wait_us(r), r):.1f} % of {step_words(r)}); host time in "
                f"the DataLoader {ms(r.cpu.dataloader_us_per_step)} {per(r)}")
    return (f"rank {r.rank}: {ms(r.cpu.dataloader_us_per_step)} {per(r)} in enumerate(DataLoader)#... "
            f"({r.cpu.dataloader_pct:.1f} % of {step_words(r)})")


def _with_dataloader(result: AnalysisResult) -> List[RankResult]:
    return [r for r in result.ranks if r.cpu.dataloader_seen and r.steps_used]


@rule("dataloader-bound", "C1", "Input-bound: the step waits for the DataLoader",
      "TensorBoard profiler 5 %, XProf 5 % / 20 %",
      lambda c: f"DataLoader wait > {c.dataloader_pct:g} % of the step", DOCS_DATALOADER,
      description=("GPU idle time while the host waits for the next batch (`enumerate(DataLoader)#...`), or "
                   "host time in the DataLoader on ranks without GPU activity, as a share of the step."),
      fix=("Load batches ahead of the step in worker processes: `DataLoader(ds, num_workers=N, "
           "pin_memory=True, persistent_workers=True, prefetch_factor=4)`, with N up to the CPU "
           "cores per GPU; move heavy augmentation to the GPU or offline."),
      edit=EditLabel.DATALOADER_HIDDEN, evidence=('dataloader',))
def dataloader_bound(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C1: GPU idle while the host is in ``enumerate(DataLoader)#...`` (host
    time in it on ranks without GPU activity) above ``dataloader_pct`` of the step."""
    ranks = _with_dataloader(result)
    if not ranks:
        return not_checked("no enumerate(DataLoader)#... events in the traces")
    val, hits = shares_over(ranks, dataloader_wait_us, cfg.dataloader_pct, strict=True)
    if not hits:
        return fine(f"DataLoader wait {up_to(ranks, val)}")
    evidence = evidence_lines(hits, _evidence)
    if any(r.cpu.dataloader_in_main_process for r in hits):
        evidence.append("batches are loaded in the main process (_SingleProcessDataLoaderIter: num_workers=0)")
    if any(not r.has_gpu for r in hits):
        evidence.append(CPU_ONLY_RANGE)
    return claim(fired, hits, pools, dataloader_wait_us).verdict(
        cfg, _title(hits[0], val[hits[0].rank]), evidence,
        CPU_WORKERS_FIX if all(not r.has_gpu for r in hits) else WORKERS_FIX)


def _title(r: RankResult, wait_pct: float) -> str:
    """The finding's title on rank ``r`` whose GPU waits ``wait_pct`` (% of the
    step) for the DataLoader: with the host's own time in it beside where that
    is larger by a point or more (the GPU drained its queued lead during the
    load: the replay's saving can reach the host time, not only the wait)."""
    host = r.cpu.dataloader_pct
    if r.has_gpu and host >= wait_pct + 1.0:
        return (f"Input-bound: the DataLoader holds the host {host:.0f} % {of_step(r)}, the GPU waiting "
                f"{wait_pct:.0f} %")
    return f"Input-bound: {wait_pct:.0f} % {of_step(r)} waits for the DataLoader"


@rule("dataloader-main-process", "C2", "DataLoader runs in the main process (num_workers=0)",
      "PyTorch profiler pattern matcher, PyTorch Lightning",
      lambda c: "any _SingleProcessDataLoaderIter; severity from the DataLoader wait", DOCS_DATALOADER,
      description=("Batches loaded on the training thread (`_SingleProcessDataLoaderIter`: `num_workers=0`). "
                   "Its time is the DataLoader wait; where `dataloader-bound` fired on a rank it already "
                   "counts that wait, and this rule is covered by it."),
      fix=("Give the DataLoader worker processes: `DataLoader(ds, num_workers=N, pin_memory=True, "
           "persistent_workers=True)`, with N about the CPU cores per GPU minus one."),
      edit=EditLabel.DATALOADER_HIDDEN, evidence=('dataloader',))
def dataloader_main_process(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C2: batches loaded on the training thread (``_SingleProcessDataLoaderIter``);
    the gain is the DataLoader wait of C1, which worker processes would take
    off the critical path. C2 defers to C1 (``claims.OWNERSHIP``): on a rank
    where C1 fired, C1 already counts that wait (its evidence names the main
    process), so C2 leaves the rank out, and is ``covered`` when none is left."""
    ranks = _with_dataloader(result)
    if not ranks:
        return not_checked("no enumerate(DataLoader)#... events in the traces")
    hits = worst_first([r for r in ranks if r.cpu.dataloader_in_main_process],
                       lambda r: pct_of_step(dataloader_wait_us(r), r))
    if not hits:
        return fine("the DataLoader uses worker processes")
    c = claim(fired, hits, pools, dataloader_wait_us,
              f"the DataLoader runs in the main process on {plural(len(hits), 'rank')}")
    evidence = evidence_lines(c.hits, lambda r: (
        f"rank {r.rank}: enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__, "
        f"{ms(r.cpu.dataloader_us_per_step)} {per(r)} on the training thread"))
    evidence.append(_evidence(c.worst))
    if any(not r.has_gpu for r in c.hits):
        evidence.append(CPU_ONLY_RANGE)
    fix = CPU_WORKERS_FIX if all(not r.has_gpu for r in c.hits) else (
        "loader = DataLoader(ds, batch_size=...,\n"
        "    num_workers=max(1, os.cpu_count() // torch.cuda.device_count() - 1),\n"
        "    pin_memory=True, persistent_workers=True)")
    return c.verdict(cfg, "Load batches in worker processes: the DataLoader runs in the main process (num_workers=0)",
                     evidence, fix)
