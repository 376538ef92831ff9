"""A Python loop over elements on a GPU rank, wherever it sits in the traced
window (issue 51, the seventh field reading: ``gpupuzzlers-gp100-element-loop-on-host``).

Without ``ProfilerStep`` the stretches before the first and after the last GPU
operation are the profiler's start and stop ("edge", claimed by no finding);
a loop over elements the host runs there is the workload's work with the GPU
idle: host ops, and ``per-sample-ops``' to claim."""
from hta_report.api import analyze
from kineto import ELEMENTWISE, Sim, TraceBuilder

LOOP_N = 200  # iterations: 16 or more make a loop (host_loops.MIN_ITERATIONS)


def _loop(sim: Sim, n: int = LOOP_N) -> float:
    """``for i in range(n): total += x[i]`` on a CPU tensor: a select and an
    add_ per element, 10 µs of Python around them; returns the loop's start."""
    start = sim.t
    for _ in range(n):
        sim.cpu("aten::select", 8.0)
        sim.cpu("aten::add_", 6.0)
        sim.idle(10.0)
    return start


def _analyze(tmp_path, b: TraceBuilder):
    b.write(tmp_path / "rank-0.json")
    return analyze(tmp_path)


def _kernels(sim: Sim, n: int = 4) -> None:
    for _ in range(n):
        sim.op("aten::add", [(ELEMENTWISE, 50.0)], host_us=10.0)


def test_a_loop_after_the_last_gpu_operation_is_host_work_not_the_edge(tmp_path):
    """x.cpu() (one DtoH copy, the only GPU operation), then a 200-element
    Python loop on the CPU tensor: 4.8 ms of host work with the GPU idle,
    after the last GPU operation (the field run's shape)."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    sim.idle(200.0)
    sim.copy("DtoH", 4096, pinned=False, non_blocking=False)
    start = _loop(sim)
    loop_us = sim.t - start
    r = _analyze(tmp_path, b)
    a = r.ranks[0].idle_attribution
    assert a.host_loop_us >= 0.95 * loop_us - 30  # the loop's stretch, from its first select
    assert a.host_ops_us >= a.host_loop_us
    assert a.edge_us < 0.05 * loop_us  # only the µs between the copy and the loop's first op
    first = r.findings[0]
    assert first.id == "per-sample-ops"
    assert "x.sum()" in first.fix
    assert first.rank_gains[0].sources == {"idle:host_ops": first.rank_gains[0].gain_us}
    # one loop, one finding: host-bound is left nothing of the loop's idle
    assert "host-bound" not in [f.id for f in r.findings]
    assert sum(g.gain_pct for f in r.findings for g in f.rank_gains) <= 100.0 + 1e-6


def test_a_loop_before_the_first_gpu_operation_is_host_work_too(tmp_path):
    """The inputs filled element by element before the first launch."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    sim.idle(20.0)
    start = _loop(sim)
    loop_us = sim.t - start
    _kernels(sim)
    sim.synchronize()
    r = _analyze(tmp_path, b)
    a = r.ranks[0].idle_attribution
    assert a.host_loop_us >= 0.95 * loop_us - 30
    assert a.edge_us < 0.05 * loop_us
    assert r.findings[0].id == "per-sample-ops"


def test_one_off_host_ops_at_the_profilers_stop_stay_the_edge(tmp_path):
    """No loop: after the last GPU operation the host runs one 3 ms op (a
    result printed, the profiler stopping): no step of the workload, so the
    window's edge, and no host finding."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    _kernels(sim)
    sim.synchronize()
    sim.idle(500.0)
    sim.cpu("aten::format", 3000.0)
    sim.idle(200.0)
    sim.cpu("aten::detach", 5.0)
    r = _analyze(tmp_path, b)
    a = r.ranks[0].idle_attribution
    assert a.edge_us >= 3500 and a.host_ops_us == 0 and a.host_loop_us == 0
    ids = [f.id for f in r.findings]
    assert "host-bound" not in ids and "per-sample-ops" not in ids


def test_a_short_run_of_indexing_ops_is_no_loop_and_stays_the_edge(tmp_path):
    """Eight selects after the last GPU operation: under 16 iterations, not a loop."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    _kernels(sim)
    sim.synchronize()
    _loop(sim, n=8)
    r = _analyze(tmp_path, b)
    a = r.ranks[0].idle_attribution
    assert a.host_loop_us == 0 and a.host_ops_us == 0 and a.edge_us > 0
    assert "per-sample-ops" not in [f.id for f in r.findings]


