"""The view model: the result model as typed, display-ready rows and sections.

:func:`report` turns one :class:`~hta_report.model.AnalysisResult` into a
:class:`Report`: frozen dataclasses holding every string a reporter shows,
each number formatted once (with :mod:`hta_report.render.fmt`). Rows
(``FindingRow``, ``RankRow``, ``KernelRow``...) are one table row or one
group of figures; a :class:`Section` is one part of the report, in page
order in :data:`SECTIONS`, and knows how it is shown:

* ``template``: its HTML partial (``templates/<template>``), which only
  reads, loops and tests the section's fields (no arithmetic, no formatting);
* :meth:`Section.markdown`: its lines of the markdown report;
* :meth:`Section.terminal`: its lines of the summary printed after ``analyze``.

The HTML, markdown and terminal reporters walk the same list of sections, so
a figure is formatted in one place and says the same thing everywhere.
Trace-derived strings stay raw here: the HTML page escapes them (jinja2),
markdown and terminal lines through :mod:`hta_report.escape`, here, as they
are written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..escape import is_image_data_uri, md_cell, md_code, md_code_block, md_html, md_text, terminal
from ..model import (ATTRIBUTION_STEP, CHECK_STATUSES, IDLE_CAUSE_LABELS, MEMORY_STEP, OCCUPANCY_STEP, SPAN_STEP,
                     STEP_BREAKDOWN_STEP, TEMPORAL_STEP, TENSORBOARD_STEP, WINDOWS_STEP, AnalysisResult, Finding, GateResult,
                     NamedTime, RankResult, SourceLocation, WhatIf, is_doc_url, is_source_url)
from ..model import LISTED_MIN_GAIN_PCT, NOT_RUN, saves
from ..names import short_names
from . import fmt
from .replay_notes import replay_note, replay_note_parts

#: What a cell shows for a figure whose analysis step failed on the rank.
NOT_COMPUTED = "not computed"

#: Findings below this % of the step are not in the headline's top list.
TOP_MIN_GAIN_PCT = LISTED_MIN_GAIN_PCT

#: Idle causes below this share of the window (%) are not named in the headline.
HEADLINE_MIN_CAUSE_PCT = 0.5

#: Ranks the report shows one by one: past this many, the per-rank table, the
#: per-rank sections, the per-rank rows of the charts and the per-rank notes
#: show the worst ``RANKS_SHOWN`` ranks (:func:`shown_ranks`), the table adds
#: each column's spread over every rank (:func:`rank_spread`), and the others
#: are left to the JSON result (``ranks[]``), which keeps them all. 16: the
#: most lines the step-time chart draws with a readable legend
#: (:data:`hta_report.render.charts.MAX_STEP_LINES`), a table that fits one
#: screen, and a rank's own section is 60 to 90 kB of HTML (measured on the
#: 64-rank copy of ``hta/two_ranks``), so 16 of them keep the page near 1.5 MB
#: whatever the job's size, where 512 ranks made it 43 MB. Real jobs have 128
#: to 1,024 ranks; one of up to 16 ranks is shown as before.
RANKS_SHOWN = 16

#: The statistics of the per-rank table's spread rows (name, quantile 0-1).
SPREAD = (("min", 0.0), ("median", 0.5), ("p90", 0.9), ("max", 1.0))

#: The report's charts in page order: chart name (:func:`hta_report.render.charts.report_charts`), alt text.
CHARTS = (
    ("gpu_time", "Chart: GPU time per rank, busy (compute, non-compute) and idle by cause, % of GPU time"),
    ("top_kernels", "Chart: top kernels by total time over all ranks, ms"),
    ("steps", "Chart: time per ProfilerStep, ms, per rank"),
)

#: What each ``SourceLocation.how`` means, as the report says it.
HOW = {"call": "spent in the call on this line",
       "def": "spent inside this function (the line is its first)",
       "frame": "spent in this function (the line it ran when tracing started; the call was not found in the source)"}

#: What the memory section says for a trace without ``[memory]`` events.
HOW_TO_RECORD_MEMORY = ("No [memory] events in this trace: profile with "
                        "torch.profiler.profile(profile_memory=True), or hta-report collect --profile-memory.")

#: Columns of the step breakdown: field of ``StepBreakdown`` (without ``_us``) -> heading.
STEP_PARTS = {"kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "runtime": "runtime",
              "dataloader": "DataLoader", "cpu_exec": "CPU exec", "other": "other"}


# ------------------------------------------------------------------------------------------------ rows


#: Below this share (%) of the window, communication with no compute running
#: is not named in the headline (a few µs of a barrier per step).
COMM_ALONE_MIN_PCT = 1.0

@dataclass(frozen=True)
class RunView:
    """What the report is about, for its title: the run's ``name`` (folder or
    file, :func:`hta_report.render.fmt.run_name`), the question it answers
    (``kicker``: CPU-only traces get no GPU question), the ``input`` as given,
    ``ranks`` (``"1 rank"``), ``devices``, the collector's ``workload`` and a
    ``world_note`` when ranks of the job are missing; ``kind`` what the traces
    run, read from their events (``inference (SGLang, decode; graph replay)``:
    :attr:`~hta_report.model.Workload.label`, each distinct one of the ranks;
    empty when unknown); ``device_names`` the
    names ``devices`` lists and ``devices_note`` where they come from when
    not from the traces (``from manifest.json``)."""

    name: str
    kicker: str
    input: str
    ranks: str
    devices: str
    workload: str
    world_note: str
    device_names: Tuple[str, ...] = ()
    devices_note: str = ""
    kind: str = ""

    def devices_markdown(self) -> str:
        """``devices`` in markdown: each name a code span (copied as it is)."""
        if not self.device_names:
            return md_text(self.devices)
        return ", ".join(md_code(d) for d in self.device_names) + (
            f" ({md_text(self.devices_note)})" if self.devices_note else "")


@dataclass(frozen=True)
class IdleCause:
    """One of the headline's largest idle causes: its ``label`` and ``pct`` of the window."""

    label: str
    pct: str


@dataclass(frozen=True)
class ExcerptRow:
    """One line of a source excerpt: its number ``no``, its ``text``, and ``hit`` for the line itself."""

    no: str
    text: str
    hit: bool


@dataclass(frozen=True)
class SourceLineRow:
    """A finding's source line: ``label`` (``path/file.py:LINE``), ``function``,
    ``time`` per step and ``share`` of the finding's time, ``how`` in words,
    ``url`` (GitHub, or empty) and the ``excerpt``."""

    label: str
    function: str
    time: str
    share: str
    how: str
    url: str
    excerpt: Tuple[ExcerptRow, ...]

    @classmethod
    def of(cls, loc: SourceLocation) -> "SourceLineRow":
        calls = f"; one of {loc.calls} such calls in {loc.function}, the trace does not say which" \
            if loc.calls > 1 else ""
        return cls(
            label=f"{loc.path}:{loc.line}", function=loc.function, time=fmt.ms(loc.time_us),
            share=fmt.pct(loc.share_pct), how=HOW.get(loc.how, loc.how) + calls,
            url=loc.url if is_source_url(loc.url) else "",  # nothing else read from a saved result is linked
            excerpt=tuple(ExcerptRow(no=str(loc.excerpt_start + i), text=text, hit=loc.excerpt_start + i == loc.line)
                          for i, text in enumerate(loc.excerpt)))


@dataclass(frozen=True)
class FindingRow:
    """A finding as shown: what the model says, with its ``gain`` in words
    (``gain_pct`` kept as a number for the top-list cut), ``ranks`` and
    ``share`` formatted, its source ``lines``, and the replay's
    ``prediction`` for its fix with the ``edit`` it replayed (empty: none)."""

    id: str
    title: str
    severity: str
    evidence: Tuple[str, ...]
    fix: str
    doc_url: str
    threshold: str
    ranks: str
    share: str
    gain: str
    gain_pct: float
    gain_note: str
    lines: Tuple[SourceLineRow, ...]
    prediction: str = ""
    edit: str = ""

    @classmethod
    def of(cls, result: AnalysisResult, f: Finding) -> "FindingRow":
        return cls(
            id=f.id, title=f.title, severity=f.severity, evidence=tuple(f.evidence), fix=f.fix,
            doc_url=f.doc_url if is_doc_url(f.doc_url) else "", threshold=f.threshold,
            ranks=", ".join(str(r) for r in f.ranks), share=fmt.pct(f.share_pct),
            gain=_gain(result, f), gain_pct=f.gain_pct,
            gain_note=" if the cause were removed (upper bound)" if f.gain_ms_per_step > 0 and f.whatif is None
            else "",
            lines=tuple(SourceLineRow.of(loc) for loc in f.locations), prediction=prediction(result, f),
            edit=f.whatif.description if f.whatif is not None else "")


@dataclass(frozen=True)
class CheckRow:
    """One catalogue rule (by its id, the rule's one name) and what it
    concluded on this result (``css``: the status as a class name)."""

    id: str
    title: str
    status: str
    detail: str
    css: str


@dataclass(frozen=True)
class FailureRow:
    """An analysis step that failed on a rank, and why."""

    step: str
    reason: str


