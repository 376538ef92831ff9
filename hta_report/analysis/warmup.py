"""One-off warm-up work inside the traced window: CUDA context creation,
allocator growth, lazy kernel loading; on a rank without GPU work, the
model's construction and the first call of each op.

A profiler window that starts with the process (no ``torch.profiler.schedule``
with ``wait``/``warmup`` steps) records work that happens once per process and
dwarfs a training step: the first CUDA call creates the context (seconds), the
caching allocator grows with ``cudaMalloc``, the first launch of each kernel
loads its module (``CUDA_MODULE_LOADING=LAZY``). Times are µs.
"""
from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..model import NamedTime, Warmup
from .. import intervals
from .cpu_side import first_worker_batch, launches_gpu_work, self_times
from .events import LAUNCH_CATEGORIES, RankEvents, is_step
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
    "cuModuleLoadDataEx", "cuModuleGetFunction", "cuLibraryLoadData", "cudaGetSymbolAddress", "cudaGetFuncBySymbol",
    "cuLibraryGetModule", "cuModuleGetGlobal",
    # occupancy queries take the kernel's function: under lazy loading the first one loads its module
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaOccupancyMaxPotentialBlockSize", "cudaOccupancyAvailableDynamicSMemPerBlock",
    "hipOccupancyMaxActiveBlocksPerMultiprocessor", "hipOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "hipOccupancyMaxPotentialBlockSize",
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
    once = [x for x in (capture_rows(ev), tuning_rows(ev), cpu_one_offs(ev), first_library_calls(ev),
                        cold_first_host_calls(ev), profiler_overhead(ev), first_worker_batch(ev)) if len(x)]
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


#: Ops that draw a model's initial weights (``nn.init``'s ``kaiming_uniform_``, ``normal_``, ``trunc_normal_``: the
#: outermost op recorded is the in-place fill).
WEIGHT_INIT_OPS = ("aten::normal_", "aten::uniform_")
#: Ops of a model's forward, whose first start ends the construction (convolutions and matrix products).
FORWARD_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
               "aten::conv_transpose3d", "aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm",
               "aten::lstm", "aten::gru", "aten::embedding")
#: Outermost weight fills before the first forward op from which they are a model's construction, not a
#: tensor drawn for the input (proposal: a model has a weight per layer; an input is one or two draws).
MIN_INIT_FILLS = 4
#: A first call this many times the median of the later calls of the same op and input shapes (or more)
#: is a cold call: oneDNN creates and JIT-compiles a primitive per shape on its first call, first touches
#: fault in the weights' pages (proposal: 5x, above the 3.4x spread of the same forwards on a loaded
#: container, dtu-container-resnet18-cpu-noisy-13s in docs/FIELD.md).
COLD_RATIO = 5.0
#: Calls of one op and shapes needed to tell a cold first call from the rest (the first and two more).
COLD_MIN_CALLS = 3


def cpu_one_offs(ev: RankEvents) -> pd.DataFrame:
    """On a rank without GPU work (no kernel, copy or set recorded, none
    launched), the host's one-off work (rows in ``ev.cpu``'s columns):

    * the model's construction: the outermost weight fills
      (:data:`WEIGHT_INIT_OPS`) that start before the first forward op
      (:data:`FORWARD_OPS`) on their thread, where there are
      :data:`MIN_INIT_FILLS` or more;
    * cold first calls: an op called :data:`COLD_MIN_CALLS` times or more with
      the same recorded ``Input Dims`` (by name only where none were
      recorded) whose first call lasts :data:`COLD_RATIO` times the median of
      the others or more, by :data:`WARMUP_CALL_US` or more; the row keeps the
      call's start and covers its excess over that median only (the warm
      part of the call is steady work). Where an op holding it is cold too,
      only the outermost is kept.

    Empty on a GPU rank: there, first launches and set-up calls say it."""
    cpu = ev.cpu
    if ev.has_gpu or launches_gpu_work(cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES)]):
        return cpu.iloc[0:0]
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    if ops.empty:
        return ops
    ops = ops.iloc[np.lexsort((-ops["end"].to_numpy(float), ops["ts"].to_numpy(float)))]
    found = [_construction(ops), _cold_first_calls(ops)]
    found = [f for f in found if len(f)]
    if not found:
        return ops.iloc[0:0]
    both = pd.concat(found)
    return both[~both.index.duplicated()].sort_values("ts")


