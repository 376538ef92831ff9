"""The typed result model: the one contract between analysis and reporting.

Every reporter (HTML, markdown, JSON, terminal) reads only these dataclasses;
none touches raw traces or HTA objects. The model round-trips through JSON
(:meth:`AnalysisResult.to_json` / :meth:`AnalysisResult.from_json`) with a
``schema_version``, so a saved result re-renders or compares without parsing
traces again.

Units, everywhere in this module:

* times and durations are microseconds (µs), suffix ``_us``;
* sizes are bytes, suffix ``_bytes``;
* percentages are 0–100, suffix ``_pct``;
* bandwidth is GB/s (10^9 bytes per second), suffix ``_gbps``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional


def share_strings(obj: Any, table: Dict[str, str]) -> None:
    """Make every string held in ``obj`` (a model dataclass, list or dict,
    walked through) the one equal string of ``table``, adding new ones:
    in place, values only (dict keys stay). Ranks of one job repeat the same
    kernel, op and file names, and each rank's result arrives from its worker
    (unpickled) with its own copies: on the 1,024-rank set of
    ``bench/scale.py`` a rank's result took 81 kB, 48 kB once its strings were
    shared (207 distinct strings over 64 ranks)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            object.__setattr__(obj, f.name, _shared(getattr(obj, f.name), table))
    elif isinstance(obj, list):
        obj[:] = [_shared(value, table) for value in obj]
    elif isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = _shared(value, table)


def _shared(value: Any, table: Dict[str, str]) -> Any:
    """``value`` for :func:`share_strings`: a string, the table's equal one; a
    dataclass, list or dict, itself with its strings shared; else itself."""
    if type(value) is str:
        return table.setdefault(value, value)
    if isinstance(value, (list, dict)) or dataclasses.is_dataclass(value):
        share_strings(value, table)
    return value


#: Version of the JSON layout written by :meth:`AnalysisResult.to_json`.
#: Bump it on any incompatible change of the dataclasses below.
#: 2: findings carry ``locations`` (:class:`SourceLocation`) and ranks
#: ``code`` (:class:`CodeAttribution`, from ``with_stack=True`` traces).
#: 3: the GPU figures of the headline are of the analyzed window, from exact
#: times (``Aggregate.busy_pct``...); ranks carry ``gpu_span_busy_pct`` and
#: ``replaced`` (HTA analyses that failed, computed by hta-report instead);
#: ``inventory.windows`` and ``files[].repaired_names``.
SCHEMA_VERSION = 3
#: Compatibility rule (docs/MCP.md, "The contract"): ``schema_version`` is the
#: major version of the layout. Within one version changes are additive only:
#: a new field is optional, with a default, so a result written before it
#: reads with the default and a reader of the same version that does not know
#: it ignores it (:func:`_build` reads known keys only). Removing or renaming a
#: field, or changing its type or unit, bumps the version.
#: Versions :meth:`AnalysisResult.from_dict` reads: a version-1 result has
#: no locations and no code attribution (their defaults: empty, "no stacks");
#: a version-2 result's GPU busy and idle are HTA's, of the GPU span.
READABLE_SCHEMA_VERSIONS = (1, 2, 3)


@dataclass(slots=True)
class StepTime:
    """One ``ProfilerStep#N`` annotation on the CPU timeline.

    Attributes:
        number: N in ``ProfilerStep#N``.
        duration_us: wall time of the annotation (µs).
        warmup: True for the first step found in the trace; it is excluded
            from the statistics because it usually carries one-off work.
        start_us: its start, µs from the start of the trace directory (the
            clock of ``GpuGap.start_us`` and ``EventRef.ts_us``); 0 in results
            of hta-report before it was recorded.
    """

    number: int
    duration_us: float
    warmup: bool = False
    start_us: float = 0.0


@dataclass(slots=True)
class StepStats:
    """Step-time statistics over ``ProfilerStep#N`` annotations.

    Statistics (``mean_us`` … ``max_us``) exclude the warm-up step unless it is
    the only step, in which case they use it and ``warmup_excluded`` is False.
    """

    count: int = 0
    mean_us: float = 0.0
    p50_us: float = 0.0
    p90_us: float = 0.0
    max_us: float = 0.0
    warmup_excluded: bool = False
    steps: List[StepTime] = field(default_factory=list)


@dataclass(slots=True)
class TemporalBreakdown:
    """GPU time split into idle / compute / non-compute, from HTA's
    ``TraceAnalysis.get_temporal_breakdown`` (same numbers, in µs and %).

    ``non_compute`` is time with only memcpy, memset or communication kernels
    running; percentages are of ``total_us`` (HTA's trace span of GPU work,
    on HTA's whole-µs times). ``source`` is ``"HTA"``, or ``"hta-report"``
    where HTA's analysis failed on the rank and the same split was computed
    by hta-report from the exact times (:attr:`RankResult.replaced` says why).
    """

    idle_us: float = 0.0
    compute_us: float = 0.0
    non_compute_us: float = 0.0
    total_us: float = 0.0
    idle_pct: float = 0.0
    compute_pct: float = 0.0
    non_compute_pct: float = 0.0
    source: str = "HTA"


@dataclass(slots=True)
class StreamIdle:
    """Idle time of one CUDA stream by cause, from HTA's
    ``get_idle_time_breakdown`` (µs).

    * host wait: the stream waited for the CPU to launch the next kernel;
    * kernel wait: gap between back-to-back kernels shorter than HTA's
      ``consecutive_kernel_delay`` (30 µs): launch overhead;
    * other: unexplained, e.g. waiting on an event from another stream.
    """

    stream: int
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_us: float = 0.0


@dataclass(slots=True)
class IdleBreakdown:
    """Idle time of a rank by cause.

    ``streams`` are HTA's per-stream figures (``get_idle_time_breakdown``),
    unchanged. HTA measures idleness per stream, and side streams
    (communication, copies) are idle most of the time by nature, so adding
    the streams up does not describe the GPU. The rank-level split describes
    the GPU as one device: the time with no GPU operation (kernel, memcpy,
    memset) on any stream over the rank's GPU span (the idle of HTA's
    temporal breakdown), each gap classified by HTA's rules for the GPU
    operation that ends it: *host wait* when its launch call started after
    the GPU went idle, else *kernel wait* when the gap is shorter than HTA's
    ``consecutive_kernel_delay`` (30 µs), else *other*.

    ``host_wait_us``, ``kernel_wait_us`` and ``other_us`` are those times
    (µs, whole trace); ``host_wait_pct``, ``kernel_wait_pct`` and
    ``other_pct`` their shares of the GPU idle time (they add up to 100).
    """

    streams: List[StreamIdle] = field(default_factory=list)
    host_wait_pct: float = 0.0
    kernel_wait_pct: float = 0.0
    other_pct: float = 0.0
    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_us: float = 0.0


@dataclass(slots=True)
class KernelTypeShare:
    """Share of GPU kernel time by HTA kernel type (``COMPUTATION``,
    ``COMMUNICATION``, ``MEMORY`` and their overlaps, e.g.
    ``COMPUTATION overlapping COMMUNICATION``), from HTA's
    ``get_gpu_kernel_breakdown``. ``pct`` is of all kernel time."""

    kernel_type: str
    total_us: float
    pct: float


@dataclass(slots=True)
class EventRef:
    """One event of a trace, named so that it can be found in the trace file
    again: ``rank`` (the file's), ``stream`` (the GPU stream; -1 on the host)
    and ``correlation`` (the trace's own id linking a launch to its GPU
    work) identify it; ``ts_us`` is its start in µs from the start of the
    trace directory (HTA's alignment: the earliest event of all ranks at 0),
    ``dur_us`` its duration (µs), ``name`` its name as recorded. ``role``
    says what the event is to the finding or gap that cites it (empty where
    it needs no word): ``call``, the host call a GPU idle gap began in (the
    synchronization, copy, DataLoader or optimizer call the host was in);
    ``before``, the GPU operation that ended as the gap began (what a
    synchronization waited for); ``after``, the one that ended the gap (the
    next launch's work); ``launched``, the GPU operation a cited call
    launched (the same ``correlation``: a copy's memcpy)."""

    rank: int
    stream: int
    correlation: int
    ts_us: float
    dur_us: float
    name: str = ""
    role: str = ""


@dataclass(slots=True)
class CauseEvents:
    """The events that show one GPU idle cause of a rank
    (:class:`IdleAttribution`): ``cause`` (a category of it: ``sync``,
    ``dataloader``, ``pageable_copy``...; ``any`` for the longest gaps of
    every cause) and ``events``, at most :data:`MAX_EVIDENCE_EVENTS`
    :class:`EventRef` items, the largest gap of the cause first, each gap as the
    host call it began in (``role`` ``call``, where the cause is a call),
    the GPU operation before it (``before``) and the one after it (``after``),
    then the cause's longest calls that began no gap (``call``), each with
    the GPU operation it launched (``launched``) or else the one it waited for
    (``before``)."""

    cause: str
    events: List[EventRef] = field(default_factory=list)


#: The most events a finding (``Finding.events``) or an idle cause (``CauseEvents.events``) cites.
MAX_EVIDENCE_EVENTS = 20


@dataclass(slots=True)
class KernelStat:
    """One kernel name's totals on a rank (µs); ``pct`` is of the rank's
    kernel time; ``blocks_per_sm`` and ``occupancy_pct`` are Kineto's
    ``blocks per SM`` and ``est. achieved occupancy %`` weighted by duration
    (the TensorBoard profiler's kernel table; 0 where the trace has none);
    ``longest`` is its longest call (:class:`EventRef`; None in results of
    hta-report before it was recorded)."""

    name: str
    kernel_type: str
    count: int
    total_us: float
    mean_us: float
    max_us: float
    pct: float
    min_us: float = 0.0
    blocks_per_sm: float = 0.0
    occupancy_pct: float = 0.0
    longest: Optional[EventRef] = None


@dataclass(slots=True)
class InstanceSample:
    """The durations of one item's instances inside a rank's analyzed steps,
    kept so that a saved result can be compared by a statistical test
    (:mod:`hta_report.compare_stats`).

    Attributes:
        kind: ``kernel`` (a GPU kernel, by name: Kineto records no shape on
            kernels), ``memcpy`` (a GPU memory copy or set, by name:
            ``Memcpy HtoD (Pageable -> Device)``) or ``cpu_op`` (a host op by name and, where the trace
            recorded shapes, its ``Input Dims``; its self time).
        name: the kernel or op name.
        shape: the op's ``Input Dims`` as recorded (``[[64, 512], [512]]``),
            ``""`` for kernels and where shapes were not recorded.
        count: all instances in the analyzed steps (not only those kept).
        total_us: their summed duration (µs).
        durations_us: at most :data:`SAMPLES_PER_ITEM` durations (µs, rounded
            to 1 ns), in time order: every instance when there are no more,
            else a deterministic sample evenly spread over the run (instance
            ``round(i × (count − 1) / (cap − 1))``).
    """

    kind: str
    name: str
    shape: str = ""
    count: int = 0
    total_us: float = 0.0
    durations_us: List[float] = field(default_factory=list)


#: Items kept per kind (kernels, copies, host ops) and rank, those with the most
#: total time: an item left out holds less time per step than the smallest one
#: kept, and a rank's samples stay small (42 kB of indented JSON for the 40 host
#: ops of the CPU rank of docs/COMPARE.md's benchmark).
SAMPLE_ITEMS = 40
#: Instance durations kept per item: 128 give a Mann-Whitney test of two
#: sides 80 % power to see a shift of about 0.36 standard deviations at
#: α = 0.05 (Noether 1987's sample-size formula), and cap the JSON.
SAMPLES_PER_ITEM = 128


@dataclass(slots=True)
class InstanceSamples:
    """Per-instance samples of a rank (:class:`InstanceSample`), for the
    statistical comparison. ``steps`` is the number of analyzed steps they
    cover (0: none kept, as in results saved before they existed, which
    :func:`hta_report.compare.compare` then compares by the noise band);
    ``items`` are the :data:`SAMPLE_ITEMS` kernels, memory copies and host
    ops (each kind its own quota) with the most total time, most first."""

    steps: int = 0
    items: List[InstanceSample] = field(default_factory=list)


@dataclass(slots=True)
class MemcpyDirection:
    """Memory copies (or memsets) in one direction.

    ``direction`` is ``HtoD``, ``DtoH``, ``DtoD``, ``HtoH``, ``PtoP`` or
    ``Memset``. ``pageable_count`` counts copies whose event name says
    ``Pageable`` (host memory not pinned: the copy is staged and the
    ``cudaMemcpyAsync`` call blocks); ``pinned_count`` those that say
    ``Pinned``. ``bandwidth_gbps`` is total bytes / total time.
    """

    direction: str
    count: int = 0
    total_us: float = 0.0
    total_bytes: int = 0
    bandwidth_gbps: float = 0.0
    pageable_count: int = 0
    pinned_count: int = 0


@dataclass(slots=True)
class MemcpySummary:
    """Memcpy and memset activity of a rank.

    ``overlapped_us`` is memcpy time during which a compute kernel ran on any
    stream; ``exposed_us`` is memcpy time during which no compute or
    communication kernel ran (the GPU did nothing but copy);
    ``exposed_pct`` is ``exposed_us`` as % of the rank's GPU span.

    Per analyzed step (µs, inside the analyzed step windows):

    * ``pageable_exposed_us_per_step``: exposed time of copies from
      pageable host memory to the device (pinning the source makes them
      asynchronous); ``blocking_exposed_us_per_step``: of the other
      copies issued by blocking copy ops (below); ``other_exposed_us_per_step``:
      of all remaining copies (asynchronous pinned, device-to-device, and
      device-to-host reads, whose wait is synchronization);
    * ``pageable_calls_per_step``: ``cudaMemcpyAsync`` calls of those pageable copies;
    * blocking copies: ``aten::copy_``/``aten::_to_copy``/``aten::to`` ops that
      copy to the device (not device-to-host reads), call a memcpy and then
      ``cudaStreamSynchronize`` (or a synchronous ``cudaMemcpy``):
      ``blocking_copies_per_step``, host time inside them
      (``blocking_copy_us_per_step``) and the ops by name (``blocking_ops``);
    * device-to-host reads: ``Memcpy DtoH`` copies the host waits for (to
      pageable memory, whose ``cudaMemcpyAsync`` returns only when the copy
      is done, a synchronous ``cudaMemcpy``, or followed by a stream
      synchronization in the same op), as ``.item()``, ``.cpu()`` and
      ``.tolist()`` do: ``dtoh_reads_per_step`` and their smallest and
      largest size (``dtoh_read_min_bytes``, ``dtoh_read_max_bytes``).
      Pinning the destination does not remove the wait: the host needs the
      value, so the GPU must first finish the work queued before the copy.
    """

    directions: List[MemcpyDirection] = field(default_factory=list)
    total_us: float = 0.0
    overlapped_us: float = 0.0
    exposed_us: float = 0.0
    exposed_pct: float = 0.0
    pageable_exposed_us_per_step: float = 0.0
    blocking_exposed_us_per_step: float = 0.0
    other_exposed_us_per_step: float = 0.0
    pageable_calls_per_step: float = 0.0
    blocking_copies_per_step: float = 0.0
    blocking_copy_us_per_step: float = 0.0
    blocking_ops: List["NamedTime"] = field(default_factory=list)
    dtoh_reads_per_step: float = 0.0
    dtoh_read_min_bytes: int = 0
    dtoh_read_max_bytes: int = 0


