"""Every per-rank analysis, in two parts that can run side by side.

A rank's analyses split into HTA's (:func:`hta_part`: temporal, idle-time and
kernel breakdowns, communication overlap, launch statistics; HTA classifies
kernels row by row, so these take about half of the time) and our own
(:func:`own_part`: steps, CPU side, memcpy, communication and launch metrics
per step, Tensor Core use, idle attribution). :func:`analyze_ranks` runs the
parts of all ranks in forked worker processes, one per core
(``HTA_REPORT_WORKERS``), largest rank first, and joins them
(:func:`join_parts`); with one worker, or where ``fork`` is unavailable, it
runs them here one after the other. Both give the same result.
"""
from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import pandas as pd

from .. import progress, workers
from ..errors import HtaReportError, TraceError
from ..model import (CommSummary, IdleBreakdown, KernelTypeShare, LaunchSummary, RankResult, TemporalBreakdown,
                     TraceFileInfo)
from ..validation import exception_summary
from .attribution import idle_attribution
from .copies import add_copy_metrics, blocking_copies, pageable_calls
from .cpu_side import cpu_side
from .distributed import add_data_parallel
from .events import COMMUNICATION, RankEvents, kernel_type
from .gpu_time import idle_breakdown, kernel_type_shares, temporal_breakdown, top_kernels
from .kernels import add_misaligned_gemms, compute_major, tensor_core_use
from .launch import LaunchContext, add_launch_metrics, launch_context, launch_summary
from .optimizer import optimizer_profile
from .regions import host_windows, windows
from .steps import step_stats
from .transfers import add_comm_metrics, comm_overlap, comm_summary, memcpy_summary

#: Below this many events in all, the ranks are analyzed in this process: a
#: pool of forked workers costs about 40 ms, more than it saves on such traces.
PARALLEL_MIN_EVENTS = 2000
#: GPU event categories (HTA's ``cat``): what makes a rank a GPU rank.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


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


@dataclass
class HtaPart:
    """HTA's analyses of one GPU rank (see :func:`hta_part`)."""

    temporal: TemporalBreakdown
    idle: IdleBreakdown
    kernel_types: List[KernelTypeShare]
    comm_overlap_pct: float
    launch: LaunchSummary
    #: launch calls over the runtime cutoff: ``correlation``, ``cpu_duration`` (µs)
    slow_launches: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass
class OwnPart:
    """Our analyses of one rank (see :func:`own_part`): the rank's result
    without HTA's fields, and what :func:`join_parts` needs to add them."""

    result: RankResult
    launch: Optional[LaunchContext] = None


def gpu_presence(loaded, rank: int) -> Tuple[bool, bool]:
    """Whether ``rank`` has GPU events (kernels, memcpy, memset on a stream)
    and communication kernels, from the encoded dataframe without decoding it
    (the same selection as :attr:`RankEvents.gpu`)."""
    df = loaded.frame(rank)
    if df.empty:
        return False, False
    symbols = loaded.symbols
    cats = [i for i, s in enumerate(symbols) if s in GPU_CATEGORIES]
    gpu = df["stream"].to_numpy() >= 0
    gpu &= np.isin(df["cat"].to_numpy(), cats)
    if not gpu.any():
        return False, False
    names = np.unique(df["name"].to_numpy()[gpu])
    return True, any(kernel_type(symbols[i]) == COMMUNICATION for i in names.tolist())


