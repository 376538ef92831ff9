"""The TensorBoard profiler plugin's GPU figures by its own definitions
(``gpu_metrics_parser.py``, ``range_utils.merge_ranges_with_value``)."""
import numpy as np
import pytest

from kineto import ELEMENTWISE, TraceBuilder
from hta_report.analysis.tensorboard import merged_values
from hta_report.api import analyze


def test_overlapping_kernels_add_their_blocks_per_sm_capped_at_one():
    ts = np.array([0.0, 50.0, 300.0])
    end = np.array([100.0, 150.0, 400.0])
    s, e, v = merged_values(ts, end, np.array([0.5, 0.75, 2.0]))
    assert s.tolist() == [0, 50, 100, 300] and e.tolist() == [50, 100, 150, 400]
    assert v.tolist() == [0.5, 1.0, 0.75, 1.0]  # 0.5 + 0.75 capped at 1


def test_overview_is_over_every_step_with_idle_time_counted(tmp_path):
    b = TraceBuilder(rank=0)
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, 1000)
        b.kernel(ELEMENTWISE, t0 + 100, 400, sm=(0.5, 40.0))
        b.kernel(ELEMENTWISE, t0 + 600, 100, sm=(4.0, 80.0))
    b.write(tmp_path / "t.json")
    r = analyze(tmp_path, include_last_step=True).ranks[0]
    tb = r.tensorboard
    assert tb.steps == [1, 2, 3] and tb.window_us == pytest.approx(3000)
    assert tb.gpu_utilization_pct == pytest.approx(50.0)  # 500 of each 1,000 µs
    assert tb.sm_efficiency_pct == pytest.approx(100 * (400 * 0.5 + 100 * 1.0) / 1000)  # 30: idle included
    assert tb.achieved_occupancy_pct == pytest.approx((400 * 40 + 100 * 80) / 500)  # 48: of kernel time
    # the report's own figures are over the analyzed steps (2 and 3), by the same definitions
    assert r.occupancy.sm_efficiency_pct == pytest.approx(30.0)
