"""Kernel launch overhead and queue length, from HTA (launch statistics
counted from the events where HTA finds no launch it knows: :mod:`.launch_calls`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from ..model import LaunchSummary, QueueStat
from .events import RankEvents
from .launch_calls import KERNEL_LAUNCH_APIS, empty_stats, launch_stats
from .regions import in_windows, per_step

__all__ = ["KERNEL_LAUNCH_APIS", "LaunchContext", "add_launch_metrics", "fill_launch_stats", "launch_context",
           "launch_summary", "queue_stats"]

#: HTA's defaults for ``get_cuda_kernel_launch_stats`` (µs).
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
#: ``LaunchSummary.launch_source``: counted by HTA, or by hta-report where HTA found no launch.
HTA_SOURCE, OWN_SOURCE = "HTA", "hta-report"
#: HTA's ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``: the host blocks when a stream has this many outstanding operations.
QUEUE_LIMIT = 1024


def launch_summary(view, rank: int) -> Tuple[LaunchSummary, pd.DataFrame]:
    """Launch statistics of one rank from HTA's ``get_cuda_kernel_launch_stats``
    (runtime > 50 µs, launch delay > 100 µs, GPU work shorter than its launch)
    and ``get_queue_length_time_series`` per stream (``full_queue_us``).

    Returns:
        The summary with HTA's fields filled, and the launch calls over the
        runtime cutoff (columns ``correlation``, ``cpu_duration`` in µs), for
        :func:`add_launch_metrics`.
    """
    stats = view.get_cuda_kernel_launch_stats(
        ranks=[rank], runtime_cutoff=RUNTIME_CUTOFF_US,
        launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US, visualize=False,
    ).get(rank)
    out = LaunchSummary(runtime_cutoff_us=float(RUNTIME_CUTOFF_US), launch_delay_cutoff_us=float(LAUNCH_DELAY_CUTOFF_US),
                        queue_limit=QUEUE_LIMIT)
    slow = fill_launch_stats(out, stats if stats is not None else empty_stats(), HTA_SOURCE)
    series = view.get_queue_length_time_series(ranks=[rank]).get(rank)
    if series is not None and len(series):
        out.queue = queue_stats(series)
        out.full_queue_us = _time_at_limit(series)
    return out, slow


def queue_stats(series: pd.DataFrame) -> List[QueueStat]:
    """Per stream of HTA's queue-length time series (``stream``,
    ``queue_length``), the mean, median and max of its points, by stream:
    the figures of HTA's ``get_queue_length_summary_from_time_series``
    (``describe()``'s ``mean``, ``50%``, ``max``), computed in one grouped
    pass. HTA's runs ``describe()`` once per stream: about 4 ms a stream,
    4 s on a rank with 1,000 streams (issue 56, item 6)."""
    g = series.groupby("stream", sort=True)["queue_length"].agg(["mean", "median", "max"])
    return [QueueStat(stream=int(stream), mean=float(m), p50=float(p50), max=float(mx))
            for stream, m, p50, mx in zip(g.index.tolist(), g["mean"].tolist(), g["median"].tolist(),
                                          g["max"].tolist())]


def fill_launch_stats(out: LaunchSummary, stats: pd.DataFrame, source: str) -> pd.DataFrame:
    """Fill HTA's fields of ``out`` from a launch statistics frame ``stats``
    (HTA's, or :func:`.launch_calls.launch_stats`: ``cpu_duration``,
    ``gpu_duration``, ``launch_delay`` in µs) by HTA's definitions: launches,
    GPU work shorter than its call, calls over :data:`RUNTIME_CUTOFF_US`,
    delays over :data:`LAUNCH_DELAY_CUTOFF_US`, median call, median and p90
    delay; ``source`` names who counted them (``launch_source``, set only
    when there are launches).

    Returns:
        The calls over the runtime cutoff (``correlation``, ``cpu_duration``).
    """
    if not len(stats):
        return stats.loc[:, ["correlation", "cpu_duration"]].reset_index(drop=True)
    cpu = stats["cpu_duration"].to_numpy(dtype=float)
    gpu = stats["gpu_duration"].to_numpy(dtype=float)
    delay = stats["launch_delay"].to_numpy(dtype=float)
    out.launches = int(len(stats))
    out.short_kernels = int((gpu < cpu).sum())
    out.runtime_outliers = int((cpu > RUNTIME_CUTOFF_US).sum())
    out.delay_outliers = int((delay > LAUNCH_DELAY_CUTOFF_US).sum())
    out.median_runtime_us = float(np.median(cpu))
    out.median_launch_delay_us = float(np.median(delay))
    out.p90_launch_delay_us = float(np.percentile(delay, 90))
    out.launch_source = source
    return stats.loc[cpu > RUNTIME_CUTOFF_US, ["correlation", "cpu_duration"]].reset_index(drop=True)


@dataclass
class LaunchContext:
    """What the per-step launch metrics need from a rank's events (see
    :func:`launch_context`)."""

    steps: int
    kernels_per_step: float
    median_kernel_us: float
    #: ``correlation`` of the kernel launch calls starting inside the host
    #: windows, one-off warm-up launches left out
    launch_calls: pd.DataFrame
    #: the rank's trace span: first event start to last event end (µs)
    span_us: float
    #: host time in kernel launch calls per step (µs)
    launch_call_us_per_step: float = 0.0
    #: the median duration of ``launch_calls`` (µs): the baseline a slow kernel launch is measured from
    median_launch_call_us: float = 0.0
    #: every launch call of the rank with its GPU work, counted by us
    #: (:func:`.launch_calls.launch_stats`), for a rank HTA finds none on
    stats: pd.DataFrame = field(default_factory=empty_stats)


def launch_context(ev: RankEvents, w: np.ndarray, hw: Optional[np.ndarray] = None,
                   warmup: Optional[pd.DataFrame] = None) -> LaunchContext:
    """The rank's side of the per-step launch metrics, over the analyzed
    windows ``w`` (re-based, for GPU work) and ``hw`` (host, for launch calls):
    kernels (not memcpy or memset) per step and their median duration, the
    kernel launch calls (:data:`KERNEL_LAUNCH_APIS`, runtime or driver) inside
    the windows but the one-off ``warmup`` calls, their host time per step
    and median duration (µs), and every launch call of the rank paired with its GPU work
    (:func:`.launch_calls.launch_stats`)."""
    n = len(w)
    kernels = in_windows(ev.gpu[ev.gpu["s_cat"].eq("kernel")], w)
    cpu = ev.cpu
    runtime = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & cpu["s_name"].isin(KERNEL_LAUNCH_APIS)]
    if warmup is not None and len(warmup):
        runtime = runtime[~runtime.index.isin(warmup.index)]
    calls = in_windows(runtime[["correlation", "ts", "dur"]], w if hw is None else hw)
    return LaunchContext(
        steps=n,
        kernels_per_step=per_step(len(kernels), n),
        median_kernel_us=float(np.median(kernels["dur"])) if len(kernels) else 0.0,
        launch_calls=calls[["correlation"]].reset_index(drop=True),
        span_us=float(ev.df["end"].max() - ev.df["ts"].min()) if len(ev.df) else 0.0,
        launch_call_us_per_step=per_step(float(calls["dur"].clip(lower=0).sum()), n),
        median_launch_call_us=float(np.median(calls["dur"].clip(lower=0))) if len(calls) else 0.0,
        stats=launch_stats(ev),
    )


def add_launch_metrics(out: LaunchSummary, slow: pd.DataFrame, ctx: LaunchContext) -> LaunchSummary:
    """Fill the per-step fields of ``out`` (from :func:`launch_summary`, with its
    slow launch calls ``slow``) with the rank's :class:`LaunchContext`: kernels
    per step, median kernel duration, the kernel launch calls over the runtime
    cutoff inside the windows and, per step, the time they spent beyond the
    median of those windows' kernel launch calls (``median_kernel_launch_us``:
    not HTA's median, which also counts the async copy and memset calls, whose
    calls may wait for the GPU: ten 60 ms pageable copies among a few kernel
    launches put it near 30 ms), never below zero (µs), and the time some stream's queue held
    :data:`QUEUE_LIMIT` or more operations as % of the rank's trace span.
    Where HTA found no launch (it knows only ``cudaLaunchKernel``,
    ``cudaLaunchKernelExC`` and the CUDA async copy and memset calls: a ROCm
    trace's ``hip*`` calls, Triton's ``cuLaunchKernel`` and graph launches
    are unknown to it), HTA's fields are filled from our own count
    (``ctx.stats``, the same definitions) and ``launch_source`` says so.
    """
    if not out.launches and len(ctx.stats):
        slow = fill_launch_stats(out, ctx.stats, OWN_SOURCE)
    out.kernels_per_step = ctx.kernels_per_step
    out.median_kernel_us = ctx.median_kernel_us
    out.launch_call_us_per_step = ctx.launch_call_us_per_step
    if out.launches:
        over = slow.merge(ctx.launch_calls, on="correlation", how="inner")["cpu_duration"].to_numpy(dtype=float)
        out.kernel_runtime_outliers = int(len(over))
        out.median_kernel_launch_us = ctx.median_launch_call_us
        out.runtime_excess_us_per_step = per_step(float(np.clip(over - ctx.median_launch_call_us, 0.0, None).sum()),
                                                  ctx.steps)
    out.full_queue_pct = 100 * out.full_queue_us / ctx.span_us if ctx.span_us else 0.0
    return out


def _time_at_limit(series) -> float:
    """Longest time (µs) any one stream spent with :data:`QUEUE_LIMIT` or more
    outstanding operations (HTA's time series is a step function: a point
    lasts until the stream's next one, its last point no time). One pass
    over all streams (sorted by stream, then time, stably)."""
    if not len(series):
        return 0.0
    stream = series["stream"].to_numpy()
    ts = series["ts"].to_numpy(dtype=float)
    order = np.lexsort((ts, stream))
    stream, ts = stream[order], ts[order]
    q = series["queue_length"].to_numpy(dtype=float)[order]
    same = stream[1:] == stream[:-1]
    dur = np.append(np.where(same, np.diff(ts), 0.0), 0.0)
    full = q >= QUEUE_LIMIT
    if not full.any():
        return 0.0
    _, code = np.unique(stream, return_inverse=True)
    return float(np.bincount(code[full], weights=dur[full]).max())
