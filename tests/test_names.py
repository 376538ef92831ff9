"""Kernel names as shown (hta_report.names): short, distinct, grouped by template variants.

The names are real: copied from the shared A100/V100 traces (trace_diff, two_ranks).
"""
import gzip
import json

import pytest

from conftest import SHARED_TRACES
from hta_report.names import ellipsize, family, short_name, short_names

FILL_FLOAT = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
FILL_LONG = FILL_FLOAT.replace("FillFunctor<float>", "FillFunctor<long>")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
MUL = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, "
       "float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
       "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::"
       "{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
       "float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})")
COPY = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::"
        "{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::"
        "{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&,"
        " at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}"
        "::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})")
SPLIT = ("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, float, "
         "{}ul>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>, "
         "at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, bool, at::PhiloxCudaState, "
         "float, float, float, float, float, float, long)")
CUTLASS = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{}_32x6_tn_align4>("
           "cutlass_80_tensorop_s1688gemm_{}_32x6_tn_align4::Params)")
GEMV = ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, "
        "true, {}, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >"
        "(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float>, float>)")
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, {}, 128, 1>(float*, "
       "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, "
       "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")


@pytest.mark.parametrize("full, short", [
    (FILL_FLOAT, "vectorized_elementwise_kernel"),
    (MUL, "elementwise_kernel"),
    (SPLIT.format(5), "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"),
    (CAT.format(2), "CatArrayBatchedCopy"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"),
    (CUTLASS.format("64x64", "64x64"), "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>"),
    (GEMV.format("false"), "gemvx::kernel"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ("Memset (Device)", "Memset (Device)"),
    ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
    ("<script>alert(1)</script>", "<script>alert(1)</script>"),  # no C++ name: kept (and escaped on output)
    ("", ""),
])
def test_short_name_drops_return_type_namespaces_templates_and_parameters(full, short):
    assert short_name(full) == short


def test_short_names_keep_what_tells_kernels_apart():
    labels = short_names([FILL_FLOAT, ADD, MUL, COPY])
    assert labels == {
        FILL_FLOAT: "vectorized_elementwise_kernel<FillFunctor>",
        ADD: "vectorized_elementwise_kernel<CUDAFunctor_add>",
        MUL: "elementwise_kernel<gpu_kernel_impl<BinaryFunctor>>",  # as deep as needed, no deeper
        COPY: "elementwise_kernel<gpu_kernel_impl<direct_copy_kernel_cuda>>",
    }
    # names before values: the dtype shows only where nothing else differs
    assert short_names([FILL_FLOAT, FILL_LONG]) == {
        FILL_FLOAT: "vectorized_elementwise_kernel<FillFunctor<float>>",
        FILL_LONG: "vectorized_elementwise_kernel<FillFunctor<long>>",
    }
    assert short_names([SPLIT.format(2), SPLIT.format(5)]) == {
        SPLIT.format(2): "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<2ul>",
        SPLIT.format(5): "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<5ul>",
    }
    # a kernel alone keeps its short name
    assert short_names([FILL_FLOAT, "volta_sgemm_128x64_nn"])[FILL_FLOAT] == "vectorized_elementwise_kernel"


def test_labels_that_would_stay_equal_get_a_number():
    a = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
    b = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    assert short_names([a, b, a]) == {a: "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
                                      b: "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t [2]"}


def test_family_groups_template_value_variants_only():
    assert family(SPLIT.format(2)) == family(SPLIT.format(5))
    assert family(FILL_FLOAT) == family(FILL_LONG)
    assert family(CAT.format(1)) == family(CAT.format(3))
    assert family(GEMV.format("true")) == family(GEMV.format("false"))
    assert family(FILL_FLOAT) != family(ADD)  # different functors: different kernels
    assert family(MUL) != family(COPY)
    assert family(CUTLASS.format("64x64", "64x64")) != family(CUTLASS.format("128x64", "128x64"))
    assert family("volta_sgemm_128x64_nn") != family("volta_sgemm_128x32_nn")


def test_ellipsize_cuts_at_a_token_boundary():
    text = "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1"
    cut = ellipsize(text, 40)
    assert cut == "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_…" and len(cut) <= 40
    assert ellipsize("short", 40) == "short"


def test_every_kernel_of_a_real_trace_gets_a_distinct_short_label():
    path = SHARED_TRACES / "trace_diff" / "control" / "control.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    with gzip.open(path, "rt") as fh:
        names = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"}
    labels = short_names(names)
    assert len(set(labels.values())) == len(names) > 100
    assert max(len(v) for v in labels.values()) <= 110
    assert sum(len(v) for v in labels.values()) < 0.3 * sum(len(n) for n in names)
