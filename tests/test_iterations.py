"""Iterations of a trace without ProfilerStep (issue 51, docs/FIELD.md sixth
gathering): ten forwards of one ResNet-18 on a container took 0.77 to 2.58 s
and the report said only that steps were missing."""
from __future__ import annotations

import numpy as np

from hta_report.analysis.iterations import MIN_ITERATIONS, _anchor
from hta_report.api import analyze
from hta_report.rules.config import AdviceConfig
from hta_report.rules.window import problems
from kineto import TraceBuilder

BODY = [("aten::conv2d", [[5, 3, 32, 32]]), ("aten::batch_norm", [[5, 8, 32, 32]]), ("aten::relu_", [[5, 8, 32, 32]]),
        ("aten::conv2d", [[5, 8, 32, 32]]), ("aten::relu_", [[5, 8, 32, 32]]), ("aten::linear", [[5, 8]])]


def _trace(tmp_path, name: str, scales, steps: bool = False, module: str = ""):
    """A CPU trace: a construction loop (three rounds of two detach/fill ops),
    then one run of :data:`BODY` per entry of ``scales`` (each op 1 ms times it);
    with ``module``, every run lies inside one Python event of that name (the
    blocks of one model's forward)."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for _ in range(3):
        for op in ("aten::detach", "aten::fill_", "aten::detach", "aten::zero_"):
            b.cpu_op(op, t, 10.0)
            t += 12.0
    for i, k in enumerate(scales):
        start = t
        for op, dims in BODY:
            b.cpu_op(op, t, 1000.0 * k, dims=dims)
            t += 1000.0 * k + 1.0
        if steps:
            b.step(i + 1, start, t - start)
    if module:
        b.python(module, 150.0, t - 150.0, python_id=1, parent=None)
    (tmp_path / name).mkdir()
    return analyze(b.write(tmp_path / name / "rank-0.json.gz").parent)


def test_repeated_forwards_without_steps_are_read_as_iterations(tmp_path):
    r = _trace(tmp_path, "it", [4, 1, 1, 3, 1, 1])
    it = r.ranks[0].iterations
    # the forwards, not the construction's shorter loop; the first op of each, with its shapes
    assert (it.count, it.ops_per_iteration, it.first_op) == (6, 6, "aten::conv2d")
    assert np.allclose(it.durations_us, [6 * 1000.0 * k + 6 for k in (4, 1, 1, 3, 1, 1)], atol=1.0)
    line = next(x for x in problems(r, AdviceConfig()) if "repeated iterations" in x)
    assert "the first, 24.01 ms, is the cold one" in line
    assert "up to 3.0x their median" in line  # 18 ms against 6 ms, the cold first one left out


def test_steady_iterations_get_no_spread_and_steps_get_no_iterations(tmp_path):
    steady = _trace(tmp_path, "steady", [1, 1, 1, 1])
    line = next(x for x in problems(steady, AdviceConfig()) if "repeated iterations" in x)
    assert "cold" not in line and "their median" not in line
    assert _trace(tmp_path, "steps", [1, 1, 1, 1], steps=True).ranks[0].iterations.count == 0


def test_the_anchor_needs_identical_evenly_spaced_runs():
    body = [0, 1, 2, 3, 4]
    assert _anchor(np.array(body * MIN_ITERATIONS)) == (0, 5, MIN_ITERATIONS)
    assert _anchor(np.array(body * 2 + [0, 1, 9, 3, 4])) is None  # a run differs
    assert _anchor(np.array([0, 1, 2, 3] * 2)) is None  # too few
    assert _anchor(np.array(body * 3 + [0, 1])) == (0, 5, 3)  # a cut last run is not an iteration


def test_the_repeated_blocks_of_one_forward_are_not_iterations(tmp_path):
    """Ten MoE layers of one Switch Transformer forward repeat their ops as a
    loop's iterations would (a with_stack A100 run was told to call
    prof.step() after each): inside one module's forward they are layers."""
    for name in ("nn.Module: SwitchTransformer_0", "switch_transformers/model.py(343): forward"):
        key = name.split(":")[0].replace("/", "_")
        r = _trace(tmp_path, key, [4, 1, 1, 3, 1, 1], module=name)
        assert r.ranks[0].iterations.count == 0, name
    # a Python frame that is not a forward (the script's loop) leaves them iterations
    assert _trace(tmp_path, "loop", [1, 1, 1, 1], module="train.py(12): main").ranks[0].iterations.count == 4


def test_layers_after_one_stem_are_not_iterations(tmp_path):
    """A ViT recorded without module ranges (ninth gathering, RTX A5000):
    one patch convolution, then the same block of ops twelve times. The
    stem runs once, before the repeats and never in them: those are the
    layers of one forward. A loop of forwards runs it every time."""
    block = [("aten::layer_norm", [[1, 197, 768]]), ("aten::linear", [[1, 197, 768]]),
             ("aten::gelu", [[1, 197, 3072]]), ("aten::linear", [[1, 197, 3072]]), ("aten::add", [[1, 197, 768]])]

    def run(name: str, stem_each: bool):
        b = TraceBuilder(rank=0)
        t = 100.0
        for i in range(12):
            if i == 0 or stem_each:
                b.cpu_op("aten::conv2d", t, 500.0, dims=[[1, 3, 224, 224]])
                t += 501.0
            for op, dims in block:
                b.cpu_op(op, t, 300.0, dims=dims)
                t += 301.0
        b.cpu_op("aten::linear", t, 100.0, dims=[[1, 768]])  # the head
        (tmp_path / name).mkdir()
        return analyze(b.write(tmp_path / name / "rank-0.json.gz").parent).ranks[0].iterations

    assert run("layers", stem_each=False).count == 0
    loop = run("loop", stem_each=True)
    assert loop.count == 12 and loop.first_op == "aten::conv2d"
