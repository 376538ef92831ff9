"""How well compute kernels fill the GPU: SM efficiency and achieved occupancy (C14).

Kineto writes three args on every CUDA kernel (CUPTI launch configuration and
the CUDA occupancy calculator): ``blocks per SM`` (grid blocks / SMs: below 1,
some SMs get no block), ``warps per SM`` and ``est. achieved occupancy %``.
The TensorBoard profiler showed "Est. SM Efficiency" (``min(blocks per SM,
1)`` over the steps' whole time) and "Est. Achieved Occupancy" from them;
these are the same figures (:mod:`.tensorboard`) over the analyzed steps,
and the kernels that leave SMs idle among the compute kernels.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import intervals
from ..model import OccupancySummary, SmallKernel
from .collectives import EP_KERNEL
from .events import COMPUTATION, RankEvents, name_search
from .kernels import stall_excess
from .regions import in_windows, per_step
from .tensorboard import kernel_args, sm_efficiency

#: Kernels listed in :attr:`OccupancySummary.top_small`.
TOP_SMALL = 10


def alone_us(gpu: pd.DataFrame, k: pd.DataFrame) -> np.ndarray:
    """Per kernel of ``k`` (rows of ``gpu``, the rank's GPU operations), its
    time (µs) with no kernel of another stream running: the SMs a small grid
    leaves idle are idle only then. Where kernels of other streams run beside
    it (communication kernels given few SMs by design, DeepEP's, NCCL's; a
    side stream's compute), they can hold those SMs, and the trace does not
    say which they hold: that time is not counted as idle."""
    every = gpu[gpu["s_cat"].eq("kernel")]
    ts, end = k["ts"].to_numpy(dtype=float), k["end"].to_numpy(dtype=float)
    dur = np.maximum(end - ts, 0.0)
    streams = k["stream"].to_numpy()
    other_streams = every["stream"].to_numpy()
    shared = np.zeros(len(k))
    for s in pd.unique(streams):
        others = every[other_streams != s]
        if others.empty:
            continue
        u = intervals.union(others["ts"].to_numpy(dtype=float), others["end"].to_numpy(dtype=float))
        sel = streams == s
        shared[sel] = intervals.overlap_each(np.column_stack([ts[sel], end[sel]]), u)
    return np.maximum(dur - shared, 0.0)


def occupancy(ev: RankEvents, w: np.ndarray) -> OccupancySummary:
    """SM efficiency and achieved occupancy of the compute kernels starting
    inside the analyzed windows ``w`` (``(n, 2)`` µs), weighted by duration
    (formulas in :class:`~hta_report.model.OccupancySummary`). Expert-parallel
    exchange kernels NCCL does not name (DeepEP's dispatch/combine,
    :data:`~.collectives.EP_KERNEL`) are communication that runs on few SMs
    by design, beside the compute: left out.

    A small grid's idle SM time counts only while no kernel of another
    stream runs (:func:`alone_us`), and not past a stalled kernel's median
    (:func:`~.kernels.stall_excess`: a stall is no grid size's). Kernels without the args (``blocks per SM`` absent: -1, e.g. AMD traces,
    or a column the parser did not make) are left out; with none left,
    ``missing_reason`` says why.
    """
    out = OccupancySummary()
    gpu = ev.gpu
    kernels = gpu[gpu["s_cat"].eq("kernel") & gpu["kernel_type"].eq(COMPUTATION)
                  & ~name_search(gpu["s_name"], EP_KERNEL)]  # few blocks by design
    if kernels.empty:
        out.missing_reason = "no compute kernels in the trace"
        return out
    if "blocks_per_sm" not in kernels.columns:
        out.missing_reason = "the kernels carry no 'blocks per SM' (the parser read no occupancy args)"
        return out
    # a kernel's time past 10x its name's median is a stall, not a small grid's idle SMs (stall_excess)
    stall_all = pd.Series(stall_excess(kernels["s_name"], kernels["dur"].to_numpy(dtype=float)), index=kernels.index)
    kernels = in_windows(kernels, w)
    blocks = pd.to_numeric(kernels["blocks_per_sm"], errors="coerce").to_numpy(dtype=float)
    has = np.isfinite(blocks) & (blocks >= 0)
    if not has.any():
        out.missing_reason = ("the kernels carry no 'blocks per SM' / 'est. achieved occupancy %' "
                              "(Kineto writes them for CUDA kernels only; AMD traces have none)")
        return out
    k = kernels[has]
    blocks = blocks[has]
    dur = k["dur"].to_numpy(dtype=float)
    occ = (pd.to_numeric(k["est_occupancy"], errors="coerce").to_numpy(dtype=float)
           if "est_occupancy" in k.columns else np.full(len(k), np.nan))
    occ = np.where(np.isfinite(occ) & (occ >= 0), np.minimum(occ, 100.0), 0.0)
    n = max(len(w), 1)
    total = float(dur.sum())
    out.kernels_with_data = int(len(k))
    out.kernel_us_per_step = per_step(total, n)
    if total <= 0:
        return out
    out.sm_efficiency_pct, out.achieved_occupancy_pct, _ = sm_efficiency(kernel_args(ev), w)
    small = blocks < 1.0
    stall = (stall_all.reindex(k.index).fillna(0.0).to_numpy(dtype=float) if stall_all.index.is_unique
             else np.zeros(len(k)))
    idle = np.maximum(alone_us(gpu, k) - stall, 0.0) * (1.0 - np.minimum(blocks, 1.0))
    out.small_grid_us_per_step = per_step(float(dur[small].sum()), n)
    out.small_grid_pct = float(100 * dur[small].sum() / total)
    out.idle_sm_us_per_step = per_step(float(idle[small].sum()), n)
    if small.any():
        # names as objects: numpy's ``astype(str)`` makes a fixed-width array as wide as the
        # longest kernel name (templated names pass 1,000 characters): 0.7 s and hundreds of MB
        frame = pd.DataFrame({"name": k["s_name"].to_numpy(dtype=object)[small], "dur": dur[small],
                              "bd": (dur * blocks)[small], "od": (dur * occ)[small], "idle": idle[small]})
        g = frame.groupby("name", sort=False).agg(count=("dur", "size"), total=("dur", "sum"), bd=("bd", "sum"),
                                                   od=("od", "sum"), idle=("idle", "sum"))
        g = g.sort_values(["idle", "total"], ascending=False, kind="stable").head(TOP_SMALL)
        out.top_small = [
            SmallKernel(name=str(name), count=int(row["count"]), total_us=float(row["total"]),
                        blocks_per_sm=float(row["bd"] / row["total"]) if row["total"] > 0 else 0.0,
                        occupancy_pct=float(row["od"] / row["total"]) if row["total"] > 0 else 0.0,
                        idle_sm_us=float(row["idle"]), pct=float(100 * row["total"] / total))
            for name, row in g.iterrows()
        ]
    return out
