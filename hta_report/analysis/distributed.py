"""``torch.nn.DataParallel`` on the host timeline."""
from __future__ import annotations

import numpy as np

from ..model import CpuSide
from .. import intervals
from .events import RankEvents
from .regions import in_windows, per_step

#: ``torch.nn.DataParallel.forward`` wraps its work in this record_function.
DATA_PARALLEL = "DataParallel.forward"


def add_data_parallel(cpu_side: CpuSide, ev: RankEvents, w: np.ndarray) -> CpuSide:
    """Fill ``data_parallel_calls_per_step`` and ``data_parallel_us_per_step``
    (host time inside ``DataParallel.forward``, µs) over the windows ``w``."""
    cpu = ev.cpu
    dp = in_windows(cpu[cpu["s_name"].eq(DATA_PARALLEL)], w)
    n = len(w)
    cpu_side.data_parallel_calls_per_step = per_step(len(dp), n)
    if len(dp):
        cpu_side.data_parallel_us_per_step = per_step(
            intervals.total(intervals.union(dp["ts"].to_numpy(), dp["end"].to_numpy())), n)
    return cpu_side
