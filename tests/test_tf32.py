"""tf32-matmuls (C34): float32 matmuls on TF32 Tensor Cores, which bf16 runs at twice the rate.

Synthetic traces (tests/kineto.py: 4 steps of 1000 µs, steps 2-4 analyzed) with
exact ground truth, then the H200 precision recordings in /work/gpu/prec (the
same MLP in fp32, TF32, bf16, fp16 and an FP8 GEMM; skipped where absent).
"""
from pathlib import Path
from typing import Optional

import pytest

from hta_report.api import analyze
from hta_report.model import TF32_TO_16_BIT_SPEEDUP
from hta_report.replay_terms import EditLabel
from hta_report.rules import AdviceConfig
from kineto import FP32_GEMM, TC_GEMM, TraceBuilder

STEP = 1000.0
#: cuBLAS's TF32 GEMM on an H200 (torch 2.11, set_float32_matmul_precision("high"): /work/gpu/prec/h200-mlp-tf32).
TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
#: cuDNN's CUTLASS TF32 convolution (H200 CNN recordings, RTX 3090 field traces).
TF32_CONV = ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4>"
             "(cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4::Params)")
FP16_GEMM = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FP8_GEMM = "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel"
PREC = Path("/work/gpu/prec")


def gpu_bound(name: str, gpu_name: str = "NVIDIA H100", compute_major: int = 9, end: float = STEP - 20,
              rank: Optional[int] = 0) -> TraceBuilder:
    """4 steps, each one kernel ``name`` [t+10, t+end] the host waits for (its speed sets the step)."""
    b = TraceBuilder(rank=rank, gpu_name=gpu_name, compute_major=compute_major)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.kernel(name, t + 10, end - 10, launch_ts=t + 2, launch_dur=5)
        b.runtime("cudaDeviceSynchronize", t + 8, end - 7)
    return b


def run(tmp_path, b: TraceBuilder, config: Optional[AdviceConfig] = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    b.write(tmp_path / "rank-0.json")
    return analyze(tmp_path, include_last_step=True, config=config)


def check(result, rule_id: str):
    return next(c for c in result.checks if c.id == rule_id)


def found(result, rule_id: str):
    hits = [f for f in result.findings if f.id == rule_id]
    assert hits, f"{rule_id} did not fire: {check(result, rule_id)}"
    return hits[0]


@pytest.mark.parametrize("name", [TF32_GEMM, TF32_CONV])
def test_tf32_matmuls_fire_with_half_their_time_as_the_bound_and_the_replay(tmp_path, name):
    r = run(tmp_path, gpu_bound(name))
    tc = r.ranks[0].tensor_cores
    # the kernel runs [t+10, t+980]: 970 µs a step, on Tensor Cores, all of it TF32
    assert tc.tf32_us_per_step == pytest.approx(970.0) and tc.tensor_core_pct == 100
    assert tc.top_tf32[0].name == name and tc.top_tf32[0].count == 3
    f = found(r, "tf32-matmuls")
    assert f.rule == "C34" and "torch.bfloat16" in f.fix and "set_float32_matmul_precision" not in f.fix
    assert f.bound_ms_per_step == pytest.approx(0.970 / TF32_TO_16_BIT_SPEEDUP)
    # the edit halves the kernel beyond its 2 µs fixed cost: (970 - 2) / 2 = 484 µs saved
    w = f.whatif
    assert w is not None and w.edit == EditLabel.TF32_TO_BF16
    assert w.step_us_before - w.step_us_after == pytest.approx(484.0, abs=1.0)
    assert f.severity == "high"
    assert check(r, "tensor-cores-unused").status == "fine"


@pytest.mark.parametrize("name", [TC_GEMM, FP16_GEMM, FP8_GEMM])
def test_16_and_8_bit_matmuls_get_no_tf32_advice(tmp_path, name):
    r = run(tmp_path, gpu_bound(name))
    assert r.ranks[0].tensor_cores.tf32_us_per_step == 0
    assert check(r, "tf32-matmuls").status == "fine"
    edit = next(w for w in r.ranks[0].replay.whatifs if w.edit == EditLabel.TF32_TO_BF16)
    assert not edit.applies


@pytest.mark.parametrize("name,tf32", [
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x5_nn_align4>(Params)", True),
    ("ampere_s1688gemm_128x128_sliced1x2_ldg4_tn", True),
    ("ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_stages_32x1_nn", False),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", False),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", False),
    ("ampere_sgemm_128x64_tn", False),
])
def test_an_untyped_s1688_tensor_op_gemm_is_tf32(name, tf32):
    """``s1688gemm`` is a float32-accumulate m16n8k8 MMA: with no 16-bit type in its name, its
    inputs are TF32 (a field run's cuDNN GRU spent 17 % of its kernel time in
    ``cutlass_80_tensorop_s1688gemm`` and was told no GEMM ran in TF32)."""
    from hta_report.analysis.kernels import TF32_KERNEL
    from hta_report.analysis.precision import lower_precision

    assert (TF32_KERNEL.search(name) is not None and not lower_precision(name)) is tf32