@dataclass(slots=True)
class StepValue:
    """A time (µs) in one ``ProfilerStep#number``."""

    number: int
    us: float


#: The most collective launches a rank keeps (:attr:`CommSummary.launches`): a step's collectives
#: (an MoE layer's all-to-alls, DDP's buckets) with room; the JSON stays small.
MAX_COLLECTIVE_LAUNCHES = 512


@dataclass(slots=True)
class CollectiveLaunch:
    """One communication kernel: when the host launched it (``launch_us``, its
    runtime call's start) and when it ran on the GPU (``start_us``,
    ``end_us``), µs on the directory's common timeline (HTA aligns every
    rank by one offset, so ranks traced on one host share its clock)."""

    launch_us: float
    start_us: float
    end_us: float


#: Share of the compared steps in which one rank must arrive last at the
#: collectives (or have the longest step) to be taken for a straggler: all of
#: them with fewer than 4 steps. Under noise alone each of two ranks is last
#: in about half the steps (:class:`CommSummary`, ``rank-straggler``).
MOST_STEPS = 0.75


@dataclass(slots=True)
class CollectiveKind:
    """A rank's communication kernels of one kind (:mod:`hta_report.analysis.collectives`),
    per analyzed step: ``kind`` (``dp`` data-parallel gradient reduction, ``tp``
    tensor-parallel activation collectives, ``fsdp`` parameter gathers, ``ep``
    expert-parallel all-to-all, ``pp`` pipeline send/recv, ``other``),
    ``label`` in words, ``calls_per_step``, ``us_per_step`` their time (µs,
    union) and ``exposed_us_per_step`` its part with no compute kernel running (µs);
    ``after_backward_per_step``: of the calls, those issued after their step's
    backward pass had ended (nothing of it can overlap them)."""

    kind: str
    label: str = ""
    calls_per_step: float = 0.0
    us_per_step: float = 0.0
    exposed_us_per_step: float = 0.0
    after_backward_per_step: float = 0.0


@dataclass(slots=True)
class CommSummary:
    """Communication (NCCL/RCCL/HCCL kernels) of a rank.

    ``overlap_pct`` is HTA's ``get_comm_comp_overlap``: % of communication
    time during which a compute kernel also ran. ``exposed_us`` is
    communication time with no compute kernel running; ``exposed_pct`` is of
    the rank's GPU span.

    Per analyzed step (µs): ``us_per_step`` communication kernel time,
    ``exposed_us_per_step`` its exposed part; ``cpu_collective_us_per_step``
    host time in collective ops (``gloo:*``, ``nccl:*``, ``c10d::*``,
    ``record_param_comms``, on any host thread), used on ranks without
    communication kernels; ``host_exposed_us_per_step`` the part of that
    host time in which the step thread runs no other op (it waits for its
    collectives: :func:`hta_report.analysis.collectives.host_collectives`),
    0 on ranks with GPU activity. ``sync_wait_us_per_step`` is this rank's
    collective time beyond the smallest of all ranks in the directory
    (HTA's straggler analysis splits collective time into data transfer, the
    minimum across ranks, and synchronization wait, the rest): communication
    kernel time on ranks that have communication kernels, host time in
    collective ops on the others (a CPU backend such as gloo waits for the
    slowest rank inside its collective ops); 0 with one rank.
    ``collective_basis`` says which: ``kernels``, ``host`` or ``""`` (no
    collective seen). ``kernel_us_by_step`` and ``host_collective_us_by_step``
    give those two times in each analyzed step (by ``ProfilerStep`` number);
    with steps in common across ranks the wait is taken per step. Per step,
    the rank with the least collective time arrived last (the others waited
    for it): ``late_steps`` counts the steps in which this rank did, of
    ``compared_steps`` steps common to the ranks (0: not compared). Only a rank
    last in most of them is a straggler; the others' wait is then the median of
    their per-step waits (µs), any other rank's 0: ranks that take turns being
    late through noise show no wait, and one slow step neither makes a
    straggler nor drags the wait. ``kinds`` splits the communication
    kernels by what they do (:class:`CollectiveKind`), most exposed first
    (on a rank without GPU activity, its host collectives' waited time).
    ``wrapper`` is the data-parallel wrapper the host events show (``DDP``,
    ``FSDP``, ``""`` for none: :func:`hta_report.analysis.collectives.data_parallel_wrapper`).
    ``stalls`` counts communication kernels that ran 10x the median of the
    same kernel or longer (:func:`hta_report.analysis.transfers.collective_stalls`):
    waits for a late peer, a host stall or the window's end, not transfer;
    ``stall_us_per_step`` is their time past that median with no compute
    running (µs per step); ``stall_kernel``, ``stall_us``, ``stall_median_us``
    and ``stall_calls`` describe the largest (its name, duration and its
    kernel's median in µs, and how many calls that median is of).
    ``launches`` lists the communication kernels starting in the analyzed
    windows with their launch calls (:class:`CollectiveLaunch`), in launch
    order, at most :data:`MAX_COLLECTIVE_LAUNCHES`. Across ranks whose
    lists are as long (the same collectives), the n-th entries are the same
    collective: ``launched_last`` counts those this rank's host launched
    after every other rank's, of ``launches_compared``;
    ``launch_lag_min_us`` and ``launch_lag_max_us`` (µs) are by how much
    after the next latest, over the collectives, where it launched all of
    them last. ``launch_wait_us_per_step`` is, on the other ranks, the time
    their collective kernels ran before that rank launched the same
    collective (µs per step): they waited for its host.
    """

    kernel_count: int = 0
    total_us: float = 0.0
    overlap_pct: float = 0.0
    exposed_us: float = 0.0
    exposed_pct: float = 0.0
    us_per_step: float = 0.0
    exposed_us_per_step: float = 0.0
    sync_wait_us_per_step: float = 0.0
    cpu_collective_us_per_step: float = 0.0
    host_exposed_us_per_step: float = 0.0
    wrapper: str = ""
    collective_basis: str = ""
    kernel_us_by_step: List[StepValue] = field(default_factory=list)
    host_collective_us_by_step: List[StepValue] = field(default_factory=list)
    late_steps: int = 0
    compared_steps: int = 0
    kinds: List[CollectiveKind] = field(default_factory=list)
    stalls: int = 0
    stall_us_per_step: float = 0.0
    stall_kernel: str = ""
    stall_us: float = 0.0
    stall_median_us: float = 0.0
    stall_calls: int = 0
    launches: List[CollectiveLaunch] = field(default_factory=list)
    launched_last: int = 0
    launches_compared: int = 0
    launch_lag_min_us: float = 0.0
    launch_lag_max_us: float = 0.0
    launch_wait_us_per_step: float = 0.0


@dataclass(slots=True)
class QueueStat:
    """Queue length (outstanding launched-but-unfinished GPU operations) of one
    stream, from HTA's ``get_queue_length_summary``."""

    stream: int
    mean: float
    p50: float
    max: float


@dataclass(slots=True)
class LaunchSummary:
    """Kernel launch overhead of a rank, from HTA's ``get_cuda_kernel_launch_stats``.

    * ``short_kernels``: GPU work shorter than its ``cuda_runtime`` launch call;
    * ``runtime_outliers``: launch calls longer than ``runtime_cutoff_us`` (50 µs);
    * ``delay_outliers``: launch delay (kernel start − launch call end) longer
      than ``launch_delay_cutoff_us`` (100 µs).
    * ``kernels_per_step`` and ``median_kernel_us``: kernels (not memcpy or
      memset) starting inside the analyzed steps;
    * ``kernel_runtime_outliers``: kernel launch calls (``cudaLaunchKernel``...,
      not copies or memsets, whose calls may wait for the GPU by design) in
      the analyzed steps longer than the cutoff; ``median_kernel_launch_us``:
      the median of the kernel launch calls in the analyzed steps (µs, one-off
      warm-up left out; ``median_runtime_us`` is HTA's, over the async copy and
      memset calls too); ``runtime_excess_us_per_step``: per step, the time the
      calls over the cutoff spent beyond ``median_kernel_launch_us`` (µs);
    * ``full_queue_us``: time (µs) some stream had ``queue_limit`` (1024, HTA's
      ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``) or more outstanding operations, from
      HTA's ``get_queue_length_time_series``; ``full_queue_pct`` is of the
      rank's trace span;
    * ``launch_call_us_per_step``: host time inside kernel launch calls per
      analyzed step (µs), to compare with the GPU idle while the host runs ops.
    * ``launch_source``: who counted the launches: ``"HTA"``, or ``"hta-report"``
      (HTA's definitions, our count) where HTA knows none of the calls (``hip*``, ``cuLaunchKernel``).

    One-off warm-up launches (:class:`Warmup`) are left out of the outliers.
    """

    launches: int = 0
    short_kernels: int = 0
    runtime_outliers: int = 0
    delay_outliers: int = 0
    runtime_cutoff_us: float = 50.0
    launch_delay_cutoff_us: float = 100.0
    median_runtime_us: float = 0.0
    median_launch_delay_us: float = 0.0
    p90_launch_delay_us: float = 0.0
    queue: List[QueueStat] = field(default_factory=list)
    kernels_per_step: float = 0.0
    median_kernel_us: float = 0.0
    runtime_excess_us_per_step: float = 0.0
    kernel_runtime_outliers: int = 0
    median_kernel_launch_us: float = 0.0
    queue_limit: int = 1024
    full_queue_us: float = 0.0
    full_queue_pct: float = 0.0
    launch_call_us_per_step: float = 0.0
    launch_source: str = ""


@dataclass(slots=True)
class NamedTime:
    """A CPU-side event name with its count and time (µs). ``self_us`` is time
    not spent in child events on the same thread; ``category`` the events'
    Kineto category (``cpu_op``, ``user_annotation``...; empty where not kept)."""

    name: str
    count: int
    total_us: float
    self_us: float = 0.0
    category: str = ""


@dataclass(slots=True)
class SyncKindCount:
    """The synchronization points of one kind (:mod:`hta_report.analysis.sync_kinds`)
    per analyzed step: ``kind`` (its key: ``logged``, ``metric``, ``explicit``,
    ``harness``, ``output``, ``control``, ``shape``), ``per_step`` (points per
    step), ``us_per_step`` (their host time, µs per step), ``removable``
    (whether a fix removes them: only those are the ``no host-device sync``
    edit's), ``label`` (the kind in words) and ``why`` (why it is or is not
    removable, and what the trace showed)."""

    kind: str
    per_step: float = 0.0
    us_per_step: float = 0.0
    removable: bool = False
    label: str = ""
    why: str = ""


@dataclass(slots=True)
class CpuSide:
    """CPU-side metrics of a rank, per analyzed step (warm-up step excluded
    when there are others).

    * DataLoader: time inside ``enumerate(DataLoader)#...`` annotations;
      ``dataloader_pct`` is of the mean step time;
    * synchronization: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
      ``cudaEventSynchronize``, ``aten::item``, ``aten::_local_scalar_dense``;
    * ``top_ops``: CPU ops by self time over the whole analyzed window;
    * ``host_random_us``: self time (µs, the whole analyzed window) of the
      random-draw ops (``aten::normal_``, ``randn``...) that launched no GPU
      work: tensors drawn on the CPU;
    * ``DataParallel.forward`` annotations (``torch.nn.DataParallel``): calls
      and host time (µs) per step;
    * forward passes: ``loss_calls_per_step``, calls of the loss op ``loss_op``
      (the most called of ``aten::cross_entropy_loss``, ``aten::mse_loss``...:
      one per forward pass ending in a loss); ``backward_passes_per_step``,
      those loss calls followed by a backward pass before the next one;
      ``loss_batch``, the median leading dimension of the loss op's input
      (samples per pass; 0 when shapes were not recorded);
    * ``sync_kinds``: the synchronization points by kind, most time first
      (:class:`SyncKindCount`).
    """

    steps_used: int = 0
    dataloader_us_per_step: float = 0.0
    dataloader_pct: float = 0.0
    dataloader_in_main_process: bool = False
    dataloader_seen: bool = False
    sync_calls_per_step: float = 0.0
    sync_us_per_step: float = 0.0
    sync_pct: float = 0.0
    sync_events: List[NamedTime] = field(default_factory=list)
    top_ops: List[NamedTime] = field(default_factory=list)
    host_random_us: float = 0.0
    data_parallel_calls_per_step: float = 0.0
    data_parallel_us_per_step: float = 0.0
    loss_calls_per_step: float = 0.0
    backward_passes_per_step: float = 0.0
    loss_batch: int = 0
    loss_op: str = ""
    sync_kinds: List["SyncKindCount"] = field(default_factory=list)


@dataclass(slots=True)
class GpuGap:
    """One stretch with no GPU activity (no kernel, memcpy or memset on any
    stream) inside the analyzed steps, as Nsight Systems' ``gpu_gaps`` lists them.

    Attributes:
        start_us: start, µs from the start of the trace directory (HTA aligns ranks).
        duration_us: length (µs).
        step: the ``ProfilerStep`` number it starts in (0 without steps).
        cause: the :class:`IdleAttribution` category holding most of it
            (``warmup``, ``edge``, ``stream_wait``, ``dataloader``, ``pageable_copy``, ``blocking_copy``,
            ``sync``, ``zero_grad``, ``optimizer``, ``launch``, ``host_ops``,
            ``unattributed``).
        host_ops: what the host ran during the gap, longest overlap first:
            the innermost events (ops, runtime calls, Python frames) on
            threads that launch GPU work, not the spans that wrap them.
    """

    start_us: float
    duration_us: float
    step: int = 0
    cause: str = ""
    host_ops: List[str] = field(default_factory=list)


