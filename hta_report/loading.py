"""Loading traces: the only module that turns files into HTA objects.

Everything else (analyses, reports) receives a :class:`LoadedTraces`; a faster
loader can replace this module's internals without touching them.

Each file is parsed into what HTA's own parser gives (by default with
:mod:`hta_report.fastparse`, files in parallel, results cached; see
:mod:`hta_report.ingest`) so that an unreadable file is named in the error, and
merged into an ``hta.common.trace.Trace`` as HTA merges it; then every file
gets its real rank before HTA aligns the ranks in time and filters events.
"""
from __future__ import annotations

import contextlib
import copy
import gzip
import json
import logging
import os
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pandas as pd

from . import progress
from .discovery import find_trace_files, rank_from_file_name
from .errors import InputError, TraceError
from .ingest import add_parsed_rank, parse_files, report_parser_config, resolve_loader
from .model import TraceFileInfo

#: Event categories that are GPU activity in HTA's dataframes.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@contextlib.contextmanager
def quiet_hta() -> Iterator[None]:
    """Silence HTA's progress logging and pandas warnings raised inside HTA."""
    hta_logger = logging.getLogger("hta")
    old_level = hta_logger.level
    hta_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hta_logger.setLevel(old_level)


@dataclass
class LoadedTraces:
    """Parsed traces of one directory, ready for HTA's analyzers.

    Attributes:
        analysis: an ``hta.trace_analysis.TraceAnalysis`` over every rank.
        files: one entry per rank, sorted by rank.
        meta: rank -> the trace's metadata as HTA read it (``distributedInfo``,
            ``deviceProperties``, ``schemaVersion``...).
        last_step_included: whether the last ``ProfilerStep`` was kept (HTA drops
            it by default because its GPU work may be cut off).
        warnings: things the user should know (e.g. ranks assigned by order).
    """

    analysis: object
    files: List[TraceFileInfo]
    meta: Dict[int, dict]
    last_step_included: bool
    warnings: List[str] = field(default_factory=list)

    @property
    def ranks(self) -> List[int]:
        """The ranks, sorted."""
        return [f.rank for f in self.files]

    @property
    def trace(self):
        """The ``hta.common.trace.Trace`` behind :attr:`analysis`."""
        return self.analysis.t

    def frame(self, rank: int) -> pd.DataFrame:
        """HTA's event dataframe of ``rank`` (``ts``/``dur``/``end`` in µs, ``name``
        and ``cat`` encoded through :attr:`symbols`)."""
        return self.trace.traces.get(rank, pd.DataFrame())

    def analysis_for(self, ranks: List[int]):
        """An HTA ``TraceAnalysis`` restricted to ``ranks`` (sharing the parsed
        data). HTA's whole-trace analyses (temporal and kernel breakdowns) fail
        on ranks without GPU events, so callers pass only the ranks that have them."""
        from hta.trace_analysis import TraceAnalysis

        sub = copy.copy(self.trace)
        sub.traces = {r: self.trace.traces[r] for r in ranks}
        sub.meta_data = {r: self.trace.meta_data[r] for r in ranks if r in self.trace.meta_data}
        view = TraceAnalysis.__new__(TraceAnalysis)
        view.t = sub
        return view

    @property
    def symbols(self) -> List[str]:
        """HTA's symbol table: id -> string for the ``name`` and ``cat`` columns."""
        return self.trace.symbol_table.get_sym_table()


def _describe_parse_error(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); the file may be truncated"
    if isinstance(exc, (EOFError, gzip.BadGzipFile, zlib.error)):
        return "truncated or corrupt gzip data"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, MemoryError):
        return "too large to load into memory"
    return f"HTA could not parse it as a Kineto trace ({type(exc).__name__}: {exc})"


def _assign_ranks(paths: List[Path], metas: List[dict]) -> (List[int], List[str], List[str]):
    """Rank of each file: ``distributedInfo.rank``, else the file name, else
    the lowest unused rank in path order (with a warning).

    Raises:
        InputError: two files claim one rank (both are named).
    """
    ranks: List[Optional[int]] = []
    sources: List[str] = []
    for path, meta in zip(paths, metas):
        info = meta.get("distributedInfo") if isinstance(meta, dict) else None
        rank = info.get("rank") if isinstance(info, dict) else None
        if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
            ranks.append(rank)
            sources.append("distributedInfo")
            continue
        rank = rank_from_file_name(path)
        ranks.append(rank)
        sources.append("file name" if rank is not None else "sequential")

    seen: Dict[int, Path] = {}
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
            warns.append(
                f"{paths[i]}: no distributedInfo.rank and no rank in the file name; "
                f"analyzed as rank {next_free}"
            )
    return ranks, sources, warns  # type: ignore[return-value]


