"""HTA's kernel classification behind a cache (:mod:`hta_report.analysis.hta_kernel_types`)."""
import importlib

import pytest

from hta_report.analysis import hta_kernel_types

utils = pytest.importorskip("hta.utils.utils")

NAMES = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
         "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "Memcpy DtoH (Device -> Pageable)",
         "Memset (Device)", "ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4>(int)",
         "", "nccl", "Memcpy"]


def test_install_gives_hta_modules_the_same_classification_cached():
    original = utils.get_kernel_type
    assert hta_kernel_types.install() >= 2
    for name in hta_kernel_types.CALLERS[:2]:
        module = importlib.import_module(name)
        assert module.get_kernel_type is not original
        assert module.get_kernel_type.__wrapped__ is original
        assert [module.get_kernel_type(n) for n in NAMES] == [original(n) for n in NAMES]
    assert hta_kernel_types.install() >= 2  # again: nothing changes


def test_a_function_that_is_not_htas_own_is_left_alone(monkeypatch):
    module = importlib.import_module(hta_kernel_types.CALLERS[0])

    def someone_elses(name):
        return "MINE"

    monkeypatch.setattr(module, "get_kernel_type", someone_elses)
    hta_kernel_types.install()
    assert module.get_kernel_type is someone_elses
