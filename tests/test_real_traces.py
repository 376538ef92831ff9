"""Every real trace under ../shared/traces reads, with the numbers other tools
show on their own test traces (issue 28).

Each folder is analyzed through the CLI and held to what must hold of any
report (``tests/invariants.py``): no failure, a reason for every missing part,
the GPU seen wherever the files hold kernels (counted from the raw JSON, any
Kineto generation), findings' gains within each rank's window, busy time
plus the idle the findings claim within the window, never "looks healthy"
with a part not analyzed, and on TraceLens's traces our exact GPU-span busy
time within 1.5 points of TraceLens's own result where the spans agree.
Skips cleanly without ../shared.
"""
import json

import pytest

from conftest import SHARED_ROOT, shared_runs
from invariants import check, tracelens_reference

RUNS = shared_runs()


@pytest.mark.parametrize("folder", RUNS or [pytest.param(None, marks=pytest.mark.skip("../shared is absent"))])
def test_every_shared_trace_reads_and_holds_the_invariants(folder, tmp_path, run_cli):
    path = SHARED_ROOT / folder
    code, out, err = run_cli("analyze", path, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json", "--no-cache")
    assert code == 0, err
    assert "Traceback" not in out + err
    result = json.loads((tmp_path / "r.json").read_text())
    files = [f for f in path.iterdir() if f.name.endswith((".json", ".json.gz"))]
    assert check(result, path, (tmp_path / "r.md").read_text(), files) == []


def test_the_population_covers_every_generation_and_vendor():
    """The shared set holds what the invariants are about: HTA's, TraceLens's
    (with its references) and a PyTorch 1.9 trace."""
    if not RUNS:
        pytest.skip("../shared is absent")
    assert any(r.startswith("legacy/") for r in RUNS) and any(r.startswith("hta/") for r in RUNS)
    with_reference = [r for r in RUNS if r.startswith("tracelens/") and tracelens_reference(SHARED_ROOT / r)]
    assert len(with_reference) >= 10


def test_tracelens_parity_is_checked_not_assumed(tmp_path, run_cli):
    """The parity check fails on a result 2 points off TraceLens's (so a pass means something)."""
    folder = SHARED_ROOT / "tracelens" / "sglang_decode"
    if not folder.is_dir():
        pytest.skip("../shared is absent")
    code, _, err = run_cli("analyze", folder, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json")
    assert code == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert check(result, folder) == []
    result["ranks"][0]["gpu_span_busy_pct"] += 2.0
    assert [b[0] for b in check(result, folder)] == ["TraceLens busy parity"]


#: The TensorBoard profiler plugin on its own sample (pytorch/kineto
#: tb_plugin/test/result_check_file.txt, run resnet50_num_workers_4, worker0,
#: span 1: the file in ../shared/traces/legacy): overview, "Kernel" column of
#: the step breakdown (steps 5-10), and the first rows of its kernel table.
TB_OVERVIEW = {"gpu_utilization_pct": 70.27, "sm_efficiency_pct": 69.22, "achieved_occupancy_pct": 48.91}
TB_STEP_KERNEL_US = [99778, 99208, 99114, 99021, 98791, 98956]
TB_KERNELS = [  # calls, total µs, mean blocks per SM, mean est. achieved occupancy %
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>", 180, 86855, 45.33, 30.04),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>", 264, 59568, 4.33, 67.92),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>", 90, 43471, 8.18, 38.0),
]


def test_the_tensorboard_plugins_figures_on_its_own_sample(tmp_path, run_cli):
    """PyTorch 1.9 trace (capitalised categories, ``stream 7`` threads): the
    GPU is seen, and over the plugin's window (every step, the last one
    included) the plugin's own figures come out, with its advice (AMP)."""
    folder = SHARED_ROOT / "legacy" / "tb_resnet50_num_workers_4"
    if not folder.is_dir():
        pytest.skip("../shared is absent")
    code, _, err = run_cli("analyze", folder, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json",
                           "--include-last-step")
    assert code == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    (rank,) = result["ranks"]
    assert rank["has_gpu"] and rank["kernel_count"] == 8868
    tb = rank["tensorboard"]
    assert tb["steps"] == [5, 6, 7, 8, 9, 10]
    assert {k: round(tb[k], 2) for k in TB_OVERVIEW} == TB_OVERVIEW
    assert [round(s["kernel_us"]) for s in rank["step_breakdown"]] == TB_STEP_KERNEL_US
    for (name, calls, total, blocks, occupancy), k in zip(TB_KERNELS, rank["top_kernels"]):
        assert k["name"].startswith(name)
        assert (k["count"], k["total_us"], round(k["blocks_per_sm"], 2), round(k["occupancy_pct"], 2)) == \
            (calls, total, blocks, occupancy)
    finding = next(f for f in result["findings"] if f["id"] == "tensor-cores-unused")
    assert "68 % of kernel time is launched by Tensor-Core-eligible ops" in " ".join(finding["evidence"])
    assert "torch.autocast" in finding["fix"]
    html = (tmp_path / "r.html").read_text()
    assert "The TensorBoard profiler&#39;s overview, by its definitions over steps 5–10" in html
    assert ("TensorBoard GPU utilization 70.3 %, TensorBoard SM efficiency 69.2 % and TensorBoard achieved "
            "occupancy 48.9 % (estimated)") in html
