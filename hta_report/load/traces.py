"""Parsed traces as HTA holds them: ranks assigned, merged, aligned and filtered.

:class:`LoadedTraces` is what the loader hands to the analyses: HTA's
``Trace`` (one event dataframe per rank, a shared symbol table) keyed by the
real ranks, the traces' metadata, and what the user should know. The helpers
below build it from parsed files the way HTA's own ``Trace.load_traces`` does.
"""
from __future__ import annotations


import contextlib
import copy
import dataclasses
import logging
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from ..errors import InputError, TraceError, internal_error, one_line
from ..model import TraceFileInfo, UnreadableTrace
from .discovery import MAX_RANK, rank_from_file_name
from .compat import ENCLOSING_STEPS, EXTERNAL_ID_LINKS, SHARED_CORRELATIONS
from .fastnative import PARSER_USED
from .repair import REPAIRED_NAMES

#: What ``TraceFileInfo.parser`` may say (anything else in a trace's metadata is not ours).
PARSERS_RAN = ("native", "python", "native and python", "hta")
from .step_filter import filter_steps
from ..files import Location, identity

if TYPE_CHECKING:
    import pandas as pd


@contextlib.contextmanager
def quiet_hta() -> Iterator[None]:
    """Silence HTA's logging and pandas warnings raised inside HTA. HTA logs
    errors too (e.g. "No stream column found") for conditions that we turn into
    exceptions or warnings of our own, so nothing below CRITICAL gets through."""
    hta_logger = logging.getLogger("hta")
    old_level = hta_logger.level
    hta_logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hta_logger.setLevel(old_level)


def hta_view(trace):
    """An ``hta.trace_analysis.TraceAnalysis`` over an already parsed
    ``hta.common.trace.Trace`` (HTA's facade parses files in its constructor;
    this one takes the trace as it is)."""
    from hta.trace_analysis import TraceAnalysis

    class _Parsed(TraceAnalysis):
        def __init__(self, parsed) -> None:  # noqa: D107 - no parsing: the trace is given
            self.t = parsed

    return _Parsed(trace)


@dataclass
class LoadedTraces:
    """Parsed traces of one directory, ready for HTA's analyzers.

    Attributes:
        trace: the ``hta.common.trace.Trace`` holding every rank (keyed by real
            rank, aligned in time, filtered as HTA filters).
        files: one entry per rank, sorted by rank.
        meta: rank -> the trace's metadata as HTA read it (``distributedInfo``,
            ``deviceProperties``, ``schemaVersion``...).
        last_step_included: whether the last ``ProfilerStep`` was kept (HTA drops
            it by default because its GPU work may be cut off).
        warnings: things the user should know (e.g. ranks assigned by order,
            events left out).
        unreadable: trace files found but left out, with the reason.
        gpu_activity: rank -> its GPU activity over all of its file's GPU
            events, before HTA's step filter (:func:`gpu_activity`).
    """

    trace: Any
    files: List[TraceFileInfo]
    meta: Dict[int, dict]
    last_step_included: bool
    warnings: List[str] = field(default_factory=list)
    unreadable: List[UnreadableTrace] = field(default_factory=list)
    gpu_activity: Dict[int, "GpuActivity"] = field(default_factory=dict)

    @property
    def ranks(self) -> List[int]:
        """The ranks, sorted."""
        return [f.rank for f in self.files]

    def frame(self, rank: int) -> "pd.DataFrame":
        """HTA's event dataframe of ``rank`` (``ts``/``dur``/``end`` in µs, ``name``
        and ``cat`` encoded through :attr:`symbols`; empty for an unknown rank)."""
        df = self.trace.traces.get(rank)
        if df is None:
            import pandas as pd

            return pd.DataFrame()
        return df

    def analysis_for(self, ranks: List[int]):
        """An HTA ``TraceAnalysis`` restricted to ``ranks`` (sharing the parsed
        data). HTA's whole-trace analyses (temporal and kernel breakdowns) fail
        on ranks without GPU events, so callers pass only the ranks that have them.
        The frames it sees hold only what the analyses the report takes from
        HTA read (:func:`hta_rows`): HTA copies whole frames (its launch
        statistics copy every CPU and every GPU row), and the rows and columns
        it never reads were most of the memory and time of those copies. HTA's
        figures are the same: ``tests/test_hta_parity.py`` and the
        benchmark's parity check compare them with HTA's own run."""
        sub = copy.copy(self.trace)
        sub.traces = {r: hta_rows(self.trace.traces[r], self.symbols) for r in ranks}
        sub.meta_data = {r: self.trace.meta_data[r] for r in ranks if r in self.trace.meta_data}
        return hta_view(sub)

    def memory_events(self, rank: int):
        """The ``[memory]`` events of ``rank``'s file (which HTA's parser
        drops), on the same aligned timeline as :meth:`frame` (the
        directory's time origin, HTA's ``min_ts``, subtracted; our exact
        times use an origin at most 1 µs earlier, see :func:`exact_origin`): a
        :class:`~.memory_events.MemoryEvents`, empty for an unknown rank.

        Raises:
            OSError: the file cannot be read again.
        """
        from .memory_events import MemoryEvents, read_memory_events

        info = next((f for f in self.files if f.rank == rank), None)
        if info is None:
            return MemoryEvents()
        events = read_memory_events(info.path)
        return events.shifted(float(getattr(self.trace, "min_ts", 0) or 0)) if len(events) else events

    @property
    def symbols(self) -> List[str]:
        """HTA's symbol table: id -> string for the ``name`` and ``cat`` columns."""
        return self.trace.symbol_table.get_sym_table()


