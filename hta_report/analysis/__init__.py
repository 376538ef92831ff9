"""The metrics: loaded traces in, :class:`~hta_report.model.AnalysisResult` (without advice) out."""
from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Dict, List, Union

import numpy as np

from .. import __version__
from ..errors import TraceError
from ..load import LoadedTraces, Location, RunSpec, quiet_hta, unreadable_error
from ..model import (MOST_STEPS, ATTRIBUTION_STEP, COMMUNICATION_STEP, CPU_SIDE_STEP, IDLE_CAUSES, IDLE_STEP, KERNEL_TYPES_STEP,
                     MEMCPY_STEP, SPAN_STEP, STEP_TIMES_STEP, TEMPORAL_STEP, WINDOWS_STEP, Aggregate, AnalysisResult,
                     Inventory, RankResult, TraceFileInfo, UnreadableTrace)
from .gpu_time import combine_kernel_type_shares
from .parallel import analyze_ranks
from .rank import analysis_step

__all__ = ["analyze_loaded", "assemble", "analysis_step", "where"]


def analyze_loaded(loaded: LoadedTraces, spec: RunSpec) -> AnalysisResult:
    """Every metric of already loaded traces: the per-rank analyses (in worker
    processes, see :mod:`.parallel`), the cross-rank ones (synchronization
    wait, kernel types of all ranks), the aggregate and the inventory. No
    advice: ``findings`` and ``checks`` are left empty for the rules
    (:func:`hta_report.rules.advise`).

    A rank whose events cannot be decoded is moved to ``inventory.unreadable``
    with the failing step; a rank where another step fails is reported with
    that step in its ``failures``, and left out of the aggregate figures that
    step gives (see :func:`_aggregate`).

    Args:
        loaded: the parsed traces (:func:`hta_report.load.load_traces`).
        spec: the run they came from (its folder: the inventory, ``manifest.json``).

    Raises:
        hta_report.errors.TraceError: every rank failed, or a step over all
            ranks (kernel breakdown) failed.
    """
    with quiet_hta():
        outcomes = analyze_ranks(loaded)
    return assemble(loaded.files, outcomes, spec, loaded.warnings, loaded.unreadable, loaded.last_step_included)


def assemble(files: List[TraceFileInfo], outcomes: List[Union[RankResult, TraceError]], spec: RunSpec,
             warnings: List[str], unreadable: List[UnreadableTrace], last_step_included: bool) -> AnalysisResult:
    """The result from each rank's analysis: the cross-rank figures
    (synchronization wait, kernel types of all ranks), the aggregate and the
    inventory. Every engine ends here (:mod:`hta_report.engines`).

    Args:
        files: the ranks' files, sorted by rank.
        outcomes: per file, its :class:`~hta_report.model.RankResult` or the
            :class:`~hta_report.errors.TraceError` of the step that failed
            (that rank is then listed as unreadable).
        spec: the run (its folder: inventory, ``manifest.json``; the
            windows set aside).
        warnings: the loader's warnings.
        unreadable: files left out before the analyses.
        last_step_included: whether the last ProfilerStep was kept.

    Raises:
        hta_report.errors.TraceError: every rank failed, or a step over all
            ranks (kernel breakdown) failed.
    """
    unreadable = list(unreadable)
    ranks: List[RankResult] = []
    for info, outcome in zip(files, outcomes):
        if isinstance(outcome, TraceError):
            unreadable.append(UnreadableTrace(path=info.path, reason=outcome.message))
            failure = outcome
        else:
            ranks.append(outcome)
    if not ranks:
        if len(unreadable) == 1:
            raise failure
        raise unreadable_error(unreadable)
    _sync_wait(ranks)
    _launch_order(ranks)
    gpu = [r for r in ranks if r.has_gpu and not r.failed(KERNEL_TYPES_STEP)]
    with quiet_hta(), analysis_step("kernel breakdown of all ranks (HTA)", where(ranks, spec.folder)):
        types_all = combine_kernel_type_shares([r.kernel_types for r in gpu])
    analyzed = {r.rank for r in ranks}
    trace_dir = spec.folder
    inventory = _inventory(trace_dir, ranks, [f for f in files if f.rank in analyzed], unreadable, warnings,
                           last_step_included)
    inventory.windows = list(spec.windows)
    return AnalysisResult(inventory=inventory, ranks=ranks, aggregate=_aggregate(ranks, types_all))


def where(ranks: List[RankResult], trace_dir: Location):
    """What an error over all ranks names: the one rank's file, else the directory."""
    return ranks[0].file if len(ranks) == 1 else trace_dir