def _construction(ops: pd.DataFrame) -> pd.DataFrame:
    """The outermost weight fills before each thread's first forward op, where there are enough of them."""
    keep = []
    for _, t_ops in ops.groupby("thread", sort=False):
        forward = t_ops[t_ops["s_name"].isin(FORWARD_OPS)]
        first = float(forward["ts"].iloc[0]) if len(forward) else np.inf
        before = t_ops[t_ops["ts"].to_numpy(float) < first]
        outer = before[_outermost(before)]
        fills = outer[outer["s_name"].isin(WEIGHT_INIT_OPS)]
        if len(fills) >= MIN_INIT_FILLS:
            keep.append(fills)
    return pd.concat(keep) if keep else ops.iloc[0:0]


def _outermost(ops: pd.DataFrame) -> np.ndarray:
    """Which of one thread's ``ops`` (sorted by start, longest first) no other op of them holds."""
    end = ops["end"].to_numpy(float)
    held_until = np.maximum.accumulate(np.concatenate(([-np.inf], end[:-1]))) if len(end) else end
    return ops["ts"].to_numpy(float) >= held_until


def _cold_first_calls(ops: pd.DataFrame, length: Optional[np.ndarray] = None, outermost: bool = True) -> pd.DataFrame:
    """First calls :data:`COLD_RATIO` times their op's later median or more, as
    rows covering the excess; by ``length`` (µs per row of ``ops``; their
    ``dur`` where None), keeping only the outermost of nested ones where
    ``outermost`` (a duration holds its children's)."""
    dims = ops["input_dims"].map(str) if "input_dims" in ops.columns else pd.Series("", index=ops.index)
    key = ops["s_name"].astype(str) + "|" + dims.astype(str)
    dur = ops["dur"].to_numpy(float) if length is None else np.asarray(length, dtype=float)
    pos = pd.Series(np.arange(len(ops)), index=ops.index)
    cold = []
    for _, at in pos.groupby(key.to_numpy(), sort=False):
        idx = at.to_numpy()
        if len(idx) < COLD_MIN_CALLS:
            continue
        first, rest = dur[idx[0]], float(np.median(dur[idx[1:]]))
        if first >= COLD_RATIO * rest and first - rest >= WARMUP_CALL_US:
            cold.append((idx[0], first - rest))
    if not cold:
        return ops.iloc[0:0]
    at = np.array([i for i, _ in cold])
    excess = np.array([x for _, x in cold])
    full = ops.iloc[at]
    if not outermost:
        return full.assign(dur=excess, end=full["ts"].to_numpy(float) + excess)
    keep = np.zeros(len(full), dtype=bool)
    for thread in pd.unique(full["thread"]):
        mine = np.flatnonzero(full["thread"].to_numpy() == thread)
        order = mine[np.lexsort((-full["end"].to_numpy(float)[mine], full["ts"].to_numpy(float)[mine]))]
        keep[order] = _outermost(full.iloc[order])
    rows = full.assign(dur=excess, end=full["ts"].to_numpy(float) + excess)
    return rows[keep]


#: The ops that call a GPU library, by library: the first call of each loads it (cuDNN's and
#: cuBLAS's sub-libraries and kernels under CUDA's lazy loading), creates its handle and its
#: workspace, inside the op and without a runtime call that says so (A10G, seventh gathering:
#: ``aten::cudnn_convolution`` 94 ms and ``aten::mm`` 68 ms around kernels of µs).
LIBRARY_OPS = (
    ("cuDNN/MIOpen", re.compile(r"^aten::(?:cudnn|miopen)_")),
    ("cuBLAS/hipBLAS", re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|addmv|mv|_scaled_mm|_addmm_activation|addbmm)$")),
    ("cuFFT", re.compile(r"^aten::_fft_")),
    ("cuSOLVER", re.compile(r"^aten::_?linalg_")),
)
#: Host time of a library op's own (outside its nested events) from which its first call is the
#: library's load (proposal: 1 ms, :data:`WARMUP_CALL_US`; a warm cuDNN or cuBLAS call takes
#: 10-50 µs of its own).
LIBRARY_LOAD_US = WARMUP_CALL_US
#: Kineto's category of the profiler's own records (CUPTI's overhead activity: buffer flushes,
#: instrumentation, JIT compilation under the profiler).
OVERHEAD_CATEGORY = "overhead"


