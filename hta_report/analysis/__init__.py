"""The analysis pipeline: loaded traces in, :class:`~hta_report.model.AnalysisResult` out."""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

import numpy as np

from .. import __version__, progress
from ..errors import TraceError
from ..loading import LoadedTraces, load_traces, quiet_hta, unreadable_error
from ..model import Aggregate, AnalysisResult, Inventory, RankResult, TraceFileInfo, UnreadableTrace
from ..validation import DEFAULT_MAX_TRACE_BYTES
from .gpu_time import combine_kernel_type_shares
from .rank import analysis_step, analyze_ranks

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
    from ..api import analyze as analyze_with_cache  # one implementation of the cache lookup

    return analyze_with_cache(trace_dir, recursive=recursive, include_last_step=include_last_step,
                              max_trace_bytes=max_trace_bytes, config=config, loader=loader, cache=cache)


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
        for info, outcome in zip(loaded.files, analyze_ranks(loaded)):
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
        where = ranks[0].file if len(ranks) == 1 else trace_dir
        gpu = [r for r in ranks if r.has_gpu]
        with analysis_step("kernel breakdown of all ranks (HTA)", where):
            types_all = combine_kernel_type_shares([r.kernel_types for r in gpu])

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
