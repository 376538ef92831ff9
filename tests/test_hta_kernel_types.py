"""HTA's kernel classification once per name (:mod:`hta_report.analysis.hta_kernel_types`)."""
import importlib

import pytest

from hta_report.analysis import hta_kernel_types

utils = pytest.importorskip("hta.utils.utils")

NAMES = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
         "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "Memcpy DtoH (Device -> Pageable)",
         "Memset (Device)", "ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4>(int)",
         "", "nccl", "Memcpy"]


def test_htas_modules_are_left_as_they_are():
    """No monkeypatching of the library we build on: after a rank's analysis
    HTA's modules still call HTA's own ``get_kernel_type``."""
    from hta_report.api import analyze
    from kineto import simple_gpu_trace

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        simple_gpu_trace().write(Path(d) / "t.json")
        analyze(Path(d) / "t.json", cache=None)
    for name in hta_kernel_types.CALLERS:
        module = importlib.import_module(name)
        assert getattr(module, "get_kernel_type", utils.get_kernel_type) is utils.get_kernel_type, name


# ------------------------------------------------------------------ KernelTypeFrame


def _names_frame(n=500, seed=0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, len(NAMES), n)
    index = pd.Index(rng.permutation(n * 3)[:n])  # labels that are not a range, as HTA's selections leave them
    return pd.DataFrame({"name": ids.astype(np.int16), "stream": 7}, index=index)


def _htas_lambda(module_name, calls=None):
    """A lambda as HTA writes it, defined as if in ``module_name``; ``calls``
    (a list) gets one item per call of ``get_kernel_type``."""
    sym_table = NAMES

    def get_kernel_type(name):
        if calls is not None:
            calls.append(name)
        return utils.get_kernel_type(name)

    f = lambda x: get_kernel_type(sym_table[x["name"]])  # noqa: E731 - HTA's form
    f.__module__ = module_name
    return f


@pytest.mark.parametrize("module_name", hta_kernel_types.CALLERS)
def test_kernel_type_frame_applies_htas_lambda_once_per_name_with_pandas_result(module_name):
    import pandas as pd

    plain = _names_frame()
    ours = hta_kernel_types.KernelTypeFrame(plain)
    selected = ours[ours["stream"].ne(-1)].copy()  # HTA's selection keeps the class
    assert type(selected) is hta_kernel_types.KernelTypeFrame
    calls = []
    got = selected[["name"]].apply(_htas_lambda(module_name, calls), axis=1)
    assert len(calls) == plain["name"].nunique()  # once per distinct name, not per row
    expected = plain[["name"]].apply(_htas_lambda(module_name), axis=1)
    pd.testing.assert_series_equal(got, expected, check_exact=True)
    assert got.dtype == expected.dtype


def _label_reader(x):  # reads the row's label: the result differs row by row
    return f"{x.name}:{x['name']}"


@pytest.mark.parametrize("case", ["label", "not-a-lambda", "not-htas", "other-names", "two-columns", "axis-0",
                                  "args", "empty", "floats"])
def test_kernel_type_frame_leaves_everything_else_to_pandas(case, monkeypatch):
    import pandas as pd

    plain = _names_frame(60)
    calls = []
    f = _htas_lambda(hta_kernel_types.CALLERS[0], calls)
    frame, kwargs = plain[["name"]], {"axis": 1}
    if case == "label":
        f = lambda x: _label_reader(x)  # noqa: E731
    elif case == "not-a-lambda":
        f = _label_reader
    elif case == "not-htas":
        f.__module__ = "somewhere.else"
    elif case == "other-names":
        g = f
        f = lambda x: g(x) + str(x.name)  # noqa: E731
    elif case == "two-columns":
        frame = plain
    elif case == "axis-0":
        f, kwargs = (lambda col: col.sum()), {"axis": 0}
    elif case == "args":
        g = f
        f = lambda x, extra: g(x) + extra  # noqa: E731
        kwargs["args"] = ("!",)
    elif case == "empty":
        frame = plain[["name"]].iloc[:0]
    elif case == "floats":
        frame = plain[["name"]].astype(float)
        g = f
        f = lambda x: g({"name": int(x["name"])})  # noqa: E731
    if case == "not-a-lambda":
        monkeypatch.setattr(f, "__module__", hta_kernel_types.CALLERS[0])
    elif case != "not-htas":
        f.__module__ = hta_kernel_types.CALLERS[0]
    expected = frame.apply(f, **kwargs)
    n_expected = len(calls)
    got = hta_kernel_types.KernelTypeFrame(frame).apply(f, **kwargs)
    if isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(pd.DataFrame(got), expected, check_exact=True)
    else:
        pd.testing.assert_series_equal(got, expected, check_exact=True)
    assert len(calls) == 2 * n_expected  # as many calls as pandas makes: row by row