@dataclass(slots=True)
class IdleAttribution:
    """GPU idle time inside the analyzed steps, split by what the host was doing.

    All values are µs per analyzed step. ``idle_us`` is time with no kernel,
    memcpy or memset on any stream; ``kernel_busy_us`` time with a kernel
    running (TensorBoard's GPU utilization counts kernels only); ``busy_us``
    time with any GPU activity. Each idle instant goes to the first category
    that claims it, in this order (the categories are disjoint and add up to
    ``idle_us``):

    0. ``unrecorded_us``: before the rank's first recorded GPU operation,
       from its launch call to its start, when that is 1 ms or more: the
       GPU ran work the trace does not hold (:class:`Integrity`); not idle,
       and no finding claims it;
    1. ``warmup_us``: the host is inside a one-off warm-up call (CUDA context
       or stream creation, allocator growth, lazy kernel loading; see
       :class:`Warmup`);
    1a. ``edge_us``: without ``ProfilerStep`` annotations, the traced
       window's host-only edges, before the rank's first GPU operation and
       after its last: where the profiler started and stopped, not a GPU gap
       of the workload; no finding claims it. A Python loop over elements
       the host runs there (:mod:`hta_report.analysis.host_loops`) is no
       edge: it is the workload's work with the GPU idle (host ops, 10.);
    2. ``stream_wait_us``: stretches of 30 µs or more (HTA's kernel-wait
       cutoff) during which some GPU operation, on any stream, had been
       launched (its launch call had returned) and had not started: work was
       queued, yet the GPU waited, on an event from another stream
       (``cudaStreamWaitEvent``), a collective's peers or a stream dependency
       (HTA's "other" idle), not on the host. A gap is split at the launch of
       the operation that ends it: only the part before it is the host's.
       Shorter such stretches are HTA's kernel wait and go to ``launch_us``;
    3. ``dataloader_us``: the host is inside ``enumerate(DataLoader)#...``;
    4. ``pageable_copy_us``: idle gaps that begin inside the ``cudaMemcpyAsync``
       of a copy from pageable host memory to the device (the call blocks the
       host): the GPU ran dry while the host waited, and stays idle until the
       host launches again;
    5. ``blocking_copy_us``: gaps that begin while the host is inside a
       blocking copy to the device (see :class:`MemcpySummary`);
    6. ``sync_us``: gaps that begin inside a synchronization: a synchronizing
       call (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
       ``cudaEventSynchronize``), a device-to-host read the host waits for
       (``.item()``: ``aten::item`` → ``aten::_local_scalar_dense`` →
       ``cudaMemcpyAsync`` of a few bytes to pageable memory; ``.cpu()``), or
       the outermost ``aten::`` op that contains one (``aten::nonzero``,
       ``aten::to``...), so a gap that opens just before the call inside the
       same op counts too. Only where the host waited for queued GPU work:
       a context whose waits all returned with no earlier GPU work left to
       finish (at least 10 µs of it) drained nothing, and the idle around it
       is the host's (later categories);
    7. ``zero_grad_us``: the host is inside ``Optimizer.zero_grad#...`` that
       writes zeros (``aten::zero_``); 0 when it does not;
    8. ``optimizer_us``: the host is inside ``Optimizer.step#...`` without a
       foreach or fused implementation; 0 when it has one;
    9. ``launch_us``: the host is running ops, launch calls, Python frames or
       leaf annotations, on a thread that launches GPU work (annotations that
       only enclose other events, such as ``execute_…`` or ``step[…]``, are
       not host work of their own), and the gap is shorter than HTA's launch-delay cutoff (100 µs): the GPU
       waits between back-to-back launches (per-kernel launch overhead);
       with the queued gaps under 30 µs (2.);
    10. ``host_ops_us``: the same in longer gaps: the host is busy with CPU
        work (Python, framework, CPU ops) longer than the GPU's queued work;
        the whole stretch of a Python loop over elements counts (its Python
        between the recorded ops included);
    11. ``unattributed_us``: the rest (no profiled host activity at all).

    ``sync_lead_us`` is not a category: it is the part of the launch, host
    ops and unattributed idle that follows a blocking synchronization (before
    the next one on that thread), up to the queued GPU work done while the
    host waited in it (not a read's own copy). While the host waits, the GPU works off the queue the host
    had built up; after it the host has nothing queued ahead, so host work
    that the queue would have covered shows as GPU idle: a synchronization
    costs up to that too.

    ``host_loop_us`` is not a category: the part of ``host_ops_us`` inside
    Python loops over elements (:func:`hta_report.analysis.host_loops.loops`),
    the GPU idle such a loop is the cause of (``per-sample-ops``' measure on
    GPU ranks).

    ``late_start_us`` is not a category either: the part of the idle (in
    ``stream_wait_us``) in which an operation launched on an idle GPU had not
    started 1 ms or more after its launch returned
    (:func:`hta_report.analysis.gap_causes.late_starts`): a wait outside the
    process or one the profiler does not record. ``late_starts`` counts
    those late starts in the whole trace (operations starting together count once).

    ``gaps`` lists the longest idle gaps (up to 10). ``events`` cites, per
    cause with idle time, the trace events of its largest gaps
    (:class:`CauseEvents`; empty in results from before it was recorded).
    """

    kernel_busy_us: float = 0.0
    busy_us: float = 0.0
    idle_us: float = 0.0
    unrecorded_us: float = 0.0
    warmup_us: float = 0.0
    edge_us: float = 0.0
    stream_wait_us: float = 0.0
    dataloader_us: float = 0.0
    blocking_copy_us: float = 0.0
    pageable_copy_us: float = 0.0
    sync_us: float = 0.0
    zero_grad_us: float = 0.0
    optimizer_us: float = 0.0
    launch_us: float = 0.0
    host_ops_us: float = 0.0
    unattributed_us: float = 0.0
    sync_lead_us: float = 0.0
    host_loop_us: float = 0.0
    late_start_us: float = 0.0
    late_starts: int = 0
    gaps: List[GpuGap] = field(default_factory=list)
    events: List[CauseEvents] = field(default_factory=list)


@dataclass(slots=True)
class Warmup:
    """One-off warm-up work inside the analyzed windows of a rank: host calls
    that happen once per process and make the traced window unrepresentative.

    A call counts when it lasts at least :data:`threshold_us` (1 ms,
    proposal; a warm launch or allocation takes µs) and is one of:
    CUDA/HIP context, device or stream set-up (``cudaDeviceGetStreamPriorityRange``
    creates the context, ``cudaFree``/``cudaMalloc`` grow the caching
    allocator, ``cudaStreamCreate*``, ``cuInit``...), or the first launch of a
    kernel in the trace while the GPU waits for it (lazy module loading).
    Whatever their length: CUDA/HIP stream capture (``*StreamBeginCapture``
    to ``*StreamEndCapture``, a serving engine's ``capture_*`` annotation:
    a graph is captured once, then replayed) and one-off tuning
    (``cudaEventSynchronize`` inside a cuDNN/MIOpen convolution in benchmark
    mode, Triton's ``compile``).

    ``us_per_step`` is the host time in them per analyzed window (µs);
    ``calls`` lists them by name (count, total µs).
    """

    threshold_us: float = 1000.0
    us_per_step: float = 0.0
    calls: List[NamedTime] = field(default_factory=list)


@dataclass(slots=True)
class Iterations:
    """The iterations of a trace without ``ProfilerStep`` annotations, read
    from the repetition of its step thread's outermost ops
    (:func:`hta_report.analysis.iterations.iterations`): the same op, with the
    same recorded input shapes, starting every ``ops_per_iteration``
    outermost ops, three times or more (a model's forward, a training
    step).

    ``count`` is 0 where the trace has ``ProfilerStep`` annotations or no
    such repetition was found. ``first_op`` names the op each iteration
    starts with; ``durations_us`` holds each iteration's length in trace
    order (µs: from its first op's start to the next iteration's, the last
    one to the end of its last op).
    """

    count: int = 0
    ops_per_iteration: int = 0
    first_op: str = ""
    durations_us: List[float] = field(default_factory=list)


#: The values of :attr:`Workload.kind`.
WORKLOAD_KINDS = ("training", "inference", "graph-capture")
#: Stream capture spanning at least this share of a trace makes it a capture window (proposal: half).
CAPTURE_SHARE = 0.5


@dataclass(slots=True)
class Workload:
    """What a rank's trace runs, read from its events
    (:func:`hta_report.analysis.workload.workload`): the advice's words
    depend on it (a capture window is a one-off, an inference server has no
    optimizer, compiled code is already compiled).

    Attributes:
        kind: ``training`` (backward ops: ``autograd::engine::evaluate_function``,
            ``*Backward*``, or ``Optimizer.step#...``), ``graph-capture``
            (CUDA/HIP stream capture spans at least :data:`CAPTURE_SHARE` of the
            traced span: ``cudaStreamBeginCapture`` to ``cudaStreamEndCapture``,
            or a ``capture_*`` annotation), ``inference`` (ops without any
            backward or optimizer op, 10 or more of them), or ``""`` (not
            known: a GPU-only trace, too few ops to tell, or the step failed). One of :data:`WORKLOAD_KINDS` or ``""``.
        serving: the serving engine the trace names (``vLLM``: its
            ``vllm/`` frames or ``execute_N_context_M(...)_generation_K(...)``
            annotations; ``SGLang``: ``step[DECODE ...]``/``step[EXTEND ...]``
            annotations or ``sglang/`` frames; ``Hugging Face pipeline``:
            ``transformers/pipelines/`` frames), else ``""``.
        phase: ``prefill``, ``decode``, ``prefill and decode`` where the
            annotations say so (vLLM's context/generation counts, SGLang's
            ``EXTEND``/``PREFILL``/``DECODE``), else ``""``.
        compiled: torch.compile'd code ran: ``Torch-Compiled Region``,
            ``CompiledFxGraph`` or ``TorchDynamo Cache Lookup`` events, or
            Inductor's ``triton_poi_``/``triton_red_``/``triton_per_`` kernels.
        graph_launches: CUDA/HIP graph launches (``cudaGraphLaunch``,
            ``hipGraphLaunch``) in the trace: each replays a captured graph.
        capture_us: host time inside stream capture, the whole trace (µs).
        span_us: the host events' span, first start to last end (µs).
        evidence: what the kind was read from, one line each (names as the trace spells them).
    """

    kind: str = ""
    serving: str = ""
    phase: str = ""
    compiled: bool = False
    graph_launches: int = 0
    capture_us: float = 0.0
    span_us: float = 0.0
    evidence: List[str] = field(default_factory=list)

    @property
    def capture_pct(self) -> float:
        """Stream capture as % of the host span (0 without a span)."""
        return 100 * self.capture_us / self.span_us if self.span_us > 0 else 0.0

    @property
    def label(self) -> str:
        """The kind in words for a headline, e.g. ``inference (SGLang, decode; graph replay; compiled)``;
        ``""`` when the kind is unknown."""
        if not self.kind:
            return ""
        names = {"training": "training", "inference": "inference", "graph-capture": "CUDA/HIP graph capture"}
        parts = [p for p in (self.serving, self.phase) if p]
        extra = (["graph replay"] if self.graph_launches and self.kind != "graph-capture" else []) + \
            (["compiled"] if self.compiled else [])
        inner = "; ".join(x for x in (", ".join(parts), ", ".join(extra)) if x)
        # a saved result may hold any string (renderers escape it): an unknown kind is shown as it is
        return names.get(self.kind, self.kind) + (f" ({inner})" if inner else "")


@dataclass(slots=True)
class OptimizerProfile:
    """``Optimizer.step#...`` and ``Optimizer.zero_grad#...`` annotations of a rank.

    Per analyzed step: ``step_us_per_step`` host time inside ``Optimizer.step``,
    ``ops_per_step`` CPU ops inside it, ``kernels_per_step`` and
    ``kernel_us_per_step`` (µs) the GPU kernels launched from inside it,
    ``median_kernel_us`` their median duration, ``launch_us_per_step`` the
    host time (µs) of the runtime or driver calls inside it that launched
    those kernels (the launch overhead a fused or foreach step saves most
    of). ``multi_tensor`` is True when
    the step uses a foreach or fused implementation (``aten::_foreach_*`` or
    ``aten::_fused_*`` ops, ``multi_tensor_apply``/fused kernels, or an
    optimizer class named ``Fused*``), and ``marker`` names what showed it.
    When a model steps several optimizers, the figures describe the
    single-tensor one (``step_name``) if there is one, else all of them.

    ``zero_ops_per_step`` counts ``aten::zero_`` ops inside
    ``Optimizer.zero_grad`` that are not part of an ``aten::zeros`` (gradients
    written with zeros instead of set to None); ``zero_grad_us_per_step`` is
    the host time inside ``Optimizer.zero_grad`` and
    ``zero_grad_kernel_us_per_step`` the GPU time of kernels it launched (µs).
    """

    step_name: str = ""
    step_calls: int = 0
    step_us_per_step: float = 0.0
    ops_per_step: float = 0.0
    kernels_per_step: float = 0.0
    kernel_us_per_step: float = 0.0
    median_kernel_us: float = 0.0
    multi_tensor: bool = False
    launch_us_per_step: float = 0.0
    marker: str = ""
    zero_grad_name: str = ""
    zero_grad_calls: int = 0
    zero_ops_per_step: float = 0.0
    zero_grad_us_per_step: float = 0.0
    zero_grad_kernel_us_per_step: float = 0.0


#: Dense 16-bit (bf16/fp16 with float32 accumulate) Tensor-Core peak over the TF32 peak: 2 on
#: every device with TF32 (vendors' datasheets and whitepapers, no sparsity; docs/DEVICES.md):
#: A100 312/156 TFLOP/s, H100/H200 SXM 989/495, RTX 3090 71/35.6 (GA102 whitepaper, BF16 with
#: FP32 accumulate), L40S 362/183, MI300X 1307.4/653.7. What bf16 autocast can make a TF32
#: matmul faster by (``tf32-matmuls``; the replay's ``TF32 matmuls in bf16``).
TF32_TO_16_BIT_SPEEDUP = 2.0


