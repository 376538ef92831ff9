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
