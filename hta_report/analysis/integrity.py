"""What a trace shows of its own gaps: where its GPU figures cannot be trusted.

A Kineto trace can under-record the GPU. These checks look for what the trace
itself shows of that, so that the report says so beside the figure instead
of advising on time that was not idle:

* **work before the first recorded operation**: the first GPU operation of a
  rank starts long after the call that launched it, and the trace holds no
  GPU operation before it. A launch onto an idle GPU starts within tens of
  µs, so the GPU was running work the trace does not hold (launched before
  the profiler started, or not recorded), or its clock is off the host's.
  That stretch is not GPU idle: it becomes the ``unrecorded`` part of the
  idle attribution, which no finding claims.
* **graph replays without their kernels**: a ``cudaGraphLaunch`` /
  ``hipGraphLaunch`` with no GPU operation carrying its correlation. CUPTI's
  activity buffer can drop them (TraceLens #728: about one replay in N
  recorded, 26 % idle shown on a 99 %-busy GPU); the GPU's idle time on the
  rank is then not known, and no rule advises on it.
* **launches without a GPU record**: kernel and asynchronous copy launch
  calls whose correlation id matches no GPU operation. CUPTI drops activity
  records when its buffers fill and says so only at INFO
  (pytorch/pytorch#192021); a trace whose every launch lost its record has
  no GPU events at all, and reads like a CPU-only run. More than
  :data:`LOST_LAUNCH_PCT` of a rank's launches so lost: its GPU idle time is
  not known, and no rule advises on the rank, unless the GPU work they can
  hide (their count times the longest recorded operation) is at most
  :data:`LOST_WORK_PCT` of the trace's span.
  Where they are all the trace's last launches (:func:`lost_tail`), the
  record before them is whole: only the stretch after the last recorded GPU
  operation is unknown (:func:`unrecorded_tail`), counted as not recorded
  like the work before the first one, and the rules judge the rest.
* **GPU operations without a launch record**: kernels, memcpys or memsets
  whose correlation id matches no runtime call of a trace that has runtime
  calls (launched before the trace started, or records dropped); counted.
* **a device run without its device side** (:func:`device_unrecorded`): a
  rank with no GPU operation and no runtime call whose host side shows the
  model ran on a device: ops only a GPU backend runs (cuDNN, MIOpen, the
  flash and memory-efficient attention kernels, NCCL), ``[memory]`` events
  of a device that is not the CPU, or a backward run on a thread of its own
  (PyTorch's autograd engine runs a CPU backward on the calling thread, a
  device's on that device's worker thread). The profile was taken without
  GPU activity (``ProfilerActivity.CUDA`` missing from ``activities``), or
  the profiler kept none of it: the rank is no CPU run, its GPU idle time
  is not known, and no rule advises on it.
* **a GPU record without its host side** (:func:`host_unrecorded`): GPU
  operations and runtime calls, and not one operator, annotation or Python
  event (:data:`HOST_CATS`):
  the profile was taken with ``activities=[ProfilerActivity.CUDA]`` alone
  (CUPTI records the runtime calls with the GPU's activity; operators,
  annotations and ``ProfilerStep`` come with ``ProfilerActivity.CPU``). The
  GPU's busy and idle time stand, but not what the host did while the GPU
  idled: the rules that read the host's ops are not checked on the rank
  (:data:`hta_report.rules.base.GPU_SIDE_RULES`).
* **Stream Sync rows**: ``cuda_sync`` events, written on their own
  ``stream N (sync)`` rows (thread id stream + 1,000,000) since
  pytorch/kineto#1356: host waits shown on the GPU's timeline, not GPU work;
  they are left out of every GPU figure, and counted.
* **a clock that jumps back** (:func:`clock_jumps`): time that goes back,
  by more than :data:`CLOCK_JUMP_MIN_US`, where the order of events is
  known without their times: a host thread's runtime calls in the order of
  their correlation ids (one thread makes one call at a time, and CUPTI
  numbers them as they are made), a GPU stream's operations in launch order
  (a stream runs its work in the order it was launched), a GPU operation
  against the start of its own launch call (no work starts before it is
  launched), and a thread's ``ProfilerStep#N`` in step order. The rank's
  busy, idle and step figures then mix two clocks: its GPU idle time is not
  known (``idle_unreliable``), so no rule advises on the rank, and the
  report says why. Events whose own duration is negative (an end before
  the start) are refused when the trace is read
  (:func:`hta_report.load.validation.clean_events`), and counted there.
  Two operations of one stream that overlap are not taken for a jump: with
  programmatic dependent launch a kernel may start before the one before it
  ends.
"""
from __future__ import annotations

from typing import Tuple

import re

import numpy as np
import pandas as pd

from .. import intervals
from ..load.iteration import STEP_NUMBER
from ..model import Integrity
from .events import RankEvents, is_step