@dataclass(slots=True)
class TensorCoreUse:
    """Tensor Core use of GEMM and convolution kernels (TensorBoard's check).

    ``compute_major`` is ``deviceProperties.computeMajor`` (None when not
    recorded or not an NVIDIA GPU). ``amd_matrix_cores``: on an AMD GPU, whether
    it has matrix cores (MFMA: Instinct MI100 or newer, or MFMA kernels ran), else None.
    Eligible kernels are launched from
    ``aten::mm``/``addmm``/``bmm``/``baddbmm``/``matmul``/``linear``/``conv*``
    ops (or named like GEMM/convolution kernels); Tensor Core kernels are the
    eligible ones whose name contains one of TensorBoard's substrings
    (``884``, ``1688``, ``16816``, ``hmma``, ``xmma``, ``gmma``, ``wgmma``) or
    ``tensorop``/``tensor16x8``/``wmma``/``nvjet_``, or AMD matrix-core (MFMA) kernels. Times are µs per analyzed step;
    ``tensor_core_pct`` is of eligible kernel time. ``top_non_tensor_core``
    lists eligible kernels that do not use Tensor Cores, by time, but those
    already in 16 or 8 bits (``low_precision_us_per_step``, µs per step:
    an fp16 Winograd convolution, an FP8 grouped GEMM; autocast moves
    nothing there). ``compute_minor`` is ``deviceProperties.computeMinor``;
    ``matrix_dtypes`` the precisions the GPU runs on its matrix units
    (:func:`hta_report.analysis.precision.matrix_dtypes`: ``float16``,
    ``bfloat16``, ``tf32``, ``float8``...; empty when unknown or none).
    ``eligible_ops_kernel_pct`` is the TensorBoard profiler's share: kernel
    time launched by its Tensor-Core-eligible ops (mm, addmm, bmm, linear,
    conv* and their backward nodes), % of kernel time launched by any op.

    Misaligned 16-bit GEMMs: ``aten::mm``/``addmm``/
    ``bmm``/``baddbmm``/``matmul``/``linear`` ops with a ``c10::Half`` or
    ``c10::BFloat16`` input whose ``K`` or ``N`` is not a multiple of 8 (not
    ``M``, the token count; needs ``record_shapes``; ``shapes_recorded`` says whether the trace
    has input shapes). Per step: ``half_gemm_ops_per_step`` 16-bit GEMM ops,
    ``misaligned_ops_per_step`` misaligned ones and ``misaligned_us_per_step``
    the GPU time of their kernels (µs), ``misaligned_bound_us_per_step`` the most
    padding could save of it (µs, a bound); ``misaligned_examples`` shows a few
    (op and input dimensions).

    TF32: ``tf32_us_per_step`` is the time (µs per analyzed step) of the
    Tensor Core GEMM/convolution kernels whose name says their inputs are
    TF32 (:data:`hta_report.analysis.kernels.TF32_KERNEL`: cuBLAS/cuDNN
    ``*_f32f32_tf32f32_f32_*``, CUTLASS ``*_tensorop_s1688*_tf32_*``): float32
    matmuls run on Tensor Cores at half the device's dense 16-bit rate (NVIDIA
    only: AMD kernel names show no TF32 marker); ``top_tf32`` lists the
    largest of them by time (totals over the analyzed steps, µs).

    Layout conversions: ``layout_conversion_us_per_step`` (µs per analyzed
    step) and ``layout_conversions_per_step`` (kernels per step) of cuDNN's
    NCHW <-> NHWC conversion kernels
    (:data:`hta_report.analysis.kernels.LAYOUT_CONVERSION_KERNEL`), which a
    convolution on NCHW (``torch.contiguous_format``) tensors runs around an
    engine that computes in NHWC; ``top_layout_conversion`` lists the largest
    (totals over the analyzed steps, µs); ``conv3d_only``: the rank's
    convolution ops in the trace are all 3-D (``aten::conv3d``), whose
    channels-last format is ``torch.channels_last_3d``.
    """

    compute_major: Optional[int] = None
    amd_matrix_cores: Optional[bool] = None
    eligible_us_per_step: float = 0.0
    tensor_core_us_per_step: float = 0.0
    tensor_core_pct: float = 0.0
    compute_minor: Optional[int] = None
    matrix_dtypes: List[str] = field(default_factory=list)
    low_precision_us_per_step: float = 0.0
    eligible_ops_kernel_pct: float = 0.0
    top_non_tensor_core: List[NamedTime] = field(default_factory=list)
    shapes_recorded: bool = False
    #: ``compute_major``/``compute_minor`` were read off the kernels' names (cuBLAS's ``ampere_``,
    #: ``sm90_``... prefixes: the oldest architecture the device can be), the trace having no
    #: ``deviceProperties`` (PyTorch 1.8-1.10 traces): a floor, not the device.
    capability_from_kernels: bool = False
    half_gemm_ops_per_step: float = 0.0
    misaligned_ops_per_step: float = 0.0
    misaligned_us_per_step: float = 0.0
    misaligned_examples: List[str] = field(default_factory=list)
    misaligned_bound_us_per_step: float = 0.0
    tf32_us_per_step: float = 0.0
    top_tf32: List[NamedTime] = field(default_factory=list)
    layout_conversion_us_per_step: float = 0.0
    layout_conversions_per_step: float = 0.0
    top_layout_conversion: List[NamedTime] = field(default_factory=list)
    conv3d_only: bool = False


@dataclass(slots=True)
class ElementwiseWork:
    """Eager elementwise kernels of one rank and the chains fusion could merge.

    Elementwise kernels are PyTorch's own memory-bound kernels, by name
    (:data:`hta_report.analysis.kernels.ELEMENTWISE_KERNEL`: pointwise ops,
    copies and casts, reductions, softmax, layer norm, dropout, ``cat``);
    already fused kernels (Inductor's ``triton_*``) and the optimizer's
    ``multi_tensor_apply`` are not counted (a CUDA graph's replay of eager
    kernels is counted: a graph removes launches, not memory traffic). A chain is a run
    of two or more of them back to back on one stream, no other kernel
    between, within one step. Each kernel of a chain reads its inputs from
    device memory and writes its output back; one fused kernel moves the
    chain's inputs and its last output once. For ``k`` binary ops on tensors of ``S`` bytes, each
    taking the previous result and one input of its own, eager moves ``3kS``
    and a fused kernel ``(k + 2)S``: ``fusible_us_per_step`` is each chain's
    time times ``(2k - 2) / 3k``, the bandwidth-bound saving of that case (a
    chain of unary ops saves more, up to ``(k - 1) / k``; an op that cannot
    fuse saves nothing).

    Times are µs per analyzed step: ``us_per_step`` all elementwise kernels,
    ``chained_us_per_step`` those in chains, ``fusible_us_per_step`` the bound;
    ``chains_per_step``, ``longest_chain`` (kernels); ``top`` the largest
    elementwise kernels by time (totals over the analyzed steps, µs)."""

    us_per_step: float = 0.0
    chained_us_per_step: float = 0.0
    fusible_us_per_step: float = 0.0
    chains_per_step: float = 0.0
    longest_chain: int = 0
    top: List[NamedTime] = field(default_factory=list)


@dataclass(slots=True)
class SmallKernel:
    """One compute kernel name whose launches leave SMs idle (``blocks per
    SM`` < 1), totals over the analyzed steps.

    ``blocks_per_sm`` and ``occupancy_pct`` are duration-weighted means of
    Kineto's ``blocks per SM`` and ``est. achieved occupancy %`` over its
    launches; ``idle_sm_us`` is Σ dur × (1 − blocks per SM): the SM time its
    launches left idle (µs); ``pct`` is its time as % of compute kernel time.
    """

    name: str
    count: int
    total_us: float
    blocks_per_sm: float
    occupancy_pct: float
    idle_sm_us: float
    pct: float


@dataclass(slots=True)
class OccupancySummary:
    """How well the kernels of a rank fill the GPU, from the args Kineto
    writes on every CUDA kernel (``blocks per SM``, ``warps per SM``,
    ``est. achieved occupancy %``; AMD traces have none).

    The TensorBoard profiler's two estimates, by its definitions
    (:mod:`hta_report.analysis.tensorboard`), over the analyzed steps and
    every kernel carrying the args:

    * ``sm_efficiency_pct``: ``min(blocks per SM, 1)`` per kernel, summed over
      overlapping kernels and capped at 1, weighted by time and divided by
      the whole analyzed time, idle included ("Est. SM Efficiency": a GPU
      idle half of the step is at most 50 %);
    * ``achieved_occupancy_pct``: ``est. achieved occupancy %`` weighted by
      kernel time ("Est. Achieved Occupancy").

    Over the compute kernels (HTA's COMPUTATION type: NCCL kernels use few
    blocks by design and are left out) that start inside the analyzed steps
    and carry the args, weighted by kernel duration ``d`` (µs):

    * ``small_grid_us_per_step``: time per step of kernels with blocks per
      SM < 1 (some SMs have no block at all); ``small_grid_pct`` is it as %
      of ``kernel_us_per_step`` (the compute kernels with the args);
    * ``idle_sm_us_per_step``: Σ a·(1 − blocks per SM) of those kernels per
      step, ``a`` each one's time with no kernel of another stream beside it
      (µs; concurrent kernels may hold the SMs it leaves): SM time they leave
      idle, the upper bound of what filling the SMs (larger batch, fused
      kernels) could save.

    ``kernels_with_data`` counts the compute kernels that carry the args;
    ``missing_reason`` says why nothing was measured (empty when measured).
    """

    kernels_with_data: int = 0
    kernel_us_per_step: float = 0.0
    sm_efficiency_pct: float = 0.0
    achieved_occupancy_pct: float = 0.0
    small_grid_us_per_step: float = 0.0
    small_grid_pct: float = 0.0
    idle_sm_us_per_step: float = 0.0
    top_small: List[SmallKernel] = field(default_factory=list)
    missing_reason: str = ""


@dataclass(slots=True)
class TensorBoardOverview:
    """The TensorBoard profiler plugin's overview figures of a rank, by its
    definitions and over its window (:mod:`hta_report.analysis.tensorboard`):
    from the first ``ProfilerStep`` of the analysis to the last, re-based to
    the device, the first (warm-up) step included as the plugin includes it.

    ``steps`` are the step numbers (empty without ``ProfilerStep``: nothing
    was computed), ``window_us`` their whole length and ``mean_step_us`` the
    plugin's "Average Step Time"; ``gpu_utilization_pct`` is the union of
    kernels over the window, ``sm_efficiency_pct`` and
    ``achieved_occupancy_pct`` as :class:`OccupancySummary` defines them, of
    ``kernels_with_data`` kernels carrying the args.
    """

    steps: List[int] = field(default_factory=list)
    window_us: float = 0.0
    mean_step_us: float = 0.0
    gpu_utilization_pct: float = 0.0
    sm_efficiency_pct: float = 0.0
    achieved_occupancy_pct: float = 0.0
    kernels_with_data: int = 0


@dataclass(slots=True)
class Integrity:
    """What a rank's trace shows of its own gaps (:mod:`hta_report.analysis.integrity`).

    Attributes:
        unrecorded_us: before the first recorded GPU operation, from its launch
            call's end to its start (µs, whole trace; 0 under 1 ms): the GPU
            ran work the trace lacks.
        unrecorded_before_trace: that operation was launched before the trace
            began (no launch call in it): ``unrecorded_us`` runs from the
            trace's first host event.
        graph_launches: CUDA/HIP graph launch calls (``cudaGraphLaunch``...).
        graph_launches_without_ops: of them, those with no GPU operation in
            the trace (replays the profiler dropped).
        unlinked_ops, unlinked_us: GPU operations (and their time, µs) whose
            correlation id matches no runtime call, in a trace with runtime calls.
        left_out_ops, left_out_us: GPU operations of the file (and their
            time, µs) whose correlation id matches no host event, which HTA's
            step filter therefore left out of every figure (it keeps GPU work
            through its launch); counted before the filter.
        sync_rows: ``cuda_sync`` (Stream Sync) events.
        clock_jumps: times the trace's clock goes back on one host thread
            or GPU stream, or a GPU operation starts before its launch call
            (by more than :data:`hta_report.analysis.integrity.CLOCK_JUMP_MIN_US`).
        clock_jump_us: the largest of those steps back (µs).
        clock_where: where the largest one is (``GPU 0 stream 7``...).
        silences, silence_us: stretches of over 10 s with nothing recorded on
            any host thread or GPU stream (a clock step forward, or a stopped
            process; :data:`hta_report.analysis.integrity.SILENCE_MIN_US`),
            and the longest (µs).
        workload_missing: why the trace holds none of the workload (no
            operator event and next to no GPU work:
            :func:`hta_report.analysis.integrity.workload_missing`), in
            words; empty when it holds some.
        device_unrecorded: why a rank with no GPU record and no runtime call
            ran on a device (ops only a GPU backend runs, ``[memory]`` events of
            a device, a backward on a device's own thread:
            :func:`hta_report.analysis.integrity.device_unrecorded`), in words;
            empty where nothing shows it. Its GPU side was not recorded: it is
            no CPU run.
        host_unrecorded: what a rank holds whose host side was not recorded
            (GPU operations and runtime calls, no operator or annotation: profiled
            without ``ProfilerActivity.CPU``;
            :func:`hta_report.analysis.integrity.host_unrecorded`), in words;
            empty where it has either. Its GPU figures stand; the
            rules that read the host's ops leave the rank out.
        launches, launches_without_ops: kernel and asynchronous copy launch
            calls that carry a correlation id, and those with no GPU operation in
            the trace (records the profiler lost: pytorch#192021 logs such
            drops at INFO only). Where every launch lost its record the rank
            has no GPU events at all: its GPU side is missing.
        lost_work_us: the most GPU work (µs) the launches without a GPU
            operation can hide: their count times the longest GPU operation
            the rank recorded (0 without such launches, or without GPU
            operations).
        lost_tail: every launch without a GPU operation came after the last
            launch with one: the profiler stopped before the GPU ran the work
            queued last (:func:`hta_report.analysis.integrity.lost_tail`).
        tail_from_us, tail_unrecorded_us: after a lost tail of more than the
            tolerated share of launches but at most half of them, where the
            stretch whose GPU idle the trace does not know starts (µs, the
            rank's timeline: the first lost launch call) and its length to the
            rank's last event (µs): its idle is counted as not recorded
            (:func:`hta_report.analysis.integrity.unrecorded_tail`), and the
            record before it stands (not :attr:`idle_unreliable`): the rules
            judge it. 0 otherwise.
        idle_unreliable: the rank's GPU idle time is not known (graph
            replays dropped, the clock jumps back, launches lost their GPU
            records other than as a lost tail, or the GPU side was not
            recorded at all): no rule claims it.
        notes: one line per finding above, shown beside the GPU figures.
    """

    unrecorded_us: float = 0.0
    unrecorded_before_trace: bool = False
    graph_launches: int = 0
    graph_launches_without_ops: int = 0
    launches: int = 0
    launches_without_ops: int = 0
    lost_work_us: float = 0.0
    lost_tail: bool = False
    tail_from_us: float = 0.0
    tail_unrecorded_us: float = 0.0
    unlinked_ops: int = 0
    unlinked_us: float = 0.0
    left_out_ops: int = 0
    left_out_us: float = 0.0
    sync_rows: int = 0
    clock_jumps: int = 0
    clock_jump_us: float = 0.0
    clock_where: str = ""
    silences: int = 0
    silence_us: float = 0.0
    workload_missing: str = ""
    device_unrecorded: str = ""
    host_unrecorded: str = ""
    idle_unreliable: bool = False
    notes: List[str] = field(default_factory=list)

    @property
    def records_lost(self) -> bool:
        """Whether the rank's launches lost their GPU records past the share the
        integrity check tolerates, or its GPU side was not recorded at all
        (:attr:`device_unrecorded`): its idle time is not known for that reason."""
        return self.idle_unreliable and not self.clock_jumps and not self.graph_launches_without_ops \
            and (self.launches_without_ops > 0 or bool(self.device_unrecorded))

    def unreliable_reason(self) -> str:
        """Why the rank's GPU idle time is not known (:attr:`idle_unreliable`),
        in a few words for the checks that leave the rank out; empty when it
        is known."""
        why = []
        if self.graph_launches_without_ops:
            why.append("the trace dropped graph replays")
        if self.launches_without_ops:
            why.append(f"{self.launches_without_ops:,} of {self.launches:,} launches have no GPU record")
        if self.left_out_ops:
            why.append(f"{self.left_out_ops:,} GPU operations have no usable correlation id")
        if self.workload_missing:
            why.append("the trace holds none of the workload")
        if self.device_unrecorded:
            why.append("the model ran on a device whose GPU side was not recorded")
        if self.silences:
            why.append(f"nothing is recorded for {self.silence_us / 1e6:,.1f} s")
        if self.clock_jumps:
            why.append(f"its clock jumps back {self.clock_jump_us / 1e3:,.2f} ms on {self.clock_where.split(' (')[0]}")
        return "; ".join(why) or ("not known" if self.idle_unreliable else "")


@dataclass(slots=True)
class MemoryPoint:
    """One point of a memory timeline: ``ts_us`` on the report's timeline
    (µs from the earliest event of the directory, as every other time) and
    the allocator's totals after an allocation or free (bytes)."""

    ts_us: float
    allocated_bytes: int
    reserved_bytes: int


