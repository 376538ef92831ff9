"""The HTML reporter: ``render(result, charts) -> str``, one self-contained page.

Inline CSS, charts as base64 SVG ``<img>``, no script and nothing loaded from
the network. jinja2 with autoescape and ``StrictUndefined``: every
trace-derived string (kernel names are full of ``<...>``) is escaped, and
every string written passes :func:`hta_report.escape.html_text` (control,
bidi and zero-width characters shown as escapes). Images are only the charts
we drew (:func:`hta_report.escape.is_image_data_uri`).
"""
from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Dict, Mapping

import jinja2
from markupsafe import Markup, escape

from ..escape import html_text, visible
from ..model import AnalysisResult, Comparison
from . import view


def _template_text(name: str) -> str:
    # In a source checkout (templates/ beside pyproject.toml) use its own templates,
    # even when another checkout is installed in editable mode; else the packaged ones.
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "templates" / name).is_file():
        return (root / "templates" / name).read_text(encoding="utf-8")
    return resources.files("hta_report.templates").joinpath(name).read_text(encoding="utf-8")


_BREAK_AFTER = ("_", ",", "::")


def breakable(text: str) -> Markup:
    """``text`` escaped, with ``<wbr>`` (a line-break opportunity that is not
    copied with the text) after ``_``, ``,`` and ``::``: a long kernel name
    wraps between its tokens in a narrow column."""
    out = escape(visible(str(text), keep_newlines=True))
    for token in _BREAK_AFTER:
        escaped = escape(token)
        out = Markup(out.replace(escaped, escaped + Markup("<wbr>")))
    return out


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    """The jinja2 environment for our templates (autoescape on, strict
    undefined, the :func:`breakable` filter); one per process, which keeps
    each template compiled (0.035 s for the report's). A template's last
    newline is kept, so a section's partial renders to whole lines; the
    pages end with a comment, as they end without a newline."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_text),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=html_text,
        keep_trailing_newline=True,
    )
    env.filters["breakable"] = breakable
    return env


def context(result: AnalysisResult, charts: Mapping[str, str]) -> Dict[str, object]:
    """What the page template reads: the ``report`` (:func:`hta_report.render.view.report`,
    every section with its partial) and the ``css``; ``charts`` are the chart
    images (name -> data URI, :func:`hta_report.render.charts.report_charts`)."""
    return {"report": view.report(result, charts), "css": _template_text("report.css")}


def prepare() -> None:
    """Compile the report's templates now (see :func:`hta_report.api.preparations`)."""
    env = environment()
    env.get_template("report.html.j2")
    for section in view.SECTIONS:
        if section.template:
            env.get_template(section.template)


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """The whole report as one HTML document, with ``charts`` (name -> data
    URI; drawn by the caller, see :func:`hta_report.render.charts.report_charts`)."""
    return environment().get_template("report.html.j2").render(**context(result, charts))


def render_comparison(comparison: Comparison) -> str:
    """A :class:`~hta_report.model.Comparison` as one HTML document."""
    from .compare_view import context as compare_context

    return environment().get_template("compare.html.j2").render(
        c=compare_context(comparison), css=_template_text("report.css"))
