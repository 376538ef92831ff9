"""The analysis pipeline: loaded traces in, :class:`~hta_report.model.AnalysisResult` out."""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Union

import numpy as np

from .. import __version__, progress
from ..errors import HtaReportError, TraceError
from ..loading import LoadedTraces, load_traces, quiet_hta, unreadable_error
from ..model import Aggregate, AnalysisResult, CommSummary, Inventory, RankResult, TraceFileInfo, UnreadableTrace
from ..validation import DEFAULT_MAX_TRACE_BYTES, exception_summary
from .attribution import idle_attribution
from .copies import add_copy_metrics, blocking_copies, pageable_calls
from .cpu_side import cpu_side
from .events import COMMUNICATION, RankEvents
from .gpu_time import idle_breakdown, kernel_type_shares, temporal_breakdown, top_kernels
from .distributed import add_data_parallel
from .kernels import add_misaligned_gemms, compute_major, tensor_core_use
from .launch import launch_summary
from .optimizer import optimizer_profile
from .regions import host_windows, windows
from .steps import step_stats
from .transfers import add_comm_metrics, comm_overlap, comm_summary, memcpy_summary

if TYPE_CHECKING:
    from ..rules import AdviceConfig


def analyze(
    trace_dir: os.PathLike | str,
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    config: Optional["AdviceConfig"] = None,
    loader: Optional[str] = None,
    cache=None,
) -> AnalysisResult:
    """Analyze a directory of Kineto traces (one per rank).

    Traces that cannot be read or analyzed are left out and listed in
    ``result.inventory.unreadable``; the result covers the others (the CLI
    then exits 1 after writing the report).

    Args:
        trace_dir: directory holding ``.json``/``.json.gz`` traces.
        recursive: descend into subdirectories.
        include_last_step: see :func:`hta_report.loading.load_traces`.
        max_trace_bytes: cap on a trace's decompressed size (bytes); larger
            traces are refused before loading.
        config: rule thresholds and disabled rules
            (:class:`hta_report.rules.AdviceConfig`); defaults when None.
        loader: ``"fast"`` (default) or ``"hta"`` (HTA's own parser); see
            :func:`hta_report.ingest.resolve_loader`.
        cache: a :class:`hta_report.cache.Cache` (or a directory for one) to
            reuse parsed files and whole results keyed by the files' contents,
            the options and the rule configuration; None (default) reads and
            writes no cache.

    Returns:
        The full result model, findings and rule checks included.

    Raises:
        hta_report.errors.InputError: missing or empty directory, two files
            claiming one rank.
        hta_report.errors.TraceError: no trace can be read or analyzed (names
            the file, or each file), or a step over all ranks failed.
    """
    from ..cache import Cache, lookup_result
    from ..ingest import resolve_loader

    loader = resolve_loader(loader)
    if cache is not None and not isinstance(cache, Cache):
        cache = Cache(cache)
    key = None
    if cache is not None:
        key, result = lookup_result(cache, trace_dir, recursive, include_last_step, loader, max_trace_bytes, config)
        if result is not None:
            progress.current().record("analysis result (from cache)", 0.0)
            return result
    return analyze_uncached(trace_dir, recursive, include_last_step, max_trace_bytes, config, loader, cache, key)


def analyze_uncached(trace_dir, recursive: bool, include_last_step: Optional[bool], max_trace_bytes: int,
                     config, loader: str, cache, key: Optional[str]) -> AnalysisResult:
    """:func:`analyze` after a result-cache miss: parse (through the parse
    cache when ``cache`` is given), analyze, and store the result under
    ``key`` (from :func:`hta_report.cache.lookup_result`) unless some trace was
    unreadable."""
    loaded = load_traces(trace_dir, recursive=recursive, include_last_step=include_last_step,
                         max_trace_bytes=max_trace_bytes, loader=loader, cache=cache)
    result = analyze_loaded(loaded, Path(trace_dir), config)
    if cache is not None and key is not None and not result.inventory.unreadable:
        from ..cache import attach

        cache.put_result(key, result.to_json())
        attach(result, cache, key)
    return result


@contextlib.contextmanager
def analysis_step(step: str, path: Union[str, Path]) -> Iterator[None]:
    """Turn an unexpected exception raised inside ``step`` into a
    :class:`~hta_report.errors.TraceError` naming ``path`` and ``step``.

    The one place where failures of HTA or of our analyses on a loadable but
    malformed trace become input errors; the original exception is chained
    (``--debug`` shows it). Errors of our own pass through unchanged.

    Raises:
        hta_report.errors.TraceError: ``step`` raised something else than an
            :class:`~hta_report.errors.HtaReportError`.
    """
    try:
        yield
    except HtaReportError:
        raise
    except Exception as exc:
        raise TraceError(
            f"analysis failed at {step}: {exception_summary(exc)} (the trace may be malformed; --debug shows the "
            "traceback; if the trace is valid, please report it as a bug)", path, step=step) from exc


