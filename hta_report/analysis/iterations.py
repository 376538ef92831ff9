"""Iterations of a trace without ``ProfilerStep`` annotations.

A script profiled without ``prof.step()`` still runs its work in a loop: the
same forward (or training step) with the same shapes, over and over. The ops
of one iteration on the step thread repeat in the same order, so an op that
starts exactly once per iteration (a model's stem convolution, its first
linear layer) recurs every ``p`` outermost ops. Its recurrences delimit the
iterations, and their lengths show what one window cannot: a cold first
iteration, and how much the same work varies (a shared or throttled host).
Times are µs.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np
import pandas as pd

from ..model import Iterations
from .events import RankEvents, is_step, name_search
from .host_ops import step_thread_ops

#: Recurrences of an op needed to call them iterations (proposal: a first, cold one and two to compare).
MIN_ITERATIONS = 3
#: Outermost ops an iteration holds at least (proposal: a lone op repeated is a loop's body, not a model run).
MIN_OPS = 4


def iterations(ev: RankEvents, w: np.ndarray) -> Iterations:
    """The iterations of rank ``ev`` in the host windows ``w`` (``(n, 2)``
    µs), where its trace has no ``ProfilerStep`` annotation: the outermost
    ops of the step thread (:func:`~.host_ops.step_thread_ops`) keyed by
    name and recorded ``Input Dims``; the anchor is the key covering the
    most ops (iterations × ops per iteration; the earliest on a tie) that recurs :data:`MIN_ITERATIONS` times or more at one fixed distance of
    :data:`MIN_OPS` ops or more, with the same sequence of keys between each
    two recurrences. Empty (``count`` 0) where there are steps or no anchor."""
    out = Iterations()
    cpu = ev.cpu
    if cpu.empty or is_step(cpu["s_name"]).any():
        return out
    ops = step_thread_ops(ev, w)
    outer = ops[ops["parent"].to_numpy() < 0]
    if len(outer) < MIN_ITERATIONS * MIN_OPS:
        return out
    dims = cpu.loc[outer.index, "input_dims"].map(str) if "input_dims" in cpu.columns else ""
    keys = pd.Series(outer["s_name"].astype(str).to_numpy() + "|" + np.asarray(dims, dtype=str))
    codes, _ = pd.factorize(keys)
    found = _anchor(codes)
    if found is None:
        return out
    first, period, count = found
    ts, end = outer["ts"].to_numpy(float), outer["end"].to_numpy(float)
    starts = ts[first + period * np.arange(count)]
    last_end = float(end[first + period * count - 1])
    if _inside_one_forward(cpu, outer["thread"].iloc[first], float(starts[0]), last_end) \
            or _after_one_stem(outer["s_name"].astype(str).to_numpy(), first, period, count):
        return out  # the repeated blocks (layers) of one model's forward, not iterations
    out.count = int(count)
    out.ops_per_iteration = int(period)
    out.first_op = str(outer["s_name"].iloc[first])
    out.durations_us = [float(x) for x in np.diff(np.append(starts, last_end))]
    return out


#: Events that are one module's forward: PyTorch's ``nn.Module: Name_N`` ranges (with_stack /
#: with_modules) and Python frames of a ``forward`` method (``model.py(343): forward``).
FORWARD_EVENT = re.compile(r"^nn\.Module: |\): forward$")


def _inside_one_forward(cpu: pd.DataFrame, thread: object, start: float, end: float) -> bool:
    """Whether one module-forward event (:data:`FORWARD_EVENT`) on ``thread``
    holds the whole run of repeats ``[start, end]`` (µs): the ten MoE layers of
    one Switch Transformer forward repeat their 64 ops as a loop's iterations
    would, but ``prof.step()`` cannot go between a forward's layers."""
    mine = cpu[(cpu["thread"] == thread).to_numpy()
               & (cpu["ts"].to_numpy(float) <= start) & (cpu["end"].to_numpy(float) >= end)]
    return bool(len(mine)) and bool(name_search(mine["s_name"], FORWARD_EVENT).any())


#: A model's stem: the patch or token embedding that opens its forward, once per forward.
STEM_OP = re.compile(r"^aten::(conv[123]d|convolution|_convolution|cudnn_convolution|embedding)$")
#: How far before the first repeat (in repeats' lengths) a stem still opens them.
STEM_MAX_PERIODS = 3


def _after_one_stem(names: np.ndarray, first: int, period: int, count: int) -> bool:
    """Whether the repeats (``count`` runs of ``period`` outermost ops from
    position ``first`` of ``names``) follow a model's stem (:data:`STEM_OP`:
    a convolution or embedding) that runs once in the whole window, within
    :data:`STEM_MAX_PERIODS` repeats' lengths before them, and not inside
    them: one forward's embedding and then its layers. A loop of forwards
    runs its stem in every iteration (a ViT's 12 blocks after its one patch
    convolution, recorded without module ranges, read as 11 iterations)."""
    body = set(names[first:first + period * count].tolist())
    lo = max(0, first - STEM_MAX_PERIODS * period)
    for name in names[lo:first]:
        if STEM_OP.match(name) and name not in body and int((names == name).sum()) == 1:
            return True
    return False


def _anchor(codes: np.ndarray) -> Optional[tuple]:
    """(position of the first iteration's first op, ops per iteration,
    iterations) for the key of ``codes`` (op keys in start order) whose
    recurrences are evenly spaced with identical runs between them and
    cover the most ops (a loop inside the model's construction covers
    fewer than the loop over its forwards); the last iteration is counted
    where its whole run is there. None where no key recurs so."""
    n = len(codes)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    groups = np.split(order, bounds)  # positions of each key, ascending
    best = None
    for at in sorted((g for g in groups if len(g) >= MIN_ITERATIONS), key=lambda g: g[0]):
        gaps = np.diff(at)
        period = int(gaps[0])
        if period < MIN_OPS or not (gaps == period).all():
            continue
        count = len(at) if at[-1] + period <= n else len(at) - 1
        if count < MIN_ITERATIONS:
            continue
        body = codes[at[0]:at[0] + period]
        if all((codes[a:a + period] == body).all() for a in at[1:count]) and \
                (best is None or period * count > best[1] * best[2]):
            best = (int(at[0]), period, count)
    return best
