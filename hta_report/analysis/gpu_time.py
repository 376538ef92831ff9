"""Where GPU time goes: HTA's temporal, idle-time and kernel breakdowns."""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np
import pandas as pd

from ..model import EventRef, IdleBreakdown, KernelStat, KernelTypeShare, StreamIdle, TemporalBreakdown
from .. import intervals
from .events import RankEvents, linked_calls

#: HTA's ``consecutive_kernel_delay``: gaps shorter than this (µs) count as kernel wait.
CONSECUTIVE_KERNEL_DELAY_US = 30


def _pct(value) -> float:
    """One of HTA's percentages; HTA divides by a zero total (GPU events that all
    last 0 µs) into NaN, shown as 0 % here so the result stays valid JSON."""
    value = float(value)
    return value if math.isfinite(value) else 0.0


def temporal_breakdown(view) -> Dict[int, TemporalBreakdown]:
    """HTA's ``get_temporal_breakdown`` for every rank of ``view`` (a
    ``TraceAnalysis`` over ranks that have GPU events), rank -> breakdown."""
    df = view.get_temporal_breakdown(visualize=False)
    out = {}
    for row in df.to_dict("records"):
        out[int(row["rank"])] = TemporalBreakdown(
            idle_us=float(row["idle_time(us)"]),
            compute_us=float(row["compute_time(us)"]),
            non_compute_us=float(row["non_compute_time(us)"]),
            total_us=float(row["kernel_time(us)"]),
            idle_pct=_pct(row["idle_time_pctg"]),
            compute_pct=_pct(row["compute_time_pctg"]),
            non_compute_pct=_pct(row["non_compute_time_pctg"]),
        )
    return out


#: Most GPU streams of a rank on which HTA's per-stream idle-time breakdown is run. HTA
#: selects each stream's operations from all of the rank's and classifies them in pandas, one
#: stream at a time (``BreakdownAnalysis._analyze_idle_time_for_stream``): about 13 ms a stream,
#: measured 12.7 s for 1,000 streams of three kernels each and over 50 s for 4,000 (issue 56,
#: item 6). 256 streams keep it to a few seconds, while real runs use tens (compute, copy and
#: NCCL streams: 3 to 40 in the traces under ../shared); above it, hta-report's own breakdown
#: (:func:`stream_idle`, HTA's definitions on the exact times) is reported in its place.
MAX_HTA_STREAMS = 256


def gpu_stream_count(view, rank: int) -> int:
    """Number of GPU streams (``stream`` >= 0) among the events of ``rank`` in
    ``view`` (an HTA ``TraceAnalysis``): what HTA's per-stream passes loop over."""
    df = view.t.get_trace(rank)
    stream = df["stream"].to_numpy()
    return int(len(np.unique(stream[stream >= 0])))


def idle_breakdown(view, rank: int) -> IdleBreakdown:
    """HTA's ``get_idle_time_breakdown`` for one rank, every stream (only
    ``streams`` is filled: the rank-level split is :func:`gpu_idle_split`'s)."""
    df, _ = view.get_idle_time_breakdown(
        ranks=[rank], visualize=False, consecutive_kernel_delay=CONSECUTIVE_KERNEL_DELAY_US
    )
    streams: Dict[int, StreamIdle] = {}
    for stream, cat, t in zip(df["stream"], df["idle_category"], df["idle_time"]):
        s = streams.setdefault(int(stream), StreamIdle(stream=int(stream)))
        setattr(s, f"{cat}_us", float(t))
    return IdleBreakdown(streams=sorted(streams.values(), key=lambda s: s.stream))


def gpu_idle_split(ev: RankEvents, out: IdleBreakdown) -> IdleBreakdown:
    """Fill the GPU-level fields of ``out`` (see :class:`IdleBreakdown`): the
    gaps with no GPU operation on any stream over the rank's GPU span (the
    idle time of HTA's temporal breakdown), each classified by HTA's
    per-stream rules (``IdleTimeType`` in HTA's breakdown analysis) applied to
    the GPU operation that ends it: host wait when its runtime call started
    after the gap began, else kernel wait when the gap is shorter than
    :data:`CONSECUTIVE_KERNEL_DELAY_US`, else other."""
    gpu = ev.df[ev.df["stream"].ne(-1)]
    host, kernel, other = _idle_classes(gpu, _launch_times(ev))
    out.host_wait_us, out.kernel_wait_us, out.other_us = host, kernel, other
    total = host + kernel + other
    if total > 0:
        out.host_wait_pct = 100 * host / total
        out.kernel_wait_pct = 100 * kernel / total
        out.other_pct = 100 * other / total
    return out


