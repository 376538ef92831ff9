"""Readings the third held-out field gathering found wrong (docs/FIELD.md), each
checked on a built trace or on the rule's inputs: devices known by compute
capability where the name is a board's, the link's rate from pinned copies to
the host, a model run on the CPU shown by its memory alone, launch-bound whose
launches are a Python loop's, and a symptom that does not take time a cause
names."""
import pytest

from hta_report.analysis.kernels import TENSOR_CORE_SPEEDUP, by_device_name, capability_name, tensor_core_speedup
from hta_report.analysis.pinned_copy import PCIE_GENERATION, pinned_htod_gbps
from hta_report.model import IdleAttribution, RankResult
from hta_report.rules.claims import Ledger
from hta_report.rules.idle import unexplained_idle_us, unexplained_pools
from hta_report.rules.launch import LOOP_FIX
from test_pinned_copy import MIB, _events
from test_rules import STEP, finding, run, status
from kineto import TraceBuilder


# ---------------------------------------------------------------- devices by compute capability
@pytest.mark.parametrize("names, speedup", [
    (["NVIDIA PG509-210"] + capability_name(8, 0), 16.0),  # an A100 board: GA100
    (["NVIDIA RTX A5000"] + capability_name(8, 6), 2.0),  # GA102: the class's slowest board
    (["NVIDIA A40"] + capability_name(8, 6), 4.0),  # a name the table knows wins over the class
    (["Quadro RTX 8000"] + capability_name(7, 5), 4.0),
    (["Quadro GP100"] + capability_name(6, 0), None),  # Pascal: no Tensor Cores
    (["Some GPU"], None),  # neither name nor capability
])
def test_tensor_core_speedup_falls_back_on_the_compute_capability(names, speedup):
    assert tensor_core_speedup(names) == speedup


def test_capability_name_is_empty_without_an_nvidia_capability():
    assert capability_name(None, None) == []  # AMD, or no deviceProperties
    assert capability_name(9, None) == ["compute capability 9.0"]


@pytest.mark.parametrize("names, gen", [
    (["NVIDIA PG509-210"] + capability_name(8, 0), 4),
    (["NVIDIA RTX A5000"] + capability_name(8, 6), 4),
    (["Quadro GP100"] + capability_name(6, 0), 3),
    (["NVIDIA GH200 480GB"] + capability_name(9, 0), None),  # NVLink-C2C: known, and not PCIe
    (["NVIDIA H100 PCIe"] + capability_name(9, 0), 5),
])
def test_pcie_generation_falls_back_on_the_compute_capability(names, gen):
    assert by_device_name(PCIE_GENERATION, names) == gen


def test_a_name_known_to_have_none_is_not_overridden_by_a_later_name():
    assert by_device_name(PCIE_GENERATION, ["NVIDIA GH200", "NVIDIA H100"]) is None
    assert by_device_name(TENSOR_CORE_SPEEDUP, ["unknown board", "NVIDIA H100"]) == 14.8


def test_pinned_copies_to_the_host_measure_the_link_when_none_go_to_the_device(tmp_path):
    b = TraceBuilder(rank=0, gpu_name="NVIDIA PG509-210")
    b.step(1, 0, 100_000)
    t = 100.0
    for _ in range(3):
        dur = 8 * MIB / (12.5 * 1e3)  # 12.5 GB/s
        b.memcpy("DtoH", "Pinned", t, dur, 8 * MIB)
        t += dur + 100
    b.memcpy("HtoD", "Pageable", t, 8 * MIB / 3e3, 8 * MIB)  # pageable: never a sample
    rate, source = pinned_htod_gbps(_events(tmp_path, b), ["NVIDIA PG509-210"])
    assert rate == pytest.approx(12.5, rel=1e-3)
    assert "device-to-host" in source


# ---------------------------------------------------------------- a model on the CPU, seen by its memory
def cpu_model(peak_bytes: int) -> TraceBuilder:
    b = TraceBuilder(rank=0, gpu_name="Tesla V100-SXM2-16GB", compute_major=7)
    for i in range(3):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.memory(t + 10, peak_bytes, peak_bytes, nbytes=peak_bytes, device_type=0, device_id=-1)
        b.cpu_op("aten::linear", t + 20, STEP - 200)  # device-neutral ops: no oneDNN name
        b.cpu_op("aten::addmm", t + 30, STEP - 300)
        b.memory(t + STEP - 50, 0, peak_bytes, nbytes=-peak_bytes, device_type=0, device_id=-1)
    return b