def _sync_wait(ranks: List[RankResult]) -> None:
    """Per rank, collective time per step beyond the smallest of all ranks
    measured the same way (HTA's straggler analysis: the minimum is data
    transfer, the rest is waiting for the slowest rank): communication kernel
    time on ranks with communication kernels, host time in collective ops
    (``gloo:*``...) on the others, since a CPU backend waits for the slowest
    rank inside its collective ops. Each needs two or more ranks; sets
    ``collective_basis`` on every rank with collectives.

    With analyzed steps common to those ranks, the wait is taken per step
    (µs: each step's collective time minus that step's smallest). The rank
    with the smallest collective time of a step arrived last at its
    collectives (the others waited for it); ``late_steps`` counts those steps
    per rank and ``compared_steps`` the steps compared. Only when one rank
    arrived last in at least :data:`MOST_STEPS` of the steps do the others
    get a wait, the median of their per-step waits: ranks that take turns
    being late (scheduling noise) show none, and one slow step neither makes
    a straggler nor drags the wait (a mean would)."""
    kernels = {r.rank: r for r in ranks if r.has_gpu and r.comm.kernel_count and r.comm.us_per_step > 0
               and not r.failed(COMMUNICATION_STEP)}
    host = {r.rank: r for r in ranks if r.rank not in kernels and r.comm.cpu_collective_us_per_step > 0
            and not r.failed(COMMUNICATION_STEP)}
    for basis, group in (("kernels", kernels), ("host", host)):
        for r in group.values():
            r.comm.collective_basis = basis
        if len(group) < 2:
            continue
        total = {k: (r.comm.us_per_step if basis == "kernels" else r.comm.cpu_collective_us_per_step)
                 for k, r in group.items()}
        by_step = {k: {s.number: s.us for s in (r.comm.kernel_us_by_step if basis == "kernels"
                                                 else r.comm.host_collective_us_by_step)} for k, r in group.items()}
        common = sorted(set.intersection(*(set(v) for v in by_step.values())))
        if not common:
            for k, r in group.items():
                r.comm.sync_wait_us_per_step = total[k] - min(total.values())
            continue
        last = [min(group, key=lambda k: by_step[k][n]) for n in common]  # least time in collectives: came last
        for k, r in group.items():
            r.comm.late_steps, r.comm.compared_steps = last.count(k), len(common)
        straggler = max(group, key=last.count)
        consistent = last.count(straggler) >= math.ceil(MOST_STEPS * len(common))
        for k, r in group.items():
            waits = [by_step[k][n] - min(v[n] for v in by_step.values()) for n in common]
            r.comm.sync_wait_us_per_step = float(np.median(waits)) if consistent and k != straggler else 0.0


#: Collectives two ranks must share before the order of their launches is read (one can be the
#: window's first, launched late by a one-off).
MIN_LAUNCHES_COMPARED = 2


def _launch_order(ranks: List[RankResult]) -> None:
    """Which rank's host launches the collectives last, from the ranks'
    communication kernels and their launch calls
    (:attr:`~hta_report.model.CommSummary.launches`, one timeline: HTA
    aligns the ranks by one offset). Ranks with communication kernels and
    lists of one length run the same collectives, the n-th entries the same
    one (an all-to-all, an all-reduce bucket: NCCL runs a communicator's
    collectives in the order they are issued, the same on every rank);
    with :data:`MIN_LAUNCHES_COMPARED` or more, each rank's
    ``launched_last`` counts those it launched after every other rank, of
    ``launches_compared``. Where one rank launched every one of them last,
    its ``launch_lag_min_us``/``launch_lag_max_us`` say by how much after
    the next latest rank (µs), and every other rank's
    ``launch_wait_us_per_step`` is the time its own kernels of those
    collectives ran before that rank launched them (µs per analyzed step):
    a collective kernel cannot finish before its peer's is even launched,
    so that time is a wait for the late rank's host, whatever its GPU does."""
    group = [r for r in ranks if r.comm.collective_basis == "kernels" and r.comm.launches]
    if len(group) < 2 or len({len(r.comm.launches) for r in group}) != 1:
        return
    n = len(group[0].comm.launches)
    if n < MIN_LAUNCHES_COMPARED:
        return
    launch = np.array([[c.launch_us for c in r.comm.launches] for r in group])  # (ranks, collectives)
    order = np.sort(launch, axis=0)
    last = launch.argmax(axis=0)
    alone = order[-1] > order[-2]  # launched strictly after every other rank
    for k, r in enumerate(group):
        r.comm.launched_last = int(((last == k) & alone).sum())
        r.comm.launches_compared = n
    late = [k for k, r in enumerate(group) if r.comm.launched_last == n]
    if not late:
        return
    k = late[0]
    lag = launch[k] - order[-2]
    group[k].comm.launch_lag_min_us, group[k].comm.launch_lag_max_us = float(lag.min()), float(lag.max())
    for j, r in enumerate(group):
        if j == k:
            continue
        start = np.array([c.start_us for c in r.comm.launches])
        end = np.array([c.end_us for c in r.comm.launches])
        waited = np.clip(np.minimum(end, launch[k]) - start, 0.0, None)
        r.comm.launch_wait_us_per_step = float(waited.sum()) / max(1, r.steps_used)


