"""Charts as self-contained ``data:image/svg+xml;base64`` URIs.

Built with matplotlib's object API (``Figure``, never ``pyplot`` global
state). Each function takes plain lists of numbers and labels (already
picked by the renderer from the model) and returns a URI, so the HTML embeds
the chart in an ``<img>``: no network, and no trace-derived text can become
markup.
"""
from __future__ import annotations

import base64
import io
import unicodedata
import warnings
from typing import TYPE_CHECKING, Dict, List, Sequence

import matplotlib

matplotlib.use("Agg", force=False)
from matplotlib.figure import Figure  # noqa: E402

if TYPE_CHECKING:
    from ..model import AnalysisResult

PALETTE = {
    "compute": "#2b7bba", "non-compute": "#f0a030", "idle": "#c8ccd2",
    "host wait": "#d9534f", "kernel wait": "#8e6bbf", "other": "#9aa3ad",
}
_SERIES = ["#2b7bba", "#f0a030", "#3aa76d", "#d9534f", "#8e6bbf", "#6c7a89", "#17becf", "#bcbd22"]


def label(text: str, limit: int = 0) -> str:
    """A trace-derived string made safe as chart text: ``$`` escaped (matplotlib
    would parse ``$...$`` as mathtext and fail on kernel names holding it),
    control characters and lone surrogates shown as ``\\x..`` escapes;
    cut to ``limit`` characters (with ``...``) when ``limit`` is set."""
    text = str(text)
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    out = []
    for ch in text:
        if ch == "$":
            out.append("\\$")
        elif unicodedata.category(ch) in ("Cc", "Cs"):
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                       if ch.isascii() else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _to_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "hta-report"}), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "Glyph missing from font" for exotic kernel names
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(n_rows: int, width: float = 7.5) -> Figure:
    fig = Figure(figsize=(width, max(1.6, 0.42 * n_rows + 1.0)))
    return fig


def stacked_bars(labels: Sequence[str], series: Dict[str, Sequence[float]], xlabel: str, title: str) -> str:
    """Horizontal stacked bars, one row per label (e.g. per rank).

    Args:
        labels: row labels, top to bottom.
        series: legend name -> one value per label, stacked in dict order.
        xlabel: axis label with unit, e.g. ``"% of GPU time"``.
        title: chart title.
    """
    fig = _figure(len(labels))
    ax = fig.add_subplot()
    y = list(range(len(labels)))[::-1]
    left = [0.0] * len(labels)
    for i, (name, values) in enumerate(series.items()):
        ax.barh(y, values, left=left, label=name, color=PALETTE.get(name, _SERIES[i % len(_SERIES)]), height=0.6)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(y, [label(l) for l in labels])
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=11)
    ax.legend(ncols=min(4, len(series)), loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 4 else -0.12),
              frameon=False, fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str) -> str:
    """Horizontal bars, largest first as given; long labels are shortened."""
    short = [label(l, 60) for l in labels]
    fig = _figure(len(labels), width=8.5)
    ax = fig.add_subplot()
    y = list(range(len(labels)))[::-1]
    ax.barh(y, values, color=_SERIES[0], height=0.6)
    ax.set_yticks(y, short, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def step_lines(series: Dict[str, List[float]], steps: Dict[str, List[int]], title: str) -> str:
    """Step time (ms) per ``ProfilerStep`` number, one line per rank."""
    fig = Figure(figsize=(7.5, 2.8))
    ax = fig.add_subplot()
    for i, (name, values) in enumerate(series.items()):
        ax.plot(steps[name], values, marker="o", label=label(name), color=_SERIES[i % len(_SERIES)])
    ax.set_xlabel("ProfilerStep #")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, loc="left", fontsize=11)
    if len(series) > 1:
        ax.legend(frameon=False, fontsize=8, ncols=min(4, len(series)))
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def report_charts(result: "AnalysisResult") -> Dict[str, str]:
    """The analyze report's charts, name -> data URI (``temporal``, ``idle``,
    ``kernel_types``, ``top_kernels``, ``steps``); charts without data are left out."""
    out: Dict[str, str] = {}
    gpu = [r for r in result.ranks if r.has_gpu]
    if gpu:
        labels = [f"rank {r.rank}" for r in gpu]
        out["temporal"] = stacked_bars(
            labels,
            {"compute": [r.temporal.compute_pct for r in gpu],
             "non-compute": [r.temporal.non_compute_pct for r in gpu],
             "idle": [r.temporal.idle_pct for r in gpu]},
            "% of GPU time", "Temporal breakdown per rank (HTA)")
        out["idle"] = stacked_bars(
            labels,
            {"host wait": [r.idle_split.host_wait_pct for r in gpu],
             "kernel wait": [r.idle_split.kernel_wait_pct for r in gpu],
             "other": [r.idle_split.other_pct for r in gpu]},
            "% of GPU time", "GPU idle time by cause per rank (HTA)")
    if result.aggregate.kernel_types:
        kt = result.aggregate.kernel_types
        out["kernel_types"] = bars([k.kernel_type for k in kt], [k.pct for k in kt],
                                   "% of kernel time", "Kernel time by type, all ranks (HTA)")
    totals: Dict[str, float] = {}
    for r in gpu:
        for k in r.top_kernels:
            totals[k.name] = totals.get(k.name, 0.0) + k.total_us
    if totals:
        top = sorted(totals.items(), key=lambda kv: -kv[1])[:12]
        out["top_kernels"] = bars([n for n, _ in top], [t / 1e3 for _, t in top],
                                  "total time (ms), all ranks", "Top kernels by total time")
    stepped = [r for r in result.ranks if r.steps.count]
    if any(r.steps.count >= 2 for r in stepped):
        out["steps"] = step_lines(
            {f"rank {r.rank}": [s.duration_us / 1e3 for s in r.steps.steps] for r in stepped[:16]},
            {f"rank {r.rank}": [s.number for s in r.steps.steps] for r in stepped[:16]},
            "Time per step")
    return out