@dataclass(slots=True)
class DeviceMemory:
    """Memory of one device of a rank, from the ``[memory]`` instant events
    that ``torch.profiler.profile(profile_memory=True)`` writes (``Total
    Allocated``, ``Total Reserved``: the caching allocator's totals after
    each allocation or free, bytes).

    ``device`` is ``cuda:0``, ``cpu``...; ``capacity_bytes`` is the device's
    ``deviceProperties[].totalGlobalMem`` (0 when the trace has none, e.g.
    the CPU); the ``_pct`` figures are of it (0 without it). ``timeline``
    holds at most a few hundred points (each the largest values of its
    stretch of time, so peaks survive) for the memory chart;
    ``step_starts_us`` marks the ``ProfilerStep`` starts on it.
    """

    device: str
    events: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    capacity_bytes: int = 0
    peak_allocated_pct: float = 0.0
    peak_reserved_pct: float = 0.0
    timeline: List[MemoryPoint] = field(default_factory=list)


@dataclass(slots=True)
class MemorySummary:
    """Memory use of a rank from its ``[memory]`` events.

    ``recorded`` is False when the trace has none (profile with
    ``profile_memory=True``, or ``hta-report collect --profile-memory``).
    ``device`` names the rank's main device: its GPU with the most events,
    else the CPU; ``peak_allocated_bytes``, ``peak_reserved_bytes``,
    ``capacity_bytes`` and the ``_pct`` figures are that device's (see
    :class:`DeviceMemory`). ``devices`` lists every device seen;
    ``step_starts_us`` the ``ProfilerStep`` starts (µs, for the chart).
    ``out_of_range`` counts the events whose values no device has (a total
    beyond 2**50 bytes or the device's capacity, NaN, a device id outside
    -1..127: :func:`hta_report.load.memory_events._event`): unknown, left
    out of every figure (``recorded`` with no ``devices`` when all were).
    """

    recorded: bool = False
    device: str = ""
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    capacity_bytes: int = 0
    peak_allocated_pct: float = 0.0
    peak_reserved_pct: float = 0.0
    devices: List[DeviceMemory] = field(default_factory=list)
    step_starts_us: List[float] = field(default_factory=list)
    out_of_range: int = 0


@dataclass(slots=True)
class StepBreakdown:
    """Where one ``ProfilerStep``'s time goes, as the TensorBoard profiler's
    overview splits it (µs; the parts add up to ``duration_us``). Each
    instant of the (device re-based) step goes to the first category active
    then, in TensorBoard's priority order: ``kernel`` (a kernel on any
    stream), ``memcpy``, ``memset``, ``runtime`` (a ``cuda_runtime`` call on
    the host), ``dataloader`` (inside ``enumerate(DataLoader)#...``),
    ``cpu_exec`` (a CPU op or annotation other than the step's own), ``other``.
    ``warmup`` marks the first step, which the statistics leave out."""

    number: int
    duration_us: float
    kernel_us: float = 0.0
    memcpy_us: float = 0.0
    memset_us: float = 0.0
    runtime_us: float = 0.0
    dataloader_us: float = 0.0
    cpu_exec_us: float = 0.0
    other_us: float = 0.0
    warmup: bool = False


@dataclass(slots=True)
class CodePatterns:
    """Code patterns found in a rank's host ops (``analysis/patterns.py``), per analyzed step.

    * C23: ``cpu_tensor_copies_per_step``: ``aten::to`` ops that copy to the
      GPU a tensor just filled on the CPU (``aten::fill_``/``zero_``/
      ``normal_``/``uniform_``: PyTorch's ``ExtraCUDACopyPattern``);
      ``cpu_tensor_copy_us_per_step`` the GPU time of their HtoD copies
      (µs, their union); ``cpu_tensor_examples`` a few;
    * C25: ``conv_ops_per_step``: convolution ops (``aten::conv1d/2d/3d``);
      ``conv_bias_bn_per_step``: convolutions given a bias whose next op
      on the thread is ``aten::batch_norm``; ``shapes_recorded`` is True when
      convolutions carry ``Input Dims`` (``record_shapes=True``), which the
      check needs; ``conv_bias_examples`` a few;
    * C28: ``micro_steps_per_step``: ``DistributedDataParallel.forward`` calls
      (micro-steps); ``synced_micro_steps_per_step``: those followed by an
      all-reduce before the next; ``extra_sync_us_per_step``: all-reduce time
      of every synchronized micro-step but the last of each step (µs);
    * C30 and C5: ``loops_per_step``: Python loops over a tensor's elements
      (:mod:`hta_report.analysis.host_loops`), ``loop_us_per_step`` their
      host time (µs), ``loop_iterations`` their median indexing ops (a lower
      bound of the elements each visits), ``loop_reads_per_step`` the scalar
      reads (``.item()``) inside those that read per element
      (:func:`hta_report.analysis.host_loops.reading`), ``read_loop_us_per_step``
      those loops' host time (µs), ``loop_arithmetic_us_per_step`` the
      arithmetic of their ops (µs, :func:`hta_report.analysis.host_ops.arithmetic_us`);
    * C31: ``backward``: whether the rank runs a backward pass (training);
      ``dropout_per_step``: dropout ops that draw a mask (a model in training
      mode), ``dropout_us_per_step`` their host time (µs);
      ``bn_training_per_step``: GPU kernels of BatchNorm's forward in
      training mode (:data:`hta_report.analysis.host_ops.BN_TRAIN_KERNEL`),
      ``bn_training_us_per_step`` their GPU time (µs);
    * C32: ``slow_cpu_us_per_step``: host time (µs) in the CPU's reference
      kernels (``aten::_slow_conv2d_forward``...), ``slow_cpu_ops`` their names;
      ``slow_cpu_dtypes`` their first input's recorded ``Input type``
      values (``float``, ``double``, ``c10::BFloat16``; empty where not
      recorded), ``slow_cpu_batch`` the median batch size of their input
      (its first dimension; 1 for an unbatched ``[C, H, W]`` input; 0 where
      ``Input Dims`` were not recorded): what the fix depends on;
    * C33: ``cpu_kernel_ops``: ops that run only on the CPU (``aten::mkldnn_*``,
      ``aten::_slow_conv2d_*``, ``aten::thnn_*``) seen in the steps, by name;
      ``gpu_kernel_ops``: ops that run only on a GPU (``aten::cudnn_*``,
      ``aten::miopen_*``) seen; ``compute_us_per_step``: host time per step
      in ops outside the DataLoader, optimizer and zero_grad (µs).
    """

    cpu_tensor_copies_per_step: float = 0.0
    cpu_tensor_copy_us_per_step: float = 0.0
    cpu_tensor_examples: List[str] = field(default_factory=list)
    shapes_recorded: bool = False
    conv_ops_per_step: float = 0.0
    conv_bias_bn_per_step: float = 0.0
    conv_bias_examples: List[str] = field(default_factory=list)
    micro_steps_per_step: float = 0.0
    synced_micro_steps_per_step: float = 0.0
    extra_sync_us_per_step: float = 0.0
    loops_per_step: float = 0.0
    loop_us_per_step: float = 0.0
    loop_iterations: int = 0
    loop_reads_per_step: float = 0.0
    read_loop_us_per_step: float = 0.0
    loop_arithmetic_us_per_step: float = 0.0
    backward: bool = False
    dropout_per_step: float = 0.0
    dropout_us_per_step: float = 0.0
    bn_training_per_step: float = 0.0
    bn_training_us_per_step: float = 0.0
    slow_cpu_us_per_step: float = 0.0
    slow_cpu_ops: List[str] = field(default_factory=list)
    slow_cpu_dtypes: List[str] = field(default_factory=list)
    slow_cpu_batch: int = 0
    cpu_kernel_ops: List[str] = field(default_factory=list)
    gpu_kernel_ops: int = 0
    compute_us_per_step: float = 0.0


#: Names of per-rank analysis steps (``analysis/rank.py``) that reporters,
#: gates and comparisons ask about when a step failed (:attr:`RankResult.failures`).
TEMPORAL_STEP = "temporal breakdown (HTA)"
IDLE_STEP = "idle time breakdown (HTA)"
#: How the reason of a replaced HTA analysis that hta-report did not run at
#: all begins (:attr:`RankResult.replaced` lists it with those that failed:
#: e.g. a rank with more streams than HTA's per-stream pass is run on).
NOT_RUN = "not run"
KERNEL_TYPES_STEP = "kernel breakdown (HTA)"
STEP_TIMES_STEP = "step times"
CPU_SIDE_STEP = "CPU side"
MEMCPY_STEP = "memcpy summary"
COMMUNICATION_STEP = "communication"
OCCUPANCY_STEP = "SM occupancy"
MEMORY_STEP = "memory"
STEP_BREAKDOWN_STEP = "step breakdown"
PATTERNS_STEP = "code patterns"
WINDOWS_STEP = "step windows and optimizer"
ATTRIBUTION_STEP = "idle attribution"
SPAN_STEP = "GPU time span"
LAUNCH_STEP = "launch metrics"
COMM_OVERLAP_STEP = "communication overlap (HTA)"
TENSOR_CORES_STEP = "Tensor Core use"
TENSORBOARD_STEP = "TensorBoard overview"
INTEGRITY_STEP = "trace integrity"
WORKLOAD_STEP = "workload kind"
REPLAY_STEP = "replay"

#: A GPU operation that starts this long (µs) or more after its launch call
#: returned, on a GPU idle since before that launch, waited on something
#: outside the process: a launch on an idle GPU starts within tens of µs
#: (NVIDIA's launch latency is 5-20 µs; proposal: 1 ms, 50x or more). Another
#: process or the display time-slicing the GPU, or a driver that holds
#: submissions back (Windows WDDM batching), is what the trace cannot show.
LATE_START_US = 1000.0

#: The categories of :class:`IdleAttribution`, in the order it hands idle time out.
IDLE_CAUSES = ("unrecorded", "warmup", "edge", "stream_wait", "dataloader", "pageable_copy", "blocking_copy", "sync",
               "zero_grad", "optimizer", "launch", "host_ops", "unattributed")
#: Idle causes no finding may claim: time the trace shows the GPU was not idle in,
#: and the host-only edges of a window without steps.
UNCLAIMABLE_CAUSES = ("unrecorded", "edge")
#: How the reports name each of :data:`IDLE_CAUSES`.
IDLE_CAUSE_LABELS = {"unrecorded": "not recorded by the trace", "warmup": "warm-up",
                     "edge": "window edge (host only)", "stream_wait": "queued work waiting", "dataloader": "DataLoader",
                     "pageable_copy": "pageable copies", "blocking_copy": "blocking copies",
                     "sync": "synchronization", "zero_grad": "zero_grad", "optimizer": "optimizer step",
                     "launch": "between launches", "host_ops": "host ops",
                     "unattributed": "no profiled host activity"}


@dataclass(slots=True)
class CodeTime:
    """Time of one attributed cause spent under one chain of the user's
    frames (``with_stack=True`` traces; see :mod:`hta_report.analysis.code`).

    Attributes:
        category: the cause: ``dataloader`` (inside ``enumerate(DataLoader)#``
            annotations), ``sync`` (the host blocked on the device: ``aten::item``,
            ``cudaStreamSynchronize``...), ``pageable_copy`` (``cudaMemcpyAsync`` of
            pageable memory), ``optimizer`` (inside ``Optimizer.step#`` annotations).
        frames: the innermost frames outside torch, the standard library and
            site-packages (:func:`hta_report.frames.is_user_frame`),
            innermost first, at most :data:`~hta_report.analysis.code.CHAIN_DEPTH`,
            as the trace's ``python_function`` events name them:
            ``"train.py(7): __getitem__"`` (file as the profiler trimmed it,
            line, function). Empty: the time ran under no such frame.
        callees: for each frame, the ``python_function`` it called on the way
            to the time (``"<built-in method item of Tensor object>"``,
            ``"torch/utils/data/dataloader.py(720): __next__"``); empty string
            when the time is in the frame itself.
        entered: for each frame, True when it was entered inside the trace
            (its line is the function's first line), False when it was
            already running when tracing started (its line is the one it was
            executing then).
        time_us: µs per analyzed step.
    """

    category: str
    frames: List[str] = field(default_factory=list)
    callees: List[str] = field(default_factory=list)
    entered: List[bool] = field(default_factory=list)
    time_us: float = 0.0


@dataclass(slots=True)
class CodeAttribution:
    """One rank's time by the user's code and GPU time by operator and module.

    Attributes:
        has_stacks: the trace holds ``python_function`` events (recorded
            with ``with_stack=True``); without them ``times`` is empty and the
            report says what ``--with-stack`` would add.
        times: per cause, time under each chain of user frames, largest
            first (a chain with no frame: time under none).
        gpu_by_op: GPU time (kernels, memcpy, memset starting in the
            analyzed steps; µs per step in ``total_us``, GPU events over
            those steps in ``count``) by the outermost CPU op
            (``aten::linear``...) around the runtime call that launched it,
            joined by ``correlation``: the TensorBoard profiler's operator view.
        gpu_by_module: the same by innermost ``nn.Module: Name_i``
            ``python_function`` event around the launch (``with_stack`` traces).
    """

    has_stacks: bool = False
    times: List[CodeTime] = field(default_factory=list)
    gpu_by_op: List[NamedTime] = field(default_factory=list)
    gpu_by_module: List[NamedTime] = field(default_factory=list)


@dataclass(slots=True)
class SourceLocation:
    """One line of the user's code a finding points at.

    Attributes:
        path: the file: relative to the source root (the git work tree that
            holds it, or ``--source-root``) with ``/`` separators when found
            there, else as the trace names it.
        line: 1-based line.
        function: the function holding the line.
        how: ``call`` (the line of the call that spent the time, found in
            the source), ``def`` (the function's first line: the time is spent
            inside it), ``frame`` (the line the function was executing when
            tracing started: the source could not be read to find the call).
        time_us: µs per step attributed to this line on the rank where it is largest.
        share_pct: that time as % of the finding's attributed time on that rank.
        excerpt: source lines around ``line`` as read at analyze time (empty
            when the file was not readable), the first being ``excerpt_start``.
        excerpt_start: line number of ``excerpt[0]``.
        found: True when the file was found on disk at analyze time.
        url: the line on GitHub (``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY``
            at ``GITHUB_SHA``, read at analyze time) when those are set and
            the file lies in the source root; else empty.
        calls: how many lines of the function make the call that spent
            ``time_us`` (the trace does not say which of them did); each is
            listed with the whole time. 1 when the line is unambiguous.
    """

    path: str
    line: int
    function: str = ""
    how: str = "def"
    time_us: float = 0.0
    share_pct: float = 0.0
    excerpt: List[str] = field(default_factory=list)
    excerpt_start: int = 0
    found: bool = False
    calls: int = 1
    url: str = ""


@dataclass(slots=True)
class ReplayOp:
    """One entry of a rank's critical path (:attr:`Replay.critical_path`):
    ``name`` (a GPU operation, a runtime call, the innermost CPU op holding
    host work, ``launch latency``, ``GPU queue``, a DataLoader annotation),
    ``kind`` (``cpu`` or ``gpu``) and ``us``, its time on the path per
    analyzed step (µs)."""

    name: str = ""
    kind: str = ""
    us: float = 0.0


#: The :attr:`WhatIf.edit` of the what-if that replays at once every edit of
#: :data:`hta_report.analysis.replay.edits.EDITS` that changes the rank's graph
#: (:attr:`Replay.whatifs`): what the fixes buy together, without adding up
#: gains that share time (and with what two constraints on the same step
#: hide from each edit alone).
ALL_EDITS = "every edit together"


