"""Issue 29, items 2 and 3: AMD is a first-class target (launch statistics
counted where HTA knows no launch call, matrix-core kernels, no NVIDIA compute
capability for an AMD GPU), and misaligned-gemm checks only K and N (not the
token count M), with a gain that is a bound on what padding saves."""
import math

import pytest

from conftest import SHARED_ROOT
from hta_report.analysis.kernels import (MATRIX_CORE, TENSOR_CORE, amd_device, compute_major, gemm_k_n, misaligned,
                                         padding_bound)
from hta_report.api import analyze
from hta_report.model import AnalysisResult
from kineto import TC_GEMM, TraceBuilder

MI300 = "AMD Instinct MI300X"
#: hipBLASLt's MFMA GEMM (from tracelens/mi300_qwen_chat) and a Tensile GEMM without a matrix instruction.
MFMA_GEMM = ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_ISA942_IU1_K1_"
             "LBSPPA1024_LPA16_MIWT4_4_PLR1_SU0_SUM0_SUS0_SVW8_TLDS1_UIOFGRO0_USFGROn1_VSn1_VWA2_VWB2_WSGRA0_WSGRB0_"
             "WS64_WG64_4_1")
PLAIN_TENSILE = "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1_LDSB0_ISA906_TT4_4_VW4_WG16_16_1"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


# ------------------------------------------------------------------ item 3: K and N, not M


@pytest.mark.parametrize("name, dims, k_n", [
    ("aten::linear", [[16, 559, 1024], [1024, 1024], [1024]], (1024, 1024)),  # 559 tokens: M
    ("aten::linear", [[16, 559, 1024], [30522, 1024], [30522]], (1024, 30522)),
    ("aten::addmm", [[512], [141, 512], [512, 512], [], []], (512, 512)),
    ("aten::mm", [[141, 1000], [1000, 30]], (1000, 30)),
    ("aten::bmm", [[8, 141, 64], [8, 64, 141]], (64, 141)),
    ("aten::baddbmm", [[8, 141, 141], [8, 141, 64], [8, 64, 141], [], []], (64, 141)),
    ("aten::matmul", [[4, 141, 1023], [1023]], (1023, None)),
])
def test_k_and_n_are_read_by_each_ops_layout(name, dims, k_n):
    assert gemm_k_n(name, dims) == k_n


def test_the_token_count_does_not_make_a_gemm_misaligned():
    assert not misaligned("aten::linear", [[16, 559, 1024], [1024, 1024], [1024]])
    assert not misaligned("aten::addmm", [[512], [141, 512], [512, 512], [], []])
    assert misaligned("aten::linear", [[16, 559, 1024], [30522, 1024], [30522]])  # a vocabulary of 30522
    assert misaligned("aten::bmm", [[8, 141, 64], [8, 64, 141]])  # attention scores: N = keys


def test_the_padding_bound_weighs_narrow_loads_against_padded_work():
    # K = N = 1023: one element per load instead of 8, padded work 1024² / 1023²
    assert padding_bound("aten::mm", [[64, 1023], [1023, 1023]]) == pytest.approx(1 - 1 / 8 * (1024 / 1023) ** 2)
    # K = 1020: 4 elements per load (8-byte), half the loads' cost at most, less the padded work
    assert padding_bound("aten::mm", [[64, 1020], [1020, 1024]]) == pytest.approx(1 - 4 / 8 * 1024 / 1020)
    # a matrix-vector product padded to 8 columns does 8 times the work: nothing to save
    assert padding_bound("aten::mm", [[64, 1024], [1024, 1]]) == 0.0
    assert padding_bound("aten::linear", [[16, 559, 1024], [1024, 1024]]) == pytest.approx(0.0)
    assert all(0 <= padding_bound("aten::mm", [[7, k], [k, 24]]) < 1 for k in (1, 3, 9, 100, 4097))


