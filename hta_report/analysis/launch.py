"""Kernel launch overhead and queue length, from HTA."""
from __future__ import annotations

import numpy as np

from ..model import LaunchSummary, QueueStat

#: HTA's defaults for ``get_cuda_kernel_launch_stats`` (µs).
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100


def launch_summary(view, rank: int) -> LaunchSummary:
    """Launch statistics of one rank from HTA's ``get_cuda_kernel_launch_stats``
    (runtime > 50 µs, launch delay > 100 µs, GPU work shorter than its launch)
    and ``get_queue_length_summary`` per stream."""
    stats = view.get_cuda_kernel_launch_stats(
        ranks=[rank], runtime_cutoff=RUNTIME_CUTOFF_US,
        launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US, visualize=False,
    ).get(rank)
    out = LaunchSummary(runtime_cutoff_us=RUNTIME_CUTOFF_US, launch_delay_cutoff_us=LAUNCH_DELAY_CUTOFF_US)
    if stats is not None and len(stats):
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
    queue = view.get_queue_length_summary(ranks=[rank])
    if queue is not None and len(queue):
        for (r, stream), row in queue.iterrows():
            out.queue.append(QueueStat(
                stream=int(stream), mean=float(row[("queue_length", "mean")]),
                p50=float(row[("queue_length", "50%")]), max=float(row[("queue_length", "max")]),
            ))
    return out