#: Columns of the loaded frames that HTA's analyses do not read: the shapes and
#: types of ops (the misaligned-GEMM rule) and the exact times of fractional-µs
#: traces (``hta_report.load.exact.EXACT_COLUMNS``).
OURS_ONLY = ("input_dims", "input_type", "exact_ts", "exact_dur")


#: Host-side categories HTA's analyses read: the calls that launch GPU work
#: (launch statistics, queue length, the host wait of the idle breakdown).
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")


def hta_rows(df, symbols: List[str]) -> "pd.DataFrame":
    """The part of a rank's frame that HTA's analyses of the report read
    (temporal, idle-time and kernel breakdowns, communication overlap, launch
    statistics, queue length): the GPU rows (``stream`` not -1) and the runtime
    calls (:data:`RUNTIME_CATEGORIES`), which GPU rows point to through
    ``index_correlation``, without the columns only our analyses read
    (:data:`OURS_ONLY`). CPU ops and annotations, most of a trace, are not
    read: their steps are already in the ``iteration`` column."""
    import numpy as np

    runtime = [i for i, s in enumerate(symbols) if s in RUNTIME_CATEGORIES]
    keep = df["stream"].to_numpy() != -1
    if runtime:
        keep |= np.isin(df["cat"].to_numpy(), runtime)
    columns = [c for c in df.columns if c not in OURS_ONLY]
    return df.loc[keep, columns]


def add_parsed_rank(trace, key: int, parsed: tuple) -> bool:
    """Put one parse (HTA's ``(meta, df, symbol_table)``) into ``trace`` under
    ``key`` as ``Trace.parse_single_rank`` does: an empty dataframe is left
    out (False); otherwise its symbols join the trace's table and its
    ``cat``/``name`` ids are re-encoded (int64, as HTA's ``apply`` leaves them)."""
    import numpy as np

    meta, df, local = parsed
    if df.empty:
        return False
    trace.meta_data[key], trace.traces[key] = meta, df
    trace.symbol_table.add_symbols(local.get_sym_table())
    global_map = trace.symbol_table.get_sym_id_map()
    lut = np.array([global_map[s] for s in local.get_sym_table()], dtype=np.int64)
    for col in ("cat", "name"):
        df[col] = lut[df[col].to_numpy()]
    return True