def _linear_trace(weight, steps=4, gpu_name="NVIDIA H100"):
    b = TraceBuilder(rank=0, gpu_name=gpu_name)
    for i in range(steps):
        t = i * 1000.0
        b.step(i + 1, t, 1000.0)
        b.cpu_op("aten::linear", t + 10, 200.0, dims=[[16, 559, weight[1]], weight, [weight[0]]],
                 types=["c10::BFloat16"] * 3)
        b.kernel(TC_GEMM, t + 100, 400.0, launch_ts=t + 20)
    return b


def test_misaligned_gemm_ignores_the_token_count_and_claims_a_bound(tmp_path):
    aligned, odd = tmp_path / "aligned", tmp_path / "odd"
    aligned.mkdir(), odd.mkdir()
    _linear_trace([1024, 1024]).write(aligned / "r.json")
    _linear_trace([1023, 1024]).write(odd / "r.json")
    fine = next(c for c in analyze(aligned, include_last_step=True).checks if c.id == "misaligned-gemm")
    assert fine.status == "fine", fine
    res = analyze(odd, include_last_step=True)
    tc = res.ranks[0].tensor_cores
    assert tc.misaligned_ops_per_step == 1 and tc.misaligned_us_per_step == pytest.approx(400.0)
    share = padding_bound("aten::linear", [[16, 559, 1024], [1023, 1024]])
    assert tc.misaligned_bound_us_per_step == pytest.approx(share * 400.0)
    assert 0 < tc.misaligned_bound_us_per_step < tc.misaligned_us_per_step
    f = next(f for f in res.findings if f.id == "misaligned-gemm")
    assert "at most" in "\n".join(f.evidence) and "N=1023" in "\n".join(f.evidence)


def test_kernels_launched_through_the_driver_api_belong_to_their_op(tmp_path):
    # cuBLAS and Triton launch through cuLaunchKernel (category cuda_driver): the op's kernel
    # time must count it, as it counts cudaLaunchKernel (before: 0 µs, the rule stayed quiet)
    b = _linear_trace([1023, 1024])
    for ev in b.events:
        if ev.get("cat") == "cuda_runtime" and ev["name"] == "cudaLaunchKernel":
            ev["cat"], ev["name"] = "cuda_driver", "cuLaunchKernel"
    b.write(tmp_path / "r.json")
    tc = analyze(tmp_path, include_last_step=True).ranks[0].tensor_cores
    assert tc.misaligned_ops_per_step == 1 and tc.misaligned_us_per_step == pytest.approx(400.0)


# ------------------------------------------------------------------ item 2: AMD devices