def hta_part(loaded, info: TraceFileInfo) -> Optional[HtaPart]:
    """HTA's per-rank analyses of one rank, None for a rank without GPU events.

    Raises:
        hta_report.errors.TraceError: an analysis failed (see :func:`analysis_step`).
    """
    r, path = info.rank, info.path
    with analysis_step("decoding events", path):
        has_gpu, has_comm = gpu_presence(loaded, r)
    if not has_gpu:
        return None
    one = loaded.analysis_for([r])
    with analysis_step("temporal breakdown (HTA)", path):
        temporal = temporal_breakdown(one)[r]
    with analysis_step("idle time breakdown (HTA)", path):
        idle = idle_breakdown(one, r)
    with analysis_step("kernel breakdown (HTA)", path):
        kernel_types = kernel_type_shares(one)
    with analysis_step("communication overlap (HTA)", path):
        # comm_summary ignores the overlap of a rank without communication kernels: skip HTA's call
        overlap = comm_overlap(one).get(r, 0.0) if has_comm else 0.0
    with analysis_step("launch statistics (HTA)", path):
        launch, slow = launch_summary(one, r)
    return HtaPart(temporal=temporal, idle=idle, kernel_types=kernel_types, comm_overlap_pct=overlap,
                   launch=launch, slow_launches=slow)