@dataclass(frozen=True)
class UnreadableRow:
    """A trace file left out of the report, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class Unreadable:
    """Trace files left out of the report: ``count``, ``total`` (files found),
    ``summary`` (one line) and ``files``."""

    count: int
    total: int
    summary: str
    files: Tuple[UnreadableRow, ...]

    @classmethod
    def of(cls, result: AnalysisResult) -> "Unreadable":
        inv = result.inventory
        bad = inv.unreadable
        total = len(bad) + len(inv.files)
        return cls(count=len(bad), total=total,
                   summary=(f"{len(bad)} of {total} traces could not be read; this report covers the rest"
                            if bad else ""),
                   files=tuple(UnreadableRow(path=u.path, reason=u.reason) for u in bad))


@dataclass(frozen=True)
class PartialRank:
    """A rank analyzed in part: its number, file and failed steps."""

    rank: str
    file: str
    failures: Tuple[FailureRow, ...]


@dataclass(frozen=True)
class Incomplete:
    """Ranks analyzed in part (an analysis step failed; the rest is
    reported): ``count``, ``summary`` (one line), the ``ranks``, and the
    HTA analyses hta-report ``replaced`` (one line each)."""

    count: int
    summary: str
    ranks: Tuple[PartialRank, ...]
    replaced: Tuple[str, ...]

    @classmethod
    def of(cls, result: AnalysisResult) -> "Incomplete":
        partial = [r for r in result.ranks if r.failures]
        return cls(
            count=len(partial),
            summary=(f"{fmt.plural(len(partial), 'rank')} analyzed in part; these sections are missing, and the "
                     "advice that needs them was not checked on these ranks" if partial else ""),
            ranks=tuple(PartialRank(rank=str(r.rank), file=r.file, failures=_failures(r)) for r in partial),
            replaced=tuple(replaced(result)))


@dataclass(frozen=True)
class RankFigures:
    """A rank's main figures, formatted once: the per-rank table
    (:class:`RankRow`) and the rank's own section (:class:`RankDetail`)
    show these same strings."""

    busy: str
    kernels: str
    idle: str
    span_busy: str
    gpu_span: str
    mean_step: str
    p90_step: str
    dataloader: str
    sync: str
    exposed_comm: str
    exposed_memcpy: str

    @classmethod
    def of(cls, r: RankResult) -> "RankFigures":
        return cls(busy=fmt.pct(r.busy_pct), kernels=fmt.pct(r.kernel_busy_pct), idle=fmt.pct(r.idle_pct),
                   span_busy=fmt.pct(r.gpu_span_busy_pct), gpu_span=fmt.ms(r.gpu_span_us),
                   mean_step=fmt.ms(r.steps.mean_us), p90_step=fmt.ms(r.steps.p90_us),
                   dataloader=fmt.pct(r.cpu.dataloader_pct), sync=fmt.pct(r.cpu.sync_pct),
                   exposed_comm=fmt.pct(r.exposed_comm_window_pct), exposed_memcpy=fmt.pct(r.exposed_copy_window_pct))


@dataclass(frozen=True)
class RankRow:
    """One rank in the per-rank table (``–`` or ``no GPU`` where the rank has
    no such figure, :data:`NOT_COMPUTED` where its step failed)."""

    rank: str
    device: str
    steps: str
    mean_step: str
    p90_step: str
    busy: str
    kernels: str
    idle: str
    span_busy: str
    dataloader: str
    sync: str
    exposed_comm: str
    exposed_memcpy: str

    @classmethod
    def of(cls, r: RankResult, x: RankFigures) -> "RankRow":
        gpu = r.has_gpu
        window_failed = gpu and r.failed(ATTRIBUTION_STEP, WINDOWS_STEP)
        return cls(
            rank=str(r.rank),
            device=", ".join(sorted(set(r.device_names))) or ("not recorded" if gpu else "CPU"),
            steps=(f"{r.steps.count} ({r.steps_used} analyzed)" if r.steps.count and r.steps_used != r.steps.count
                   else str(r.steps.count)),
            mean_step=x.mean_step if r.steps.count else "–",
            p90_step=x.p90_step if r.steps.count else "–",
            busy=NOT_COMPUTED if window_failed else x.busy if gpu else "no GPU",
            kernels=NOT_COMPUTED if window_failed else x.kernels if gpu else "–",
            idle=NOT_COMPUTED if window_failed else x.idle if gpu else "–",
            span_busy=(NOT_COMPUTED if r.failed(SPAN_STEP) else x.span_busy) if gpu else "–",
            dataloader=x.dataloader,
            sync=x.sync,
            exposed_comm=x.exposed_comm if gpu else "–",
            exposed_memcpy=x.exposed_memcpy if gpu else "–",
        )


@dataclass(frozen=True)
class StepRow:
    """One ``ProfilerStep``: its number, duration, and whether it is the warm-up step."""

    number: str
    duration: str
    warmup: bool


@dataclass(frozen=True)
class StepStatsView:
    """A rank's step-time statistics, with a ``note`` on the warm-up step."""

    count: str
    mean: str
    p50: str
    p90: str
    max: str
    note: str


@dataclass(frozen=True)
class PathRow:
    """One entry of a rank's critical path: ``name``, ``kind`` (``cpu`` or
    ``gpu``), its ``time`` on the path per step and its ``share`` of the path."""

    name: str
    kind: str
    time: str
    share: str


@dataclass(frozen=True)
class ReplayView:
    """A rank's replay (:class:`~hta_report.model.Replay`): ``fidelity`` (the
    replayed step against the measured one), ``path`` (the top entries of
    the critical path), ``together`` (what the findings' fixes buy together
    where that is on this rank, as the headline says it; empty elsewhere) and ``note`` (what the
    replay leaves out, or why the rank was not replayed; ``notes``: its
    parts, one per line)."""

    replayed: bool
    fidelity: str
    path: Tuple[PathRow, ...]
    host_share: str
    together: str
    note: str
    notes: Tuple[str, ...] = ()

    @classmethod
    def of(cls, r: RankResult, together: str = "") -> "ReplayView":
        """The rank's replay; ``together`` is what the findings' fixes buy
        together when that is on this rank (the headline's figure, the same
        replay: a rank shows no prediction the findings do not)."""
        rp = r.replay
        if rp.steps == 0:
            return cls(replayed=False, fidelity="", path=(), host_share="", together="", note=replay_note(rp))
        per = "per step" if r.steps.count > 0 else "over the traced window"
        total = sum(op.us for op in rp.critical_path)
        whole = rp.replayed_step_us if rp.replayed_step_us > 0 else total
        return cls(replayed=True,
                   fidelity=(f"replayed {fmt.ms(rp.replayed_step_us)} {per} against {fmt.ms(rp.measured_step_us)} "
                             f"measured ({fmt.pct(rp.error_pct)} apart) over {fmt.plural(rp.steps, 'step')}"),
                   path=tuple(PathRow(name=op.name, kind=op.kind, time=fmt.ms(op.us),
                                      share=fmt.pct(100 * op.us / whole if whole > 0 else 0.0))
                              for op in rp.critical_path),
                   host_share=fmt.pct(rp.host_share_pct), together=together, note=replay_note(rp),
                   notes=tuple(replay_note_parts(rp)))


@dataclass(frozen=True)
class StreamIdleRow:
    """HTA's idle time of one stream, by kind."""

    stream: str
    host: str
    kernel: str
    other: str


@dataclass(frozen=True)
class KernelTypeRow:
    """HTA's kernel time of one kernel type."""

    type: str
    total: str
    pct: str


@dataclass(frozen=True)
class KernelRow:
    """One of a rank's top kernels: ``name`` shortened (distinct among the
    rank's), ``full`` name, whether it was ``shortened``, and its figures."""

    name: str
    full: str
    shortened: bool
    type: str
    count: str
    total: str
    mean: str
    min: str
    max: str
    pct: str
    blocks: str
    occupancy: str


@dataclass(frozen=True)
class NamedRow:
    """A name (operator, module, synchronizing call), how often, and its total time."""

    name: str
    count: str
    total: str

    @classmethod
    def of(cls, x: NamedTime) -> "NamedRow":
        return cls(name=x.name, count=fmt.num(x.count), total=fmt.ms(x.total_us))


@dataclass(frozen=True)
class GpuByTable:
    """GPU time by ``what`` (operator, nn.Module), with a ``note`` on how it is attributed."""

    what: str
    note: str
    rows: Tuple[NamedRow, ...]


@dataclass(frozen=True)
class MemcpyRow:
    """Copies of one direction."""

    direction: str
    count: str
    time: str
    bytes: str
    bandwidth: str
    pageable: str
    pinned: str


@dataclass(frozen=True)
class MemcpyTotals:
    """All copies of a rank: total, overlapping compute, and exposed."""

    total: str
    overlapped: str
    exposed: str
    exposed_pct: str


@dataclass(frozen=True)
class GpuTime:
    """The rank's GPU time in each window, each labelled: ``window`` (the
    analyzed steps or traced window: busy, kernels, idle), ``span`` (the GPU's
    own first-to-last span, all of its operations, exact times), ``hta``
    (HTA's temporal breakdown on its whole-µs times, or hta-report's where
    HTA's failed: ``replaced`` says why) and the TensorBoard profiler's
    overview (``tensorboard``, or empty)."""

    window: str
    span: str
    hta: str
    replaced: Tuple[str, ...]
    tensorboard: str


@dataclass(frozen=True)
class CommView:
    """A rank's communication kernels (``any``: whether it has some)."""

    kernels: str
    total: str
    overlap: str
    exposed: str
    exposed_pct: str
    any: bool


@dataclass(frozen=True)
class QueueRow:
    """HTA's launch queue length of one stream."""

    stream: str
    mean: str
    p50: str
    max: str


@dataclass(frozen=True)
class LaunchView:
    """HTA's kernel launch statistics of a rank."""

    launches: str
    short: str
    runtime_outliers: str
    delay_outliers: str
    runtime_cutoff: str
    delay_cutoff: str
    median_runtime: str
    median_delay: str
    p90_delay: str
    queue: Tuple[QueueRow, ...]


@dataclass(frozen=True)
class CpuOpRow:
    """One CPU op: how often, its self time and its total time."""

    name: str
    count: str
    self_time: str
    total: str


@dataclass(frozen=True)
class CpuView:
    """A rank's CPU side: DataLoader and synchronization ``per`` step (or
    over the trace), as % ``of`` the step or traced window, and its top ops."""

    per: str
    of: str
    steps_used: str
    dataloader: str
    dataloader_pct: str
    dataloader_seen: bool
    dataloader_mode: str
    sync_calls: str
    sync: str
    sync_pct: str
    sync_events: Tuple[NamedRow, ...]
    top_ops: Tuple[CpuOpRow, ...]


@dataclass(frozen=True)
class Absent:
    """A part of a rank's section that is not shown: ``state`` says why
    (:data:`NOT_COMPUTED`, ``missing`` or ``cpu``) and ``reason`` in words
    (empty for ``cpu``)."""

    state: str
    reason: str = ""


@dataclass(frozen=True)
class SmallKernelRow:
    """A kernel with fewer blocks than SMs (name shortened as :class:`KernelRow`'s)."""

    name: str
    full: str
    shortened: bool
    count: str
    total: str
    blocks: str
    occupancy: str
    idle_sm: str
    pct: str


@dataclass(frozen=True)
class Occupancy:
    """How well the rank's compute kernels fill the GPU, ``per`` step (or
    over the trace without steps): SM efficiency, achieved occupancy, the
    time in kernels with fewer blocks than SMs (``small``, ``small_pct``)
    and the SM time they leave idle, and those ``kernels``."""

    state: ClassVar[str] = "shown"
    per: str
    kernels_with_data: str
    kernel_time: str
    sm_efficiency: str
    occupancy: str
    small: str
    small_pct: str
    idle_sm: str
    kernels: Tuple[SmallKernelRow, ...]


@dataclass(frozen=True)
class DeviceMemoryRow:
    """One device's memory: events, peaks and capacity (``–`` when the trace has none)."""

    device: str
    events: str
    allocated: str
    reserved: str
    capacity: str
    allocated_pct: str
    reserved_pct: str


@dataclass(frozen=True)
class Memory:
    """The rank's memory: its main ``device``, each device's row, and the main device's row (``main``)."""

    state: ClassVar[str] = "shown"
    device: str
    devices: Tuple[DeviceMemoryRow, ...]
    main: Optional[DeviceMemoryRow]


@dataclass(frozen=True)
class BreakdownRow:
    """One step of the step breakdown: its number, warm-up mark, total and parts (ms)."""

    number: str
    warmup: bool
    total: str
    parts: Tuple[str, ...]


@dataclass(frozen=True)
class StepBreakdownTable:
    """The rank's per-step breakdown: ``headings`` and one row per step."""

    state: ClassVar[str] = "shown"
    headings: Tuple[str, ...]
    rows: Tuple[BreakdownRow, ...]


