"""Comparing two analyses: did the change make training faster or slower, and why?

A pure function of two :class:`~hta_report.model.AnalysisResult`; reading or
analyzing a side is :func:`hta_report.api.compare_paths`'s job.
"""
from __future__ import annotations

import math
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple


from .model import (ATTRIBUTION_STEP, COMMUNICATION_STEP, CPU_SIDE_STEP, MEMCPY_STEP, PACED_STEP_METRIC,
                    STEP_TIMES_STEP, WINDOWS_STEP, AnalysisResult, Comparison, CpuOpDelta, KernelDelta, KernelVariant,
                    MetricDelta, RankComparison, RankResult, SideInfo)
from .names import family, rank_ranges
from . import compare_stats

#: Smallest noise band (%) a verdict uses, however steady the steps are
#: (:func:`step_variation_pct` is the band above it).
MIN_NOISE_BAND_PCT = 1.0
#: A PyTorch build's GPU runtime in its version: ``2.4.0+cu121``, ``2.5.1+rocm6.2``.
_TORCH_CUDA = re.compile(r"\+cu([0-9]{2,3})(?![0-9])")
_TORCH_ROCM = re.compile(r"\+rocm([0-9]+(?:\.[0-9]+)?)")
#: How ``hta-report collect`` lists a device in ``manifest.json`` (``device_names``):
#: ``cpu: AMD EPYC (2 logical cores)``, ``cuda:0: NVIDIA H100``.
_MANIFEST_DEVICE = re.compile(r"(cpu|cuda:[0-9]+): (.+)")


def _bounded(x: float) -> float:
    """``x`` as a finite number: a difference or ratio of two finite figures
    that overflows (a saved result may hold any finite number, 1e300 included)
    becomes the largest float of its sign, not infinity, which JSON cannot hold."""
    if math.isnan(x):
        return 0.0
    return x if math.isfinite(x) else math.copysign(sys.float_info.max, x)


def _delta(name: str, unit: str, base: float, new: float) -> MetricDelta:
    d = _bounded(new - base)
    return MetricDelta(name=name, unit=unit, base=base, new=new, delta=d,
                       delta_pct=_bounded(100 * d / base) if base else 0.0)


def _rank_metrics(r: RankResult) -> List[Tuple[str, str, float]]:
    """The rank's compared metrics; those whose analysis step failed on the
    rank (:attr:`RankResult.failures`) are left out rather than compared as 0."""
    out = []
    if not r.failed(STEP_TIMES_STEP):
        out.append(("mean step time", "ms", r.steps.mean_us / 1e3))
    if not r.failed(CPU_SIDE_STEP):
        out += [("DataLoader share of step", "%", r.cpu.dataloader_pct), ("sync share of step", "%", r.cpu.sync_pct)]
    if r.has_gpu:
        if not r.failed(WINDOWS_STEP, ATTRIBUTION_STEP):
            out += [("GPU busy", "%", r.busy_pct), ("kernels running", "%", r.kernel_busy_pct),
                    ("GPU idle", "%", r.idle_pct)]
        if not r.failed(COMMUNICATION_STEP):
            out.append(("exposed communication", "%", r.exposed_comm_window_pct))
        if not r.failed(MEMCPY_STEP):
            out.append(("exposed memcpy", "%", r.exposed_copy_window_pct))
    return out


def _overall(a: AnalysisResult) -> Dict[str, Tuple[str, float]]:
    g = a.aggregate
    out = {"mean step time": ("ms", g.mean_step_us / 1e3), "DataLoader share of step": ("%", g.dataloader_pct)}
    if g.gpu_ranks:
        out.update({
            "GPU busy": ("%", g.busy_pct), "kernels running": ("%", g.kernel_busy_pct), "GPU idle": ("%", g.idle_pct),
            "exposed communication": ("%", g.exposed_comm_pct), "exposed memcpy": ("%", g.exposed_memcpy_pct),
        })
        for k in g.kernel_types:
            out[f"kernel time: {k.kernel_type}"] = ("%", k.pct)
    return out


