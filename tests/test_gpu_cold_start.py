"""Cold start on GPU ranks and kernels no precision setting reaches (issue 51,
docs/FIELD.md seventh gathering): the first cuDNN and cuBLAS calls load their
library inside the op (A10G: ``aten::cudnn_convolution`` 94 ms, ``aten::mm``
68 ms around kernels of µs), the profiler's own ``overhead`` records sit in
the window, and a hand-written CUDA GEMM was told to use autocast."""
from __future__ import annotations

from hta_report.analysis import warmup as warm
from hta_report.analysis.cpu_side import WORKER_LOADER_NEXT
from hta_report.api import analyze
from kineto import Sim, TraceBuilder

SGEMM = "ampere_sgemm_128x64_tn"
OWN = "gemm_gpu_o4_kernel(float const*, float const*, float*, int, int, int)"


def _write(tmp_path, name, b):
    d = tmp_path / name
    d.mkdir()
    b.write(d / "rank-0.json")
    return analyze(d)


def _gpu(tmp_path, name: str, first_host_us: float, calls: int = 6, overhead_us: float = 0.0):
    """An A100 trace without steps: ``calls`` aten::mm of one 50 µs float32
    GEMM each; the first spends ``first_host_us`` on the host."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
    sim = Sim(b)
    sim.t = 100.0
    if overhead_us:
        b.cpu_op("Unrecognized", 90.0, overhead_us, cat="overhead", tid=99)
    for i in range(calls):
        sim.op("aten::mm", [(SGEMM, 50.0)], host_us=first_host_us if i == 0 else 20.0)
        sim.idle(30.0)
    sim.synchronize()
    return _write(tmp_path, name, b)


def test_the_first_library_call_and_the_profiler_s_overhead_are_warm_up(tmp_path):
    r = _gpu(tmp_path, "cold", first_host_us=20000.0, overhead_us=3000.0)
    calls = {c.name: c for c in r.ranks[0].warmup.calls}
    assert calls["aten::mm"].count == 1 and calls["aten::mm"].total_us >= 20000.0
    assert calls["Unrecognized"].total_us == 3000.0
    top = r.findings[0]
    assert top.id == "trace-window" and "one-off warm-up" in top.title
    assert "the first call of a GPU library" in " ".join(top.evidence)


def test_a_warm_first_call_is_not_warm_up(tmp_path):
    """A trace recorded after warm-up steps: its first mm is as quick as the rest."""
    r = _gpu(tmp_path, "warm", first_host_us=20.0)
    assert not any(c.name == "aten::mm" for c in r.ranks[0].warmup.calls)
    assert warm.LIBRARY_LOAD_US == warm.WARMUP_CALL_US == 1000.0


def _own_kernel(tmp_path, name: str, inside_op: bool, gemm_us: float = 3000.0, other_us: float = 0.0):
    """Steps of a float32 GEMM named like one, launched by the user's extension
    (no op around its launch) or from aten::mm, plus a recorded op."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
    sim = Sim(b)
    sim.t = 100.0
    for s in range(1, 7):
        start = sim.t
        sim.cpu("aten::empty", 10.0)
        if other_us:
            sim.op("aten::add", [("void at::native::vectorized_elementwise_kernel<4>", other_us)])
        if inside_op:
            sim.op("aten::mm", [(OWN, gemm_us)])
        else:
            sim.launch(OWN, gemm_us)
        sim.synchronize()
        b.step(s, start, sim.t - start)
        sim.idle(5.0)
    return _write(tmp_path, name, b)


def test_a_hand_written_gemm_gets_no_precision_advice(tmp_path):
    """Autocast and TF32 change aten's ops, not the user's own kernel: no
    tensor-cores-unused there; the same kernel launched by aten::mm is a
    GEMM PyTorch dispatched, and gets it."""
    own = _own_kernel(tmp_path, "own", inside_op=False, other_us=20.0)  # aten::add's launch: ops are recorded
    assert own.ranks[0].tensor_cores.eligible_us_per_step == 0.0
    assert not any(f.id == "tensor-cores-unused" for f in own.findings)
    aten = _own_kernel(tmp_path, "aten", inside_op=True, other_us=20.0)
    # a trace where no launch runs inside an op cannot tell: the kernel stays a GEMM
    assert _own_kernel(tmp_path, "unrecorded", inside_op=False).ranks[0].tensor_cores.eligible_us_per_step > 0
    assert aten.ranks[0].tensor_cores.eligible_us_per_step > 0
    assert any(f.id == "tensor-cores-unused" for f in aten.findings)