def own_part(loaded, info: TraceFileInfo) -> OwnPart:
    """Our per-rank analyses of one rank (everything but HTA's).

    Raises:
        hta_report.errors.TraceError: an analysis failed (see :func:`analysis_step`).
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
        return OwnPart(result=rr)
    rr.has_gpu = True
    with analysis_step("GPU time span", path):
        rr.gpu_span_us = ev.gpu_span_us
    with analysis_step("kernel breakdown", path):
        rr.top_kernels = top_kernels(ev, limit=50)
        rr.kernel_count = int(ev.gpu["s_cat"].eq("kernel").sum())
    with analysis_step("memcpy summary", path):
        blocking, pageable = blocking_copies(ev), pageable_calls(ev)
        rr.memcpy = add_copy_metrics(memcpy_summary(ev), ev, w, hw, blocking, pageable)
    with analysis_step("communication", path):
        rr.comm = add_comm_metrics(comm_summary(ev, 0.0), ev, w, hw)
    with analysis_step("Tensor Core use", path):
        rr.tensor_cores = add_misaligned_gemms(tensor_core_use(ev, loaded.meta.get(r, {}), w), ev, hw)
    with analysis_step("idle attribution", path):
        rr.idle_attribution = idle_attribution(ev, w, rr.optimizer, blocking, pageable)
    with analysis_step("launch statistics", path):
        launch = launch_context(ev, w, hw)
    return OwnPart(result=rr, launch=launch)


def join_parts(own: OwnPart, hta: Optional[HtaPart], info: TraceFileInfo) -> RankResult:
    """The rank's result: :func:`own_part`'s with HTA's fields added.

    Raises:
        hta_report.errors.TraceError: the launch metrics failed.
    """
    rr = own.result
    if not rr.has_gpu or hta is None:
        return rr
    rr.temporal, rr.idle, rr.kernel_types = hta.temporal, hta.idle, hta.kernel_types
    if rr.comm.kernel_count:
        rr.comm.overlap_pct = float(hta.comm_overlap_pct)
    with analysis_step("launch statistics", info.path):
        rr.launch = add_launch_metrics(hta.launch, hta.slow_launches, own.launch)
    return rr


def analyze_rank(loaded, info: TraceFileInfo) -> RankResult:
    """Every per-rank analysis of one rank, in this process.

    Raises:
        hta_report.errors.TraceError: a step failed (see :func:`analysis_step`).
    """
    own = own_part(loaded, info)
    hta = hta_part(loaded, info) if own.result.has_gpu else None
    return join_parts(own, hta, info)


# ---------------------------------------------------------------- side by side in forked workers

#: What the forked workers read: set just before the pool forks them.
_LOADED = None


def _run_part(kind: str, index: int, release: bool) -> Tuple[str, object, float]:
    """One part of one rank, in a worker: ``("ok", part, seconds)`` or
    ``("error", (message, step), seconds)`` (a TraceError is rebuilt in the
    parent: its pickled form would repeat the path). With ``release``, the
    worker's garbage is collected and its free heap pages handed back
    afterwards: it may idle now while another worker runs, and would
    otherwise keep its temporaries (peak memory of the process tree)."""
    info = _LOADED.files[index]
    t0 = time.perf_counter()
    try:
        part = own_part(_LOADED, info) if kind == "own" else hta_part(_LOADED, info)
    except TraceError as exc:
        return "error", (exc.message, exc.step), time.perf_counter() - t0
    finally:
        if release:
            gc.collect()
            workers.release_free_memory()
    return "ok", part, time.perf_counter() - t0


def analyze_ranks(loaded, infos: Optional[List[TraceFileInfo]] = None,
                  n_workers: Optional[int] = None) -> List[Union[RankResult, TraceError]]:
    """Analyze ``infos`` (default: every file of ``loaded``), each rank's two
    parts side by side in up to ``n_workers`` forked processes (default:
    :func:`hta_report.workers.count`; in this process when that is 1, where
    ``fork`` is unavailable, or below :data:`PARALLEL_MIN_EVENTS` events).

    Returns:
        Per file, in order, its :class:`~hta_report.model.RankResult` or the
        :class:`~hta_report.errors.TraceError` of the failing step.
    """
    infos = list(loaded.files if infos is None else infos)
    n = workers.count() if n_workers is None else n_workers
    events = sum(len(loaded.frame(info.rank)) for info in infos)
    if n <= 1 or not workers.can_fork() or events < PARALLEL_MIN_EVENTS:
        return [_sequential(loaded, info) for info in infos]
    return _parallel(loaded, infos, n)


def _sequential(loaded, info: TraceFileInfo) -> Union[RankResult, TraceError]:
    try:
        with progress.current().stage(f"analyze rank {info.rank}"):
            return analyze_rank(loaded, info)
    except TraceError as exc:
        return exc


def _parallel(loaded, infos: List[TraceFileInfo], n: int) -> List[Union[RankResult, TraceError]]:
    global _LOADED
    order = sorted(range(len(infos)), key=lambda k: -len(loaded.frame(infos[k].rank)))  # largest first
    jobs = [(kind, k) for k in order for kind in ("own", "hta")]
    outcomes: Dict[Tuple[str, int], Tuple[str, object, float]] = {}
    size = min(n, len(jobs))
    _LOADED = loaded
    try:
        with progress.current().stage(f"analyze {len(infos)} rank(s) in {size} processes"), \
                workers.fork_friendly(), ProcessPoolExecutor(max_workers=size, mp_context=mp.get_context("fork")) as pool:
            # the pool takes jobs in this order: a worker's last job is among the last ``size``
            futures = {job: pool.submit(_run_part, job[0], loaded.files.index(infos[job[1]]), i >= len(jobs) - size)
                       for i, job in enumerate(jobs)}
            for done, job in enumerate(jobs, 1):
                try:
                    outcomes[job] = futures[job].result()
                except BrokenProcessPool:  # a worker died (e.g. out of memory): the rest runs here
                    break
                what = "our analyses" if job[0] == "own" else "HTA's analyses"
                progress.current().record(f"analyze rank {infos[job[1]].rank}: {what} (worker)", outcomes[job][2])
                progress.current().update(f"analyzed {done}/{len(jobs)} parts of {len(infos)} rank(s)")
    finally:
        _LOADED = None
    results: List[Union[RankResult, TraceError]] = []
    for k, info in enumerate(infos):
        own, hta = outcomes.get(("own", k)), outcomes.get(("hta", k))
        if own is None or hta is None:
            results.append(_sequential(loaded, info))
            continue
        results.append(_join_outcomes(info, own, hta))
    return results


def _join_outcomes(info: TraceFileInfo, own: Tuple[str, object, float],
                   hta: Tuple[str, object, float]) -> Union[RankResult, TraceError]:
    """Join a rank's two outcomes; when both parts failed, the error of the
    step that comes first in :func:`analyze_rank` is the rank's."""
    errors = [value for status, value, _ in (own, hta) if status == "error"]
    if errors:
        message, step = errors[0]
        return TraceError(message, info.path, step=step)
    try:
        return join_parts(own[1], hta[1], info)
    except TraceError as exc:
        return exc


def _device_names(meta: dict) -> List[str]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")]