def stream_idle(ev: RankEvents) -> List[StreamIdle]:
    """HTA's per-stream idle time breakdown (``get_idle_time_breakdown``: on
    each stream, the gaps between its GPU operations classified by
    ``IdleTimeType``'s rules, as :func:`gpu_idle_split` does for the GPU as a
    whole), computed from the exact times, by stream: what the report shows
    where HTA's own analysis failed on a rank or was not run
    (:data:`MAX_HTA_STREAMS`). All streams in one pass: the same gaps and
    classes as :func:`_idle_classes` on each stream's operations (a gap ends
    at the operation that starts it, the shortest of those starting then)."""
    gpu = ev.gpu
    if gpu.empty:
        return []
    streams, code, length, host, kernel = _classified_gaps(gpu, gpu["stream"].to_numpy().astype(np.int64),
                                                           _launch_times(ev))

    def per_stream(mask: np.ndarray) -> List[float]:
        return np.bincount(code[mask], weights=length[mask], minlength=len(streams)).tolist()
    return [StreamIdle(stream=int(s_), host_wait_us=h, kernel_wait_us=k, other_us=o)
            for s_, h, k, o in zip(streams.tolist(), per_stream(host), per_stream(kernel),
                                   per_stream(~host & ~kernel))]


def _launch_times(ev: RankEvents) -> pd.Series:
    """correlation -> start of its earliest runtime call (µs)."""
    return linked_calls(ev).groupby("correlation")["ts"].min()


def _idle_classes(gpu: pd.DataFrame, launch_ts: pd.Series) -> Tuple[float, float, float]:
    """The gaps between the union of ``gpu``'s operations as host wait,
    kernel wait and other (µs), by HTA's rules applied to the operation that
    ends each gap (see :func:`gpu_idle_split`)."""
    if gpu.empty:
        return 0.0, 0.0, 0.0
    _, _, length, host, kernel = _classified_gaps(gpu, np.zeros(len(gpu), dtype=np.int64), launch_ts)
    return float(length[host].sum()), float(length[kernel].sum()), float(length[~host & ~kernel].sum())


def _classified_gaps(gpu: pd.DataFrame, group: np.ndarray, launch_ts: pd.Series):
    """The gaps between the operations of each ``group`` (an id per row of
    ``gpu``: its stream, or one group for the whole GPU) and how HTA's rules
    class them, by the operation that ends each gap (the shortest of those
    starting then): host wait where its runtime call (``launch_ts``:
    correlation -> start, µs) started after the gap began, else kernel wait
    when the gap is shorter than :data:`CONSECUTIVE_KERNEL_DELAY_US`, else
    other. One pass over all groups.

    Returns:
        ``(groups, code, length, host, kernel)``: the sorted group ids, and
        per gap its group's position in them, its length (µs) and the two
        boolean masks.
    """
    ts = gpu["ts"].to_numpy(dtype=float)
    end = np.maximum(gpu["end"].to_numpy(dtype=float), ts)
    order = np.lexsort((end, ts, group))
    ts, end, group = ts[order], end[order], group[order]
    groups, code = np.unique(group, return_inverse=True)
    running = pd.Series(end).groupby(code).cummax().to_numpy(dtype=float)  # the group's busy until then
    prev = np.r_[-np.inf, running[:-1]]
    gap = np.r_[False, code[1:] == code[:-1]] & (ts > prev)
    gap_start, length = prev[gap], ts[gap] - prev[gap]
    corr = gpu["correlation"].to_numpy()[order][gap]
    t_launch = pd.Series(corr).map(launch_ts).to_numpy(dtype=float)
    host = t_launch > gap_start  # NaN (no runtime call) compares False, as in HTA
    kernel = ~host & (length < CONSECUTIVE_KERNEL_DELAY_US)
    return groups, code[gap], length, host, kernel


