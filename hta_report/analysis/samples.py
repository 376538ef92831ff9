"""Per-instance duration samples of a rank's kernels and host ops, for the
statistical comparison of two results (:mod:`hta_report.compare_stats`).

A saved result must still be comparable, so the samples live in the result
model (:class:`~hta_report.model.InstanceSamples`), bounded: the
:data:`~hta_report.model.SAMPLE_ITEMS` kernels and host ops with the most time
in the analyzed steps, at most :data:`~hta_report.model.SAMPLES_PER_ITEM`
durations each, chosen deterministically (evenly spread over the run).
"""
from __future__ import annotations

import json
from typing import List

import numpy as np
import pandas as pd

from ..model import SAMPLE_ITEMS, SAMPLES_PER_ITEM, InstanceSample, InstanceSamples
from .cpu_side import self_times
from .events import RankEvents, is_step
from .regions import host_windows, windows

#: The longest ``Input Dims`` text kept as an op's shape (longer ones are cut, the key stays distinct enough).
MAX_SHAPE_CHARS = 200


def _inside(ts: np.ndarray, end: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Which events ``[ts, end]`` lie inside one of the windows ``(n, 2)`` (µs)."""
    out = np.zeros(len(ts), dtype=bool)
    for s, e in win:
        out |= (ts >= s) & (end <= e)
    return out


def _shape_text(value: object) -> str:
    """An ``Input Dims`` value as short text: ``""`` where none was recorded."""
    if value is None or isinstance(value, (int, float)):  # -1 or NaN: not recorded
        return ""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ""))
    text = text.replace(" ", "")
    return "" if text in ("", "[]", "nan", "None", "-1") else text[:MAX_SHAPE_CHARS]


def _shape_texts(values: np.ndarray) -> List[str]:
    """:func:`_shape_text` of each value; one text per distinct object (the
    reader shares one list object among the events that recorded the same
    ``Input Dims``, so a column of ~10⁵ values holds ~10³ objects)."""
    memo: dict = {}
    out = []
    for v in values:
        text = memo.get(id(v))
        if text is None:
            text = memo[id(v)] = _shape_text(v)
        out.append(text)
    return out


def _pick(durations: np.ndarray, cap: int) -> List[float]:
    """At most ``cap`` of ``durations`` (time order kept): all of them, or
    instance ``round(i × (n − 1) / (cap − 1))`` for i in 0…cap−1, rounded to
    1 ns (Kineto's resolution)."""
    if len(durations) > cap:
        durations = durations[np.round(np.linspace(0, len(durations) - 1, cap)).astype(np.int64)]
    return [round(float(d), 3) for d in durations]


def _items(kind: str, frame: pd.DataFrame, top: int, cap: int) -> List[InstanceSample]:
    """``frame`` (columns ``key``, ``name``, ``shape``, ``ts``, ``d``) grouped by
    key: the ``top`` keys by total ``d``, each an :class:`InstanceSample`."""
    if frame.empty:
        return []
    frame = frame.sort_values("ts", kind="stable")
    groups = frame.groupby("key", sort=False)
    totals = groups["d"].sum().sort_values(ascending=False, kind="stable").head(top)
    rows_of = groups.indices  # key -> positions, in time order
    d_all = frame["d"].to_numpy(dtype=float)
    names, shapes = frame["name"].to_numpy(), frame["shape"].to_numpy()
    out = []
    for key in totals.index:
        rows = rows_of[key]
        d = d_all[rows]
        out.append(InstanceSample(kind=kind, name=str(names[rows[0]]), shape=str(shapes[rows[0]]),
                                  count=int(len(d)), total_us=round(float(d.sum()), 3), durations_us=_pick(d, cap)))
    return out


def instance_samples(ev: RankEvents, top: int = SAMPLE_ITEMS, cap: int = SAMPLES_PER_ITEM) -> InstanceSamples:
    """The rank's instance samples (:class:`~hta_report.model.InstanceSamples`).

    Kernels (kind ``kernel``) and memory copies and sets (kind ``memcpy``):
    every such GPU event lying inside an analyzed step re-based to the device
    (:func:`~.regions.windows`), keyed by name, its duration (µs).
    Host ops: every ``cpu_op``, ``user_annotation`` (not ``ProfilerStep``) and
    runtime call lying inside an analyzed host step window
    (:func:`~.regions.host_windows`), keyed by name and ``Input Dims`` where
    recorded, its self time (µs, :func:`~.cpu_side.self_times`: a child's time
    is its own item). ``steps`` is the number of analyzed steps; without
    ``ProfilerStep`` the whole trace is one window, and ``steps`` is 1.
    """
    hw = host_windows(ev)
    if not len(hw):
        return InstanceSamples()
    items: List[InstanceSample] = []
    gpu = ev.gpu
    dw = windows(ev)[0] if len(gpu) else np.empty((0, 2))
    for kind, cats in (("kernel", ["kernel"]), ("memcpy", ["gpu_memcpy", "gpu_memset"])):
        k = gpu[gpu["s_cat"].isin(cats)] if len(gpu) else gpu
        if len(k) and len(dw):
            ts, end = k["ts"].to_numpy(dtype=float), k["end"].to_numpy(dtype=float)
            k = k[_inside(ts, end, dw)]
            names = k["s_name"].astype(str).to_numpy()
            items += _items(kind, pd.DataFrame({"key": names, "name": names, "shape": "",
                                                "ts": k["ts"].to_numpy(dtype=float),
                                                "d": k["dur"].to_numpy(dtype=float).clip(0)}), top, cap)
    cpu = ev.cpu
    ops = cpu[cpu["s_cat"].isin(["cpu_op", "user_annotation", "cuda_runtime"]) & ~is_step(cpu["s_name"])]
    if len(ops):
        inside = _inside(ops["ts"].to_numpy(dtype=float), ops["end"].to_numpy(dtype=float), hw)
        ops = ops[inside]
    if len(ops):
        self_t = self_times(ops[["ts", "end", "dur", "thread"]])
        names = ops["s_name"].astype(str).to_numpy()
        shapes = (_shape_texts(ops["input_dims"].to_numpy()) if "input_dims" in ops.columns
                  else [""] * len(ops))
        keys = [f"{n}\x00{s}" for n, s in zip(names, shapes)]
        items += _items("cpu_op", pd.DataFrame({"key": keys, "name": names, "shape": shapes,
                                                "ts": ops["ts"].to_numpy(dtype=float), "d": self_t}), top, cap)
    return InstanceSamples(steps=int(len(hw)), items=items)