def _distributed_rank(meta: dict) -> Tuple[Optional[int], Optional[str]]:
    """``distributedInfo.rank`` as a rank: ``(rank, None)``; ``(None, None)``
    when absent; ``(None, what is wrong)`` when present but not a rank. An
    integer in [0, 2**31) is a rank, and so is a string of decimal digits
    (``"3"``: some tools write the rank as text); a bool, a negative or
    fractional number, or any other value is not."""
    info = meta.get("distributedInfo") if isinstance(meta, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    if rank is None:
        return None, None
    if isinstance(rank, str) and rank.isascii() and rank.isdigit() and len(rank.lstrip("0")) <= len(str(MAX_RANK)) \
            and int(rank) < MAX_RANK:  # int() of thousands of digits raises
        return int(rank), None
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < MAX_RANK:
        return rank, None
    if isinstance(rank, int) and not isinstance(rank, bool) and abs(rank) >= MAX_RANK:
        shown = f"of {rank.bit_length():,} bits"  # repr() of thousands of digits raises
    else:
        shown = repr(rank) if not isinstance(rank, (dict, list)) else type(rank).__name__
    return None, f"distributedInfo.rank {one_line(shown)[:40]} is not a rank"


def assign_ranks(paths: List[Location], metas: List[dict]) -> Tuple[List[int], List[str], List[str]]:
    """Rank of each file: ``distributedInfo.rank`` (an integer, or a string of
    digits), else the file name, else the lowest unused rank in path order
    (with a warning). A ``distributedInfo.rank`` that is present but not a
    rank (``-1``, ``1.5``, ``true``...) is named in a warning.

    Returns:
        ``(ranks, sources, warnings)``: a rank and how it was decided
        (``distributedInfo``, ``file name``, ``sequential``) per file, and
        the warnings.

    Raises:
        InputError: two files claim one rank (both are named).
    """
    ranks: List[Optional[int]] = []
    sources: List[str] = []
    problems: List[Optional[str]] = []
    for path, meta in zip(paths, metas):
        rank, problem = _distributed_rank(meta)
        problems.append(problem)
        if rank is not None:
            ranks.append(rank)
            sources.append("distributedInfo")
            continue
        rank = rank_from_file_name(path)
        rank = rank if rank is not None and rank < MAX_RANK else None
        ranks.append(rank)
        sources.append("file name" if rank is not None else "sequential")

    seen: Dict[int, Location] = {}
    for path, rank in zip(paths, ranks):
        if rank is None:
            continue
        if rank in seen:
            raise InputError(
                f"two trace files claim rank {rank}: {seen[rank]} and {path}; "
                "keep one trace per rank in the directory"
            )
        seen[rank] = path
    warns: List[str] = []
    next_free = 0
    for i, rank in enumerate(ranks):
        if rank is None:
            while next_free in seen:
                next_free += 1
            ranks[i] = next_free
            seen[next_free] = paths[i]
            why = problems[i] or "no distributedInfo.rank"
            warns.append(f"{paths[i]}: {why} and no rank in the file name; analyzed as rank {next_free}")
        elif problems[i] is not None:
            warns.append(f"{paths[i]}: {problems[i]}; analyzed as rank {rank}, from the file name")
    return ranks, sources, warns  # type: ignore[return-value]


def rekey(trace, keys: List[int], ranks: List[int], paths: List[Location]) -> None:
    """Re-key HTA's per-file dicts of ``trace`` from parse keys to real ranks
    (before alignment and filtering, which HTA does per rank)."""
    trace.traces = {ranks[i]: trace.traces[k] for i, k in enumerate(keys)}
    trace.meta_data = {ranks[i]: trace.meta_data.get(k, {}) for i, k in enumerate(keys)}
    trace.trace_files = {ranks[i]: identity(paths[i]) for i in range(len(keys))}
    trace.is_parsed = True


#: Kineto's categories of GPU activity (what makes a rank a GPU rank).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class GpuActivity:
    """The GPU activity of one rank's file from its exact times: every
    kernel, memcpy and memset on a stream, before HTA's step filter leaves
    out the GPU work launched outside the kept steps.

    Attributes:
        span_us: from the first GPU event's start to the last one's end (µs).
        busy_us: the union of those events (µs): TraceLens's ``gpu_timeline``
            ``busy_time`` over the same span.
        unlinked_ops, unlinked_us: of those events, the ones (and their
            summed duration, µs) whose correlation id matches no host event
            of the file and that start inside the analyzed steps: HTA's step
            filter keeps GPU work only through its launch, so it left them out.
        unmatched_ops: such events in the whole file, wherever they start.
        unmatched_ts: their start times (µs, on the aligned timeline of the
            rank's frame, whole µs as HTA rounds them), ascending: which of
            them could be the records of launches that lost theirs
            (:func:`hta_report.analysis.integrity.integrity`).
    """

    span_us: float = 0.0
    busy_us: float = 0.0
    unlinked_ops: int = 0
    unlinked_us: float = 0.0
    unmatched_ops: int = 0
    unmatched_ts: Tuple[float, ...] = ()


def _gpu_work(df, symbols: List[str]):
    """Which rows of a rank's frame (``stream`` and ``cat`` columns, ``cat``
    as symbol ids into ``symbols``) are kernels, memcpys or memsets on a GPU
    stream: a boolean array."""
    import numpy as np

    cats = [i for i, s in enumerate(symbols) if s in GPU_CATEGORIES]
    return (df["stream"].to_numpy() >= 0) & np.isin(df["cat"].to_numpy(), cats)


def gpu_activity(df, symbols: List[str]) -> GpuActivity:
    """:class:`GpuActivity` of a rank's event frame (HTA's, with ``cat`` as
    symbol ids into ``symbols``; the exact times where HTA rounded them)."""
    import numpy as np

    from .. import intervals
    from .exact import EXACT_DUR, EXACT_TS

    if df.empty or "stream" not in df.columns:
        return GpuActivity()
    rows = _gpu_work(df, symbols)
    if not rows.any():
        return GpuActivity()
    exact = EXACT_TS in df.columns
    ts = df[EXACT_TS if exact else "ts"].to_numpy(dtype=float)[rows]
    dur = df[EXACT_DUR if exact else "dur"].to_numpy(dtype=float)[rows]
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0)
    ts, end = ts[ok], ts[ok] + dur[ok]
    if not len(ts):
        return GpuActivity()
    return GpuActivity(span_us=float(end.max() - ts.min()), busy_us=intervals.total(intervals.union(ts, end)))


