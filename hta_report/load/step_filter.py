"""HTA's step filter, run on narrow frames: the same rows, a fraction of the copies.

HTA's ``Trace._filter_irrelevant_gpu_kernels`` keeps the CPU events that
start before the last ``ProfilerStep`` (or end by it) and the GPU kernels
launched by them: it selects the CPU rows, the GPU rows, the CPU rows again,
merges the GPU rows with the CPU rows' ``correlation`` and concatenates,
each time copying every column of the rank's frame. On the 286 MB benchmark
rank that was 0.35 s and about 220 MB above the frame itself, the peak of
the whole run after the parse.

:func:`filter_steps` runs HTA's own method unchanged on frames of the
columns it reads (``cat``, ``name``, ``stream``, ``correlation``, ``ts``,
``end``) and a row number, then takes each rank's rows from its full frame
in one step, in the order and with the index HTA's result has. Equal frames
are checked against HTA's method in ``tests/test_step_filter.py``; MTIA
traces, whose filter reads other columns, go through HTA's method as is.
"""
from __future__ import annotations

from typing import Dict

#: The columns HTA's filter reads (``CPUOperatorFilter``, ``GPUKernelFilter``,
#: the ``ProfilerStep`` bounds and the merge on ``correlation``).
FILTER_COLUMNS = ("cat", "name", "stream", "correlation", "ts", "end")
#: The row number carried through HTA's filter (not a column of HTA's frames).
ROW = "__hta_report_row"


def filter_steps(trace, include_last_step: bool) -> None:
    """Filter every rank of HTA's ``trace`` in place as
    ``trace._filter_irrelevant_gpu_kernels(include_last_step)`` does.

    Each rank's frame in ``trace.traces`` is replaced by HTA's result (the
    same rows, columns, dtypes and index); a frame HTA leaves alone (no or
    one ``ProfilerStep``, no CPU operators) stays the same object.

    Raises:
        Whatever HTA's method raises on these frames (e.g. ``KeyError`` for a
        missing ``correlation`` column).
    """
    import numpy as np

    if trace.get_device_type() == "MTIA" or any(ROW in df.columns for df in trace.traces.values()):
        trace._filter_irrelevant_gpu_kernels(include_last_step)
        return
    full = dict(trace.traces)
    narrow: Dict[object, object] = {}
    for rank, df in full.items():
        cols = [c for c in FILTER_COLUMNS if c in df.columns]
        narrow[rank] = df[cols].assign(**{ROW: np.arange(len(df), dtype=np.int64)})
    trace.traces.update(narrow)
    try:
        trace._filter_irrelevant_gpu_kernels(include_last_step)
        kept = dict(trace.traces)
    finally:
        trace.traces.update(full)
    for rank, out in kept.items():
        if out is narrow[rank]:  # left alone
            continue
        df = full[rank].take(out[ROW].to_numpy())
        df.index = out.index
        trace.traces[rank] = df
