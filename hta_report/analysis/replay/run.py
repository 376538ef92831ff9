"""Replay a rank's execution graph and predict its step time after an edit (issue 30).

The stage between the loaded events and the advice: :func:`replay` builds
the graph (:mod:`.graph`), schedules it with the measured durations
(:func:`~.schedule.schedule`: every node starts when its latest predecessor allows, one
queue per stream, host threads in order), compares the replayed step times
with the measured ones (the fidelity check), walks the critical path of each
step (:func:`~.path.critical_path`) and replays edits of the graph
(:data:`~.edits.EDITS`, :mod:`.whatif`):
what a fix would buy.

Step time is the step thread's time from one ``ProfilerStep`` boundary to the
next, mapped into replay time (markers in the host chain); GPU work a step
leaves behind counts where a later synchronization waits for it. Without
steps, the whole window: from its start to the last host call's or GPU
operation's end. Where the host ran ahead of the GPU, the what-ifs start from
the :func:`~.schedule.span` per step instead: from the end of the GPU work queued before
the first window (:meth:`~.graph.Graph.backlog`) to the end of the
work the last step launched (``Replay.gpu_paced_step_us``). Times are µs.

Not modelled: collectives keep their measured durations (other ranks are
not replayed), host threads interact only through the GPU (a thread's idle
time waiting for another thread is fixed host time), and the launch queue
has no depth limit.

:func:`replay` runs in named stages, each a function of this module:
:func:`rank_graph` (the graph and its windows), :func:`baseline` (the
unmodified schedule against the measured steps), :func:`path_entries` (the
critical path), :func:`whatif_basis` (the step the what-ifs start from),
:func:`replay_notes` and :func:`withheld` (what the report says of the
replay, as codes), :func:`whatif_context` and :func:`whatifs` (the edits
replayed: alone, combined, all together).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from ... import intervals
from ...model import ALL_EDITS, Replay, ReplayNote, ReplayOp, WhatIf, combined_edit, saves
from ...replay_terms import EditLabel, NoteCode
from ..events import RankEvents
from ..gap_causes import late_starts
from ..integrity import graph_launches_without_ops
from ..launch_calls import KERNEL_LAUNCH_APIS
from ..regions import LAUNCH_CATEGORIES, in_windows, per_step
from ..steps import analyzed_windows, step_windows
from .edits import PROFILED_HOST_CATEGORIES, fixes, warmup_host_intervals, warmup_nodes
from .graph import E_LAUNCH, Graph, build_graph, edge_targets, step_thread
from .path import PathLabels, critical_path, name_host_work
from .schedule import measured_times, schedule, span, step_times
from .whatif import ReplayContext, WhatIfRunner

#: Ops named on a rank's critical path (:attr:`Replay.critical_path`).
TOP_PATH_OPS = 5
#: Up to this many edits that change a rank, every combination of them is
#: replayed (``Replay.whatifs``, labels :func:`~hta_report.model.combined_edit`);
#: past it only the pairs and all of them (a replay per combination).
MAX_ALL_SUBSETS = 3
#: Where the GPU falls behind the ProfilerStep windows by more than this much (% of the mean
#: step) each step (:func:`gpu_lag_growth`), the host ran ahead of the GPU and the windows measure
#: the host alone (on an H200, 2.0 ms a step for a GPU busy 16.6 ms: bench/record_cuda.py
#: pageable-copy after its fix): the what-ifs then start from the replayed span per step (the
#: steps' time up to the end of the GPU work they launched), the basis their savings are measured
#: on. 5 %: proposal.
HOST_AHEAD_PCT = 5.0
#: With one analyzed step no lag can grow (:func:`gpu_lag_growth` needs two): there the host ran
#: ahead when the step's span (up to the end of the GPU work it launched) exceeds its window by this
#: much (%). Larger than :data:`HOST_AHEAD_PCT` because a synchronous step also ends with its last
#: kernels still running; 25 %: proposal. Without it a one-step trace of a GPU-bound loop measured
#: on its host window predicted "200 µs -> 0 µs" for a fix that shortens the kernels.
ONE_STEP_AHEAD_PCT = 25.0
#: What-ifs are not made on a rank whose analyzed window is this much one-off
#: warm-up (%, :class:`~hta_report.model.Warmup`: context creation, allocator
#: growth, first launches, capture, autotuning): a fix to the steady step
#: cannot be read off cold start (proposal: half the window).
WITHHOLD_WARMUP_PCT = 50.0
#: What-ifs are not made on a rank where launched work started late on an idle
#: GPU (:func:`~hta_report.analysis.gap_causes.late_starts`, 1 ms or more after
#: its launch) this many times or more (a pattern, not a one-off: the
#: ``gpu-idle`` rule's count, ``rules.idle.MIN_LATE_STARTS``) ...
WITHHOLD_LATE_STARTS = 3
#: ... for this share of the analyzed windows (%) or more: the size of the
#: replay's typical error (docs/whatif.md), past which a prediction that moves
#: the launches, and with them those delays, cannot be read (proposal).
WITHHOLD_LATE_PCT = 10.0
#: The profiler's own host cost per recorded host event (µs, low and high): measured
#: on one H200's host (2026-11-28, docs/whatif.md), profiled against unprofiled steps of the same
#: `collect` workloads, 3.1 to 6.2 µs per recorded host event (ops, runtime calls, annotations;
#: shapes recorded). Another host, or ``with_stack``, costs more or less: an estimate, said as one.
PROFILER_EVENT_US = (3.0, 6.0)
#: The host events PROFILER_EVENT_US was measured over: :data:`~.edits.PROFILED_HOST_CATEGORIES`
#: (ops, annotations, runtime and driver calls), imported above.
#: A host-bound GPU rank (this % of the critical path or more on the host) gets the profiler-cost
#: note ...
PROFILER_HOST_SHARE_PCT = 50.0
#: ... where the low estimate is this share of the measured step (%) or more (the replay's
#: typical error, docs/whatif.md: below it the note would not change a reading).
PROFILER_NOTE_PCT = 10.0


def rank_graph(ev: RankEvents, hw: np.ndarray) -> Union[NoteCode, Tuple[Graph, np.ndarray, bool]]:
    """Stage 1: the graph :func:`replay` schedules, the windows it measures (``(n, 2)``
    µs) and whether they are steps; or why the rank is not replayed (one of
    :data:`~hta_report.replay_terms.NOT_REPLAYED`, a string). A rank
    without GPU work is its host timeline: the step thread's markers and
    the host time between them."""
    if len(hw) == 0:
        return NoteCode.NO_WINDOW
    steps = len(analyzed_windows(step_windows(ev))) > 0
    w = np.asarray(hw, dtype=float)
    lo, hi = float(w[0, 0]), float(w[-1, 1])
    if not steps and ev.has_gpu:  # the window ends at the step thread's last runtime call
        w = np.array([[lo, _last_call_end(ev, lo)]])
        hi = float(w[0, 1]) + 1e-6
    elif not steps:
        w = np.array([[lo, hi]])
        hi += 1e-6
    g = build_graph(ev, w.ravel(), lo, hi)
    if ev.has_gpu and (not g.has_gpu or not ((g.ekind == E_LAUNCH).any())):
        return NoteCode.NO_LAUNCH
    if len(g.order) < g.size:
        return NoteCode.CYCLE
    return g, w, steps


def note(code: NoteCode, **values: float) -> ReplayNote:
    """The :class:`~hta_report.model.ReplayNote` of ``code`` with its figures
    ``values`` (the keys :class:`~hta_report.replay_terms.NoteCode` lists)."""
    return ReplayNote(code=code.value, values={k: float(v) for k, v in values.items()})


@dataclass(frozen=True)
class Baseline:
    """The unmodified replay of a rank (:func:`baseline`): every node's
    replayed ``start``, ``end`` (µs) and binding edge ``arg`` (-1: none,
    :func:`~.schedule.schedule`), and per analyzed window its ``measured``
    and ``replayed`` time (``(n,)`` µs)."""

    start: List[float]
    end: List[float]
    arg: List[int]
    measured: np.ndarray
    replayed: np.ndarray

    @property
    def measured_us(self) -> float:
        """The mean measured window (µs)."""
        return float(self.measured.mean())

    @property
    def replayed_us(self) -> float:
        """The mean replayed window (µs)."""
        return float(self.replayed.mean())

    def binding(self, edges: int) -> np.ndarray:
        """Per edge (of ``edges``), whether it binds its target."""
        out = np.zeros(edges, dtype=bool)
        held = np.asarray(self.arg, dtype=np.int64)
        out[held[held >= 0]] = True
        return out


def baseline(g: Graph, w: np.ndarray, steps: bool) -> Baseline:
    """Stage 2: schedule ``g`` with its measured inputs and time the windows
    ``w`` as measured and as replayed (the fidelity check; without steps
    each window lasts to the last GPU operation's end)."""
    start, end, arg = schedule(g)
    return Baseline(start=start, end=end, arg=arg, measured=measured_times(g, w, not steps),
                    replayed=step_times(g, w, end, not steps))


def path_entries(ev: RankEvents, g: Graph, w: np.ndarray, b: Baseline) -> Tuple[List[ReplayOp], float]:
    """Stage 3: the critical path of the windows ``w`` in the schedule ``b``:
    its :data:`TOP_PATH_OPS` entries with the most time (µs per window,
    :func:`~.path.critical_path`, host work named by
    :func:`~.path.name_host_work`) and the share of the path on the host (%,
    0 for an empty path)."""
    labels = PathLabels(g)
    acc: Dict[int, float] = defaultdict(float)
    host_us: Dict[int, float] = defaultdict(float)
    for a, z in w.tolist():
        on_path, host_edges = critical_path(g, b.start, b.end, b.arg, b.end[g.markers[a]], g.markers[z], labels)
        for code, us in on_path.items():
            acc[code] += us
        for k, us in host_edges.items():
            host_us[k] += us
    named = name_host_work(ev, g, labels.named(acc), host_us)
    total = sum(named.values())
    top = sorted(named.items(), key=lambda kv: -kv[1])[:TOP_PATH_OPS]
    n = len(w)
    host = sum(us for (_, kind), us in named.items() if kind == "cpu")
    entries = [ReplayOp(name=nm, kind=kind, us=us / n) for (nm, kind), us in top]
    return entries, (min(100.0, max(0.0, 100 * host / total)) if total > 0 else 0.0)


@dataclass(frozen=True)
class Basis:
    """The step the what-ifs start from (:func:`whatif_basis`): ``base``,
    the unmodified replay's :func:`~.schedule.span` (µs); ``ahead``, whether
    the host ran ahead of the GPU; ``step_us``, the mean step the savings come
    off (µs: the span per window where the host ran ahead, else the measured
    step)."""

    base: float
    ahead: bool
    step_us: float


def whatif_basis(g: Graph, w: np.ndarray, steps: bool, b: Baseline) -> Basis:
    """Stage 4: whether the host ran ahead of the GPU (the GPU's lag grows
    by :data:`HOST_AHEAD_PCT` of the step each step, :func:`gpu_lag_growth`;
    with one step, its span past the window by :data:`ONE_STEP_AHEAD_PCT`),
    and from there the step the what-ifs start from."""
    n = len(w)
    m_mean = b.measured_us
    base = span(g, w, b.end, steps)
    # a host that ran ahead of the GPU: the steps' time counting the GPU work they leave behind
    drift = gpu_lag_growth(g, w) if steps and n > 1 else 0.0
    # one analyzed step shows no growth: there, GPU work that runs well past the window (the span a quarter
    # longer than the window or more, ONE_STEP_AHEAD_PCT) is the host running ahead of a busier GPU
    ahead = drift > m_mean * HOST_AHEAD_PCT / 100 or \
        (steps and n == 1 and m_mean > 0 and base > m_mean * (1 + ONE_STEP_AHEAD_PCT / 100))
    return Basis(base=base, ahead=ahead, step_us=base / n if ahead else m_mean)


def replay_notes(ev: RankEvents, steps: bool, basis: Basis, measured_us: float) -> List[ReplayNote]:
    """Stage 5: what the replay of a rank leaves out, as codes
    (:class:`~hta_report.replay_terms.NoteCode`, in the order the report
    says them): one window without steps, the limits of a GPU rank's replay
    or a host-only replay, and a host that ran ahead (with the step the
    what-ifs start from and the measured one, µs)."""
    notes = [note(NoteCode.NO_STEPS)] if not steps else []
    notes.append(note(NoteCode.GPU_LIMITS if ev.has_gpu else NoteCode.HOST_ONLY))
    if basis.ahead:
        notes.append(note(NoteCode.HOST_AHEAD, before_us=basis.step_us, measured_us=measured_us))
    return notes


def profiler_cost(ev: RankEvents, w: np.ndarray, host_share_pct: float, measured_us: float) -> Optional[ReplayNote]:
    """Stage 5b: the profiler's own cost on a host-bound GPU rank: the host
    events recorded a step (every thread: backward runs on autograd's)
    inside the windows ``w`` (``(n, 2)`` µs) times :data:`PROFILER_EVENT_US`
    (µs, per step), where the rank's critical path is at least
    :data:`PROFILER_HOST_SHARE_PCT` host time and the low estimate is
    :data:`PROFILER_NOTE_PCT` of ``measured_us`` (the measured step, µs) or
    more; else None. Without the profiler the host's part of such a step is
    shorter, so the step may be the GPU's: the what-ifs are the profiled run's."""
    if not ev.has_gpu or host_share_pct < PROFILER_HOST_SHARE_PCT or measured_us <= 0 or not len(w):
        return None
    cpu = ev.cpu
    cpu = cpu[cpu["s_cat"].isin(PROFILED_HOST_CATEGORIES)]
    events = per_step(len(in_windows(cpu, w)), len(w))
    low, high = (min(events * us, measured_us) for us in PROFILER_EVENT_US)  # never more than the step
    if low < measured_us * PROFILER_NOTE_PCT / 100:
        return None
    return note(NoteCode.PROFILER_COST, events=events, low_us=low, high_us=high, step_us=measured_us,
                host_share_pct=host_share_pct)


def withheld(ev: RankEvents, warmup_us: float, step_us: float, w: Optional[np.ndarray] = None) -> Optional[ReplayNote]:
    """Stage 6: why no what-if is made on this rank (None: they are): a
    window that is mostly one-off warm-up (:data:`WITHHOLD_WARMUP_PCT` of
    ``step_us``, µs; ``warmup_us`` per step, µs), kernel launches whose GPU
    records the trace lost (no GPU operation at all), or graph launches whose
    kernels it lost (any: the GPU time of a replay is unknown, and the
    prediction would leave it out), or launched work that started late on
    an idle GPU (:func:`~hta_report.analysis.gap_causes.late_starts`) at
    least :data:`WITHHOLD_LATE_STARTS` times and for
    :data:`WITHHOLD_LATE_PCT` of the analyzed windows ``w`` (``(n, 2)`` µs):
    the replay holds each such delay as its operation's launch latency, so
    an edit that moves the launches would move the delays with them,
    overlapping what ran one after another; what the GPU waited on is not in
    the trace, and nothing says it would wait less or more.""" 
    if step_us > 0 and warmup_us >= step_us * WITHHOLD_WARMUP_PCT / 100:
        return note(NoteCode.WARMUP, warmup_pct=100 * warmup_us / step_us)
    if not ev.has_gpu:
        launches = int(ev.cpu["s_name"].isin(KERNEL_LAUNCH_APIS).sum())
        return note(NoteCode.LOST_GPU, launches=float(launches)) if launches else None
    graphs, dropped = graph_launches_without_ops(ev)
    if dropped:
        return note(NoteCode.DROPPED_GRAPHS, dropped=float(dropped), graphs=float(graphs))
    if w is not None and len(w):
        late, starts = late_starts(ev)
        late_us = intervals.total(intervals.intersect(late, intervals.union(w[:, 0], w[:, 1])))
        window_us = float((w[:, 1] - w[:, 0]).sum())
        if starts >= WITHHOLD_LATE_STARTS and window_us > 0 and late_us >= window_us * WITHHOLD_LATE_PCT / 100:
            return note(NoteCode.LATE_STARTS, late_pct=100 * late_us / window_us, starts=float(starts))
    return None


def whatif_context(ev: RankEvents, g: Graph, w: np.ndarray, steps: bool, b: Baseline, basis: Basis, rank: int,
                   devices: Sequence[str], warmup: Optional[pd.DataFrame]) -> ReplayContext:
    """Stage 7: what every what-if of the rank shares
    (:class:`~.whatif.ReplayContext`): the step the savings come off and
    each window's measured time on the same basis (scaled where the host ran
    ahead), the edges that bind in the unmodified schedule, and the warm-up
    calls no edit removes (:func:`~.edits.warmup_nodes`)."""
    m_mean = b.measured_us
    windows = b.measured * (basis.step_us / m_mean) if m_mean > 0 else b.measured
    return ReplayContext(ev=ev, g=g, w=w, steps=steps, measured=basis.step_us, base=basis.base,
                         measured_windows=windows, rank=rank, devices=tuple(devices),
                         binding=b.binding(len(g.off)),
                         protect=warmup_nodes(g, warmup) if warmup is not None else None,
                         protect_host=warmup_host_intervals(g, warmup))


def combinations_to_replay(saving_alone: Sequence[str]) -> List[List[str]]:
    """The combinations of the edits ``saving_alone`` (those that save time
    alone) the replay makes: every one of two or more where they are
    :data:`MAX_ALL_SUBSETS` or fewer, else the pairs and all of them."""
    return [list(c) for size in range(2, len(saving_alone) + 1) for c in combinations(saving_alone, size)
            if len(saving_alone) <= MAX_ALL_SUBSETS or size in (2, len(saving_alone))]


def whatifs(runner: WhatIfRunner) -> List[WhatIf]:
    """Stage 8: the what-ifs of the rank: each fix's edit of :data:`~.edits.EDITS`
    (:func:`~.edits.fixes`: not :attr:`~hta_report.replay_terms.EditLabel.NO_PROFILER`)
    alone, the combinations of those that save time alone (:func:`combinations_to_replay`),
    and every edit that changes the rank at once (:data:`~hta_report.model.ALL_EDITS`,
    :func:`together`)."""
    labels = fixes()
    singles = [runner.whatif([label]) for label in labels]
    out = [x for x, _, _ in singles]
    # combinations of the edits that save time alone; and all the edits that change the graph at once, since
    # one that saves little alone can save much with another, when both constraints hold the same step
    saving_alone = [label for label, (x, _, _) in zip(labels, singles) if saves(x)]
    changing = [label for label, (_, did, _) in zip(labels, singles) if did]
    out += [runner.whatif(c)[0] for c in combinations_to_replay(saving_alone)]
    out.append(together(runner, out, changing))
    return out


def together(runner: WhatIfRunner, made: List[WhatIf], changing: List[str]) -> WhatIf:
    """The :data:`~hta_report.model.ALL_EDITS` what-if: the edits
    ``changing`` (those that change the rank's graph) made at once, taken
    from ``made`` where it holds that combination; the step unchanged where
    no edit changes the rank."""
    before, rank = runner.ctx.measured, runner.ctx.rank
    if len(changing) > 1:
        everything: Optional[WhatIf] = next((x for x in made if x.edit == combined_edit(changing)), None) \
            or runner.whatif(changing)[0]
    else:
        everything = next((x for x in made if x.edit in changing), None)
    if everything is None:
        return WhatIf(edit=ALL_EDITS, step_us_before=before, rank=rank, applies=bool(changing),
                      description="no edit changes this rank", step_us_after=before, step_us_low=before,
                      step_us_high=before)
    return WhatIf(edit=ALL_EDITS, step_us_before=before, rank=rank, applies=bool(changing),
                  description=everything.description, step_us_after=everything.step_us_after,
                  step_us_low=everything.step_us_low, step_us_high=everything.step_us_high)


def replay(ev: RankEvents, hw: np.ndarray, rank: int = 0, devices: Sequence[str] = (),
           warmup: Optional[pd.DataFrame] = None, warmup_us: float = 0.0) -> Replay:
    """Replay one rank (see the module doc) over its analyzed host windows
    ``hw`` (``(n, 2)`` µs: the analyzed ``ProfilerStep`` windows, or the whole
    trace), with the fidelity figures, the critical path and the what-ifs of
    :data:`~.edits.EDITS`: one by one, the combinations of those that change
    the rank (:data:`MAX_ALL_SUBSETS`), and all of them (:data:`ALL_EDITS`). A
    rank whose GPU work no host call launches in the window is not replayed:
    its ``notes`` say why and the figures stay 0. ``devices``: the rank's
    ``deviceProperties`` names (the pinned copy rate's fallback); ``warmup``:
    its one-off warm-up calls (CPU rows), which no edit removes, and
    ``warmup_us`` their time per analyzed step (µs): where it is
    :data:`WITHHOLD_WARMUP_PCT` of the step or more, no what-if is made and
    a note says why. A rank whose host launched kernels that left no GPU
    record, or CUDA-graph launches whose kernels the trace lacks
    (:func:`~hta_report.analysis.integrity.graph_launches_without_ops`), gets no what-if either."""
    built = rank_graph(ev, hw)
    if isinstance(built, str):
        return Replay(notes=[note(built)])
    g, w, steps = built
    b = baseline(g, w, steps)
    path, host_share = path_entries(ev, g, w, b)
    basis = whatif_basis(g, w, steps, b)
    m_mean, r_mean = b.measured_us, b.replayed_us
    out = Replay(measured_step_us=m_mean, replayed_step_us=r_mean,
                 error_pct=abs(r_mean - m_mean) / m_mean * 100 if m_mean > 0 else 0.0, steps=len(w),
                 critical_path=path, host_share_pct=host_share, notes=replay_notes(ev, steps, basis, m_mean),
                 gpu_paced_step_us=basis.step_us if basis.ahead else 0.0)
    cost = profiler_cost(ev, w, host_share, m_mean) if not basis.ahead else None
    runner = WhatIfRunner(whatif_context(ev, g, w, steps, b, basis, rank, devices, warmup))
    if cost is not None:
        out.notes.append(without_profiler(runner, cost))
    why_not = withheld(ev, warmup_us, m_mean, w)
    if why_not is not None:
        out.notes.append(why_not)
        return out
    out.whatifs = whatifs(runner)
    return out


def without_profiler(runner: WhatIfRunner, cost: ReplayNote) -> ReplayNote:
    """The profiler-cost note ``cost`` with the step the replay predicts without the
    profiler (:attr:`~hta_report.replay_terms.EditLabel.NO_PROFILER`, the edit's own range and
    measured error: :func:`~.whatif.interval`) as ``noprof_us``, ``noprof_low_us`` and
    ``noprof_high_us`` (µs), the high end at most the measured step: removing the profiler
    removes host work only. The note keeps its figures; the prediction is the profiled
    step's host made cheaper, not a fix, and is never among the what-ifs."""
    x, _, _ = runner.whatif([EditLabel.NO_PROFILER])
    high = max(min(x.step_us_high, runner.ctx.measured), x.step_us_after)
    values = dict(cost.values, noprof_us=x.step_us_after, noprof_low_us=x.step_us_low, noprof_high_us=high)
    return ReplayNote(code=cost.code, values=values)


def _last_call_end(ev: RankEvents, lo: float) -> float:
    """The last end of a runtime or driver call on the step thread
    (:func:`~.graph.step_thread`), at least ``lo`` (µs)."""
    cpu = ev.cpu
    calls = cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES) & cpu["thread"].eq(step_thread(ev))]
    return max(lo, float(calls["end"].max())) if len(calls) else lo


