"""The HTML reporter: ``render(result) -> str``, one self-contained page.

Inline CSS, charts as base64 SVG ``<img>``, no script and nothing loaded from
the network. jinja2 with autoescape and ``StrictUndefined``: every
trace-derived string (kernel names are full of ``<...>``) is escaped.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Dict

import jinja2

from ..model import AnalysisResult
from . import view


def _template_text(name: str) -> str:
    # In a source checkout (templates/ beside pyproject.toml) use its own templates,
    # even when another checkout is installed in editable mode; else the packaged ones.
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "templates" / name).is_file():
        return (root / "templates" / name).read_text(encoding="utf-8")
    return resources.files("hta_report.templates").joinpath(name).read_text(encoding="utf-8")


def environment() -> jinja2.Environment:
    """The jinja2 environment for our templates (autoescape on, strict undefined)."""
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_text),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def chart_uris(result: AnalysisResult) -> Dict[str, str]:
    """The report's charts, name -> data URI; charts without data are left out."""
    from . import charts  # matplotlib: imported only when charts are drawn

    out: Dict[str, str] = {}
    gpu = [r for r in result.ranks if r.has_gpu]
    if gpu:
        labels = [f"rank {r.rank}" for r in gpu]
        out["temporal"] = charts.stacked_bars(
            labels,
            {"compute": [r.temporal.compute_pct for r in gpu],
             "non-compute": [r.temporal.non_compute_pct for r in gpu],
             "idle": [r.temporal.idle_pct for r in gpu]},
            "% of GPU time", "Temporal breakdown per rank (HTA)")
        out["idle"] = charts.stacked_bars(
            labels,
            {"host wait": [r.temporal.idle_pct * r.idle.host_wait_pct / 100 for r in gpu],
             "kernel wait": [r.temporal.idle_pct * r.idle.kernel_wait_pct / 100 for r in gpu],
             "other": [r.temporal.idle_pct * r.idle.other_pct / 100 for r in gpu]},
            "% of GPU time", "GPU idle time by cause per rank (HTA)")
    if result.aggregate.kernel_types:
        kt = result.aggregate.kernel_types
        out["kernel_types"] = charts.bars([k.kernel_type for k in kt], [k.pct for k in kt],
                                          "% of kernel time", "Kernel time by type, all ranks (HTA)")
    totals: Dict[str, float] = {}
    for r in gpu:
        for k in r.top_kernels:
            totals[k.name] = totals.get(k.name, 0.0) + k.total_us
    if totals:
        top = sorted(totals.items(), key=lambda kv: -kv[1])[:12]
        out["top_kernels"] = charts.bars([n for n, _ in top], [t / 1e3 for _, t in top],
                                         "total time (ms), all ranks", "Top kernels by total time")
    stepped = [r for r in result.ranks if r.steps.count]
    if any(r.steps.count >= 2 for r in stepped):
        out["steps"] = charts.step_lines(
            {f"rank {r.rank}": [s.duration_us / 1e3 for s in r.steps.steps] for r in stepped[:16]},
            {f"rank {r.rank}": [s.number for s in r.steps.steps] for r in stepped[:16]},
            "Time per step")
    return out


def _charts(result: AnalysisResult) -> Dict[str, str]:
    """:func:`chart_uris`, reused from the cache when ``result`` came from or went to one."""
    from ..cache import cached_charts

    return cached_charts(result, lambda: chart_uris(result))


def context(result: AnalysisResult) -> Dict[str, Any]:
    """Everything the template shows, formatted."""
    return {
        "headline": view.headline(result),
        "findings": view.findings(result),
        "checks": view.checks(result),
        "check_counts": view.check_counts(result),
        "rank_rows": view.rank_rows(result),
        "ranks": view.rank_details(result),
        "inventory": view.inventory(result),
        "charts": _charts(result),
        "css": _template_text("report.css"),
    }


def render(result: AnalysisResult) -> str:
    """The whole report as one HTML document."""
    return environment().get_template("report.html.j2").render(**context(result))


def render_comparison(comparison) -> str:
    """A :class:`~hta_report.model.Comparison` as one HTML document."""
    from .compare_view import context as compare_context

    return environment().get_template("compare.html.j2").render(
        c=compare_context(comparison), css=_template_text("report.css"))