def load_traces(
    trace_dir: os.PathLike | str,
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    loader: Optional[str] = None,
    cache=None,
) -> LoadedTraces:
    """Find and parse every trace in ``trace_dir`` with HTA.

    Args:
        trace_dir: directory of Kineto traces (``.json`` or ``.json.gz``), one per rank.
        recursive: descend into subdirectories.
        include_last_step: keep the last ``ProfilerStep`` (HTA drops it by
            default). ``None`` (auto) follows HTA's default unless some rank has
            fewer than two steps, where dropping one would leave nothing.
        loader: ``"fast"`` (default; :mod:`hta_report.fastparse`, files parsed
            in parallel) or ``"hta"`` (HTA's own parser); see
            :func:`hta_report.ingest.resolve_loader`.
        cache: a :class:`hta_report.cache.Cache` for parsed files (fast loader), or None.

    Returns:
        A :class:`LoadedTraces` whose HTA ``TraceAnalysis`` is keyed by real ranks.

    Raises:
        InputError: missing/empty directory, duplicate ranks.
        TraceError: a file cannot be parsed or has no trace events (names the file).
    """
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    trace_dir = Path(trace_dir)
    loader = resolve_loader(loader)
    stages = progress.current()
    with stages.stage("find trace files"):
        paths = find_trace_files(trace_dir, recursive)
    with quiet_hta():
        trace = Trace(trace_files={i: str(p.resolve()) for i, p in enumerate(paths)},
                      trace_dir=str(trace_dir),
                      parser_config=report_parser_config() if loader == "fast" else None)
        parsed = parse_files(paths, trace.parser_config, cache, loader) if loader == "fast" else None
        try:
            for key, path in enumerate(paths):
                try:
                    if parsed is None:  # HTA's own parser, as HTA calls it
                        with stages.stage(f"parse {path.name} (HTA's parser)"):
                            trace.parse_single_rank(key)
                    else:
                        one = next(parsed)
                        stages.record(f"parse {path.name}" + (" (from cache)" if one.cached else ""), one.seconds)
                        add_parsed_rank(trace, key, one.get())
                except Exception as exc:  # HTA raises many types; we name the file.
                    raise TraceError(_describe_parse_error(exc), path) from exc
                if key not in trace.traces:
                    raise TraceError("holds no trace events (only metadata)", path)
        finally:
            if parsed is not None:
                parsed.close()

        metas = [trace.meta_data.get(key, {}) for key in range(len(paths))]
        ranks, sources, warns = _assign_ranks(paths, metas)

        # Re-key HTA's per-rank dicts by real rank before alignment and filtering.
        trace.traces = {ranks[k]: trace.traces[k] for k in range(len(paths))}
        trace.meta_data = {ranks[k]: metas[k] for k in range(len(paths))}
        trace.trace_files = {ranks[k]: str(paths[k].resolve()) for k in range(len(paths))}
        trace.is_parsed = True

        if include_last_step is None:
            step_ids = set(trace.symbol_table.get_profiler_step_ids())
            fewest = min(
                int(df["name"].isin(step_ids).sum()) for df in trace.traces.values()
            )
            include_last_step = fewest < 2
        with stages.stage("HTA align and filter"):
            trace.align_and_filter_trace(include_last_step)
            for rank, df in trace.traces.items():  # as Trace.load_traces does
                if not df.empty:
                    df = df.set_index("index", drop=False)
                    df.index.names = [None]
                    trace.traces[rank] = df

    analysis = TraceAnalysis.__new__(TraceAnalysis)  # reuse the parsed Trace
    analysis.t = trace

    files = []
    for key, path in enumerate(paths):
        meta = metas[key]
        info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
        files.append(
            TraceFileInfo(
                path=str(path),
                rank=ranks[key],
                rank_source=sources[key],
                size_bytes=path.stat().st_size,
                schema_version=meta.get("schemaVersion") if isinstance(meta.get("schemaVersion"), int) else None,
                host_name=None,
                world_size=info.get("world_size") if isinstance(info.get("world_size"), int) else None,
                backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
            )
        )
    files.sort(key=lambda f: f.rank)
    return LoadedTraces(
        analysis=analysis,
        files=files,
        meta=dict(trace.meta_data),
        last_step_included=bool(include_last_step),
        warnings=warns,
    )