#: The first GPU operation starting this long (µs) after its launch call, with
#: nothing recorded on the GPU before it, shows unrecorded GPU work.
UNRECORDED_MIN_US = 1000.0
#: Runtime calls that replay a CUDA or HIP graph.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "cuGraphLaunch")
#: Share of a rank's launch calls (%) that may lack their GPU record before its GPU idle time
#: is taken as unknown (proposal: a few calls whose records fell at the window's edge are noise).
LOST_LAUNCH_PCT = 5.0
#: Past that share, the lost launches still leave the figures standing when the GPU work they
#: can hide (:attr:`~hta_report.model.Integrity.lost_work_us`: their count times the rank's longest
#: recorded GPU operation) is at most this share (%) of the trace's span: two lost launches among
#: 29 of a 3.2 ms decode fragment whose longest kernel is 44 µs hide at most 2.8 % of it (a field run).
LOST_WORK_PCT = 5.0
#: Launch calls that always put work on the GPU (their correlation id names it): kernels and
#: asynchronous copies. Memsets are left out: a ``cudaMemsetAsync`` of no bytes launches nothing
#: (TraceLens's H100 bert-small trace: 22 of them, and no memset record at all).
GPU_WORK_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                 "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "hipLaunchKernel", "hipExtLaunchKernel",
                 "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemcpyWithStream")
#: A stretch longer than this (µs) with nothing recorded on any host thread
#: or GPU stream of a rank (step annotations and Python frames aside, which
#: span whatever happens inside them) is a clock step forward (an NTP step
#: between two events) or a stopped process: the profiler records every
#: operator, runtime call and GPU operation, and a training or inference step
#: without one for 10 s is not work the trace can describe. Its time is not
#: idle time that any fix would remove (:func:`silences`).
SILENCE_MIN_US = 10e6
#: Below this share (%) of the trace's span, the GPU work of a trace without
#: any operator event is not the workload (a stray kernel or two of a
#: compile's autotuning, the profiler's own): :func:`workload_missing`.
MISSING_GPU_PCT = 1.0
#: A step back in time larger than this (µs) is a clock jump (:func:`clock_jumps`).
#: Host and GPU timestamps agree to within tens of µs (CUPTI converts GPU
#: times to the host's clock), so a millisecond back is no rounding or skew.
CLOCK_JUMP_MIN_US = 1000.0


#: Ops that only a GPU backend runs (PyTorch's native_functions.yaml: their kernels are
#: registered for CUDA or HIP alone): cuDNN and MIOpen ops (``aten::cudnn_convolution``,
#: ``aten::_cudnn_rnn``, ``aten::miopen_batch_norm``...; not ``aten::cudnn_is_acceptable``, a
#: check any backend calls), the flash and memory-efficient attention kernels and their SDPA
#: entry points (not ``..._for_cpu``, the CPU's), and NCCL's collectives (``nccl:all_reduce``).
DEVICE_OPS = re.compile(r"^aten::_?(?:cudnn|miopen)_(?!is_acceptable)|"
                        r"^aten::_(?:efficient|flash)_attention_(?:forward|backward)$|"
                        r"^aten::_scaled_dot_product_(?:flash|efficient|cudnn)_attention(?:_backward)?$|^nccl:")
#: The autograd engine's annotation of each backward function it runs.
ENGINE_OP = re.compile(r"^autograd::engine::evaluate_function: ")
#: Runtime and driver categories: a rank with any such call recorded some GPU activity.
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
#: What ``ProfilerActivity.CPU`` records: operators, annotations (``record_function``,
#: ``ProfilerStep#N``) and Python frames. CUPTI records the runtime calls with the GPU's activity.
HOST_CATS = ("cpu_op", "user_annotation", "python_function")


def _launch_calls(ev: RankEvents):
    """``(correlation ids, end times µs, whether a graph launch)`` of the
    rank's runtime and driver calls that carry a correlation id, as arrays."""
    cpu = ev.cpu
    calls = cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy().copy()
    corr = pd.to_numeric(cpu["correlation"], errors="coerce").to_numpy(dtype=float) \
        if "correlation" in cpu.columns else np.full(len(cpu), np.nan)
    calls &= corr > 0
    graph = cpu["s_name"].isin(GRAPH_LAUNCHES).to_numpy()  # on the categorical's categories
    return corr[calls], cpu["end"].to_numpy(dtype=float)[calls], graph[calls]