def time_per_step(a: AnalysisResult) -> Tuple[float, int]:
    """The time per analyzed step the verdict compares (µs) and how many
    ranks it takes from the GPU: the mean over the ranks with analyzed steps
    (as :attr:`~hta_report.model.Aggregate.mean_step_us`) of each rank's
    mean ``ProfilerStep``, except where the host ran ahead of the GPU
    (:attr:`~hta_report.model.Replay.gpu_paced_step_us` > 0): there the
    ``ProfilerStep`` windows measure the host's enqueueing alone, and the
    rank's time per step counting the GPU work its steps leave behind is
    taken instead (a 64 MiB pinned batch on an H200: 1.73 ms windows,
    15.36 ms a step). Without such a rank this is
    ``aggregate.mean_step_us`` exactly, with 0 ranks; (0.0, 0) without
    ``ProfilerStep``. Only positive, finite step times count (a saved
    result may hold any number: a rank whose mean step is 0 or negative
    is left out, not averaged into a step of 0 µs); the mean is taken
    without overflow or numpy warnings."""
    stepped = [r for r in a.ranks if not r.failed(STEP_TIMES_STEP) and r.steps.count]
    paced = [r for r in stepped if _positive(r.replay.gpu_paced_step_us)]
    if not paced or not a.aggregate.mean_step_us > 0:
        return a.aggregate.mean_step_us, 0
    times = [r.replay.gpu_paced_step_us if _positive(r.replay.gpu_paced_step_us) else r.steps.mean_us
             for r in stepped]
    times = [t for t in times if _positive(t)]
    try:
        mean = math.fsum(times) / len(times)
    except OverflowError:  # a sum past the float range: the mean of the parts
        mean = math.fsum(t / len(times) for t in times)
    return _bounded(mean), len(paced)


