"""The analysis pipeline: loaded traces in, :class:`~hta_report.model.AnalysisResult` out."""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

import numpy as np

from .. import __version__

if TYPE_CHECKING:
    from ..rules import AdviceConfig
from ..loading import LoadedTraces, load_traces, quiet_hta
from ..model import Aggregate, AnalysisResult, CommSummary, Inventory, RankResult
from .attribution import idle_attribution
from .copies import add_copy_metrics, blocking_copies, pageable_calls
from .cpu_side import cpu_side
from .events import RankEvents
from .gpu_time import idle_breakdown, kernel_type_shares, temporal_breakdown, top_kernels
from .distributed import add_data_parallel
from .kernels import add_misaligned_gemms, compute_major, tensor_core_use
from .launch import launch_summary
from .optimizer import optimizer_profile
from .regions import host_windows, windows
from .steps import step_stats
from .transfers import add_comm_metrics, comm_overlap, comm_summary, memcpy_summary


def analyze(
    trace_dir: os.PathLike | str,
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    config: Optional["AdviceConfig"] = None,
) -> AnalysisResult:
    """Analyze a directory of Kineto traces (one per rank).

    Args:
        trace_dir: directory holding ``.json``/``.json.gz`` traces.
        recursive: descend into subdirectories.
        include_last_step: see :func:`hta_report.loading.load_traces`.
        config: rule thresholds and disabled rules
            (:class:`hta_report.rules.AdviceConfig`); defaults when None.

    Returns:
        The full result model, findings and rule checks included.

    Raises:
        hta_report.errors.InputError, hta_report.errors.TraceError: see
        :func:`hta_report.loading.load_traces`.
    """
    loaded = load_traces(trace_dir, recursive=recursive, include_last_step=include_last_step)
    return analyze_loaded(loaded, Path(trace_dir), config)


def analyze_loaded(loaded: LoadedTraces, trace_dir: Path, config: Optional["AdviceConfig"] = None) -> AnalysisResult:
    """Run every analysis and the rule catalogue on already loaded traces (see :func:`analyze`)."""
    from ..rules import advise

    with quiet_hta():
        events = {r: RankEvents.from_loaded(loaded, r) for r in loaded.ranks}
        gpu_ranks = [r for r in loaded.ranks if events[r].has_gpu]
        ranks: List[RankResult] = []
        temporal, overlap, types_all = {}, {}, []
        if gpu_ranks:
            view = loaded.analysis_for(gpu_ranks)
            temporal = temporal_breakdown(view)
            overlap = comm_overlap(view)
            types_all = kernel_type_shares(view)
        for info in loaded.files:
            r = info.rank
            ev = events[r]
            rr = RankResult(rank=r, file=info.path, device_names=_device_names(loaded.meta.get(r, {})))
            rr.steps = step_stats(ev)
            rr.cpu = cpu_side(ev)
            w, _ = windows(ev)
            hw = host_windows(ev)
            rr.window_us = float((w[:, 1] - w[:, 0]).mean()) if len(w) else 0.0
            rr.steps_used = int(len(w))
            rr.has_runtime = bool(ev.cpu["s_cat"].eq("cuda_runtime").any())
            rr.optimizer = optimizer_profile(ev, hw)
            add_data_parallel(rr.cpu, ev, hw)
            if ev.has_gpu:
                one = loaded.analysis_for([r])
                blocking, pageable = blocking_copies(ev), pageable_calls(ev)
                rr.has_gpu = True
                rr.gpu_span_us = ev.gpu_span_us
                rr.temporal = temporal[r]
                rr.idle = idle_breakdown(one, r)
                rr.kernel_types = kernel_type_shares(one)
                rr.top_kernels = top_kernels(ev, limit=50)
                rr.kernel_count = int(ev.gpu["s_cat"].eq("kernel").sum())
                rr.memcpy = add_copy_metrics(memcpy_summary(ev), ev, w, hw, blocking, pageable)
                rr.comm = add_comm_metrics(comm_summary(ev, overlap.get(r, 0.0)), ev, w, hw)
                rr.launch = launch_summary(one, r, ev, w, hw)
                rr.tensor_cores = add_misaligned_gemms(tensor_core_use(ev, loaded.meta.get(r, {}), w), ev, hw)
                rr.idle_attribution = idle_attribution(ev, w, rr.optimizer, blocking, pageable)
            else:
                rr.comm = add_comm_metrics(CommSummary(), ev, w, hw)
                rr.tensor_cores.compute_major = compute_major(loaded.meta.get(r, {}))
            ranks.append(rr)
        _sync_wait(ranks)

    result = AnalysisResult(
        inventory=_inventory(loaded, trace_dir, ranks),
        ranks=ranks,
        aggregate=_aggregate(ranks, types_all),
    )
    advice = advise(result, config)
    result.findings, result.checks = advice.findings, advice.checks
    return result