def unrecorded_lead(ev: RankEvents) -> np.ndarray:
    """The stretch before a rank's first recorded GPU operation during which
    the GPU ran work the trace does not hold (see the module doc), as a
    union: ``(1, 2)`` ``[launch call end, first operation start]`` µs, or ``(0, 2)``.
    Where that operation has no launch call in a trace that has launch calls
    (it was launched before the profiler started), it queued behind work
    launched before it too, which the trace lacks: the stretch begins at the
    trace's first host event (a GPU that had nothing queued ahead of it
    would have started it then)."""
    gpu = ev.gpu
    none = np.empty((0, 2))
    if gpu.empty or "correlation" not in gpu.columns:
        return none
    ts = gpu["ts"].to_numpy(dtype=float)
    first = int(np.argmin(ts))
    corr = pd.to_numeric(gpu["correlation"], errors="coerce").to_numpy(dtype=float)[first]
    call_corr, call_end, _ = _launch_calls(ev)
    ends = call_end[call_corr == corr] if corr > 0 else call_end[:0]
    if not len(ends):
        if not len(call_corr) or ev.cpu.empty:
            return none
        launched, start = float(ev.cpu["ts"].min()), float(ts[first])  # launched before the trace began
        return np.array([[launched, start]]) if start - launched >= UNRECORDED_MIN_US else none
    launched, start = float(ends.max()), float(ts[first])
    return np.array([[launched, start]]) if start - launched >= UNRECORDED_MIN_US else none


