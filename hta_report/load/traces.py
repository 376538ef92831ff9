"""Loading traces: the only module that turns files into HTA objects.

Everything else (analyses, reports) receives a :class:`LoadedTraces`; a faster
loader can replace this module's internals without touching them.

Each file is parsed into what HTA's own parser gives, by default with
:mod:`hta_report.fastparse` (files in parallel, results cached; see
:mod:`hta_report.ingest`), and merged into an ``hta.common.trace.Trace`` as HTA
merges it; a file the fast parser does not reproduce exactly goes through
HTA's own parser (``hta.common.trace.Trace.parse_single_rank``) behind our
validating reader. Then every file gets its real rank before HTA aligns the
ranks in time and filters events.

Bad input is checked by :mod:`hta_report.validation`: before parsing (size
cap, the first 64 KiB of text) and on the parsed document, which this module
reads itself and hands to HTA (in place of HTA's ``parse_trace_dict``), so the
JSON is parsed once. A file that cannot be read is listed in
:attr:`LoadedTraces.unreadable` and the others are loaded; only when none can
be read is it an error.
"""
from __future__ import annotations

import contextlib
import copy
import gzip
import json
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pandas as pd

from . import progress, validation
from .discovery import find_trace_files, rank_from_file_name
from .errors import InputError, TraceError
from .ingest import add_parsed_rank, parse_files, report_parser_config, resolve_loader
from .model import TraceFileInfo, UnreadableTrace
from .validation import DEFAULT_MAX_TRACE_BYTES

#: Ranks at or above this (from distributedInfo or a file name) are not believed.
MAX_RANK = 2 ** 31

