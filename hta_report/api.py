"""The Python API behind the CLI, and the one owner of the pipeline.

``analyze`` runs it end to end::

    result cache lookup -> load (hta_report.load) -> metrics (hta_report.analysis)
      -> advice (hta_report.rules) -> store in the result cache

and ``write_reports`` renders a result in every requested format
(:data:`hta_report.render.REPORTERS`), drawing its charts (or reading them
from the cache) here, so that the reporters stay pure functions of the model.
``compare_paths`` reads or analyzes both sides, then compares the two results
(:func:`hta_report.compare.compare`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from . import progress
from .cache import Cache, ResultCache, as_cache
from .errors import InputError, OutputError, PartialInputError
from .escape import redact_url
from .files import Location, PathOrURL, is_url, location, shown
from .model import AnalysisResult, Comparison
from .output import Parts, Text, check_folder, write_all_atomic
from .render import format_for_path, reporter

if TYPE_CHECKING:
    from .load.discovery import Inputs
    from .load.spec import RunSpec

__all__ = ["analyze", "describe", "analyze_run", "write_reports", "load_result", "compare_paths", "write_comparison", "rule_catalogue",
           "partial_input_error", "check_outputs", "input_files"]

Outputs = Sequence[Tuple[os.PathLike | str, Optional[str]]]


def analyze(trace_dir: "Inputs", recursive: bool = False, include_last_step: Optional[bool] = None,
            max_trace_bytes: Optional[int] = None, config=None, loader: Optional[str] = None,
            cache: Optional[Cache | os.PathLike | str] = None, engine: str = "local",
            ray_address: Optional[str] = None, source_root: Optional[os.PathLike | str] = None) -> AnalysisResult:
    """Analyze the Kineto traces of one run (one file per rank): metrics and advice.

    Traces that cannot be read or analyzed are left out and listed in
    ``result.inventory.unreadable``; the result covers the others (the CLI
    then exits 1 after writing the report). A result found in ``cache``
    returns before pandas, HTA or the analyses are even imported.

    Args:
        trace_dir: a directory holding ``.json``/``.json.gz`` traces, one
            trace file, or a list of directories and files (the ranks of one
            run); each a local path or a URL fsspec reads (``file://``,
            ``s3://``...; see :mod:`hta_report.files`). ``inventory.input_dir``
            says it as given, and ``manifest.json`` is read from the run's
            folder (:func:`hta_report.load.discovery.input_dir`).
        recursive: descend into subdirectories.
        include_last_step: see :func:`hta_report.load.load_traces`.
        max_trace_bytes: cap on a trace's decompressed size (bytes); larger
            traces are refused (a plain ``.json`` before loading, a gzip as
            soon as it inflates past the cap; default 4 GiB).
        config: rule thresholds and disabled rules
            (:class:`hta_report.rules.AdviceConfig`); defaults when None.
        loader: ``"fast"`` (default) or ``"hta"`` (HTA's own parser).
        cache: a :class:`hta_report.cache.Cache` (or a directory for one) for
            parsed files and whole results, keyed by the files' contents, the
            options and the rule configuration; None (default): no cache.
        engine: where the per-rank work runs: ``"local"`` (this machine's
            processes) or ``"ray"`` (a Ray cluster; see :mod:`hta_report.engines`).
            The result does not depend on it.
        ray_address: with ``engine="ray"``, the cluster (default ``RAY_ADDRESS``,
            else a Ray instance started here).
        source_root: the repository the traced code lives in: findings'
            source lines (``with_stack`` traces) are read from it and named
            relative to it (default: the git work tree holding each file;
            see :mod:`hta_report.locate`). Lines are located on every call,
            cached result or not, since they read the source files as they are now.

    Returns:
        The full result model, findings (with their source lines) and rule checks included.

    Raises:
        hta_report.errors.InputError: a missing path, an empty directory, a
            file that is no trace, a folder of several runs (named, with the
            commands to analyze or compare them), two files claiming one rank,
            an unknown engine or Ray not installed.
        hta_report.errors.TraceError: no trace can be read or analyzed (names
            the file, or each file), or a step over all ranks failed.
    """
    spec = describe(trace_dir, recursive=recursive, include_last_step=include_last_step,
                    max_trace_bytes=max_trace_bytes, loader=loader, engine=engine, ray_address=ray_address)
    return analyze_run(spec, config=config, cache=cache, source_root=source_root)


def describe(trace_dir: "Inputs", **options) -> "RunSpec":
    """The run ``trace_dir`` names, described once (its trace files found,
    the windows of one process set aside, the options resolved): see
    :func:`hta_report.load.spec.describe_run` for ``options``.

    Raises:
        hta_report.errors.InputError: a missing path, no trace files, a
            folder of several runs.
    """
    from .load.spec import describe_run

    with progress.current().stage("find trace files"):
        return describe_run(trace_dir, **options)


def analyze_run(spec: "RunSpec", config=None, cache: Optional[Cache | os.PathLike | str] = None,
                source_root: Optional[os.PathLike | str] = None) -> AnalysisResult:
    """:func:`analyze` of a run already described (:func:`describe`).

    Raises:
        As :func:`analyze`.
    """
    cache = as_cache(cache)
    results = ResultCache(cache) if cache is not None else None
    key = None
    if results is not None:
        key = results.key(spec, config)
        hit = results.get(key) if key is not None else None
        if hit is not None:
            progress.current().record("analysis result (from cache)", 0.0)
            hit.inventory.input_dir = spec.label
            return _locate(_redacted(hit) if _reads_urls(spec) else hit, config, source_root)
    result = _analyze_uncached(spec, config, cache)
    result.inventory.input_dir = spec.label
    if _reads_urls(spec):  # before it is stored, located, shown: nothing downstream sees a URL's secrets
        result = _redacted(result)
    if results is not None and key is not None and not result.inventory.unreadable \
            and not any(r.failures for r in result.ranks):
        results.put(key, result)
    return _locate(result, config, source_root)


def _reads_urls(spec: "RunSpec") -> bool:
    """True when the run reads a URL (not ``file://``)."""
    return is_url(spec.folder) or any(is_url(p) for p in spec.files)


def _redacted(result):
    """``result`` (a result or a comparison) with every string it holds
    passed through :func:`hta_report.escape.redact_url`: each URL's login and
    secret query parameters (signatures, tokens, keys) redacted, in the
    inventory (``input_dir``, the files' paths, the unreadable files and
    their reasons, the windows, the warnings) and wherever else a location
    was copied (``ranks[].file``, messages). The files were read with the
    full URLs; a result only shows them. Changed in place; returned."""
    import dataclasses

    def clean(value):
        if isinstance(value, str):
            return redact_url(value)
        if isinstance(value, list):
            value[:] = [clean(v) for v in value]
            return value
        if isinstance(value, tuple):
            return type(value)(*map(clean, value)) if hasattr(value, "_fields") else tuple(map(clean, value))
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                object.__setattr__(value, f.name, clean(getattr(value, f.name)))
        return value

    return clean(result)


def _locate(result: AnalysisResult, config, source_root: Optional[os.PathLike | str]) -> AnalysisResult:
    """``result`` with its findings' source lines (:func:`hta_report.locate.locate`).
    Locating reads the user's files: if that fails unexpectedly, the report
    is written without lines and a warning says why (one line)."""
    from .errors import one_line
    from .locate import locate

    result.inventory.source_root = os.path.abspath(os.fspath(source_root)) if source_root is not None else ""
    with progress.current().stage("source lines"):
        try:
            return locate(result, source_root, library=getattr(config, "library_modules", ()) or ())
        except Exception as exc:  # never lose a report to a source file
            for f in result.findings:
                f.locations = []
            result.inventory.warnings.append(f"source lines not located: {type(exc).__name__}: "
                                             f"{one_line(str(exc))[:200]}")
            return result


def _analyze_uncached(spec: "RunSpec", config, cache: Optional[Cache]) -> AnalysisResult:
    """Load and measure (on the run's engine), advise (see :func:`analyze`)."""
    from .analysis import analysis_step, where
    from .engines import measure
    from .rules import advise

    result = measure(spec, cache)
    result.inventory.warnings[:0] = list(spec.merged)  # files of several ranks, split: said first
    with analysis_step("advice", where(result.ranks, spec.folder)), progress.current().stage("advice"):
        _advise(result, config, advise)
    return result


def _advise(result: AnalysisResult, config, advise) -> None:
    """Give ``result`` its findings, checks and what the fixes buy together.
    A rank where an analysis step failed (``RankResult.failures``) is left out
    of the rules that read that step's figures only (each rule's ``needs``),
    and their checks say so: no rule reads the defaults of a section that was
    not computed."""
    advice = advise(result, config)
    result.findings, result.checks, result.together = advice.findings, advice.checks, advice.together


def report_charts(result: AnalysisResult, cache: Optional[Cache | os.PathLike | str] = None) -> Dict[str, str]:
    """The chart images of ``result``'s report (name -> data URI), read from
    ``cache`` when drawn before for the same result, else drawn (and stored)."""
    def draw() -> Dict[str, str]:
        from .render.charts import chart_specs  # matplotlib: imported only when drawing

        return _draw_charts(chart_specs(result))

    cache = as_cache(cache)
    return draw() if cache is None else ResultCache(cache).charts(result, draw)


#: Charts drawn in worker processes when there are at least this many (a
#: chart takes matplotlib 0.05-0.15 s; a pool of forked workers about 0.05 s).
PARALLEL_MIN_CHARTS = 6


def _draw_charts(specs) -> Dict[str, str]:
    """Draw :data:`hta_report.render.charts.ChartSpec` entries: name -> data
    URI, in order; in worker processes (:func:`hta_report.workers.pool`) when
    there are :data:`PARALLEL_MIN_CHARTS` or more (the 18 charts of an 8-rank,
    68-step CPU report: 1.7 s in one process, 1.15 s in two on the benchmark
    machine)."""
    from . import workers
    from .render.charts import draw

    n = min(workers.count(), len(specs))
    if n <= 1 or len(specs) < PARALLEL_MIN_CHARTS or not workers.can_fork():
        return draw(specs)
    # the children read the result this process holds: frozen, their collections leave its pages shared
    with workers.fork_friendly(), workers.pool(n) as pool:  # largest first would need sizes; page order is close
        futures = [(name, pool.submit(fn, *args, **kwargs)) for name, fn, args, kwargs in specs]
        return {name: future.result() for name, future in futures}


def write_reports(result: AnalysisResult, outputs: Outputs,
                  cache: Optional[Cache | os.PathLike | str] = None) -> List[Path]:
    """Render ``result`` once per ``(path, format)`` and write each atomically.

    Every report is rendered before any file is written, and all are written
    to temporary files before any is renamed into place, so a rendering or
    writing error leaves every existing file byte-identical (and no
    temporary file behind).

    Args:
        result: the analysis.
        outputs: ``(path, format)`` pairs; ``format`` None takes it from the
            extension (see :func:`hta_report.render.format_for_path`).
        cache: where chart images drawn for this result before are read from
            (and new ones stored); None draws them.

    Returns:
        The paths written.

    Raises:
        hta_report.errors.OutputError: a path's extension names no format
            (and none is given), a directory is missing or not writable.
        hta_report.errors.InputError: two outputs are one file, or an output is
            one of the result's input files (a trace, the manifest): nothing
            is written (see :func:`check_outputs`).
    """
    check_outputs(outputs, _inputs(result))
    charts: List[Dict[str, str]] = []

    def render_as(fmt: str) -> Text:
        rep = reporter(fmt)
        make = rep.render_parts(result)
        if make is not None:  # written part by part as made: a result of many ranks is never held as text
            return Parts(make)
        if rep.charts and not charts:
            with progress.current().stage("draw charts"):
                charts.append(report_charts(result, cache))
        return rep.render(result, charts[0] if rep.charts else None)

    return _render_and_write(render_as, outputs)


def preparations(outputs: Outputs) -> List[Callable[[], None]]:
    """What this process may do for writing ``outputs`` while its workers
    analyze the traces (:func:`hta_report.workers.meanwhile`): for an HTML
    report, import and warm up matplotlib (:func:`hta_report.render.charts.warm_up`)
    and compile the template (:func:`hta_report.render.html.prepare`).
    Outputs whose format is unknown are left to :func:`write_reports` to refuse."""
    def fmt_of(path, fmt) -> Optional[str]:
        try:
            return format_for_path(path, fmt)
        except ValueError:
            return None

    return [_warm_up_charts, _compile_html] if any(fmt_of(p, f) == "html" for p, f in outputs) else []


def _warm_up_charts() -> None:
    from .render.charts import warm_up  # matplotlib

    warm_up()


def _compile_html() -> None:
    from .render.html import prepare

    prepare()


def _inputs(result: AnalysisResult) -> List[str]:
    """The files ``result`` was read from: its traces (unreadable ones too) and the manifest."""
    inv = result.inventory
    return [f.path for f in inv.files] + [u.path for u in inv.unreadable] + [
        o for w in inv.windows for o in w.others] + [os.path.join(inv.input_dir, "manifest.json")]


def input_files(path: os.PathLike | str, recursive: bool = False) -> List[Location]:
    """The files a run will read from ``path``: the file itself (a saved
    result), or a directory's trace files and ``manifest.json``; nothing for
    a path that does not exist (the run reports it)."""
    from .load import find_trace_files

    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    try:
        return list(find_trace_files(p, recursive)) + [p / "manifest.json"]
    except InputError:  # no traces: the run says so
        return [p / "manifest.json"]


def _same_file(a: os.PathLike | str, b: PathOrURL) -> bool:
    # a URL (its UPath is no os.PathLike) names no local file: only the same URL is the same file
    if is_url(a) or is_url(b) or not isinstance(b, (str, os.PathLike)):
        return str(a) == str(b)
    try:
        return os.path.samefile(a, b)  # hard links and symbolic links included
    except OSError:  # one does not exist (yet): compare the paths
        return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def check_outputs(outputs: Outputs, inputs: Sequence[PathOrURL]) -> None:
    """Refuse outputs that would destroy an input or each other, or whose
    folder cannot be made (:func:`hta_report.output.check_folder`).

    Raises:
        hta_report.errors.InputError: an output is one of ``inputs`` (the same
            file, through any path or link), or two outputs are one file
            (e.g. ``-o r.json --json r.json``); names the file.
        hta_report.errors.OutputError: an output's folder cannot be made.
    """
    seen: List[os.PathLike | str] = []
    for path, _ in outputs:
        check_folder(path)
        for other in seen:
            if _same_file(path, other):
                raise InputError("given as two outputs; each report needs its own file", path)
        for source in inputs:
            if _same_file(path, source):
                raise InputError("is an input of this run; writing a report there would destroy it: "
                                 "choose another output file", path)
        seen.append(path)


def _render_and_write(render_as: Callable[[str], Text], outputs: Outputs) -> List[Path]:
    """Render with ``render_as(format)`` once per output, timed as stages, then
    write them all atomically (see :func:`write_reports`)."""
    stage = progress.current().stage
    rendered = []
    for p, f in outputs:
        try:
            fmt = format_for_path(str(p), f)
        except ValueError as exc:
            if not Path(p).is_dir():
                raise OutputError(str(exc), p) from None
            fmt = "html"  # a directory: the writer refuses it and says so
        with stage(f"render {fmt}"):
            rendered.append((Path(p), render_as(fmt)))
    with stage("write reports"):
        return write_all_atomic(rendered)


def partial_input_error(result: AnalysisResult) -> Optional[PartialInputError]:
    """The error to report after writing ``result`` when some traces were
    unreadable (``N of M traces unreadable; the report covers the rest``) or
    analyzed only in part (``N of M traces analyzed in part; the report says
    which sections are missing``), else None."""
    bad = result.inventory.unreadable
    partial = [r for r in result.ranks if r.failures]
    total = len(bad) + len(result.inventory.files)
    parts = []
    if bad:
        parts.append(f"{len(bad)} of {total} traces unreadable; the report covers the rest")
    if partial:
        parts.append(f"{len(partial)} of {total} traces analyzed in part; the report says which sections are missing")
    return PartialInputError("; ".join(parts)) if parts else None


#: Default cap on the size of a saved result that ``compare`` reads
#: (``--max-result-size``): 128 MiB, about 2,000 ranks (a rank takes about
#: 64 kB: the 1,024-rank set of ``bench/scale.py`` wrote 65 MB, over the
#: 64 MiB this was). Checked before the file is parsed; parsing takes about
#: five times the file's size in memory.
DEFAULT_MAX_RESULT_BYTES = 128 * 1024 ** 2


def _read_at_most(source: Location, limit: int, chunk: int = 1 << 20) -> bytes:
    """The first ``limit`` bytes of ``source`` (fewer if it is shorter), read
    in chunks: memory follows what the file holds, not the cap.

    Raises:
        OSError: it cannot be read.
    """
    parts: List[bytes] = []
    total = 0
    with source.open("rb") as fh:
        while total < limit:
            block = fh.read(min(chunk, limit - total))
            if not block:
                break
            parts.append(block)
            total += len(block)
    return b"".join(parts)


def load_result(path: PathOrURL, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> AnalysisResult:
    """Read a result saved by ``analyze --json``, checked against the result
    model first (:func:`hta_report.model_check.check_result`: types, finite
    numbers, ranges, known severities and statuses, required sections).

    At most ``max_bytes`` + 1 bytes are read (a file, a stream or a URL alike),
    so an oversized result is refused before it is parsed. A UTF-8 byte order
    mark at the start is accepted (editors on Windows write one).

    Args:
        path: the saved result (a path or a URL).
        max_bytes: the largest result accepted, in bytes
            (:data:`DEFAULT_MAX_RESULT_BYTES`, ``compare --max-result-size``).

    Raises:
        hta_report.errors.InputError: unreadable file, larger than
            ``max_bytes``, not UTF-8, not JSON, or not a valid hta-report
            result (one line naming the file and the first problem, e.g.
            ``aggregate.idle_pct: NaN, expected a finite number``).
    """
    from .load.validation import format_size
    from .model_check import ResultError, check_result

    named = str(path)  # what the errors name
    cap = f"the --max-result-size cap of {format_size(max_bytes)}"
    try:
        source = location(path)
        size: Optional[int]
        try:
            size = source.stat().st_size
        except (OSError, AttributeError, TypeError, ValueError, NotImplementedError):
            size = None  # a stream or a URL without a size: the bounded read below decides
        if isinstance(size, int) and size > max_bytes:
            raise InputError(f"a saved result of {format_size(size)}, more than {cap}: raise the cap "
                             "to compare it", named)
        raw = _read_at_most(source, max_bytes + 1)
        if len(raw) > max_bytes:
            raise InputError(f"a saved result larger than {cap}: raise the cap to compare it", named)
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(f"cannot read the result: {reason}", named) from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not a readable hta-report result: not JSON ({exc})", named) from exc
    if isinstance(data, dict) and data.get("kind") == "comparison":
        raise InputError("a comparison, not a result: compare results saved by `analyze --json`", named)
    try:
        check_result(data)
        result = AnalysisResult.from_dict(data)
    except (ResultError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InputError(f"not a valid hta-report result: {exc}", named) from exc
    return _redacted(result) if "://" in text else result  # saved by an older version, or edited


def load_side(path: os.PathLike | str, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
              **analyze_kwargs) -> AnalysisResult:
    """One side of a comparison: a result saved by ``analyze --json`` (at
    most ``max_result_bytes`` bytes, see :func:`load_result`), or a trace
    directory or trace file analyzed now (``analyze_kwargs`` go to
    :func:`analyze`).

    Raises:
        hta_report.errors.InputError, hta_report.errors.TraceError: as
            :func:`load_result` and :func:`analyze`.
    """
    from .files import unless_missing, url_error
    from .load.discovery import UNVERSIONED_MESSAGE, is_hta_report_output, is_unversioned_result

    p = location(path)
    try:
        saved = p.is_file() and is_hta_report_output(p)
        if not saved and p.is_file() and is_unversioned_result(p):
            raise InputError(UNVERSIONED_MESSAGE, shown(p))
        missing = not saved and not p.exists()
        if missing and is_url(p):  # or a server that does not answer
            unless_missing(p)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a URL that fails to answer: one line naming it
        if not is_url(p):
            raise
        raise url_error(exc, p) from exc
    if saved:
        return load_result(p, max_result_bytes)
    if missing:
        raise InputError("no such trace directory, trace file or result file", shown(p))
    return analyze(p, **analyze_kwargs)


def compare_paths(base: os.PathLike | str, new: os.PathLike | str,
                  max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, alpha: Optional[float] = None,
                  threshold_pct: Optional[float] = None, **analyze_kwargs) -> Comparison:
    """Compare two trace directories or saved results (``analyze --json``;
    each at most ``max_result_bytes`` bytes, see :func:`load_result`).

    ``analyze_kwargs`` go to :func:`analyze` for a side that is a trace
    directory (``recursive``, ``config``, ``cache``...): with the same
    ``cache`` as an earlier analyze, a directory is not parsed again.
    ``alpha`` (false-discovery rate) and ``threshold_pct`` (the smallest step
    change, %) go to :func:`hta_report.compare.compare` (None: its defaults).

    Returns:
        A :class:`hta_report.model.Comparison` labelled with the two paths.

    Raises:
        hta_report.errors.InputError, hta_report.errors.TraceError: a side cannot be read.
    """
    from .compare import compare
    from .compare_stats import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PCT

    return compare(load_side(base, max_result_bytes, **analyze_kwargs),
                   load_side(new, max_result_bytes, **analyze_kwargs),
                   base_label=shown(base), new_label=shown(new),
                   alpha=DEFAULT_ALPHA if alpha is None else alpha,
                   threshold_pct=DEFAULT_THRESHOLD_PCT if threshold_pct is None else threshold_pct)


def write_comparison(comparison: Comparison, outputs: Outputs) -> List[Path]:
    """Render a comparison once per ``(path, format)`` and write each atomically
    (all rendered before any is written).

    Raises:
        hta_report.errors.InputError: as :func:`check_outputs`, against both
            sides' inputs (a saved result, or the traces).
    """
    sides = [comparison.base_label, comparison.new_label]
    check_outputs(outputs, [p for p in sides if os.path.isfile(p)]
                  + [p for r in (comparison.base, comparison.new) if r is not None for p in _inputs(r)])
    return _render_and_write(lambda fmt: reporter(fmt).render_comparison(comparison), outputs)


def rule_catalogue(config_path: Optional[os.PathLike | str] = None) -> List[dict]:
    """The advice rules (``id``, ``rule``, ``title``, ``description``,
    ``threshold``, ``source``, ``fix``, ``doc_url``, ``enabled``: see
    :func:`hta_report.rules.catalogue`) with the thresholds of the effective
    configuration: ``config_path``, else ``[tool.hta-report]`` in
    ``./pyproject.toml``, else the defaults.

    Raises:
        hta_report.errors.InputError: an unreadable configuration, an unknown
            key or rule id.
    """
    from .rules import catalogue, load_config

    return catalogue(load_config(config_path))
