"""Charts as self-contained ``data:image/svg+xml;base64`` URIs.

Built with matplotlib's object API (``Figure``, never ``pyplot`` global
state). Each function takes plain lists of numbers and labels (already
picked by the renderer from the model) and returns a URI, so the HTML embeds
the chart in an ``<img>``: no network, and no trace-derived text can become
markup.

Every chart is drawn twice: for the page's full width (about 1,000 px) and,
under the name ``<name>@narrow``, for a phone-wide column (about 380 px),
which the page shows below 640 px (``<picture>``) so that its text stays
readable instead of being scaled down to a third.
"""
from __future__ import annotations

import base64
import io
import re
import unicodedata
import warnings
from typing import TYPE_CHECKING, Callable, Dict, List, Sequence, Tuple

import matplotlib
import numpy as np

matplotlib.use("Agg", force=False)
from matplotlib.patches import PathPatch  # noqa: E402
from matplotlib.path import Path  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..names import short_names  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.backend_bases import RendererBase
    from matplotlib.transforms import Bbox

    from ..model import AnalysisResult, RankResult

PALETTE = {
    "kernels": "#2b7bba", "copies only": "#f0a030",
    "idle: input and sync": "#d9534f", "idle: host work": "#e8a33d", "idle: queued work waiting": "#8e6bbf",
    "idle: no profiled host activity": "#c8ccd2",
}
#: The idle causes (:data:`hta_report.model.IDLE_CAUSES`) of each idle segment of the GPU-time chart.
IDLE_GROUPS = {
    "idle: input and sync": ("dataloader", "pageable_copy", "blocking_copy", "sync"),
    "idle: host work": ("warmup", "zero_grad", "optimizer", "launch", "host_ops"),
    "idle: queued work waiting": ("stream_wait",),
    "idle: no profiled host activity": ("unattributed",),
}
_SERIES = ["#2b7bba", "#f0a030", "#3aa76d", "#d9534f", "#8e6bbf", "#6c7a89", "#17becf", "#bcbd22"]

#: Figure widths (inches; 1 in = 96 CSS px) of the two drawings of each chart.
WIDE_IN, NARROW_IN = 10.0, 3.6
#: Characters per line of a wrapped kernel label, and the longest label, per drawing.
_LABEL_WRAP = {"wide": (48, 96), "narrow": (22, 44)}
#: Segments narrower than this (% of the axis) get no value written in them.
_MIN_LABELLED_PCT = 6.0
#: One chart to draw: ``(name, function, args, kwargs)``; the function returns its data URI.
ChartSpec = Tuple[str, Callable[..., str], Tuple[object, ...], Dict[str, object]]
#: Ranks shown in the step-time chart (one line each).
MAX_STEP_LINES = 16


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


def wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most about ``width`` characters, after
    ``_``, ``,``, ``::``, ``<`` or a space (a token longer than a line is
    cut); a kernel label that stays readable in a narrow chart."""
    lines: List[str] = []
    line = ""
    token = ""
    for i, ch in enumerate(text):
        token += ch
        boundary = ch in "_, <" or (ch == ":" and text[i - 1:i] == ":")
        if boundary or i == len(text) - 1:
            if line and len(line) + len(token) > width:
                lines.append(line.rstrip())
                line = ""
            while len(token) > width:
                lines.append(token[:width])
                token = token[width:]
            line += token
            token = ""
    if line:
        lines.append(line.rstrip())
    return "\n".join(lines)


def _to_uri(fig: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg_bytes(fig)).decode("ascii")


#: The size of the page in matplotlib's SVG: ``width``, ``height`` (pt) and a viewBox from 0, 0.
_SVG_SIZE = re.compile(rb'<svg([^>]*?) width="([0-9.]+)pt" height="([0-9.]+)pt" viewBox="0 0 ([0-9.]+) ([0-9.]+)"([^>]*)>')


def svg_bytes(fig: Figure, tight: str = "one draw") -> bytes:
    """``fig`` as SVG, cropped to its artists as ``savefig(bbox_inches="tight")``
    crops it (their bounding box plus ``savefig.pad_inches``), but drawn once.

    matplotlib's tight crop draws the figure twice: once to lay it out and
    measure it, then again to write it. Here the figure is written uncropped
    and measured at the end of that one draw, with the same renderer (so
    every text extent comes from its cache), then the SVG's page is set to
    the box: ``width``/``height``/``viewBox`` of the root element, and a
    rectangle of the figure's face colour under everything, since the box
    may reach past the canvas (legends below the axes). Same size, to the
    0.001 pt, as matplotlib's own crop, and the same texts
    (``tests/test_charts.py``); the 22 charts of the 8-rank fractional
    benchmark report took 1.11 to 1.17 s drawn twice, 0.82 to 0.89 s so (one
    process; 0.60-0.67 and 0.46-0.55 s in two).

    Args:
        fig: the figure (its size in inches; the SVG backend draws at 72 dpi).
        tight: ``"one draw"``, or ``"matplotlib"`` for ``savefig``'s own
            crop, which is also used when the SVG's root element is not
            the one expected.
    """
    boxes: List[Bbox] = []
    buf = io.BytesIO()
    one_draw = tight == "one draw"
    if one_draw:
        draw = fig.draw

        def draw_and_measure(renderer: RendererBase) -> None:
            draw(renderer)
            boxes.append(fig.get_tightbbox(renderer))  # inches (the figure's dpi is the renderer's here)

        fig.draw = draw_and_measure  # type: ignore[method-assign]
    try:
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "hta-report"}), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Glyph missing from font" for exotic kernel names
            fig.savefig(buf, format="svg", bbox_inches=None if one_draw else "tight", metadata={"Date": None})
    finally:
        if one_draw:
            del fig.draw
    svg = buf.getvalue()
    if not one_draw:
        return svg
    pad = matplotlib.rcParams["savefig.pad_inches"]
    match = _SVG_SIZE.search(svg)
    if not boxes or match is None or not isinstance(pad, (int, float)):
        return svg_bytes(fig, tight="matplotlib")
    box = boxes[0].padded(pad)
    height_in = fig.get_size_inches()[1]
    x, y, w, h = box.x0 * 72, (height_in - box.y1) * 72, box.width * 72, box.height * 72
    face = to_hex(fig.get_facecolor(), keep_alpha=False)
    root = b'<svg%s width="%.6fpt" height="%.6fpt" viewBox="%.6f %.6f %.6f %.6f"%s>\n<rect x="%.6f" y="%.6f" ' \
           b'width="%.6f" height="%.6f" style="fill: %s"/>' % (match.group(1), w, h, x, y, w, h, match.group(6),
                                                             x, y, w, h, face.encode())
    return svg[:match.start()] + root + svg[match.end():]


def _bar_figure(n_rows: int, width: float, row_in: float = 0.42, extra_in: float = 1.0) -> Figure:
    return Figure(figsize=(width, max(1.4, row_in * n_rows + extra_in)))


def stacked_bars(labels: Sequence[str], series: Dict[str, Sequence[float]], xlabel: str, title: str,
                 width: float = WIDE_IN, limit: float = 100.0) -> str:
    """Horizontal stacked bars, one row per label (e.g. per rank), on an axis
    from 0 to ``limit`` (100 for shares of a whole: a 99.5 %-idle rank shows
    as nearly full, not as a full axis); segments of at least
    :data:`_MIN_LABELLED_PCT` % carry their value.

    Args:
        labels: row labels, top to bottom.
        series: legend name -> one value per label, stacked in dict order.
        xlabel: axis label with unit, e.g. ``"% of GPU time"``.
        title: chart title.
        width: figure width (inches).
        limit: the axis' upper end.
    """
    fig = _bar_figure(len(labels), width, row_in=0.36, extra_in=0.9)
    ax = fig.add_subplot()
    y = list(range(len(labels)))[::-1]
    left = [0.0] * len(labels)
    for i, (name, values) in enumerate(series.items()):
        color = PALETTE.get(name, _SERIES[i % len(_SERIES)])
        bars = ax.barh(y, values, left=left, label=name, color=color, height=0.6)
        dark = name not in ("idle: no profiled host activity", "copies only", "idle: host work")
        for bar, v in zip(bars, values):
            if v >= _MIN_LABELLED_PCT * limit / 100:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2, f"{v:.1f}",
                        ha="center", va="center", fontsize=8, color="white" if dark else "#1d232a")
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlim(0, limit)
    ax.set_yticks(y, [label(l) for l in labels])
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=11)
    narrow = width < 6
    ax.legend(ncols=2 if narrow else min(5, len(series)), loc="upper left", bbox_to_anchor=(0.0, -0.5 if len(labels) < 3 else -0.15),
              frameon=False, fontsize=8 if narrow else 9)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str, width: float = WIDE_IN,
         unit: str = "") -> str:
    """Horizontal bars, largest first as given, each with its value written
    at its end (``unit`` appended); labels as given (shortened and wrapped
    by the caller)."""
    lines = max((l.count("\n") + 1 for l in labels), default=1)  # every row as tall as the tallest label
    fig = _bar_figure(len(labels), width, row_in=0.12 + 0.15 * lines)
    ax = fig.add_subplot()
    y = list(range(len(labels)))[::-1]
    drawn = ax.barh(y, values, color=_SERIES[0], height=0.65)
    top = max(values, default=0.0) or 1.0
    narrow = width < 6
    for bar, v in zip(drawn, values):
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, f"{v:,.1f}{unit}",
                va="center", fontsize=8, color="#1d232a")
    ax.set_xlim(0, top * (1.3 if narrow else 1.12))
    # wrapped labels: each line made safe on its own (label() would show the break as \n)
    ax.set_yticks(y, ["\n".join(label(part) for part in l.split("\n")) for l in labels], fontsize=8 if narrow else 9)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def step_lines(series: Dict[str, List[float]], steps: Dict[str, List[int]], title: str,
               width: float = WIDE_IN) -> str:
    """Step time (ms) per ``ProfilerStep`` number (integer ticks), one line per rank."""
    fig = Figure(figsize=(width, 2.8 if width >= 6 else 2.6))
    ax = fig.add_subplot()
    for i, (name, values) in enumerate(series.items()):
        ax.plot(steps[name], values, marker="o", label=label(name), color=_SERIES[i % len(_SERIES)])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("ProfilerStep #")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(0, max((max(v, default=0.0) for v in series.values()), default=0.0) * 1.12 or 1.0)
    ax.set_title(title, loc="left", fontsize=11)
    if len(series) > 1:
        ax.legend(frameon=False, fontsize=8, ncols=min(4, len(series)))
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


#: Colors of the step breakdown's parts (TensorBoard's order).
STEP_COLORS = {"kernel": "#2b7bba", "memcpy": "#f0a030", "memset": "#bcbd22", "runtime": "#d9534f",
               "DataLoader": "#8e6bbf", "CPU exec": "#3aa76d", "other": "#c8ccd2"}
#: Ranks that get their own step breakdown and memory charts: the first of those the report shows one by one.
MAX_RANK_CHARTS = 8
#: Half the width of a step's column (x units: one per step).
_HALF_COLUMN = 0.35


def _rectangles(x: Sequence[float], bottom: Sequence[float], height: Sequence[float]) -> Path:
    """One path of closed rectangles, ``2 * _HALF_COLUMN`` wide, centred on ``x``,
    from ``bottom`` up by ``height`` (equal lengths)."""
    n = len(x)
    if not n:
        return Path(np.zeros((0, 2)))
    xs, lo = np.asarray(x, dtype=float), np.asarray(bottom, dtype=float)
    hi = lo + np.asarray(height, dtype=float)
    left, right = xs - _HALF_COLUMN, xs + _HALF_COLUMN
    verts = np.stack([np.stack([left, lo], 1), np.stack([left, hi], 1), np.stack([right, hi], 1),
                      np.stack([right, lo], 1), np.stack([left, lo], 1)], 1).reshape(-1, 2)
    codes = np.tile(np.array([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY],
                             dtype=Path.code_type), n)
    return Path(verts, codes)


def step_columns(numbers: Sequence[str], parts: Dict[str, Sequence[float]], title: str,
                 width: float = WIDE_IN) -> str:
    """One stacked column per step (ms; ``numbers``: the tick labels), parts
    stacked in ``parts``' order (the TensorBoard profiler's step time breakdown)."""
    fig = Figure(figsize=(width, 3.0 if width >= 6 else 2.8))
    ax = fig.add_subplot()
    x = list(range(len(numbers)))
    bottom = [0.0] * len(numbers)
    for name, values in parts.items():
        # one path of one rectangle per step for each part, not one Rectangle artist per
        # column (``ax.bar``: a run of 70 steps is 490 columns, 0.3 s per chart) nor one
        # polygon of a collection per column (each drawn and styled on its own: 70 ms a
        # chart of 68 steps); a part's rectangles never overlap. Added as an artist: the
        # limits are set below, and add_patch would walk every segment to update them
        ax.add_artist(PathPatch(_rectangles(x, bottom, values), label=name,
                                facecolor=STEP_COLORS.get(name, _SERIES[0]), edgecolor="none", linewidth=0))
        bottom = [a + b for a, b in zip(bottom, values)]
    ax.set_xlim(-0.6, max(len(numbers), 1) - 0.4)
    ax.set_ylim(0, max(bottom, default=0.0) * 1.05 or 1.0)
    step = max(1, len(numbers) // (8 if width < 6 else 20))
    ax.set_xticks(x[::step], list(numbers)[::step])
    ax.set_xlabel("ProfilerStep #")
    ax.set_ylabel("time (ms)")
    ax.set_title(title, loc="left", fontsize=11)
    narrow = width < 6
    ax.legend(ncols=3 if narrow else 7, loc="upper left", bbox_to_anchor=(0.0, -0.28), frameon=False,
              fontsize=7 if narrow else 9)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def memory_lines(t_ms: Sequence[float], allocated: Sequence[float], reserved: Sequence[float],
                 step_starts_ms: Sequence[float], capacity: float, title: str, width: float = WIDE_IN,
                 unit: str = "GiB") -> str:
    """Allocated and reserved memory (in ``unit``) over time (ms), step starts as
    dotted lines, the device's capacity as a dashed line when the peak is
    within a quarter of it (else the capacity would flatten the curves)."""
    fig = Figure(figsize=(width, 2.8 if width >= 6 else 2.6))
    ax = fig.add_subplot()
    ax.step(t_ms, reserved, where="post", label="reserved", color="#f0a030")
    ax.step(t_ms, allocated, where="post", label="allocated", color="#2b7bba")
    if len(step_starts_ms):  # one collection, not a Line2D per step (68 steps, 2,000 points: 77 -> 44 ms)
        ax.vlines(step_starts_ms, 0, 1, transform=ax.get_xaxis_transform(), colors="#c8ccd2", linestyles=":",
                  linewidths=0.8)
    top = max(max(reserved, default=0.0), max(allocated, default=0.0))
    if capacity and top >= capacity / 4:
        ax.axhline(capacity, color="#d9534f", linestyle="--", linewidth=1, label="device memory")
    ax.set_ylim(0, max(top, capacity if capacity and top >= capacity / 4 else 0.0) * 1.12 or 1.0)
    ax.set_xlabel("time (ms from the start of the traces; dotted: step starts)")
    ax.set_ylabel(unit)
    ax.set_title(title, loc="left", fontsize=11)
    ax.legend(frameon=False, fontsize=8, ncols=3)
    ax.spines[["top", "right"]].set_visible(False)
    return _to_uri(fig)


def rank_chart_specs(r: RankResult, width: float) -> List[ChartSpec]:
    """The per-rank charts of ``r`` (a ``RankResult``) as :data:`ChartSpec`
    entries: ``step_breakdown/<rank>`` and ``memory/<rank>``, each when the
    rank has the data."""
    out: List[ChartSpec] = []
    if r.step_breakdown:
        from .view import STEP_PARTS

        warm = any(b.warmup for b in r.step_breakdown)
        out.append((f"step_breakdown/{r.rank}", step_columns, (
            [f"{b.number}*" if b.warmup else str(b.number) for b in r.step_breakdown],
            {head: [getattr(b, f"{k}_us") / 1e3 for b in r.step_breakdown] for k, head in STEP_PARTS.items()},
            (f"Rank {r.rank}: step time breakdown" if width < 6 else
             f"Rank {r.rank}: step time breakdown (TensorBoard's categories)") + ("; * warm-up" if warm else "")),
            {"width": width}))
    main = next((d for d in r.memory.devices if d.device == r.memory.device), None)
    if r.memory.recorded and main is not None and main.timeline:
        peak = max(main.peak_reserved_bytes, main.peak_allocated_bytes)
        g, unit = (2 ** 30, "GiB") if peak >= 2 ** 30 or main.capacity_bytes else (2 ** 20, "MiB")
        out.append((f"memory/{r.rank}", memory_lines, (
            [p.ts_us / 1e3 for p in main.timeline], [p.allocated_bytes / g for p in main.timeline],
            [p.reserved_bytes / g for p in main.timeline], [s / 1e3 for s in r.memory.step_starts_us],
            main.capacity_bytes / g, f"Rank {r.rank}: memory on {label(main.device)}"),
            {"width": width, "unit": unit}))
    return out


def kernel_labels(names: Sequence[str], drawing: str = "wide") -> Dict[str, str]:
    """Chart labels of kernels: short and distinct among ``names``
    (:func:`hta_report.names.short_names`), wrapped to the drawing's width."""
    per_line, limit = _LABEL_WRAP[drawing]
    return {n: wrap(s, per_line) for n, s in short_names(names, limit=limit).items()}


