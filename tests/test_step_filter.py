"""The step filter on narrow frames (:mod:`hta_report.load.step_filter`) gives
exactly the frames HTA's own ``Trace._filter_irrelevant_gpu_kernels`` gives.

Every load below goes through :func:`hta_report.load.load_traces` with the
filter wrapped: the wrapper runs HTA's method on a deep copy of the aligned
frames first, then ours, and compares column by column (order, dtypes,
values, index and its type). Real traces (``sample_traces``, the shared
folders), with the last step kept and dropped, and built traces for the
corners: kernels sharing a correlation with several CPU events (the merge
repeats rows), no ProfilerStep, one step, no GPU events.
"""
import copy
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, SHARED_FOLDERS, shared
from kineto import TraceBuilder, simple_gpu_trace
from hta_report.load import load_traces, traces
from hta_report.load.step_filter import ROW, filter_steps


def assert_same_frame(theirs: pd.DataFrame, ours: pd.DataFrame) -> None:
    assert list(theirs.columns) == list(ours.columns)
    assert type(theirs.index) is type(ours.index)
    pd.testing.assert_index_equal(theirs.index, ours.index, exact=True)
    for col in theirs.columns:
        assert theirs[col].dtype == ours[col].dtype, col
        pd.testing.assert_series_equal(theirs[col], ours[col], check_exact=True, obj=col)


@pytest.fixture
def checked(monkeypatch):
    """Wrap the filter of :func:`load_traces`: each call is compared with
    HTA's method on a copy; returns the list of per-rank row counts compared."""
    compared = []

    def both(trace, include_last_step):
        theirs = copy.copy(trace)
        theirs.traces = {r: df.copy(deep=True) for r, df in trace.traces.items()}
        theirs._filter_irrelevant_gpu_kernels(include_last_step)
        filter_steps(trace, include_last_step)
        assert set(theirs.traces) == set(trace.traces)
        for rank, df in theirs.traces.items():
            assert_same_frame(df, trace.traces[rank])
            assert ROW not in trace.traces[rank].columns
            compared.append(len(df))

    monkeypatch.setattr(traces, "filter_steps", both)
    return compared


def _folders():
    return [REPO / "sample_traces" / d.name for d in sorted((REPO / "sample_traces").iterdir()) if d.is_dir()]


@pytest.mark.parametrize("last", [None, True, False])
@pytest.mark.parametrize("folder", _folders(), ids=lambda p: p.name)
def test_sample_traces(folder, last, checked):
    load_traces(folder, include_last_step=last)
    assert checked and sum(checked) > 0


@pytest.mark.parametrize("last", [None, False])
@pytest.mark.parametrize("name", SHARED_FOLDERS)
def test_shared_traces(name, last, checked):
    load_traces(shared(name), include_last_step=last)
    assert checked and sum(checked) > 0


def _write(tmp_path: Path, builder: TraceBuilder) -> Path:
    folder = tmp_path / "t"
    folder.mkdir()
    builder.write(folder / "rank-0.json")
    return folder


def test_a_correlation_shared_by_several_cpu_events_keeps_the_kernel_once(tmp_path, checked):
    b = simple_gpu_trace(steps=4)
    # a second runtime event with the first kernel's correlation: HTA's merge gave that kernel
    # twice; the id is split first (load.compat.distinct_correlations), the kernel keeps its launch
    first = next(e for e in b.events if e["cat"] == "kernel")
    corr = first["args"]["correlation"]
    b._x("cuda_runtime", "cudaEventRecord", 50.0, 2.0, correlation=corr)
    folder = _write(tmp_path, b)
    loaded = load_traces(folder, include_last_step=False)
    df = loaded.frame(0)
    names = loaded.trace.symbol_table.get_sym_table()
    gpu = df[df["stream"].ge(0)]
    kernels = gpu[gpu["name"].map(names.__getitem__).eq(first["name"])]
    kernel = kernels.loc[kernels["ts"].idxmin()]
    assert names[kernel["name"]] == first["name"]
    assert gpu["correlation"].eq(kernel["correlation"]).sum() == 1
    assert names[df.loc[kernel["index_correlation"], "name"]] == "cudaLaunchKernel"
    assert checked


@pytest.mark.parametrize("steps", [0, 1])
def test_no_or_one_step_leaves_the_frame(tmp_path, steps, checked):
    b = TraceBuilder(rank=0)
    for i in range(steps):
        b.step(i, i * 100.0, 90.0)
    b.cpu_op("aten::mm", 10.0, 20.0)
    b.kernel("gemm", 40.0, 30.0)
    load_traces(_write(tmp_path, b))
    assert checked == [3 + steps]  # the op, the launch, the kernel (and the step)


def test_cpu_only(tmp_path, checked):
    b = TraceBuilder(rank=0, gpu_name=None)
    for i in range(3):
        b.step(i, i * 100.0, 90.0)
        b.cpu_op("aten::add", i * 100.0 + 5, 20.0)
    load_traces(_write(tmp_path, b), include_last_step=False)
    assert checked == [4]