def exact_temporal(ev: RankEvents) -> TemporalBreakdown:
    """HTA's temporal breakdown (``get_temporal_breakdown``: over the GPU
    span, compute is the union of COMPUTATION kernels, idle the time with no
    GPU operation, non-compute the rest) computed from the exact times of the
    rank's kernels, memcpys and memsets, percentages rounded to 0.01 as HTA
    rounds them; ``source`` ``"hta-report"``. What the report shows where
    HTA's own analysis failed on a rank."""
    gpu = ev.gpu
    out = TemporalBreakdown(source="hta-report")
    if gpu.empty:
        return out
    span = ev.gpu_span_us
    busy = intervals.total(intervals.union(gpu["ts"].to_numpy(), gpu["end"].to_numpy()))
    compute = intervals.total(ev.gpu_union("COMPUTATION"))
    out.total_us, out.compute_us = span, compute
    out.idle_us = max(0.0, span - busy)
    out.non_compute_us = max(0.0, busy - compute)
    if span > 0:
        out.idle_pct = round(100 * out.idle_us / span, 2)
        out.compute_pct = round(100 * compute / span, 2)
        out.non_compute_pct = round(100 * out.non_compute_us / span, 2)
    return out


def kernel_type_shares(view) -> List[KernelTypeShare]:
    """HTA's ``get_gpu_kernel_breakdown`` kernel-type table (over the ranks of
    ``view``), largest first.

    The table alone, by HTA's own steps: each rank's GPU events classified by
    HTA's ``get_kernel_type``, their time per kernel type (and per overlap of
    types) by HTA's ``BreakdownAnalysis._get_gpu_kernel_type_time``, then
    HTA's sum, sort and rounding (:func:`_share_table`). HTA's method also
    builds its per-kernel table (names mapped row by row, statistics per
    kernel), which the report does not use: on rank 0 of the fractional
    benchmark (23,000 GPU events) HTA's method took 50 ms, these steps 22 ms.
    Where this HTA lacks those functions, its method is called.
    ``tests/test_hta_parity.py`` compares the table with HTA's method's.
    """
    steps = _htas_type_steps()
    if steps is None:
        types_df, _ = view.get_gpu_kernel_breakdown(visualize=False, num_kernels=1)
        return _shares(types_df)
    type_time, analyzed, classify = steps
    symbols = view.t.symbol_table.get_sym_table()
    rows = [pd.DataFrame({"kernel_type": pd.Series(dtype="str"), "sum": pd.Series(dtype="int")})]
    for df in view.t.traces.values():
        # the columns HTA's step reads (``ts``, ``dur``; its interval merge copies the rows of each
        # kernel type, and the copies of every other column were a third of its time)
        gpu = pd.DataFrame(df.loc[df["stream"].ne(-1), ["ts", "dur"]])
        ids, codes = np.unique(df.loc[df["stream"].ne(-1), "name"].to_numpy(), return_inverse=True)
        kinds = np.array([classify(symbols[i]) for i in ids.tolist()], dtype=object)
        gpu["kernel_type"] = pd.Series(kinds[codes].tolist(), index=gpu.index)
        rows.append(type_time(gpu, analyzed))
    return _share_table(pd.concat(rows, ignore_index=True))


def _htas_type_steps():
    """HTA's ``(_get_gpu_kernel_type_time, kernel types analyzed, get_kernel_type)``
    for :func:`kernel_type_shares`; None where this HTA has not all three."""
    try:
        from hta.analyzers import breakdown_analysis as ba

        # HTA's list, memory kernels included (get_gpu_kernel_breakdown's default)
        analyzed = [ba.KernelType.COMPUTATION.name, ba.KernelType.COMMUNICATION.name, ba.KernelType.MEMORY.name]
        return ba.BreakdownAnalysis._get_gpu_kernel_type_time, analyzed, ba.get_kernel_type
    except (ImportError, AttributeError):
        return None


def _shares(df: pd.DataFrame) -> List[KernelTypeShare]:
    return [KernelTypeShare(kernel_type=str(k), total_us=float(s), pct=_pct(p))
            for k, s, p in zip(df["kernel_type"], df["sum"], df["percentage"])]


def _share_table(rows: pd.DataFrame) -> List[KernelTypeShare]:
    """HTA's last steps of its kernel-type table (``get_gpu_kernel_breakdown``)
    on ``rows`` (``kernel_type``, ``sum`` µs; several rows per type): pandas
    groupby sum, sorted by time, ``percentage`` of the total rounded to 0.1."""
    if rows.empty:
        return []
    df = rows.groupby(by=["kernel_type"])["sum"].agg(["sum"]).reset_index()
    df = df.sort_values(by=["sum"], ignore_index=True, ascending=False)
    df["percentage"] = (df["sum"] / df["sum"].sum()) * 100
    return _shares(df.round({"percentage": 1}))