@dataclass(frozen=True)
class ChartImage:
    """A chart we drew: its ``src`` data URI, the ``narrow`` drawing's (or
    empty) and, for the page's chart section, its ``alt`` text."""

    src: str
    narrow: str
    alt: str = ""


@dataclass(frozen=True)
class RankDetail:
    """Everything the report shows of one rank in its own section."""

    rank: str
    file: str
    has_gpu: bool
    failures: Tuple[FailureRow, ...]
    steps: Tuple[StepRow, ...]
    step_stats: StepStatsView
    idle_streams: Tuple[StreamIdleRow, ...]
    kernel_types: Tuple[KernelTypeRow, ...]
    kernels: Tuple[KernelRow, ...]
    kernel_count: str
    gpu_by: Tuple[GpuByTable, ...]
    memcpy: Tuple[MemcpyRow, ...]
    memcpy_summary: MemcpyTotals
    gpu_time: Optional[GpuTime]
    comm: CommView
    launch: LaunchView
    cpu: CpuView
    occupancy: Union[Occupancy, Absent]
    memory: Union[Memory, Absent]
    step_breakdown: Union[StepBreakdownTable, Absent]
    step_breakdown_chart: Optional[ChartImage]
    memory_chart: Optional[ChartImage]
    workload: str = ""
    workload_evidence: Tuple[str, ...] = ()
    replay: Optional[ReplayView] = None

    @classmethod
    def of(cls, r: RankResult, x: RankFigures, last_step_included: bool,
           charts: Mapping[str, str], together: str = "") -> "RankDetail":
        labels = short_names([k.name for k in r.top_kernels])
        m, c, ln, cpu = r.memcpy, r.comm, r.launch, r.cpu
        return cls(
            rank=str(r.rank), file=r.file, has_gpu=r.has_gpu, failures=_failures(r),
            workload=r.workload.label, workload_evidence=tuple(r.workload.evidence), replay=ReplayView.of(r, together),
            steps=tuple(StepRow(number=str(s.number), duration=fmt.ms(s.duration_us), warmup=s.warmup)
                        for s in r.steps.steps),
            step_stats=StepStatsView(
                count=fmt.plural(r.steps.count, "step"), mean=x.mean_step, p50=fmt.ms(r.steps.p50_us),
                p90=x.p90_step, max=fmt.ms(r.steps.max_us),
                note="first step (warm-up) excluded" if r.steps.warmup_excluded else "single step, used as is"),
            idle_streams=tuple(StreamIdleRow(stream=str(s.stream), host=fmt.ms(s.host_wait_us),
                                             kernel=fmt.ms(s.kernel_wait_us), other=fmt.ms(s.other_us))
                               for s in r.idle.streams),
            kernel_types=tuple(KernelTypeRow(type=k.kernel_type, total=fmt.ms(k.total_us), pct=fmt.pct(k.pct))
                               for k in r.kernel_types),
            kernels=tuple(KernelRow(
                name=labels[k.name], full=k.name, shortened=labels[k.name] != k.name, type=k.kernel_type,
                count=fmt.num(k.count), total=fmt.ms(k.total_us), mean=fmt.ms(k.mean_us), min=fmt.ms(k.min_us),
                max=fmt.ms(k.max_us), pct=fmt.pct(k.pct),
                blocks=fmt.fixed(k.blocks_per_sm, 2, grouped=False) if k.blocks_per_sm else "–",
                occupancy=fmt.pct(k.occupancy_pct) if k.occupancy_pct else "–") for k in r.top_kernels),
            kernel_count=fmt.num(r.kernel_count),
            gpu_by=(GpuByTable(what="operator", note="the outermost CPU op around each launch, as the TensorBoard "
                                                     "profiler's operator view",
                               rows=tuple(NamedRow.of(n) for n in r.code.gpu_by_op)),
                    GpuByTable(what="nn.Module", note="the innermost module around each launch; with_stack traces",
                               rows=tuple(NamedRow.of(n) for n in r.code.gpu_by_module))),
            memcpy=tuple(MemcpyRow(direction=d.direction, count=fmt.num(d.count), time=fmt.ms(d.total_us),
                                   bytes=fmt.size(d.total_bytes), bandwidth=fmt.gbps(d.bandwidth_gbps),
                                   pageable=fmt.num(d.pageable_count), pinned=fmt.num(d.pinned_count))
                         for d in m.directions),
            memcpy_summary=MemcpyTotals(total=fmt.ms(m.total_us), overlapped=fmt.ms(m.overlapped_us),
                                        exposed=fmt.ms(m.exposed_us), exposed_pct=fmt.pct(m.exposed_pct)),
            gpu_time=gpu_time(r, last_step_included, x) if r.has_gpu else None,
            comm=CommView(kernels=fmt.num(c.kernel_count), total=fmt.ms(c.total_us), overlap=fmt.pct(c.overlap_pct),
                          exposed=fmt.ms(c.exposed_us), exposed_pct=fmt.pct(c.exposed_pct), any=c.kernel_count > 0),
            launch=LaunchView(
                launches=fmt.num(ln.launches), short=fmt.num(ln.short_kernels),
                runtime_outliers=fmt.num(ln.runtime_outliers), delay_outliers=fmt.num(ln.delay_outliers),
                runtime_cutoff=fmt.ms(ln.runtime_cutoff_us), delay_cutoff=fmt.ms(ln.launch_delay_cutoff_us),
                median_runtime=fmt.ms(ln.median_runtime_us), median_delay=fmt.ms(ln.median_launch_delay_us),
                p90_delay=fmt.ms(ln.p90_launch_delay_us),
                queue=tuple(QueueRow(stream=str(q.stream), mean=fmt.fixed(q.mean, 1, grouped=False),
                                     p50=fmt.fixed(q.p50, 0, grouped=False), max=fmt.fixed(q.max, 0, grouped=False))
                            for q in ln.queue)),
            cpu=CpuView(
                per="per step" if r.steps.count else "over the trace",
                of="of the step" if r.steps.count else "of the traced window",
                steps_used=fmt.plural(cpu.steps_used, "step"),
                dataloader=fmt.ms(cpu.dataloader_us_per_step), dataloader_pct=x.dataloader,
                dataloader_seen=cpu.dataloader_seen,
                dataloader_mode="main process (num_workers=0)" if cpu.dataloader_in_main_process else "worker processes",
                sync_calls=fmt.fixed(cpu.sync_calls_per_step, 1, grouped=False), sync=fmt.ms(cpu.sync_us_per_step),
                sync_pct=x.sync,
                sync_events=tuple(NamedRow.of(e) for e in cpu.sync_events),
                top_ops=tuple(CpuOpRow(name=e.name, count=fmt.num(e.count), self_time=fmt.ms(e.self_us),
                                       total=fmt.ms(e.total_us)) for e in cpu.top_ops)),
            occupancy=occupancy(r) if r.has_gpu else Absent("cpu"),
            memory=memory(r),
            step_breakdown=step_breakdown(r),
            step_breakdown_chart=_chart(charts, f"step_breakdown/{r.rank}"),
            memory_chart=_chart(charts, f"memory/{r.rank}"),
        )


@dataclass(frozen=True)
class FileRow:
    """One trace file of the inventory."""

    path: str
    rank: str
    source: str
    size: str
    world: str
    backend: str


@dataclass(frozen=True)
class ManifestRow:
    """One entry of the collector's ``manifest.json``."""

    key: str
    value: str


# ------------------------------------------------------------------------------------------------ sections


@dataclass(frozen=True)
class Basis:
    """What the report is built from, and the parts several sections show,
    built once: the ``result``, the ``charts`` (only images we drew), the
    ``run``, the ``findings``, the traces left out (``unreadable``), the ranks
    analyzed in part (``incomplete``), how the traces were read
    (``reading``) and each rank's :class:`RankFigures` (``figures``, in
    ``result.ranks``' order)."""

    result: AnalysisResult
    charts: Mapping[str, str]
    run: RunView
    findings: Tuple[FindingRow, ...]
    unreadable: Unreadable
    incomplete: Incomplete
    reading: Tuple[str, ...]
    figures: Tuple[RankFigures, ...]
    shown: Tuple[int, ...] = ()

    @classmethod
    def of(cls, result: AnalysisResult, charts: Optional[Mapping[str, str]] = None) -> "Basis":
        shown = shown_ranks(result)
        return cls(result=result, charts={k: v for k, v in (charts or {}).items() if is_image_data_uri(v)},
                   run=run(result), findings=findings(result), unreadable=Unreadable.of(result),
                   incomplete=Incomplete.of(result), reading=tuple(reading_notes(result)),
                   figures=tuple(RankFigures.of(result.ranks[i]) for i in shown), shown=shown)

    def shown_pairs(self) -> List[Tuple[RankResult, RankFigures]]:
        """The ranks shown one by one (:func:`shown_ranks`, in that order) with their figures."""
        return [(self.result.ranks[i], x) for i, x in zip(self.shown, self.figures)]

    def more(self) -> str:
        """``"496 more ranks"`` past :data:`RANKS_SHOWN`, else ""."""
        n = len(self.result.ranks) - len(self.shown)
        return f"{fmt.plural(n, 'more rank')}" if n > 0 else ""


class Section:
    """One section of the report: a frozen dataclass listed in
    :data:`SECTIONS`, built from a :class:`Basis` by :meth:`of`, and shown by

    * the HTML page: the partial ``templates/<template>`` (its ``section``
      variable is this object), which renders to the section's elements,
      each line ending in a newline, or to nothing ("" for none);
    * the markdown report: :meth:`markdown`'s lines, starting with a blank line;
    * the terminal summary: :meth:`terminal`'s lines.

    Markdown and the terminal build only the sections that have lines of
    their own there (:func:`report`'s ``shown_in``).
    """

    #: The section's HTML partial under ``templates/``; "" when the page does not show it.
    template: ClassVar[str] = ""

    @classmethod
    def of(cls, b: Basis) -> "Section":
        """The section of the report built on ``b``."""
        raise NotImplementedError

    def markdown(self) -> List[str]:
        """The section's lines of the markdown report (none by default)."""
        return []

    def terminal(self) -> List[str]:
        """The section's lines of the terminal summary (none by default)."""
        return []