def report_charts(result: "AnalysisResult") -> Dict[str, str]:
    """The analyze report's charts, name -> data URI: ``gpu_time`` (kernels,
    copies and idle by cause per rank, % of the analyzed window), ``top_kernels``
    (total time, all ranks), ``steps`` (time per step) and, for the first
    :data:`MAX_RANK_CHARTS` ranks the report shows one by one
    (:func:`hta_report.render.view.shown_ranks`: past
    :data:`~hta_report.render.view.RANKS_SHOWN` ranks the worst, whose rows
    alone, and their mean over all ranks, the GPU-time chart draws),
    ``step_breakdown/<rank>`` and
    ``memory/<rank>`` (:func:`rank_chart_specs`); each also as
    ``<name>@narrow``. Charts without data are left out."""
    return draw(chart_specs(result))


def warm_up() -> None:
    """Draw a small chart and drop it: the font files, the SVG backend and the
    text caches are then loaded in this process, and in the processes forked
    from it to draw the report's charts (0.19 s of the 22 charts of an 8-rank
    report when done beforehand, while the ranks are analyzed)."""
    bars(["warm-up"], [1.0], "ms", "warm-up")


def draw(specs: Sequence[ChartSpec]) -> Dict[str, str]:
    """Draw each :data:`ChartSpec` here, in order: name -> data URI."""
    return {name: fn(*args, **kwargs) for name, fn, args, kwargs in specs}