def combine_kernel_type_shares(per_rank: List[List[KernelTypeShare]]) -> List[KernelTypeShare]:
    """The kernel-type table over several ranks from each rank's
    :func:`kernel_type_shares`, given in the ranks' order.

    HTA's ``get_gpu_kernel_breakdown`` over several ranks classifies every
    kernel of every rank again (row by row) and then sums the per-rank type
    times; this does that last step alone, as HTA does it (:func:`_share_table`),
    so the table equals HTA's (``tests/test_hta_parity.py`` checks it).
    """
    return _share_table(pd.DataFrame({
        "kernel_type": pd.Series([s.kernel_type for shares in per_rank for s in shares], dtype=object),
        "sum": pd.Series([s.total_us for shares in per_rank for s in shares], dtype=float),
    }))


def top_kernels(ev: RankEvents, limit: int = 15) -> List[KernelStat]:
    """Kernels (not memcpy/memset) of a rank by total time: count, total,
    mean, min and max (µs); ``pct`` is of all kernel time of the rank; the
    mean ``blocks per SM`` and ``est. achieved occupancy %`` weighted by
    duration over the calls carrying them (the TensorBoard profiler's kernel
    table; 0 without them)."""
    k = ev.gpu[ev.gpu["s_cat"].eq("kernel")]
    if k.empty:
        return []
    dur = k["dur"].to_numpy(dtype=float)
    extra = {}
    for col, key in (("blocks_per_sm", "blocks"), ("est_occupancy", "occ")):
        v = pd.to_numeric(k[col], errors="coerce").to_numpy(dtype=float) if col in k.columns \
            else np.full(len(k), np.nan)
        has = np.isfinite(v) & (v >= 0)
        extra[f"{key}_w"] = np.where(has, dur, 0.0)
        extra[f"{key}_wv"] = np.where(has, dur * np.where(has, v, 0.0), 0.0)
    frame = k.assign(**extra)
    g = frame.groupby("s_name", sort=False).agg(
        count=("dur", "size"), total=("dur", "sum"), mean=("dur", "mean"), max=("dur", "max"), min=("dur", "min"),
        kernel_type=("kernel_type", "first"), blocks_w=("blocks_w", "sum"), blocks_wv=("blocks_wv", "sum"),
        occ_w=("occ_w", "sum"), occ_wv=("occ_wv", "sum"),
    )
    all_time = float(k["dur"].sum())
    g = g.sort_values("total", ascending=False).head(limit)
    longest = _longest_calls(ev.rank, k, g.index)
    return [
        KernelStat(
            name=str(name), kernel_type=str(r["kernel_type"]), count=int(r["count"]), total_us=float(r["total"]),
            mean_us=float(r["mean"]), max_us=float(r["max"]), pct=100 * float(r["total"]) / all_time if all_time else 0.0,
            min_us=float(r["min"]),
            blocks_per_sm=float(r["blocks_wv"] / r["blocks_w"]) if r["blocks_w"] > 0 else 0.0,
            occupancy_pct=float(r["occ_wv"] / r["occ_w"]) if r["occ_w"] > 0 else 0.0,
            longest=longest.get(name),
        )
        for name, r in g.iterrows()
    ]


def _longest_calls(rank: int, k: pd.DataFrame, names) -> Dict[str, EventRef]:
    """The longest call of each kernel name in ``names`` among the kernel rows
    ``k`` of ``rank``, as an :class:`EventRef` (the first of equal longest
    calls; stream and correlation -1 where the frame lacks them)."""
    rows = k[k["s_name"].isin(list(names))]
    if rows.empty:
        return {}
    top = rows.sort_values(["dur", "ts"], ascending=[False, True], kind="stable").drop_duplicates("s_name")
    stream = top["stream"] if "stream" in top.columns else pd.Series(-1, index=top.index)
    corr = top["correlation"] if "correlation" in top.columns else pd.Series(-1, index=top.index)
    return {str(n): EventRef(rank=int(rank), stream=int(st), correlation=int(c), ts_us=float(ts), dur_us=float(d),
                             name=str(n))
            for n, st, c, ts, d in zip(top["s_name"], stream, corr, top["ts"], top["dur"])}