@dataclass(frozen=True)
class HeadlineSection(Section):
    """The headline figures of the whole directory and what the reader must
    know first. The GPU figures are % of each rank's analyzed window
    (``window``: :func:`window_words`), mean over the GPU ranks: ``busy`` (a
    kernel, memcpy or memset running), ``kernels`` (a kernel running: the
    TensorBoard profiler's GPU utilization), ``idle`` and its largest
    ``idle_causes`` (``causes``: the same in one line), the idle attribution
    the findings claim from; ``span_note`` gives the same GPU over its own
    span, and HTA's figure, labelled. ``step`` is the mean step in words;
    ``top`` the largest findings; then the traces left out, the ranks
    analyzed in part, how the traces were read and the loader's warnings."""

    template: ClassVar[str] = "section_headline.html.j2"
    run: RunView
    has_gpu: bool
    busy: str
    idle: str
    kernels: str
    window: str
    idle_causes: Tuple[IdleCause, ...]
    causes: str
    span_note: str
    integrity: Tuple[str, ...]
    mean_step: str
    steps_note: str
    step: str
    dataloader: str
    top: Tuple[FindingRow, ...]
    window_note: str
    unreadable: Unreadable
    incomplete: Incomplete
    reading: Tuple[str, ...]
    warnings: Tuple[str, ...]
    together: str = ""
    paced_note: str = ""
    #: communication kernels with no compute kernel running, % of the window
    #: (``Aggregate.exposed_comm_pct``): counted as busy, but no compute; "" under 1 %
    comm_alone: str = ""
    comm_wait: str = ""

    @classmethod
    def of(cls, b: Basis) -> "HeadlineSection":
        result = b.result
        a = result.aggregate
        ranked = sorted(((c, v) for c, v in a.idle_by_cause.items() if v >= HEADLINE_MIN_CAUSE_PCT),
                        key=lambda cv: -cv[1])[:3]
        causes = tuple(IdleCause(label=IDLE_CAUSE_LABELS.get(c, c), pct=fmt.pct(v)) for c, v in ranked)
        mean_step = fmt.ms(a.mean_step_us) if a.mean_step_us else "–"
        steps_note = "" if a.mean_step_us else "no ProfilerStep annotations"
        paced = paced_step_words(result) if a.mean_step_us else ""
        return cls(
            run=b.run, has_gpu=a.gpu_ranks > 0, busy=fmt.pct(a.busy_pct), idle=fmt.pct(a.idle_pct),
            kernels=fmt.pct(a.kernel_busy_pct), window=window_words(result), idle_causes=causes,
            causes=", ".join(f"{c.label} {c.pct}" for c in causes), span_note=_span_note(result),
            integrity=tuple(integrity_notes(result, b.shown)), mean_step=mean_step, steps_note=steps_note,
            step=steps_note or f"mean step {mean_step}" + (f" ({paced})" if paced else ""),
            dataloader=fmt.pct(a.dataloader_pct), paced_note=paced,
            comm_alone=fmt.pct(a.exposed_comm_pct) if a.exposed_comm_pct >= COMM_ALONE_MIN_PCT else "",
            comm_wait=(fmt.pct(a.comm_wait_pct) if a.exposed_comm_pct >= COMM_ALONE_MIN_PCT
                       and a.comm_wait_pct >= COMM_ALONE_MIN_PCT else ""),
            top=tuple(f for f in b.findings if f.gain_pct >= TOP_MIN_GAIN_PCT)[:3],
            window_note=_window_note(result), unreadable=b.unreadable, incomplete=b.incomplete,
            reading=b.reading, warnings=tuple(result.inventory.warnings), together=together(result))

    def _waiting(self) -> str:
        """`` (12.3 % waiting for other ranks)`` after "communication alone", where it is shown."""
        return f" ({self.comm_wait} waiting for other ranks)" if self.comm_wait else ""

    def markdown(self) -> List[str]:
        run = self.run
        lines = [""]
        kind = f" · {md_text(run.kind)}" if run.kind else ""
        if self.has_gpu:
            causes = f" ({self.causes})" if self.causes else ""
            comm = f", of it communication alone {self.comm_alone}{self._waiting()}" if self.comm_alone else ""
            lines.append(f"**GPU busy {self.busy}** {self.window} (kernels {self.kernels}{comm}), idle {self.idle}"
                         f"{causes} · {self.step} · {run.ranks} · {run.devices_markdown()}{kind}")
        elif self.integrity:
            lines.append(f"No GPU records in the traces (CPU-side metrics only) · {self.step} · {run.ranks} · "
                         f"{run.devices_markdown()}{kind}")
        else:
            lines.append(f"No GPU activity in the traces (CPU-side metrics only) · {self.step} · {run.ranks} · "
                         f"{run.devices_markdown()}{kind}")
        if self.integrity:
            title = "Read the GPU figures with care:" if self.has_gpu else "The GPU side of the traces is missing:"
            lines += ["", f"**{title}**", ""] + [f"- {md_text(n)}" for n in self.integrity]
        lines += ["", md_code(run.input) + (f" · {md_text(run.workload)}" if run.workload else "")]
        if run.world_note:
            lines += ["", f"> {md_text(run.world_note)}"]
        if self.together:
            lines += ["", md_text(self.together)]
        bad = self.unreadable
        if bad.count:
            lines += ["", f"**{bad.summary}:**", ""]
            lines += [f"- {md_code(u.path)}: {md_text(u.reason)}" for u in bad.files]
        part = self.incomplete
        if part.count:
            lines += ["", f"**{part.summary}:**", ""]
            lines += [f"- rank {md_text(r.rank)} ({md_code(r.file)}): "
                      + "; ".join(f"{md_text(f.step)}: {md_text(f.reason)}" for f in r.failures)
                      for r in part.ranks]
        if part.replaced:
            lines += ["", "**Replaced:**", ""] + [f"- {md_text(x)}" for x in part.replaced]
        if self.reading:
            lines += ["", "**How the traces were read:**", ""] + [f"- {md_text(n)}" for n in self.reading]
        return lines

    def terminal(self) -> List[str]:
        run = self.run
        lines: List[str] = []
        if self.has_gpu:
            comm = f", of it communication alone {self.comm_alone}{self._waiting()}" if self.comm_alone else ""
            lines.append(f"GPU busy {self.busy} {self.window} (kernels {self.kernels}{comm}), idle {self.idle}"
                         + (f" ({terminal(self.causes)})" if self.causes else ""))
            lines += [f"read with care: {terminal(n)}" for n in self.integrity]
        else:
            lines.append("No GPU records in the traces (CPU-side metrics only)" if self.integrity
                         else "No GPU activity in the traces (CPU-side metrics only)")
            lines += [f"GPU side missing: {terminal(n)}" for n in self.integrity]
        lines.append(f"{terminal(run.name)}: {run.ranks}, " + (f"{terminal(run.kind)}, " if run.kind else "")
                     + f"{self.step}, devices: {terminal(run.devices)}")
        if run.world_note:
            lines.append(terminal(run.world_note))
        if self.together:
            lines.append(terminal(self.together))
        if self.unreadable.count:
            lines.append(f"{self.unreadable.summary} (listed in the report)")
        if self.incomplete.count:
            lines.append(f"{self.incomplete.summary} (listed in the report)")
        lines += [terminal(n) for n in self.reading]
        return lines


@dataclass(frozen=True)
class GateRow:
    """One ``--fail-on`` gate as shown: its ``expression``, ``outcome``
    (``tripped`` or ``held``), the metric's ``value`` (two decimals, in the
    metric's unit) or why it was not measured (``value`` then says so)."""

    expression: str
    outcome: str
    value: str

    @classmethod
    def of(cls, g: GateResult) -> "GateRow":
        value = (f"{g.metric} = {fmt.fixed(g.value, 2, grouped=False)}" if g.value is not None
                 else f"{g.metric} not measured: {g.not_measured} (the gate fails)")
        return cls(expression=g.expression, outcome="tripped" if g.tripped else "held", value=value)


@dataclass(frozen=True)
class GatesSection(Section):
    """The ``--fail-on`` gates checked on this result (:attr:`AnalysisResult.gates`)
    and their outcome, so that a report attached to a review says why CI
    failed (``title``: how many of them tripped). Nothing without gates; the
    terminal shows none (the CLI prints each tripped gate on stderr)."""

    template: ClassVar[str] = "section_gates.html.j2"
    gates: Tuple[GateRow, ...]
    title: str

    @classmethod
    def of(cls, b: Basis) -> "GatesSection":
        rows = tuple(GateRow.of(g) for g in b.result.gates)
        tripped = sum(r.outcome == "tripped" for r in rows)
        return cls(gates=rows, title=f"Quality gates: {tripped} of {len(rows)} tripped")

    def markdown(self) -> List[str]:
        if not self.gates:
            return []
        lines = ["", f"### {md_text(self.title)}", "",
                 "| gate | outcome | value |", "|---|---|---|"]
        for g in self.gates:
            lines.append(f"| {md_code(g.expression, table=True)} | {md_text(g.outcome)} | {md_cell(g.value)} |")
        return lines


@dataclass(frozen=True)
class FindingsSection(Section):
    """The findings, in the model's order (largest time at stake first), what
    the report says without any (``no_findings``) or about source lines
    (``stack_note``), and what each rule of the catalogue concluded."""

    template: ClassVar[str] = "section_findings.html.j2"
    findings: Tuple[FindingRow, ...]
    no_findings: str
    stack_note: str
    checks: Tuple[CheckRow, ...]
    check_counts: str

    @classmethod
    def of(cls, b: Basis) -> "FindingsSection":
        return cls(findings=b.findings, no_findings=no_findings(b.result), stack_note=stack_note(b.result),
                   checks=checks(b.result), check_counts=check_counts(b.result))

    def markdown(self) -> List[str]:
        lines = ["", "### Findings", ""]
        if not self.findings:
            lines.append(md_text(self.no_findings))
        for f in self.findings:
            lines.append(f"- **[{md_text(f.severity)}] {md_text(f.title)}** ({md_code(f.id)}): {f.gain}")
            if f.prediction:
                lines.append(f"  - predicted after the fix: {md_text(f.prediction)} (replay of the trace: "
                             f"{md_text(f.edit)})")
            for e in f.evidence:
                lines.append(f"  - {md_text(e)}")
            for loc in f.lines:
                label = md_code(loc.label)
                where = f"[{label}]({loc.url})" if loc.url else label
                lines.append(f"  - your code: {where} in {md_code(loc.function)}: {loc.time} per step "
                             f"({loc.share} of this finding's time), {md_text(loc.how)}")
            if f.fix:
                lines += ["", md_code_block(f.fix, "python", indent="  "), ""]
        if self.stack_note and self.findings:
            lines += ["", f"_{md_text(self.stack_note)}_"]
        lines += ["", f"<details><summary>What was checked ({md_html(self.check_counts)})</summary>", "",
                  "| rule | status | detail |", "|---|---|---|"]
        for c in self.checks:
            lines.append(f"| {md_code(c.id, table=True)} | {md_text(c.status)} | {md_cell(c.detail)} |")
        lines += ["", "</details>"]
        return lines

    def terminal(self) -> List[str]:
        if not self.findings:
            return [terminal(self.no_findings)]
        top = [f for f in self.findings if f.gain_pct >= TOP_MIN_GAIN_PCT]
        small = len(self.findings) - len(top)
        shown = top[:5]
        # the count line says how many are listed below, so that "1 finding:" is never followed by nothing
        left = [f"{len(top) - len(shown)} more"] if len(top) > len(shown) else []
        left += [f"{small} below 1 % of the step or without a gain"] if small else []
        lines = [f"{fmt.plural(len(self.findings), 'finding')}"
                 + (f", {len(shown)} listed ({', '.join(left)}: see the report)" if left else "")
                 + (":" if shown else ".")]
        for f in shown:
            lines.append(f"  [{terminal(f.severity)}] {terminal(f.title)} ({f.gain})")
            if f.prediction:
                lines.append(f"      predicted after the fix: {terminal(f.prediction)}")
            if f.lines:  # the line with the largest share of its time
                line = f.lines[0]
                lines.append(f"      at {terminal(line.label)} in {terminal(line.function)} "
                             f"({line.share} of its time)")
        return lines


