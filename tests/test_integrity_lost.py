"""Launches that lost their GPU records (twelfth field gathering (B), the
ViT traces recorded with CUDA activity only): GPU operations without a
launch that started before the lost launches cannot be their records."""
from kineto import ELEMENTWISE, TraceBuilder
from hta_report.api import analyze


def _trace(tail_ops_at: float) -> TraceBuilder:
    """20 GPU operations of 50 µs whose ids match no launch call, from
    ``tail_ops_at``; 30 launches with their kernels (100 µs each, from 10 ms);
    then 25 launches whose kernels were not recorded (from 14 ms)."""
    b = TraceBuilder(rank=0)
    for k in range(20):
        b._x("kernel", ELEMENTWISE, tail_ops_at + 60 * k, 50, pid=0, tid=7, device=0, stream=7,
             correlation=90_000 + k)
    for k in range(30):
        b.kernel(ELEMENTWISE, 10_000 + 110 * k, 100, launch_ts=9_990 + 110 * k)
    for k in range(25):
        b._launch("cudaLaunchKernel", 14_000 + 10 * k, 5, 1000)
    return b


def test_operations_before_the_lost_launches_do_not_offset_them(tmp_path):
    """The 20 unmatched operations end at 1.19 ms, long before the first lost
    launch (14 ms): all 25 launches lost their records (before: 25 - 20 = 5)."""
    _trace(tail_ops_at=0).write(tmp_path / "t.json")
    i = analyze(tmp_path).ranks[0].integrity
    assert (i.launches, i.launches_without_ops, i.unlinked_ops) == (55, 25, 20)


def test_operations_after_the_first_lost_launch_may_be_theirs(tmp_path):
    """The same 20 operations from 14.1 ms, after the first lost launch: they
    may be its records with their ids lost, so 25 - 20 = 5 are counted."""
    _trace(tail_ops_at=14_100).write(tmp_path / "t.json")
    i = analyze(tmp_path).ranks[0].integrity
    assert (i.launches, i.launches_without_ops) == (55, 5)


SGEMM = "ampere_sgemm_128x64_tn"


def _tail_trace() -> TraceBuilder:
    """30 fp32 SGEMMs of 100 µs, each launched 10 µs before it starts, from
    10 ms (the last ends at 13.29 ms), then 25 launches of 5 µs from 14 ms
    whose kernels were not recorded (the last call ends at 14.245 ms); an
    ``aten::mm`` op on the host around each recorded launch."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100", compute_major=8)
    for k in range(30):
        b.cpu_op("aten::mm", 9_985 + 110 * k, 20)
        b.kernel(SGEMM, 10_000 + 110 * k, 100, launch_ts=9_990 + 110 * k)
    for k in range(25):
        b._launch("cudaLaunchKernel", 14_000 + 10 * k, 5, 1000)
    return b


def test_a_lost_tail_leaves_the_record_before_it_to_the_rules(tmp_path):
    """The 25 lost launches are the trace's last: the GPU record up to them
    is whole, the 245 µs from the first lost launch to the trace's end are
    not recorded (not idle), and the rules judge the rest: the fp32 GEMMs
    (before: every rule left the rank out)."""
    _tail_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    r = result.ranks[0]
    i = r.integrity
    assert (i.launches, i.launches_without_ops, i.lost_tail, i.idle_unreliable) == (55, 25, True, False)
    assert (i.tail_unrecorded_us, r.idle_attribution.unrecorded_us) == (245.0, 245.0)
    check = next(c for c in result.checks if c.id == "tensor-cores-unused")
    assert check.status == "fired"
    window = next(f for f in result.findings if f.id == "trace-window")
    assert window.title.startswith("The profiler stopped before the GPU ran the last 25 of 55 launches")
    assert "torch.cuda.synchronize()" in window.fix


def test_lost_launches_among_recorded_ones_still_leave_the_rank_out(tmp_path):
    """The same 25 lost launches before the recorded ones: records lost in the
    middle of the trace, the GPU's idle time is not known."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100", compute_major=8)
    for k in range(25):
        b._launch("cudaLaunchKernel", 5_000 + 10 * k, 5, 1000)
    for k in range(30):
        b.kernel(SGEMM, 10_000 + 110 * k, 100, launch_ts=9_990 + 110 * k)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    i = result.ranks[0].integrity
    assert (i.launches_without_ops, i.lost_tail, i.idle_unreliable, i.tail_unrecorded_us) == (25, False, True, 0.0)
    assert next(c for c in result.checks if c.id == "tensor-cores-unused").status == "not checked"