def _analyze_rank(loaded: LoadedTraces, info: TraceFileInfo) -> RankResult:
    """Every per-rank analysis of one rank.

    Raises:
        hta_report.errors.TraceError: a step failed (see :func:`analysis_step`).
    """
    r, path = info.rank, info.path
    with analysis_step("decoding events", path):
        ev = RankEvents.from_loaded(loaded, r)
        has_gpu = ev.has_gpu
    rr = RankResult(rank=r, file=path, device_names=_device_names(loaded.meta.get(r, {})))
    with analysis_step("step times", path):
        rr.steps = step_stats(ev)
    with analysis_step("CPU side", path):
        rr.cpu = cpu_side(ev)
    with analysis_step("step windows and optimizer", path):
        w, _ = windows(ev)
        hw = host_windows(ev)
        rr.window_us = float((w[:, 1] - w[:, 0]).mean()) if len(w) else 0.0
        rr.steps_used = int(len(w))
        rr.has_runtime = bool(ev.cpu["s_cat"].eq("cuda_runtime").any())
        rr.optimizer = optimizer_profile(ev, hw)
        add_data_parallel(rr.cpu, ev, hw)
    if not has_gpu:
        with analysis_step("communication", path):
            rr.comm = add_comm_metrics(CommSummary(), ev, w, hw)
            rr.tensor_cores.compute_major = compute_major(loaded.meta.get(r, {}))
        return rr
    one = loaded.analysis_for([r])
    rr.has_gpu = True
    with analysis_step("GPU time span", path):
        rr.gpu_span_us = ev.gpu_span_us
    with analysis_step("temporal breakdown (HTA)", path):
        rr.temporal = temporal_breakdown(one)[r]
    with analysis_step("idle time breakdown (HTA)", path):
        rr.idle = idle_breakdown(one, r)
    with analysis_step("kernel breakdown (HTA)", path):
        rr.kernel_types = kernel_type_shares(one)
        rr.top_kernels = top_kernels(ev, limit=50)
        rr.kernel_count = int(ev.gpu["s_cat"].eq("kernel").sum())
    with analysis_step("memcpy summary", path):
        blocking, pageable = blocking_copies(ev), pageable_calls(ev)
        rr.memcpy = add_copy_metrics(memcpy_summary(ev), ev, w, hw, blocking, pageable)
    with analysis_step("communication overlap (HTA)", path):
        # comm_summary ignores the overlap of a rank without communication kernels: skip HTA's call
        has_comm = bool(ev.gpu["kernel_type"].eq(COMMUNICATION).any())
        rr.comm = add_comm_metrics(comm_summary(ev, comm_overlap(one).get(r, 0.0) if has_comm else 0.0), ev, w, hw)
    with analysis_step("launch statistics (HTA)", path):
        rr.launch = launch_summary(one, r, ev, w, hw)
    with analysis_step("Tensor Core use", path):
        rr.tensor_cores = add_misaligned_gemms(tensor_core_use(ev, loaded.meta.get(r, {}), w), ev, hw)
    with analysis_step("idle attribution", path):
        rr.idle_attribution = idle_attribution(ev, w, rr.optimizer, blocking, pageable)
    return rr


def analyze_loaded(loaded: LoadedTraces, trace_dir: Path, config: Optional["AdviceConfig"] = None) -> AnalysisResult:
    """Run every analysis and the rule catalogue on already loaded traces (see :func:`analyze`).

    A rank whose analysis fails is moved to ``inventory.unreadable`` with the
    failing step; the others are reported.

    Raises:
        hta_report.errors.TraceError: every rank failed, or a step over all
            ranks (kernel breakdown, advice) failed.
    """
    unreadable: List[UnreadableTrace] = list(loaded.unreadable)
    ranks: List[RankResult] = []
    with quiet_hta():
        for info in loaded.files:
            try:
                with progress.current().stage(f"analyze rank {info.rank}"):
                    ranks.append(_analyze_rank(loaded, info))
            except TraceError as exc:
                unreadable.append(UnreadableTrace(path=info.path, reason=exc.message))
                failure = exc
        if not ranks:
            if len(unreadable) == 1:
                raise failure
            raise unreadable_error(unreadable)
        _sync_wait(ranks)
        where = ranks[0].file if len(ranks) == 1 else trace_dir
        types_all = []
        gpu = [r for r in ranks if r.has_gpu]
        if len(gpu) == 1:  # the same HTA computation as the rank's own
            types_all = copy.deepcopy(gpu[0].kernel_types)
        elif gpu:
            with analysis_step("kernel breakdown of all ranks (HTA)", where):
                types_all = kernel_type_shares(loaded.analysis_for([r.rank for r in gpu]))

    analyzed = {r.rank for r in ranks}
    result = AnalysisResult(
        inventory=_inventory(loaded, trace_dir, ranks, [f for f in loaded.files if f.rank in analyzed], unreadable),
        ranks=ranks,
        aggregate=_aggregate(ranks, types_all),
    )
    from ..rules import advise

    with analysis_step("advice", where), progress.current().stage("advice"):
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


def _inventory(loaded: LoadedTraces, trace_dir: Path, ranks: List[RankResult], files: List[TraceFileInfo],
               unreadable: List[UnreadableTrace]) -> Inventory:
    import hta.version

    devices = sorted({d for r in ranks for d in r.device_names})
    manifest = _read_manifest(trace_dir)
    warnings = list(loaded.warnings)
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
        last_step_included=loaded.last_step_included,
        hta_version=str(getattr(hta.version, "__version__", "")),
        tool_version=__version__,
        analyzed_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        warnings=warnings,
        manifest=manifest,
        unreadable=unreadable,
    )


def _read_manifest(trace_dir: Path) -> Dict:
    path = trace_dir / "manifest.json"
    if not path.is_file():
        return {}
    try:
        # NaN/Infinity become strings: the result is saved as strict JSON.
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=str)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