def first_library_calls(ev: RankEvents) -> pd.DataFrame:
    """On a rank with GPU work, the first call (per host thread) of each GPU
    library's ops (:data:`LIBRARY_OPS`) when its own host time (its
    duration less its nested events', :func:`~.cpu_side.self_times`) is
    :data:`LIBRARY_LOAD_US` or more: the library loaded and its handle
    made inside the op, once per process. Rows of ``ev.cpu``. Where the
    trace starts after the first calls (a profiler schedule with warm-up
    steps), the first ones it holds are warm and none is returned."""
    if not ev.has_gpu:
        return ev.cpu.iloc[0:0]
    cpu = ev.cpu
    host = cpu[cpu["s_cat"].isin(("cpu_op",) + tuple(LAUNCH_CATEGORIES))]
    ops = host[host["s_cat"].eq("cpu_op")]
    if ops.empty:
        return ops
    names = pd.Series(ops["s_name"].astype(str).to_numpy(), index=ops.index)
    keep = []
    for _, pattern in LIBRARY_OPS:
        hit = ops[names.str.contains(pattern).to_numpy()]
        if hit.empty:
            continue
        firsts = hit.sort_values("ts", kind="stable").groupby("thread", sort=False).head(1)
        for i, row in firsts.iterrows():
            same = host[host["thread"].eq(row["thread"]).to_numpy()
                        & (host["ts"].to_numpy(float) >= row["ts"]) & (host["end"].to_numpy(float) <= row["end"])]
            same = same.sort_values(["ts", "end"], ascending=[True, False])
            if self_times(same)[same.index.get_loc(i)] >= LIBRARY_LOAD_US:
                keep.append(i)
    return cpu.loc[keep] if keep else cpu.iloc[0:0]


def cold_first_host_calls(ev: RankEvents) -> pd.DataFrame:
    """On a rank with GPU work, the cold first calls of host ops by their own
    host time: an op called :data:`COLD_MIN_CALLS` times or more on a thread
    with the same recorded ``Input Dims`` whose first call's own time (its
    duration less its nested events', runtime calls included:
    :func:`~.cpu_side.self_times`, so a wait inside a synchronizing call does
    not count) is :data:`COLD_RATIO` times the median of the later calls' or
    more, by :data:`WARMUP_CALL_US` or more. Rows of ``ev.cpu`` starting at the
    call and covering that excess. The first ``aten::mul_`` of an optimizer
    step spending 1.94 ms before its 18 µs launch, where the later ones take
    20 µs (an A100, eighth gathering): a one-off no fix of the step removes."""
    if not ev.has_gpu:
        return ev.cpu.iloc[0:0]
    cpu = ev.cpu
    host = cpu[cpu["s_cat"].isin(("cpu_op", "user_annotation") + tuple(LAUNCH_CATEGORIES))
               & ~is_step(cpu["s_name"])]
    if host.empty:
        return host
    own = self_times(host)
    is_op = host["s_cat"].eq("cpu_op").to_numpy()
    ops, own = host[is_op], own[is_op]
    order = np.lexsort((-ops["end"].to_numpy(float), ops["ts"].to_numpy(float)))
    found = [_cold_first_calls(t_ops, own_t, outermost=False)
             for t_ops, own_t in _by_thread(ops.iloc[order], own[order])]
    found = [f for f in found if len(f)]
    return pd.concat(found).sort_values("ts") if found else cpu.iloc[0:0]


def _by_thread(ops: pd.DataFrame, values: np.ndarray) -> Iterator[Tuple[pd.DataFrame, np.ndarray]]:
    """``(rows, values)`` of ``ops`` per thread, in their order."""
    thread = ops["thread"].to_numpy()
    for t in pd.unique(thread):
        mine = thread == t
        yield ops[mine], values[mine]


def profiler_overhead(ev: RankEvents) -> pd.DataFrame:
    """The profiler's own overhead records (category :data:`OVERHEAD_CATEGORY`)
    lasting :data:`WARMUP_CALL_US` or more: time the profiler took, not the
    workload (CUPTI's buffer flushes and instrumentation). Rows of ``ev.cpu``."""
    cpu = ev.cpu
    rows = cpu[cpu["s_cat"].eq(OVERHEAD_CATEGORY)]
    return rows[rows["dur"].to_numpy(float) >= WARMUP_CALL_US]


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