def _gpu_time_shares(r: "RankResult") -> Dict[str, float]:
    """One row of the GPU-time chart: the rank's kernels, copies only and
    idle groups (:data:`IDLE_GROUPS`), % of its analyzed window (``window_us`` > 0)."""
    row = {"kernels": r.kernel_busy_pct, "copies only": max(0.0, r.busy_pct - r.kernel_busy_pct)}
    row.update({name: sum(100 * getattr(r.idle_attribution, f"{c}_us") / r.window_us for c in causes)
                for name, causes in IDLE_GROUPS.items()})
    return row


def gpu_time_rows(ranks: Sequence["RankResult"], mean_over: Sequence["RankResult"] = ()
                  ) -> Tuple[List[str], Dict[str, List[float]]]:
    """The GPU-time chart's row labels and series (% of each rank's analyzed
    window): one row per rank of ``ranks`` and, when ``mean_over`` is given
    (the report shows only some ranks, :func:`hta_report.render.view.shown_ranks`),
    a last row of the mean over those ranks: each segment's mean, so that
    the row adds up as each rank's does (a median per segment would not)."""
    rows = [_gpu_time_shares(r) for r in ranks]
    labels = [f"rank {r.rank}" for r in ranks]
    if mean_over:
        every = [_gpu_time_shares(r) for r in mean_over]
        rows.append({k: sum(x[k] for x in every) / len(every) for k in every[0]})
        labels.append(f"mean of all {len(mean_over)} ranks")
    names = ["kernels", "copies only", *IDLE_GROUPS]
    return labels, {name: [row[name] for row in rows] for name in names}


