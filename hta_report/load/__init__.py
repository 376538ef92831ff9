"""The loader: a directory of trace files in, :class:`LoadedTraces` out.

The only package that reads trace files or builds HTA's objects from them;
analyses and reports receive a :class:`LoadedTraces`.

1. :mod:`.discovery` finds the trace files (and ranks in their names);
2. :mod:`.validation` checks each before it is parsed (size cap, the first
   64 KiB of text) and turns every failure into a one-line reason;
3. :mod:`.parse` parses them with :mod:`.fastparse` (what HTA's
   ``parse_trace_file`` gives, built from orjson pieces; several files, or
   the pieces of one large file, in worker processes), through the
   :mod:`.parse_cache`;
4. a file the fast parser does not reproduce exactly goes through HTA's own
   functions behind our validating reader (:mod:`.hta_parser`), which leaves
   out and counts the events HTA cannot analyze;
5. :mod:`.traces` gives every file its real rank, merges the parses into
   HTA's ``Trace`` and aligns and filters the ranks as HTA does.

A file that cannot be read is listed in :attr:`LoadedTraces.unreadable` and
the others are loaded; only when none can be read is it an error.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from .. import progress, workers
from ..cache import Cache
from ..errors import TraceError, internal_error
from ..files import Location, bare_name, stored_bytes
from ..model import UnreadableTrace
from . import sizecap, validation
from .discovery import Inputs, find_trace_files, input_dir, input_label
from .spec import RunSpec, as_spec, describe_run
from .parse import LOADERS, Parsed, parse_files, report_parser_config, resolve_loader, sm_arg_specs
from .traces import (LoadedTraces, add_parsed_rank, align_and_filter, assign_ranks, file_info, quiet_hta, rekey,
                     unreadable_error)
from .validation import DEFAULT_MAX_TRACE_BYTES

__all__ = ["load_traces", "LoadedTraces", "RunSpec", "describe_run", "quiet_hta", "unreadable_error", "resolve_loader", "LOADERS",
           "find_trace_files", "input_dir", "input_label", "Inputs", "DEFAULT_MAX_TRACE_BYTES"]


def load_traces(
    trace_dir: Union[Inputs, RunSpec],
    recursive: bool = False,
    include_last_step: Optional[bool] = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    loader: Optional[str] = None,
    cache: Optional[Cache] = None,
) -> LoadedTraces:
    """Check and parse every trace of a run (a :class:`~.spec.RunSpec`, or
    the inputs and options :func:`~.spec.describe_run` makes one of).

    A file that cannot be read (see :mod:`hta_report.load.validation`) is left
    out and listed in :attr:`LoadedTraces.unreadable`; events HTA cannot
    analyze (no ``ts``, negative ``dur``...) are left out with a warning.

    Args:
        trace_dir: the run's :class:`~.spec.RunSpec` (the other options are
            then its own); or a directory of Kineto traces (``.json`` or
            ``.json.gz``), one per rank; or a trace file; or a list of either
            (see :func:`hta_report.load.discovery.find_trace_files`).
        recursive: descend into subdirectories.
        include_last_step: keep the last ``ProfilerStep`` (HTA drops it by
            default). ``None`` (auto) follows HTA's default unless some rank has
            fewer than two steps, where dropping one would leave nothing.
        max_trace_bytes: refuse a trace whose decompressed size passes this
            many bytes (checked before it is loaded).
        loader: ``"fast"`` (default) or ``"hta"`` (HTA's own functions for
            every file); see :func:`hta_report.load.parse.resolve_loader`.
        cache: a :class:`hta_report.cache.Cache` for parsed files (fast loader), or None.

    Returns:
        A :class:`LoadedTraces` keyed by real ranks.

    Raises:
        InputError: missing/empty directory, a file that is no trace, a
            folder of several runs, duplicate ranks.
        TraceError: no file can be read (names the file, or each of them), or
            HTA fails aligning the ranks.
    """
    with progress.current().stage("find trace files"):
        spec = as_spec(trace_dir, recursive=recursive, include_last_step=include_last_step,
                       max_trace_bytes=max_trace_bytes, loader=loader)
    loader, include_last_step, max_trace_bytes = spec.loader, spec.include_last_step, spec.max_trace_bytes
    trace_dir = spec.folder
    candidates, unreadable = _checked(list(spec.files), max_trace_bytes)
    with quiet_hta():
        trace = new_trace(loader)
        with progress.current().stage(f"parse {len(candidates)} file(s) in all"):
            progress.current().expect_bytes(stored_bytes(candidates))
            good, notes = _parse_into(trace, candidates, loader, cache, unreadable, max_trace_bytes)
        keys = [k for k, _ in good]
        paths = [p for _, p in good]
        metas = [trace.meta_data.get(k, {}) for k in keys]
        ranks, sources, warns = assign_ranks(paths, metas)
        warns += [f"{p}: {notes[p]}" for p in paths if notes.get(p)]
        rekey(trace, keys, ranks, paths)
        workers.trim_heap()  # the parse's freed pages, before HTA's filter copies the frames
        with progress.current().stage("HTA align and filter"):
            kept, activity = align_and_filter(trace, include_last_step, paths[0] if len(paths) == 1 else trace_dir)
    files = sorted((file_info(p, r, s, m) for p, r, s, m in zip(paths, ranks, sources, metas)), key=lambda f: f.rank)
    return LoadedTraces(trace=trace, files=files, meta=dict(trace.meta_data), last_step_included=kept,
                        warnings=warns, unreadable=unreadable, gpu_activity=activity)


def _checked(paths: List[Location], max_trace_bytes: int) -> Tuple[List[Location], List[UnreadableTrace]]:
    """The files that pass the checks before parsing, and the others with their
    reason. A gzip's decompressed size is checked while it is parsed
    (:mod:`.sizecap`), not by inflating it once more here.

    Raises:
        TraceError: none passes.
    """
    unreadable: List[UnreadableTrace] = []
    candidates: List[Location] = []
    for path in paths:
        try:
            if not bare_name(path).endswith((".json", ".gz")):
                raise TraceError("HTA reads only names ending in .json or .json.gz in lower case; rename it",
                                 str(path))
            validation.check_file(path, sizecap.precheck_cap(path, max_trace_bytes))
        except TraceError as exc:
            unreadable.append(UnreadableTrace(path=str(path), reason=exc.message))
            continue
        candidates.append(path)
    if not candidates:
        raise unreadable_error(unreadable)
    return candidates, unreadable


def _parser_config(loader: str):
    """HTA's parser configuration: the args the report reads (fast loader) or
    HTA's default args (``hta``), JSON backend."""
    from hta.configs.parser_config import ParserBackend, ParserConfig

    if loader == "fast":
        cfg = report_parser_config()
    else:
        cfg = ParserConfig.get_default_cfg()
        cfg.add_args(sm_arg_specs())
    cfg.set_parser_backend(ParserBackend.JSON)
    return cfg


