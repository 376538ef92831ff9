"""Row selections made once per rank (:func:`hta_report.analysis.events.shared`):
computed on the first call, the same frame handed to every caller after it,
and equal to the selection made from the events directly."""
from __future__ import annotations

import numpy as np
import pandas as pd

from hta_report.analysis import events
from hta_report.analysis.events import RankEvents, linked_calls, runtime_calls, shared


def _events(rank: int = 0) -> RankEvents:
    cats = pd.Categorical(["cpu_op", "cuda_runtime", "cuda_driver", "cuda_runtime", "kernel", "user_annotation"])
    names = pd.Categorical(["aten::mm", "cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "gemm", "step"])
    return RankEvents(rank=rank, df=pd.DataFrame({
        "ts": [0.0, 1.0, 2.0, 3.0, 4.0, 0.0], "dur": [5.0, 1.0, 1.0, 1.0, 2.0, 9.0],
        "end": [5.0, 2.0, 3.0, 4.0, 6.0, 9.0], "stream": [-1, -1, -1, -1, 7, -1],
        "correlation": [0, 11, 12, 0, 11, 0], "thread": [1, 1, 1, 1, 2, 1], "s_name": names, "s_cat": cats}))


def test_a_shared_selection_is_made_once_per_rank():
    calls = []

    @shared
    def ops(ev):
        calls.append(ev.rank)
        return ev.cpu[ev.cpu["s_cat"].eq("cpu_op")]

    ev = _events(3)
    assert ops(ev) is ops(ev) and calls == [3]
    ops(_events(4))  # other events: made for them
    assert calls == [3, 4]


def test_launch_calls_equal_the_selection_from_the_host_events():
    ev = _events()
    cpu = ev.cpu
    expected = cpu[cpu["s_cat"].isin(events.LAUNCH_CATEGORIES)]
    pd.testing.assert_frame_equal(runtime_calls(ev), expected)
    linked = cpu[cpu["s_cat"].isin(events.LAUNCH_CATEGORIES) & (cpu["correlation"] > 0)]
    pd.testing.assert_frame_equal(linked_calls(ev), linked)
    assert np.array_equal(linked_calls(ev)["correlation"].to_numpy(), [11, 12])
