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
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

#: Version of the JSON layout written by :meth:`AnalysisResult.to_json`.
#: Bump it on any incompatible change of the dataclasses below.
SCHEMA_VERSION = 1


@dataclass
class StepTime:
    """One ``ProfilerStep#N`` annotation on the CPU timeline.

    Attributes:
        number: N in ``ProfilerStep#N``.
        duration_us: wall time of the annotation (µs).
        warmup: True for the first step found in the trace; it is excluded
            from the statistics because it usually carries one-off work.
    """

    number: int
    duration_us: float
    warmup: bool = False


@dataclass
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


@dataclass
class TemporalBreakdown:
    """GPU time split into idle / compute / non-compute, from HTA's
    ``TraceAnalysis.get_temporal_breakdown`` (same numbers, in µs and %).

    ``non_compute`` is time with only memcpy, memset or communication kernels
    running; percentages are of ``total_us`` (HTA's trace span of GPU work).
    """

    idle_us: float = 0.0
    compute_us: float = 0.0
    non_compute_us: float = 0.0
    total_us: float = 0.0
    idle_pct: float = 0.0
    compute_pct: float = 0.0
    non_compute_pct: float = 0.0


@dataclass
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


@dataclass
class IdleBreakdown:
    """Idle time of a rank by cause.

    ``host_wait_pct``, ``kernel_wait_pct`` and ``other_pct`` are shares of the
    idle time (they add up to 100), summed over all streams of the rank.
    HTA measures idleness per stream only; the rank-level shares weight each
    stream's idle time equally.
    """

    streams: List[StreamIdle] = field(default_factory=list)
    host_wait_pct: float = 0.0
    kernel_wait_pct: float = 0.0
    other_pct: float = 0.0


@dataclass
class KernelTypeShare:
    """Share of GPU kernel time by HTA kernel type (``COMPUTATION``,
    ``COMMUNICATION``, ``MEMORY`` and their overlaps, e.g.
    ``COMPUTATION overlapping COMMUNICATION``), from HTA's
    ``get_gpu_kernel_breakdown``. ``pct`` is of all kernel time."""

    kernel_type: str
    total_us: float
    pct: float


@dataclass
class KernelStat:
    """One kernel name's totals on a rank (µs); ``pct`` is of the rank's kernel time."""

    name: str
    kernel_type: str
    count: int
    total_us: float
    mean_us: float
    max_us: float
    pct: float


@dataclass
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


@dataclass
class MemcpySummary:
    """Memcpy and memset activity of a rank.

    ``overlapped_us`` is memcpy time during which a compute kernel ran on any
    stream; ``exposed_us`` is memcpy time during which no compute or
    communication kernel ran (the GPU did nothing but copy);
    ``exposed_pct`` is ``exposed_us`` as % of the rank's GPU span.
    """

    directions: List[MemcpyDirection] = field(default_factory=list)
    total_us: float = 0.0
    overlapped_us: float = 0.0
    exposed_us: float = 0.0
    exposed_pct: float = 0.0


@dataclass
class CommSummary:
    """Communication (NCCL/RCCL/HCCL kernels) of a rank.

    ``overlap_pct`` is HTA's ``get_comm_comp_overlap``: % of communication
    time during which a compute kernel also ran. ``exposed_us`` is
    communication time with no compute kernel running; ``exposed_pct`` is of
    the rank's GPU span.
    """

    kernel_count: int = 0
    total_us: float = 0.0
    overlap_pct: float = 0.0
    exposed_us: float = 0.0
    exposed_pct: float = 0.0


@dataclass
class QueueStat:
    """Queue length (outstanding launched-but-unfinished GPU operations) of one
    stream, from HTA's ``get_queue_length_summary``."""

    stream: int
    mean: float
    p50: float
    max: float


