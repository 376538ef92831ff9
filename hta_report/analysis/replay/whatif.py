"""What-ifs: a rank's step after edits of its replay graph, with its 80 % interval.

A :class:`ReplayContext` holds what every what-if of one rank shares (the
graph, its windows, the step the savings come off, the warm-up no edit
removes); :class:`WhatIfRunner` makes edits (:mod:`.edits`), schedules them
(:mod:`.schedule`) and turns the saving into a predicted step
(:attr:`~hta_report.model.WhatIf.step_us_after`) with its interval
(:func:`interval`). Times are µs.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ...model import WHATIF_MIN_SAVING_PCT, WhatIf, combined_edit
from ..events import RankEvents
from .edits import BEST, CPU_ERROR_PCT, EDITS, MID, WORST, Edit, apply
from .graph import Graph
from .schedule import most_saved, schedule_ends, span

#: Where the replay's span exceeds the measured windows by more than this (%), a what-if's saving
#: is taken as its share of the span, not as µs off the measured step (:meth:`WhatIfRunner.after`);
#: within it the two agree to the replay's fidelity (median under 3 %) and the µs are kept. 10 %: proposal.
SPAN_PAST_STEP_PCT = 10.0
#: The two-sided 80 % quantile of a normal distribution: a prediction's interval
#: (:func:`interval`) is meant to hold the step measured after the fix 4 times in 5.
Z80 = 1.2816

@dataclass(frozen=True)
class ReplayContext:
    """What every what-if of one rank shares (:class:`WhatIfRunner`,
    :func:`whatif`): built once per replayed rank by :func:`~.run.replay`.

    Attributes:
        ev: the rank's events (what the edit functions read).
        g: its replay graph (:mod:`.graph`).
        w: the analyzed windows (``(n, 2)`` µs; ``steps``: they are
            ``ProfilerStep`` windows, else the one window of the trace).
        steps: whether ``w`` are ``ProfilerStep`` windows.
        measured: the mean step the savings come off (µs): as measured, or the
            GPU-paced step where the host ran ahead (``Replay.gpu_paced_step_us``).
        base: the unmodified replay's :func:`~.schedule.span` (µs).
        measured_windows: the measured time of each window (``(n,)`` µs, on the
            same basis as ``measured``): the step-to-step variation of the interval.
        rank: the rank's number (``WhatIf.rank``).
        devices: the rank's ``deviceProperties`` names (:class:`~.edits.Edit`).
        binding: per edge of ``g``, whether it binds its target in the
            unmodified schedule (None: any change applies, :meth:`WhatIfRunner.whatif`).
        protect: a node mask of ``g``: the one-off warm-up calls no edit
            removes (None: none, :func:`~.edits.apply`).
        protect_host: per host thread, the intervals of one-off warm-up host
            time no edit removes (:func:`~.edits.warmup_host_intervals`).
    """

    ev: RankEvents
    g: Graph
    w: np.ndarray
    steps: bool
    measured: float
    base: float
    measured_windows: np.ndarray
    rank: int = 0
    devices: Tuple[str, ...] = ()
    binding: Optional[np.ndarray] = None
    protect: Optional[np.ndarray] = None
    protect_host: Dict[Any, np.ndarray] = field(default_factory=dict)


class WhatIfRunner:
    """Replays edits of one rank's graph (:func:`whatif`) in the context
    ``ctx`` (:class:`ReplayContext`). Edits that come to the same inputs are
    scheduled once."""

    def __init__(self, ctx: ReplayContext) -> None:
        self.ctx = ctx
        self.memo: Dict[bytes, float] = {}

    def edited(self, labels: Sequence[str], setting: str = MID) -> Edit:
        """The inputs after the edits ``labels`` at ``setting`` (:meth:`~.edits.Edit.pick`)."""
        c = self.ctx
        e = Edit.of(c.g, c.devices, c.w, setting)
        apply(c.ev, c.g, e, labels, c.protect, c.protect_host)
        return e

    def saved(self, e: Edit) -> float:
        """What the edited inputs ``e`` save of the unmodified replay's :func:`~.schedule.span` (µs)."""
        key = hashlib.blake2b(b"".join(np.ascontiguousarray(a).tobytes() for a in (e.off, e.drop, e.dur, e.delay)),
                              digest_size=16).digest()
        if key not in self.memo:
            c = self.ctx
            self.memo[key] = c.base - span(c.g, c.w, schedule_ends(c.g, e), c.steps)
        return self.memo[key]

    def after(self, saved: float) -> float:
        """The measured step (µs) less ``saved`` µs of the replay's span over
        the ``n`` analyzed windows, bounded both ways. Every edit removes or
        shortens work, so a negative saving is the replay's, not the fix's (a
        backlog of GPU work queued before the first window that an edit
        shortens moves the span's start earlier): no change. The saving per
        window is at most the replayed share ``saved / base`` of the measured
        step where the replay spans more than :data:`SPAN_PAST_STEP_PCT` past
        the measured windows (GPU work past the last window): there the
        absolute saving would reach past what the step holds, down to 0 µs."""
        c = self.ctx
        saved = max(0.0, saved)
        n = len(c.w)
        absolute = c.measured - saved / n
        if c.base > n * c.measured * (1 + SPAN_PAST_STEP_PCT / 100):
            absolute = max(absolute, c.measured * (1.0 - saved / c.base))
        return max(0.0, absolute)

    def whatif(self, labels: Sequence[str]) -> Tuple[WhatIf, bool, bool]:
        """:func:`whatif` of ``labels`` on this rank."""
        c = self.ctx
        g = c.g
        e = self.edited(labels)
        inputs = not (np.array_equal(e.off, g.off) and np.array_equal(e.dur, g.dur)
                      and np.array_equal(e.delay, g.delay))
        changed = inputs or bool(e.drop.any())
        applies = changed if c.binding is None else inputs or bool((e.drop & c.binding).any())
        # an edit that cannot save what counts (saves()) is not scheduled and reported as saving nothing
        scheduled = changed and most_saved(g, e) >= c.base * WHATIF_MIN_SAVING_PCT / 100
        mid = self.saved(e) if scheduled else 0.0
        best = worst = mid
        if scheduled and e.ranged:
            best, worst = self.saved(self.edited(labels, BEST)), self.saved(self.edited(labels, WORST))
        after = self.after(mid)
        low, high = interval(c.measured, after, self.after(best), self.after(worst), c.measured_windows,
                             error_pct(labels) if g.has_gpu else CPU_ERROR_PCT)
        label = combined_edit(labels)
        text = "; ".join(EDITS[x].description for x in labels)
        return WhatIf(edit=label, description=text, step_us_before=c.measured, rank=c.rank, applies=applies,
                      step_us_after=after, step_us_low=low, step_us_high=high), changed, scheduled


