"""Metrics on builder-made traces whose values are known exactly."""
import pytest


from hta_report.api import analyze
from hta_report.rules import RULES
from kineto import TC_GEMM, TraceBuilder, simple_gpu_trace


@pytest.fixture(scope="module")
def simple(tmp_path_factory):
    d = tmp_path_factory.mktemp("simple")
    simple_gpu_trace(steps=4).write(d / "trace.json.gz")
    return analyze(d)


def test_steps(simple):
    s = simple.ranks[0].steps
    # 4 steps written; HTA drops the last; the first is warm-up
    assert [x.number for x in s.steps] == [1, 2, 3]
    assert [x.warmup for x in s.steps] == [True, False, False]
    assert s.mean_us == 1000 and s.p90_us == 1000 and s.max_us == 1000


def test_temporal(simple):
    t = simple.ranks[0].temporal
    # GPU span: first memcpy at 200 to third kernel end at 2700 = 2500 µs;
    # kernels 3 x 400 = 1200 compute, memcpy 3 x 50 = 150 non-compute
    assert (t.total_us, t.compute_us, t.non_compute_us, t.idle_us) == (2500, 1200, 150, 1150)
    assert t.idle_pct == pytest.approx(46.0)


def test_memcpy(simple):
    m = simple.ranks[0].memcpy
    (htod,) = m.directions
    assert (htod.direction, htod.count, htod.total_bytes, htod.pageable_count, htod.pinned_count) == ("HtoD", 3, 3_000_000, 3, 0)
    assert htod.bandwidth_gbps == pytest.approx(20.0)  # 1 MB / 50 µs
    assert m.exposed_us == 150 and m.overlapped_us == 0


def test_cpu_side(simple):
    c = simple.ranks[0].cpu
    assert c.steps_used == 2
    assert c.dataloader_us_per_step == 100 and c.dataloader_pct == pytest.approx(10.0)
    assert c.dataloader_in_main_process
    assert c.sync_calls_per_step == 1 and c.sync_us_per_step == 20
    assert [(e.name, e.count) for e in c.sync_events] == [("cudaStreamSynchronize", 2)]


def test_idle_attribution(simple):
    # analyzed steps 2 and 3 ([1000, 3000] µs): per step 400 µs kernel, 50 µs copy, 550 µs idle
    a = simple.ranks[0].idle_attribution
    assert (a.kernel_busy_us, a.busy_us, a.idle_us) == (400, 450, 550)
    # idle while in the DataLoader (100 µs); in gaps of 100 µs or more while the host runs
    # aten::linear (60), the copy's launch call (5) and cudaStreamSynchronize (20: the GPU was idle
    # before it began); in the 50 µs gap before the kernel, during its launch call (5)
    assert (a.dataloader_us, a.host_ops_us, a.launch_us, a.sync_us, a.pageable_copy_us) == (100, 85, 5, 0, 0)
    assert a.unattributed_us == 360
    assert [(g.duration_us, g.cause) for g in a.gaps[:3]] == [(500, "unattributed"), (300, "unattributed"),
                                                            (200, "dataloader")]
    assert simple.ranks[0].memcpy.pageable_exposed_us_per_step == 50


def test_advice_on_simple_trace(simple):
    bounds = {f.id: round(f.bound_pct, 6) for f in simple.findings}
    gains = {f.id: round(f.gain_pct, 6) for f in simple.findings}
    # what each rule measured: C12: 400 µs of "gemm" kernels, none on Tensor Cores (H100); C6: 550 µs
    # idle minus the 100 µs the DataLoader finding claims and the 85 µs host-bound (C26) claims; C3:
    # the 50 µs exposed pageable copy; C0: 2 analyzed steps (no gain). They add up to the 1000 µs step.
    assert bounds == {"tensor-cores-unused": 40.0, "low-gpu-utilization": 36.5, "dataloader-bound": 10.0,
                      "host-bound": 8.5, "pageable-memcpy": 5.0, "trace-window": 0.0}
    assert sum(bounds.values()) == pytest.approx(100.0)
    # the gains of the fixes the replay predicts are their predictions: Tensor Cores and pinned copies
    # save nothing on a step the host sets; the DataLoader's workers save its 10 %
    assert gains == dict(bounds, **{"tensor-cores-unused": 0.0, "pageable-memcpy": 0.0})
    # severity follows what the fix is expected to save: the host sets this step (the GPU idles 55 %
    # of it and nothing waits for the GPU), so the replay finds Tensor Cores and pinned copies alone
    # save nothing: low, whatever their bound, and listed after the medium and high ones, and after the
    # window finding, which leads the low findings whose fixes save under 1 % of the step
    assert [f.id for f in simple.findings] == ["low-gpu-utilization", "dataloader-bound", "host-bound",
                                               "trace-window", "tensor-cores-unused", "pageable-memcpy"]
    tc = next(f for f in simple.findings if f.id == "tensor-cores-unused")
    assert tc.severity == "low" and tc.whatif.step_us_after == pytest.approx(tc.whatif.step_us_before)
    dl = next(f for f in simple.findings if f.id == "dataloader-bound")
    assert dl.severity == "medium" and dl.gain_ms_per_step == pytest.approx(0.1)
    assert "10 %" in dl.title and "num_workers=" in dl.fix
    status = {c.id: c.status for c in simple.checks}
    assert status["sync-in-step"] == "fine" and status["step-time-outliers"] == "not checked"
    # the DataLoader runs in the main process, but dataloader-bound counts that time already;
    # the gaps are the same idle as low-gpu-utilization's: one symptom finding
    assert status["dataloader-main-process"] == "covered" and status["gpu-gaps"] == "covered"
    assert len(simple.checks) == len(RULES)


def test_comm_exposed_and_overlap(tmp_path):
    b = TraceBuilder(rank=0)
    for i in range(3):
        t0 = i * 1000
        b.step(i + 1, t0, 1000)
        b.kernel("sgemm", t0 + 100, 300, stream=7)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 300, 400, stream=20)
    b.write(tmp_path / "t.json")
    r = analyze(tmp_path, include_last_step=True).ranks[0]
    # per step: comm 300..700, compute 100..400 -> 100 µs overlapped, 300 exposed
    assert r.comm.kernel_count == 3
    assert r.comm.exposed_us == 900
    assert r.comm.overlap_pct == pytest.approx(25.0)
    assert "COMMUNICATION" in {k.kernel_type for k in r.kernel_types}


def test_healthy_trace_has_no_findings(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    for i in range(5):  # 5 steps: the last is dropped and the first is warm-up, 3 analyzed
        t0 = i * 1000
        b.step(i + 1, t0, 1000)
        for j in range(10):  # back-to-back Tensor Core kernels keep the GPU busy
            b.kernel(TC_GEMM, t0 + j * 100, 100, launch_ts=t0 + j * 100 - 50)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    assert result.ranks[0].temporal.idle_pct < 1
    assert result.findings == []
    assert {c.status for c in result.checks} <= {"fine", "not checked"}