def new_trace(loader: str):
    """An empty HTA ``Trace`` (no files: we parse them and add each rank,
    :func:`~.traces.add_parsed_rank`) with the parser configuration of ``loader``."""
    from hta.common.trace import Trace

    return Trace(trace_files={}, trace_dir=".", parser_config=_parser_config(loader))


def _parse_into(trace, candidates: List[Location], loader: str, cache: Optional[Cache],
                unreadable: List[UnreadableTrace], max_bytes: int
                ) -> Tuple[List[Tuple[int, Location]], Dict[Location, Optional[str]]]:
    """Parse every candidate into ``trace`` (under its index): the fast parser
    first, HTA's path (:mod:`.hta_parser`) for a file it does not reproduce
    exactly; a file that fails is appended to ``unreadable``.

    Returns:
        ``(key, path)`` of the files parsed, and path -> a note on events left
        out (HTA's path only).

    Raises:
        TraceError: no file could be parsed.
    """
    from .hta_parser import parse_with_hta

    stages = progress.current()
    cfg = trace.parser_config
    good: List[Tuple[int, Location]] = []
    notes: Dict[Location, Optional[str]] = {}
    parsed = (parse_files(candidates, cfg, cache, loader, fallback=False, max_bytes=max_bytes)
              if loader == "fast" else None)
    try:
        for key, path in enumerate(candidates):
            try:
                one = next(parsed) if parsed is not None else None
                if one is not None and isinstance(one.error, TraceError):
                    raise one.error  # over the size cap: not for HTA's parser either
                why = _why_not_fast(one)
                if why is None:
                    assert one is not None and one.result is not None  # a clean fast parse (_why_not_fast)
                    stages.record(f"parse {path.name}" + (" (from cache)" if one.cached else ""), one.seconds)
                    result = one.result
                else:
                    with stages.stage(f"parse {path.name} (HTA's parser: {why})"):
                        result, report = parse_with_hta(path, cfg, exact_times=True, max_bytes=max_bytes)
                    notes[path] = report.warning()
                if not add_parsed_rank(trace, key, result):
                    raise TraceError("holds no trace events HTA can analyze", str(path))
            except Exception as exc:  # a trace's fault is a TraceError; anything else is a bug
                trace.traces.pop(key, None)
                trace.meta_data.pop(key, None)
                reason = exc.message if isinstance(exc, TraceError) else \
                    internal_error(exc, "parsing failed").message
                unreadable.append(UnreadableTrace(path=str(path), reason=reason))
                continue
            good.append((key, path))
    finally:
        if parsed is not None:
            parsed.close()
    if not good:
        raise unreadable_error(unreadable)
    return good, notes


def _why_not_fast(parsed: Optional[Parsed]) -> Optional[str]:
    """Why a file goes through HTA's path instead of its fast parse (a
    :class:`~hta_report.load.parse.Parsed`, None with the ``hta`` loader),
    or None when the fast parse is used. Shown on ``-v``."""
    from .fastparse import Unsupported

    if parsed is None:
        return "the hta loader was chosen"
    if parsed.error is not None:
        if isinstance(parsed.error, Unsupported):
            return f"the fast parser does not handle {parsed.error}"
        return f"the fast parser failed: {validation.exception_summary(parsed.error, 120)}"
    assert parsed.result is not None  # a Parsed holds its result or its error
    return _unclean(parsed.result[1])


def _unclean(df) -> Optional[str]:
    """None when a fast parse has events and every one has a ``ts`` and a
    non-negative ``dur`` as written in the file (the exact times, where HTA
    rounds them: its rounding makes sub-µs events ``dur`` -1, which is HTA's
    own result, not a fault of the file); otherwise what is wrong, and the
    file goes through HTA's path behind the validating reader, which leaves
    such events out (or names what is missing) and says how many."""
    import pandas as pd

    from .exact import EXACT_DUR, EXACT_TS

    if df.empty or "ts" not in df.columns or "dur" not in df.columns:
        return "no events with ts and dur"  # the validating path names what is missing
    exact = EXACT_DUR in df.columns
    dur = pd.to_numeric(df[EXACT_DUR if exact else "dur"], errors="coerce")
    ts = pd.to_numeric(df[EXACT_TS if exact else "ts"], errors="coerce")
    if ts.isna().any():
        return "events without ts"
    if dur.isna().any():
        return "events without dur"
    if (dur < 0).any():
        return "events with a negative dur"
    return None
