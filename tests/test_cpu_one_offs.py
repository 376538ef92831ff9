"""One-off work on ranks without GPU work (issue 51, docs/FIELD.md sixth
gathering): the model built inside the window and the first, cold call of an
op are warm-up, not steady-state time; a CPU-executed ResNet-18 on Windows
had 0.6 s of both in a 3.9 s window, reported as 0 % warm-up."""
from __future__ import annotations

from hta_report.analysis import warmup as warm
from hta_report.api import analyze
from hta_report.rules import window
from kineto import TraceBuilder

STEM = [[5, 3, 224, 224], [64, 3, 7, 7], [], [], [], []]
BLOCK = [[5, 64, 56, 56], [64, 64, 3, 3], [], [], [], []]


def _run(tmp_path, name: str, fills: int, first_conv_us: float, forwards: int = 6):
    """A CPU trace without ProfilerStep: ``fills`` weight fills (2 ms each), then
    ``forwards`` forwards of two convolutions (1 ms each; the stem's first
    call ``first_conv_us``)."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for _ in range(fills):
        b.cpu_op("aten::normal_", t, 2000.0)
        t += 2010.0
    for i in range(forwards):
        stem = first_conv_us if i == 0 else 1000.0
        b.cpu_op("aten::conv2d", t, stem, dims=STEM)
        b.cpu_op("aten::mkldnn_convolution", t + 1.0, stem - 2.0, dims=STEM)
        t += stem + 5.0
        b.cpu_op("aten::conv2d", t, 1000.0, dims=BLOCK)
        t += 1005.0
    (tmp_path / name).mkdir()
    return analyze(b.write(tmp_path / name / "rank-0.json.gz").parent)


def test_model_construction_and_a_cold_first_call_are_warm_up(tmp_path):
    r = _run(tmp_path, "cold", fills=8, first_conv_us=9000.0)
    w = r.ranks[0].warmup
    by_name = {c.name: c for c in w.calls}
    assert by_name["aten::normal_"].count == 8 and by_name["aten::normal_"].total_us == 16000.0
    # the stem's excess over its later calls only (9 ms - 1 ms), counted once (not again for the op inside it)
    assert by_name["aten::conv2d"].count == 1 and by_name["aten::conv2d"].total_us == 8000.0
    assert "aten::mkldnn_convolution" not in by_name
    assert w.us_per_step == 24000.0
    top = r.findings[0]
    assert top.id == "trace-window" and "one-off warm-up" in top.title and "construction" in " ".join(top.evidence)


def test_an_input_draw_and_a_mildly_slow_first_call_are_not_warm_up(tmp_path):
    """Two draws before the forward are an input, not a model's weights; a
    first call three times the others is within a loaded machine's spread."""
    r = _run(tmp_path, "warm", fills=2, first_conv_us=3000.0)
    assert r.ranks[0].warmup.us_per_step == 0.0 and r.ranks[0].warmup.calls == []


def test_the_window_rule_s_wording_states_the_cold_ratio_it_uses():
    assert warm.COLD_RATIO == 5.0 and "five times" in window._CPU_ONE_OFFS
