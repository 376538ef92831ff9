"""Chart images: drawn once and cropped like matplotlib's own tight crop (:func:`hta_report.render.charts.svg_bytes`)."""
import base64
import re

import pytest

from hta_report.render import charts

SIZE = re.compile(rb'<svg[^>]* width="([0-9.]+)pt" height="([0-9.]+)pt" viewBox="([-0-9. ]+)"')
LONG = "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"

#: One call per kind of chart, each with a long label or a legend that reaches past the canvas.
CALLS = {
    "stacked_bars": (charts.stacked_bars, (["rank 0", "rank 1"], {"compute": [60.0, 70.0], "idle: other": [40.0, 30.0]},
                                           "% of GPU time", "GPU time per rank")),
    "bars": (charts.bars, ([charts.wrap(LONG, 48), "gemm"], [242.3, 12.0], "total time (ms)", "Top kernels")),
    "step_lines": (charts.step_lines, ({"rank 0": [10.0, 12.5, 11.0]}, {"rank 0": [3, 4, 5]}, "Time per step")),
    "step_columns": (charts.step_columns, (["3*", "4", "5"], {"kernel": [5.0, 6.0, 5.5], "CPU exec": [1.0, 2.0, 1.5]},
                                          "Rank 0: step time breakdown; * warm-up")),
    "memory_lines": (charts.memory_lines, ([0.0, 5.0, 10.0], [1.0, 3.0, 2.0], [2.0, 4.0, 4.0], [0.0, 5.0], 8.0,
                                           "Rank 0: memory on GPU 0")),
}


def _both(monkeypatch, fn, args, width):
    """The chart drawn by :func:`charts.svg_bytes` once, and cropped by matplotlib itself."""
    got = {}
    for tight in ("one draw", "matplotlib"):
        monkeypatch.setattr(charts, "_to_uri", lambda fig, t=tight: got.__setitem__(t, charts.svg_bytes(fig, t)) or "")
        fn(*args, width=width)
    return got["one draw"], got["matplotlib"]


@pytest.mark.parametrize("width", [charts.WIDE_IN, charts.NARROW_IN])
@pytest.mark.parametrize("kind", sorted(CALLS))
def test_one_draw_crops_to_matplotlibs_tight_box(monkeypatch, kind, width):
    fn, args = CALLS[kind]
    ours, theirs = _both(monkeypatch, fn, args, width)
    w, h, view = SIZE.search(ours).groups()
    tw, th, tview = SIZE.search(theirs).groups()
    assert float(w) == pytest.approx(float(tw), abs=1e-3) and float(h) == pytest.approx(float(th), abs=1e-3)
    x, y, vw, vh = map(float, view.split())
    assert (vw, vh) == (pytest.approx(float(w), abs=1e-5), pytest.approx(float(h), abs=1e-5))
    # the page is painted white under everything, also where the box reaches past the canvas
    rect = re.search(rb'<rect x="([-0-9.]+)" y="([-0-9.]+)" width="([0-9.]+)" height="([0-9.]+)" style="fill: #ffffff"/>',
                     ours)
    assert rect is not None and tuple(map(float, rect.groups())) == pytest.approx((x, y, vw, vh), abs=1e-5)
    # the same drawing: every text of matplotlib's crop is there
    texts = re.compile(rb"<text[^>]*>([^<]*)</text>")
    assert sorted(texts.findall(ours)) == sorted(texts.findall(theirs)) != []


def test_a_box_past_the_canvas_is_kept(monkeypatch):
    """A long label left of the axes on a narrow figure: the box starts left of the canvas (x < 0)."""
    fn, args = CALLS["bars"]
    ours, _ = _both(monkeypatch, fn, args, charts.NARROW_IN)
    x = float(SIZE.search(ours).group(3).split()[0])
    assert x < 0


def test_an_unexpected_svg_root_falls_back_to_matplotlibs_crop(monkeypatch):
    monkeypatch.setattr(charts, "_SVG_SIZE", re.compile(rb"(?!x)x"))  # matches nothing
    fn, args = CALLS["bars"]
    ours, theirs = _both(monkeypatch, fn, args, charts.WIDE_IN)
    assert ours == theirs


def test_uri_is_the_svg():
    uri = charts.bars(["a"], [1.0], "ms", "t")
    assert uri.startswith("data:image/svg+xml;base64,")
    assert SIZE.search(base64.b64decode(uri.split(",", 1)[1]))


def test_step_columns_are_one_path_of_rectangles_per_part():
    """Each part of the step breakdown is one filled path of one rectangle per
    step, stacked on the parts before it (a zero-height part is a flat one)."""
    import numpy as np
    from matplotlib.path import Path

    path = charts._rectangles([0, 1, 2], [0.0, 1.0, 2.0], [5.0, 0.0, 1.5])
    verts = path.vertices.reshape(3, 5, 2)
    h = charts._HALF_COLUMN
    for i, (lo, hi) in enumerate([(0.0, 5.0), (1.0, 1.0), (2.0, 3.5)]):
        assert verts[i][:4].tolist() == [[i - h, lo], [i - h, hi], [i + h, hi], [i + h, lo]]
    assert path.codes.tolist() == [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY] * 3
    assert len(charts._rectangles([], [], []).vertices) == 0

    uri = charts.step_columns([str(i) for i in range(40)],
                              {"kernel": list(np.linspace(1, 5, 40)), "CPU exec": [1.0] * 40}, "t")
    svg = base64.b64decode(uri.split(",", 1)[1]).decode()
    for color in (charts.STEP_COLORS["kernel"], charts.STEP_COLORS["CPU exec"]):
        # one path for the 40 columns, and the legend's swatch
        assert svg.count(f"fill: {color}") == 2, color
