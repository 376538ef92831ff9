"""The analysis pipeline: loaded traces in, :class:`~hta_report.model.AnalysisResult` out."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from .. import __version__, progress
from ..advice import first_advice
from ..loading import GPU_CATEGORIES, LoadedTraces, load_traces, quiet_hta
from ..model import Aggregate, AnalysisResult, Inventory, RankResult
from .cpu_side import cpu_side
from .events import RankEvents
from .gpu_time import idle_breakdown, kernel_type_shares, temporal_breakdown, top_kernels
from .launch import launch_summary
from .steps import step_stats
from .transfers import comm_overlap, comm_summary, memcpy_summary


def analyze(
    trace_dir: os.PathLike | str,
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    loader: Optional[str] = None,
    cache=None,
) -> AnalysisResult:
    """Analyze a directory of Kineto traces (one per rank).

    Args:
        trace_dir: directory holding ``.json``/``.json.gz`` traces.
        recursive: descend into subdirectories.
        include_last_step: see :func:`hta_report.loading.load_traces`.
        loader: ``"fast"`` (default) or ``"hta"`` (HTA's own parser); see
            :func:`hta_report.ingest.resolve_loader`.
        cache: a :class:`hta_report.cache.Cache` (or a directory for one) to
            reuse parsed files and whole results keyed by the files' contents;
            None (default) reads and writes no cache.

    Returns:
        The full result model, findings included.

    Raises:
        hta_report.errors.InputError, hta_report.errors.TraceError: see
        :func:`hta_report.loading.load_traces`.
    """
    from ..cache import Cache
    from ..ingest import resolve_loader

    loader = resolve_loader(loader)
    if cache is not None and not isinstance(cache, Cache):
        cache = Cache(cache)
    key = None
    if cache is not None:
        key = cache.result_key(Path(trace_dir), recursive, include_last_step, loader)
        result = cache.cached_result(key)
        if result is not None:
            progress.current().record("analysis result (from cache)", 0.0)
            return result
    loaded = load_traces(trace_dir, recursive=recursive, include_last_step=include_last_step,
                         loader=loader, cache=cache)
    result = analyze_loaded(loaded, Path(trace_dir))
    if cache is not None and key is not None:
        from ..cache import attach

        cache.put_result(key, result.to_json())
        attach(result, cache, key)
    return result


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


#: Below this many events in all, analyses run in one process (a fork costs more than it saves).
PARALLEL_MIN_EVENTS = 200_000


def _whole_trace(loaded: LoadedTraces, gpu_ranks: List[int]):
    """HTA's breakdowns over all GPU ranks at once: temporal, communication
    overlap, kernel types; with the time each took."""
    view = loaded.analysis_for(gpu_ranks)
    times = []
    t0 = time.perf_counter()
    temporal = temporal_breakdown(view)
    times.append(("HTA temporal breakdown", time.perf_counter() - t0))
    t0 = time.perf_counter()
    overlap = comm_overlap(view)
    times.append(("HTA communication/computation overlap", time.perf_counter() - t0))
    t0 = time.perf_counter()
    types_all = kernel_type_shares(view)
    times.append(("HTA kernel breakdown", time.perf_counter() - t0))
    return temporal, overlap, types_all, times


def _rank_result(loaded: LoadedTraces, info, gpu_ranks: List[int]) -> tuple:
    """Everything about one rank but what needs the whole-trace breakdowns
    (``temporal``, ``comm``, and ``kernel_types`` when it is the only GPU rank);
    returns the result and the rank's decoded events."""
    stage = progress.current().stage
    r = info.rank
    with stage(f"rank {r}: decode events"):
        ev = RankEvents.from_loaded(loaded, r)
    rr = RankResult(rank=r, file=info.path, device_names=_device_names(loaded.meta.get(r, {})))
    with stage(f"rank {r}: steps and CPU side"):
        rr.steps = step_stats(ev)
        rr.cpu = cpu_side(ev)
    if ev.has_gpu:
        one = loaded.analysis_for([r])
        rr.has_gpu = True
        rr.gpu_span_us = ev.gpu_span_us
        with stage(f"rank {r}: HTA idle time breakdown"):
            rr.idle = idle_breakdown(one, r)
        if gpu_ranks != [r]:
            with stage(f"rank {r}: HTA kernel breakdown"):
                rr.kernel_types = kernel_type_shares(one)
        with stage(f"rank {r}: kernels, memcpy"):
            rr.top_kernels = top_kernels(ev, limit=50)
            rr.kernel_count = int(ev.gpu["s_cat"].eq("kernel").sum())
            rr.memcpy = memcpy_summary(ev)
        with stage(f"rank {r}: HTA kernel launch stats and queue length"):
            rr.launch = launch_summary(one, r)
    return rr, ev


def _finish_rank(rr: RankResult, ev: RankEvents, gpu_ranks: List[int], temporal, overlap, types_all) -> None:
    if rr.has_gpu:
        rr.temporal = temporal[rr.rank]
        if gpu_ranks == [rr.rank]:  # one GPU rank: the whole-trace breakdown is this rank's
            rr.kernel_types = [dataclasses.replace(k) for k in types_all]
        rr.comm = comm_summary(ev, overlap.get(rr.rank, 0.0))


def _child_share(loaded: LoadedTraces, gpu_ranks: List[int], infos) -> tuple:
    """The forked process's part: HTA's whole-trace breakdowns, then its ranks, finished."""
    whole = _whole_trace(loaded, gpu_ranks) if gpu_ranks else ({}, {}, [], [])
    done = []
    for info in infos:
        rr, ev = _rank_result(loaded, info, gpu_ranks)
        _finish_rank(rr, ev, gpu_ranks, *whole[:3])
        done.append(rr)
    return whole, done


def analyze_loaded(loaded: LoadedTraces, trace_dir: Path) -> AnalysisResult:
    """Run every analysis on already loaded traces (see :func:`analyze`).

    With several cores and a large trace, a forked process runs HTA's
    whole-trace breakdowns and a quarter of the ranks while this one does the rest."""
    from .. import workers

    with quiet_hta():
        gpu_ranks = [r for r in loaded.ranks if _has_gpu(loaded, r)]
        n_events = sum(len(loaded.frame(r)) for r in loaded.ranks)
        parallel = workers.count() > 1 and workers.can_fork() and n_events >= PARALLEL_MIN_EVENTS
        files = list(loaded.files)
        # HTA's whole-trace breakdowns cost about as much as half the ranks' own
        # analyses: the forked process takes them and a quarter of the ranks
        k = len(files) // 4 if parallel else 0
        mine, theirs = files[:len(files) - k], files[len(files) - k:]
        child = workers.Forked(lambda: _child_share(loaded, gpu_ranks, theirs)) if parallel else None
        here = [_rank_result(loaded, info, gpu_ranks) for info in mine]
        if child is not None:
            with progress.current().stage("waiting for the forked analyses (HTA's whole-trace breakdowns...)"):
                (temporal, overlap, types_all, times), done = child.result()
        else:
            (temporal, overlap, types_all, times), done = (
                _whole_trace(loaded, gpu_ranks) if gpu_ranks else ({}, {}, [], [])), []
        for name, seconds in times:
            progress.current().record(name + (" (in parallel)" if child is not None else ""), seconds)
        for rr, ev in here:
            _finish_rank(rr, ev, gpu_ranks, temporal, overlap, types_all)
        by_rank = {rr.rank: rr for rr in [rr for rr, _ in here] + done}
        ranks = [by_rank[info.rank] for info in files]

    result = AnalysisResult(
        inventory=_inventory(loaded, trace_dir, ranks),
        ranks=ranks,
        aggregate=_aggregate(ranks, types_all),
    )
    result.findings = first_advice(result)
    return result


def _has_gpu(loaded: LoadedTraces, rank: int) -> bool:
    """Whether ``rank`` has a kernel, memcpy or memset on a stream (as
    :attr:`RankEvents.has_gpu`, without decoding the names)."""
    df = loaded.frame(rank)
    if df.empty:
        return False
    ids = [i for i, s in enumerate(loaded.symbols) if s in GPU_CATEGORIES]
    return bool((df["stream"].ge(0) & df["cat"].isin(ids)).any())


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
        analyzed_at=_now(),
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