@dataclass(frozen=True)
class ChartsSection(Section):
    """The report's charts (:data:`CHARTS`) that were drawn, in page order (HTML only)."""

    template: ClassVar[str] = "section_charts.html.j2"
    charts: Tuple[ChartImage, ...]

    @classmethod
    def of(cls, b: Basis) -> "ChartsSection":
        return cls(charts=tuple(ChartImage(src=b.charts[name], narrow=b.charts.get(f"{name}@narrow", ""), alt=alt)
                                for name, alt in CHARTS if name in b.charts))


@dataclass(frozen=True)
class RankColumns:
    """The per-rank table's column labels, defined once for the HTML and the
    markdown table. Where a figure of the same word appears elsewhere on the
    page with another window or definition, the label says which: the
    headline's ``synchronization`` is GPU idle after a sync, ``host in sync
    calls`` the host's own time in them; ``GPU busy`` is of the analyzed
    steps, ``span busy`` of the GPU's own span (issue 55)."""

    busy: str = "GPU busy"
    kernels: str = "kernels"
    idle: str = "idle"
    exposed_comm: str = "exposed comm"
    exposed_memcpy: str = "exposed memcpy"
    dataloader: str = "host in DataLoader"
    sync: str = "host in sync calls"
    span_busy: str = "span busy"
    #: What the columns measure, below the table (GPU columns, then host columns).
    gpu_note: str = ("GPU busy, kernels, idle and exposed communication and memcpy are % of each rank's analyzed "
                     "steps (its traced window without steps), as the findings; span busy is of the GPU's own span "
                     "(first to last GPU operation).")
    host_note: str = "Host in DataLoader and host in sync calls are the host's own time in them, % of the mean step."
    #: With a GPU: the headline's idle split uses the same words for another figure.
    idle_note: str = ("The headline's idle split (DataLoader, synchronization) is the GPU's idle time after them, "
                      "not the host's time in them.")


@dataclass(frozen=True)
class RankTableSection(Section):
    """One row per rank; ``has_gpu`` (any rank) adds the GPU columns, whose
    window (``window``) and span (``span_note``) markdown states below the table.
    Past :data:`RANKS_SHOWN` ranks, ``rows`` are the worst ones
    (:func:`shown_ranks`, worst first; ``cut_note`` says so), ``spread`` each
    column's min, median, p90 and max over every rank (:func:`rank_spread`)
    and ``more`` how many ranks only the JSON result lists; else ``rows`` are
    every rank in the model's order and the three are empty."""

    template: ClassVar[str] = "section_rank_table.html.j2"
    has_gpu: bool
    rows: Tuple[RankRow, ...]
    window: str
    span_note: str
    cut_note: str = ""
    spread: Tuple[RankRow, ...] = ()
    more: str = ""
    labels: RankColumns = RankColumns()

    @classmethod
    def of(cls, b: Basis) -> "RankTableSection":
        more = b.more()
        return cls(has_gpu=b.result.aggregate.gpu_ranks > 0,
                   rows=tuple(RankRow.of(r, x) for r, x in b.shown_pairs()),
                   window=window_words(b.result), span_note=_span_note(b.result),
                   cut_note=cut_note(b.result, len(b.shown)) if more else "",
                   spread=rank_spread(b.result) if more else (), more=more)

    def markdown(self) -> List[str]:
        lines = ["", "### Per rank", ""]
        if self.cut_note:
            lines += [md_text(self.cut_note), ""]
        c = self.labels
        lines += [f"| rank | steps | mean step | {c.busy} | {c.kernels} | {c.idle} | {c.dataloader} | {c.sync} | "
                  f"{c.exposed_comm} |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.rank} | {r.steps} | {r.mean_step} | {r.busy} | {r.kernels} | {r.idle} | "
                  f"{r.dataloader} | {r.sync} | {r.exposed_comm} |" for r in self.rows]
        lines += [f"| _{r.rank}_ | {r.steps} | {r.mean_step} | {r.busy} | {r.kernels} | {r.idle} | "
                  f"{r.dataloader} | {r.sync} | {r.exposed_comm} |" for r in self.spread]
        if self.more:
            lines += ["", f"{self.more}: in the JSON result (`--json FILE`, `ranks[]`)."]
        if self.has_gpu:
            lines += ["", f"_GPU figures are {md_text(self.window)}, as the findings' gains. "
                          f"{md_text(self.span_note)}_"]
        lines += ["", f"_{md_text(c.host_note)}" + (f" {md_text(c.idle_note)}_" if self.has_gpu else "_")]
        return lines


@dataclass(frozen=True)
class RankDetailsSection(Section):
    """One section per rank (HTML); markdown shows their SM occupancy and
    memory in one table. ``has_gpu``: whether any rank has GPU activity.
    Past :data:`RANKS_SHOWN` ranks only the shown ones (:func:`shown_ranks`),
    and ``more`` says how many ranks only the JSON result lists."""

    template: ClassVar[str] = "section_ranks.html.j2"
    has_gpu: bool
    ranks: Tuple[RankDetail, ...]
    more: str = ""

    @classmethod
    def of(cls, b: Basis) -> "RankDetailsSection":
        result = b.result
        return cls(has_gpu=result.aggregate.gpu_ranks > 0,
                   ranks=tuple(RankDetail.of(r, x, result.inventory.last_step_included, b.charts,
                                             together(result) if result.together is not None
                                             and result.together.rank == r.rank else "")
                               for r, x in b.shown_pairs()), more=b.more())

    def markdown(self) -> List[str]:
        rows = []
        for r in self.ranks:
            o, m = r.occupancy, r.memory
            if not isinstance(o, Occupancy) and not isinstance(m, Memory):
                continue
            occ = ((o.sm_efficiency, o.occupancy, f"{o.small_pct} ({o.idle_sm} SM time idle {o.per})")
                   if isinstance(o, Occupancy) else ("–", "–", "–" if o.state == "cpu" else md_cell(o.reason)))
            main = m.main if isinstance(m, Memory) else None
            mem = ((md_code(main.device, table=True), main.allocated, main.reserved, main.capacity) if main
                   else ("–", "–", "–", "not recorded"))
            rows.append(f"| {r.rank} | {occ[0]} | {occ[1]} | {occ[2]} | {mem[0]} | {mem[1]} | {mem[2]} | {mem[3]} |")
        if not rows:
            return []
        return ["", "### SM occupancy and memory", "",
                "| rank | SM efficiency | achieved occupancy | kernels < 1 block/SM (% of compute kernel time) | device "
                "| peak allocated | peak reserved | device memory |",
                "|---:|---:|---:|---|---|---:|---:|---:|"] + rows + (
            ["", f"The ranks of the table above; {self.more}: in the JSON result (`--json FILE`, `ranks[]`)."]
            if self.more else [])


@dataclass(frozen=True)
class InventorySection(Section):
    """What was analyzed, with which versions (HTML only)."""

    template: ClassVar[str] = "section_inventory.html.j2"
    files: Tuple[FileRow, ...]
    unreadable: Unreadable
    devices: str
    pytorch: str
    schema: str
    steps_found: str
    last_step: str
    manifest: Tuple[ManifestRow, ...]

    @classmethod
    def of(cls, b: Basis) -> "InventorySection":
        inv = b.result.inventory
        return cls(
            files=tuple(FileRow(path=f.path, rank=str(f.rank), source=f.rank_source, size=fmt.size(f.size_bytes),
                                world=str(f.world_size) if f.world_size is not None else "–",
                                backend=f.backend or "–") for f in inv.files),
            unreadable=b.unreadable, devices=b.run.devices,
            pytorch=inv.pytorch_version or "not recorded in the traces",
            schema=", ".join(str(v) for v in inv.kineto_schema_versions) or "not recorded",
            steps_found=str(inv.steps_found),
            last_step=("included" if inv.last_step_included else
                       "dropped, as HTA does by default (its GPU work may be cut off)"),
            manifest=tuple(ManifestRow(key=str(k), value=str(v)) for k, v in inv.manifest.items()))


#: The report's sections in page order; each builds itself from the :class:`Basis` (``of``).
SECTIONS: Tuple[Type[Section], ...] = (
    HeadlineSection,
    GatesSection,
    FindingsSection,
    ChartsSection,
    RankTableSection,
    RankDetailsSection,
    InventorySection,
)


@dataclass(frozen=True)
class Report:
    """The whole report: its ``run`` (title), ``sections`` (:data:`SECTIONS`,
    in page order) and what the page's header and footer say (when it was
    analyzed, the versions, and the window of the GPU figures when any rank
    has GPU activity)."""

    run: RunView
    sections: Tuple[Section, ...]
    analyzed_at: str
    tool: str
    hta: str
    has_gpu: bool
    window: str


def report(result: AnalysisResult, charts: Optional[Mapping[str, str]] = None, shown_in: str = "") -> Report:
    """The view of ``result``: every section of :data:`SECTIONS`, built once;
    ``charts`` (name -> data URI, :func:`hta_report.render.charts.report_charts`)
    for the page, only images we drew being kept. ``shown_in`` (``markdown``
    or ``terminal``): only the sections with lines of their own there are
    built (the terminal summary needs no kernel table)."""
    b = Basis.of(result, charts)
    inv = result.inventory
    return Report(run=b.run, sections=tuple(section.of(b) for section in SECTIONS if _shows(section, shown_in)),
                  analyzed_at=inv.analyzed_at, tool=inv.tool_version, hta=inv.hta_version,
                  has_gpu=result.aggregate.gpu_ranks > 0, window=window_words(result))


def _shows(section: Type[Section], shown_in: str) -> bool:
    """Whether ``section`` shows in ``shown_in``: ``markdown`` or ``terminal``
    when it has lines of its own there (it overrides that method of
    :class:`Section`), anything else (the page) always."""
    if shown_in in ("markdown", "terminal"):
        return getattr(section, shown_in) is not getattr(Section, shown_in)
    return True


# ------------------------------------------------------------------------------------------------ builders


def device_names(result: AnalysisResult) -> Tuple[Tuple[str, ...], str]:
    """The run's device names and where they come from: the traces'
    (``deviceProperties``; ``""``), else the collector's ``manifest.json``'s
    (``device_names``; ``"from manifest.json"``), else none."""
    inv = result.inventory
    if inv.devices:
        return tuple(inv.devices), ""
    listed = inv.manifest.get("device_names") if isinstance(inv.manifest, dict) else None
    if isinstance(listed, list) and listed:
        return tuple(str(d) for d in listed), "from manifest.json"
    return (), ""