def chart_specs(result: "AnalysisResult") -> List[ChartSpec]:
    """What :func:`report_charts` draws, as :data:`ChartSpec` entries (in page
    order), so that a caller may draw them in several processes."""
    from .view import shown_ranks

    out: List[ChartSpec] = []
    gpu = [r for r in result.ranks if r.has_gpu]
    # past view.RANKS_SHOWN ranks, the ranks the report shows one by one (the worst, worst first)
    shown = [result.ranks[i] for i in shown_ranks(result)]
    cut = len(shown) < len(result.ranks)
    for drawing, width in (("wide", WIDE_IN), ("narrow", NARROW_IN)):
        suffix = "" if drawing == "wide" else "@narrow"
        windowed = [r for r in gpu if r.window_us > 0]
        if windowed:
            of = "of the analyzed steps" if any(r.steps.count for r in windowed) else "of the traced window"
            labels, series = gpu_time_rows([r for r in shown if r.has_gpu and r.window_us > 0] if cut else windowed,
                                           windowed if cut else [])
            out.append(("gpu_time" + suffix, stacked_bars, (
                labels, series, f"% {of}",
                "GPU time per rank: busy, and idle by what the host did"), {"width": width}))
        totals: Dict[str, float] = {}
        for r in gpu:
            for k in r.top_kernels:
                totals[k.name] = totals.get(k.name, 0.0) + k.total_us
        if totals:
            top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
            names = kernel_labels([n for n, _ in top], drawing)
            out.append(("top_kernels" + suffix, bars, (
                [names[n] for n, _ in top], [t / 1e3 for _, t in top], "total time (ms), all ranks",
                "Top kernels by total time"), {"width": width, "unit": " ms"}))
        stepped = [r for r in shown if r.steps.count][:MAX_STEP_LINES]
        if any(r.steps.count >= 2 for r in stepped):
            out.append(("steps" + suffix, step_lines, (
                {f"rank {r.rank}": [s.duration_us / 1e3 for s in r.steps.steps] for r in stepped},
                {f"rank {r.rank}": [s.number for s in r.steps.steps] for r in stepped},
                "Time per step"), {"width": width}))
        for r in shown[:MAX_RANK_CHARTS]:
            out += [(name + suffix, fn, args, kwargs) for name, fn, args, kwargs in rank_chart_specs(r, width)]
    return out
