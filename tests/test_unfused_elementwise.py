"""unfused-elementwise (C36): chains of eager elementwise kernels in a GPU-bound step.

Synthetic traces (tests/kineto.py: 4 steps of 1000 µs, steps 2-4 analyzed)
with exact ground truth.
"""
from typing import List, Tuple

import pytest

from hta_report.analysis.kernels import ELEMENTWISE_KERNEL, _is_elementwise
from hta_report.rules import AdviceConfig
from test_tf32 import check, run
from kineto import TC_GEMM, TraceBuilder

STEP = 1000.0
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
MUL = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, ...)"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)"
SOFTMAX = "void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
FUSED = "triton_poi_fused_add_mul_0"


def steps(kernels: List[Tuple[str, float]], gap: float = 0.0) -> TraceBuilder:
    """Per step, the kernels back to back on stream 7 from t+10 (``gap`` µs
    between them), launched ahead; the host waits for them."""
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        at = t + 10
        for j, (name, dur) in enumerate(kernels):
            b.kernel(name, at, dur, launch_ts=t + 1 + j * 0.1, launch_dur=0.05)
            at += dur + gap
        b.runtime("cudaDeviceSynchronize", t + 5, at - t - 5)
    return b


def test_a_chain_on_a_busy_gpu_fires_with_the_bandwidth_bound(tmp_path):
    # 500 µs GEMM, then a chain of 4 elementwise kernels of 100 µs: 900 of the 1000 µs step busy
    r = run(tmp_path, steps([(TC_GEMM, 500.0), (ADD, 100.0), (MUL, 100.0), (NORM, 100.0), (SOFTMAX, 100.0)]))
    e = r.ranks[0].elementwise
    assert e.us_per_step == pytest.approx(400.0) and e.chained_us_per_step == pytest.approx(400.0)
    assert e.chains_per_step == pytest.approx(1.0) and e.longest_chain == 4
    # (2k - 2) / 3k of the chain, k = 4: 400 * 6 / 12 = 200 µs a step
    assert e.fusible_us_per_step == pytest.approx(200.0)
    f = next(f for f in r.findings if f.id == "unfused-elementwise")
    assert f.rule == "C36" and f.bound_ms_per_step == pytest.approx(0.200) and f.whatif is None
    # 20 % of the step would rate high; a model's bound is rated medium at most
    assert f.gain_pct == pytest.approx(20.0) and f.severity == "medium"
    assert "torch.compile(model)" in f.fix and "scaled_dot_product_attention" in f.fix
    assert "40 % of the step" in f.title


def test_single_kernels_between_gemms_are_no_chain(tmp_path):
    r = run(tmp_path, steps([(TC_GEMM, 200.0), (ADD, 100.0), (TC_GEMM, 200.0), (MUL, 100.0), (TC_GEMM, 200.0),
                             (NORM, 100.0)]))
    e = r.ranks[0].elementwise
    assert e.us_per_step == pytest.approx(300.0) and e.chained_us_per_step == 0 and e.fusible_us_per_step == 0
    c = check(r, "unfused-elementwise")
    assert c.status == "fine" and "at most 0.0 %" in c.detail


def test_an_idle_gpu_is_not_judged(tmp_path):
    # the same chain, 50 µs apart: kernels busy 550 + 4 x 100 ... the GPU idles between them
    r = run(tmp_path, steps([(ADD, 100.0), (MUL, 100.0), (NORM, 100.0), (SOFTMAX, 100.0)], gap=120.0))
    assert r.ranks[0].elementwise.fusible_us_per_step == pytest.approx(200.0)
    c = check(r, "unfused-elementwise")
    assert c.status == "fine" and "kernels busy at most 40 %" in c.detail
    r = run(tmp_path / "low", steps([(ADD, 100.0), (MUL, 100.0), (NORM, 100.0), (SOFTMAX, 100.0)], gap=120.0),
            config=AdviceConfig(fusion_busy_pct=30))
    assert any(f.id == "unfused-elementwise" for f in r.findings)


def test_fused_kernels_are_not_counted(tmp_path):
    r = run(tmp_path, steps([(TC_GEMM, 500.0), (FUSED, 200.0), (FUSED, 200.0)]))
    assert r.ranks[0].elementwise.us_per_step == 0
    assert check(r, "unfused-elementwise").status == "fine"


@pytest.mark.parametrize("name,hit", [
    (ADD, True), (MUL, True), (NORM, True), (SOFTMAX, True),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >", True),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>", True),
    (FUSED, False), (TC_GEMM, False),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...AdamFunctor...>", False),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", False),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x4_elementwise>", False),
])
def test_elementwise_kernel_names(name, hit):
    assert _is_elementwise(name) is hit
    assert ELEMENTWISE_KERNEL.search(ADD) is not None