def devices(result: AnalysisResult) -> str:
    """The devices of the run (:func:`device_names`, the manifest's said so),
    else what is known (``"GPU model not recorded in the traces"``, ``"GPU not
    recorded in the traces"`` where a rank ran on a device whose GPU side the
    trace lacks, or ``"CPU only"``)."""
    names, note = device_names(result)
    if names:
        return ", ".join(names) + (f" ({note})" if note else "")
    if result.aggregate.gpu_ranks:
        return "GPU model not recorded in the traces"
    return "GPU not recorded in the traces" if any(gpu_side_missing(r) for r in result.ranks) else "CPU only"


def gpu_side_missing(r: RankResult) -> bool:
    """Whether rank ``r`` (a :class:`~hta_report.model.RankResult`) ran GPU
    work the trace holds no record of: every launch lost its record, or the
    model ran on a device and no GPU activity was recorded
    (:attr:`~hta_report.model.Integrity.device_unrecorded`)."""
    i = r.integrity
    return bool(i.device_unrecorded) or (i.launches > 0 and i.launches_without_ops == i.launches)


def _workload(manifest: Dict[str, Any]) -> str:
    """What ``hta-report collect`` ran, from its manifest: ``workload cnn`` or
    ``script train.py --lr 3``; empty for traces from elsewhere."""
    run = manifest.get("run") if isinstance(manifest, dict) else None
    if not isinstance(run, dict):
        return ""
    if run.get("mode") == "workload" and run.get("workload"):
        return f"workload {run['workload']}"
    if run.get("mode") == "script" and isinstance(run.get("command"), list):
        command = " ".join(str(a) for a in run["command"])
        return "script " + (command if len(command) <= 80 else command[:79] + "…")
    return ""


def _kind(result: AnalysisResult) -> str:
    """The ranks' workload labels (:attr:`~hta_report.model.Workload.label`), each distinct one once."""
    labels = [r.workload.label for r in result.ranks if r.workload.label]
    return " / ".join(dict.fromkeys(labels))


def _world_note(result: AnalysisResult) -> str:
    """A remark when the traces name a larger world than the ranks found
    (``distributedInfo.world_size`` 8, one trace): the report covers only those."""
    inv = result.inventory
    world = max((f.world_size for f in inv.files if f.world_size), default=0)
    present = len(inv.files) + len(inv.unreadable)
    if world <= present:
        return ""
    ranks = ", ".join(str(f.rank) for f in inv.files)
    which = "that rank" if len(inv.files) == 1 else "those ranks"
    return (f"The traces come from a job of {world} ranks (world size {world}), but only "
            f"{present} of its {world} traces {'is' if present == 1 else 'are'} here "
            f"({'rank' if len(inv.files) == 1 else 'ranks'} {ranks}): the figures cover {which} only, "
            "and cross-rank checks (stragglers, waiting for other ranks) need every rank's trace.")


def run(result: AnalysisResult) -> RunView:
    """What the report is about (:class:`RunView`)."""
    inv = result.inventory
    return RunView(
        name=fmt.run_name(inv.input_dir),
        kicker=("hta-report · why is the GPU idle?" if result.aggregate.gpu_ranks
                else "hta-report · CPU-only traces: where does the step time go?"),
        input=inv.input_dir,
        ranks=fmt.plural(result.aggregate.ranks, "rank"),
        devices=devices(result),
        workload=_workload(inv.manifest),
        world_note=_world_note(result),
        device_names=device_names(result)[0],
        devices_note=device_names(result)[1],
        kind=_kind(result),
    )


def window_words(result: AnalysisResult) -> str:
    """``"of the analyzed steps"``, or ``"of the traced window"`` when no GPU
    rank has ``ProfilerStep`` annotations: the window of the headline's GPU
    figures and of the findings' gains."""
    gpu = [r for r in result.ranks if r.has_gpu] or result.ranks
    return "of the analyzed steps" if any(r.steps.count for r in gpu) else "of the traced window"


def headline(result: AnalysisResult) -> HeadlineSection:
    """The headline section of ``result`` (:class:`HeadlineSection`)."""
    return HeadlineSection.of(Basis.of(result))


def paced_step_words(result: AnalysisResult) -> str:
    """Where the host ran ahead of the GPU on GPU ranks (their replay's
    :attr:`~hta_report.model.Replay.gpu_paced_step_us`), the mean over those
    ranks of the time per step counting the GPU work the steps leave behind,
    in words: the mean ``ProfilerStep`` then measures the host's enqueueing
    alone (a 64 MiB pinned batch on an H200: 1.73 ms windows, 15.36 ms a
    step). Empty where no rank ran ahead."""
    gpu = [r for r in result.ranks if r.has_gpu]
    ahead = [r.replay.gpu_paced_step_us for r in gpu if r.replay.gpu_paced_step_us > 0]
    if not ahead:
        return ""
    on = "" if len(ahead) == len(gpu) == 1 else f" on {len(ahead)} of {len(gpu)} GPU ranks"
    mean = sum(a / len(ahead) for a in ahead)  # a mean that a saved result's 1e308s cannot overflow
    return (f"the host's; it ran ahead of the GPU{on}: {fmt.ms(mean)} a step counting "
            "the GPU work the steps leave behind")


def _span_note(result: AnalysisResult) -> str:
    """The GPU over its own span, labelled as such, and HTA's figure, labelled as HTA's."""
    a = result.aggregate
    gpu = [r for r in result.ranks if r.has_gpu and r.gpu_span_us > 0]
    if not gpu:
        return ""
    span = (fmt.ms(gpu[0].gpu_span_us) + " long") if len(gpu) == 1 else "each rank's"
    text = (f"Over the GPU's own span (first to last GPU operation of the trace, all of them; {span}): span busy "
            f"{fmt.pct(a.span_busy_pct)}")
    if any(not r.failed(TEMPORAL_STEP) for r in gpu):
        text += f"; HTA's temporal breakdown, on its whole-µs times: HTA busy {fmt.pct(a.hta_busy_pct)}"
    return text + "."


def integrity_notes(result: AnalysisResult, shown: Optional[Sequence[int]] = None) -> List[str]:
    """Where the traces show their GPU figures cannot be fully trusted
    (:class:`~hta_report.model.Integrity`), one line per rank and finding.
    ``shown``: indices of the ranks shown one by one (:func:`shown_ranks`);
    when they are not all the ranks, only theirs, then one line saying how
    many other ranks have notes (the JSON result keeps them)."""
    ranks = result.ranks if shown is None else [result.ranks[i] for i in shown]
    lines = [f"rank {r.rank}: {note}" for r in ranks for note in r.integrity.notes]
    if shown is not None and len(shown) < len(result.ranks):
        kept = set(shown)
        others = sum(1 for i, r in enumerate(result.ranks) if i not in kept and r.integrity.notes)
        if others:
            lines.append(f"{fmt.plural(others, 'more rank')} with such notes: in the JSON result "
                         "(ranks[].integrity.notes)")
    return lines


def _window_note(result: AnalysisResult) -> str:
    """The trace-window finding's title for the headline, unless all it says
    is that ranks of the job are missing (the run's ``world_note`` says that)."""
    f = next((f for f in result.findings if f.id == "trace-window"), None)
    if f is None or (_world_note(result) and len(f.evidence) == 1 and "world_size" in f.evidence[0]):
        return ""
    return f.title


def _stepped(result: AnalysisResult, f: Finding) -> bool:
    """Whether the rank a finding's gain is measured on has ``ProfilerStep`` annotations."""
    steps = {r.rank: r.steps.count > 0 for r in result.ranks}
    best = max(f.rank_gains, key=lambda g: g.gain_pct).rank if f.rank_gains else (f.ranks[0] if f.ranks else None)
    if best is None:
        return any(steps.values())
    return steps.get(best, any(steps.values()))


def _gain(result: AnalysisResult, f: Finding) -> str:
    """A finding's gain in words: what its fix is predicted to save, with the
    interval, where the replay predicts it (its ``whatif``; the finding's
    gain is then that saving, :func:`hta_report.rules.base.follow_prediction`);
    else its upper bound."""
    per = "per step" if _stepped(result, f) else "over the trace"
    of = "of the step" if _stepped(result, f) else "of the traced window"
    w = f.whatif
    if w is not None and w.step_us_before > 0 and w.plausible:
        if no_measurable_gain(w):
            return f"no measurable gain expected ({fmt.ms(w.step_us_before - w.step_us_after)} {per}, within the noise)"
        saved = w.step_us_before - w.step_us_after
        return (f"saves {fmt.ms(saved)} {per} ({fmt.share(saved, w.step_us_before)} {of}; "
                f"80 %: {fmt.ms(max(0.0, w.step_us_before - w.step_us_high))}–"
                f"{fmt.ms(max(0.0, w.step_us_before - w.step_us_low))})")
    if f.gain_ms_per_step <= 0:
        return "no gain estimate"
    return f"up to {fmt.ms(f.gain_ms_per_step * 1e3)} {per} ({fmt.pct(f.gain_pct)} {of})"


def no_measurable_gain(w: WhatIf) -> bool:
    """Whether the prediction ``w``'s 80 % interval reaches its step as
    measured: the fix may save nothing the noise would not hide."""
    return not w.measurable


def together(result: AnalysisResult) -> str:
    """What the fixes with a prediction buy together
    (:attr:`AnalysisResult.together`), with what each predicts alone and the
    findings it leaves out: ``"dataloader-bound and sync-in-step fixed
    together: step 20.0 → 12.0 ms (10.4–13.9), -40.0 %, on rank 0, replaying
    the trace (each alone: -30.0 %, -15.0 %); not in it: rank-straggler
    (no edit of the trace), ..."``; empty without one."""
    w = result.together
    if w is None or not w.step_us_before > 0 or not w.plausible:
        return ""
    parts = set(w.edit.split(" + "))
    mine = [f for f in result.findings if f.whatif is not None and f.whatif.plausible and f.whatif.edit in parts
            and (w.rank in f.ranks or w.slowest_of > 0 and f.whatif.slowest_of > 0)]
    if len(mine) < 2:
        return ""
    alone = [_change(f.whatif.step_us_before, f.whatif.step_us_after) for f in mine if f.whatif is not None]
    names = ", ".join(f.id for f in mine[:-1]) + f" and {mine[-1].id}"
    left = [f.id + (" (no prediction)" if f.whatif is None else " (not replayed with the others)")
            for f in result.findings if f not in mine and f.gain_pct >= TOP_MIN_GAIN_PCT]
    return (f"{names} fixed together: {_step_change(result, w)}, replaying the trace"
            + (f" (each alone: {', '.join(alone)})" if alone else "")
            + (f"; not in it: {', '.join(left)}" if left else ""))


