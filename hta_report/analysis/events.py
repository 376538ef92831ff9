"""Per-rank views of HTA's event dataframe, decoded once and shared by analyses."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Dict, Pattern, TypeVar, Union

import numpy as np
import pandas as pd

from ..load.exact import EXACT_DUR, EXACT_TS
from ..load.iteration import STEP_NUMBER
from ..load.traces import GPU_CATEGORIES  # noqa: F401 (re-exported: what makes a rank a GPU rank)
from .. import intervals

#: HTA's kernel type names (``hta.utils.utils.KernelType``).
COMPUTATION, COMMUNICATION, MEMORY = "COMPUTATION", "COMMUNICATION", "MEMORY"


def kernel_type(name: str) -> str:
    """HTA's classification of a GPU event name (COMMUNICATION for ``nccl*``
    including ``ncclDevKernel*``, MEMORY for ``Memcpy``/``Memset``, else COMPUTATION)."""
    from hta.utils.utils import get_kernel_type

    kind = get_kernel_type(name)
    return COMPUTATION if kind == "OTHER" else kind


def memoized(fn: Callable[["RankEvents"], np.ndarray]) -> Callable[["RankEvents"], np.ndarray]:
    """``fn(ev)``, an array computed from a rank's events alone, computed once
    per :class:`RankEvents` (kept in ``ev.memo``); each call returns a copy,
    which the caller may change. For the step windows, which several
    analyses of a rank ask for (``rebased_steps`` four times: 0.21 s of the 8
    fractional benchmark ranks, 0.05 s once)."""
    key = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def once(ev: "RankEvents") -> np.ndarray:
        try:
            value = ev.memo[key]
        except KeyError:
            value = ev.memo[key] = fn(ev)
        return value.copy()

    return once


#: What :func:`shared` keeps: a frame, or a tuple of frames and series.
S = TypeVar("S")


def shared(fn: Callable[["RankEvents"], S]) -> Callable[["RankEvents"], S]:
    """``fn(ev)``, a frame computed from a rank's events alone, computed once
    per :class:`RankEvents` (kept in ``ev.memo``, as :func:`memoized` keeps
    arrays) and the same frame handed to every caller, which must not change
    it (a selection or ``assign`` makes a new frame). For the row selections
    that several analyses of a rank make: the host rows of launching threads
    (idle attribution's host work and its gaps' names), the stream-capture
    rows (workload kind and warm-up calls), the GEMM/convolution kernels
    and whether each runs on Tensor Cores (the Tensor-Core analysis and the
    replay's edit)."""
    key = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def once(ev: "RankEvents") -> S:
        try:
            return ev.memo[key]
        except KeyError:
            value = ev.memo[key] = fn(ev)
            return value

    return once


#: Host categories of the calls that launch GPU work (``cuda_driver``: Triton's ``cuLaunchKernel``).
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


@shared
def runtime_calls(ev: "RankEvents") -> pd.DataFrame:
    """The rank's runtime and driver calls (rows of ``ev.cpu`` in
    :data:`LAUNCH_CATEGORIES`), made once per rank (:func:`shared`)."""
    cpu = ev.cpu
    return cpu[cpu["s_cat"].isin(LAUNCH_CATEGORIES)]


@shared
def linked_calls(ev: "RankEvents") -> pd.DataFrame:
    """Those of :func:`runtime_calls` linked to GPU work (``correlation`` > 0),
    made once per rank (:func:`shared`): step re-basing, launch times and
    the gaps' causes read them."""
    calls = runtime_calls(ev)
    return calls[calls["correlation"] > 0]


def thread_codes(df: pd.DataFrame) -> np.ndarray:
    """One integer per distinct ``"pid/tid"`` of ``df`` (ids compared as text,
    like ``astype(str)``: pid ``1`` and ``"1"`` are one process), without
    building a string per row. Shape ``(len(df),)``, int64."""
    codes = []
    for col in ("pid", "tid"):
        c, uniques = pd.factorize(df[col], use_na_sentinel=False)
        text_codes, _ = pd.factorize(np.array([str(u) for u in uniques], dtype=object))
        codes.append(text_codes[c] if len(c) else c)
    pid, tid = codes
    return pid.astype(np.int64) * (int(tid.max()) + 1 if len(tid) else 1) + tid


#: HTA's columns no analysis of ours reads (``name``/``cat`` are decoded into
#: ``s_name``/``s_cat``; the exact times replace ``ts``/``dur``).
UNUSED_COLUMNS = ("index", "name", "cat", "index_correlation", "iteration", "end", EXACT_TS, EXACT_DUR)


def decoded(ids: np.ndarray, symbols: np.ndarray) -> pd.Categorical:
    """HTA's symbol ids ``ids`` as strings: a categorical whose categories are
    the distinct strings in sorted order (so grouping and sorting by it order
    rows as plain strings would), one small integer per row instead of one
    string per row."""
    used = np.unique(ids)
    categories = pd.Index(sorted(set(symbols[used].tolist())))
    lut = np.full(len(symbols), -1, dtype=np.int64)
    lut[used] = categories.get_indexer(symbols[used])
    return pd.Categorical.from_codes(lut[ids], categories=categories)


def name_strings(names: pd.Series) -> np.ndarray:
    """``names.astype(str).to_numpy(dtype=object)`` (``str`` per row, a row
    without a name as ``astype(str)`` gives it) from a categorical's distinct
    strings and codes, each row sharing its category's string object: for
    91,500 decoded names 0.5 ms, against 8 ms through ``astype(str)`` and
    2.6 ms through the categorical's own ``to_numpy``. Tests on names
    (prefixes, sets) need no strings per row: a categorical's ``.str``
    methods and ``isin`` work on its categories."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str).to_numpy(dtype=object)
    return _distinct(names).to_numpy(dtype=object)[names.cat.codes.to_numpy()]


def _distinct(names: pd.Series) -> pd.Series:
    """``astype(str)`` of a categorical's categories, then of a row without a value (for code -1)."""
    dtype = names.dtype
    assert isinstance(dtype, pd.CategoricalDtype)  # name_strings calls it for categoricals only
    k = len(names.cat.categories)
    return pd.Series(pd.Categorical.from_codes(list(range(k)) + [-1], dtype=dtype)).astype(str)


def name_test(names: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """``test`` (a predicate on a name's text) of each of ``names`` (decoded
    ``s_name``, categorical or text), False for a row without a name (as
    ``names.astype(str).str.contains(...)`` answers there): boolean array,
    shape ``(len(names),)``. ``test`` runs once per distinct name, not per row
    (a rank's ~10⁵ kernels carry ~10³ names; a regular expression per row was
    0.1 s of the 57 MB benchmark rank's replay)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        distinct = names.cat.categories.to_numpy(dtype=object)
        codes = names.cat.codes.to_numpy()
    else:
        codes, distinct = pd.factorize(names.to_numpy(dtype=object))
    hit = np.fromiter((bool(test(str(d))) for d in distinct), dtype=bool, count=len(distinct))
    return np.append(hit, False)[codes]  # code -1 (no name): the appended False


def name_search(names: pd.Series, pattern: Union[str, Pattern[str]]) -> np.ndarray:
    """Which of ``names`` hold ``pattern`` (``re.search``, as
    ``names.astype(str).str.contains(pattern)`` tells it): :func:`name_test`."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return name_test(names, lambda s: rx.search(s) is not None)


def is_step(names: pd.Series) -> np.ndarray:
    """Which of ``names`` (decoded ``s_name``, categorical or text) are
    ``ProfilerStep#N`` annotations, by HTA's own pattern
    (:data:`~hta_report.load.iteration.STEP_NUMBER`): an op a user named
    ``ProfilerStep`` or ``ProfilerStep#`` is an op, not a step. Boolean array,
    shape ``(len(names),)``; the pattern runs once per distinct name (:func:`name_test`)."""
    return name_test(names, STEP_NUMBER.match)


@dataclass
class RankEvents:
    """Decoded events of one rank.

    Attributes:
        rank: the rank.
        df: HTA's dataframe for the rank (times in µs, aligned so the earliest
            event of the directory is at 0), with a decoded ``s_name`` and ``s_cat``
            ``end = ts + dur`` and ``thread`` (:func:`thread_codes`). Where HTA
            rounded fractional-µs times to whole µs (a sub-µs event gets ``dur``
            -1 or 0), ``ts`` and ``dur`` are the exact times of the trace instead
            (float64), so our metrics never see a negative duration.
    """

    rank: int
    df: pd.DataFrame
    #: what :func:`memoized` functions computed from these events
    memo: Dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_loaded(cls, loaded, rank: int) -> "RankEvents":
        """Decode HTA's symbol ids of ``rank`` in ``loaded`` (a ``LoadedTraces``)."""
        df = loaded.frame(rank)
        symbols = np.asarray(loaded.symbols, dtype=object)
        if df.empty:
            return cls(rank=rank, df=pd.DataFrame(columns=["ts", "dur", "end", "stream", "s_name", "s_cat", "thread"]))
        keep = [c for c in df.columns if c not in UNUSED_COLUMNS]
        times = {}
        if EXACT_TS in df.columns:
            times = {"ts": df[EXACT_TS], "dur": df[EXACT_DUR]}
        ts, dur = times.get("ts", df["ts"]), times.get("dur", df["dur"])
        # HTA aligns ``ts`` across ranks but leaves its ``end`` column unaligned: recompute it.
        out = df[keep].assign(
            **times,
            s_name=decoded(df["name"].to_numpy(), symbols),
            s_cat=decoded(df["cat"].to_numpy(), symbols),
            end=ts + dur,
            thread=thread_codes(df),
        )
        return cls(rank=rank, df=out)

    @cached_property
    def cpu(self) -> pd.DataFrame:
        """Host-side events (``stream == -1``): cpu_op, user_annotation, cuda_runtime..."""
        return self.df[self.df["stream"].eq(-1)]

    @cached_property
    def gpu(self) -> pd.DataFrame:
        """GPU events on a stream (kernels, memcpy, memset), with a ``kernel_type``
        column (HTA's classification)."""
        gpu = self.df[self.df["stream"].ge(0) & self.df["s_cat"].isin(GPU_CATEGORIES)]
        types = {n: kernel_type(n) for n in gpu["s_name"].unique()}
        return gpu.assign(kernel_type=gpu["s_name"].map(types))

    @property
    def has_gpu(self) -> bool:
        """True when the rank has any kernel, memcpy or memset."""
        return not self.gpu.empty

    def gpu_union(self, *kinds: str) -> np.ndarray:
        """Union of the intervals of GPU events of the given HTA kernel types."""
        sel = self.gpu[self.gpu["kernel_type"].isin(kinds)]
        return intervals.union(sel["ts"].to_numpy(), sel["end"].to_numpy())

    @cached_property
    def gpu_span_us(self) -> float:
        """From the first GPU event's start to the last one's end (µs)."""
        if self.gpu.empty:
            return 0.0
        return float(self.gpu["end"].max() - self.gpu["ts"].min())
