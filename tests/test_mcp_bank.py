"""The question bank's json references (bench/questions/reference.py) on a
trace written here: idle per step and its split, the sync line, the optimizer."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "questions"))
R = pytest.importorskip("reference")


def _doc(launch_at: float = 890.0):
    ev = []
    for n, t0 in ((1, 0.0), (2, 1000.0), (3, 2000.0), (4, 3000.0)):  # steps 2-3 analyzed: 1 warm-up, 4 dropped
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t0, "dur": 1000.0, "tid": 1})
        ev.append({"ph": "X", "cat": "python_function", "name": "train.py(12): step", "ts": t0, "dur": 990.0, "tid": 1})
        ev.append({"ph": "X", "cat": "python_function", "name": "torch/nn/x.py(3): f", "ts": t0 + 100, "dur": 300.0,
                   "tid": 1})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": t0 + 100, "dur": 500.0, "args": {"correlation": n}})
        # the host waits in a sync from 300 to 600; the GPU runs dry at 600, until the next launch at 900
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t0 + 300, "dur": 301.0,
                   "tid": 1})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0 + launch_at, "dur": 5.0, "tid": 1,
                   "args": {"correlation": 100 + n}})
        ev.append({"ph": "X", "cat": "kernel", "name": "relu", "ts": t0 + 900, "dur": 50.0,
                   "args": {"correlation": 100 + n}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "Optimizer.step#SGD.step", "ts": t0 + 880, "dur": 40.0, "tid": 1})
    return {"traceEvents": ev}


def test_idle_per_step_and_its_split():
    idle, split, raw = R.idle_gaps_per_step(_doc())
    # per analyzed step: 0-100 before gemm (host), 600-900 after the sync (sync), 950-1000 (host)
    assert idle == pytest.approx(450.0)
    assert split == pytest.approx({"sync": 300.0, "host": 150.0, "queued": 0.0})
    assert raw > 0
    # relu launched at 500 (returned at 505) while gemm ran: the GPU idles 600-900 with work queued;
    # the thread's next launch after the sync is then the next step's, so the other gaps begin in the sync
    idle, split, _ = R.idle_gaps_per_step(_doc(launch_at=500.0))
    assert idle == pytest.approx(450.0) and split == pytest.approx({"sync": 150.0, "host": 0.0, "queued": 300.0})


def test_sync_line_is_the_users_frame_not_the_library():
    line, frames, _ = R.sync_line(_doc())
    assert line == "train.py(12): step" and frames[line] == pytest.approx(2 * 301.0)
    assert not R.user_frame("torch/nn/x.py(3): f") and not R.user_frame("typing.py(1): g")
    assert R.user_frame("/work/app/train.py(1): main")


def test_optimizer_kernels_and_host_time_per_step():
    steps, kernels, host_us, launch_us, _ = R.optimizer_per_step(_doc())
    assert (steps, kernels, host_us, launch_us) == (2, 1.0, 40.0, 5.0)


def test_the_optimizer_step_on_the_gpu_timeline_is_not_host_time():
    """Kineto copies ``Optimizer.step#`` onto the GPU's timeline
    (``gpu_user_annotation``, later and longer than the host's); the bank's
    ``optimizer_host_us`` found hta-report counting its span as host time
    (t4-amp-mlp-train-dataloader: 3,223 µs per step for 2,997)."""
    import numpy as np
    import pandas as pd

    from hta_report.analysis.events import RankEvents
    from hta_report.analysis.optimizer import step_regions, zero_grad_regions

    df = pd.DataFrame({"ts": [0.0, 300.0, 500.0, 900.0], "dur": [2997.0, 2906.0, 60.0, 80.0],
                       "stream": [-1, -1, -1, -1], "s_name": ["Optimizer.step#Adam.step"] * 2
                       + ["Optimizer.zero_grad#Adam.zero_grad"] * 2,
                       "s_cat": ["user_annotation", "gpu_user_annotation"] * 2})
    ev = RankEvents(rank=0, df=df.assign(end=df["ts"] + df["dur"]))
    assert step_regions(ev, None)["dur"].tolist() == [2997.0]
    assert zero_grad_regions(ev, np.array([[0.0, 5000.0]]))["dur"].tolist() == [60.0]
