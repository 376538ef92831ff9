"""The trace events behind each GPU idle cause of a rank, cited by stable ids.

:func:`idle_attribution <hta_report.analysis.attribution.idle_attribution>`
splits a rank's GPU idle time into causes (pieces of the idle union per
cause); :func:`cause_events` names, for each cause, the events an agent or a
reader can find in the trace file again (:class:`~hta_report.model.EventRef`:
rank, stream, correlation, ``ts_us``): for the cause's largest gaps, the host
call the gap began in (the synchronization, copy, DataLoader or optimizer
call), the GPU operation that ended as it began (what a synchronization
waited for) and the one that ended it; then the cause's longest calls that
began no gap. The rules cite them in their findings (``Finding.events``,
``Rule.evidence``).
"""
from __future__ import annotations

from collections import namedtuple
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from ..model import MAX_EVIDENCE_EVENTS, CauseEvents, EventRef
from .regions import full_gap_bounds

#: A host call "holds" a gap's start when it starts before it, up to this much after (µs):
#: CPU and GPU clocks are aligned only to a few µs (as ``attribution.GAP_START_TOLERANCE_US``).
CALL_TOLERANCE_US = 10.0
#: The gaps cited per cause, largest first (each with up to three events).
GAPS_PER_CAUSE = 7


#: The columns of a GPU row that :func:`_ref` and :func:`cause_events` read (``stream`` and ``correlation``
#: where present).
_REF_COLUMNS = ("ts", "dur", "end", "s_name", "stream", "correlation")


def _ref(rank: int, row, role: str) -> EventRef:
    stream = int(row.stream) if hasattr(row, "stream") and pd.notna(row.stream) else -1
    corr = row.correlation if hasattr(row, "correlation") else -1
    corr = int(corr) if corr is not None and pd.notna(corr) else -1
    return EventRef(rank=int(rank), stream=stream, correlation=corr, ts_us=float(row.ts), dur_us=float(row.dur),
                    name=str(row.s_name), role=role)


class _Gpu:
    """The rank's GPU operations sorted by end and by start, for the neighbours of a gap."""

    def __init__(self, gpu: pd.DataFrame):
        self.gpu = gpu
        # the columns an EventRef reads (:func:`_ref`), as arrays: one row as a tuple of them costs µs,
        # where ``gpu.iloc[[k]].itertuples()`` of the whole frame cost ~2 ms a row
        self._cols = [c for c in _REF_COLUMNS if c in gpu.columns]
        self._values = [gpu[c].to_numpy() for c in self._cols]
        self._tuple = namedtuple("GpuRow", self._cols)  # type: ignore[misc]
        end, ts = gpu["end"].to_numpy(dtype=float), gpu["ts"].to_numpy(dtype=float)
        self.by_end, self.by_ts = np.argsort(end, kind="stable"), np.argsort(ts, kind="stable")
        self.ends, self.starts = end[self.by_end], ts[self.by_ts]

    def launched(self, correlation) -> Optional[object]:
        """The GPU operation of ``correlation`` (what a call launched: a copy's memcpy), None without one."""
        if correlation is None or pd.isna(correlation) or int(correlation) <= 0 or "correlation" not in self.gpu:
            return None
        if not hasattr(self, "corr_order"):
            corr = self.gpu["correlation"].to_numpy()
            self.corr_order = np.argsort(corr, kind="stable")
            self.corrs = corr[self.corr_order]
        i = int(np.searchsorted(self.corrs, int(correlation), side="left"))
        return self._row(int(self.corr_order[i])) if i < len(self.corrs) and self.corrs[i] == int(correlation) else None

    def _row(self, k: int):
        return self._tuple(*(v[k] for v in self._values))

    def ended_by(self, t: float):
        """The GPU operation with the latest end at or before ``t`` (None without one)."""
        i = int(np.searchsorted(self.ends, t + 1e-6, side="right")) - 1
        return self._row(int(self.by_end[i])) if i >= 0 else None

    def started_from(self, t: float):
        """The GPU operation with the earliest start at or after ``t`` (None without one)."""
        i = int(np.searchsorted(self.starts, t - 1e-6, side="left"))
        return self._row(int(self.by_ts[i])) if i < len(self.starts) else None


def _call_at(calls: Optional[pd.DataFrame], t: float):
    """The call of ``calls`` started last at or before ``t`` (+ :data:`CALL_TOLERANCE_US`)."""
    if calls is None or calls.empty:
        return None
    starts = calls["ts"].to_numpy(dtype=float)
    ok = np.flatnonzero(starts <= t + CALL_TOLERANCE_US)
    if not len(ok):
        return None
    i = ok[np.argmax(starts[ok])]
    return next(calls.iloc[[i]].itertuples(index=False))


