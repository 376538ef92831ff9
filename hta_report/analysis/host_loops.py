"""Python loops over a tensor's elements or samples, found on the step thread.

``for i in range(len(y)): correct += pred[i].item() == y[i].item()`` or
``for i in range(B): x[i] = (x[i] - x[i].mean()) / x[i].std()`` pays each
op's fixed cost (Python, the dispatcher, the profiler) once per element, and
on a GPU a synchronization per ``.item()``. In the trace such a loop is a run
of outermost ops on the step thread in which an indexing op (``aten::select``
for ``x[i]``, ``aten::slice`` for ``x[i:i+1]``, ``aten::narrow``) comes back
every few ops, :data:`MIN_ITERATIONS` times or more: a model's layers do not
index their input per layer, a loop over samples does. Loops holding a loss
op are left to ``tiny-batches`` (a model called per sample), and loops
inside the optimizer's, zero_grad's or the DataLoader's annotations to their
own findings. Times are µs.
"""
from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd

from .copies import WAIT_APIS
from .cpu_side import DATALOADER_PREFIXES, LOSS_OPS
from .events import RankEvents
from .host_ops import arithmetic_us, call_overhead_us, step_thread_ops
from .optimizer import STEP_PREFIX, ZERO_GRAD_PREFIX

#: Ops that index one element or sample of a tensor.
INDEX_OPS = ("aten::select", "aten::slice", "aten::narrow")
#: Indexing ops in a run from which it is a loop over elements (proposal: a
#: hand-written loop over a batch of 16 is already 16 times the fixed cost).
MIN_ITERATIONS = 16
#: At most this many outermost ops between two indexing ops of one loop.
MAX_OPS_BETWEEN = 24
#: At most this long (µs) between two indexing ops of one loop.
MAX_GAP_US = 2000.0
#: An iteration indexes at most this many tensors (``pred[i]``, ``y[i]``...):
#: the period, in indexing ops, of the repeating op sequence of a loop.
MAX_PERIOD = 4
#: Share of a run's iterations that must repeat the op sequence of the
#: iteration one period before (proposal: a loop body with a rare branch still
#: repeats; a model's forward, which also slices its tensors, does not).
MIN_REPEAT = 0.8
#: Scalar reads (a synchronization on a GPU) inside a loop.
READ_OPS = ("aten::item", "aten::_local_scalar_dense")
#: Annotations whose loops belong to other findings.
OTHER_REGIONS = DATALOADER_PREFIXES + (STEP_PREFIX, ZERO_GRAD_PREFIX)
#: Columns of :func:`loops`.
COLUMNS = ["thread", "ts", "end", "iterations", "ops", "reads", "arithmetic_us", "overhead_us"]


def loops(ev: RankEvents, w: np.ndarray) -> pd.DataFrame:
    """The per-element loops in the windows ``w`` (``(n, 2)`` µs) on the step
    thread: one row each (:data:`COLUMNS`): ``thread``, ``ts`` and ``end`` of
    the loop (from its first indexing op to the end of its last iteration),
    ``iterations`` (indexing ops, a lower bound of the elements visited when
    an iteration indexes several tensors it is their multiple), ``ops``
    (outermost ops inside), ``reads`` (reads that wait for the GPU: scalar
    reads, or the stream synchronizations of per-element copies to the host,
    whichever are more), ``arithmetic_us``
    (:func:`~.host_ops.arithmetic_us` of its ops) and ``overhead_us`` (the
    fixed cost of one recorded call on this rank). Kept in ``ev.memo``."""
    key = f"host_loops.{np.asarray(w, dtype=float).tobytes().hex()}"
    held = ev.memo.get(key)
    if held is not None:
        return held
    ops = step_thread_ops(ev, w)
    out = pd.DataFrame(columns=COLUMNS)
    if len(ops):
        overhead = call_overhead_us(ops)
        rows = _find(ev, ops, w, overhead)
        if rows:
            out = pd.DataFrame(rows, columns=COLUMNS)
    ev.memo[key] = out
    return out


#: Reads per iteration from which a loop reads per element (proposal: half; a loop that reads once,
#: the ``.cpu()`` before a host-side loop over the copy, is not a read per element).
READ_LOOP_SHARE = 0.5


def reading(found: pd.DataFrame) -> np.ndarray:
    """Per row of :func:`loops`, whether the loop reads per element: its reads
    that wait for the GPU are :data:`READ_LOOP_SHARE` of its iterations or
    more. Boolean array, shape ``(len(found),)``."""
    if found.empty:
        return np.zeros(0, dtype=bool)
    return found["reads"].to_numpy(float) >= READ_LOOP_SHARE * found["iterations"].to_numpy(float)


