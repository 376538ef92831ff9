"""Interval arithmetic on time ranges (µs), vectorized with NumPy.

A *union* is an ``(n, 2)`` float array of sorted, non-overlapping
``[start, end)`` rows, as returned by :func:`union`.
"""
from __future__ import annotations

import numpy as np


def union(starts, ends) -> np.ndarray:
    """Merge possibly overlapping intervals into a union.

    Args:
        starts, ends: array-likes of equal length (µs); ``end >= start``.

    Returns:
        ``(n, 2)`` array of disjoint intervals sorted by start.
    """
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    if s.size == 0:
        return np.empty((0, 2))
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    running_end = np.maximum.accumulate(e)
    # a new block starts where the start is past every earlier end
    new_block = np.empty(s.size, dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > running_end[:-1]
    block = np.cumsum(new_block) - 1
    out_s = s[new_block]
    out_e = np.zeros(out_s.size)
    np.maximum.at(out_e, block, running_end)
    return np.column_stack([out_s, out_e])


def total(u: np.ndarray) -> float:
    """Total length of a union (µs)."""
    return float((u[:, 1] - u[:, 0]).sum()) if len(u) else 0.0


def _coverage(u: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of ``u`` that lies before each time in ``t``."""
    if len(u) == 0:
        return np.zeros_like(t, dtype=float)
    lengths = u[:, 1] - u[:, 0]
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    j = np.searchsorted(u[:, 0], t, side="right") - 1  # last interval starting <= t
    partial = np.where(j >= 0, np.clip(t - u[np.maximum(j, 0), 0], 0, lengths[np.maximum(j, 0)]), 0.0)
    return before[np.maximum(j, 0)] * (j >= 0) + partial


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Length of time covered by both unions ``a`` and ``b`` (µs)."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    return float((_coverage(b, a[:, 1]) - _coverage(b, a[:, 0])).sum())


def overlap_each(windows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each ``[start, end)`` row of ``windows`` (any intervals, may overlap),
    the length of ``u`` inside it (µs)."""
    if len(windows) == 0:
        return np.zeros(0)
    return _coverage(u, windows[:, 1]) - _coverage(u, windows[:, 0])


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of times covered by both unions ``a`` and ``b`` (µs), as a union.

    Every pair of overlapping rows is found with two binary searches (the
    rows of ``b`` ending after a row of ``a`` starts and starting before it
    ends), so the cost is O((n + m) log m + pairs) in NumPy.
    """
    if len(a) == 0 or len(b) == 0:
        return np.empty((0, 2))
    first = np.searchsorted(b[:, 1], a[:, 0], side="right")  # first row of b ending after a's start
    stop = np.searchsorted(b[:, 0], a[:, 1], side="left")  # first row of b starting at or after a's end
    count = np.maximum(stop - first, 0)
    ai = np.repeat(np.arange(len(a)), count)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    bj = np.repeat(first, count) + offsets
    s = np.maximum(a[ai, 0], b[bj, 0])
    e = np.minimum(a[ai, 1], b[bj, 1])
    keep = s < e
    return np.column_stack([s[keep], e[keep]]).astype(float).reshape(-1, 2)


def complement(u: np.ndarray) -> np.ndarray:
    """The times not covered by union ``u``, as a union from -inf to +inf."""
    u = u[u[:, 1] > u[:, 0]] if len(u) else u  # an empty row covers nothing
    if len(u) == 0:
        return np.array([[-np.inf, np.inf]])
    starts = np.concatenate([[-np.inf], u[:, 1]])
    ends = np.concatenate([u[:, 0], [np.inf]])
    keep = starts < ends
    return np.column_stack([starts[keep], ends[keep]])


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of times covered by ``a`` but not by ``b`` (µs), as a union."""
    if len(a) == 0:
        return np.empty((0, 2))
    if len(b) == 0:
        a = np.array(a, dtype=float).reshape(-1, 2)
        return a[a[:, 1] > a[:, 0]]
    return intersect(a, complement(b))
