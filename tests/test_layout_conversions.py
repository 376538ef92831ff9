"""layout-conversions (C35): cuDNN's NCHW <-> NHWC conversion kernels around convolutions.

Synthetic traces (tests/kineto.py: 4 steps of 1000 µs, steps 2-4 analyzed)
with exact ground truth: a convolution whose engine computes in NHWC, given
NCHW tensors, runs a conversion of its input before and of its output after
(the kernel names are the ones the field traces hold).
"""

import pytest

from hta_report.analysis.kernels import LAYOUT_CONVERSION_KERNEL
from hta_report.rules import AdviceConfig
from test_tf32 import check, run
from kineto import TraceBuilder

STEP = 1000.0
#: cuDNN 9's conversions (RTX 3090 / A10G field traces).
TO_NHWC = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)"
TO_NCHW = "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, float const*, float*)"
#: cuDNN's CUTLASS TF32 convolution in NHWC.
CONV = ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4>"
        "(cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4::Params)")


def conv_steps(convert_us: float, conv: str = "aten::conv2d", gpu_name: str = "NVIDIA GeForce RTX 3090",
               compute_major: int = 8) -> TraceBuilder:
    """Per step one convolution op [t+5, t+25] launching, back to back from
    t+30: a ``convert_us`` input conversion, the 600 µs convolution, a
    ``convert_us`` output conversion (none when 0); the host waits for them."""
    b = TraceBuilder(rank=0, gpu_name=gpu_name, compute_major=compute_major)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.cpu_op(conv, t + 5, 20)
        at = t + 30
        if convert_us:
            b.kernel(TO_NHWC, at, convert_us, launch_ts=t + 6, launch_dur=3)
            at += convert_us
        b.kernel(CONV, at, 600, launch_ts=t + 10, launch_dur=3)
        at += 600
        if convert_us:
            b.kernel(TO_NCHW, at, convert_us, launch_ts=t + 14, launch_dur=3)
        b.runtime("cudaDeviceSynchronize", t + 26, 950)
    return b


def test_conversions_fire_with_their_time_as_the_bound(tmp_path):
    r = run(tmp_path, conv_steps(60.0))
    tc = r.ranks[0].tensor_cores
    # two 60 µs conversions a step: 120 µs, 12 % of the 1000 µs step
    assert tc.layout_conversion_us_per_step == pytest.approx(120.0)
    assert tc.layout_conversions_per_step == pytest.approx(2.0)
    assert [k.name for k in tc.top_layout_conversion] == [TO_NHWC, TO_NCHW] or \
        [k.name for k in tc.top_layout_conversion] == [TO_NCHW, TO_NHWC]
    assert all(k.count == 3 and k.total_us == pytest.approx(180.0) for k in tc.top_layout_conversion)
    assert tc.conv3d_only is False
    # the convolution itself is no conversion, and the conversions are no matrix math
    assert tc.eligible_us_per_step == pytest.approx(600.0)
    f = next(f for f in r.findings if f.id == "layout-conversions")
    assert f.rule == "C35" and f.severity == "medium"
    assert f.bound_ms_per_step == pytest.approx(0.120)
    assert f.whatif is None  # no edit: a bound, not a prediction
    assert "memory_format=torch.channels_last)" in f.fix and "channels_last_3d" not in f.fix
    assert "12 % of the step" in f.title


def test_3d_convolutions_get_channels_last_3d(tmp_path):
    r = run(tmp_path, conv_steps(60.0, conv="aten::conv3d"))
    assert r.ranks[0].tensor_cores.conv3d_only is True
    f = next(f for f in r.findings if f.id == "layout-conversions")
    assert "memory_format=torch.channels_last_3d)" in f.fix and "channels_last_3d" in f.title


def test_no_conversions_is_fine_and_under_the_threshold_is_fine(tmp_path):
    r = run(tmp_path / "none", conv_steps(0.0))
    assert r.ranks[0].tensor_cores.layout_conversion_us_per_step == 0
    c = check(r, "layout-conversions")
    assert c.status == "fine" and "no cuDNN" in c.detail
    # 2 x 4 µs a step: 0.8 % of the step, under layout_conversion_pct (1 %)
    r = run(tmp_path / "small", conv_steps(4.0))
    assert r.ranks[0].tensor_cores.layout_conversion_us_per_step == pytest.approx(8.0)
    c = check(r, "layout-conversions")
    assert c.status == "fine" and "0.8 %" in c.detail
    r = run(tmp_path / "lower", conv_steps(4.0), config=AdviceConfig(layout_conversion_pct=0.5))
    assert any(f.id == "layout-conversions" for f in r.findings)


def test_findings_of_the_rank_stay_within_its_step(tmp_path):
    r = run(tmp_path, conv_steps(150.0))
    assert sum(g.gain_us for f in r.findings for g in f.rank_gains if g.rank == 0) <= STEP + 1e-6


@pytest.mark.parametrize("name,hit", [
    (TO_NHWC, True), (TO_NCHW, True),
    ("_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EEEvNS0_18nchw2nhwc_params_tIT_EEPKS3_PS3_", True),
    ("void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>", True),
    ("void cudnn::ops::nhwcToNchwKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>", True),
    (CONV, False),
    ("void at::native::elementwise_kernel<128, 2>(int, at::native::direct_copy_kernel_cuda)", False),
])
def test_conversion_kernel_names(name, hit):
    assert (LAYOUT_CONVERSION_KERNEL.search(name) is not None) is hit