def test_rocm_compute_major_is_no_nvidia_compute_capability():
    named = {"deviceProperties": [{"id": 0, "name": MI300, "computeMajor": 9, "warpSize": 64}]}
    unnamed = {"deviceProperties": [{"id": 0, "name": "", "computeMajor": 9, "computeMinor": 4, "warpSize": 64}]}
    h100 = {"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "warpSize": 32}]}
    assert compute_major(named) is None and compute_major(unnamed) is None and compute_major(h100) == 9
    assert amd_device(unnamed) and not amd_device(h100)


def test_matrix_core_kernel_names():
    assert MATRIX_CORE.search(MFMA_GEMM) and not MATRIX_CORE.search(PLAIN_TENSILE)
    assert MATRIX_CORE.search("igemm_wrw_gtcx2_nhwc_bf16_bx0_ex1_bt256x128x16_wt32x32x8_ws2x1_wr2x2")
    assert MATRIX_CORE.search("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weight")
    assert TENSOR_CORE.search("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT")
    assert not TENSOR_CORE.search(MFMA_GEMM) and not MATRIX_CORE.search(TC_GEMM)


def _amd_trace(gemm, steps=4, api="hipLaunchKernel", gpu_name=MI300, small=12):
    """Steps of ``small`` tiny kernels launched back to back (each shorter than
    its 6 µs launch call, 4 µs apart) and one GEMM of 300 µs, launched by ``api``."""
    b = TraceBuilder(rank=0, gpu_name=gpu_name)
    for i in range(steps):
        t = i * 1000.0
        b.step(i + 1, t, 1000.0)
        b.cpu_op("aten::mm", t + 5, 20.0, dims=[[512, 512], [512, 512]], types=["float", "float"])
        b.kernel(gemm, t + 30, 300.0, launch_ts=t + 10, launch_dur=6.0, api=api)
        for j in range(small):
            s = t + 400 + 10.0 * j
            b.kernel(ELEMENTWISE, s + 8, 2.0, launch_ts=s, launch_dur=6.0, api=api)
    return b


def _texts(res: AnalysisResult) -> str:
    return "\n".join([f.title for f in res.findings] + [e for f in res.findings for e in f.evidence]
                     + [c.detail for c in res.checks])


def test_hip_launches_are_counted_where_hta_knows_none(tmp_path):
    amd, nvidia = tmp_path / "amd", tmp_path / "nvidia"
    amd.mkdir(), nvidia.mkdir()
    _amd_trace(MFMA_GEMM).write(amd / "r.json")
    _amd_trace(TC_GEMM, api="cudaLaunchKernel", gpu_name="NVIDIA H100").write(nvidia / "r.json")
    ours, hta = analyze(amd, include_last_step=True).ranks[0].launch, analyze(nvidia, include_last_step=True).ranks[0].launch
    assert (hta.launch_source, ours.launch_source) == ("HTA", "hta-report")
    # the same events counted by HTA (CUDA names) and by us (HIP names): the same figures
    assert ours.launches == hta.launches == 4 * 13
    assert ours.short_kernels == hta.short_kernels == 4 * 12
    assert ours.median_runtime_us == hta.median_runtime_us == 6.0
    assert ours.median_launch_delay_us == pytest.approx(hta.median_launch_delay_us)
    assert ours.p90_launch_delay_us == pytest.approx(hta.p90_launch_delay_us)


def test_launch_bound_is_checked_on_rocm(tmp_path):
    _amd_trace(MFMA_GEMM, small=40).write(tmp_path / "r.json")
    res = analyze(tmp_path, include_last_step=True)
    check = next(c for c in res.checks if c.id == "launch-bound")
    assert check.status != "not checked", check


def test_amd_matrix_cores_count_as_tensor_cores_and_no_compute_capability_is_shown(tmp_path):
    mfma, plain = tmp_path / "mfma", tmp_path / "plain"
    mfma.mkdir(), plain.mkdir()
    _amd_trace(MFMA_GEMM).write(mfma / "r.json")
    _amd_trace(PLAIN_TENSILE).write(plain / "r.json")
    good = analyze(mfma, include_last_step=True)
    tc = good.ranks[0].tensor_cores
    assert tc.compute_major is None and tc.amd_matrix_cores is True and tc.tensor_core_pct == pytest.approx(100.0)
    assert next(c for c in good.checks if c.id == "tensor-cores-unused").status == "fine"
    bad = analyze(plain, include_last_step=True)  # an MI300X (matrix cores by name) running a GEMM without MFMA
    assert next(f for f in bad.findings if f.id == "tensor-cores-unused")
    for res in (good, bad):
        assert "computeMajor" not in _texts(res)


# ------------------------------------------------------------------ the real traces


def _real(folder):
    path = SHARED_ROOT / "tracelens" / folder
    if not path.is_dir():
        pytest.skip(f"{folder} not available (../shared is absent)")
    return analyze(path)


def test_mi300_bert_is_launch_bound_like_its_h100_twin():
    res = _real("mi300_bert_small")
    launch = res.ranks[0].launch
    assert launch.launches > 0 and launch.launch_source == "hta-report"
    assert "launch-bound" in {f.id for f in res.findings}
    assert "computeMajor" not in _texts(res)


def test_mi300_qwen_linear_layers_are_not_misaligned_by_their_559_tokens():
    res = _real("mi300_qwen_chat")
    assert res.ranks[0].launch.launches > 0
    assert "misaligned-gemm" not in {f.id for f in res.findings}
    assert not math.isnan(res.ranks[0].tensor_cores.tensor_core_pct)
    assert "computeMajor" not in _texts(res)
