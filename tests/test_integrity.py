"""What a trace shows of its own gaps is said beside the GPU figures, and no
finding advises on time the trace did not record (issue 28, item 9)."""
import pytest

from kineto import ELEMENTWISE, TraceBuilder
from hta_report.api import analyze
from hta_report.render import view


def _check(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def test_work_before_the_first_recorded_op_is_not_recorded_not_idle(tmp_path):
    """The first kernel starts 5 ms after its launch returned, nothing on the
    GPU before it: the GPU ran work the trace lacks (a graph replay's trace)."""
    b = TraceBuilder(rank=0)
    b.kernel(ELEMENTWISE, 5000, 200, launch_ts=0, launch_dur=5)
    for i in range(1, 20):
        b.kernel(ELEMENTWISE, 5000 + i * 210, 200, launch_ts=10 + i * 10, launch_dur=5)
    b.cpu_op("aten::add", 500, 3000)  # host work during the stretch
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    r = result.ranks[0]
    assert r.integrity.unrecorded_us == pytest.approx(4995)
    a = r.idle_attribution
    # not "host ops": only the 5 µs of the launch call itself are host time, at the window's
    # host-only edge (no ProfilerStep: before the first GPU operation)
    assert a.unrecorded_us == pytest.approx(4995) and a.host_ops_us == 0 and a.edge_us == pytest.approx(5)
    # findings claim only the idle that was idle: the 10 µs gaps between launches and the launch call
    claimed = [p for f in result.findings for g in f.rank_gains for p in g.sources]
    assert "idle:unrecorded" not in claimed
    assert sum(g.gain_us for f in result.findings for g in f.rank_gains) <= a.idle_us - a.unrecorded_us + 1e-6
    (note,) = view.integrity_notes(result)
    assert note.startswith("rank 0: the first GPU operation starts 5.00 ms after its launch call returned")
    assert view.IdleCause(label="not recorded by the trace", pct=view.fmt.pct(100 * 4995 / r.window_us)) in \
        view.headline(result).idle_causes


def test_work_queued_before_the_profiler_started_is_not_recorded_not_idle(tmp_path):
    """One recorded step [0, 8000] µs, as a window opened on a running loop
    records it: the host sits in a cudaStreamSynchronize from t=10 to 4505,
    and the first recorded kernel (launched before the profiler started: no
    launch call) runs at t=4000; then a 3 ms kernel launched in the trace and
    waited for. The GPU was running work launched before the trace, which it
    lacks, until t=4000. Not host-bound: the host was waiting for the GPU."""
    b = TraceBuilder(rank=0)
    b.cpu_op("aten::linear", 0, 5)  # the trace's first host event
    b.kernel(ELEMENTWISE, 4000, 500)
    b.events = [e for e in b.events if not (e.get("cat") == "cuda_runtime" or e.get("ph") in ("s", "f"))]
    b.step(1, 0, 8000)
    b.runtime("cudaStreamSynchronize", 10, 4495)
    b.cpu_op("aten::mm", 4510, 20)
    b.kernel(ELEMENTWISE, 4630, 3000, launch_ts=4515, launch_dur=5)
    b.runtime("cudaStreamSynchronize", 4525, 3110)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    r = result.ranks[0]
    i = r.integrity
    # from the trace's first host event (t=0) to the first kernel (t=4000)
    assert i.unrecorded_us == pytest.approx(4000) and i.unrecorded_before_trace
    assert r.idle_attribution.unrecorded_us == pytest.approx(4000)
    assert any("launched before the profiler started, starts 4.00 ms into the trace" in n
               for n in view.integrity_notes(result))
    assert _check(result, "host-bound").status != "fired"


def test_graph_replays_without_their_kernels_are_not_advised_on(tmp_path):
    b = TraceBuilder(rank=0)
    for step in range(4):
        t0 = step * 1000
        b.step(step + 1, t0, 1000)
        b.kernel(ELEMENTWISE, t0 + 100, 50, api="cudaGraphLaunch")  # a replay whose kernel was recorded
        b._launch("cudaGraphLaunch", t0 + 300, 5, 1000)  # replays whose kernels were dropped
        b._launch("cudaGraphLaunch", t0 + 500, 5, 1000)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path, include_last_step=True)
    i = result.ranks[0].integrity
    assert (i.graph_launches, i.graph_launches_without_ops, i.idle_unreliable) == (12, 8, True)
    for rule_id in ("low-gpu-utilization", "gpu-gaps", "host-bound"):
        c = _check(result, rule_id)
        assert c.status == "not checked"
        assert c.detail == "rank 0 not checked (its GPU idle time is not known: the trace dropped graph replays)"
    assert not result.findings or all(not any(p.startswith("idle:") for g in f.rank_gains for p in g.sources)
                                      for f in result.findings)
    assert "looks healthy" not in view.no_findings(result)
    (note,) = view.integrity_notes(result)
    assert "8 of 12 graph launches have no GPU operation in the trace" in note


