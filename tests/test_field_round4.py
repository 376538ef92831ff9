"""Fixes from the fourth and fifth readings of field traces (issue 51): what a
16-bit move can remove from a GEMM, and from a matrix-vector product."""
import gzip
import json

import numpy as np
import pytest

from hta_report.analysis.replay.edits import GEMV_SPEEDUP, MATMUL_FIXED_US, matmul_after_16_bit
from hta_report.api import analyze
from kineto import FP32_GEMM, Sim, TraceBuilder

GEMV = ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(...)")


def test_only_the_part_beyond_a_kernels_fixed_cost_scales():
    out = matmul_after_16_bit(np.array([300.0, 6.0, 1.5]), 16.0)
    assert out[0] == pytest.approx(MATMUL_FIXED_US + (300.0 - MATMUL_FIXED_US) / 16)
    assert out[1] == pytest.approx(MATMUL_FIXED_US + 4.0 / 16)
    assert out[2] == 1.5  # shorter than the fixed cost: unchanged


def _run(tmp_path, kernel: str, name: str = "NVIDIA A100-SXM4-80GB"):
    b = TraceBuilder(rank=0, gpu_name=name, compute_major=8)
    sim = Sim(b)
    for s in range(1, 7):
        start = sim.t
        for _ in range(8):
            sim.op("aten::linear", [(kernel, 300.0)], host_us=10.0)
        sim.synchronize()
        sim.idle(20.0)
        b.step(s, start, sim.t - start)
    path = tmp_path / "run" / "rank-0.json.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(json.dumps(b.document()).encode()))
    return analyze(path.parent)


@pytest.mark.parametrize("kernel, most", [(GEMV, GEMV_SPEEDUP), (FP32_GEMM, 16.0)], ids=["gemv", "gemm"])
def test_a_matrix_vector_product_gains_only_its_halved_bytes(tmp_path, kernel, most):
    """Eight 300 µs fp32 kernels a step on an A100 (16x Tensor Core peak over
    fp32): as GEMMs they may shrink to ~1/16; as matrix-vector products
    (memory-bound) to 1/2 at most, so the step saves under half of them."""
    r = _run(tmp_path, kernel)
    f = next(f for f in r.findings if f.id == "tensor-cores-unused")
    w = f.whatif
    assert w is not None
    saved = w.step_us_before - w.step_us_after
    kernels = 8 * 300.0
    if most == GEMV_SPEEDUP:
        assert saved <= kernels * (1 - 1 / GEMV_SPEEDUP) + 1.0
    else:
        assert saved > kernels * (1 - 1 / GEMV_SPEEDUP)


def test_late_starts_on_an_idle_gpu_withhold_every_prediction(tmp_path):
    """Nine starts 2 ms after their launch on an idle GPU, 60 % of the
    window: the replay would move those delays with the launches, so no
    what-if is made and the note says why, in words, in every finding's
    place; short delays (200 µs) keep the predictions."""
    from hta_report.render.replay_notes import replay_note
    from hta_report.replay_terms import NoteCode
    from test_field_round3 import late_start_trace

    late = tmp_path / "late"
    late.mkdir()
    late_start_trace(2000.0).write(late / "rank-0.json")
    r = analyze(late)
    rp = r.ranks[0].replay
    assert rp.whatifs == [] and rp.notes[-1].code == NoteCode.LATE_STARTS
    # the replay's events: the analyzed steps (the first is a warm-up): 2 of 3, 3 late starts each
    assert rp.notes[-1].values["starts"] == 6 and rp.notes[-1].values["late_pct"] > 10
    assert "does not show" in replay_note(rp)
    assert all(f.whatif is None for f in r.findings)
    short = tmp_path / "short"
    short.mkdir()
    late_start_trace(200.0).write(short / "rank-0.json")
    assert analyze(short).ranks[0].replay.whatifs