def error_pct(labels: Sequence[str]) -> float:
    """The measured error (%) of the edits ``labels`` made together: the
    largest of theirs (:attr:`~.edits.EditSpec.error_pct`)."""
    return max((EDITS[x].error_pct for x in labels), default=0.0)


def interval(before: float, after: float, best: float, worst: float, measured_windows: np.ndarray,
             edit_error_pct: float) -> Tuple[float, float]:
    """The 80 % interval ``(low, high)`` (µs) of a predicted step ``after``
    (µs; ``before`` the step it starts from): from ``best`` to ``worst``, the
    predictions at the ends of the edit's own uncertain parameters
    (:meth:`~.edits.Edit.pick`; both ``after`` where it has none), each
    widened by the relative half-width ``h = sqrt((Z80 * se)^2 + E^2)``: ``se``
    the relative standard error of the mean of the analyzed steps
    (``measured_windows``, µs: the trace's own step-to-step variation, which a
    recording after the fix has too), ``E`` the edit's measured error on
    recorded pairs (``edit_error_pct``, %: how the host's speed differs
    between recordings, and what the edit leaves out). ``high`` is at most
    ``before`` widened by the same ``h``: an edit removes work, and a step
    measured after it differs from one before only by the noise. The steps
    are not replayed one by one for it: an edit moves work across step
    boundaries (a host that no longer waits starts the next step's work
    early), so one step's saving is not that step's own."""
    x = np.asarray(measured_windows, dtype=float)
    mean = float(x.mean()) if len(x) else 0.0
    se = float(np.std(x, ddof=1) / np.sqrt(len(x)) / mean) if len(x) > 1 and mean > 0 else 0.0
    h = float(np.hypot(Z80 * se, edit_error_pct / 100))
    low = max(0.0, min(best, after) * (1 - h))
    high = min(max(worst, after) * (1 + h), before * (1 + h))
    return low, max(high, after)


def whatif(ctx: ReplayContext, labels: Sequence[str]) -> Tuple[WhatIf, bool, bool]:
    """Replay ``ctx.g`` with the edits ``labels`` of :data:`~.edits.EDITS` made
    together (in that order): the mean step ``ctx.measured`` (µs) less what
    the edits save of the replayed :func:`~.schedule.span` of the windows
    ``ctx.w``, per window (``ctx.base`` is that span on the unmodified replay,
    µs). Also whether the edits changed the graph's inputs at all, and whether
    they were scheduled (not when they change nothing, or
    :func:`~.schedule.most_saved` says they cannot save
    :data:`~hta_report.model.WHATIF_MIN_SAVING_PCT` of the step). With
    ``ctx.binding``, the what-if ``applies`` only where the edits change a
    duration, delay or offset or drop a binding edge (dropping edges that bind
    nothing cannot change this schedule: the finding keeps its bound); without
    it, any change applies. The prediction carries its 80 % interval
    (:func:`interval`). Each call schedules anew; :class:`WhatIfRunner`
    keeps the schedules of one rank's what-ifs."""
    return WhatIfRunner(ctx).whatif(labels)