def test_cpu_only_memory_on_a_gpu_machine_is_gpu_unused(tmp_path):
    r = run(tmp_path, cpu_model(256 * MIB))
    f = finding(r, "gpu-unused")
    assert f is not None and "every allocation is on the CPU" in " ".join(f.evidence)


def test_a_little_host_memory_alone_is_no_evidence(tmp_path):
    r = run(tmp_path, cpu_model(4 * MIB))
    assert status(r, "gpu-unused") == "fine"


# ---------------------------------------------------------------- launch-bound from a Python loop
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


def element_loop(b: TraceBuilder, t: float, n: int = 200) -> None:
    """``for i in range(n): total += x[i]`` on a CUDA tensor: per element a
    select and an add whose 2 µs kernel waits behind 20 µs of host work."""
    for k in range(n):
        s = t + 10 + 25 * k
        b.cpu_op("aten::select", s, 4)
        b.cpu_op("aten::add_", s + 5, 18)
        b.kernel(ADD, s + 20, 2.0, launch_ts=s + 8, launch_dur=8)


def test_launch_bound_names_the_loop_and_vectorizing_it(tmp_path):
    b = TraceBuilder(rank=0)
    for i in range(3):
        b.step(i + 1, i * STEP, STEP)
        element_loop(b, i * STEP, n=int(STEP // 25) - 2)
    r = run(tmp_path, b)
    f = finding(r, "launch-bound")
    assert f is not None
    assert f.fix == LOOP_FIX
    assert "Python loops over elements" in " ".join(f.evidence)
    assert f.whatif is None  # the CUDA-graph replay is not the vectorizing fix's prediction


def test_launch_bound_without_a_loop_keeps_the_cuda_graph_fix(tmp_path):
    from test_rules import launch_trace
    r = run(tmp_path, launch_trace(kernel_us=3))
    f = finding(r, "launch-bound")
    assert f is not None and f.fix != LOOP_FIX and "CUDA graph" in f.fix


# ---------------------------------------------------------------- the symptom and time a cause names
def test_idle_a_cause_named_is_not_idle_without_a_specific_cause():
    a = IdleAttribution(idle_us=900.0, launch_us=800.0, unattributed_us=100.0)
    r = RankResult(rank=0, file="r", has_gpu=True, window_us=1000.0, steps_used=4, idle_attribution=a)
    ledger = Ledger()
    # launch-bound claimed 300 µs of its 800 (its prediction released the rest)
    ledger.commit("launch-bound", [0], {0: {"idle:launch": 300.0}})
    assert "idle:launch" not in unexplained_pools(r, ledger)
    assert unexplained_idle_us(r, ledger) == pytest.approx(100.0)  # the idle with no profiled host activity


# ---------------------------------------------------------------- launches that start late on an idle GPU
GEMM = "ampere_sgemm_128x64_nn"


def late_start_trace(delay_us: float) -> TraceBuilder:
    """Per step: three kernels, each launched on an idle GPU, starting
    ``delay_us`` after its launch call returned, the host waiting in
    ``cudaStreamSynchronize`` after each."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA GeForce RTX 4090", compute_major=8)
    for i in range(3):
        t = i * 10_000.0
        b.step(i + 1, t, 10_000.0)
        for k in range(3):
            s = t + 100 + 3000 * k
            b.kernel(GEMM, s + 5 + delay_us, 50.0, launch_ts=s, launch_dur=5)
            b.runtime("cudaStreamSynchronize", s + 6, delay_us + 60)
    return b


def test_repeated_late_starts_on_an_idle_gpu_are_named_as_a_wait_the_trace_does_not_show(tmp_path):
    r = run(tmp_path, late_start_trace(2000.0))
    rank = r.ranks[0]
    assert rank.idle_attribution.late_start_us == pytest.approx(3 * 2000.0, rel=0.05)
    f = finding(r, "gpu-idle")
    assert rank.idle_attribution.late_starts == 9
    assert f is not None and "does not show" in f.title
    assert "nvidia-smi" in f.fix


def test_short_launch_delays_are_not_late_starts(tmp_path):
    r = run(tmp_path, late_start_trace(200.0))
    assert r.ranks[0].idle_attribution.late_start_us == 0.0
    assert not any("does not show" in f.title for f in r.findings)


def test_one_late_start_is_a_one_off_not_a_pattern(tmp_path):
    b = late_start_trace(200.0)
    b.kernel(GEMM, 9_500.0, 50.0, launch_ts=7_000.0, launch_dur=5)  # one start 2.5 ms late, GPU idle since 6.4 ms
    r = run(tmp_path, b)
    assert r.ranks[0].idle_attribution.late_starts == 1
    assert not any("does not show" in f.title for f in r.findings)
