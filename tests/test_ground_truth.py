"""Metrics on builder-made traces whose values are known exactly."""
import pytest

from hta_report.analysis import analyze
from kineto import TraceBuilder, simple_gpu_trace


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


def test_first_advice(simple):
    ids = [f.id for f in simple.findings]
    assert set(ids) == {"gpu-idle", "dataloader-bound", "pageable-memcpy", "sync-in-step"}
    assert ids[0] == "gpu-idle"  # 46 % idle is the largest share at stake
    dl = next(f for f in simple.findings if f.id == "dataloader-bound")
    assert "10 %" in dl.title and any("0.10 ms" in e for e in dl.evidence)
    assert "num_workers=" in dl.fix


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
    b = TraceBuilder(rank=0)
    for i in range(4):
        t0 = i * 1000
        b.step(i + 1, t0, 1000)
        for j in range(10):  # back-to-back kernels keep the GPU busy
            b.kernel("sgemm", t0 + j * 100, 100, launch_ts=t0 + j * 100 - 50)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    assert result.ranks[0].temporal.idle_pct < 1
    assert result.findings == []