def _unlinked_gpu(df, symbols: List[str]):
    """The kernels, memcpys and memsets of a rank's frame (``index``, ``ts``,
    ``dur``) whose correlation id matches no host row's (HTA's step filter
    keeps GPU work through its launch, so it drops these whatever their time)."""
    import numpy as np

    if df.empty or "correlation" not in df.columns or "stream" not in df.columns:
        return None
    corr = df["correlation"].to_numpy()
    host = df["stream"].to_numpy() < 0
    rows = _gpu_work(df, symbols) & ~np.isin(corr, corr[host & (corr > 0)])
    return df.loc[rows, ["index", "ts", "dur"]] if rows.any() else None


def _left_out(before, df, step_ids, host_cats) -> Tuple[int, float]:
    """Of the GPU rows ``before`` (:func:`_unlinked_gpu`, taken before HTA's
    filter), those the filter left out of ``df`` that start between its first
    remaining host step and its last event: ``(count, summed duration µs)``."""
    import numpy as np

    if before is None or df.empty:
        return 0, 0.0
    steps = _host_step_rows(df, step_ids, host_cats)
    if not steps.any():
        return 0, 0.0
    start, end = float(df.loc[steps, "ts"].min()), float((df["ts"] + df["dur"]).max())  # the GPU lags the host
    ts = before["ts"].to_numpy(dtype=float)
    out = (ts >= start) & (ts < end) & ~np.isin(before["index"].to_numpy(), df["index"].to_numpy())
    return int(out.sum()), float(before["dur"].to_numpy(dtype=float)[out].sum())


def align_and_filter(trace, include_last_step: Optional[bool], where, aligned: bool = False,
                     device_type: Optional[str] = None) -> Tuple[bool, Dict[int, GpuActivity]]:
    """HTA's ``align_and_filter_trace`` and re-indexing, as ``Trace.load_traces``
    does them; the exact times beside HTA's rounded ones (``exact_ts``, see
    :mod:`hta_report.load.exact`) are moved with them
    (:func:`_align_exact_times`). ``include_last_step`` None (auto) keeps the
    last step only when some rank has fewer than two steps on the host
    (:func:`host_steps`). Returns whether it was kept, and each rank's
    :class:`GpuActivity` (taken before HTA's filter).

    Args:
        trace: HTA's ``Trace`` with the parsed ranks.
        include_last_step: see above.
        where: what an error names (a file or the directory).
        aligned: the ranks' ``ts`` are aligned already (one rank of a
            directory, see :func:`hta_report.load.rank_file.loaded_rank`):
            only HTA's filter runs.
        device_type: the device type HTA's filter reads (default: the first
            rank's, as HTA does).

    Raises:
        TraceError: HTA fails aligning or filtering (names ``where``).
    """
    unlinked: Dict[int, Any] = {}
    try:
        symbols = trace.symbol_table.get_sym_table()
        activity = {rank: gpu_activity(df, symbols) for rank, df in trace.traces.items()}
        if include_last_step is None:
            step_ids = set(trace.symbol_table.get_profiler_step_ids())
            host_cats = trace.symbol_table.get_cpu_event_cat_ids()
            fewest = min(host_steps(df, step_ids, host_cats) for df in trace.traces.values())
            include_last_step = fewest < 2
        if device_type is not None:  # the directory's first rank decides, not this trace's
            trace.get_device_type = lambda: device_type
        origin = None
        if not aligned:  # one rank of a directory is moved by the caller (loaded_rank)
            origin = exact_origin(trace.traces.values(),
                                  min(df["ts"].min() for df in trace.traces.values() if not df.empty))
        step_ids = trace.symbol_table.get_profiler_step_ids()
        host_cats = trace.symbol_table.get_cpu_event_cat_ids()
        last = {rank: last_step(df, step_ids, host_cats) for rank, df in trace.traces.items()}
        try:
            if trace.traces:  # HTA's align_and_filter_trace, its filter on narrow frames
                if not aligned:
                    trace._align_all_ranks()
                unlinked = {rank: _unlinked_gpu(df, symbols) for rank, df in trace.traces.items()}
                filter_steps(trace, include_last_step)
        finally:
            trace.__dict__.pop("get_device_type", None)
        if not include_last_step:  # the last step's work and annotations HTA's filter left (see last_step)
            for rank, df in trace.traces.items():
                name = last.get(rank)
                if name is not None and not df.empty:
                    df = drop_after_host_step(df, name, host_cats, symbols)
                    trace.traces[rank] = df[df["name"].ne(name)]
        for rank, df in trace.traces.items():
            if rank in activity:
                ops, us = _left_out(unlinked.get(rank), df, step_ids, host_cats)
                before = unlinked.get(rank)
                starts = () if before is None else tuple(sorted(before["ts"].to_numpy(dtype=float).tolist()))
                activity[rank] = dataclasses.replace(activity[rank], unlinked_ops=ops, unlinked_us=us,
                                                     unmatched_ops=len(starts), unmatched_ts=starts)
            if not df.empty:
                df = df.set_index("index", drop=False)
                df.index.names = [None]
                trace.traces[rank] = df
        if origin is not None:
            shift_exact_times(trace, origin)
    except Exception as exc:
        step = "aligning ranks in time and filtering steps (HTA)"
        raise internal_error(exc, f"analysis failed at {step}", where, step=step) from exc
    return bool(include_last_step), activity


