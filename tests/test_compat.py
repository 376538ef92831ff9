"""Valid traces HTA's parser gets wrong, read right by both of our parsers
(``hta_report/load/compat.py``): small correlation ids under pandas 3, and the
capitalised categories of PyTorch 1.8-1.9."""
import pandas as pd
import pytest

from kineto import ELEMENTWISE, TraceBuilder
from hta_report.api import analyze
from hta_report.load import fastparse
from hta_report.load.compat import LEGACY_CATEGORIES, correlation_to_index
from hta_report.load.hta_parser import hta_parse
from hta_report.load.parse import report_parser_config
from test_fast_loader import assert_same_parse


def small_ids_trace(path, rows_before: int = 300):
    """A trace whose correlation ids fit in int8 (1..~20) while its kernels sit
    past row 127: HTA's transform writes row indices > 127 into an int8 column."""
    b = TraceBuilder(rank=0)
    b._corr = 0
    b.step(1, 0, 5000)
    for i in range(rows_before):  # CPU rows first, so the GPU rows come late in the frame
        b.events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1000, "tid": 1000,
                         "ts": b.base + 1 + i * 0.5, "dur": 0.25, "args": {"External id": 0}})
    for k in range(5):
        b.kernel(ELEMENTWISE, 1000 + k * 200, 100)
    return b.write(path)


def test_small_correlation_ids_fail_htas_transform_but_not_ours(tmp_path):
    path = small_ids_trace(tmp_path / "t.json")
    from hta.common.trace import transform_correlation_to_index
    from hta.common.trace_parser import parse_trace_dataframe

    meta, df, table = parse_trace_dataframe(str(path), report_parser_config())
    assert df["correlation"].dtype == "int8"  # HTA's downcast
    if int(pd.__version__.split(".")[0]) >= 3:
        with pytest.raises(TypeError, match="int8"):
            transform_correlation_to_index(df.copy(), table)
    out = correlation_to_index(df.copy(), table)
    assert out["correlation"].dtype == "int8"  # HTA's own dtype kept
    kernels = out[out["stream"] == 7]
    launches = out.loc[kernels["index_correlation"]]
    assert (launches["correlation"].to_numpy() == kernels["correlation"].to_numpy()).all()
    assert (kernels["index_correlation"] > 127).all()


def test_small_correlation_ids_read_alike_by_both_parsers_and_analyze(tmp_path):
    path = small_ids_trace(tmp_path / "t.json")
    ours = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    assert_same_parse(hta_parse(path, report_parser_config()), ours)
    result = analyze(path)
    assert result.ranks[0].kernel_count == 5 and not result.ranks[0].failures


def legacy_trace(path):
    """A GPU trace written the way PyTorch 1.9 wrote it: capitalised
    categories, GPU threads named ``stream 7``, ``Call stack`` in op args."""
    b = TraceBuilder(rank=None)
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, 1000)
        b.cpu_op("aten::add", t0 + 10, 50)
        b.kernel(ELEMENTWISE, t0 + 100, 400)
        b.memcpy("HtoD", "Pageable", t0 + 600, 50, 1 << 20)
        b.memset(t0 + 700, 5, 128)
    for e in b.events:
        if e["cat"] == "user_annotation":
            e["cat"] = "Operator"  # ProfilerStep#N was an Operator
        elif e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op"):
            e["cat"] = {v: k for k, v in LEGACY_CATEGORIES.items()}[e["cat"]]
        if e["cat"] in ("Kernel", "Memcpy", "Memset"):
            e["tid"] = f"stream {e['tid']}"
        if e["cat"] == "Operator":
            e["args"]["Call stack"] = "train.py(12): step;train.py(30): <module>"
    b.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Traces",
                     "tid": "PyTorch Profiler", "ts": b.base, "dur": 3000, "args": {"Op count": 0}})
    return b.write(path)


def test_legacy_categories_read_alike_by_both_parsers(tmp_path):
    path = legacy_trace(tmp_path / "worker0.1623212756351.pt.trace.json")
    ours = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    theirs = hta_parse(path, report_parser_config())
    assert_same_parse(theirs, ours)
    symbols = ours[2].get_sym_table()
    cats = {symbols[i] for i in ours[1]["cat"].unique()}
    assert {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "user_annotation"} <= cats
    assert not cats & set(LEGACY_CATEGORIES)
    steps = ours[1][ours[1]["name"].map(symbols.__getitem__).str.startswith("ProfilerStep#")]
    assert {symbols[i] for i in steps["cat"]} == {"user_annotation"}  # PyTorch's own ranges


def test_legacy_trace_has_its_gpu(tmp_path):
    path = legacy_trace(tmp_path / "worker0.1623212756351.pt.trace.json")
    r = analyze(path).ranks[0]
    assert r.has_gpu and r.kernel_count >= 1 and not r.failures
    assert [d.direction for d in r.memcpy.directions] == ["HtoD", "Memset"]
    assert r.steps.count == 2  # 3 recorded, the last dropped as HTA does
    assert r.code.gpu_by_op == []  # no op around the launches; the step range is not an op
    assert [x.name for x in r.cpu.top_ops] == ["aten::add"]


