"""Launch statistics counted from the events, for traces whose launch calls
HTA's ``get_cuda_kernel_launch_stats`` does not know (ROCm's ``hip*`` calls,
Triton's ``cuLaunchKernel``, graph launches)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .events import RankEvents

#: Kernel launch calls, CUDA runtime and driver and HIP (copies and memsets
#: are left out: a pageable or synchronous copy call waits for the GPU by
#: design, see the copy rules); graph launches start a whole graph's kernels.
KERNEL_LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                      "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel",
                      "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipLaunchCooperativeKernel",
                      "hipGraphLaunch")
#: The asynchronous copy and memset calls HTA's launch statistics count with
#: the kernel launches (``include_memory_events=True``, its default), and
#: their HIP names.
ASYNC_MEMORY_APIS = ("cudaMemcpyAsync", "cudaMemsetAsync", "hipMemcpyAsync", "hipMemsetAsync")
#: Columns of HTA's launch statistics frame (µs but ``correlation``).
STATS_COLUMNS = ("correlation", "cpu_duration", "gpu_duration", "launch_delay")


def empty_stats() -> pd.DataFrame:
    """A launch statistics frame without rows (:data:`STATS_COLUMNS`)."""
    return pd.DataFrame({"correlation": pd.Series(dtype="int64"), "cpu_duration": pd.Series(dtype=float),
                         "gpu_duration": pd.Series(dtype=float), "launch_delay": pd.Series(dtype=float)})


def launch_stats(ev: RankEvents) -> pd.DataFrame:
    """HTA's ``get_cuda_kernel_launch_stats`` frame of one rank, by HTA's
    definitions, for every launch call of :data:`KERNEL_LAUNCH_APIS` and
    :data:`ASYNC_MEMORY_APIS` (HTA knows only ``cudaLaunchKernel``,
    ``cudaLaunchKernelExC`` and the two CUDA memory calls): each host call
    paired with the GPU operations (kernel, memcpy, memset) of its
    correlation id; ``cpu_duration`` is the call's duration,
    ``gpu_duration`` its GPU operations' and ``launch_delay`` the first
    one's start minus the call's end, clipped at 0 (µs, the exact times of
    the trace). A graph launch, one call for many kernels, is one row whose
    GPU duration is the sum of its kernels' (HTA's join would repeat the
    call once per kernel and count each as a launch). Calls without GPU
    work in the trace are left out, as HTA's inner join leaves them.

    Returns:
        One row per launch call, columns :data:`STATS_COLUMNS`, in trace order.
    """
    cpu, gpu = ev.cpu, ev.gpu
    if cpu.empty or gpu.empty or "correlation" not in cpu.columns or "correlation" not in gpu.columns:
        return empty_stats()
    calls = cpu[cpu["s_name"].isin(KERNEL_LAUNCH_APIS + ASYNC_MEMORY_APIS)]
    calls = calls[pd.to_numeric(calls["correlation"], errors="coerce").gt(0)]
    if calls.empty:
        return empty_stats()
    corr = pd.to_numeric(calls["correlation"], errors="coerce").astype("int64")
    ops = gpu[gpu["correlation"].isin(corr.unique())]
    if ops.empty:
        return empty_stats()
    per_call = (ops.assign(correlation=pd.to_numeric(ops["correlation"], errors="coerce").astype("int64"))
                .groupby("correlation", sort=False).agg(gpu_start=("ts", "min"), gpu_duration=("dur", "sum")))
    host = pd.DataFrame({"correlation": corr.to_numpy(), "ts": calls["ts"].to_numpy(dtype=float),
                         "cpu_duration": calls["dur"].to_numpy(dtype=float)})
    joined = host.merge(per_call, left_on="correlation", right_index=True, how="inner").sort_values("ts", kind="stable")
    delay = joined["gpu_start"].to_numpy(dtype=float) - joined["ts"].to_numpy(dtype=float) \
        - joined["cpu_duration"].to_numpy(dtype=float)
    return pd.DataFrame({"correlation": joined["correlation"].to_numpy(dtype="int64"),
                         "cpu_duration": joined["cpu_duration"].to_numpy(dtype=float),
                         "gpu_duration": joined["gpu_duration"].to_numpy(dtype=float),
                         "launch_delay": np.clip(delay, 0.0, None)})