def _mean(values: List[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _aggregate(ranks: List[RankResult], kernel_types) -> Aggregate:
    """Means over ranks; a rank where the step giving a figure failed
    (:attr:`RankResult.failures`) is left out of that figure's mean."""
    def having(*steps: str, gpu: bool = False) -> List[RankResult]:
        return [r for r in ranks if (r.has_gpu or not gpu) and not r.failed(*steps)]

    gpu = [r for r in ranks if r.has_gpu]
    stepped = [r for r in having(STEP_TIMES_STEP) if r.steps.count]
    agg = Aggregate(ranks=len(ranks), gpu_ranks=len(gpu), kernel_types=kernel_types)
    window = [r for r in having(WINDOWS_STEP, ATTRIBUTION_STEP, gpu=True) if r.window_us > 0]
    if window:  # the headline's window: the analyzed steps (else the traced window), exact times
        agg.busy_pct = _mean([r.busy_pct for r in window])
        agg.idle_pct = _mean([r.idle_pct for r in window])
        agg.kernel_busy_pct = _mean([r.kernel_busy_pct for r in window])
        agg.idle_by_cause = {c: _mean([100 * getattr(r.idle_attribution, f"{c}_us") / r.window_us for r in window])
                             for c in IDLE_CAUSES}
        comm, copies = [r for r in window if not r.failed(COMMUNICATION_STEP)], \
            [r for r in window if not r.failed(MEMCPY_STEP)]
        agg.exposed_comm_pct = _mean([r.exposed_comm_window_pct for r in comm])
        agg.comm_wait_pct = _mean([r.comm_wait_window_pct for r in comm])
        agg.exposed_memcpy_pct = _mean([r.exposed_copy_window_pct for r in copies])
    span = [r for r in having(SPAN_STEP, gpu=True) if r.gpu_span_us > 0]
    if span:
        agg.span_busy_pct = _mean([r.gpu_span_busy_pct for r in span])
    temporal, split = having(TEMPORAL_STEP, gpu=True), having(TEMPORAL_STEP, IDLE_STEP, gpu=True)
    if temporal:  # HTA's temporal breakdown, of its GPU span (ours where HTA's failed: RankResult.replaced)
        agg.compute_pct = _mean([r.temporal.compute_pct for r in temporal])
        agg.non_compute_pct = _mean([r.temporal.non_compute_pct for r in temporal])
        agg.hta_busy_pct = agg.compute_pct + agg.non_compute_pct
    if split:
        agg.idle_host_wait_pct = _mean([r.idle_split.host_wait_pct for r in split])
        agg.idle_kernel_wait_pct = _mean([r.idle_split.kernel_wait_pct for r in split])
        agg.idle_other_pct = _mean([r.idle_split.other_pct for r in split])
    if stepped:
        agg.mean_step_us = _mean([r.steps.mean_us for r in stepped])
        agg.max_rank_step_us = max(r.steps.mean_us for r in stepped)
    agg.dataloader_pct = _mean([r.cpu.dataloader_pct for r in having(CPU_SIDE_STEP) if r.cpu.steps_used])
    return agg


def _inventory(trace_dir, ranks: List[RankResult], files: List[TraceFileInfo], unreadable: List[UnreadableTrace],
               loader_warnings: List[str], last_step_included: bool) -> Inventory:
    import hta.version

    devices = sorted({d for r in ranks for d in r.device_names})
    manifest = _read_manifest(trace_dir)
    warnings = list(loader_warnings)
    if any(r.has_gpu for r in ranks):  # all CPU-only: the report says so once, at the top
        for r in ranks:
            if not r.has_gpu:
                warnings.append(f"rank {r.rank}: the trace holds no GPU activity (no kernel, memcpy or memset events)")
    return Inventory(
        input_dir=str(trace_dir),
        files=files,
        devices=devices,
        pytorch_version=str(manifest.get("torch_version")) if manifest.get("torch_version") else None,
        kineto_schema_versions=sorted({f.schema_version for f in files if f.schema_version is not None}),
        steps_found=max((r.steps.count for r in ranks), default=0),
        last_step_included=last_step_included,
        hta_version=str(getattr(hta.version, "__version__", "")),
        tool_version=__version__,
        analyzed_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        warnings=warnings,
        manifest=manifest,
        unreadable=unreadable,
    )


def _read_manifest(trace_dir: Location) -> Dict:
    path = trace_dir / "manifest.json"
    if not path.is_file():
        return {}
    try:
        # NaN/Infinity become strings: the result is saved as strict JSON.
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=str)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