def _find(ev: RankEvents, ops: pd.DataFrame, w: np.ndarray, overhead: float) -> List[list]:
    cpu = ev.cpu
    regions = cpu[cpu["s_name"].str.startswith(OTHER_REGIONS).fillna(False).to_numpy(dtype=bool)]
    top = ops[ops["parent"].to_numpy() < 0]
    ts, end = top["ts"].to_numpy(float), top["end"].to_numpy(float)
    names = top["s_name"].astype(str).to_numpy()
    if len(regions):  # outermost ops inside another finding's annotation are not a loop's
        r_ts, r_end = regions["ts"].to_numpy(float), regions["end"].to_numpy(float)
        o = np.argsort(r_ts)
        r_ts, r_end = r_ts[o], np.maximum.accumulate(r_end[o])
        k = np.searchsorted(r_ts, ts, side="right") - 1
        inside = (k >= 0) & (r_end[np.maximum(k, 0)] > ts)
        ts, end, names = ts[~inside], end[~inside], names[~inside]
    idx = np.flatnonzero(np.isin(names, INDEX_OPS))
    out: List[list] = []
    if len(idx) < MIN_ITERATIONS:
        return out
    bounds = np.asarray(w, dtype=float).reshape(-1, 2)
    step_of = np.searchsorted(bounds[:, 0], ts[idx], side="right")
    # a run breaks where two indexing ops are too far apart, in ops or in time, or in different steps
    brk = (np.diff(idx) > MAX_OPS_BETWEEN) | (np.diff(ts[idx]) > MAX_GAP_US) | (np.diff(step_of) != 0)
    starts = np.r_[0, np.flatnonzero(brk) + 1]
    stops = np.r_[np.flatnonzero(brk) + 1, len(idx)]
    all_ts = ops["ts"].to_numpy(float)
    runs = [part for a, z in zip(starts.tolist(), stops.tolist()) for part in _loops_of(names, idx[a:z])]
    for run in runs:
        p = _periodic(names, run) if len(run) >= MIN_ITERATIONS else 0
        if not p:
            continue
        # the last indexing op's segment is as long as the one a period before it (segments of 2 and 3 ops
        # alternating: the median of all of them would cut the last iteration short or run into the next op);
        # _periodic finds p only in a run of more than p segments
        per = int(run[-p] - run[-p - 1])
        last = min(int(run[-1]) + max(per, 1) - 1, len(ts) - 1)
        lo, hi = float(ts[run[0]]), float(end[last])
        inner = names[run[0]:last + 1]
        if np.isin(inner, LOSS_OPS).any():  # a model called per sample: tiny-batches
            continue
        mine = ops[(all_ts >= lo) & (all_ts < hi)]
        # a read per element: .item() (scalar reads), or .cpu()/.tolist() of one element, whose op holds a
        # blocking copy and its stream synchronize (cudaMemcpyAsync + cudaStreamSynchronize)
        waits = int((cpu["s_name"].isin(WAIT_APIS) & (cpu["ts"] >= lo) & (cpu["ts"] < hi)
                     & cpu["thread"].eq(mine["thread"].iloc[0] if len(mine) else -1)).sum())
        reads = max(int(np.isin(inner, READ_OPS).sum()), waits)
        out.append([int(mine["thread"].iloc[0]) if len(mine) else -1, lo, hi, len(run), len(inner), reads,
                    arithmetic_us(mine, overhead), overhead])
    return out


def _loops_of(names: np.ndarray, run: np.ndarray) -> List[np.ndarray]:
    """``run`` (positions in ``names`` of indexing ops close together) split
    where one loop ends and the next begins: at a segment (the ops from one
    indexing op to the next) from which the next :data:`MIN_ITERATIONS`
    segments share none with the :data:`MIN_ITERATIONS` before it (the body
    changed for good; an odd iteration, or a loop whose segments vary, does
    not split). Three functions each looping over the same tensor's elements,
    one reading each element (``.item()``, a synchronization per element), one
    adding on the GPU, one on the host, run back to back: three loops, of
    which only the first is a read per element."""
    segs = [tuple(names[i:j]) for i, j in zip(run[:-1].tolist(), run[1:].tolist())]
    cuts = [i for i in range(1, len(segs)) if segs[i] != segs[i - 1]
            and not set(segs[i:i + MIN_ITERATIONS]) & set(segs[max(0, i - MIN_ITERATIONS):i])]
    bounds = [0] + cuts + [len(run)]
    return [run[a:z] for a, z in zip(bounds[:-1], bounds[1:]) if z > a]


def _periodic(names: np.ndarray, run: np.ndarray) -> int:
    """The period (indexing ops per iteration; 0: none) with which the
    outermost ops between the indexing ops ``run`` (positions in ``names``)
    repeat: the first ``p`` <= :data:`MAX_PERIOD` (indexing
    ops per iteration), at least :data:`MIN_REPEAT` of the segments (the ops
    from one indexing op to the next) equal the segment ``p`` before, over
    :data:`MIN_ITERATIONS` iterations or more. A Python loop over elements runs
    the same ops every iteration; a model's forward that slices its tensors
    (``x[:, 1:]``, ``qkv[0]``) does not repeat so."""
    segs = [tuple(names[i:j]) for i, j in zip(run[:-1].tolist(), run[1:].tolist())]
    for p in range(1, MAX_PERIOD + 1):
        if len(segs) <= p or (len(segs) + 1) // p < MIN_ITERATIONS:
            break
        same = sum(segs[i] == segs[i - p] for i in range(p, len(segs)))
        if same >= MIN_REPEAT * (len(segs) - p):
            return p
    return 0