def _sync_wait(ranks: List[RankResult]) -> None:
    """Per GPU rank, communication kernel time per step beyond the smallest of
    all GPU ranks (HTA's straggler analysis: the minimum is data transfer, the
    rest is waiting for the slowest rank). Needs two or more ranks with
    communication kernels. Ranks without GPU activity get none: host-side
    collectives (gloo) include the reduction's CPU work, which varies with
    scheduling, so their minimum is not a transfer time."""
    basis = {r.rank: r.comm.us_per_step for r in ranks if r.has_gpu and r.comm.us_per_step > 0}
    if len(basis) < 2:
        return
    floor = min(basis.values())
    for r in ranks:
        if r.rank in basis:
            r.comm.sync_wait_us_per_step = basis[r.rank] - floor


def _device_names(meta: dict) -> List[str]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")]


def _mean(values: List[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _aggregate(ranks: List[RankResult], kernel_types) -> Aggregate:
    gpu = [r for r in ranks if r.has_gpu]
    stepped = [r for r in ranks if r.steps.count]
    agg = Aggregate(ranks=len(ranks), gpu_ranks=len(gpu), kernel_types=kernel_types)
    if gpu:
        agg.idle_pct = _mean([r.temporal.idle_pct for r in gpu])
        agg.compute_pct = _mean([r.temporal.compute_pct for r in gpu])
        agg.non_compute_pct = _mean([r.temporal.non_compute_pct for r in gpu])
        agg.busy_pct = agg.compute_pct + agg.non_compute_pct
        agg.idle_host_wait_pct = _mean([r.temporal.idle_pct * r.idle.host_wait_pct / 100 for r in gpu])
        agg.idle_kernel_wait_pct = _mean([r.temporal.idle_pct * r.idle.kernel_wait_pct / 100 for r in gpu])
        agg.idle_other_pct = _mean([r.temporal.idle_pct * r.idle.other_pct / 100 for r in gpu])
        agg.exposed_comm_pct = _mean([r.comm.exposed_pct for r in gpu])
        agg.exposed_memcpy_pct = _mean([r.memcpy.exposed_pct for r in gpu])
    if stepped:
        agg.mean_step_us = _mean([r.steps.mean_us for r in stepped])
        agg.max_rank_step_us = max(r.steps.mean_us for r in stepped)
    agg.dataloader_pct = _mean([r.cpu.dataloader_pct for r in ranks if r.cpu.steps_used])
    return agg


def _inventory(loaded: LoadedTraces, trace_dir: Path, ranks: List[RankResult]) -> Inventory:
    import hta.version

    devices = sorted({d for r in ranks for d in r.device_names})
    manifest = _read_manifest(trace_dir)
    warnings = list(loaded.warnings)
    for r in ranks:
        if not r.has_gpu:
            warnings.append(f"rank {r.rank}: the trace holds no GPU activity (no kernel, memcpy or memset events)")
    return Inventory(
        input_dir=str(trace_dir),
        files=loaded.files,
        devices=devices,
        pytorch_version=str(manifest.get("torch_version")) if manifest.get("torch_version") else None,
        kineto_schema_versions=sorted({f.schema_version for f in loaded.files if f.schema_version is not None}),
        steps_found=max((r.steps.count for r in ranks), default=0),
        last_step_included=loaded.last_step_included,
        hta_version=str(getattr(hta.version, "__version__", "")),
        tool_version=__version__,
        analyzed_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        warnings=warnings,
        manifest=manifest,
    )


def _read_manifest(trace_dir: Path) -> Dict:
    path = trace_dir / "manifest.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