#: The least share of the step (%) a what-if must save for its edit to count
#: as changing the rank: the replay combines only those, and ``together``
#: names only those (a saving below it is the replay's rounding).
WHATIF_MIN_SAVING_PCT = 0.1


def saves(w: "WhatIf") -> bool:
    """Whether the what-if ``w`` saves at least :data:`WHATIF_MIN_SAVING_PCT` of its step."""
    return w.step_us_before > 0 and w.step_us_before - w.step_us_after >= \
        w.step_us_before * WHATIF_MIN_SAVING_PCT / 100


def combined_edit(labels: Iterable[str]) -> str:
    """The :attr:`WhatIf.edit` of the what-if that replays the edits
    ``labels`` together: one label as it is, several sorted and joined with
    ``" + "`` (``"DataLoader hidden + no host-device sync"``)."""
    return " + ".join(sorted(set(labels)))


@dataclass(slots=True)
class WhatIf:
    """A replayed edit of a rank's execution graph (:attr:`Replay.whatifs`,
    :attr:`Finding.whatif`): ``edit`` names it (``DataLoader hidden``, ``no
    host-device sync``..., see :data:`hta_report.analysis.replay.edits.EDITS`;
    :data:`ALL_EDITS` is every edit that changes the rank, at once) and
    ``description`` spells it out; the mean analyzed step of rank ``rank`` is
    ``step_us_before`` as measured and ``step_us_after`` as replayed with the
    edit (µs): a prediction that a trace recorded after the fix checks.
    ``step_us_low`` and ``step_us_high`` are its 80 % interval (µs): the
    predictions at the ends of the edit's uncertain parameters, widened by the
    trace's own step-to-step variation and the edit's measured error on
    recorded fix pairs (:func:`hta_report.analysis.replay.whatif.interval`); where
    ``step_us_high`` reaches ``step_us_before``, no measurable gain is expected.
    ``applies``: whether the edit changed anything on this rank (false: the
    rank has nothing the edit touches, such as no gradient collective, or a
    device whose Tensor-Core speedup the table does not know; a finding then
    keeps its bound, :func:`hta_report.rules.base.predicted`).
    ``slowest_of``: 0 for one rank's own figures; N > 0 where the figures
    are a job's whose N ranks wait for each other at collectives
    (:func:`hta_report.rules.base.job_whatif`): ``step_us_before`` the
    largest measured step, the others that less what the largest own time
    (step less wait at the collectives) saves with the edit, ``rank`` the
    rank whose own time is the largest after it."""

    edit: str = ""
    step_us_before: float = 0.0
    step_us_after: float = 0.0
    description: str = ""
    rank: int = 0
    applies: bool = True
    step_us_low: float = 0.0
    step_us_high: float = 0.0
    slowest_of: int = 0

    @property
    def measurable(self) -> bool:
        """Whether the gain clears the noise: the 80 % interval's slow end
        (``step_us_high``) is below the step as measured."""
        return self.step_us_high < self.step_us_before

    @property
    def plausible(self) -> bool:
        """Whether the figures can be a replay's: every step time (µs)
        finite, the step as measured and the predicted one above 0 (a replay
        never predicts a step of 0 µs or less), the interval's ends not
        negative. A saved
        result edited or corrupted to hold other figures has its prediction
        shown as "not available" (:func:`hta_report.render.view.prediction`)."""
        times = (self.step_us_before, self.step_us_after, self.step_us_low, self.step_us_high)
        if not all(isinstance(t, (int, float)) and math.isfinite(t) for t in times):
            return False
        return self.step_us_before > 0 and self.step_us_after > 0 and self.step_us_low >= 0 and self.step_us_high >= 0


@dataclass(slots=True)
class ReplayNote:
    """One thing a rank's replay says about itself (:attr:`Replay.notes`):
    ``code`` (a :class:`hta_report.replay_terms.NoteCode`: why the rank was
    not replayed, what the replay leaves out, why no what-if was made) and
    the figures the note quotes (``values``, by the keys its code lists: µs,
    %, counts). The words are the render layer's
    (:mod:`hta_report.render.replay_notes`)."""

    code: str = ""
    values: Dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Replay:
    """The replay of a rank's execution graph (:mod:`hta_report.analysis.replay`, issue 30).

    Attributes:
        measured_step_us, replayed_step_us: mean analyzed step as measured and
            as the replay of the unmodified graph gives it (µs); without
            ``ProfilerStep`` annotations the whole window is one step.
        error_pct: ``|replayed - measured| / measured`` (%): the fidelity check.
        steps: analyzed steps replayed (0: not replayed, ``notes`` say why).
        critical_path: the :data:`~hta_report.analysis.replay.run.TOP_PATH_OPS`
            entries with the most time on the steps' critical paths.
        host_share_pct: share of the critical path on the host (%).
        whatifs: the edits replayed.
        notes: what was not modelled on this rank, or why it was not
            replayed or got no what-if, as codes with their figures
            (:class:`ReplayNote`, in the order the report says them).
        note: the same in words, as results of schema 3 before ``notes``
            saved it; the replay no longer fills it (the report words
            ``notes``, and shows ``note`` where a saved result has no notes).
        gpu_paced_step_us: where the host ran ahead of the GPU (the GPU
            finished each step's work later than the one before, by more than
            :data:`~hta_report.analysis.replay.run.HOST_AHEAD_PCT` of the step),
            the time per analyzed step counting the GPU work the steps leave
            behind and not the work queued before them (µs; the basis the
            what-ifs start from): the step the run's throughput sees, where
            ``ProfilerStep`` measures the host's enqueueing alone. 0 where the
            host did not run ahead.
    """

    measured_step_us: float = 0.0
    replayed_step_us: float = 0.0
    error_pct: float = 0.0
    steps: int = 0
    critical_path: List[ReplayOp] = field(default_factory=list)
    host_share_pct: float = 0.0
    whatifs: List[WhatIf] = field(default_factory=list)
    note: str = ""
    gpu_paced_step_us: float = 0.0
    notes: List[ReplayNote] = field(default_factory=list)


@dataclass(slots=True)
class SectionFailure:
    """One analysis step that failed on a rank whose other steps were
    reported: ``step`` names it (e.g. ``temporal breakdown (HTA)``) and
    ``reason`` says why, in one line (the exception, or the step it needed
    that failed). The fields that step fills keep their defaults and are
    shown as not computed."""

    step: str
    reason: str


@dataclass(slots=True)
class RankResult:
    """Everything measured on one rank (one trace file).

    ``has_gpu`` is False for traces with no kernel, memcpy or memset events;
    then the GPU sections (temporal, idle, kernels, memcpy, comm, launch) hold
    zeros and reporters say so instead of showing them.

    "Per step" figures average the analyzed steps: ``steps_used`` of them
    (warm-up excluded), each ``window_us`` long on average (µs). On ranks
    with GPU activity the steps are re-based to the device as the TensorBoard
    profiler does: a step ends when its host annotation and the GPU work
    launched in it have both ended (so ``window_us`` can exceed the
    ``ProfilerStep`` mean when the host runs ahead). Without ``ProfilerStep``
    annotations the whole trace is one window (``steps_used`` 1). ``has_runtime`` is True when the trace holds
    ``cuda_runtime`` (or HIP runtime) calls.

    ``failures`` lists the analysis steps that failed on this rank (e.g. an
    assertion inside one of HTA's analyses): everything else is reported,
    and the fields of a failed step keep their defaults (:meth:`failed`
    tells which); empty when the whole rank was analyzed. ``replaced``
    lists HTA's analyses that failed but whose figures hta-report computed
    itself from the exact times (the rank stays complete; the reason says
    what HTA raised).

    ``gpu_span_us`` runs from the first GPU event (kernel, memcpy, memset)
    of the rank's file to the end of the last, all of them (before HTA's
    step filter), on the exact times; ``gpu_span_busy_pct`` is the union of
    those events as % of it: TraceLens's ``gpu_timeline`` busy time.

    ``time_origin_us`` is the trace clock (the files' own ``ts``, µs) at 0
    of the aligned timeline every ``*start_us``/``ts_us`` of the result is
    on: HTA's ``min_ts`` of the directory, so ``ts_us + time_origin_us`` is
    an event's ``ts`` in its file (within 1 µs on traces with fractional-µs
    times); 0 in results of hta-report before it was recorded.
    """

    rank: int
    file: str
    device_names: List[str] = field(default_factory=list)
    has_gpu: bool = False
    gpu_span_us: float = 0.0
    gpu_span_busy_pct: float = 0.0
    steps: StepStats = field(default_factory=StepStats)
    temporal: TemporalBreakdown = field(default_factory=TemporalBreakdown)
    idle: IdleBreakdown = field(default_factory=IdleBreakdown)
    kernel_types: List[KernelTypeShare] = field(default_factory=list)
    top_kernels: List[KernelStat] = field(default_factory=list)
    kernel_count: int = 0
    memcpy: MemcpySummary = field(default_factory=MemcpySummary)
    comm: CommSummary = field(default_factory=CommSummary)
    launch: LaunchSummary = field(default_factory=LaunchSummary)
    cpu: CpuSide = field(default_factory=CpuSide)
    window_us: float = 0.0
    steps_used: int = 0
    has_runtime: bool = False
    idle_attribution: IdleAttribution = field(default_factory=IdleAttribution)
    optimizer: OptimizerProfile = field(default_factory=OptimizerProfile)
    tensor_cores: TensorCoreUse = field(default_factory=TensorCoreUse)
    elementwise: ElementwiseWork = field(default_factory=ElementwiseWork)
    warmup: Warmup = field(default_factory=Warmup)
    iterations: Iterations = field(default_factory=Iterations)
    workload: Workload = field(default_factory=Workload)
    occupancy: OccupancySummary = field(default_factory=OccupancySummary)
    memory: MemorySummary = field(default_factory=MemorySummary)
    step_breakdown: List[StepBreakdown] = field(default_factory=list)
    patterns: CodePatterns = field(default_factory=CodePatterns)
    failures: List[SectionFailure] = field(default_factory=list)
    code: CodeAttribution = field(default_factory=CodeAttribution)
    replaced: List[SectionFailure] = field(default_factory=list)
    tensorboard: TensorBoardOverview = field(default_factory=TensorBoardOverview)
    integrity: Integrity = field(default_factory=Integrity)
    replay: Replay = field(default_factory=Replay)
    time_origin_us: float = 0.0
    samples: InstanceSamples = field(default_factory=InstanceSamples)

    def failed(self, *steps: str) -> bool:
        """Whether any of ``steps`` (names such as :data:`TEMPORAL_STEP`) failed on this rank."""
        return any(f.step in steps for f in self.failures)

    @property
    def step_us(self) -> float:
        """The analyzed step's duration (µs): what a share "of the step"
        divides a per-step figure by. The mean re-based window
        (``window_us``, longer than the ``ProfilerStep`` mean where the host
        ran ahead of the GPU), but never shorter than the mean
        ``ProfilerStep`` of the same steps (``steps.mean_us``): a GPU still
        running work queued before the first analyzed step starts that
        step's window late, and the windows then cover only part of the
        steps (issue 56, item 20: a 3.90 ms window of a 9.08 ms step).
        ``window_us`` without ``ProfilerStep`` annotations."""
        return max(self.window_us, self.steps.mean_us) if self.steps.count else self.window_us

    @property
    def busy_pct(self) -> float:
        """GPU busy (a kernel, memcpy or memset running on any stream) as % of
        the analyzed window (the steps, else the traced window), from the
        exact times: the headline's figure, over the window the findings use."""
        a = self.idle_attribution
        return 100 * a.busy_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def idle_pct(self) -> float:
        """GPU idle as % of the analyzed window: ``100 - busy_pct`` (0 without a window)."""
        return 100 - self.busy_pct if self.window_us > 0 else 0.0

    @property
    def kernel_busy_pct(self) -> float:
        """A kernel running on any stream, as % of the analyzed window: the
        TensorBoard profiler's "GPU Utilization" (kernels only)."""
        a = self.idle_attribution
        return 100 * a.kernel_busy_us / self.window_us if self.window_us > 0 else 0.0

    @property
    def exposed_comm_window_pct(self) -> float:
        """Communication kernel time with no compute kernel running, as % of the analyzed window."""
        return 100 * self.comm.exposed_us_per_step / self.window_us if self.window_us > 0 else 0.0

    @property
    def comm_wait_window_pct(self) -> float:
        """The part of the exposed communication that waits for other ranks,
        as % of the analyzed window: the larger of the rank's wait across
        ranks (``CommSummary.sync_wait_us_per_step``, on communication
        kernels) and its stalled collectives' wait
        (``CommSummary.stall_us_per_step``), at most the exposed
        communication; 0 on ranks without communication kernels."""
        if self.window_us <= 0 or self.comm.collective_basis != "kernels":
            return 0.0
        wait = min(max(self.comm.sync_wait_us_per_step, self.comm.stall_us_per_step), self.comm.exposed_us_per_step)
        return 100 * max(0.0, wait) / self.window_us

    @property
    def exposed_copy_window_pct(self) -> float:
        """Copy time with no kernel running (the pageable, blocking and other
        copies of :class:`MemcpySummary`), as % of the analyzed window."""
        m = self.memcpy
        us = m.pageable_exposed_us_per_step + m.blocking_exposed_us_per_step + m.other_exposed_us_per_step
        return 100 * us / self.window_us if self.window_us > 0 else 0.0

    @property
    def hta_busy_pct(self) -> float:
        """GPU busy (compute and non-compute) as % of HTA's GPU span, from HTA's
        temporal breakdown on its whole-µs times (see :class:`TemporalBreakdown`)."""
        return self.temporal.compute_pct + self.temporal.non_compute_pct

    @property
    def idle_split(self) -> "IdleSplit":
        """The rank's GPU idle time by cause as % of its GPU span: HTA's idle
        percentage split by the GPU-level cause shares of :class:`IdleBreakdown`
        (the one place this is computed; reports, comparisons and the
        aggregate read it)."""
        t, i = self.temporal, self.idle
        return IdleSplit(host_wait_pct=t.idle_pct * i.host_wait_pct / 100,
                         kernel_wait_pct=t.idle_pct * i.kernel_wait_pct / 100,
                         other_pct=t.idle_pct * i.other_pct / 100)


@dataclass(frozen=True, slots=True)
class IdleSplit:
    """GPU idle time by cause (HTA's idle breakdown), each as % of GPU time;
    the three add up to the idle %. Derived from the model, not saved."""

    host_wait_pct: float
    kernel_wait_pct: float
    other_pct: float