#: Event categories that are GPU activity in HTA's dataframes.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


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
        warnings: things the user should know (e.g. ranks assigned by order,
            events left out).
        unreadable: trace files found but left out, with the reason.
    """

    analysis: object
    files: List[TraceFileInfo]
    meta: Dict[int, dict]
    last_step_included: bool
    warnings: List[str] = field(default_factory=list)
    unreadable: List[UnreadableTrace] = field(default_factory=list)

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
        if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < MAX_RANK:
            ranks.append(rank)
            sources.append("distributedInfo")
            continue
        rank = rank_from_file_name(path)
        rank = rank if rank is not None and rank < MAX_RANK else None
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


class _Reader:
    """Reads one trace for HTA, in place of ``hta.common.trace_parser.parse_trace_dict``:
    UTF-8 text, parsed once, checked (:func:`validation.check_document`) and
    cleaned (:func:`validation.clean_events`); what was left out is kept in
    :attr:`reports` per file."""

    def __init__(self, originals: Dict[str, Path], kinds: Dict[str, str]) -> None:
        self.originals = originals
        self.kinds = kinds
        self.reports: Dict[Path, validation.EventReport] = {}

    def __call__(self, trace_file_path: str) -> Dict[str, Any]:
        path = self.originals.get(trace_file_path, Path(trace_file_path))
        try:
            if validation.is_gzip_name(path):
                with gzip.open(path, "rb") as fh:
                    raw = fh.read()
            else:
                raw = path.read_bytes()
            text = validation.decode_text(raw, path)
            del raw
            doc = json.loads(text)
        except TraceError:
            raise
        except Exception as exc:  # OSError, gzip, JSON, RecursionError, MemoryError
            raise TraceError(validation.describe_error(exc), path) from exc
        del text
        events = validation.check_document(doc, path)
        kept, report = validation.clean_events(events, self.kinds)
        if not report.duration_events:
            raise TraceError(report.empty_reason(), path)
        doc["traceEvents"] = kept
        self.reports[path] = report
        return doc


@contextlib.contextmanager
def _hta_reads_with(reader: Callable[[str], Dict[str, Any]]) -> Iterator[None]:
    """Make HTA's JSON parser get each trace's document from ``reader``."""
    from hta.common import trace_parser

    saved = trace_parser.parse_trace_dict
    trace_parser.parse_trace_dict = reader
    try:
        yield
    finally:
        trace_parser.parse_trace_dict = saved


def _clean(df: pd.DataFrame) -> bool:
    """True when a fast parse has events and every one has a ``ts`` and a
    non-negative ``dur``; otherwise the file goes through HTA's parser behind
    the validating reader, which leaves such events out (or names what is
    missing) and says how many."""
    if df.empty or "ts" not in df.columns or "dur" not in df.columns:
        return False  # the validating path names what is missing
    dur = pd.to_numeric(df["dur"], errors="coerce")
    ts = pd.to_numeric(df["ts"], errors="coerce")
    return not (dur.isna().any() or (dur < 0).any() or ts.isna().any())


def _parser_config(cfg=None):
    from hta.configs.parser_config import ParserBackend, ParserConfig

    cfg = cfg or ParserConfig.get_default_cfg()
    cfg.set_parser_backend(ParserBackend.JSON)  # the backend that reads through parse_trace_dict
    return cfg


def unreadable_error(unreadable: List[UnreadableTrace]) -> TraceError:
    """The error when no trace can be read: the one file's own reason, or the
    first three files with theirs."""
    if len(unreadable) == 1:
        return TraceError(unreadable[0].reason, unreadable[0].path)
    listed = "; ".join(f"{u.path}: {u.reason}" for u in unreadable[:3])
    more = f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
    return TraceError(f"all {len(unreadable)} traces are unreadable: {listed}{more}")


def load_traces(
    trace_dir: os.PathLike | str,
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    loader: Optional[str] = None,
    cache=None,
) -> LoadedTraces:
    """Find and parse every trace in ``trace_dir`` with HTA.

    A file that cannot be read (see :mod:`hta_report.validation`) is left out
    and listed in :attr:`LoadedTraces.unreadable`; events HTA cannot analyze
    (no ``ts``, negative ``dur``...) are left out with a warning.

    Args:
        trace_dir: directory of Kineto traces (``.json`` or ``.json.gz``), one per rank.
        recursive: descend into subdirectories.
        include_last_step: keep the last ``ProfilerStep`` (HTA drops it by
            default). ``None`` (auto) follows HTA's default unless some rank has
            fewer than two steps, where dropping one would leave nothing.
        max_trace_bytes: refuse a trace whose decompressed size passes this
            many bytes (checked before it is loaded).
        loader: ``"fast"`` (default; :mod:`hta_report.fastparse`, files parsed
            in parallel) or ``"hta"`` (HTA's own parser); see
            :func:`hta_report.ingest.resolve_loader`.
        cache: a :class:`hta_report.cache.Cache` for parsed files (fast loader), or None.

    Returns:
        A :class:`LoadedTraces` whose HTA ``TraceAnalysis`` is keyed by real ranks.

    Raises:
        InputError: missing/empty directory, duplicate ranks.
        TraceError: no file can be read (names the file, or each of them), or
            HTA fails aligning the ranks.
    """
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    trace_dir = Path(trace_dir)
    loader = resolve_loader(loader)
    stages = progress.current()
    with stages.stage("find trace files"):
        paths = find_trace_files(trace_dir, recursive)
    unreadable: List[UnreadableTrace] = []
    candidates: List[Path] = []
    for path in paths:
        try:
            if not path.name.endswith((".json", ".gz")):
                raise TraceError("HTA reads only names ending in .json or .json.gz in lower case; rename it", path)
            validation.check_file(path, max_trace_bytes)
        except TraceError as exc:
            unreadable.append(UnreadableTrace(path=str(path), reason=exc.message))
            continue
        candidates.append(path)
    if not candidates:
        raise unreadable_error(unreadable)

    with quiet_hta():
        originals = {str(p.resolve()): p for p in candidates}
        cfg = _parser_config(report_parser_config() if loader == "fast" else None)
        try:
            trace = Trace(trace_files={i: str(p.resolve()) for i, p in enumerate(candidates)},
                          trace_dir=str(trace_dir), parser_config=cfg)
        except Exception as exc:  # a file vanished or became unreadable since it was checked
            raise TraceError(f"HTA cannot open the traces ({validation.exception_summary(exc)})", trace_dir) from exc
        reader = _Reader(originals, validation.arg_kinds(cfg.get_args()))
        good: List[Tuple[int, Path]] = []
        # fast parser first (no fallback inside: a file it cannot reproduce
        # exactly comes back as an error and goes through HTA's parser here,
        # behind the validating reader)
        parsed = parse_files(candidates, cfg, cache, loader, fallback=False) if loader == "fast" else None
        with _hta_reads_with(reader):
            for key, path in enumerate(candidates):
                try:
                    one = next(parsed) if parsed is not None else None
                    if one is not None and one.error is None and _clean(one.result[1]):
                        stages.record(f"parse {path.name}" + (" (from cache)" if one.cached else ""), one.seconds)
                        add_parsed_rank(trace, key, one.result)
                    else:
                        with stages.stage(f"parse {path.name} (HTA's parser)"):
                            trace.parse_single_rank(key)
                    if key not in trace.traces:
                        raise TraceError("holds no trace events HTA can analyze", path)
                except Exception as exc:  # HTA raises many types; we name the file.
                    trace.traces.pop(key, None)
                    trace.meta_data.pop(key, None)
                    reason = exc.message if isinstance(exc, TraceError) else validation.describe_error(exc)
                    unreadable.append(UnreadableTrace(path=str(path), reason=reason))
                    continue
                good.append((key, path))
        if parsed is not None:
            parsed.close()
        if not good:
            raise unreadable_error(unreadable)

        keys = [k for k, _ in good]
        paths = [p for _, p in good]
        metas = [trace.meta_data.get(k, {}) for k in keys]
        ranks, sources, warns = _assign_ranks(paths, metas)
        for path in paths:
            note = reader.reports[path].warning() if path in reader.reports else None
            if note:
                warns.append(f"{path}: {note}")

        # Re-key HTA's per-rank dicts by real rank before alignment and filtering.
        trace.traces = {ranks[i]: trace.traces[k] for i, k in enumerate(keys)}
        trace.meta_data = {ranks[i]: metas[i] for i in range(len(keys))}
        trace.trace_files = {ranks[i]: str(paths[i].resolve()) for i in range(len(keys))}
        trace.is_parsed = True

        where = paths[0] if len(paths) == 1 else trace_dir
        try:
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
        except Exception as exc:
            step = "aligning ranks in time and filtering steps (HTA)"
            raise TraceError(f"analysis failed at {step}: {validation.exception_summary(exc)}", where,
                             step=step) from exc

    analysis = TraceAnalysis.__new__(TraceAnalysis)  # reuse the parsed Trace
    analysis.t = trace

    files = []
    for i, path in enumerate(paths):
        meta = metas[i]
        info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
        files.append(
            TraceFileInfo(
                path=str(path),
                rank=ranks[i],
                rank_source=sources[i],
                size_bytes=path.stat().st_size,
                schema_version=_small_int(meta.get("schemaVersion")),
                host_name=None,
                world_size=_small_int(info.get("world_size")),
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
        unreadable=unreadable,
    )


def _small_int(value: Any) -> Optional[int]:
    """``value`` if it is an int (not a bool) that fits in 32 bits, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_RANK <= value < MAX_RANK:
        return value
    return None
