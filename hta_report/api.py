"""The Python API behind the CLI."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from . import progress
from .errors import PartialInputError
from .model import AnalysisResult
from .output import write_all_atomic
from .render import format_for_path, render, render_comparison

__all__ = ["analyze", "write_reports", "load_result", "compare_paths", "write_comparison", "rule_catalogue",
           "partial_input_error"]


def analyze(trace_dir: os.PathLike | str, recursive: bool = False, include_last_step: Optional[bool] = None,
            max_trace_bytes: Optional[int] = None, config=None, loader: Optional[str] = None,
            cache=None) -> AnalysisResult:
    """Analyze a directory of Kineto traces; see :func:`hta_report.analysis.analyze`
    for the arguments, the result and the errors raised. A result found in
    ``cache`` returns before pandas, HTA or the analyses are even imported."""
    from .ingest import resolve_loader
    from .validation import DEFAULT_MAX_TRACE_BYTES

    loader = resolve_loader(loader)
    max_trace_bytes = max_trace_bytes or DEFAULT_MAX_TRACE_BYTES
    key = None
    if cache is not None:
        from .cache import Cache, lookup_result

        cache = cache if isinstance(cache, Cache) else Cache(cache)
        key, result = lookup_result(cache, trace_dir, recursive, include_last_step, loader, max_trace_bytes, config)
        if result is not None:
            progress.current().record("analysis result (from cache)", 0.0)
            return result
    from .analysis import analyze_uncached

    return analyze_uncached(trace_dir, recursive, include_last_step, max_trace_bytes, config, loader, cache, key)


def write_reports(result: AnalysisResult, outputs: Sequence[Tuple[os.PathLike | str, Optional[str]]]) -> List[Path]:
    """Render ``result`` once per ``(path, format)`` and write each atomically.

    Every report is rendered before any file is written, and all are written
    to temporary files before any is renamed into place, so a rendering or
    writing error leaves every existing file byte-identical (and no
    temporary file behind).

    Args:
        result: the analysis.
        outputs: ``(path, format)`` pairs; ``format`` None guesses from the
            extension (see :func:`hta_report.render.format_for_path`).

    Returns:
        The paths written.

    Raises:
        hta_report.errors.OutputError: a directory is missing or not writable.
    """
    return _render_and_write(lambda fmt: render(result, fmt), outputs)


def _render_and_write(render_as, outputs: Sequence[Tuple[os.PathLike | str, Optional[str]]]) -> List[Path]:
    """Render with ``render_as(format)`` once per output, timed as stages, then
    write them all atomically (see :func:`write_reports`)."""
    stage = progress.current().stage
    rendered = []
    for p, f in outputs:
        fmt = format_for_path(str(p), f)
        with stage(f"render {fmt}"):
            rendered.append((Path(p), render_as(fmt)))
    with stage("write reports"):
        return write_all_atomic(rendered)


def partial_input_error(result: AnalysisResult) -> Optional[PartialInputError]:
    """The error to report after writing ``result`` when some traces were
    unreadable (``N of M traces unreadable; the report covers the rest``), else None."""
    bad = result.inventory.unreadable
    if not bad:
        return None
    total = len(bad) + len(result.inventory.files)
    return PartialInputError(f"{len(bad)} of {total} traces unreadable; the report covers the rest")


def load_result(path: os.PathLike | str) -> AnalysisResult:
    """Read a result saved by ``analyze --json``.

    Raises:
        hta_report.errors.InputError: unreadable file or not an hta-report result.
    """
    from .errors import InputError

    try:
        return AnalysisResult.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a readable hta-report result: {exc}", path) from exc


def compare_paths(base: os.PathLike | str, new: os.PathLike | str, **analyze_kwargs):
    """Compare two trace directories or saved results (``analyze --json``).

    ``analyze_kwargs`` go to :func:`analyze` for a side that is a trace
    directory (``recursive``, ``config``, ``cache``...): with the same
    ``cache`` as an earlier analyze, a directory is not parsed again.

    Returns:
        A :class:`hta_report.model.Comparison` labelled with the two paths.

    Raises:
        hta_report.errors.InputError, hta_report.errors.TraceError: a side cannot be read.
    """
    from .compare import compare, load_side

    return compare(load_side(base, **analyze_kwargs), load_side(new, **analyze_kwargs),
                   base_label=str(base), new_label=str(new))


def write_comparison(comparison, outputs: Sequence[Tuple[os.PathLike | str, Optional[str]]]) -> List[Path]:
    """Render a comparison once per ``(path, format)`` and write each atomically
    (all rendered before any is written)."""
    return _render_and_write(lambda fmt: render_comparison(comparison, fmt), outputs)


def rule_catalogue(config_path: Optional[os.PathLike | str] = None) -> List[dict]:
    """The advice rules (``id``, ``rule``, ``title``, ``threshold``, ``source``,
    ``doc_url``, ``enabled``) with the thresholds of the effective
    configuration: ``config_path``, else ``[tool.hta-report]`` in
    ``./pyproject.toml``, else the defaults.

    Raises:
        hta_report.errors.InputError: an unreadable configuration, an unknown
            key or rule id.
    """
    from .rules import catalogue, load_config

    return catalogue(load_config(config_path))