@dataclass(slots=True)
class Aggregate:
    """Metrics aggregated over ranks: means over ranks that have GPU activity
    (GPU metrics) or over all ranks (step and CPU metrics).

    One window for the headline and the findings: ``busy_pct`` (a kernel,
    memcpy or memset running), ``idle_pct`` (100 − busy), ``kernel_busy_pct``
    (kernels only: the TensorBoard profiler's GPU utilization),
    ``idle_by_cause`` (the :class:`IdleAttribution` categories, adding up to
    ``idle_pct``), ``exposed_comm_pct`` and ``exposed_memcpy_pct`` are % of
    each rank's analyzed window (its steps, else the traced window), from
    the exact times; ``comm_wait_pct`` is the part of ``exposed_comm_pct``
    that waits for other ranks (:attr:`RankResult.comm_wait_window_pct`: a
    communication kernel spins until its peers arrive, which counts as a
    kernel running in ``busy_pct``, HTA's definition, but transfers nothing).

    Over each rank's GPU span instead, and labelled so: ``span_busy_pct``
    (exact, :attr:`RankResult.gpu_span_busy_pct`), and HTA's own figures on
    its whole-µs times: ``hta_busy_pct``, ``compute_pct``,
    ``non_compute_pct`` (the temporal breakdown) and ``idle_host_wait_pct``,
    ``idle_kernel_wait_pct``, ``idle_other_pct`` (HTA's idle classes, of the
    span; they add up to HTA's idle %)."""

    ranks: int = 0
    gpu_ranks: int = 0
    busy_pct: float = 0.0
    idle_pct: float = 0.0
    compute_pct: float = 0.0
    non_compute_pct: float = 0.0
    idle_host_wait_pct: float = 0.0
    idle_kernel_wait_pct: float = 0.0
    idle_other_pct: float = 0.0
    mean_step_us: float = 0.0
    max_rank_step_us: float = 0.0
    dataloader_pct: float = 0.0
    exposed_comm_pct: float = 0.0
    comm_wait_pct: float = 0.0
    exposed_memcpy_pct: float = 0.0
    kernel_types: List[KernelTypeShare] = field(default_factory=list)
    kernel_busy_pct: float = 0.0
    span_busy_pct: float = 0.0
    hta_busy_pct: float = 0.0
    idle_by_cause: Dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class RankGain:
    """A finding's estimated gain on one rank: ``gain_us`` µs per step (per
    traced window without ``ProfilerStep``), ``gain_pct`` of that rank's step,
    and where that time comes from: ``sources`` maps the part of the step it
    is taken from (``idle:dataloader``, ``copy:pageable``, ``comm:exposed``,
    ``compute``, ``host``...; see :mod:`hta_report.rules.claims`) to µs per step."""

    rank: int
    gain_us: float
    gain_pct: float
    sources: Dict[str, float] = field(default_factory=dict)


#: Severities in order (``Finding.severity``): the higher, the more the fix is expected to save.
SEVERITY_RANK = {"low": 1, "medium": 2, "high": 3}
#: A finding whose fix is expected to save less than this (% of the step) is not in the report's
#: headline list ("below 1 % of the step or without a gain"), and ranks after the window finding.
LISTED_MIN_GAIN_PCT = 1.0


@dataclass(slots=True)
class Finding:
    """One piece of advice with the numbers that triggered it.

    Attributes:
        id: stable kebab-case identifier, e.g. ``dataloader-bound``.
        title: one line naming the bottleneck and the fix.
        severity: ``high``, ``medium`` or ``low`` (see ``gain_pct``).
        evidence: the figures (with units) that triggered the finding.
        fix: concrete code or configuration to try.
        doc_url: documentation for the fix.
        ranks: ranks where it fired.
        share_pct: % of the step at stake, equal to ``gain_pct``.
        threshold: the trigger, in words, with its source ("proposal" when
            no published source exists).
        gain_ms_per_step: the time per step the fix saves (ms), on the worst
            rank: the replay's prediction (``whatif``) where there is one,
            else an upper bound: the time the cause takes, if it were removed.
        gain_pct: the same as % of that rank's step. The severity (high >=
            20 %, medium >= 5 %) follows it
            (:func:`hta_report.rules.base.expected_pct`), and findings are
            sorted by severity, then by it.
        bound_ms_per_step, bound_pct: the time the rule measured the cause
            to take on that rank (ms per step, % of the step) before the
            prediction set the gain: the gain itself where there is no
            prediction.
        rule: the rule's number in the catalogue (e.g. ``C1``).
        rank_gains: the gain on every rank the finding claims time on. Each
            claim comes out of time no other finding claims (the engine's
            ledger, :mod:`hta_report.rules.claims`), so the gains of one
            rank's findings add up to at most its step.
        locations: the user's source lines that cause it, largest share
            first (``with_stack=True`` traces; see :mod:`hta_report.locate`).
        whatif: the step time the replay predicts after the fix, on the
            worst rank that was replayed (:mod:`hta_report.analysis.replay`),
            for a rule whose fix is an edit of the execution graph
            (``Rule.edit``); None where the rule has no edit or no rank of it
            was replayed: the gain is then only the upper bound above.
        events: the trace events that are its evidence, cited by rank,
            stream, correlation and ``ts_us`` (:class:`EventRef`; ``role``
            says what each is): at most :data:`MAX_EVIDENCE_EVENTS`, the
            largest first, from its ranks' recorded evidence of the causes
            its rule measures (``Rule.evidence``: the idle gaps of that
            cause, the host call each began in and its neighbouring GPU
            operations, :class:`CauseEvents`); empty for a rule that cites
            no events, and in results from before it was recorded.
    """

    id: str
    title: str
    severity: str
    evidence: List[str]
    fix: str
    doc_url: str
    ranks: List[int] = field(default_factory=list)
    share_pct: float = 0.0
    threshold: str = ""
    gain_ms_per_step: float = 0.0
    gain_pct: float = 0.0
    rule: str = ""
    rank_gains: List[RankGain] = field(default_factory=list)
    locations: List[SourceLocation] = field(default_factory=list)
    whatif: Optional[WhatIf] = None
    bound_ms_per_step: float = 0.0
    bound_pct: float = 0.0
    events: List[EventRef] = field(default_factory=list)


#: The hosts our rules' documentation links point at (``Finding.doc_url``;
#: a test checks every rule of the catalogue against :func:`is_doc_url`).
DOC_HOSTS = ("pytorch.org", "hta.readthedocs.io")
_DOC_URL = re.compile(r"https://(?:%s)/[A-Za-z0-9/._~%%#=?&+:,-]*" % "|".join(re.escape(h) for h in DOC_HOSTS))
#: A source line's link as :func:`hta_report.locate.github_url` builds it
#: (``https://server/owner/repo/blob/sha/path#L12``).
_SOURCE_URL = re.compile(r"https?://[A-Za-z0-9.:-]+/[A-Za-z0-9/._~%-]+#L[0-9]+")


def is_doc_url(url: object) -> bool:
    """Whether ``url`` is a link to the documentation our rules cite: https,
    on one of :data:`DOC_HOSTS`, no user info, quote, space or control
    character. A saved result or cache entry is edited by anyone: nothing
    else is ever made a link (``javascript:``, other hosts)."""
    return isinstance(url, str) and _DOC_URL.fullmatch(url) is not None


def is_source_url(url: object) -> bool:
    """Whether ``url`` has the shape of a source line's GitHub link (see :data:`_SOURCE_URL`)."""
    return isinstance(url, str) and _SOURCE_URL.fullmatch(url) is not None


#: The values of :attr:`RuleCheck.status`.
CHECK_STATUSES = ("fired", "fine", "covered", "not checked", "disabled")


@dataclass(slots=True)
class RuleCheck:
    """What one rule of the catalogue concluded on this result.

    ``status`` is ``fired`` (a finding), ``fine`` (checked, under the
    threshold), ``covered`` (its condition holds but the time it would claim
    is already claimed by another finding, named in ``detail``: no two
    findings count the same time), ``not checked`` (the traces lack the data
    it needs) or ``disabled`` (by configuration); ``detail`` says what was
    measured or what is missing.
    """

    id: str
    rule: str
    title: str
    status: str
    detail: str = ""


@dataclass(slots=True)
class TraceFileInfo:
    """One trace file as found on disk and how its rank was decided
    (``distributedInfo``, ``file name`` or ``sequential``).
    ``repaired_names`` counts event names that were not valid JSON (PyTorch
    left a double quote unescaped, pytorch/pytorch#146900) and were repaired
    while reading (:mod:`hta_report.load.repair`).
    ``shared_correlations`` counts events whose correlation id another event
    of their side (host or GPU) also had; they were linked in time order
    (:func:`hta_report.load.compat.distinct_correlations`).
    ``external_id_links`` counts GPU events written without stream and
    correlation (ROCm 6.x roctracer builds) that were linked to their launch
    calls by ``External id`` (:func:`hta_report.load.compat.link_by_external_id`).
    ``enclosing_steps`` counts ``ProfilerStep`` annotations that enclosed
    other steps and were left out (:func:`hta_report.load.compat.drop_enclosing_steps`).
    ``cuda_runtime_version`` and ``hip_runtime_version`` are the GPU runtime
    the profiler ran on, as Kineto writes it at the top of the trace (CUDA:
    major × 1000 + minor × 10, ``12040`` is 12.4; HIP: major × 10^7 +
    minor × 10^5 + patch, ``60443483`` is 6.4.43483); None when the trace
    does not say (older PyTorch, CPU-only traces).
    ``parser`` says which reader read the events: ``native`` (the compiled
    reader, :mod:`hta_report.load.fastnative`), ``python``
    (:mod:`hta_report.load.fastparse`: the native reader is not built, turned
    off by ``HTA_REPORT_PARSER=python``), ``native and python`` (the native
    reader handed the runs of events it does not read exactly, such as names
    to repair, to the Python reader), ``hta`` (HTA's own parser or the
    validating reader, for a file the fast readers do not reproduce); empty
    in results saved before it was recorded, and for a file read from the
    parse cache before then."""

    path: str
    rank: int
    rank_source: str
    size_bytes: int
    schema_version: Optional[int] = None
    host_name: Optional[str] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    repaired_names: int = 0
    cuda_runtime_version: Optional[int] = None
    hip_runtime_version: Optional[int] = None
    shared_correlations: int = 0
    enclosing_steps: int = 0
    parser: str = ""
    external_id_links: int = 0


@dataclass(slots=True)
class WorkerWindows:
    """Trace files written by one process, one per profiling cycle: windows of
    one rank, not ranks. ``torch.profiler.tensorboard_trace_handler`` names
    them ``<worker>.<ms>.pt.trace.json[.gz]`` (``<worker>`` is
    ``<host>_<pid>`` unless given) and ``hta-report collect``
    ``rank-<r>.<host>_<pid>.<cycle>.pt.trace.json.gz``; the number grows with
    each cycle. The report analyzes the latest (``analyzed``), unless it is
    a cycle cut short (under half the size of the largest window: then the
    latest full one); ``others`` are set aside, oldest first (name one of
    them to analyze that window)."""

    worker: str
    analyzed: str
    others: List[str] = field(default_factory=list)


@dataclass(slots=True)
class UnreadableTrace:
    """A trace file left out of the analysis, and why (one line, e.g. ``truncated
    gzip: ...``, or ``analysis failed at idle time breakdown (HTA): ...``)."""

    path: str
    reason: str


@dataclass(slots=True)
class Inventory:
    """What was analyzed and with which tools.

    ``files`` are the traces the report covers; ``unreadable`` those that were
    found but could not be read or analyzed (the report covers the rest);
    ``windows`` the processes that wrote several profiling windows, of which
    the latest is analyzed (:class:`WorkerWindows`); ``source_root`` the
    ``--source-root`` the findings' lines were located under ("" when none
    was given: the git work tree of each file, or of the current directory),
    where SARIF anchors the findings that have no line.
    """

    input_dir: str
    files: List[TraceFileInfo] = field(default_factory=list)
    devices: List[str] = field(default_factory=list)
    pytorch_version: Optional[str] = None
    kineto_schema_versions: List[int] = field(default_factory=list)
    steps_found: int = 0
    last_step_included: bool = False
    hta_version: str = ""
    tool_version: str = ""
    analyzed_at: str = ""
    warnings: List[str] = field(default_factory=list)
    manifest: Dict[str, Any] = field(default_factory=dict)
    unreadable: List[UnreadableTrace] = field(default_factory=list)
    windows: List[WorkerWindows] = field(default_factory=list)
    source_root: str = ""


#: How a result and a comparison show themselves in Jupyter (``_repr_html_``):
#: ``"result"`` and ``"comparison"`` -> a function giving the HTML, set by
#: :mod:`hta_report.render` when it is imported (the model imports nothing of
#: ours; :mod:`hta_report.api`, which hands results out, imports the renderers).
HTML_DISPLAY: Dict[str, Callable[[Any], str]] = {}


@dataclass(slots=True)
class GateResult:
    """One ``--fail-on`` expression checked against a result or a comparison
    (:func:`hta_report.gates.evaluate`), kept so that every output can say which
    gate held and which tripped.

    Attributes:
        expression: the expression as given (``idle_pct>30``).
        metric: its metric (``idle_pct``; see ``hta-report analyze --help``).
        value: the metric's value in the metric's unit (%, percentage points,
            ms, a count); None when the metric is not measured.
        tripped: the gate fails the run (exit 2): the expression holds, or the
            metric is not measured or not finite (gates fail closed).
        not_measured: why the metric has no value; "" when it has one.
    """

    expression: str
    metric: str
    value: Optional[float]
    tripped: bool
    not_measured: str = ""