def host_steps(df, step_ids, host_cats) -> int:
    """The ``ProfilerStep#N`` annotations of a rank's frame on the host: the
    steps, the rows named ``step_ids`` whose category is one of ``host_cats``
    (HTA's CPU event categories, ``symbol_table.get_cpu_event_cat_ids()``, the
    rows HTA's step filter reads). Kineto also writes each step as a
    ``gpu_user_annotation`` on the GPU, which is not another step, and a
    kernel may carry any name, ``ProfilerStep#N`` too."""
    return int(_host_step_rows(df, step_ids, host_cats).sum())


def _host_step_rows(df, step_ids, host_cats):
    """Which rows of ``df`` are steps on the host (see :func:`host_steps`): a boolean Series."""
    return df["name"].isin(step_ids) & df["cat"].isin(host_cats)


def last_step(df, step_ids, host_cats) -> Optional[int]:
    """The name id of a rank's last ``ProfilerStep#N`` annotation on the
    host, or None. Where HTA's filter drops the last step, it takes the step's
    start from every annotation it counts as a CPU op, the step's copy on the
    GPU's timeline (which starts later) included, and so keeps the host
    annotation and the ops before the GPU reached the step
    (tracelens/mi300_resnet_act_checkpoint: 3 steps analyzed with the last
    one "dropped"): :func:`align_and_filter` then leaves out the annotations
    of that name, and the step is dropped for every analysis of ours."""
    if df.empty or not len(step_ids):
        return None
    steps = _host_step_rows(df, step_ids, host_cats)
    if not steps.any():
        return None
    return int(df.at[df.loc[steps, "ts"].idxmax(), "name"])


