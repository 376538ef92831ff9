"""The ``iteration`` column of a rank's frame: the ``ProfilerStep`` each event is in.

:func:`add_iteration` gives the column HTA's ``hta.common.trace.add_iteration``
gives, computed with numpy instead of its per-row ``apply`` calls (the fast
parser's path), and is also the HTA parser's fallback where HTA's function
fails on a valid trace: HTA counts every name that *starts with*
``ProfilerStep`` as a step and asserts that it reads ``ProfilerStep#N``, so an
operator or annotation a user named ``ProfilerStep`` (or ``ProfilerStep#``,
``ProfilerStepX``) stops the whole trace (``AssertionError: Failed to parse
profiler step from: ...``). Here such a name is an ordinary event, not a step.

A step is a name matching HTA's own pattern, :data:`STEP_NUMBER`
(``ProfilerStep\\s*#\\s*(\\d+)``). Its rules, as HTA's docstring states them:

1. host events (``stream < 0``, and ``cpu_op`` rows on stream 0) take the
   number of the step with ``start <= ts < start + dur`` (the last such step
   in row order where steps overlap); -1 outside every step;
2. GPU events (``stream > 0``) take the number of the event they are linked
   to by ``index_correlation`` (-1 where unlinked).
"""
from __future__ import annotations

import re
from typing import Dict

import numpy as np
import pandas as pd

#: HTA's pattern for a step name (``hta.common.trace.add_iteration``).
STEP_NUMBER = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_EXACT_FLOAT_INT = 2**53  # timestamps beyond this lose precision as float64


def step_numbers(table) -> Dict[int, int]:
    """``{name id: N}`` for every symbol of ``table`` (an HTA
    ``TraceSymbolTable``) that reads ``ProfilerStep#N``."""
    out = {}
    for s, i in table.get_sym_id_map().items():
        if s.startswith("ProfilerStep"):
            m = STEP_NUMBER.match(s)
            if m is not None:
                out[int(i)] = int(m.group(1))
    return out


def hta_can_number(table) -> bool:
    """Whether HTA's ``add_iteration`` reads every symbol of ``table`` that
    starts with ``ProfilerStep`` (False: it would assert on one)."""
    return all(STEP_NUMBER.match(s) for s in table.get_sym_id_map() if s.startswith("ProfilerStep"))


def step_lookup(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """HTA's ``_get_profiler_step`` for every ``ts``: the number of the last step
    (in row order) with ``start <= ts < end``, else -1 (float64, one per ``ts``)."""
    out = np.full(len(ts), -1.0)
    if not len(starts) or not len(ts):
        return out
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    if (e[:-1] <= s[1:]).all():  # disjoint steps: at most one holds each ts
        i = np.searchsorted(s, ts, side="right") - 1
        valid = i >= 0
        i = np.where(valid, i, 0)
        hit = valid & (ts < e[i])
        out[hit] = numbers[order][i[hit]]
        return out
    for start, end, number in zip(starts, ends, numbers):
        out[(ts >= start) & (ts < end)] = number
    return out


def add_iteration(df: pd.DataFrame, table) -> None:
    """Add the ``iteration`` column to ``df`` (a rank's frame after
    ``correlation_to_index``; changed in place), integer-downcast as HTA does.

    Raises:
        ValueError: the frame has no ``index_correlation`` column, integer
            timestamps too large to compare with float durations (≥ 2**53 µs),
            or an ``index_correlation`` that names no row; the message says which.
    """
    if "index_correlation" not in df.columns:
        raise ValueError("no correlation column: HTA's add_iteration fails")
    number_of = step_numbers(table)
    names = df["name"].to_numpy()
    ids = list(number_of)
    rows = np.flatnonzero(np.isin(names, ids)) if ids else np.array([], dtype=np.int64)
    ts = df["ts"].to_numpy()
    dur = df["dur"].to_numpy()
    if ts.dtype.kind == "i" and len(ts) and np.abs(ts).max() >= _EXACT_FLOAT_INT and dur.dtype.kind == "f":
        raise ValueError("timestamps too large to compare as float64")
    starts = ts[rows]
    ends = starts + dur[rows]
    numbers = np.array([number_of[int(i)] for i in names[rows]], dtype=np.float64)
    stream = df["stream"].to_numpy()
    iteration = np.full(len(df), np.nan)
    host = stream < 0
    iteration[host] = step_lookup(ts[host], starts, ends, numbers)
    sym_index = table.get_sym_id_map()
    if "cpu_op" in sym_index:
        m0 = (stream == 0) & (df["cat"].to_numpy() == sym_index["cpu_op"])
        iteration[m0] = step_lookup(ts[m0], starts, ends, numbers)
    gpu = stream > 0
    if gpu.any():
        x = df["index_correlation"].to_numpy()[gpu].astype(np.int64)
        labels = df.index.to_numpy()
        linked = x > 0
        at = np.searchsorted(labels, x[linked])
        if (at >= len(labels)).any() or (labels[np.minimum(at, len(labels) - 1)] != x[linked]).any():
            raise ValueError("index_correlation points outside the frame")
        vals = np.full(len(x), -1.0)
        vals[linked] = iteration[at]
        iteration[gpu] = vals
    df["iteration"] = pd.to_numeric(pd.Series(iteration, index=df.index), downcast="integer")