def gpu_lag_growth(g: Graph, w: np.ndarray) -> float:
    """How much later (µs per step) the GPU finishes each step's work than the
    step's window ends, growing from the first analyzed window to the last:
    ``(lag_last - lag_first) / (n - 1)``, where a window's lag is the latest
    measured end of the GPU work launched up to its end, less that end (0
    when the GPU is done first). A host throttled by the GPU (syncs, blocking
    copies) keeps a constant lag: 0; a host that runs ahead of a busier GPU
    adds the GPU's surplus every step: its windows measure the host alone."""
    dst = edge_targets(g.ptr)
    launch = g.ekind == E_LAUNCH
    if not launch.any() or len(w) < 2:
        return 0.0
    t_call = g.m_start[g.src[launch]]
    o = np.argsort(t_call, kind="stable")
    t_call = t_call[o]
    ends = np.maximum.accumulate(g.m_end[dst[launch]][o])
    marks = np.array([g.m_end[g.markers[float(z)]] for z in w[:, 1]])
    i = np.searchsorted(t_call, marks, side="right") - 1
    lag = np.where(i >= 0, np.maximum(ends[np.maximum(i, 0)] - marks, 0.0), 0.0)
    return float(max(0.0, (lag[-1] - lag[0]) / (len(w) - 1)))