@dataclass
class LaunchSummary:
    """Kernel launch overhead of a rank, from HTA's ``get_cuda_kernel_launch_stats``.

    * ``short_kernels``: GPU work shorter than its ``cuda_runtime`` launch call;
    * ``runtime_outliers``: launch calls longer than ``runtime_cutoff_us`` (50 µs);
    * ``delay_outliers``: launch delay (kernel start − launch call end) longer
      than ``launch_delay_cutoff_us`` (100 µs).
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


@dataclass
class NamedTime:
    """A CPU-side event name with its count and time (µs). ``self_us`` is time
    not spent in child events on the same thread."""

    name: str
    count: int
    total_us: float
    self_us: float = 0.0


@dataclass
class CpuSide:
    """CPU-side metrics of a rank, per analyzed step (warm-up step excluded
    when there are others).

    * DataLoader: time inside ``enumerate(DataLoader)#...`` annotations;
      ``dataloader_pct`` is of the mean step time;
    * synchronization: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
      ``cudaEventSynchronize``, ``aten::item``, ``aten::_local_scalar_dense``;
    * ``top_ops``: CPU ops by self time over the whole analyzed window.
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


@dataclass
class RankResult:
    """Everything measured on one rank (one trace file).

    ``has_gpu`` is False for traces with no kernel, memcpy or memset events;
    then the GPU sections (temporal, idle, kernels, memcpy, comm, launch) hold
    zeros and reporters say so instead of showing them.
    """

    rank: int
    file: str
    device_names: List[str] = field(default_factory=list)
    has_gpu: bool = False
    gpu_span_us: float = 0.0
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


@dataclass
class Aggregate:
    """Metrics aggregated over ranks: means over ranks that have GPU activity
    (GPU metrics) or over all ranks (step and CPU metrics). Idle-by-cause
    percentages are of GPU time (they add up to ``idle_pct``)."""

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
    exposed_memcpy_pct: float = 0.0
    kernel_types: List[KernelTypeShare] = field(default_factory=list)


@dataclass
class Finding:
    """One piece of advice with the numbers that triggered it.

    Attributes:
        id: stable kebab-case identifier, e.g. ``dataloader-bound``.
        title: one line naming the bottleneck and the fix.
        severity: ``high``, ``medium`` or ``low``.
        evidence: the figures (with units) that triggered the finding.
        fix: concrete code or configuration to try.
        doc_url: documentation for the fix.
        ranks: ranks where it fired.
        share_pct: % of step (or GPU) time at stake; used to sort findings.
        threshold: the trigger, in words, with its source.
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


@dataclass
class TraceFileInfo:
    """One trace file as found on disk and how its rank was decided
    (``distributedInfo``, ``file name`` or ``sequential``)."""

    path: str
    rank: int
    rank_source: str
    size_bytes: int
    schema_version: Optional[int] = None
    host_name: Optional[str] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None


@dataclass
class UnreadableTrace:
    """A trace file left out of the analysis, and why (one line, e.g. ``truncated
    gzip: ...``, or ``analysis failed at idle time breakdown (HTA): ...``)."""

    path: str
    reason: str


@dataclass
class Inventory:
    """What was analyzed and with which tools.

    ``files`` are the traces the report covers; ``unreadable`` those that were
    found but could not be read or analyzed (the report covers the rest).
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


@dataclass
class AnalysisResult:
    """The whole analysis of one directory of traces."""

    inventory: Inventory
    ranks: List[RankResult] = field(default_factory=list)
    aggregate: Aggregate = field(default_factory=Aggregate)
    findings: List[Finding] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> Dict[str, Any]:
        """The model as plain JSON-compatible dicts and lists."""
        return dataclasses.asdict(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The model as a JSON document (``schema_version`` first)."""
        data = self.to_dict()
        data = {"schema_version": data.pop("schema_version"), **data}
        return json.dumps(data, indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AnalysisResult":
        """Rebuild a result from :meth:`to_dict` output.

        Raises:
            ValueError: the document is not an hta-report result or its
                ``schema_version`` is not :data:`SCHEMA_VERSION`.
        """
        if not isinstance(data, dict) or "schema_version" not in data:
            raise ValueError("not an hta-report result (no schema_version)")
        if data["schema_version"] != SCHEMA_VERSION:
            raise ValueError(
                f"result has schema_version {data['schema_version']}, "
                f"this hta-report reads {SCHEMA_VERSION}"
            )
        return _build(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "AnalysisResult":
        """Rebuild a result from :meth:`to_json` output (see :meth:`from_dict`)."""
        return cls.from_dict(json.loads(text))


def _build(tp: Any, value: Any) -> Any:
    """Recursively turn plain JSON values into instances of the annotated type."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
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
