"""One trace file on its own: for engines that load each rank where it is analyzed.

:func:`load_traces` parses every file of a directory in one process tree and
lets HTA align and filter them together. An engine that spreads ranks over
machines (:mod:`hta_report.engines.ray_engine`) does the same in two phases:

1. :func:`parse_file` on a worker: check and parse one file, and return a
   small :class:`FileParse` (metadata, earliest timestamp, ProfilerStep
   names) beside the parse itself (:class:`ParsedRank`);
2. the driver decides, from every file's :class:`FileParse` alone, what
   depends on all ranks (:func:`plan`: ranks, the time origin, whether the
   last step is kept, the ProfilerStep names HTA's filter counts);
3. :func:`loaded_rank` on a worker: the rank aligned and filtered as HTA
   does it for the whole directory (``Trace.align_and_filter_trace``), as a
   one-rank :class:`LoadedTraces` for the per-rank analyses.

The per-rank results are the same as with :func:`load_traces`
(``tests/test_engines.py`` compares whole results).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from .. import progress
from ..files import location, size
from ..model import TraceFileInfo
from .traces import LoadedTraces, assign_ranks, exact_origin, file_info, host_steps, quiet_hta, shift_exact_times


@dataclass
class FileParse:
    """What the driver needs of one parsed file (small: no events).

    Attributes:
        path: the file as given (a local path or a URL).
        meta: the trace's metadata as HTA reads it.
        size_bytes: the file's size as stored.
        min_ts: the earliest event's ``ts`` (µs, HTA's value before alignment,
            an int or a float as the column holds it).
        min_exact_ts: the origin its exact times would have alone
            (:func:`~.traces.exact_origin`, µs; ``min_ts`` when HTA rounds none).
        step_rows: ``ProfilerStep`` annotations on the host in the file (:func:`~.traces.host_steps`).
        step_names: the distinct ``ProfilerStep#N`` names.
        note: what the validating reader left out, or None.
        events: rows of the parsed event dataframe (what sizes the rank's
            analysis: :func:`hta_report.engines.per_rank.rank_memory_bytes`).
        stages: ``(stage, seconds)`` timed on the worker, for ``-v``.
    """

    path: str
    meta: dict
    size_bytes: int
    min_ts: Any
    min_exact_ts: float
    step_rows: int
    step_names: List[str]
    note: Optional[str] = None
    events: int = 0
    stages: List[Tuple[str, float]] = field(default_factory=list)


@dataclass
class ParsedRank:
    """One file's parse: HTA's event dataframe, its symbols and metadata."""

    meta: dict
    df: Any
    symbols: List[str]


def parse_file(path: str, max_trace_bytes: int, loader: str, cache_dir: Optional[str]) -> Tuple[FileParse,
                                                                                               ParsedRank]:
    """Check and parse one file as :func:`hta_report.load.load_traces` does
    (fast parser, else HTA's functions behind the validating reader; through
    the parse cache under ``cache_dir`` when given).

    Raises:
        hta_report.errors.TraceError: the file cannot be read or holds no
            event HTA can analyze (names the file).
    """
    from ..cache import Cache
    from . import _checked, _parse_into, new_trace

    recorder = progress.Progress(stream=None, live=False)
    with progress.using(recorder), quiet_hta():
        candidates, unreadable = _checked([location(path)], max_trace_bytes)
        trace = new_trace(loader)
        _, notes = _parse_into(trace, candidates, loader, Cache(cache_dir) if cache_dir else None, unreadable,
                               max_trace_bytes)
        df, meta = trace.traces[0], trace.meta_data[0]
        step_ids = trace.symbol_table.get_profiler_step_ids()
        symbols = trace.symbol_table.get_sym_table()
        summary = FileParse(
            path=path, meta=meta, size_bytes=size(path), min_ts=df["ts"].min().item(),
            min_exact_ts=exact_origin([df], df["ts"].min().item()),
            step_rows=host_steps(df, step_ids, trace.symbol_table.get_cpu_event_cat_ids()),
            step_names=sorted({symbols[i] for i in step_ids}),
            note=notes.get(candidates[0]), events=len(df), stages=list(recorder.times))
    return summary, ParsedRank(meta=meta, df=df, symbols=list(symbols))


@dataclass
class Plan:
    """The driver's decisions over all files (see :func:`plan`).

    Attributes:
        ranks: per file (in the given order), its rank.
        sources: per file, how the rank was decided.
        warnings: for the inventory (ranks by order, events left out).
        min_ts: the directory's time origin: the earliest ``ts`` of all files (µs).
        exact_origin: the origin of the exact times (:func:`~.traces.exact_origin`
            over all files, µs).
        include_last_step: whether the last ProfilerStep is kept.
        step_names: every ProfilerStep name of the directory (HTA's filter
            counts them over all ranks).
        device_type: the device type of the first file (HTA's filter reads it).
    """

    ranks: List[int]
    sources: List[str]
    warnings: List[str]
    min_ts: Any
    exact_origin: float
    include_last_step: bool
    step_names: List[str]
    device_type: str


def plan(parses: Sequence[FileParse], include_last_step: Optional[bool]) -> Plan:
    """What depends on all files, from their summaries: ranks (as
    :func:`~.traces.assign_ranks`), the time origin, the last step (``None``:
    kept when some file has fewer than two steps, as :func:`load_traces` does).

    Raises:
        hta_report.errors.InputError: two files claim one rank.
    """
    from hta.common.trace_parser import MetaDataKey

    paths = [location(p.path) for p in parses]
    ranks, sources, warns = assign_ranks(paths, [p.meta for p in parses])
    warns += [f"{p.path}: {p.note}" for p in parses if p.note]
    keep = include_last_step if include_last_step is not None else min(p.step_rows for p in parses) < 2
    names = sorted({n for p in parses for n in p.step_names})
    device = parses[0].meta.get(str(MetaDataKey.DEVICE_TYPE), "UNKNOWN")
    return Plan(ranks=ranks, sources=sources, warnings=warns, min_ts=min(p.min_ts for p in parses),
                exact_origin=min(p.min_exact_ts for p in parses),
                include_last_step=bool(keep), step_names=names, device_type=str(device))


def file_infos(parses: Sequence[FileParse], p: Plan) -> List[TraceFileInfo]:
    """The inventory's entry of each file (in the given order)."""
    return [file_info(location(f.path), rank, source, f.meta, size_bytes=f.size_bytes)
            for f, rank, source in zip(parses, p.ranks, p.sources)]


def loaded_rank(parsed: ParsedRank, info: TraceFileInfo, p: Plan, loader: str, copy: bool = True) -> LoadedTraces:
    """One rank as :func:`load_traces` leaves it: aligned to the directory's
    time origin and filtered as HTA filters the whole directory
    (``Trace.align_and_filter_trace``: the ProfilerStep names of every rank
    and the first file's device type decide it), re-indexed. With ``copy``
    False, ``parsed.df`` itself is aligned (the caller gives the parse up).

    Raises:
        hta_report.errors.TraceError: HTA's filter fails (names the file).
    """
    from . import new_trace
    from .traces import align_and_filter

    rank = info.rank
    with quiet_hta():
        trace = new_trace(loader)
        trace.symbol_table.add_symbols(parsed.symbols)
        trace.symbol_table.add_symbols(p.step_names)  # the directory's steps, as HTA's filter counts them
        df = parsed.df.copy() if copy else parsed.df
        df["ts"] = df["ts"] - p.min_ts  # Trace._align_all_ranks with the directory's origin
        trace.min_ts = p.min_ts
        trace.traces = {rank: df}
        trace.meta_data = {rank: dict(parsed.meta)}
        trace.trace_files = {rank: info.path}
        trace.is_parsed = True
        _, activity = align_and_filter(trace, p.include_last_step, info.path, aligned=True,
                                       device_type=p.device_type)
        shift_exact_times(trace, p.exact_origin)
    return LoadedTraces(trace=trace, files=[info], meta=dict(trace.meta_data), last_step_included=p.include_last_step,
                        gpu_activity=activity)
