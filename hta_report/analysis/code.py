"""Time by the user's code, from the Python frames of ``with_stack=True`` traces.

``torch.profiler.profile(with_stack=True)`` adds a ``python_function`` event
per Python call: ``"train.py(7): __getitem__"`` (the file as the profiler
trims it, relative to the ``sys.path`` entry that holds it; the function's
first line, or, for a frame already running when tracing started, the line
it was executing then; the function), ``"<built-in method item of Tensor
object at 0x..>"`` for a call into C. The events nest on their thread the way
the calls did, and so do the CPU ops and runtime calls made inside them
(the trace also links them with ``Python id`` / ``Python parent id``, which
only HTA's own loader keeps as columns; nesting on the thread's timeline
gives the same tree with either loader).

For each cause (:data:`CATEGORIES`) :func:`code_attribution` splits its host
time inside the analyzed steps by the innermost Python frame running at each
instant, and records the chain of *user* frames above it
(:func:`is_user_frame`: not torch, not the standard library, not
site-packages; innermost first) with what each called on the way. Which of
those frames is "the user's line" is decided later, with the configuration
and the source files at hand (:mod:`hta_report.locate`).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..frames import callee_name, is_user_frame, parse_frame
from ..model import CodeAttribution, CodeTime, NamedTime
from .. import intervals
from .cpu_side import DATALOADER_PREFIXES, is_sync
from .events import RankEvents, name_strings
from .optimizer import STEP_PREFIX

#: The causes attributed to lines, in the order reports list them.
CATEGORIES = ("dataloader", "sync", "pageable_copy", "optimizer")
#: How many user frames of a chain are kept (innermost first): enough for
#: :mod:`hta_report.locate` to skip frames a configuration calls library code.
CHAIN_DEPTH = 4
#: Two frames of the stack the tracer found when it started are at most this
#: far apart (µs): it stamps them one after another (about 1 µs each).
INITIAL_GAP_US = 2.0
#: Chains kept per cause, largest time first; the rest are summed into one
#: chain with no frame.
TOP_CHAINS = 20
def _targets(ev: RankEvents, pageable: Optional[pd.DataFrame]) -> Dict[str, pd.DataFrame]:
    cpu = ev.cpu
    names = cpu["s_name"]
    out = {
        "dataloader": cpu[names.str.startswith(DATALOADER_PREFIXES, na=False)],
        "sync": cpu[is_sync(cpu)],
        "optimizer": cpu[names.str.startswith(STEP_PREFIX, na=False)],
    }
    if pageable is not None and len(pageable):
        out["pageable_copy"] = pageable
    return out


class _Thread:
    """The Python frames of one thread as a timeline of who runs innermost."""

    def __init__(self, ts: np.ndarray, end: np.ndarray, names: List[str]) -> None:
        n = len(ts)
        order = np.lexsort((np.arange(n), -end, ts))
        ts, end = ts[order], end[order]
        names = [names[i] for i in order.tolist()]
        frames = [parse_frame(x) for x in names]
        user = [f is not None and is_user_frame(f[0]) for f in frames]
        parent = [-1] * n
        chain: List[Tuple[int, ...]] = [()] * n
        below: List[Tuple[int, ...]] = [()] * n
        initial = [False] * n
        seg_a: List[float] = []
        seg_b: List[float] = []
        seg_e: List[int] = []
        stack: List[int] = []
        cur = float(ts[0]) if n else 0.0
        last_initial = -1
        ts_l, end_l = ts.tolist(), end.tolist()

        def emit(b: float, who: int) -> None:
            nonlocal cur
            if b > cur:
                seg_a.append(cur)
                seg_b.append(b)
                seg_e.append(who)
                cur = b

        for i in range(n):
            s = ts_l[i]
            while stack and end_l[stack[-1]] <= s:
                top = stack.pop()
                emit(end_l[top], top)
            emit(s, stack[-1] if stack else -1)
            cur = max(cur, s)
            p = stack[-1] if stack else -1
            if stack and end_l[i] > end_l[p]:
                end_l[i] = end_l[p]  # rounding: a call ends with its caller at the latest
            parent[i] = p
            pc, pb = (chain[p], below[p]) if p >= 0 else ((), ())
            inherited = tuple(i if b == -1 else b for b in pb)
            if user[i]:
                chain[i] = ((i,) + pc)[:CHAIN_DEPTH]
                below[i] = ((-1,) + inherited)[:CHAIN_DEPTH]
            else:
                chain[i], below[i] = pc, inherited
            if i == 0 or (p >= 0 and p == last_initial and s - ts_l[p] <= INITIAL_GAP_US):
                initial[i] = True  # on the stack the tracer found when it started
                last_initial = i
            stack.append(i)
        while stack:
            top = stack.pop()
            emit(end_l[top], top)
        self.names, self.chain, self.below, self.initial = names, chain, below, initial
        self.seg_a, self.seg_b, self.seg_e = np.array(seg_a), np.array(seg_b), np.array(seg_e, dtype=np.int64)

    def key(self, who: int) -> Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[bool, ...]]:
        """The user-frame chain running while ``who`` (an event, or -1) is innermost."""
        if who < 0:
            return (), (), ()
        ch, bl = self.chain[who], self.below[who]
        return (tuple(self.names[c] for c in ch), tuple("" if b < 0 else callee_name(self.names[b]) for b in bl),
                tuple(not self.initial[c] for c in ch))

    def split(self, iv: np.ndarray, into: Dict[tuple, float]) -> None:
        """Add the time of the intervals ``iv`` (``(k, 2)``, disjoint) to
        ``into`` by the user-frame chain running (:meth:`key`)."""
        a, b, e = self.seg_a, self.seg_b, self.seg_e
        for s, t in iv.tolist():
            if not len(a):
                into[((), (), ())] += t - s
                continue
            lo = max(int(np.searchsorted(b, s, side="right")), 0)
            hi = int(np.searchsorted(a, t, side="left"))
            covered = 0.0
            for j in range(lo, hi):
                ov = min(b[j], t) - max(a[j], s)
                if ov > 0:
                    into[self.key(int(e[j]))] += ov
                    covered += ov
            if t - s - covered > 1e-9:
                into[((), (), ())] += t - s - covered


def code_attribution(ev: RankEvents, hw: np.ndarray, pageable: Optional[pd.DataFrame] = None) -> CodeAttribution:
    """Time of each cause (:data:`CATEGORIES`) inside the analyzed host windows
    ``hw`` (``(n, 2)`` µs) by the chain of user frames running, per step.

    Each cause's events are merged per thread (nested ``aten::item`` and
    ``cudaStreamSynchronize`` count once) and clipped to the windows; a cause
    on a thread without Python frames goes to the chain with no frame.
    ``pageable``: the runtime calls of pageable copies
    (:func:`~hta_report.analysis.copies.pageable_calls`; None on ranks without GPU).

    Returns:
        :class:`~hta_report.model.CodeAttribution` with ``has_stacks`` and
        ``times`` (µs per step; at most :data:`TOP_CHAINS` chains per cause).
    """
    cpu = ev.cpu
    py = cpu[cpu["s_cat"].eq("python_function")]
    out = CodeAttribution(has_stacks=bool(len(py)))
    if not len(py):
        return out
    n = max(len(hw), 1)
    wu = intervals.union(hw[:, 0], hw[:, 1]) if len(hw) else None
    threads: Dict[int, _Thread] = {}
    py_thread = py["thread"].to_numpy()
    for th in np.unique(py_thread).tolist():
        rows = py[py_thread == th]
        threads[th] = _Thread(rows["ts"].to_numpy(dtype=float), rows["end"].to_numpy(dtype=float),
                              name_strings(rows["s_name"]).tolist())
    for category, rows in _targets(ev, pageable).items():
        if not len(rows):
            continue
        acc: Dict[tuple, float] = defaultdict(float)
        thread = rows["thread"].to_numpy()
        for th in np.unique(thread).tolist():
            sel = rows[thread == th]
            iv = intervals.union(sel["ts"].to_numpy(dtype=float), sel["end"].to_numpy(dtype=float))
            if wu is not None:
                iv = intervals.intersect(iv, wu)
            if th in threads:
                threads[th].split(iv, acc)
            else:
                acc[((), (), ())] += intervals.total(iv)
        ranked = sorted(acc.items(), key=lambda kv: -kv[1])
        rest = sum(t for _, t in ranked[TOP_CHAINS:])
        for (frames, callees, entered), t in ranked[:TOP_CHAINS]:
            out.times.append(CodeTime(category=category, frames=list(frames), callees=list(callees),
                                      entered=list(entered), time_us=t / n))
        if rest > 0:
            out.times.append(CodeTime(category=category, time_us=rest / n))
    return out


#: Rows kept in the operator and module views, largest GPU time first.
TOP_LAUNCHERS = 15


def _innermost(ts: np.ndarray, end: np.ndarray, names: List[str], at: np.ndarray, outermost: bool) -> List[str]:
    """For each time in ``at``, the name of the innermost (or outermost) of
    the nested intervals ``ts``/``end`` (one thread) holding it; "" for none."""
    if not len(ts):
        return [""] * len(at)
    if outermost:
        order = np.lexsort((-end, ts))
        top_s: List[float] = []
        top_e: List[float] = []
        top_n: List[str] = []
        for i in order.tolist():
            if top_e and ts[i] < top_e[-1]:
                continue  # nested in the current top-level interval
            top_s.append(ts[i])
            top_e.append(end[i])
            top_n.append(names[i])
        idx = np.searchsorted(np.array(top_s), at, side="right") - 1
        return [top_n[j] if j >= 0 and t < top_e[j] else "" for j, t in zip(idx.tolist(), at.tolist())]
    th = _Thread(ts, end, names)
    idx = np.searchsorted(th.seg_a, at, side="right") - 1
    return [th.names[th.seg_e[j]] if j >= 0 and t < th.seg_b[j] and th.seg_e[j] >= 0 else ""
            for j, t in zip(idx.tolist(), at.tolist())]


def gpu_time_by_launcher(ev: RankEvents, w: np.ndarray, out: CodeAttribution) -> CodeAttribution:
    """Fill ``out.gpu_by_op`` and ``out.gpu_by_module``: the GPU time (kernels,
    copies, memsets starting in the analyzed windows ``w``, ``(n, 2)`` µs on
    the device timeline; µs per step in ``total_us``, events in ``count``) by
    the outermost ``cpu_op`` around the runtime call that launched each (joined
    by ``correlation``), and by the innermost ``nn.Module: Name_i``
    ``python_function`` around it (``with_stack`` traces; empty without).
    GPU work whose launch is not found is left out."""
    gpu = ev.gpu
    if gpu.empty or "correlation" not in gpu.columns or not len(w):
        return out
    start = gpu["ts"].to_numpy(dtype=float)
    wu = intervals.union(w[:, 0], w[:, 1])
    j = np.searchsorted(wu[:, 0], start, side="right") - 1
    inside = (j >= 0) & (start < wu[np.maximum(j, 0), 1])
    gpu = gpu[inside]
    # the host rows as arrays, selected by masks: filtering the whole frame per selection
    # and thread copied every column (0.5 s and ~100 MB on a 286 MB trace)
    cpu = ev.cpu
    s_cat = cpu["s_cat"]
    corr_cpu = cpu["correlation"].to_numpy()
    is_launch = (s_cat.isin(("cuda_runtime", "cuda_driver")).to_numpy() & cpu["correlation"].notna().to_numpy()
                 & np.isin(corr_cpu, gpu["correlation"].unique()))
    if gpu.empty or not is_launch.any():
        return out
    names = cpu["s_name"].astype("category")
    codes = names.cat.codes.to_numpy()
    categories = np.append(np.asarray(names.cat.categories, dtype=object), "nan")  # code -1: no name
    is_op = s_cat.eq("cpu_op").to_numpy()
    module_name = np.array([c.startswith("nn.Module: ") for c in categories.tolist()], dtype=bool)
    is_mod = s_cat.eq("python_function").to_numpy() & module_name[codes]
    ts, end, thread = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float), cpu["thread"].to_numpy()
    names_op: Dict[float, str] = {}
    names_mod: Dict[float, str] = {}
    for th in np.unique(thread[is_launch]).tolist():
        on = thread == th
        la = on & is_launch
        at = ts[la]
        corr = corr_cpu[la].tolist()
        o, m = on & is_op, on & is_mod
        names_op.update(zip(corr, _innermost(ts[o], end[o], categories[codes[o]].tolist(), at, outermost=True)))
        for c, name in zip(corr, _innermost(ts[m], end[m], categories[codes[m]].tolist(), at, outermost=False)):
            names_mod[c] = name[len("nn.Module: "):] if name else ""
    n = len(w)
    dur = gpu["dur"].to_numpy(dtype=float)
    corr = gpu["correlation"].tolist()
    for launcher, into in ((names_op, out.gpu_by_op), (names_mod, out.gpu_by_module)):
        total: Dict[str, float] = defaultdict(float)
        count: Dict[str, int] = defaultdict(int)
        for c, d in zip(corr, dur.tolist()):
            name = launcher.get(c, "")
            if name:
                total[name] += max(d, 0.0)
                count[name] += 1
        for name in sorted(total, key=lambda k: -total[k])[:TOP_LAUNCHERS]:
            into.append(NamedTime(name=name, count=count[name], total_us=total[name] / n, self_us=0.0))
    return out
