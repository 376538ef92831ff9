"""Reporters: each a pure function of the result model, listed in one table.

:data:`REPORTERS` maps a format to its :class:`Reporter`: the module that
renders it (``render(result, charts) -> str`` and
``render_comparison(comparison) -> str``), the file extensions that select
it and whether it shows charts. The CLI's ``--format`` choices, the
extension guess of ``-o`` and :func:`hta_report.api.write_reports` are all
built from it: adding a format is one entry here and one module.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Mapping, Optional, Protocol, Tuple, cast

from ..model import AnalysisResult, Comparison


class ReporterModule(Protocol):
    """What a reporter's module provides (``html.py``, ``markdown.py``...)."""

    def render(self, result: AnalysisResult, charts: Mapping[str, str]) -> str:
        """``result`` in the module's format."""

    def render_comparison(self, comparison: Comparison) -> str:
        """``comparison`` in the module's format."""


@dataclass(frozen=True)
class Reporter:
    """One output format.

    Attributes:
        format: the name ``--format`` takes.
        extensions: file suffixes (lower case, with the dot) that select it.
        description: what it is, for ``--help``.
        module: the module under :mod:`hta_report.render` with ``render`` and
            ``render_comparison``.
        charts: whether ``render`` shows the chart images it is given.
    """

    format: str
    extensions: Tuple[str, ...]
    description: str
    module: str
    charts: bool = False

    def _module(self) -> "ReporterModule":
        # imported on use: jinja2, orjson...; every module of REPORTERS has both functions (tests/test_formats.py)
        return cast(ReporterModule, importlib.import_module(f"{__name__}.{self.module}"))

    def render(self, result: AnalysisResult, charts: Optional[Mapping[str, str]] = None) -> str:
        """``result`` in this format; ``charts`` (name -> data URI) for a
        format that shows them (drawn here when None)."""
        if self.charts and charts is None:
            from .charts import report_charts

            charts = report_charts(result)
        return self._module().render(result, charts or {})

    def render_comparison(self, comparison: Comparison) -> str:
        """``comparison`` in this format."""
        return self._module().render_comparison(comparison)

    def render_parts(self, result: AnalysisResult) -> Optional[Callable[[], Iterable[str]]]:
        """For a format that can be written in parts as they are made (a
        module with ``render_parts(result)``: JSON), what makes them, each call
        a new run over the same text as :meth:`render`; else None (render it whole)."""
        module = self._module()
        make = getattr(module, "render_parts", None)
        if make is None:
            return None
        return lambda: make(result)


#: Every output format. An output path's extension picks one, the longest
#: registered one it ends with (``x.sarif.json`` is SARIF, ``x.json`` JSON);
#: an unknown extension is an error listing them, see :func:`format_for_path`.
REPORTERS: Dict[str, Reporter] = {r.format: r for r in (
    Reporter("html", (".html", ".htm"), "one self-contained HTML page", "html", charts=True),
    Reporter("md", (".md", ".markdown"), "GitHub-flavoured markdown (pull-request comments)", "markdown"),
    Reporter("json", (".json",), "the result model as JSON (schema_version first)", "jsonreport"),
    Reporter("sarif", (".sarif", ".sarif.json"), "SARIF 2.1.0: findings on the user's source lines (GitHub code "
             "scanning)", "sarif"),
)}
FORMATS = tuple(REPORTERS)


def reporter(fmt: str) -> Reporter:
    """The reporter of ``fmt``.

    Raises:
        ValueError: unknown format.
    """
    try:
        return REPORTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}") from None


def format_for_path(path: str, explicit: Optional[str] = None) -> str:
    """The output format: ``explicit`` if given, else the reporter with the
    longest registered extension that ``path``'s name ends with (as
    pyinstrument tells ``.speedscope.json`` from ``.json``), else markdown for an existing target that is
    not a regular file and has no extension (``/dev/null``, ``/dev/stdout``,
    a FIFO: ``-o /dev/null --json r.json`` runs the gates alone, cheaply).

    Raises:
        ValueError: no reporter has ``path``'s extension (the message lists
            the extensions and ``--format``; ``x.pdf`` is no HTML page).
    """
    if explicit:
        return reporter(explicit).format
    name = Path(path).name.lower()
    suffix = Path(path).suffix.lower()
    if not suffix and _stream(path):
        return "md"
    by_length = sorted(((ext, r.format) for r in REPORTERS.values() for ext in r.extensions), key=lambda x: -len(x[0]))
    for ext, fmt in by_length:
        if name.endswith(ext) and len(name) > len(ext):
            return fmt
    known = ", ".join(e for r in REPORTERS.values() for e in r.extensions)
    what = f"unknown report extension {suffix!r}" if suffix else "no report extension"
    raise ValueError(f"{what}: name the report {known} (or pick the format with --format {'|'.join(FORMATS)})")


def _stream(path: str) -> bool:
    """Whether ``path`` exists (links followed) and is a character device or a FIFO."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _register_notebook_display() -> None:
    """Let results and comparisons show their report in Jupyter
    (:data:`hta_report.model.HTML_DISPLAY`, :mod:`.notebook`)."""
    from .. import model
    from .notebook import comparison_html, result_html

    model.HTML_DISPLAY.setdefault("result", result_html)
    model.HTML_DISPLAY.setdefault("comparison", comparison_html)


_register_notebook_display()


def render(result: AnalysisResult, fmt: str, charts: Optional[Mapping[str, str]] = None) -> str:
    """Render ``result`` as ``fmt`` (see :data:`REPORTERS`).

    Raises:
        ValueError: unknown format.
    """
    return reporter(fmt).render(result, charts)


def render_comparison(comparison: Comparison, fmt: str) -> str:
    """Render a comparison as ``fmt`` (see :data:`REPORTERS`).

    Raises:
        ValueError: unknown format.
    """
    return reporter(fmt).render_comparison(comparison)