def test_float32_gemms_under_one_percent_of_the_step_get_no_precision_advice(tmp_path):
    """The fix cannot save more than the float32 time off Tensor Cores."""
    r = _own_kernel(tmp_path, "tiny", inside_op=True, gemm_us=5.0, other_us=2000.0)
    share = 100 * r.ranks[0].tensor_cores.eligible_us_per_step / r.ranks[0].window_us
    assert 0 < share < 1.0
    assert not any(f.id == "tensor-cores-unused" for f in r.findings)


def test_idle_findings_on_a_mostly_cold_window_are_low(tmp_path):
    """A window that is 60 % a cold cuBLAS load, then six GEMMs with 2 ms of
    Python between them: the idle left is no steady step, so the idle
    findings are rated low, with the reason, and trace-window leads; on the
    same run warm (the load 20 µs) the idle finding keeps its rating."""
    def run(name: str, first_host_us: float):
        b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
        sim = Sim(b)
        sim.t = 100.0
        for i in range(6):
            sim.op("aten::mm", [(SGEMM, 50.0)], host_us=first_host_us if i == 0 else 20.0)
            sim.idle(2000.0)
        sim.synchronize()
        return _write(tmp_path, name, b)

    cold = run("cold-idle", 20000.0)
    assert cold.findings[0].id == "trace-window"
    idle = [f for f in cold.findings if f.id in ("low-gpu-utilization", "host-bound", "gpu-gaps")]
    assert idle and all(f.severity == "low" for f in idle)
    assert all(any("one-off warm-up" in e for e in f.evidence) for f in idle)
    warm_run = run("warm-idle", 20.0)
    assert any(f.id in ("low-gpu-utilization", "host-bound", "gpu-gaps") and f.severity != "low"
               for f in warm_run.findings)


def _loader(tmp_path, name: str, batches_ms):
    """An A100 trace: per batch, a worker DataLoader's ``__next__`` of the
    given ms, then a GEMM; no steps."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
    sim = Sim(b)
    sim.t = 100.0
    for ms in batches_ms:
        b.cpu_op(WORKER_LOADER_NEXT, sim.t, ms * 1000.0, cat="user_annotation")
        sim.t += ms * 1000.0 + 1.0
        sim.op("aten::mm", [(SGEMM, 500.0)], host_us=20.0)
        sim.idle(30.0)
    sim.synchronize()
    return _write(tmp_path, name, b)


def test_a_worker_loader_s_cold_first_batch_is_start_up(tmp_path):
    """The first ``__next__`` of a loader with workers starts them (ninth
    gathering: 780 ms of a ViT inference's 2.7 s window, one batch): warm-up,
    named; a first batch no slower than the rest is not."""
    r = _loader(tmp_path, "cold", [800.0])
    assert [c.name for c in r.ranks[0].warmup.calls] == [WORKER_LOADER_NEXT]
    assert r.ranks[0].warmup.us_per_step >= 800_000.0
    many = _loader(tmp_path, "cold-then-steady", [300.0, 20.0, 22.0, 21.0])
    assert [c.name for c in many.ranks[0].warmup.calls] == [WORKER_LOADER_NEXT]
    steady = _loader(tmp_path, "steady", [21.0, 20.0, 22.0, 21.0])
    assert all(c.name != WORKER_LOADER_NEXT for c in steady.ranks[0].warmup.calls)


def test_the_cold_batch_thresholds_are_the_warm_up_s_and_the_loader_share_leaves_it_out(tmp_path):
    """``cpu_side`` keeps its own copy of the warm-up thresholds (an import
    would be circular): they must agree; and the DataLoader's share is of the
    steady batches only."""
    from hta_report.analysis import cpu_side
    assert (cpu_side.COLD_BATCH_MIN_US, cpu_side.COLD_BATCH_RATIO) == (warm.WARMUP_CALL_US, warm.COLD_RATIO)
    r = _loader(tmp_path, "share", [300.0, 20.0, 22.0, 21.0])
    assert 60_000.0 <= r.ranks[0].cpu.dataloader_us_per_step <= 64_000.0  # the three warm batches, 63 ms


def test_a_slow_first_occupancy_query_is_warm_up(tmp_path):
    """Triton and custom kernels ask for their occupancy before the launch;
    under CUDA's lazy loading the first query of a kernel loads its module
    (7.08 ms on an L40 field run, later queries 0.5 µs): one-off warm-up. The
    later 1 µs queries are not."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
    sim = Sim(b)
    sim.t = 100.0
    for i in range(6):
        b.runtime("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", sim.t, 7000.0 if i == 0 else 1.0)
        sim.t += 7001.0 if i == 0 else 2.0
        sim.op("aten::mm", [(SGEMM, 50.0)], host_us=20.0)
        sim.idle(30.0)
    sim.synchronize()
    r = _write(tmp_path, "occupancy", b)
    calls = {c.name: c for c in r.ranks[0].warmup.calls}
    occ = calls["cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"]
    assert occ.count == 1 and occ.total_us == 7000.0
