"""One-off warm-up work inside the traced window: CUDA context creation,
allocator growth, lazy kernel loading.

A profiler window that starts with the process (no ``torch.profiler.schedule``
with ``wait``/``warmup`` steps) records work that happens once per process and
dwarfs a training step: the first CUDA call creates the context (seconds), the
caching allocator grows with ``cudaMalloc``, the first launch of each kernel
loads its module (``CUDA_MODULE_LOADING=LAZY``). Times are µs.
"""
from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd

from ..model import NamedTime, Warmup
from .. import intervals
from .cpu_side import launches_gpu_work
from .events import LAUNCH_CATEGORIES, RankEvents
from .launch import KERNEL_LAUNCH_APIS
from .regions import per_step
from .workload import capture_rows, tuning_rows

#: A call this long (µs) or longer can be warm-up; a warm launch, allocation
#: or stream query takes µs (proposal: 1 ms).
WARMUP_CALL_US = 1000.0
#: Runtime and driver calls that set up a device, a context, a stream or
#: memory: slow only the first time (context creation, allocator growth).
SETUP_APIS = (
    "cudaDeviceGetStreamPriorityRange", "cudaGetDeviceCount", "cudaGetDevice", "cudaSetDevice",
    "cudaGetDeviceProperties", "cudaGetDeviceProperties_v2", "cudaDeviceGetAttribute", "cudaFree", "cudaMalloc",
    "cudaMallocHost", "cudaHostAlloc", "cudaHostRegister", "cudaStreamCreate", "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority", "cudaEventCreate", "cudaEventCreateWithFlags", "cudaFuncGetAttributes",
    "cudaFuncSetAttribute", "cudaDeviceEnablePeerAccess", "cudaIpcOpenMemHandle", "cudaPeekAtLastError",
    "cuInit", "cuDevicePrimaryCtxRetain", "cuCtxCreate", "cuModuleLoad", "cuModuleLoadData",
    "cuModuleLoadDataEx", "cuModuleGetFunction", "cuLibraryLoadData",
    # the caching allocator's first call on a stream: with a lazily created context, creation lands here
    "cudaStreamIsCapturing", "hipStreamIsCapturing",
    "hipGetDeviceCount", "hipGetDevice", "hipSetDevice", "hipGetDeviceProperties", "hipDeviceGetAttribute",
    "hipFree", "hipMalloc", "hipHostMalloc", "hipStreamCreate", "hipStreamCreateWithFlags",
    "hipStreamCreateWithPriority", "hipDeviceGetStreamPriorityRange", "hipModuleLoad", "hipModuleLoadData",
)


def warmup_calls(ev: RankEvents) -> pd.DataFrame:
    """The rank's one-off warm-up calls (rows of ``ev.cpu``): set-up calls
    (:data:`SETUP_APIS`) lasting :data:`WARMUP_CALL_US` or more, and first
    launches of a kernel (by name, in the trace) lasting as long whose kernel
    started less than the call's duration after it returned (the GPU waited
    for the launch itself, not a full queue); and, whatever their length,
    CUDA/HIP stream capture (:func:`~hta_report.analysis.workload.capture_rows`:
    a graph is captured once, then replayed) and one-off tuning (cuDNN/MIOpen
    benchmark syncs, Triton compiles: :func:`~hta_report.analysis.workload.tuning_rows`)."""
    once = [x for x in (capture_rows(ev), tuning_rows(ev)) if len(x)]
    calls = _setup_and_first_launches(ev)
    if not once:
        return calls
    both = pd.concat(([calls] if len(calls) else []) + once)
    return both[~both.index.duplicated()].sort_values("ts")


def _setup_and_first_launches(ev: RankEvents) -> pd.DataFrame:
    cpu = ev.cpu
    host = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & (cpu["dur"] >= WARMUP_CALL_US)]
    if host.empty:
        return host
    setup = host[host["s_name"].isin(SETUP_APIS)]
    first_call = context_creation(ev)
    if len(first_call):
        setup = pd.concat([setup, first_call])
        setup = setup[~setup.index.duplicated()]
    launches = host[host["s_name"].isin(KERNEL_LAUNCH_APIS) & (host["correlation"] > 0)]
    first = launches.iloc[0:0]
    if len(launches) and ev.has_gpu:
        gpu = ev.gpu[ev.gpu["s_cat"].eq("kernel")]
        kernels = gpu.groupby("correlation").agg(k_ts=("ts", "min"), k_name=("s_name", "first"))
        linked = launches.join(kernels, on="correlation", how="inner")
        if len(linked):
            # the first launch of each kernel name in the whole trace
            all_launch = cpu[cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")) & cpu["s_name"].isin(KERNEL_LAUNCH_APIS)]
            every = all_launch[["ts", "correlation"]].join(kernels, on="correlation", how="inner")
            first_ts = every.groupby("k_name", observed=True)["ts"].min()
            is_first = linked["ts"].to_numpy(dtype=float) <= linked["k_name"].map(first_ts).to_numpy(dtype=float)
            waited = (linked["k_ts"] - linked["end"]).to_numpy(dtype=float) < linked["dur"].to_numpy(dtype=float)
            first = linked[is_first & waited][cpu.columns.intersection(linked.columns)]
    return pd.concat([setup, first]).sort_values("ts") if len(first) else setup


def context_creation(ev: RankEvents) -> pd.DataFrame:
    """On a rank that launches no GPU work at all (no kernel, copy or set,
    no GPU operation: a model run on the CPU), its runtime and driver calls
    (rows of ``ev.cpu``) lasting :data:`WARMUP_CALL_US` or more: with
    nothing queued, such a call waits for no GPU work, whatever its name (a
    ``cudaDeviceSynchronize``): the time is the process's CUDA set-up,
    context creation landing in the first call that needs a context (a
    CPU-executed model's one ``torch.cuda.synchronize()``: 675 ms). Where
    the rank launches, a long call before its first traced launch may wait
    for work queued before the profiler started: none is returned."""
    cpu = ev.cpu
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES)]
    if calls.empty:
        return calls
    if launches_gpu_work(calls) or (ev.has_gpu and len(ev.gpu)):
        # work may have been queued before the profiler started: a long call may wait for it
        return calls.iloc[0:0]
    return calls[calls["dur"].to_numpy(dtype=float) >= WARMUP_CALL_US]


def warmup(ev: RankEvents, hw: np.ndarray, calls: pd.DataFrame, top: int = 6) -> Warmup:
    """Host time per analyzed window in the warm-up ``calls``
    (:func:`warmup_calls`) that start inside the host windows ``hw``, and the
    calls by name."""
    out = Warmup(threshold_us=WARMUP_CALL_US)
    n = len(hw)
    if calls.empty or n == 0:
        return out
    hu = intervals.union(hw[:, 0], hw[:, 1])
    u = intervals.intersect(intervals.union(calls["ts"].to_numpy(dtype=float), calls["end"].to_numpy(dtype=float)), hu)
    out.us_per_step = per_step(intervals.total(u), n)
    if out.us_per_step > 0:
        inside = intervals.overlap_each(calls[["ts", "end"]].to_numpy(dtype=float), hu) > 0
        out.calls = _by_name(calls[inside], top)
    return out


def _by_name(df: pd.DataFrame, top: int) -> List[NamedTime]:
    g = df.groupby("s_name", observed=True)["dur"].agg(["size", "sum"]).sort_values("sum", ascending=False).head(top)
    return [NamedTime(name=str(n), count=int(r["size"]), total_us=float(r["sum"]), self_us=float(r["sum"]))
            for n, r in g.iterrows()]