def test_tf32_matmuls_fire_on_a_geforce_board_too(tmp_path):
    """A GeForce RTX 3090 runs TF32 no faster than float32 (no TF32 advice from
    tensor-cores-unused), but bf16 with float32 accumulate at twice TF32: the rule fires."""
    r = run(tmp_path, gpu_bound(TF32_GEMM, gpu_name="NVIDIA GeForce RTX 3090", compute_major=8))
    tc = r.ranks[0].tensor_cores
    assert "tf32" not in tc.matrix_dtypes and "bfloat16" in tc.matrix_dtypes
    f = found(r, "tf32-matmuls")
    assert "torch.bfloat16" in f.fix and f.whatif is not None


def test_no_advice_toward_a_precision_the_device_lacks(tmp_path):
    """A Turing GPU has neither TF32 nor bf16: a kernel named TF32 there is moved nowhere."""
    r = run(tmp_path, gpu_bound(TF32_GEMM, gpu_name="Tesla T4", compute_major=7))
    c = check(r, "tf32-matmuls")
    assert c.status == "fine" and "no bf16" in c.detail


def test_under_the_threshold_is_fine(tmp_path):
    """TF32 kernels 90 µs of the 1000 µs step: 9 % < tf32_pct (10 %)."""
    r = run(tmp_path, gpu_bound(TF32_GEMM, end=100))
    assert r.ranks[0].tensor_cores.tf32_us_per_step == pytest.approx(90.0)
    assert check(r, "tf32-matmuls").status == "fine"
    r = run(tmp_path / "low", gpu_bound(TF32_GEMM, end=100), config=AdviceConfig(tf32_pct=5))
    found(r, "tf32-matmuls")


def mixed() -> TraceBuilder:
    """Per step, an fp32 SIMT GEMM [t+10, t+990] on stream 7 and a TF32 GEMM [t+10, t+90] on stream 8:
    8.2 % of GEMM time on Tensor Cores (tensor-cores-unused fires), TF32 8 % of the step."""
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.kernel(FP32_GEMM, t + 10, 980, launch_ts=t + 2, launch_dur=3)
        b.kernel(TF32_GEMM, t + 10, 80, launch_ts=t + 5, launch_dur=3, stream=8)
        b.runtime("cudaDeviceSynchronize", t + 8, 985)
    return b


def test_not_claimed_twice_with_tensor_cores_unused(tmp_path):
    """Where tensor-cores-unused fires, its autocast moves the TF32 kernels as
    well: tf32-matmuls, whose condition holds at tf32_pct 5, claims nothing on
    the rank (it defers on the compute pool) and is covered; the findings'
    gains on the rank stay within its step."""
    r = run(tmp_path, mixed(), config=AdviceConfig(tf32_pct=5))
    tc = r.ranks[0].tensor_cores
    assert tc.tf32_us_per_step == pytest.approx(80.0) and tc.tensor_core_pct < 10
    found(r, "tensor-cores-unused")
    assert "tf32-matmuls" not in [f.id for f in r.findings]
    c = check(r, "tf32-matmuls")
    assert c.status == "covered" and "tensor-cores-unused" in c.detail
    assert r.ranks[0].steps.mean_us == pytest.approx(STEP)
    assert sum(g.gain_us for f in r.findings for g in f.rank_gains if g.rank == 0) <= STEP + 1e-6


# ---------------------------------------------------------------- the H200 recordings
def _analyzed(name: str):
    folder = PREC / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (H200 precision recordings)")
    return analyze(folder)


def test_h200_tf32_mlp_predicts_the_bf16_step(tmp_path):
    """The TF32 MLP (GPU-paced step 12.36 ms) gets tf32-matmuls, and its
    prediction's 80 % interval holds the 6.79 ms measured under bf16 autocast."""
    r = _analyzed("h200-mlp-tf32")
    f = found(r, "tf32-matmuls")
    w = f.whatif
    assert w is not None and w.edit == EditLabel.TF32_TO_BF16
    assert w.step_us_before == pytest.approx(12_359, rel=0.01)
    assert w.step_us_low <= 6_786 <= w.step_us_high
    assert w.step_us_after < 0.65 * w.step_us_before
    assert "tensor-cores-unused" not in [x.id for x in r.findings]


@pytest.mark.parametrize("name", ["h200-mlp-bf16", "h200-mlp-fp16", "h200-fp8-gemm"])
def test_h200_16_and_8_bit_runs_get_no_precision_advice(name):
    r = _analyzed(name)
    ids = [f.id for f in r.findings]
    assert "tf32-matmuls" not in ids and "tensor-cores-unused" not in ids
    assert r.ranks[0].tensor_cores.tf32_us_per_step == 0


def test_h200_fp32_mlp_keeps_tensor_cores_unused():
    """TF32 off: tensor-cores-unused's prediction as before (65.76 -> 6.51 ms [5.88, 7.14]), no tf32 finding."""
    r = _analyzed("h200-mlp-fp32")
    w = found(r, "tensor-cores-unused").whatif
    assert w is not None
    assert (w.step_us_before, w.step_us_after) == (pytest.approx(65_756, rel=1e-3), pytest.approx(6_511, rel=1e-3))
    assert (w.step_us_low, w.step_us_high) == (pytest.approx(5_879, rel=1e-3), pytest.approx(7_142, rel=1e-3))
    assert "tf32-matmuls" not in [f.id for f in r.findings]
