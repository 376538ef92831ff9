"""Every analysis of one rank, as lists of named steps.

A rank's analyses split into two parts that can run side by side
(:mod:`hta_report.analysis.parallel`): HTA's (:data:`HTA_STEPS`: temporal,
idle-time and kernel breakdowns, communication overlap, launch statistics;
HTA classifies kernels row by row, so these take about half of the time) and
our own (:data:`OWN_STEPS`, then :data:`GPU_STEPS` or :data:`HOST_ONLY_STEPS`:
steps, CPU side, memcpy, communication and launch metrics per step, Tensor
Core use, idle attribution). :func:`join_parts` puts them together.

Each step is a ``(name, function)`` pair; the function reads and writes one
context object (:class:`RankContext` or :class:`HtaContext`). Adding a metric
is adding its function and one line to a list (and to :data:`NEEDS` when it
reads what an earlier step wrote).

A step that fails does not cost the rank: it is recorded in the rank's
``failures`` (:class:`~hta_report.model.SectionFailure`, with its reason),
the steps that need it (:data:`NEEDS`) are skipped and recorded too, and
every other step is reported. Only a failure of :data:`FATAL` (decoding the
events, which every step reads) makes the rank unreadable, as a
:class:`~hta_report.errors.TraceError` naming the step (:func:`analysis_step`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import pandas as pd

from .. import workers
from ..errors import HtaReportError, TraceError, bug_reason, internal_error
from ..model import (ATTRIBUTION_STEP, COMM_OVERLAP_STEP, INTEGRITY_STEP, LAUNCH_STEP, TENSORBOARD_STEP, SPAN_STEP, TENSOR_CORES_STEP, WINDOWS_STEP, COMMUNICATION_STEP, CPU_SIDE_STEP, IDLE_STEP, NOT_RUN, KERNEL_TYPES_STEP, MEMCPY_STEP, MEMORY_STEP,
                     OCCUPANCY_STEP, PATTERNS_STEP, STEP_BREAKDOWN_STEP, STEP_TIMES_STEP,
                     TEMPORAL_STEP, WORKLOAD_STEP, REPLAY_STEP, CommSummary, IdleBreakdown, KernelTypeShare, LaunchSummary, RankResult,
                     SectionFailure, StreamIdle, TemporalBreakdown, TraceFileInfo)
from .. import intervals
from ..load.traces import LoadedTraces
from . import hta_kernel_types
from .attribution import idle_attribution
from .code import code_attribution, gpu_time_by_launcher
from .collectives import collective_kinds, data_parallel_wrapper, host_collectives
from .copies import add_copy_metrics, blocking_copies, dtoh_reads, pageable_calls, sync_contexts, sync_waits
from .cpu_side import cpu_side
from .distributed import add_data_parallel
from .events import COMMUNICATION, GPU_CATEGORIES, RankEvents, kernel_type
from .gpu_time import (MAX_HTA_STREAMS, exact_temporal, gpu_idle_split, gpu_stream_count, idle_breakdown,
                       kernel_type_shares, stream_idle, temporal_breakdown, top_kernels)
from .kernels import add_layout_conversions, add_misaligned_gemms, elementwise_work, capability_name, compute_major, tensor_core_use
from .launch import LaunchContext, add_launch_metrics, launch_context, launch_summary
from .memory import memory_summary
from .integrity import integrity, unrecorded_stretches
from .occupancy import occupancy
from .tensorboard import tensorboard_overview
from .optimizer import optimizer_profile
from .patterns import code_patterns
from .regions import host_windows, windows
from .replay import replay
from .samples import instance_samples
from .step_breakdown import step_breakdown
from .steps import analyzed_windows, step_stats, step_windows
from .sync_kinds import kind_counts
from .transfers import add_comm_metrics, comm_overlap, comm_summary, memcpy_summary
from .iterations import iterations
from .warmup import warmup, warmup_calls
from .workload import workload


@contextlib.contextmanager
def analysis_step(step: str, path: Union[str, Path]) -> Iterator[None]:
    """Turn an unexpected exception raised inside ``step`` into an
    :class:`~hta_report.errors.InternalError` naming ``path`` and ``step``.

    The one place where failures of HTA or of our analyses on a trace that
    passed every check become errors: a bug in HTA or hta-report, never "a
    bad trace" (:func:`~hta_report.errors.bug_reason` names the line it came
    from; ``-v`` prints the traceback). Errors of our own pass through unchanged.

    Raises:
        hta_report.errors.InternalError: ``step`` raised something else than an
            :class:`~hta_report.errors.HtaReportError`.
    """
    try:
        yield
    except HtaReportError:
        raise
    except Exception as exc:
        raise internal_error(exc, f"analysis failed at {step}", path, step=step) from exc


C = TypeVar("C")
#: A named analysis step over a context of type C.
Step = Tuple[str, Callable[[C], None]]


#: Time by the user's code (``with_stack`` traces).
CODE_STEP = "time by source line"
#: The step every other step of a rank reads: when it fails, the rank is unreadable.
FATAL = frozenset({"decoding events"})
#: Steps that read what earlier steps wrote: name -> the steps it needs.
#: When one of those failed, the step is skipped and recorded as failed too.
NEEDS = {
    MEMCPY_STEP: (WINDOWS_STEP,),
    COMMUNICATION_STEP: (WINDOWS_STEP,),
    TENSOR_CORES_STEP: (WINDOWS_STEP,),
    OCCUPANCY_STEP: (WINDOWS_STEP,),
    PATTERNS_STEP: (WINDOWS_STEP,),
    ATTRIBUTION_STEP: (WINDOWS_STEP, MEMCPY_STEP),
    "launch statistics": (WINDOWS_STEP,),
    CODE_STEP: (WINDOWS_STEP,),
    REPLAY_STEP: (WINDOWS_STEP,),
}


def run_steps(ctx: C, steps: Sequence[Step], path: Union[str, Path],
              failures: Optional[List[SectionFailure]] = None, trim: bool = False) -> C:
    """Run ``steps`` in order on ``ctx``; returns ``ctx``. With ``trim``, the
    heap's free pages are handed back after each step
    (:func:`hta_report.workers.trim_heap`: the holes a large rank's steps
    leave would otherwise add up to the process's peak).

    With ``failures`` (a list), a step that fails, other than one in
    :data:`FATAL`, is appended to it with its reason and the run goes on;
    a step that needs a failed one (:data:`NEEDS`) is skipped and appended
    too. Without it, the first failure is raised.

    Raises:
        hta_report.errors.TraceError: a step failed (named, see :func:`analysis_step`)
            and ``failures`` is None or the step is in :data:`FATAL`.
    """
    for name, fn in steps:
        if failures is not None:
            failed = {f.step for f in failures}
            missing = [n for n in NEEDS.get(name, ()) if n in failed]
            if missing:
                failures.append(SectionFailure(step=name, reason=f"needs {missing[0]}, which failed"))
                continue
        try:
            with analysis_step(name, path):
                fn(ctx)
        except TraceError as exc:
            if failures is None or name in FATAL or exc.step != name:
                raise
            cause = exc.__cause__
            failures.append(SectionFailure(step=name, reason=bug_reason(cause) if cause else exc.message))
        finally:
            if trim:
                workers.trim_heap()
    return ctx


def _large(loaded: LoadedTraces, info: TraceFileInfo) -> bool:
    """Whether the rank of ``info`` has :data:`hta_report.workers.TRIM_MIN_EVENTS` events or more."""
    return len(loaded.frame(info.rank)) >= workers.TRIM_MIN_EVENTS


# ---------------------------------------------------------------- our analyses


@dataclass
class RankContext:
    """What our analysis steps of one rank read and write.

    Attributes:
        loaded: the ``LoadedTraces`` holding the rank.
        info: the rank's file.
        result: the rank's result, filled step by step.
        ev: the rank's decoded events.
        w: analyzed step windows, ``(n, 2)`` ``[start, end]`` µs, re-based to the device.
        hw: the same windows on the host timeline.
        blocking: blocking copy ops (see :func:`~hta_report.analysis.copies.blocking_copies`).
        pageable: ``cudaMemcpyAsync`` calls of pageable copies to the device.
        reads: device-to-host reads the host waits for (:func:`~hta_report.analysis.copies.dtoh_reads`).
        warmup: one-off warm-up calls (:func:`~hta_report.analysis.warmup.warmup_calls`).
        launch: what the launch metrics need of this rank (GPU ranks).
        temporal, streams: HTA's temporal and per-stream idle breakdowns as
            computed by hta-report from the exact times (GPU ranks), for
            where HTA's own fail (:func:`join_parts`).
    """

    loaded: LoadedTraces
    info: TraceFileInfo
    result: RankResult
    ev: Optional[RankEvents] = None
    w: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))
    hw: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))
    blocking: pd.DataFrame = field(default_factory=pd.DataFrame)
    pageable: pd.DataFrame = field(default_factory=pd.DataFrame)
    reads: pd.DataFrame = field(default_factory=pd.DataFrame)
    warmup: pd.DataFrame = field(default_factory=pd.DataFrame)
    launch: Optional[LaunchContext] = None
    temporal: Optional[TemporalBreakdown] = None
    streams: Optional[List[StreamIdle]] = None

    @property
    def meta(self) -> dict:
        """The rank's trace metadata."""
        return self.loaded.meta.get(self.info.rank, {})

    @property
    def events(self) -> RankEvents:
        """:attr:`ev` once decoded: the first step (``decoding events``, in
        :data:`FATAL`) sets it or fails the rank, so every later step has it."""
        assert self.ev is not None, "a step read the events before 'decoding events' ran"
        return self.ev


def _decode(c: RankContext) -> None:
    c.ev = RankEvents.from_loaded(c.loaded, c.info.rank)
    c.result.has_gpu = c.ev.has_gpu


def _step_times(c: RankContext) -> None:
    c.result.steps = step_stats(c.events)


def _cpu_side(c: RankContext) -> None:
    c.result.cpu = cpu_side(c.events)
    w = analyzed_windows(step_windows(c.events))
    c.result.cpu.sync_kinds = kind_counts(c.events, w[:, 1:3] if len(w) else host_windows(c.events))


def _windows_and_optimizer(c: RankContext) -> None:
    rr = c.result
    c.w, _ = windows(c.events)
    c.hw = host_windows(c.events)
    rr.window_us = float((c.w[:, 1] - c.w[:, 0]).mean()) if len(c.w) else 0.0
    rr.steps_used = int(len(c.w))
    rr.has_runtime = bool(c.events.cpu["s_cat"].eq("cuda_runtime").any())
    rr.optimizer = optimizer_profile(c.events, c.hw)
    add_data_parallel(rr.cpu, c.events, c.hw)
    c.warmup = warmup_calls(c.events)
    rr.warmup = warmup(c.events, c.hw, c.warmup)


def _iterations(c: RankContext) -> None:
    c.result.iterations = iterations(c.events, c.hw)


def _samples(c: RankContext) -> None:
    c.result.samples = instance_samples(c.events)


def _replay(c: RankContext) -> None:
    tc = c.result.tensor_cores  # the compute capability: the device tables' fallback where no name matches
    major, minor = tc.compute_major, tc.compute_minor
    if tc.capability_from_kernels and (major, minor) == (8, 0):  # ampere_ kernels run on any Ampere, GeForce too:
        minor = 6  # the speedup of the class's slowest boards (GA10x), so a prediction does not overstate
    devices = list(c.result.device_names) + capability_name(major, minor)
    c.result.replay = replay(c.events, c.hw, c.result.rank, devices, warmup=c.warmup,
                             warmup_us=c.result.warmup.us_per_step)


def _workload(c: RankContext) -> None:
    c.result.workload = workload(c.events)


def _host_communication(c: RankContext) -> None:
    c.result.comm = add_comm_metrics(CommSummary(), c.events, c.w, c.hw)
    if c.result.comm.cpu_collective_us_per_step > 0:
        c.result.comm.host_exposed_us_per_step, c.result.comm.kinds = host_collectives(c.events, c.hw, len(c.w))
        c.result.comm.wrapper = data_parallel_wrapper(c.events)
    c.result.tensor_cores.compute_major = compute_major(c.meta)


def _gpu_span(c: RankContext) -> None:
    activity = getattr(c.loaded, "gpu_activity", {}).get(c.info.rank)
    if activity is not None and activity.span_us > 0:  # every GPU event of the file, HTA's filter aside
        span, busy = activity.span_us, activity.busy_us
    else:
        span = c.events.gpu_span_us
        busy = intervals.total(intervals.union(c.events.gpu["ts"].to_numpy(), c.events.gpu["end"].to_numpy()))
    c.result.gpu_span_us = span
    c.result.gpu_span_busy_pct = min(100.0, 100 * busy / span) if span > 0 else 0.0


def _own_breakdowns(c: RankContext) -> None:
    c.temporal, c.streams = exact_temporal(c.events), stream_idle(c.events)


def _kernels(c: RankContext) -> None:
    c.result.top_kernels = top_kernels(c.events, limit=50)
    c.result.kernel_count = int(c.events.gpu["s_cat"].eq("kernel").sum())


def _memcpy(c: RankContext) -> None:
    c.blocking, c.pageable, c.reads = blocking_copies(c.events), pageable_calls(c.events), dtoh_reads(c.events)
    c.result.memcpy = add_copy_metrics(memcpy_summary(c.events), c.events, c.w, c.hw, c.blocking, c.pageable, c.reads)


def _gpu_communication(c: RankContext) -> None:
    c.result.comm = add_comm_metrics(comm_summary(c.events, 0.0), c.events, c.w, c.hw)
    c.result.comm.kinds = collective_kinds(c.events, c.w, len(c.w))
    if c.result.comm.kernel_count:
        c.result.comm.wrapper = data_parallel_wrapper(c.events)


def _tensor_cores(c: RankContext) -> None:
    out = add_misaligned_gemms(tensor_core_use(c.events, c.meta, c.w), c.events, c.hw)
    c.result.tensor_cores = add_layout_conversions(out, c.events, c.w)
    c.result.elementwise = elementwise_work(c.events, c.w)


def _integrity(c: RankContext) -> None:
    c.result.integrity = integrity(c.events, getattr(c.loaded, "gpu_activity", {}).get(c.info.rank),
                                   c.result.memory)


def _idle_attribution(c: RankContext) -> None:
    ev = c.events
    c.result.idle_attribution = idle_attribution(ev, c.w, c.result.optimizer, c.blocking, c.pageable,
                                                 sync_contexts(ev, c.reads), c.warmup, sync_waits(ev, c.reads),
                                                 unrecorded=unrecorded_stretches(ev, c.result.integrity))


def _gpu_idle_split(c: RankContext) -> None:
    gpu_idle_split(c.events, c.result.idle)


def _occupancy(c: RankContext) -> None:
    c.result.occupancy = occupancy(c.events, c.w)


def _tensorboard(c: RankContext) -> None:
    c.result.tensorboard = tensorboard_overview(c.events)


def _memory(c: RankContext) -> None:
    c.result.memory = memory_summary(c.loaded.memory_events(c.info.rank), c.meta, c.events)


def _patterns(c: RankContext) -> None:
    c.result.patterns = code_patterns(c.events, c.w, c.hw)


def _step_breakdown(c: RankContext) -> None:
    c.result.step_breakdown = step_breakdown(c.events)


def _code(c: RankContext) -> None:
    c.result.code = code_attribution(c.events, c.hw, c.pageable if c.result.has_gpu else None)
    if c.result.has_gpu:
        gpu_time_by_launcher(c.events, c.w, c.result.code)


def _launch_context(c: RankContext) -> None:
    c.launch = launch_context(c.events, c.w, c.hw, c.warmup)


#: Every rank, in order.
OWN_STEPS: List[Step] = [
    ("decoding events", _decode),
    (STEP_TIMES_STEP, _step_times),
    (CPU_SIDE_STEP, _cpu_side),
    (WORKLOAD_STEP, _workload),
    (WINDOWS_STEP, _windows_and_optimizer),
    ("iterations without ProfilerStep", _iterations),
    ("instance samples", _samples),
    (MEMORY_STEP, _memory),
    (STEP_BREAKDOWN_STEP, _step_breakdown),
    (PATTERNS_STEP, _patterns),
]
#: Then, on ranks with GPU activity.
GPU_STEPS: List[Step] = [
    (SPAN_STEP, _gpu_span),
    ("GPU time breakdowns from exact times", _own_breakdowns),
    ("kernel breakdown", _kernels),
    (MEMCPY_STEP, _memcpy),
    (COMMUNICATION_STEP, _gpu_communication),
    (TENSOR_CORES_STEP, _tensor_cores),
    (OCCUPANCY_STEP, _occupancy),
    (TENSORBOARD_STEP, _tensorboard),
    (INTEGRITY_STEP, _integrity),
    (ATTRIBUTION_STEP, _idle_attribution),
    ("GPU idle split", _gpu_idle_split),
    ("launch statistics", _launch_context),
    (CODE_STEP, _code),
    # last: its Tensor-Core edit reads the GEMM classification the Tensor-Core step made (events.shared)
    (REPLAY_STEP, _replay),
]
#: Or, on ranks without GPU activity.
HOST_ONLY_STEPS: List[Step] = [
    (INTEGRITY_STEP, _integrity),  # launches whose GPU records were lost: the rank is not CPU-only
    (COMMUNICATION_STEP, _host_communication),
    (CODE_STEP, _code),
    (REPLAY_STEP, _replay),
]


@dataclass
class OwnPart:
    """Our analyses of one rank (see :func:`own_part`): the rank's result
    without HTA's fields, and what :func:`join_parts` needs to add them
    (our own temporal and per-stream idle breakdowns, for where HTA's fail)."""

    result: RankResult
    launch: Optional[LaunchContext] = None
    temporal: Optional[TemporalBreakdown] = None
    streams: Optional[List[StreamIdle]] = None


def own_part(loaded: LoadedTraces, info: TraceFileInfo) -> OwnPart:
    """Our per-rank analyses of one rank (:data:`OWN_STEPS`, then
    :data:`GPU_STEPS` or :data:`HOST_ONLY_STEPS`); a failing step is recorded
    in the result's ``failures`` (see :func:`run_steps`).

    Raises:
        hta_report.errors.TraceError: decoding the events failed (see :func:`analysis_step`).
    """
    rr = RankResult(rank=info.rank, file=info.path, device_names=_device_names(loaded.meta.get(info.rank, {})),
                    time_origin_us=float(getattr(loaded.trace, "min_ts", 0) or 0))
    trim = _large(loaded, info)
    ctx = run_steps(RankContext(loaded=loaded, info=info, result=rr), OWN_STEPS, info.path, rr.failures, trim)
    run_steps(ctx, GPU_STEPS if rr.has_gpu else HOST_ONLY_STEPS, info.path, rr.failures, trim)
    return OwnPart(result=rr, launch=ctx.launch, temporal=ctx.temporal, streams=ctx.streams)


# ---------------------------------------------------------------- HTA's analyses


@dataclass
class HtaPart:
    """HTA's analyses of one GPU rank (see :func:`hta_part`)."""

    temporal: TemporalBreakdown = field(default_factory=TemporalBreakdown)
    idle: IdleBreakdown = field(default_factory=IdleBreakdown)
    kernel_types: List[KernelTypeShare] = field(default_factory=list)
    comm_overlap_pct: float = 0.0
    launch: LaunchSummary = field(default_factory=LaunchSummary)
    #: launch calls over the runtime cutoff: ``correlation``, ``cpu_duration`` (µs)
    slow_launches: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the steps of :data:`HTA_STEPS` that failed
    failures: List[SectionFailure] = field(default_factory=list)


@dataclass
class HtaContext:
    """What HTA's analysis steps of one rank read (``view``: an HTA
    ``TraceAnalysis`` over the rank alone) and write (``part``)."""

    rank: int
    view: object
    has_comm: bool
    part: HtaPart = field(default_factory=HtaPart)


def _temporal(c: HtaContext) -> None:
    c.part.temporal = temporal_breakdown(c.view)[c.rank]


def _idle(c: HtaContext) -> None:
    streams = gpu_stream_count(c.view, c.rank)
    if streams > MAX_HTA_STREAMS:  # HTA's pass is per stream: ours takes its place (join_parts)
        raise TraceError(f"{NOT_RUN}: {streams:,} GPU streams, more than the {MAX_HTA_STREAMS} its per-stream "
                         "pass is run on (it takes about 13 ms a stream)", step=IDLE_STEP)
    c.part.idle = idle_breakdown(c.view, c.rank)


def _kernel_types(c: HtaContext) -> None:
    c.part.kernel_types = kernel_type_shares(c.view)


def _comm_overlap(c: HtaContext) -> None:
    # the comm summary ignores the overlap of a rank without communication kernels: skip HTA's call
    c.part.comm_overlap_pct = comm_overlap(c.view).get(c.rank, 0.0) if c.has_comm else 0.0


def _launch_stats(c: HtaContext) -> None:
    c.part.launch, c.part.slow_launches = launch_summary(c.view, c.rank)


#: HTA's analyses of a rank with GPU activity, in order.
HTA_STEPS: List[Step] = [
    (TEMPORAL_STEP, _temporal),
    (IDLE_STEP, _idle),
    (KERNEL_TYPES_STEP, _kernel_types),
    (COMM_OVERLAP_STEP, _comm_overlap),
    ("launch statistics (HTA)", _launch_stats),
]


def gpu_presence(loaded: LoadedTraces, rank: int) -> Tuple[bool, bool]:
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


def hta_part(loaded: LoadedTraces, info: TraceFileInfo) -> Optional[HtaPart]:
    """HTA's per-rank analyses of one rank (:data:`HTA_STEPS`), None for a
    rank without GPU events; a failing step is recorded in the part's
    ``failures`` (see :func:`run_steps`).

    Raises:
        hta_report.errors.TraceError: finding the rank's GPU events failed.
    """
    with analysis_step("decoding events", info.path):
        has_gpu, has_comm = gpu_presence(loaded, info.rank)
    if not has_gpu:
        return None
    view = loaded.analysis_for([info.rank])
    view.t.traces = {r: hta_kernel_types.KernelTypeFrame(df) for r, df in view.t.traces.items()}
    ctx = HtaContext(rank=info.rank, view=view, has_comm=has_comm)
    return run_steps(ctx, HTA_STEPS, info.path, ctx.part.failures, _large(loaded, info)).part


# ---------------------------------------------------------------- joined


#: HTA's analyses that hta-report also computes from the exact times (the
#: same definitions): where HTA's fails on a rank, ours is reported in its
#: place (``RankResult.replaced``) and the rank stays complete.
REPLACEABLE = (TEMPORAL_STEP, IDLE_STEP)


def join_parts(own: OwnPart, hta: Optional[HtaPart], info: TraceFileInfo) -> RankResult:
    """The rank's result: :func:`own_part`'s with HTA's fields added, and
    HTA's failed steps with ours in ``failures`` (the launch metrics, which
    need both halves, are recorded as failed when either half's failed).
    Where HTA's temporal or idle-time breakdown failed, ours (from the exact
    times) takes its place and the failure goes to ``replaced``."""
    rr = own.result
    if not rr.has_gpu or hta is None:
        return rr
    rr.temporal, rr.kernel_types = hta.temporal, hta.kernel_types
    rr.idle.streams = hta.idle.streams  # the rank-level split is ours (gpu_idle_split)
    if rr.comm.kernel_count:
        rr.comm.overlap_pct = float(hta.comm_overlap_pct)
    for f in hta.failures:  # the steps of REPLACEABLE, when ours has a result
        if f.step == TEMPORAL_STEP and own.temporal is not None:
            rr.replaced.append(f)
            rr.temporal = own.temporal
        elif f.step == IDLE_STEP and own.streams is not None:
            rr.replaced.append(f)
            rr.idle.streams = list(own.streams)
        else:
            rr.failures.append(f)
    failed = [f.step for f in rr.failures if f.step in ("launch statistics (HTA)", "launch statistics")]
    if failed:
        rr.failures.append(SectionFailure(step=LAUNCH_STEP, reason=f"needs {failed[0]}, which failed"))
        return rr

    def launch_metrics(r: RankResult) -> None:
        # set by our "launch statistics" step, which did not fail (checked above)
        assert own.launch is not None, "our part has no launch context"
        r.launch = add_launch_metrics(hta.launch, hta.slow_launches, own.launch)

    run_steps(rr, [(LAUNCH_STEP, launch_metrics)], info.path, rr.failures)
    return rr


def analyze_rank(loaded: LoadedTraces, info: TraceFileInfo) -> RankResult:
    """Every per-rank analysis of one rank, in this process (failed steps in
    the result's ``failures``).

    Raises:
        hta_report.errors.TraceError: decoding the events failed (see :func:`analysis_step`).
    """
    own = own_part(loaded, info)
    hta = hta_part(loaded, info) if own.result.has_gpu else None
    return join_parts(own, hta, info)


def _device_names(meta: dict) -> List[str]:
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")]