def drop_after_host_step(df, step_name: int, host_cats, symbols: List[str]):
    """``df`` (a rank's frame after HTA's step filter) without the host events
    that start at or after the start of the host step named ``step_name``
    (the last ``ProfilerStep#N``, dropped) and without the GPU kernels, copies
    and sets those events launched (by ``correlation``).

    HTA's filter cuts at the latest start of any ``ProfilerStep`` row it counts
    as a CPU op, and Kineto's copy of each step on the GPU
    (``gpu_user_annotation``, stream ≥ 0, no correlation) is one of them: where
    the host runs ahead of the GPU, the copy of the last step starts after the
    host has launched the whole step, so HTA keeps every kernel of the step it
    drops (rtx3060-compiled-gpt-train of the field set: 5 × 202 kernels with
    4 steps analyzed; tracelens/mi300_resnet_act_checkpoint: 2,238 kernels,
    1,492 of them launched in the 2 steps kept). Here the cut is the host's.
    Device-side sync rows (``Event Sync``, ``Context Sync``, on stream -1 but
    on the GPU's timeline) are left as HTA left them.

    Args:
        df: the frame (HTA's columns; ``name``, ``cat`` as symbol ids).
        step_name: the symbol id of the dropped step's name.
        host_cats: HTA's CPU event category ids.
        symbols: HTA's symbol table (id -> string).

    Returns:
        ``df`` itself when nothing starts after the cut, else the kept rows.
    """
    host_step = df["name"].eq(step_name) & df["cat"].isin(host_cats)
    if not host_step.any():
        return df
    cut = df.loc[host_step, "ts"].min()
    sync = {i for i, s in enumerate(symbols) if s in ("Event Sync", "Context Sync")}
    host = df["stream"].lt(0) & ~df["name"].isin(sync)
    late = host & df["ts"].ge(cut) & ~host_step
    if not late.any():
        return df
    launched = df.loc[late & df["correlation"].ge(0), "correlation"].unique()
    on_gpu = df["stream"].ge(0) & df["correlation"].ge(0) & df["correlation"].isin(launched)
    return df[~(late | on_gpu)]


def exact_origin(frames, rounded_min_ts) -> float:
    """The origin of the exact times (µs): the earliest of HTA's ``min_ts``
    (``rounded_min_ts``, the earliest rounded start of all ranks) and the
    earliest exact start (``exact_ts``) of ``frames`` (event frames, before
    HTA's filter), so that no exact time is negative once moved by it (HTA
    rounds starts up, so the exact earliest start may lie up to 1 µs before
    ``min_ts``). The directory's origin when ``frames`` are all its ranks."""
    from .exact import EXACT_TS

    mins = [float(df[EXACT_TS].min()) for df in frames if not df.empty and EXACT_TS in df.columns]
    return float(min([float(rounded_min_ts)] + [m for m in mins if m == m]))


def shift_exact_times(trace, origin: float) -> None:
    """Move the exact times (``exact_ts``) of every rank of ``trace`` by
    ``origin`` (:func:`exact_origin`), as HTA moved ``ts`` by ``min_ts``."""
    from .exact import EXACT_TS

    for df in trace.traces.values():
        if not df.empty and EXACT_TS in df.columns:
            df[EXACT_TS] = df[EXACT_TS] - origin


def file_info(path: Location, rank: int, source: str, meta: dict, size_bytes: Optional[int] = None) -> TraceFileInfo:
    """What the inventory says of one trace file (``size_bytes``: as stored,
    read from the file when not given)."""
    dist = meta.get("distributedInfo")
    info = dist if isinstance(dist, dict) else {}
    return TraceFileInfo(
        path=str(path), rank=rank, rank_source=source,
        size_bytes=path.stat().st_size if size_bytes is None else size_bytes,
        schema_version=_small_int(meta.get("schemaVersion")), host_name=None,
        world_size=_small_int(info.get("world_size")),
        backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
        repaired_names=_small_int(meta.get(REPAIRED_NAMES)) or 0,
        shared_correlations=_small_int(meta.get(SHARED_CORRELATIONS)) or 0,
        external_id_links=_small_int(meta.get(EXTERNAL_ID_LINKS)) or 0,
        enclosing_steps=_small_int(meta.get(ENCLOSING_STEPS)) or 0,
        parser=meta[PARSER_USED] if isinstance(meta.get(PARSER_USED), str) and meta[PARSER_USED] in PARSERS_RAN else "",
        cuda_runtime_version=_version(meta.get("cuda_runtime_version")),
        hip_runtime_version=_version(meta.get("hip_runtime_version")),
    )


def _small_int(value: Any) -> Optional[int]:
    """``value`` if it is an int (not a bool) that fits in 32 bits, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_RANK <= value < MAX_RANK:
        return value
    return None


def _version(value: Any) -> Optional[int]:
    """A version number as Kineto writes it (``cuda_runtime_version``: an
    int, 12040), or None when it is absent, not an int, 0 or negative."""
    v = _small_int(value)
    return v if v is not None and v > 0 else None


def unreadable_error(unreadable: List[UnreadableTrace]) -> TraceError:
    """The error when no trace can be read: the one file's own reason, or the
    first three files with theirs."""
    if len(unreadable) == 1:
        return TraceError(unreadable[0].reason, unreadable[0].path)
    listed = "; ".join(f"{u.path}: {u.reason}" for u in unreadable[:3])
    more = f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
    return TraceError(f"all {len(unreadable)} traces are unreadable: {listed}{more}")