def test_a_loop_that_launches_the_kernels_is_launch_bounds_alone(tmp_path):
    """A GPU loop over elements (a select and a 2 µs add kernel per element)
    that makes the rank launch-bound: launch-bound names the loop and its
    vectorized fix; per-sample-ops does not name it again."""
    from test_field_round3 import element_loop
    from test_rules import STEP, run
    b = TraceBuilder(rank=0)
    for i in range(3):
        b.step(i + 1, i * STEP, STEP)
        element_loop(b, i * STEP, n=int(STEP // 25) - 2)
    r = run(tmp_path, b)
    ids = [f.id for f in r.findings]
    assert "launch-bound" in ids and "per-sample-ops" not in ids


def test_back_to_back_loops_over_the_same_elements_are_separate_loops(tmp_path):
    """Three functions loop over one tensor's elements back to back (the
    GPUPuzzlers d2h-sync script): the first reads each element (.item(), a
    synchronization per element), the second adds each on the GPU, the third
    runs on a CPU copy after one .cpu(). Only the first is a read per element:
    the no-sync what-if vectorizes it, not the other two."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    sim.idle(20.0)
    for _ in range(LOOP_N):  # first_sum: total += x[i].item()
        sim.op("aten::select", [], host_us=6.0)
        sim.item()
        sim.idle(10.0)
    for _ in range(LOOP_N):  # second_sum: total += x[i] on the GPU
        sim.op("aten::select", [], host_us=6.0)
        sim.op("aten::add", [(ELEMENTWISE, 2.0)], host_us=10.0)
        sim.idle(10.0)
    sim.copy("DtoH", 4096, pinned=False, non_blocking=False)
    _loop(sim)  # third_sum: on the host
    r = _analyze(tmp_path, b)
    f = next(f for f in r.findings if f.id == "sync-in-step")
    w = f.whatif
    assert w is not None
    first_loop_us = LOOP_N * 16.0  # at least the Python and the select of each of the first loop's iterations
    saved = w.step_us_before - w.step_us_after
    # the saving is the first loop's, not the whole window's (it saved 99 % before)
    assert saved < 0.6 * w.step_us_before, (saved, w.step_us_before)
    assert saved > first_loop_us * 0.5
    # and its bound (the title's share) is not the later loops' idle either
    assert f.bound_pct < 60.0, f.bound_pct


def test_a_loop_reads_per_element_only_with_a_read_every_other_iteration_or_more():
    import pandas as pd

    from hta_report.analysis.host_loops import reading
    found = pd.DataFrame({"iterations": [4096, 4097, 100], "reads": [4095, 1, 50]})
    assert reading(found).tolist() == [True, False, True]


def test_the_last_iteration_ends_where_its_own_ops_end(tmp_path):
    """Iterations of two indexing ops whose segments alternate 3 and 2 ops
    (select, div, copy_ | select, sub): the median segment (3) made the
    last iteration run into the next op, a 5 ms linear after the loop, which
    the loop's what-if then removed (a fix-bench pair moved from +0.3 % to
    -12.9 %). The last segment is as long as the one a period before it."""
    b = TraceBuilder(rank=0, gpu_name=None)
    t = 100.0
    for _ in range(200):
        for op in ("aten::select", "aten::div", "aten::copy_", "aten::select", "aten::sub"):
            b.cpu_op(op, t, 8.0)
            t += 10.0
    loop_end = t
    b.cpu_op("aten::linear", t + 5.0, 5000.0)
    b.write(tmp_path / "rank-0.json")
    r = analyze(tmp_path)
    p = r.ranks[0].patterns
    assert p.loops_per_step == 1
    assert p.loop_us_per_step <= loop_end - 100.0 + 1.0, p.loop_us_per_step