def shared_files():
    from conftest import SHARED_ROOT

    files = sorted(SHARED_ROOT.glob("**/*.json.gz"), key=str) if SHARED_ROOT.is_dir() else []
    return files or [pytest.param(None, marks=pytest.mark.skip(reason="../shared is absent"))]


@pytest.mark.parametrize("path", shared_files(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}" if p else "none")
def test_both_parsers_read_every_shared_generation_alike(path):
    """Every real trace (PyTorch 1.9 to 2.x, CUDA and ROCm, small correlation
    ids included) gives the same frame from the fast parser as from HTA's
    own reader and functions, compat fixes and all (HTA's ``parse_trace_file``
    itself fails on the small-id traces under pandas 3)."""
    ours = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    assert_same_parse(hta_parse(path, report_parser_config()), ours)


def test_pytorch_1_10_mixed_generation_reads_its_gpu(tmp_path):
    """PyTorch 1.10-1.11: today's host categories (cpu_op, user_annotation)
    beside the capitalised GPU ones and ``gpu_user_Annotation``."""
    b = TraceBuilder(rank=0)
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, 1000)
        b.kernel(ELEMENTWISE, t0 + 100, 400)
        b._x("gpu_user_Annotation", f"ProfilerStep#{step + 1}", t0 + 100, 400, pid=0, tid=7)
    for e in b.events:
        e["cat"] = {"kernel": "Kernel", "cuda_runtime": "Runtime"}.get(e["cat"], e["cat"])
    path = b.write(tmp_path / "t.json")
    ours = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    assert_same_parse(hta_parse(path, report_parser_config()), ours)
    symbols = ours[2].get_sym_table()
    assert {symbols[i] for i in ours[1]["cat"].unique()} == {"kernel", "cuda_runtime", "user_annotation",
                                                              "gpu_user_annotation"}
    r = analyze(path).ranks[0]
    assert r.has_gpu and r.steps.count == 2 and r.kernel_count >= 1


def step_named_ops_trace(path):
    """Three steps and ops a user named like a step: HTA's ``add_iteration``
    asserts on every name that starts with ``ProfilerStep`` but is not
    ``ProfilerStep#N``."""
    b = TraceBuilder(rank=0)
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, 1000)
        b.cpu_op("ProfilerStep#", t0 + 10, 20)
        b.cpu_op("ProfilerStep", t0 + 40, 20, cat="user_annotation")
        b.kernel(ELEMENTWISE, t0 + 100, 400)
    return b.write(path)


def test_htas_add_iteration_asserts_on_a_step_like_name(tmp_path):
    """The fault this works around, shown on HTA's own function (if HTA stops
    asserting, the fallback can go)."""
    from hta.common.trace import add_iteration

    path = step_named_ops_trace(tmp_path / "t.json")
    _, df, table = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    with pytest.raises(AssertionError, match="Failed to parse profiler step"):
        add_iteration(df.drop(columns="iteration"), table)


def test_step_like_names_are_ops_in_both_parsers(tmp_path):
    path = step_named_ops_trace(tmp_path / "t.json")
    ours = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)
    assert_same_parse(hta_parse(path, report_parser_config()), ours)
    _, df, table = ours
    sym = table.get_sym_table()
    names = df["name"].map(sym.__getitem__)
    assert sorted(df.loc[names.isin(["ProfilerStep#", "ProfilerStep"]), "iteration"].tolist()) == [1, 1, 2, 2, 3, 3]
    kernels = df[df["stream"] > 0]
    assert kernels["iteration"].tolist() == [1, 2, 3]  # through their launches
    r = analyze(path).ranks[0]
    assert not r.failures and r.steps.count == 2  # 3 recorded, the last dropped as HTA does
    assert {x.name for x in r.cpu.top_ops} >= {"ProfilerStep#"}


def test_a_kernel_named_like_a_step_is_a_kernel(tmp_path):
    """A kernel may carry any name: one named ``ProfilerStep#N`` is neither a
    step nor the last step (found by the hostile-names fuzz test: the step
    filter once dropped every such kernel as "the last step", and HTA's queue
    length check then asserted on launches without their kernels)."""
    b = TraceBuilder(rank=0)
    for step in range(3):
        b.step(step + 1, step * 1000, 1000)
        b.kernel("ProfilerStep#99999999999999999999999", step * 1000 + 100, 400)
    r = analyze(b.write(tmp_path / "t.json")).ranks[0]
    assert not r.failures and not r.replaced
    assert r.steps.count == 2  # the three host steps, the last dropped
    assert [(k.name, k.count) for k in r.top_kernels] == [("ProfilerStep#99999999999999999999999", 2)]