def cause_events(rank: int, gpu: pd.DataFrame, busy: np.ndarray, parts: Dict[str, np.ndarray],
                 calls: Dict[str, pd.DataFrame], windows: np.ndarray,
                 limit: int = MAX_EVIDENCE_EVENTS) -> List[CauseEvents]:
    """The events of each idle cause of one rank (:class:`~hta_report.model.CauseEvents`).

    Args:
        rank: the rank the events are cited on.
        gpu: its GPU operations (``ts``, ``dur``, ``end`` µs on the aligned
            timeline, ``s_name``, ``stream``, ``correlation``).
        busy: the union of their intervals (µs), which bounds each gap.
        parts: cause -> the pieces of the idle union it holds (``(n, 2)`` µs),
            as :func:`~hta_report.analysis.attribution.idle_attribution` splits them.
        calls: cause -> the host calls of that cause (``ts``, ``dur``,
            ``s_name``, ``correlation`` where known): synchronizations, pageable
            or blocking copies, DataLoader, optimizer and zero_grad annotations.
        windows: the analyzed windows' union (µs): calls outside it are not cited.
        limit: the most events per cause (:data:`~hta_report.model.MAX_EVIDENCE_EVENTS`).

    Returns:
        One :class:`CauseEvents` per cause with idle time or calls, in
        ``parts``' order then ``any`` (the longest gaps of every cause, their
        neighbouring GPU operations): per cause, the ``GAPS_PER_CAUSE``
        largest gaps (by the idle the cause holds in it) as ``call`` (where
        the cause has calls), ``before`` and ``after``, then its longest calls
        in the windows not cited yet, each a ``call`` with the GPU operation
        it launched (``launched``: a copy's memcpy, joined by correlation)
        or else the one that ended last before it returned (``before``: what
        it waited for).
    """
    if gpu.empty:
        return []
    g = _Gpu(gpu)
    out: List[CauseEvents] = []
    every = [p for p in parts.values() if len(p)]
    every_rows = np.concatenate(every) if every else np.empty((0, 2))
    empty = np.empty((0, 2))
    causes = list(parts.items()) + [(c, empty) for c in calls if c not in parts] + [("any", every_rows)]
    for cause, rows in causes:
        cause_calls = calls.get(cause)
        events: List[EventRef] = []
        seen = set()

        def add(ref: EventRef) -> None:
            key = (ref.stream, ref.correlation, ref.ts_us, ref.name)
            if key not in seen and len(events) < limit:
                seen.add(key)
                events.append(ref)

        if len(rows):
            begin, end = full_gap_bounds(rows, busy)
            # the cause's pieces grouped by the gap they lie in (its begin), the idle they hold summed
            keys, inv = np.unique(begin, return_inverse=True)
            held = np.bincount(inv, weights=rows[:, 1] - rows[:, 0])
            first = np.full(len(keys), np.inf)
            np.minimum.at(first, inv, rows[:, 0])
            last = np.full(len(keys), -np.inf)
            np.maximum.at(last, inv, end)
            for i in np.argsort(-held, kind="stable")[:GAPS_PER_CAUSE].tolist():
                b, e = float(keys[i]), float(last[i])
                anchor = float(first[i])  # where the cause's part of the gap starts (inside its call)
                if cause_calls is not None:
                    c = _call_at(cause_calls, anchor)
                    if c is not None:
                        add(_ref(rank, c, "call"))
                before, after = g.ended_by(b), g.started_from(e)
                if before is not None:
                    add(_ref(rank, before, "before"))
                if after is not None:
                    add(_ref(rank, after, "after"))
        if cause_calls is not None and not cause_calls.empty and len(windows) and len(events) < limit:
            ts = cause_calls["ts"].to_numpy(dtype=float)
            k = np.searchsorted(windows[:, 0], ts, side="right") - 1
            inside = (k >= 0) & (ts < windows[np.maximum(k, 0), 1])
            for c in cause_calls[inside].sort_values("dur", ascending=False, kind="stable").head(limit) \
                    .itertuples(index=False):
                add(_ref(rank, c, "call"))
                own = g.launched(getattr(c, "correlation", None))
                before = g.ended_by(float(c.ts) + float(c.dur))
                if own is not None:
                    add(_ref(rank, own, "launched"))
                elif before is not None and float(before.end) > float(c.ts):
                    add(_ref(rank, before, "before"))
                if len(events) >= limit:
                    break
        if events:
            out.append(CauseEvents(cause=cause, events=events))
    return out