@dataclass(slots=True)
class AnalysisResult:
    """The whole analysis of one directory of traces."""

    inventory: Inventory
    ranks: List[RankResult] = field(default_factory=list)
    aggregate: Aggregate = field(default_factory=Aggregate)
    findings: List[Finding] = field(default_factory=list)
    checks: List[RuleCheck] = field(default_factory=list)
    gates: List[GateResult] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    #: The fixes of two or more findings with a replayed edit, replayed
    #: together on the rank where they save the most (``edit``: their edits,
    #: :func:`combined_edit`); None when fewer than two such findings share a
    #: rank. Their gains are not added up: this is what they buy together.
    together: Optional[WhatIf] = None

    def to_dict(self) -> Dict[str, Any]:
        """The model as plain JSON-compatible dicts and lists."""
        return dataclasses.asdict(self)

    def __repr__(self) -> str:
        return (f"<AnalysisResult {self.inventory.input_dir!r}: {len(self.ranks)} rank(s), "
                f"{len(self.findings)} finding(s), schema {self.schema_version}>")

    def _repr_html_(self) -> Optional[str]:
        """The HTML report, for Jupyter's rich display (see :data:`HTML_DISPLAY`)."""
        show = HTML_DISPLAY.get("result")
        return show(self) if show is not None else None

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The model as a JSON document (``schema_version`` first): the text
        ``json.dumps(to_dict(), indent=indent)`` gives, made of
        :meth:`json_parts`.

        Raises:
            ValueError: a figure is NaN or infinite (not JSON).
        """
        return "".join(self.json_parts(indent))

    def json_parts(self, indent: Optional[int] = 2) -> Iterator[str]:
        """:meth:`to_json`'s text in parts, made as they are asked for: the
        document around the ranks, then each rank's text (from one rank's
        plain-dict copy at a time). A writer that writes each part as it comes
        never holds the document: at 1,024 ranks of ``bench/scale.py`` it is
        65 MB of text, and the plain-dict copy of every rank at once plus the
        text took 200 MB beside the 83 MB result.

        Raises:
            ValueError: a figure is NaN or infinite (not JSON), raised when
                the part holding it is made.
        """
        data = dataclasses.asdict(dataclasses.replace(self, ranks=[]))
        data = {"schema_version": data.pop("schema_version"), **data}
        if not self.ranks:
            yield json.dumps(data, indent=indent, allow_nan=False)
            return
        token = f"ranks-{uuid.uuid4().hex}"  # stands for the array in the document's text
        data["ranks"] = token
        head, tail = json.dumps(data, indent=indent, allow_nan=False).split(f'"{token}"', 1)
        if indent is None:
            sep, first, last, newline = ", ", "[", "]", "\n"
        else:
            pad = (" " * indent if isinstance(indent, int) else str(indent)) * 2
            # the array's items sit two levels deep: inside the document, inside "ranks"
            sep, first, last, newline = ",\n" + pad, "[\n" + pad, "\n" + pad[:len(pad) // 2] + "]", "\n" + pad
        yield head + first
        for i, rank in enumerate(self.ranks):
            item = json.dumps(dataclasses.asdict(rank), indent=indent, allow_nan=False)
            # JSON text holds no raw newline inside a string: each one starts an indented line
            yield (sep if i else "") + (item if indent is None else item.replace("\n", newline))
        yield last + tail

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AnalysisResult":
        """Rebuild a result from :meth:`to_dict` output.

        Raises:
            ValueError: the document is not an hta-report result or its
                ``schema_version`` is not one of :data:`READABLE_SCHEMA_VERSIONS`
                (an older result is read with the defaults of the fields it
                lacks, and comes back as :data:`SCHEMA_VERSION`).
        """
        if not isinstance(data, dict) or "schema_version" not in data:
            raise ValueError("not an hta-report result (no schema_version)")
        version = data["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"result has schema_version {version!r}, this hta-report reads "
                             f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
        result: AnalysisResult = _build(cls, data)
        result.schema_version = SCHEMA_VERSION
        return result

    @classmethod
    def from_json(cls, text: str) -> "AnalysisResult":
        """Rebuild a result from :meth:`to_json` output (see :meth:`from_dict`)."""
        return cls.from_dict(json.loads(text))


@functools.lru_cache(maxsize=None)
def type_hints(tp: type) -> Dict[str, Any]:
    """``typing.get_type_hints(tp)`` for a dataclass of this module, computed
    once per class (it evaluates every annotation string each call)."""
    return typing.get_type_hints(tp)


def _build(tp: Any, value: Any) -> Any:
    """Recursively turn plain JSON values into instances of the annotated type."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = type_hints(tp)
        kwargs = {
            f.name: _build(hints[f.name], value[f.name])
            for f in dataclasses.fields(tp)
            if f.name in value
        }
        return tp(**kwargs)
    if origin in (list, List):
        (item_tp,) = typing.get_args(tp)
        return [_build(item_tp, v) for v in value]
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


# --- comparison of two analyses (``hta-report compare``) -----------------------


@dataclass(slots=True)
class MetricDelta:
    """One metric on both sides. ``delta`` = new − base in the metric's unit
    (``unit`` is ``ms``, ``%`` or ``pp`` for percentage points);
    ``delta_pct`` = delta / base × 100 (0 when base is 0)."""

    name: str
    unit: str
    base: float
    new: float
    delta: float
    delta_pct: float


@dataclass(slots=True)
class KernelVariant:
    """One full kernel name in a :class:`KernelDelta` of template variants,
    with its total time (µs, summed over ranks) on each side."""

    name: str
    base_us: float
    new_us: float


@dataclass(slots=True)
class KernelDelta:
    """A kernel's total time (µs, summed over ranks) on both sides.

    Template-argument variants of one kernel (names that differ only in
    values and scalar types, :func:`hta_report.names.family`, e.g.
    ``…_cta_per_row_1<float, float, float, 2ul>`` and ``<…, 5ul>``) are one
    delta: ``name`` is then the name they share (namespaces and template
    values dropped) and ``variants`` lists each full name with its own
    totals, largest change first. A kernel without variants has its full
    ``name`` and no ``variants``.
    """

    name: str
    kernel_type: str
    base_us: float
    new_us: float
    delta_us: float
    variants: List[KernelVariant] = field(default_factory=list)


@dataclass(slots=True)
class RankComparison:
    """Metrics of one rank present on both sides. ``new_rank`` differs from
    ``rank`` only when each side has a single rank and their numbers differ
    (e.g. rank 3 of one job against rank 1 of another): they are paired."""

    rank: int
    new_rank: int
    metrics: List[MetricDelta] = field(default_factory=list)


@dataclass(slots=True)
class SideInfo:
    """What one side of a comparison ran on, as its traces and ``manifest.json`` say.

    Attributes:
        label: the side's label (as :attr:`Comparison.base_label` or ``new_label``).
        gpu: whether any of its ranks has GPU activity.
        devices: the distinct device names: the GPUs of the traces'
            ``deviceProperties``, else those of ``manifest.json``
            (``device_names``: its GPUs, or its CPU for a CPU-only run);
            empty when neither says.
        devices_from: where ``devices`` come from: ``traces``,
            ``manifest.json``, or ``""`` (not recorded).
        world_size: the job's number of ranks: the traces'
            ``distributedInfo.world_size`` (the largest), else the manifest's
            ``world_size``; None when neither says.
        ranks: the ranks analyzed.
        torch_version: PyTorch's version (``manifest.json``'s
            ``torch_version``); None when not recorded.
        gpu_runtime: the GPU runtime, ``CUDA 12.4`` or ``HIP 6.4.43483``
            (the traces' ``cuda_runtime_version`` or ``hip_runtime_version``),
            else the build the PyTorch version names (``2.4.0+cu121``:
            ``CUDA 12.1``; ``+rocm6.2``: ``ROCm 6.2``); None when nothing says.
    """

    label: str
    gpu: bool = False
    devices: List[str] = field(default_factory=list)
    devices_from: str = ""
    world_size: Optional[int] = None
    ranks: List[int] = field(default_factory=list)
    torch_version: Optional[str] = None
    gpu_runtime: Optional[str] = None


@dataclass(slots=True)
class CpuOpDelta:
    """A host op's self time per analyzed step on both sides (µs): the mean
    over ranks of each rank's self time in the op per analyzed step (per
    traced window without ``ProfilerStep``), from the ops each rank lists
    (:attr:`CpuSide.top_ops`, its ops with the most self time: an op a rank
    does not list counts 0 there). ``delta_us`` = new − base (µs per step)."""

    name: str
    base_us: float
    new_us: float
    delta_us: float


@dataclass(slots=True)
class ItemChange:
    """One kernel or host op whose time changed between the sides
    (:mod:`hta_report.compare_stats`), pooled over the compared ranks.

    Attributes:
        kind, name, shape: as :class:`InstanceSample`.
        status: ``changed`` (the test found the durations differ, after the
            environment factor), ``appeared`` (instances on the new side
            only) or ``disappeared`` (on the base side only).
        base_us_per_step, new_us_per_step: the item's time per analyzed step
            on each side (µs: mean instance duration × instances per step;
            the new side's divided by the environment factor).
        us_per_step, us_per_step_low, us_per_step_high: the change of that
            time (new − base, µs per step) and its confidence interval
            (bootstrap percentile; equal to the change for an item on one
            side only).
        change_pct, change_pct_low, change_pct_high: the change of the
            mean instance duration (%), with its interval (0 for an item on
            one side only).
        p_value: the test's two-sided p-value; q_value: the same after the
            Benjamini-Hochberg adjustment over every item tested (1.0 for an
            item on one side only, which is not tested).
    """

    kind: str
    name: str
    shape: str = ""
    status: str = "changed"
    base_us_per_step: float = 0.0
    new_us_per_step: float = 0.0
    us_per_step: float = 0.0
    us_per_step_low: float = 0.0
    us_per_step_high: float = 0.0
    change_pct: float = 0.0
    change_pct_low: float = 0.0
    change_pct_high: float = 0.0
    p_value: float = 1.0
    q_value: float = 1.0


@dataclass(slots=True)
class StatTest:
    """How :attr:`Comparison.verdict` was tested (:mod:`hta_report.compare_stats`).

    Attributes:
        method: ``statistical`` (both sides carry instance samples,
            :class:`InstanceSamples`) or ``noise band`` (a side does not, as
            results saved before they existed: the verdict is the band's,
            :attr:`Comparison.noise_band_pct`); ``why`` says why the band.
        test: the per-item test: the Mann-Whitney U test of the instance
            durations and a z-test of the item's log ratio against the
            environment factor with the items' spread, both two-sided, and
            the Mann-Whitney U test before the factor is divided out, in the
            same direction; an item's p-value is the largest of the three
            (1.0 when the directions differ).
        alpha: the false-discovery rate the Benjamini-Hochberg procedure
            keeps (items with ``q_value`` < ``alpha`` are significant).
        confidence: the level of every interval (0.95).
        threshold_pct: the smallest step change (%) that counts: ``regressed``
            needs the whole interval above it, ``improved`` below its
            negative, ``unchanged`` within ±it; otherwise ``inconclusive``.
        items_tested: items with enough instances on both sides to test;
            items_significant: those with ``q_value`` < ``alpha``.
        step_method: ``steps`` (the analyzed steps as samples) or ``items``
            (the per-step sum of the items' changes, bootstrapped), ``identical``
            (both sides hold the same steps and samples: unchanged), or ``""``
            when neither had enough samples (the verdict is inconclusive).
        base_samples, new_samples: the steps (``steps``) or item instances
            (``items``) each side contributed.
        change_pct, change_pct_low, change_pct_high: the step-time change
            after the environment factor (%) and its interval.
        raw_change_pct: the same before the factor is divided out.
        environment_factor, environment_low, environment_high: the factor by
            which the new side's items run slower (> 1) or faster (< 1) all
            alike, the median over tested items of each one's ratio of mean
            durations, with its bootstrap interval over items; 1.0 when fewer
            than :data:`hta_report.compare_stats.MIN_ENV_ITEMS` items were
            tested. environment_named: True when the interval excludes 1 by
            more than ``threshold_pct``: the machine (load, clocks, another
            process), not the code, moved every item.
        environment_items: the items the factor is taken over.
        item_spread_pct: how far single items stray from the factor beyond
            their own sampling noise (%: the robust variance of their log
            ratios around the factor, (1.4826 × MAD)², less the median
            sampling variance, as a square root; medians weighted by each
            item's time per step): a loaded machine slows some ops more than
            others, and an item is significant only beyond this spread and
            its noise, which also widens every item's interval.
        items: the significant items, then those on one side only, each
            group by |µs per step| (largest first), at most
            :data:`hta_report.compare_stats.TOP_ITEMS`.
        note: a sentence on what limited the test (few steps, no samples), or "".
        verdict: the statistical test's own verdict (``improved``,
            ``regressed``, ``unchanged``, ``inconclusive``; ``""`` for the
            noise band). :attr:`Comparison.verdict` stays the noise band's:
            on the recorded pairs of docs/COMPARE.md this test did not beat
            the band on real fix pairs, so it is shown beside the verdict,
            not in its place.
    """

    method: str = "noise band"
    why: str = ""
    test: str = "Mann-Whitney U and a z-test against the items' spread (two-sided)"
    alpha: float = 0.05
    confidence: float = 0.95
    threshold_pct: float = 1.0
    items_tested: int = 0
    items_significant: int = 0
    step_method: str = ""
    base_samples: int = 0
    new_samples: int = 0
    change_pct: float = 0.0
    change_pct_low: float = 0.0
    change_pct_high: float = 0.0
    raw_change_pct: float = 0.0
    environment_factor: float = 1.0
    environment_low: float = 1.0
    environment_high: float = 1.0
    environment_named: bool = False
    environment_items: int = 0
    item_spread_pct: float = 0.0
    items: List[ItemChange] = field(default_factory=list)
    note: str = ""
    verdict: str = ""


#: The name of the overall metric (:class:`MetricDelta`) the verdict compares where a side's host ran
#: ahead of its GPU (:func:`hta_report.compare.time_per_step`), in ms; absent where none did.
PACED_STEP_METRIC = "time per step, GPU work counted"


@dataclass(slots=True)
class Comparison:
    """``new`` against ``base``: overall and per-rank deltas, kernels that
    changed most, findings that appeared or went away, and a verdict.

    ``verdict`` is ``improved``, ``regressed``, ``unchanged`` or ``not
    comparable`` (no ProfilerStep on a side). Where both sides carry
    instance samples (:class:`InstanceSamples`), ``stats`` (:class:`StatTest`,
    :mod:`hta_report.compare_stats`) holds a statistical test beside it: the
    items that changed, the environment factor and the step-time change with
    its interval, and that test's own verdict (``stats.verdict``, which may be
    ``inconclusive``); the headline ``verdict`` stays the noise band's
    (docs/COMPARE.md: the test did not beat the band on real fix pairs). The
    verdict compares the time
    per step, ``base_step_us`` against ``new_step_us`` (µs,
    :func:`~hta_report.compare.time_per_step`: the mean step time, except on
    the ``base_paced_ranks`` / ``new_paced_ranks`` ranks whose host ran ahead
    of the GPU, where it counts the GPU work the steps leave behind), against
    ``noise_band_pct``: the larger robust coefficient of variation
    (1.4826 × median absolute deviation / median × 100,
    :func:`~hta_report.compare.step_variation_pct`) of the two sides'
    analyzed step times, at least 1 %: one outlier step (a checkpoint)
    does not widen it.

    ``sides`` says what each side ran on (base, then new: devices, world
    size, ranks, PyTorch and CUDA/ROCm versions) and ``differences`` one
    sentence per way they differ (the step time change then measures that
    difference too); ``cpu_ops`` are the host ops whose self time per step
    changed most (:class:`CpuOpDelta`), largest change first.
    """

    base_label: str
    new_label: str
    verdict: str
    noise_band_pct: float
    step_time_change_pct: float
    base_step_us: float = 0.0
    new_step_us: float = 0.0
    base_paced_ranks: int = 0
    new_paced_ranks: int = 0
    overall: List[MetricDelta] = field(default_factory=list)
    ranks: List[RankComparison] = field(default_factory=list)
    ranks_only_base: List[int] = field(default_factory=list)
    ranks_only_new: List[int] = field(default_factory=list)
    kernels: List[KernelDelta] = field(default_factory=list)
    findings_appeared: List[Finding] = field(default_factory=list)
    findings_gone: List[Finding] = field(default_factory=list)
    findings_kept: List[str] = field(default_factory=list)
    base: Optional[AnalysisResult] = None
    new: Optional[AnalysisResult] = None
    gates: List[GateResult] = field(default_factory=list)
    sides: List[SideInfo] = field(default_factory=list)
    differences: List[str] = field(default_factory=list)
    cpu_ops: List[CpuOpDelta] = field(default_factory=list)
    stats: StatTest = field(default_factory=StatTest)
    schema_version: int = SCHEMA_VERSION

    def __repr__(self) -> str:
        return (f"<Comparison {self.base_label!r} -> {self.new_label!r}: {self.verdict}, "
                f"step time {self.step_time_change_pct:+.1f} %>")

    def _repr_html_(self) -> Optional[str]:
        """The comparison page, for Jupyter's rich display (see :data:`HTML_DISPLAY`)."""
        show = HTML_DISPLAY.get("comparison")
        return show(self) if show is not None else None

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The comparison as JSON (both full results included)."""
        data = dataclasses.asdict(self)
        data = {"schema_version": data.pop("schema_version"), "kind": "comparison", **data}
        return json.dumps(data, indent=indent, allow_nan=False)