def _step_change(result: AnalysisResult, w: WhatIf) -> str:
    """A what-if in words, with its 80 % interval: ``"step 16.8 → 10.8 ms
    (9.9–11.6), -35.5 %, on rank 0"`` (``traced window`` where the rank has no
    ``ProfilerStep``)."""
    steps = {r.rank: r.steps.count > 0 for r in result.ranks}
    unit = "step" if steps.get(w.rank, True) else "traced window"
    where = (f"the job's {unit} ({w.slowest_of} ranks that wait for each other at collectives; rank {w.rank} "
             "the slowest after the fix)" if w.slowest_of else f"on rank {w.rank}")
    return (f"{unit} {fmt.ms_range(w.step_us_before, w.step_us_after, w.step_us_low, w.step_us_high)}, "
            f"{_change(w.step_us_before, w.step_us_after)}, {where}")


def _change(before: float, after: float) -> str:
    """``after`` against ``before`` in % with its sign: ``"-35.5 %"``;
    ``"not available"`` where ``before`` is not positive or the change
    overflows (:func:`hta_report.render.fmt.share`)."""
    return fmt.share(after - before, before, sign=True)


def prediction(result: AnalysisResult, f: Finding) -> str:
    """The replay's prediction for ``f``'s fix (``Finding.whatif``) with its
    80 % interval: ``"step 16.8 → 10.8 ms (9.9–11.6), -35.5 %, on rank 0"``;
    ``"...: no measurable gain expected"`` where the interval reaches the
    step as measured, with what the critical path runs through instead where
    the fix saves nothing; empty without one (``FindingRow.edit`` says what
    the replay changed)."""
    w = f.whatif
    if w is None or not w.step_us_before > 0:
        return ""
    if not w.plausible:  # a saved result edited to a step of 0 µs, a negative one...
        return fmt.NOT_AVAILABLE
    text = _step_change(result, w)
    if not saves(w):
        text += _off_the_path(result, w.rank)
    elif no_measurable_gain(w):
        text += ": no measurable gain expected"
    return text


#: Critical-path entries named where a fix buys nothing alone.
OFF_PATH_ENTRIES = 3


def _off_the_path(result: AnalysisResult, rank: int) -> str:
    """Why a replayed fix saves nothing (under :data:`~hta_report.model.WHATIF_MIN_SAVING_PCT`):
    what the rank's replayed critical path runs through instead (its top
    :data:`OFF_PATH_ENTRIES` entries per step; kernel names shortened). A
    Tensor-Core fix on the V100 trace_diff test trace: its GEMMs are 28 % of
    the step, but the step waits for send/recv and the host."""
    r = next((r for r in result.ranks if r.rank == rank), None)
    path = r.replay.critical_path[:OFF_PATH_ENTRIES] if r is not None else []
    if not path:
        return ": no gain alone"
    short = short_names(op.name for op in path if op.kind == "gpu")
    parts = [f"{short.get(op.name, op.name) if op.kind == 'gpu' else op.name} {fmt.ms(op.us)}" for op in path]
    per = "per step" if r is not None and r.steps.count > 0 else "over the traced window"
    return (f": no gain alone, what it shortens is off the replayed critical path, which runs through "
            f"{', '.join(parts)} {per}")


def stack_note(result: AnalysisResult) -> str:
    """What the report says about source lines: empty when a rank has Python
    stacks (``with_stack`` traces); else what ``--with-stack`` would add."""
    if any(r.code.has_stacks for r in result.ranks) or not result.ranks:
        return ""
    return ("No Python stacks in the traces: record with hta-report collect --with-stack (or "
            "torch.profiler.profile(with_stack=True)) to see the lines of your code behind each finding "
            "(the .item() call, the Dataset's __getitem__, the optimizer step).")


def findings(result: AnalysisResult) -> Tuple[FindingRow, ...]:
    """Findings as shown, in the model's order (largest time at stake first)."""
    return tuple(FindingRow.of(result, f) for f in result.findings)


def no_findings(result: AnalysisResult) -> str:
    """What the report says when no rule fired: that the run looks healthy
    only when every trace was read and every rank analyzed in full (no rule
    left a rank out for a failed step); else what was not analyzed. Empty
    when a rule fired."""
    if result.findings:
        return ""
    missing = [f"{u.path} (unreadable)" for u in result.inventory.unreadable]
    missing += [f"rank {r.rank}: {', '.join(f.step for f in r.failures)}" for r in result.ranks if r.failures]
    missing += [f"rank {r.rank}: its GPU idle time ({r.integrity.unreliable_reason()})" for r in result.ranks
                if r.integrity.idle_unreliable]
    if not missing:
        return "No rule fired: the run looks healthy on what was checked (below)."
    shown = "; ".join(missing[:4]) + (f"; and {len(missing) - 4} more" if len(missing) > 4 else "")
    return (f"No rule fired on what was analyzed, but part of the run was not ({shown}): "
            "no verdict on that part.")


def checks(result: AnalysisResult) -> Tuple[CheckRow, ...]:
    """One row per catalogue rule: what it concluded on this result."""
    return tuple(CheckRow(id=c.id, title=c.title, status=c.status, detail=c.detail,
                          css=c.status.replace(" ", "-")) for c in result.checks)


def check_counts(result: AnalysisResult) -> str:
    """``"21 rules: 3 fired, 12 fine, 6 not checked"``."""
    counts: Dict[str, int] = {}
    for c in result.checks:
        counts[c.status] = counts.get(c.status, 0) + 1
    parts = [f"{counts[s]} {s}" for s in CHECK_STATUSES if counts.get(s)]
    return f"{len(result.checks)} rules: " + ", ".join(parts) if result.checks else "no rules ran"


def _badness(r: RankResult) -> Tuple[bool, float, float]:
    """How bad a rank looks, larger worse: first its GPU idle (% of its
    analyzed steps, :attr:`~hta_report.model.RankResult.idle_pct`) where it
    has GPU activity and that figure was computed, then its mean step (µs)."""
    idle = r.has_gpu and r.window_us > 0 and not r.failed(ATTRIBUTION_STEP, WINDOWS_STEP)
    return idle, r.idle_pct if idle else 0.0, r.steps.mean_us


def shown_ranks(result: AnalysisResult, limit: int = RANKS_SHOWN) -> Tuple[int, ...]:
    """Indices into ``result.ranks`` of the ranks the report shows one by one.

    Up to ``limit`` (:data:`RANKS_SHOWN`) ranks: every rank, in the model's
    order. Past it: the ``limit`` worst, worst first, the tie broken by rank
    order. Worst is the most GPU idle as % of the rank's analyzed steps,
    the figure the headline leads with ("idle X %" is its mean over ranks)
    and that every finding's gain is a part of (the idle attribution), so the
    ranks shown are those with the most time at stake; ranks without GPU
    figures follow those with them, and among them (and on equal idle) the
    longest mean step (µs) comes first: the slowest rank, which the others
    wait for at each collective."""
    ranks = result.ranks
    if len(ranks) <= limit:
        return tuple(range(len(ranks)))
    order = sorted(range(len(ranks)), key=lambda i: tuple(-x for x in _badness(ranks[i])) + (i,))
    return tuple(order[:limit])


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values`` (not empty), interpolated
    linearly between the two nearest: ``numpy.quantile``, as the step
    statistics' p50 and p90 (:func:`hta_report.analysis.steps.step_stats`)."""
    return float(np.quantile(values, q))


def rank_spread(result: AnalysisResult) -> Tuple[RankRow, ...]:
    """The per-rank table's spread rows: per statistic of :data:`SPREAD`
    (min, median, p90, max) one :class:`RankRow` (its ``rank`` the
    statistic's name, its ``device`` the ranks it covers) whose every
    column is that statistic over all of ``result``'s ranks that have the
    figure (GPU columns over the GPU ranks where it was computed, step times
    over the ranks with ``ProfilerStep`` annotations); ``–`` where none has it.
    Units as the table's: ms for step times, % for the rest."""
    ranks = result.ranks
    gpu = [r for r in ranks if r.has_gpu]
    windowed = [r for r in gpu if not r.failed(ATTRIBUTION_STEP, WINDOWS_STEP)]
    stepped = [r for r in ranks if r.steps.count]
    spanned = [r for r in gpu if not r.failed(SPAN_STEP)]

    def column(rs: Sequence[RankResult], get: Any, show: Any) -> List[str]:
        values = [float(get(r)) for r in rs]
        return [show(quantile(values, q)) if values else "–" for _, q in SPREAD]

    def count(v: float) -> str:
        return fmt.fixed(v, 0 if float(v).is_integer() else 1)

    cols = {
        "steps": column(ranks, lambda r: r.steps.count, count),
        "mean_step": column(stepped, lambda r: r.steps.mean_us, fmt.ms),
        "p90_step": column(stepped, lambda r: r.steps.p90_us, fmt.ms),
        "busy": column(windowed, lambda r: r.busy_pct, fmt.pct),
        "kernels": column(windowed, lambda r: r.kernel_busy_pct, fmt.pct),
        "idle": column(windowed, lambda r: r.idle_pct, fmt.pct),
        "span_busy": column(spanned, lambda r: r.gpu_span_busy_pct, fmt.pct),
        "dataloader": column(ranks, lambda r: r.cpu.dataloader_pct, fmt.pct),
        "sync": column(ranks, lambda r: r.cpu.sync_pct, fmt.pct),
        "exposed_comm": column(gpu, lambda r: r.exposed_comm_window_pct, fmt.pct),
        "exposed_memcpy": column(gpu, lambda r: r.exposed_copy_window_pct, fmt.pct),
    }
    over = f"all {fmt.plural(len(ranks), 'rank')}"
    return tuple(RankRow(rank=name, device=over, **{k: v[i] for k, v in cols.items()})
                 for i, (name, _) in enumerate(SPREAD))


def cut_note(result: AnalysisResult, shown: int) -> str:
    """What the per-rank table says when it shows ``shown`` of the ranks (:func:`shown_ranks`)."""
    n = len(result.ranks)
    return (f"The {shown} of {n} ranks with the most GPU idle (% of their analyzed steps; then the longest mean "
            f"step), worst first; below them, each column's min, median, p90 and max over all {n} ranks.")


def rank_rows(result: AnalysisResult) -> Tuple[RankRow, ...]:
    """One row per rank for the per-rank table."""
    return tuple(RankRow.of(r, RankFigures.of(r)) for r in result.ranks)


def _failures(r: RankResult) -> Tuple[FailureRow, ...]:
    return tuple(FailureRow(step=f.step, reason=f.reason) for f in r.failures)


def _chart(charts: Mapping[str, str], name: str) -> Optional[ChartImage]:
    return ChartImage(src=charts[name], narrow=charts.get(f"{name}@narrow", "")) if name in charts else None


def _step_range(numbers: Sequence[int]) -> str:
    """``"step 6"``, ``"steps 5–9"`` or ``"steps 2, 5, 9"``."""
    if len(numbers) == 1:
        return f"step {numbers[0]}"
    if list(numbers) == list(range(numbers[0], numbers[-1] + 1)):
        return f"steps {numbers[0]}–{numbers[-1]}"
    return "steps " + ", ".join(map(str, numbers))