def test_kernels_without_a_launch_and_stream_sync_rows_are_counted(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    b.kernel(ELEMENTWISE, 100, 100)
    b._x("kernel", ELEMENTWISE, 400, 100, pid=0, tid=7, device=0, stream=7, correlation=99999)  # no launch
    sync = b._x("cuda_sync", "Stream Sync", 300, 400, pid=0, tid=1000007, device=0, stream=7, correlation=-1)
    b.write(tmp_path / "t.json")
    r = analyze(tmp_path).ranks[0]
    i = r.integrity
    assert (i.unlinked_ops, i.unlinked_us, i.sync_rows, i.idle_unreliable) == (1, 100.0, 1, False)
    # the Stream Sync row is a host wait drawn on the GPU's row: not GPU work
    assert r.idle_attribution.busy_us == pytest.approx(200)
    assert sync["cat"] == "cuda_sync" and len(i.notes) == 2


def test_kernels_of_a_graph_replay_are_not_launch_bound(tmp_path):
    """Each step one cudaGraphLaunch replays 200 kernels of 3 µs, 2 µs apart (a decode step captured
    as a CUDA graph, as a field L40 run: 1,389 kernels from one graph launch and 6 direct
    launches): the short gaps are the graph's own, and a CUDA graph is already the fix, so
    launch-bound does not fire and says why; the same kernels launched one by one do fire it."""
    from hta_report.api import analyze
    from kineto import ELEMENTWISE, TraceBuilder

    def build(graph: bool) -> TraceBuilder:
        b = TraceBuilder(rank=0)
        t = 100.0
        for s in range(1, 7):
            b.step(s, t, 1200.0)
            if graph:
                corr = b._launch("cudaGraphLaunch", t + 5, 8.0, 1000)
                for k in range(200):
                    ts = t + 20 + 5 * k
                    b._x("kernel", ELEMENTWISE, ts, 3.0, pid=0, tid=7, device=0, stream=7, correlation=corr,
                         **{"External id": corr})
            else:
                for k in range(200):
                    b.kernel(ELEMENTWISE, t + 20 + 5 * k, 3.0, launch_ts=t + 10 + 5 * k, launch_dur=4.0)
            b.runtime("cudaStreamSynchronize", t + 30, 1000.0)
            t += 1205.0
        return b
    graph_dir, eager_dir = tmp_path / "graph", tmp_path / "eager"
    graph_dir.mkdir(), eager_dir.mkdir()
    build(True).write(graph_dir / "rank-0.json")
    build(False).write(eager_dir / "rank-0.json")
    g = analyze(graph_dir)
    check = next(c for c in g.checks if c.id == "launch-bound")
    assert not [f for f in g.findings if f.id == "launch-bound"]
    assert "CUDA graph's replay" in check.detail, check.detail
    e = analyze(eager_dir)
    assert [f for f in e.findings if f.id == "launch-bound"]