def _steps_back(group: np.ndarray, order: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """For rows sorted by ``group``, then ``order``, then ``ts`` (rows of
    equal ``order`` in time order), how far (µs) each row starts before the
    row before it in the same group (0 for the first row of a group and for
    rows that do not start earlier)."""
    if len(ts) < 2:
        return np.zeros(len(ts))
    idx = np.lexsort((ts, order, group))
    back = np.zeros(len(ts))
    same = group[idx][1:] == group[idx][:-1]
    back[idx[1:]] = np.where(same, ts[idx][:-1] - ts[idx][1:], 0.0)
    return back


def _step_number(name: object) -> float:
    """N of a ``ProfilerStep#N`` name that :func:`~.events.is_step` kept."""
    found = STEP_NUMBER.search(str(name))
    assert found is not None  # is_step keeps only the names this pattern matches
    return float(found.group(1))


def clock_jumps(ev: RankEvents):
    """Where the rank's time goes back (see the module doc): ``(count,
    largest µs, where)``, counting each step back of more than
    :data:`CLOCK_JUMP_MIN_US` µs: between two runtime calls of a host thread
    in correlation order, two operations of a GPU stream in launch
    (correlation) order, a GPU operation and its launch call's start, or
    two ``ProfilerStep#N`` of a thread in step order. ``where`` names the
    largest (``GPU 0 stream 7``, ``host thread 1000``...); ``(0, 0.0, "")``
    when time never goes back."""
    found = []  # (count, largest, where)

    def note(back: np.ndarray, rows: pd.DataFrame, what) -> None:
        hit = np.flatnonzero(back > CLOCK_JUMP_MIN_US)
        if len(hit):
            k = hit[int(np.argmax(back[hit]))]
            found.append((len(hit), float(back[k]), what(rows.iloc[k])))

    def thread(row) -> str:
        return f"host thread {row.get('tid', '?')}"

    def stream(row) -> str:
        return f"GPU {row.get('pid', '?')} stream {row.get('stream', row.get('tid', '?'))}"

    cpu, gpu = ev.cpu, ev.gpu
    # host threads: runtime calls in the order CUPTI numbered them
    if "correlation" in cpu.columns and len(cpu):
        corr = pd.to_numeric(cpu["correlation"], errors="coerce").to_numpy(dtype=float)
        calls = cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy() & (corr > 0)
        c = cpu[calls]
        back = _steps_back(c["thread"].to_numpy(), corr[calls], c["ts"].to_numpy(dtype=float))
        note(back, c, lambda r: f"{thread(r)} (its runtime calls in the order they were made)")
    # steps of a host thread in step order
    if len(cpu):
        steps = cpu[is_step(cpu["s_name"])]
        if len(steps):
            numbers = np.array([_step_number(n) for n in steps["s_name"]])
            back = _steps_back(steps["thread"].to_numpy(), numbers, steps["ts"].to_numpy(dtype=float))
            note(back, steps, lambda r: f"{thread(r)} (its ProfilerStep#N in step order)")
    if len(gpu) and "correlation" in gpu.columns:
        corr = pd.to_numeric(gpu["correlation"], errors="coerce").to_numpy(dtype=float)
        ops = corr > 0
        g = gpu[ops]
        ts = g["ts"].to_numpy(dtype=float)
        # a stream's operations in launch order (a graph's kernels share their launch's id)
        back = _steps_back(g["thread"].to_numpy(), corr[ops], ts)
        note(back, g, lambda r: f"{stream(r)} (its operations in launch order)")
        # each operation against the start of its launch call
        if "correlation" in cpu.columns and len(cpu):
            ccorr = pd.to_numeric(cpu["correlation"], errors="coerce").to_numpy(dtype=float)
            calls = cpu["s_cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy() & (ccorr > 0)
            keys, first = _first_start(ccorr[calls], cpu["ts"].to_numpy(dtype=float)[calls])
            if len(keys):
                pos = np.clip(np.searchsorted(keys, corr[ops]), 0, len(keys) - 1)
                launched = np.where(keys[pos] == corr[ops], first[pos], -np.inf)
                note(launched - ts, g, lambda r: f"{stream(r)} (an operation starts before its launch call)")
    if not found:
        return 0, 0.0, ""
    count = sum(f[0] for f in found)
    _, largest, where = max(found, key=lambda f: f[1])
    return count, largest, where


def workload_missing(ev: RankEvents) -> str:
    """Why the trace holds none of the workload (empty: it holds some): no
    operator event (``cpu_op``) and no ``ProfilerStep`` at all, and GPU work
    under :data:`MISSING_GPU_PCT` % of the trace's span. Every PyTorch op the
    workload runs is a ``cpu_op`` when CPU activity is recorded, and a
    trace recorded with GPU activity only has its kernels; what is left is
    the profiler's own start and stop (device queries, the synchronize at
    its end) or a compile's set-up. The words name what the trace does hold."""
    from .. import intervals

    df = ev.df
    if df.empty or "s_cat" not in df.columns or df["s_cat"].eq("cpu_op").any():
        return ""
    if "s_name" in df.columns and np.asarray(is_step(df["s_name"]), dtype=bool).any():
        return ""  # the profiler stepped with the loop: its window is the steps'

    span = float(df["end"].max() - df["ts"].min())
    gpu = ev.gpu
    busy = intervals.total(intervals.union(gpu["ts"].to_numpy(dtype=float), gpu["end"].to_numpy(dtype=float))) \
        if len(gpu) else 0.0
    if span <= 0 or busy >= span * MISSING_GPU_PCT / 100:
        return ""
    calls = ev.cpu[ev.cpu["s_cat"].isin(("cuda_runtime", "cuda_driver"))]
    top = calls["s_name"].value_counts().head(3)
    held = ", ".join(f"{name} ×{n}" if n > 1 else str(name) for name, n in top.items())
    gpu_words = "no GPU work" if not len(gpu) else f"{busy / 1e3:,.2f} ms of GPU work in {span / 1e6:,.2f} s"
    return (f"no operator and {gpu_words}, only {len(calls):,} runtime calls" + (f" ({held})" if held else ""))


def _backward_thread(cpu: pd.DataFrame) -> str:
    """Words for a backward run on a thread of its own (empty: none): a host
    thread whose every op lies inside the autograd engine's
    ``evaluate_function`` annotations, beside a thread that ran other ops and
    none of the engine's. PyTorch's engine runs the backward of CPU tensors on
    the thread that called ``backward()``, and that of a device's tensors on
    the device's own worker thread (``torch/csrc/autograd/engine.cpp``,
    ``Engine::thread_init`` per device), so only a device run splits them."""
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    if ops.empty or "thread" not in ops.columns:
        return ""
    engine = np.asarray(ops["s_name"].astype(str).str.match(ENGINE_OP), dtype=bool)
    if not engine.any():
        return ""
    threads = ops["thread"].to_numpy()
    ts, end = ops["ts"].to_numpy(dtype=float), ops["end"].to_numpy(dtype=float)
    backward_only, forward_only = [], []
    for t in np.unique(threads):
        mine = threads == t
        e = mine & engine
        if not e.any():
            forward_only.append(t)
            continue
        u = intervals.union(ts[e], end[e])
        rest = mine & ~engine
        inside = intervals.overlap_each(np.column_stack([ts[rest], end[rest]]), u) if rest.any() else np.zeros(0)
        if np.all(inside >= (end[rest] - ts[rest]) - 1e-6):
            backward_only.append((t, int(e.sum())))
    if not backward_only or not forward_only:
        return ""
    n = sum(k for _, k in backward_only)
    return (f"the backward's {n:,} autograd engine ops run on a thread of their own, apart from the forward's, "
            "where PyTorch runs a CPU backward on the calling thread and a device's on the device's thread")


def device_unrecorded(ev: RankEvents, memory=None) -> str:
    """Why a rank without any GPU record ran on a device (see the module
    doc), in words naming the evidence; empty where the rank has a GPU
    operation or a runtime call (the launch checks judge it then), or where
    nothing shows a device. ``memory`` (:class:`~hta_report.model.MemorySummary`)
    gives the ``[memory]`` events per device."""
    cpu = ev.cpu
    if not ev.gpu.empty or cpu.empty or cpu["s_cat"].isin(RUNTIME_CATS).any():
        return ""
    found = []
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    names = ops["s_name"].astype(str)
    hit = names[names.str.contains(DEVICE_OPS)]
    if len(hit):
        top = sorted(hit.value_counts().items(), key=lambda kv: (-kv[1], kv[0]))[:3]  # ties by name
        shown = sum(v for _, v in top)
        found.append("ops only a GPU backend runs: " + ", ".join(f"{k} ×{v}" for k, v in top)
                     + (f" and {len(hit) - shown:,} more" if len(hit) > shown else ""))
    devices = [d for d in (memory.devices if memory is not None else []) if d.device != "cpu" and d.events]
    if devices:
        total = sum(d.events for d in memory.devices)
        found.append(", ".join(f"{d.events:,} of {total:,} memory events on {d.device}" for d in devices))
    thread = _backward_thread(cpu)
    if thread:
        found.append(thread)
    return "; ".join(found)


def host_unrecorded(ev: RankEvents) -> str:
    """What a rank recorded without its host side (see the module doc), in
    words: its GPU operations and runtime calls, where it holds GPU
    operations and no event of :data:`HOST_CATS` at all (an annotation such
    as ``ProfilerStep#N`` is recorded by the CPU activity too); empty otherwise."""
    cpu, gpu = ev.cpu, ev.gpu
    if gpu.empty or cpu["s_cat"].isin(HOST_CATS).any():
        return ""
    calls = int(cpu["s_cat"].isin(RUNTIME_CATS).sum())
    return f"{len(gpu):,} GPU operations and {calls:,} runtime calls, and no operator or annotation"


def silences(ev: RankEvents):
    """Stretches of more than :data:`SILENCE_MIN_US` µs in which nothing is
    recorded on the rank (every event but ``ProfilerStep#N`` annotations and
    ``python_function`` frames): ``(count, longest µs, start of the longest
    in µs)``; ``(0, 0.0, 0.0)`` when there is none."""
    from .. import intervals

    df = ev.df
    if df.empty or "s_cat" not in df.columns:
        return 0, 0.0, 0.0
    keep = ~df["s_cat"].eq("python_function").to_numpy()
    if "s_name" in df.columns:
        keep &= ~np.asarray(is_step(df["s_name"]), dtype=bool)
    ts, end = df["ts"].to_numpy(dtype=float)[keep], df["end"].to_numpy(dtype=float)[keep]
    ok = np.isfinite(ts) & np.isfinite(end)
    busy = intervals.union(ts[ok], end[ok])
    if len(busy) < 2:
        return 0, 0.0, 0.0
    gaps = busy[1:, 0] - busy[:-1, 1]
    hit = np.flatnonzero(gaps > SILENCE_MIN_US)
    if not len(hit):
        return 0, 0.0, 0.0
    k = hit[int(np.argmax(gaps[hit]))]
    return int(len(hit)), float(gaps[k]), float(busy[k, 1])


def _first_start(corr: np.ndarray, ts: np.ndarray):
    """``(sorted distinct correlation ids, earliest start of the calls with each)``."""
    if not len(corr):
        return np.empty(0), np.empty(0)
    order = np.lexsort((ts, corr))
    keys, first = np.unique(corr[order], return_index=True)
    return keys, ts[order][first]


def integrity(ev: RankEvents, activity=None, memory=None) -> Integrity:
    """The checks of the module doc on one rank's events (the whole trace,
    as the profiler recorded it); :attr:`Integrity.notes` says each finding
    in one line.

    ``activity`` (:class:`hta_report.load.traces.GpuActivity`, counted
    around HTA's step filter) gives the GPU operations inside the analyzed
    steps whose correlation id matches no host event, which the filter left
    out: :attr:`Integrity.left_out_ops`; as many launches as the file has
    such operations that could be theirs (:func:`_could_be_theirs`) are not
    counted as lost records (the records are there, their ids are not). ``memory`` (:class:`~hta_report.model.MemorySummary`)
    is read by :func:`device_unrecorded`.
    The figures stay HTA's (they leave such work out too); the note says so."""
    out = Integrity()
    gpu = ev.gpu
    out.sync_rows = int(ev.df["s_cat"].eq("cuda_sync").sum())
    call_corr, _, _ = _launch_calls(ev)
    if not gpu.empty and len(call_corr) and "correlation" in gpu.columns:
        corr = pd.to_numeric(gpu["correlation"], errors="coerce").fillna(-1).to_numpy(dtype=float)
        unlinked = ~np.isin(corr, call_corr)
        out.unlinked_ops, out.unlinked_us = int(unlinked.sum()), float(gpu["dur"].to_numpy(dtype=float)[unlinked].sum())
        out.graph_launches, out.graph_launches_without_ops = graph_launches_without_ops(ev)
    launch_ts, seen = _work_launches(ev)
    out.launches, out.launches_without_ops = int(len(seen)), int((~seen).sum())
    if activity is not None:
        out.launches_without_ops = max(0, out.launches_without_ops - _could_be_theirs(activity, launch_ts, seen))
        out.left_out_ops, out.left_out_us = activity.unlinked_ops, activity.unlinked_us
    lead = unrecorded_lead(ev)
    if len(lead):
        out.unrecorded_us = float(lead[0, 1] - lead[0, 0])
        out.unrecorded_before_trace = bool(lead[0, 0] <= float(ev.cpu["ts"].min()))
    out.clock_jumps, out.clock_jump_us, out.clock_where = clock_jumps(ev) if not gpu.empty else (0, 0.0, "")
    if out.launches_without_ops and not gpu.empty:
        out.lost_work_us = out.launches_without_ops * float(np.nanmax(gpu["dur"].to_numpy(dtype=float)))
    bounded = _loss_bounded(out, ev)
    out.lost_tail = lost_tail(launch_ts, seen)
    lost = out.launches and out.launches_without_ops > out.launches * LOST_LAUNCH_PCT / 100 and not bounded
    # a lost tail of a minority of the launches: the record is whole up to them, and what it holds is most of the
    # work the host launched (as _loss_bounded asks of a sample); only the stretch from the first of them is unknown
    if lost and out.lost_tail and 2 * out.launches_without_ops <= out.launches:
        out.tail_from_us, out.tail_unrecorded_us = unrecorded_tail(ev, launch_ts, seen)
        lost = not out.tail_unrecorded_us
    if not out.clock_jumps:  # a clock stepping back opens a gap of its own: said once, as the jump
        out.silences, out.silence_us, _ = silences(ev)
    out.workload_missing = "" if out.clock_jumps else workload_missing(ev)  # a jump stretches the span
    out.device_unrecorded = device_unrecorded(ev, memory)
    out.host_unrecorded = "" if out.workload_missing else host_unrecorded(ev)
    out.idle_unreliable = out.graph_launches_without_ops > 0 or out.clock_jumps > 0 or bool(lost) \
        or out.silences > 0 or bool(out.workload_missing) or bool(out.device_unrecorded)
    out.notes = _notes(out, bounded)
    return out


def _could_be_theirs(activity, launch_ts: np.ndarray, seen: np.ndarray) -> int:
    """How many of the file's GPU operations without a matching host event
    (``activity.unmatched_ts``) could be the records of the launches that lost
    theirs (``launch_ts[~seen]``, :func:`_work_launches`): those starting at or
    after the earliest such launch call's start. No work starts before it is
    launched, so an operation that started earlier (the tail of a step
    launched before the profiler started: 224 of them ending 3.78 s before
    the first launch of a field trace whose last 233 launches lost their
    records) cannot stand for any of them."""
    lost = launch_ts[~seen] if len(seen) else np.empty(0)
    if not len(lost):
        return 0
    starts = np.asarray(activity.unmatched_ts, dtype=float)
    return int(len(starts) - np.searchsorted(starts, float(lost.min()), side="left"))


def graph_launches_without_ops(ev: RankEvents) -> Tuple[int, int]:
    """``(graph launches, those with no GPU operation)``: the rank's
    :data:`GRAPH_LAUNCHES` calls that carry a correlation id, and of them
    those whose id no GPU operation of the rank carries (their kernels were
    dropped: see the module doc). ``(n, 0)`` on a rank whose GPU operations
    carry no correlation ids (nothing to match), ``(0, 0)`` without any."""
    call_corr, _, graphs = _launch_calls(ev)
    n = int(graphs.sum())
    gpu = ev.gpu
    if not n or gpu.empty or "correlation" not in gpu.columns:
        return n, 0
    corr = pd.to_numeric(gpu["correlation"], errors="coerce").fillna(-1).to_numpy(dtype=float)
    return n, int((~np.isin(call_corr[graphs], corr)).sum())


def _work_launches(ev: RankEvents) -> Tuple[np.ndarray, np.ndarray]:
    """``(host start times µs, whether a GPU operation carries its id)`` of
    the rank's :data:`GPU_WORK_APIS` calls that carry a correlation id."""
    cpu = ev.cpu
    if cpu.empty or "correlation" not in cpu.columns:
        return np.empty(0), np.empty(0, dtype=bool)
    rows = cpu[cpu["s_name"].isin(GPU_WORK_APIS).to_numpy()]
    corr = pd.to_numeric(rows["correlation"], errors="coerce").to_numpy(dtype=float)
    keep = corr > 0
    gpu = ev.gpu
    seen = pd.to_numeric(gpu["correlation"], errors="coerce").to_numpy(dtype=float) \
        if len(gpu) and "correlation" in gpu.columns else np.empty(0)
    return rows["ts"].to_numpy(dtype=float)[keep], np.isin(corr[keep], seen)


def lost_tail(ts: np.ndarray, seen: np.ndarray) -> bool:
    """Whether every launch without a GPU operation came after the last launch
    with one (:attr:`Integrity.lost_tail` where they are more than
    :data:`LOST_LAUNCH_PCT` % of the launches) (``ts``, ``seen``: :func:`_work_launches`): they are the trace's
    last launches, none lost among the others. The profiler then stopped
    while the GPU still ran work queued before it (a GPU behind its host by
    more than the rest of the window), not because its buffers dropped
    records in the middle of the trace."""
    if seen.all() or not seen.any():
        return False
    return float(ts[~seen].min()) > float(ts[seen].max())


def unrecorded_tail(ev: RankEvents, ts: np.ndarray, seen: np.ndarray) -> Tuple[float, float]:
    """Where a lost tail (:func:`lost_tail`; ``ts``, ``seen``:
    :func:`_work_launches`) leaves the GPU's idle time unknown: ``(from µs,
    length µs)``, from the first lost launch call's start to the rank's last
    event's end. Every launch before it has its GPU record, so the GPU
    timeline up to there is whole (no work runs before it is launched); from
    there on, the GPU may have run the lost launches' work in what looks idle
    (its recorded operations there stay busy time). ``(0.0, 0.0)`` without a
    lost tail."""
    if not lost_tail(ts, seen):
        return 0.0, 0.0
    start = float(ts[~seen].min())
    end = float(np.nanmax(ev.df["end"].to_numpy(dtype=float)))
    return (start, end - start) if end > start else (0.0, 0.0)


def unrecorded_stretches(ev: RankEvents, i: Integrity) -> np.ndarray:
    """The rank's stretches of GPU time the trace does not hold, as a union
    (µs): :func:`unrecorded_lead` and, after a lost tail, the stretch of
    :attr:`Integrity.tail_unrecorded_us` (``i``: the rank's integrity)."""
    lead = unrecorded_lead(ev)
    if not i.tail_unrecorded_us:
        return lead
    tail = np.array([[i.tail_from_us, i.tail_from_us + i.tail_unrecorded_us]])
    both = np.concatenate([lead, tail])
    return intervals.union(both[:, 0], both[:, 1])


def _span_us(ev: RankEvents) -> float:
    """The trace's span (µs): its first event's start to its last event's end, host and GPU."""
    df = ev.df
    if df.empty:
        return 0.0
    return float(np.nanmax(df["end"].to_numpy(dtype=float)) - np.nanmin(df["ts"].to_numpy(dtype=float)))


def _loss_bounded(i: Integrity, ev: RankEvents) -> bool:
    """Whether the GPU work the lost launches can hide (``i.lost_work_us``)
    is at most :data:`LOST_WORK_PCT` of the trace's span, with at least as
    many launches recorded as lost (the recorded operations are then a
    sample that can bound the lost ones; a CUDA-graph capture, whose
    launches run nothing, is not): the busy and idle figures stand within
    that."""
    span = _span_us(ev)
    return 0 < i.lost_work_us <= span * LOST_WORK_PCT / 100 and 2 * i.launches_without_ops <= i.launches


def _notes(i: Integrity, bounded: bool = False) -> list:
    notes = []
    if i.launches_without_ops and i.launches_without_ops == i.launches:
        notes.append(f"the GPU side is missing: the host launched {i.launches:,} kernels or copies and the "
                     "trace holds no GPU record of any (the profiler lost them, pytorch/pytorch#192021, or GPU "
                     "activity was not recorded): no GPU figure or GPU finding can be given for this rank; record "
                     "again with ProfilerActivity.CUDA and a shorter window")
    elif i.device_unrecorded:
        notes.append(f"the GPU side was not recorded: the model ran on a device ({i.device_unrecorded}), and the "
                     "trace holds no GPU operation and no runtime call: the profile was taken without GPU activity "
                     "(or the profiler kept none of it), so this is no CPU run, no GPU figure or GPU finding can be "
                     "given for this rank, and no rule advises on it; record again with "
                     "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    elif i.launches_without_ops and i.launches_without_ops > i.launches * LOST_LAUNCH_PCT / 100:
        if i.tail_unrecorded_us:
            notes.append(f"{i.launches_without_ops:,} of {i.launches:,} launches have no GPU record, every one "
                         "after the last launch that has one: the profiler stopped while the GPU was still behind, "
                         f"running work queued earlier. GPU idle in the last {i.tail_unrecorded_us / 1e3:,.2f} ms of "
                         "the trace, from the first of them, is counted as 'not recorded', and no finding claims it; "
                         "the GPU record before them is whole, and the rules judge it. Call torch.cuda.synchronize() "
                         "before the profiler stops (or at the end of each profiled step)")
        elif not bounded and i.lost_tail:
            notes.append(f"{i.launches_without_ops:,} of {i.launches:,} launches have no GPU record, every one "
                         "after the last launch that has one: the profiler stopped while the GPU was still behind, "
                         "running work queued earlier. They are most of the launches, so the recorded part is not "
                         "the window's work: the GPU's busy and idle time are not known and no rule advises on the "
                         "rank; call torch.cuda.synchronize() before the profiler stops (or at the end of each "
                         "profiled step)")
        elif not bounded:
            notes.append(f"{i.launches_without_ops:,} of {i.launches:,} launches have no GPU record (the profiler "
                         "lost them, pytorch/pytorch#192021): the GPU's busy and idle time are not known, and no "
                         "rule advises on the rank")
        else:
            notes.append(f"{i.launches_without_ops:,} of {i.launches:,} launches have no GPU record (the profiler "
                         f"lost them, pytorch/pytorch#192021): they can hide at most {i.lost_work_us / 1e3:,.2f} ms "
                         "of GPU work (each as long as the longest operation recorded), within "
                         f"{LOST_WORK_PCT:g} % of the trace: the GPU figures stand within that")
    if i.host_unrecorded:
        notes.append(f"the host side was not recorded: the trace holds {i.host_unrecorded}: it was "
                     "profiled with GPU activity alone, so the GPU's busy and idle time stand but not what the host "
                     "did while the GPU idled (its ops, syncs, DataLoader, steps), and the rules that read the host "
                     "are not checked; record again with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    if i.unrecorded_us and i.unrecorded_before_trace:
        notes.append(f"the first GPU operation, launched before the profiler started, starts "
                     f"{i.unrecorded_us / 1e3:,.2f} ms into the trace with nothing recorded on the GPU before it: the "
                     "GPU was running work launched before the profiler started. That stretch is counted as 'not "
                     "recorded', not as idle, and no finding claims it")
    elif i.unrecorded_us:
        notes.append(f"the first GPU operation starts {i.unrecorded_us / 1e3:,.2f} ms after its launch call returned, "
                     "with nothing recorded on the GPU before it: the GPU ran work the trace does not hold (launched "
                     "before the profiler started), or its clock is off the host's. That stretch is counted as "
                     "'not recorded', not as idle, and no finding claims it")
    if i.graph_launches_without_ops:
        notes.append(f"{i.graph_launches_without_ops} of {i.graph_launches} graph launches have no GPU operation in "
                     "the trace: the profiler dropped their kernels (CUPTI's activity buffer, TraceLens #728), so "
                     "the GPU's idle time is not known and no rule advises on it; record fewer replays per window")
    if i.unlinked_ops:
        notes.append(f"{i.unlinked_ops:,} GPU operations ({i.unlinked_us / 1e3:,.2f} ms) have no launch call in the "
                     "trace (launched before it started, or its records were dropped): their time counts as GPU "
                     "work, but no host op or line of code can be named for it")
    if i.left_out_ops:
        notes.append(f"{i.left_out_ops:,} GPU operations ({i.left_out_us / 1e3:,.2f} ms) carry no correlation id that "
                     "matches a launch call, so HTA's step filter, which keeps GPU work through its launch, left "
                     "them out of every GPU figure of this rank (as HTA's own figures do): busy and idle are "
                     "of the rest, and the GPU was busier than they say")
    if i.clock_jumps:
        notes.append(f"the trace's clock jumps back: {i.clock_jumps:,} time{'s' if i.clock_jumps != 1 else ''} an "
                     f"event starts more than {CLOCK_JUMP_MIN_US / 1e3:g} ms before one that precedes it, the "
                     f"largest {i.clock_jump_us / 1e3:,.2f} ms on {i.clock_where}. The rank's busy, idle and step "
                     "figures mix two clocks and are not reliable: no rule advises on this rank")
    if i.workload_missing:
        notes.append(f"the trace holds none of the workload: {i.workload_missing}. The profiler's window missed "
                     "the work (started after it, stopped before it, or CPU activity not recorded): no figure "
                     "here describes the workload, and no rule advises on it")
    if i.silences:
        notes.append(f"nothing at all is recorded on any thread or stream for {i.silence_us / 1e6:,.1f} s"
                     + (f" ({i.silences} such stretches)" if i.silences > 1 else "")
                     + ": the clock stepped forward (an NTP correction) or the process was stopped. That time is "
                     "not work the trace can describe, so the rank's idle time is not known and no rule advises on it")
    if i.sync_rows:
        notes.append(f"{i.sync_rows:,} Stream Sync events (cuda_sync, on their own 'stream N (sync)' rows) are host "
                     "waits drawn on the GPU's timeline: left out of every GPU figure")
    return notes