def tensorboard(r: RankResult, last_step_included: bool) -> str:
    """The TensorBoard profiler's overview figures of the rank, labelled with
    their window (:class:`~hta_report.model.TensorBoardOverview`); empty
    without steps or when the step failed."""
    t = r.tensorboard
    if not t.steps or r.failed(TENSORBOARD_STEP):
        return ""
    last = "" if last_step_included else (
        "; the plugin also counts the trace's last step, which HTA leaves out: --include-last-step keeps it")
    # each figure labelled as the overview's: its window (first and last step included) is not the analyzed steps'
    occupancy = (f", TensorBoard SM efficiency {fmt.pct(t.sm_efficiency_pct)} and TensorBoard achieved occupancy "
                 f"{fmt.pct(t.achieved_occupancy_pct)} (estimated)" if t.kernels_with_data else "")
    return (f"The TensorBoard profiler's overview, by its definitions over {_step_range(t.steps)} (the first step "
            f"included{last}): TensorBoard GPU utilization {fmt.pct(t.gpu_utilization_pct)}{occupancy}.")


def gpu_time(r: RankResult, last_step_included: bool = False, figures: Optional[RankFigures] = None) -> GpuTime:
    """The rank's GPU time in each window (:class:`GpuTime`); ``figures``: the
    rank's, when already formatted."""
    x = figures or RankFigures.of(r)
    t = r.temporal
    of = "of the analyzed steps" if r.steps.count else "of the traced window"
    if r.failed(TEMPORAL_STEP):
        hta = f"HTA's temporal breakdown: {NOT_COMPUTED} ({_failure(r, TEMPORAL_STEP)})."
    else:
        who = "HTA's temporal breakdown, on its whole-µs times" if t.source == "HTA" else \
            "The temporal breakdown as HTA defines it, computed by hta-report from the exact times (HTA's failed)"
        # labelled as HTA's: over the span, on other times, its idle is not the analyzed steps' idle beside it
        hta = (f"{who}, over {fmt.ms(t.total_us)}: HTA compute {fmt.pct(t.compute_pct)}, HTA non-compute "
               f"{fmt.pct(t.non_compute_pct)}, HTA idle {fmt.pct(t.idle_pct)}.")
    return GpuTime(
        window=f"GPU busy {x.busy} {of} (kernels {x.kernels}, idle {x.idle}), from the exact times.",
        span=(f"Over its own span (first to last GPU operation of the trace, all of them: "
              f"{x.gpu_span}): span busy {x.span_busy}, exact times."),
        hta=hta, replaced=tuple(f"{f.step}: {f.reason}" for f in r.replaced),
        tensorboard=tensorboard(r, last_step_included))


def occupancy(r: RankResult) -> Union[Occupancy, Absent]:
    """How well the rank's compute kernels fill the GPU (:class:`Occupancy`),
    or why it is not shown: :data:`NOT_COMPUTED` (the step failed) or
    ``missing`` (no occupancy args)."""
    if r.failed(OCCUPANCY_STEP):
        return Absent(NOT_COMPUTED, _failure(r, OCCUPANCY_STEP))
    o = r.occupancy
    if not o.kernels_with_data:
        return Absent("missing", o.missing_reason or "no compute kernels in the analyzed steps")
    labels = short_names([k.name for k in o.top_small])
    return Occupancy(
        per="per step" if r.steps.count else "over the trace (no ProfilerStep)",
        kernels_with_data=fmt.num(o.kernels_with_data),
        kernel_time=fmt.ms(o.kernel_us_per_step), sm_efficiency=fmt.pct(o.sm_efficiency_pct),
        occupancy=fmt.pct(o.achieved_occupancy_pct), small=fmt.ms(o.small_grid_us_per_step),
        small_pct=fmt.pct(o.small_grid_pct), idle_sm=fmt.ms(o.idle_sm_us_per_step),
        kernels=tuple(SmallKernelRow(name=labels[k.name], full=k.name, shortened=labels[k.name] != k.name,
                                     count=fmt.num(k.count), total=fmt.ms(k.total_us),
                                     blocks=fmt.fixed(k.blocks_per_sm, 2, grouped=False),
                                     occupancy=fmt.pct(k.occupancy_pct), idle_sm=fmt.ms(k.idle_sm_us), pct=fmt.pct(k.pct))
                      for k in o.top_small),
    )


def _failure(r: RankResult, step: str) -> str:
    return next((f.reason for f in r.failures if f.step == step), "")


def gib(nbytes: int) -> str:
    """bytes -> ``"1.25 GiB"`` / ``"850.0 MiB"`` (powers of 1024, as device memory is counted)."""
    if nbytes >= 2 ** 30:
        return f"{fmt.fixed(nbytes / 2 ** 30, 2)} GiB"
    return f"{fmt.fixed(nbytes / 2 ** 20, 1)} MiB"


def memory(r: RankResult) -> Union[Memory, Absent]:
    """The rank's memory (:class:`Memory`: per device its peaks and capacity,
    ``–`` when the trace has none, e.g. the CPU), or why it is not shown:
    :data:`NOT_COMPUTED` or ``missing`` (``reason`` says how to record it)."""
    if r.failed(MEMORY_STEP):
        return Absent(NOT_COMPUTED, _failure(r, MEMORY_STEP))
    m = r.memory
    if not m.recorded:
        return Absent("missing", HOW_TO_RECORD_MEMORY)
    if not m.devices:  # every event held values no device has
        return Absent("missing", f"All {m.out_of_range:,} [memory] events of this trace hold values no "
                                 "device has (a total beyond 2**50 bytes or the device's memory, NaN, a "
                                 "device id outside -1..127): not believed, so no memory figures.")
    rows = tuple(DeviceMemoryRow(device=d.device, events=fmt.num(d.events), allocated=gib(d.peak_allocated_bytes),
                                 reserved=gib(d.peak_reserved_bytes),
                                 capacity=gib(d.capacity_bytes) if d.capacity_bytes else "– (not in the trace)",
                                 allocated_pct=fmt.pct(d.peak_allocated_pct) if d.capacity_bytes else "–",
                                 reserved_pct=fmt.pct(d.peak_reserved_pct) if d.capacity_bytes else "–")
                 for d in m.devices)
    return Memory(device=m.device, devices=rows, main=next((d for d in rows if d.device == m.device), None))


def step_breakdown(r: RankResult) -> Union[StepBreakdownTable, Absent]:
    """The rank's per-step breakdown table (ms, the warm-up step marked), or
    why it is not shown: :data:`NOT_COMPUTED` or ``missing`` (no ProfilerStep)."""
    if r.failed(STEP_BREAKDOWN_STEP):
        return Absent(NOT_COMPUTED, _failure(r, STEP_BREAKDOWN_STEP))
    if not r.step_breakdown:
        return Absent("missing", "no ProfilerStep annotations")
    return StepBreakdownTable(
        headings=tuple(STEP_PARTS.values()),
        rows=tuple(BreakdownRow(number=str(b.number), warmup=b.warmup, total=fmt.ms(b.duration_us),
                                parts=tuple(fmt.ms(getattr(b, f"{k}_us")) for k in STEP_PARTS))
                   for b in r.step_breakdown))


def reading_notes(result: AnalysisResult) -> List[str]:
    """How the traces were read, where it differs from reading every file as
    written: the processes that wrote several profiling windows, of which
    the latest is analyzed (:class:`~hta_report.model.WorkerWindows`), and
    the event names PyTorch left unescaped, repaired (:mod:`hta_report.load.repair`).
    One line each; empty when every file was read as it is."""
    notes = []
    for w in result.inventory.windows:
        n = len(w.others) + 1
        others = ", ".join(fmt.base_name(o) for o in w.others)
        notes.append(f"{w.worker} wrote {n} profiling windows (one file per profiler cycle): they are windows "
                     f"of one rank, not {n} ranks. This report analyzes the latest full one, "
                     f"{fmt.base_name(w.analyzed)}; set aside: {others} (name a file to analyze that window: "
                     "hta-report analyze FILE).")
    notes += [f"{f.path}: {fmt.plural(f.repaired_names, 'event name')} with unescaped double quotes repaired "
              "(PyTorch writes them so until pytorch/kineto#1459; the rest of the file is as written)"
              for f in result.inventory.files if f.repaired_names]
    notes += [f"{f.path}: {fmt.plural(f.shared_correlations, 'event')} shared a correlation id with another "
              "launch or kernel (CUPTI gives each launch its own); they were linked to their kernels in time "
              "order, so launch delays and kernel attribution for them are approximate"
              for f in result.inventory.files if f.shared_correlations]
    notes += [f"{f.path}: {fmt.plural(f.external_id_links, 'GPU event')} carried no stream or correlation id "
              "(a ROCm build's roctracer wrote them so); each was read on its track's stream and linked to the "
              "launch call with its External id"
              for f in result.inventory.files if f.external_id_links]
    notes += [f"{f.path}: {fmt.plural(f.enclosing_steps, 'ProfilerStep annotation')} enclosed other steps and "
              "were left out: the steps analyzed are the inner ones"
              for f in result.inventory.files if f.enclosing_steps]
    notes += parser_notes(result)
    return notes


#: How :func:`parser_notes` names each reader (``TraceFileInfo.parser``).
READERS = {"native": "the native reader (C++)",
           "python": ("the Python reader (the native reader was not built where they were parsed, or "
                      "HTA_REPORT_PARSER=python; a parse read from the cache keeps the reader that made it)"),
           "native and python": "the native reader, with the Python reader on the runs of events the native one "
                                "does not read exactly (names to repair, unusual values)",
           "hta": "HTA's own parser or the validating reader (the fast readers do not reproduce these files exactly)"}


def parser_notes(result: AnalysisResult) -> List[str]:
    """One line per reader that read the events of some files
    (``TraceFileInfo.parser``): which reader, and which files where not all;
    none for results saved before the reader was recorded."""
    files = [f for f in result.inventory.files if f.parser in READERS]
    by: Dict[str, List[str]] = {}
    for f in files:
        by.setdefault(f.parser, []).append(f.path)
    if len(by) == 1 and len(files) == len(result.inventory.files):
        (parser,) = by
        return [f"Events of {'the file' if len(files) == 1 else f'all {len(files)} files'} read by {READERS[parser]}."]
    return [f"Events read by {READERS[p]}: {', '.join(paths)}." for p, paths in by.items()]


def replaced(result: AnalysisResult) -> List[str]:
    """One line per HTA analysis that failed on a rank, or was not run on it
    (:data:`~hta_report.model.NOT_RUN`: too many streams), and that
    hta-report computed itself from the exact times instead (the rank is complete)."""
    return [f"rank {r.rank}: HTA's {f.step.replace(' (HTA)', '')} "
            f"{'was ' + f.reason if f.reason.startswith(NOT_RUN) else f'failed ({f.reason})'}; hta-report computed "
            "it from the exact times, with HTA's definitions" for r in result.ranks for f in r.replaced]