def _positive(x: float) -> bool:
    """``x`` is a positive, finite number."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


#: σ of a normal distribution per unit of median absolute deviation:
#: 1 / Φ⁻¹(3/4) (Rousseeuw & Croux 1993, "Alternatives to the Median Absolute
#: Deviation", JASA 88(424):1273-1283).
MAD_TO_SIGMA = 1.482602218505602


def step_variation_pct(a: AnalysisResult) -> float:
    """The step-to-step spread of the analyzed step times (warm-up excluded),
    pooled over ranks, as % of their median: the robust coefficient of
    variation ``1.4826 × MAD / median × 100``, where MAD is the median
    absolute deviation from the median and 1.4826 (:data:`MAD_TO_SIGMA`)
    makes it estimate the standard deviation of normally distributed steps
    (Rousseeuw & Croux 1993). Unlike the standard deviation, up to half the
    steps can be outliers (a checkpoint, an evaluation step) without widening
    it: one 10× step among ten moves the mean step by 90 % and the standard
    deviation past 100 %, and leaves the MAD where the steady steps put it.

    Returns:
        The spread (%); 0 without at least two steps or with a median step
        that is not positive. Plain Python on finite figures: no numpy
        warning, whatever a saved result holds.
    """
    d = sorted(float(s.duration_us) for r in a.ranks for s in r.steps.steps
               if not s.warmup and math.isfinite(s.duration_us))
    if len(d) < 2:
        return 0.0
    med = _median(d)
    if not med > 0:
        return 0.0
    mad = _median(sorted(abs(x - med) for x in d))
    return _bounded(MAD_TO_SIGMA * mad / med * 100)


def _median(values: Sequence[float]) -> float:
    """The median of sorted finite ``values`` (not empty), without overflow."""
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else values[mid - 1] / 2 + values[mid] / 2


def _kernel_totals(a: AnalysisResult) -> Dict[str, Tuple[str, float]]:
    totals: Dict[str, Tuple[str, float]] = {}
    for r in a.ranks:
        for k in r.top_kernels:
            kind, t = totals.get(k.name, (k.kernel_type, 0.0))
            totals[k.name] = (kind, _bounded(t + k.total_us))
    return totals


def _kernel_deltas(kb: Dict[str, Tuple[str, float]], kn: Dict[str, Tuple[str, float]]) -> List[KernelDelta]:
    """One delta per kernel, template-argument variants grouped (see :class:`KernelDelta`)."""
    groups: Dict[str, List[str]] = {}
    for n in sorted(set(kb) | set(kn)):
        groups.setdefault(family(n), []).append(n)
    out = []
    for key, members in groups.items():
        variants = sorted((KernelVariant(name=n, base_us=kb.get(n, ("", 0.0))[1], new_us=kn.get(n, ("", 0.0))[1])
                           for n in members), key=lambda v: (-abs(v.new_us - v.base_us), v.name))
        b, n_us = _bounded(sum(v.base_us for v in variants)), _bounded(sum(v.new_us for v in variants))
        first = members[0]  # in kb or kn: members come from their keys
        kind = kb[first][0] if first in kb else kn[first][0]
        if len(variants) == 1:
            out.append(KernelDelta(name=first, kernel_type=kind, base_us=b, new_us=n_us,
                                   delta_us=_bounded(n_us - b)))
        else:
            out.append(KernelDelta(name=key, kernel_type=kind, base_us=b, new_us=n_us, delta_us=_bounded(n_us - b),
                                   variants=variants))
    return out


def _cpu_op_times(a: AnalysisResult) -> Dict[str, float]:
    """Each host op's self time per analyzed step (µs), the mean over the
    ranks whose CPU-side step ran, from the ops each rank lists (0 where a
    rank does not list it)."""
    ranks = [r for r in a.ranks if not r.failed(CPU_SIDE_STEP)]
    totals: Dict[str, float] = {}
    for r in ranks:
        steps = max(r.cpu.steps_used, 1)  # 0: no ProfilerStep, the trace was the one window
        for o in r.cpu.top_ops:
            totals[o.name] = _bounded(totals.get(o.name, 0.0) + o.self_us / steps)
    return {n: _bounded(t / len(ranks)) for n, t in totals.items()}


def cpu_op_deltas(base: AnalysisResult, new: AnalysisResult, top: int = 10) -> List[CpuOpDelta]:
    """The ``top`` host ops whose self time per step changed most (see
    :class:`hta_report.model.CpuOpDelta`), largest change first; ops whose
    time did not change are left out."""
    tb, tn = _cpu_op_times(base), _cpu_op_times(new)
    deltas = [CpuOpDelta(name=n, base_us=tb.get(n, 0.0), new_us=tn.get(n, 0.0),
                         delta_us=_bounded(tn.get(n, 0.0) - tb.get(n, 0.0))) for n in sorted(set(tb) | set(tn))]
    return sorted((d for d in deltas if d.delta_us != 0), key=lambda d: (-abs(d.delta_us), d.name))[:top]


def _gpu_runtime(a: AnalysisResult) -> Optional[str]:
    """``CUDA 12.4`` / ``HIP 6.4.43483`` from the traces, else the build the
    PyTorch version names; None when nothing says (see :class:`SideInfo`)."""
    found = set()
    for f in a.inventory.files:
        if f.cuda_runtime_version:
            v = f.cuda_runtime_version
            found.add(f"CUDA {v // 1000}.{v % 1000 // 10}")
        if f.hip_runtime_version:
            v = f.hip_runtime_version
            found.add(f"HIP {v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}")
    if found:
        return ", ".join(sorted(found))
    torch = a.inventory.pytorch_version or ""
    cuda, rocm = _TORCH_CUDA.search(torch), _TORCH_ROCM.search(torch)
    if cuda:
        return f"CUDA {cuda.group(1)[:-1]}.{cuda.group(1)[-1]}"
    if rocm:
        return f"ROCm {rocm.group(1)}"
    return None


def _manifest_devices(manifest: Dict[str, Any], gpu: bool) -> List[str]:
    """The devices ``manifest.json`` lists (``device_names``): its GPUs (or,
    for a CPU-only side, its CPU) without the ``cuda:0:`` or ``cpu:`` prefix;
    a name of another shape is kept whole."""
    listed = manifest.get("device_names")
    if not isinstance(listed, list):
        return []
    gpus: List[str] = []
    cpus: List[str] = []
    other: List[str] = []
    for d in listed:
        if not isinstance(d, str) or not d:
            continue
        m = _MANIFEST_DEVICE.fullmatch(d)
        if m is None:
            other.append(d)
        else:
            (cpus if m.group(1) == "cpu" else gpus).append(m.group(2))
    return sorted(set((gpus or other) if gpu else (cpus or other)))


def side_info(a: AnalysisResult, label: str) -> SideInfo:
    """What ``a`` ran on (:class:`hta_report.model.SideInfo`), from its
    inventory (the traces' headers) and ``manifest.json``."""
    inv = a.inventory
    manifest = inv.manifest if isinstance(inv.manifest, dict) else {}
    gpu = any(r.has_gpu for r in a.ranks)
    devices, source = list(inv.devices), "traces"
    if not devices:
        devices, source = _manifest_devices(manifest, gpu), "manifest.json"
    world = max((f.world_size for f in inv.files if f.world_size), default=0)
    listed_world = manifest.get("world_size")
    if not world and isinstance(listed_world, int) and not isinstance(listed_world, bool) and listed_world > 0:
        world = listed_world
    return SideInfo(label=label, gpu=gpu, devices=devices, devices_from=source if devices else "",
                    world_size=world or None, ranks=sorted(r.rank for r in a.ranks),
                    torch_version=inv.pytorch_version or None, gpu_runtime=_gpu_runtime(a))


def _devices_words(s: SideInfo) -> str:
    names = ", ".join(s.devices)
    if s.gpu:
        return names or "a GPU whose model is not recorded"
    return f"CPU only: {names}" if names else "CPU only"


def differences(b: SideInfo, n: SideInfo) -> List[str]:
    """One sentence per way the two sides' set-ups differ, base first: the
    devices (or GPU against CPU only), the world size, the ranks analyzed, the
    PyTorch version, the GPU runtime. What a side does not record is not
    compared."""
    out = []
    if b.gpu != n.gpu or (b.devices and n.devices and b.devices != n.devices):
        out.append(f"The sides ran on different devices ({_devices_words(b)} vs {_devices_words(n)}): "
                   "the change measures the hardware too.")
    if b.world_size and n.world_size and b.world_size != n.world_size:
        out.append(f"The sides ran with different world sizes ({b.world_size} vs {n.world_size} ranks): "
                   "each rank's share of the work and its communication differ.")
    if b.ranks and n.ranks and b.ranks != n.ranks:
        out.append(f"The sides analyzed different ranks ({'rank' if len(b.ranks) == 1 else 'ranks'} "
                   f"{rank_ranges(b.ranks)} vs {'rank' if len(n.ranks) == 1 else 'ranks'} {rank_ranges(n.ranks)}): "
                   "ranks of one job may do different work.")
    if b.torch_version and n.torch_version and b.torch_version != n.torch_version:
        out.append(f"The sides ran different PyTorch versions ({b.torch_version} vs {n.torch_version}): "
                   "the change measures the software too.")
    if b.gpu_runtime and n.gpu_runtime and b.gpu_runtime != n.gpu_runtime:
        out.append(f"The sides ran different GPU runtimes ({b.gpu_runtime} vs {n.gpu_runtime}): "
                   "the change measures the software too.")
    return out


def compare(base: AnalysisResult, new: AnalysisResult, base_label: str = "base", new_label: str = "new",
            top_kernels: int = 15, top_cpu_ops: int = 10, alpha: float = compare_stats.DEFAULT_ALPHA,
            threshold_pct: float = compare_stats.DEFAULT_THRESHOLD_PCT) -> Comparison:
    """Compare two results (see :class:`hta_report.model.Comparison` for the verdict rule).

    The verdict is the noise band's. Where every compared rank of both sides
    carries instance samples, ``stats`` holds
    :func:`hta_report.compare_stats.stat_test` at false-discovery rate
    ``alpha`` and step threshold ``threshold_pct`` (%), its own verdict in
    ``stats.verdict``; otherwise ``stats.method`` is ``noise band`` and
    ``stats.why`` says which side lacks them.

    Kernel deltas use each side's top 50 kernels per rank by total time (what
    the result model keeps), summed over ranks, template-argument variants of
    one kernel grouped (:func:`hta_report.names.family`), ordered by |delta|;
    kernels whose total did not change are left out. Host op deltas
    (:func:`cpu_op_deltas`) are per step, as the sides' step counts may differ.
    ``sides`` and ``differences``: :func:`side_info`, :func:`differences`.
    """
    ob, on = _overall(base), _overall(new)
    overall = [_delta(name, ob[name][0] if ob[name][0] == "ms" else "pp", ob[name][1], on[name][1])
               for name in ob if name in on]

    base_ranks = {r.rank: r for r in base.ranks}
    new_ranks = {r.rank: r for r in new.ranks}
    pairs = [(r, r) for r in sorted(set(base_ranks) & set(new_ranks))]
    if not pairs and len(base_ranks) == 1 and len(new_ranks) == 1:
        pairs = [(next(iter(base_ranks)), next(iter(new_ranks)))]  # one rank each: pair them
    ranks = []
    for rank, new_rank in pairs:
        mb = dict((n, (u, v)) for n, u, v in _rank_metrics(base_ranks[rank]))
        mn = dict((n, (u, v)) for n, u, v in _rank_metrics(new_ranks[new_rank]))
        ranks.append(RankComparison(rank=rank, new_rank=new_rank, metrics=[
            _delta(n, mb[n][0] if mb[n][0] == "ms" else "pp", mb[n][1], mn[n][1]) for n in mb if n in mn]))

    kernels = sorted((k for k in _kernel_deltas(_kernel_totals(base), _kernel_totals(new)) if k.delta_us != 0),
                     key=lambda k: (-abs(k.delta_us), k.name))[:top_kernels]

    ids_b = {f.id: f for f in base.findings}
    ids_n = {f.id: f for f in new.findings}

    band = max(MIN_NOISE_BAND_PCT, step_variation_pct(base), step_variation_pct(new))
    (sb, paced_b), (sn, paced_n) = time_per_step(base), time_per_step(new)
    if paced_b or paced_n:
        overall.insert(0, _delta(PACED_STEP_METRIC, "ms", sb / 1e3, sn / 1e3))
    if sb > 0 and sn > 0:
        change = _bounded(100 * (sn - sb) / sb)
        verdict = "regressed" if change > band else "improved" if change < -band else "unchanged"
    else:
        change, verdict = 0.0, "not comparable"
    rb, rn = [base_ranks[p[0]] for p in pairs], [new_ranks[p[1]] for p in pairs]
    missing = [label for label, rs in ((base_label, rb), (new_label, rn)) if not compare_stats.has_samples(rs)]
    if verdict == "not comparable":
        stats = compare_stats.fallback("no ProfilerStep on a side", threshold_pct, alpha)
    elif missing:
        stats = compare_stats.fallback(f"{' and '.join(missing)} carries none; saved by an older hta-report "
                                       "or without paired ranks", threshold_pct, alpha)
    else:  # beside the band's verdict, not in its place (docs/COMPARE.md: it did not beat the band on real pairs)
        stat_verdict, stats = compare_stats.stat_test(rb, rn, sb, bool(paced_b or paced_n), alpha, threshold_pct)
        stats.verdict = stat_verdict
    sides = [side_info(base, base_label), side_info(new, new_label)]
    return Comparison(
        base_label=base_label, new_label=new_label, verdict=verdict, noise_band_pct=band,
        step_time_change_pct=change, base_step_us=sb, new_step_us=sn, base_paced_ranks=paced_b,
        new_paced_ranks=paced_n, overall=overall, ranks=ranks,
        ranks_only_base=sorted(set(base_ranks) - {p[0] for p in pairs}),
        ranks_only_new=sorted(set(new_ranks) - {p[1] for p in pairs}),
        kernels=kernels,
        findings_appeared=[f for i, f in ids_n.items() if i not in ids_b],
        findings_gone=[f for i, f in ids_b.items() if i not in ids_n],
        findings_kept=sorted(set(ids_b) & set(ids_n)),
        base=base, new=new,
        sides=sides, differences=differences(*sides), cpu_ops=cpu_op_deltas(base, new, top_cpu_ops),
        stats=stats,
    )
