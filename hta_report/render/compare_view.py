"""The view of a :class:`~hta_report.model.Comparison`: typed, display-ready rows.

:func:`context` builds a :class:`ComparisonView` once; the compare page
(``templates/compare.html.j2``: it only reads, loops and tests) and the
markdown comparison both show it; the terminal summary shows its rows of
what each side ran on (:func:`side_rows`) and of CPU ops (:func:`cpu_op_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..model import (PACED_STEP_METRIC, AnalysisResult, Comparison, CpuOpDelta, ItemChange, KernelDelta, MetricDelta,
                     SideInfo, StatTest)
from ..names import rank_ranges, short_name, short_names
from . import fmt

#: Percentage-point moves smaller than this are left out of "biggest changes".
MIN_CHANGE_PP = 1.0
#: Rows of "biggest changes" (the mean step time comes first, on top of these).
BIGGEST_CHANGES = 6
#: Kernels named under "biggest changes".
BIGGEST_KERNELS = 3
#: CPU ops named under "biggest changes" when no kernel changed (CPU runs).
BIGGEST_CPU_OPS = 3
#: The page's label of a compared metric (:attr:`MetricDelta.name`) where the
#: name alone shares a word with another figure of another definition: the
#: host's own time in sync calls is not the GPU idle a sync-in-step finding
#: counts (a sync share +18.5 pp beside "went away: host-device
#: synchronization" read as a contradiction; issue 55). Others show as named.
METRIC_LABELS = {"sync share of step": "host in sync calls, % of step",
                 "DataLoader share of step": "host in DataLoader, % of step"}


def metric_label(name: str) -> str:
    """The label a compared metric is shown under (:data:`METRIC_LABELS`, else its name)."""
    return METRIC_LABELS.get(name, name)
#: CPU ops each rank lists (:attr:`hta_report.model.CpuSide.top_ops`).
CPU_OPS_LISTED = 15


@dataclass(frozen=True)
class MetricRow:
    """One metric: its ``name``, ``base`` and ``new`` values and their
    ``change``; ``where`` (biggest changes only) says where it moved most
    (``mean over ranks``, ``rank 3 → rank 1``, or empty)."""

    name: str
    base: str
    new: str
    change: str
    where: str = ""


@dataclass(frozen=True)
class VariantRow:
    """One template variant of a kernel: its ``name`` (what sets it apart), ``full`` name and totals."""

    name: str
    full: str
    base: str
    new: str
    change: str


@dataclass(frozen=True)
class KernelChangeRow:
    """A kernel (or a group of its template ``variants``) whose total time
    changed: ``name`` shortened (``shortened``), ``full`` for hover, ``type``,
    totals and ``change``; ``note`` says ``new``, ``gone`` or how many variants."""

    name: str
    full: str
    shortened: bool
    type: str
    base: str
    new: str
    change: str
    variants: Tuple[VariantRow, ...]
    note: str


@dataclass(frozen=True)
class ItemRow:
    """A significant item (or one on one side only) of the statistical test
    (:class:`~hta_report.model.ItemChange`): ``kind`` in words, ``name``
    (shortened, ``full`` for hover), ``shape`` (``""`` where not recorded),
    time per step on each side, ``change`` (µs per step with its interval),
    ``pct`` (% of its mean duration with its interval, ``""`` for one side
    only), ``q`` (the adjusted p-value, ``""`` for one side only) and
    ``status`` (``changed``, ``appeared``, ``disappeared``)."""

    kind: str
    name: str
    full: str
    shape: str
    base: str
    new: str
    change: str
    pct: str
    q: str
    status: str


@dataclass(frozen=True)
class CpuOpRow:
    """A host op whose self time per step changed: its ``name`` (whole), self
    time per step on each side and ``change``; ``note`` says ``only in base``
    or ``only in new`` (the other side does not list it among its ops with
    the most self time)."""

    name: str
    base: str
    new: str
    change: str
    note: str


@dataclass(frozen=True)
class SideRow:
    """What one side ran on: ``role`` (``base`` or ``new``) and ``label``;
    ``devices`` the device names (each shown as a name), ``devices_text``
    them joined or what is known without them (``CPU only``, ``GPU model not
    recorded``), ``devices_note`` where they come from when not from the
    traces (``from manifest.json``); ``ranks`` (``rank 3 of 8``), ``torch``
    (``PyTorch 2.4.0``, ``PyTorch not recorded``) and ``runtime`` (``CUDA
    12.4``, ``CUDA/ROCm not recorded``; empty on a CPU-only side that names
    none); ``line`` all of it in one line (``NVIDIA H100, rank 0 of 1,
    PyTorch 2.4.0, CUDA 12.4``); ``cpu_only``: no rank has GPU activity."""

    role: str
    label: str
    cpu_only: bool
    devices: Tuple[str, ...]
    devices_text: str
    devices_note: str
    ranks: str
    torch: str
    runtime: str
    line: str


@dataclass(frozen=True)
class FindingChange:
    """A finding that appeared or went away."""

    id: str
    title: str
    severity: str


@dataclass(frozen=True)
class RankChanges:
    """The metrics of one rank pair (``label``: ``rank 0`` or ``rank 3 → rank 1``)."""

    label: str
    rows: Tuple[MetricRow, ...]


@dataclass(frozen=True)
class ComparisonView:
    """Everything the compare page and the markdown comparison show, formatted."""

    base_label: str
    new_label: str
    base_name: str
    new_name: str
    verdict: str
    verdict_text: str
    #: the statistical test's verdict and interval in one sentence, "" for the noise band alone
    stat_text: str
    noise_band: str
    sides: Tuple[SideRow, ...]
    differences: Tuple[str, ...]
    biggest: Tuple[MetricRow, ...]
    min_change: str
    nothing_else: str
    biggest_kernels: Tuple[KernelChangeRow, ...]
    biggest_cpu_ops: Tuple[CpuOpRow, ...]
    cpu_ops: Tuple[CpuOpRow, ...]
    cpu_ops_note: str
    no_cpu_ops: str
    overall: Tuple[MetricRow, ...]
    ranks: Tuple[RankChanges, ...]
    only_base: str
    only_new: str
    kernels: Tuple[KernelChangeRow, ...]
    no_kernels: str
    appeared: Tuple[FindingChange, ...]
    gone: Tuple[FindingChange, ...]
    kept: Tuple[str, ...]
    statistical: bool = False
    test_text: str = ""
    step_text: str = ""
    environment_text: str = ""
    environment_named: bool = False
    stat_note: str = ""
    items: Tuple[ItemRow, ...] = ()
    no_items: str = ""


def _value(unit: str, v: float) -> str:
    return f"{fmt.fixed(v, 2)} ms" if unit == "ms" else fmt.pct(v)


def _change(m: MetricDelta) -> str:
    """``+42.35 ms (+54.9 %)`` or ``+18.5 pp``; a no-break space ties each
    number to its unit, so a narrow column wraps only between the two."""
    if m.unit == "ms":
        return (f"{fmt.fixed(round(m.delta, 2) + 0.0, 2, sign=True)}\u00a0ms "
                f"({fmt.fixed(round(m.delta_pct, 1) + 0.0, 1, sign=True, grouped=False)}\u00a0%)")
    return f"{fmt.fixed(round(m.delta, 1) + 0.0, 1, sign=True, grouped=False)}\u00a0pp"  # + 0.0: -0.0 is 0.0


def metric_rows(metrics: Sequence[MetricDelta]) -> Tuple[MetricRow, ...]:
    """Rows of metric, base, new, change."""
    return tuple(MetricRow(name=metric_label(m.name), base=_value(m.unit, m.base), new=_value(m.unit, m.new),
                           change=_change(m))
                 for m in metrics)


def _rank_label(rank: int, new_rank: int) -> str:
    return f"rank {rank}" if rank == new_rank else f"rank {rank} → rank {new_rank}"


def biggest_changes(c: Comparison) -> Tuple[MetricRow, ...]:
    """The metrics that moved most, ranked, for the top of the page: the mean
    step time first (the verdict's figure), then up to
    :data:`BIGGEST_CHANGES` percentage metrics by the size of their move
    (at least :data:`MIN_CHANGE_PP` percentage points). Each metric is shown
    once, where it moved most: over all ranks, or on one rank (``where``),
    so a move only one rank shows (sync share 8.2 → 26.7 %) is not hidden
    in a per-rank table."""
    best: Dict[str, Tuple[MetricDelta, str]] = {}
    many = len(c.ranks) > 1
    for m in c.overall:
        best[m.name] = (m, "mean over ranks" if many else "")
    for r in c.ranks:
        for m in r.metrics:
            if m.unit == "ms":
                continue
            held = best.get(m.name)
            if held is None or abs(m.delta) > abs(held[0].delta) + 1e-9:
                best[m.name] = (m, _rank_label(r.rank, r.new_rank) if (many or held is None) else "")
    rows = []
    for name in (PACED_STEP_METRIC, "mean step time"):  # the verdict's figure first
        step = best.pop(name, None)
        if step is not None and c.verdict != "not comparable":
            rows.append(step)
    moved = sorted((v for v in best.values() if v[0].unit != "ms" and abs(v[0].delta) >= MIN_CHANGE_PP),
                   key=lambda v: (-abs(v[0].delta), v[0].name))
    rows += moved[:BIGGEST_CHANGES]
    return tuple(MetricRow(name=metric_label(m.name), where=where, base=_value(m.unit, m.base), new=_value(m.unit, m.new),
                           change=_change(m)) for m, where in rows)


def _kernel_change(k_delta_us: float) -> str:
    return ("+" if k_delta_us >= 0 else "−") + fmt.ms(abs(k_delta_us))


def kernel_rows(kernels: Sequence[KernelDelta]) -> Tuple[KernelChangeRow, ...]:
    """The kernels whose total time changed most, with short names distinct
    among the rows (:func:`hta_report.names.short_names`; ``full`` for hover)
    and, for a group of template variants, each variant with its own totals,
    named by what sets it apart (``…<5ul>``)."""
    labels = short_names([k.name for k in kernels])
    rows: List[KernelChangeRow] = []
    for k in kernels:
        base = short_name(k.name)
        variant_labels = {n: "…" + label[len(base):] if label.startswith(base + "<") else label
                          for n, label in short_names([v.name for v in k.variants]).items()}
        rows.append(KernelChangeRow(
            name=labels[k.name], full=(f"template variants of {k.name}" if k.variants else k.name),
            shortened=labels[k.name] != k.name, type=k.kernel_type,
            base=fmt.ms(k.base_us), new=fmt.ms(k.new_us), change=_kernel_change(k.delta_us),
            variants=tuple(VariantRow(name=variant_labels[v.name], full=v.name, base=fmt.ms(v.base_us),
                                      new=fmt.ms(v.new_us), change=_kernel_change(v.new_us - v.base_us))
                           for v in k.variants),
            note=(f"{len(k.variants)} template variants" if k.variants else
                  "new" if k.base_us == 0 else "gone" if k.new_us == 0 else ""),
        ))
    return tuple(rows)


def cpu_op_rows(ops: Sequence[CpuOpDelta]) -> Tuple[CpuOpRow, ...]:
    """The host ops whose self time per step changed most, as rows."""
    return tuple(CpuOpRow(name=o.name, base=fmt.ms(o.base_us), new=fmt.ms(o.new_us), change=_kernel_change(o.delta_us),
                          note="only in new" if o.base_us == 0 else "only in base" if o.new_us == 0 else "")
                 for o in ops)


def _ranks_text(s: SideInfo) -> str:
    ranks = f"{'rank' if len(s.ranks) == 1 else 'ranks'} {rank_ranges(s.ranks)}" if s.ranks else "no rank"
    return f"{ranks} of {s.world_size}" if s.world_size else f"{ranks} (world size not recorded)"


def side_rows(c: Comparison) -> Tuple[SideRow, ...]:
    """What each side ran on (:attr:`Comparison.sides`), base first; none for
    a comparison saved before they were recorded."""
    rows = []
    for role, s in zip(("base", "new"), c.sides):
        names = ", ".join(s.devices)
        text = (names or "GPU model not recorded") if s.gpu else (f"CPU only: {names}" if names else "CPU only")
        note = f"from {s.devices_from}" if s.devices and s.devices_from != "traces" else ""
        torch = f"PyTorch {s.torch_version}" if s.torch_version else "PyTorch not recorded"
        runtime = s.gpu_runtime or ("CUDA/ROCm not recorded" if s.gpu else "")
        ranks = _ranks_text(s)
        line = ", ".join(x for x in (text + (f" ({note})" if note else ""), ranks, torch, runtime) if x)
        rows.append(SideRow(role=role, label=s.label, cpu_only=not s.gpu, devices=tuple(s.devices),
                            devices_text=text, devices_note=note,
                            ranks=ranks, torch=torch, runtime=runtime, line=line))
    return tuple(rows)


def verdict_figure(c: Comparison) -> str:
    """What the verdict compares, in words: "mean step time", or, where a
    side's host ran ahead of its GPU (:func:`hta_report.compare.time_per_step`),
    the time per step counting the GPU work, the sides and ranks named
    ("time per step counting the GPU work where the host ran ahead of it
    (new: 1 of 1 rank; 24.06 ms → 15.36 ms)": a 64 MiB batch pinned on an
    H200)."""
    if not (c.base_paced_ranks or c.new_paced_ranks):
        return "mean step time"

    def ranks(side: Optional[AnalysisResult], n: int) -> str:
        total = len(side.ranks) if side is not None else 0
        return f"{n} of {total} rank{'s' if total != 1 else ''}" if total else f"{n} rank{'s' if n != 1 else ''}"
    where = "; ".join(f"{role}: {ranks(side, n)}" for role, side, n in
                      (("base", c.base, c.base_paced_ranks), ("new", c.new, c.new_paced_ranks)) if n)
    return (f"time per step counting the GPU work where the host ran ahead of it ({where}; "
            f"{fmt.ms(c.base_step_us)} → {fmt.ms(c.new_step_us)})")


_KINDS = {"kernel": "kernel", "memcpy": "GPU copy", "cpu_op": "host op"}


def _signed_us(x: float) -> str:
    return ("+" if x >= 0 else "−") + fmt.ms(abs(x))


def _pct(x: float) -> str:
    return f"{fmt.fixed(round(x, 1) + 0.0, 1, sign=True, grouped=False)}\u00a0%"


def item_rows(items: Sequence[ItemChange]) -> Tuple[ItemRow, ...]:
    """The statistical test's listed items (:attr:`StatTest.items`) as rows."""
    labels = short_names([i.name for i in items])
    rows = []
    for i in items:
        one_side = i.status != "changed"
        rows.append(ItemRow(
            kind=_KINDS.get(i.kind, i.kind), name=labels[i.name], full=i.name, shape=i.shape,
            base=fmt.ms(i.base_us_per_step), new=fmt.ms(i.new_us_per_step),
            change=(f"{_signed_us(i.us_per_step)} [{_signed_us(i.us_per_step_low)}, {_signed_us(i.us_per_step_high)}]"
                    if not (one_side and i.us_per_step_low == i.us_per_step_high) else _signed_us(i.us_per_step)),
            pct="" if one_side else f"{_pct(i.change_pct)} [{_pct(i.change_pct_low)}, {_pct(i.change_pct_high)}]",
            q="" if one_side else f"{i.q_value:.2g}", status=i.status))
    return tuple(rows)


def interval_text(s: StatTest) -> str:
    """``+3.2 % [+2.1, +4.4]``: the step change after the environment factor and its interval."""
    return (f"{fmt.fixed(s.change_pct, 1, sign=True, grouped=False)} % "
            f"[{fmt.fixed(s.change_pct_low, 1, sign=True, grouped=False)}, "
            f"{fmt.fixed(s.change_pct_high, 1, sign=True, grouped=False)}]")


def test_text(s: StatTest) -> str:
    """How the verdict was tested, in one sentence (empty for the noise band)."""
    if s.method != "statistical":
        return ""
    return (f"{s.test} per item, Benjamini-Hochberg false-discovery rate α = {s.alpha:g}: {s.items_tested} items "
            f"tested, {s.items_significant} significant.")


def step_text(s: StatTest) -> str:
    """How the step change and its interval were taken, in one sentence (empty for the noise band)."""
    if s.method != "statistical":
        return ""
    how = {"steps": f"the analyzed steps as samples ({s.base_samples} base, {s.new_samples} new)",
           "items": f"the items ({s.base_samples} base and {s.new_samples} new instances)"}.get(
        s.step_method, "none: too few samples")
    return (f"Step change from {how}; {100 * s.confidence:g} % bootstrap intervals; "
            f"threshold ±{fmt.fixed(s.threshold_pct, 1, grouped=False)} %.")


def environment_text(s: StatTest) -> str:
    """The environment factor in words; empty where it was not estimated."""
    if s.method != "statistical" or not s.environment_items:
        return ""
    f = (f"×{s.environment_factor:.3f} [{s.environment_low:.3f}, {s.environment_high:.3f}] "
         f"(median over {s.environment_items} items)")
    raw = fmt.fixed(s.raw_change_pct, 1, sign=True, grouped=False)
    if s.environment_named:
        return (f"Environment: every item ran {f} on new alike: the machine (load, clocks, another process), "
                f"not the code. Divided out before the statistical test (before it: {raw} %).")
    return f"No environment shift beyond the threshold: items ran {f} on new; divided out before the statistical test."


def _spans(s: StatTest) -> bool:
    """Whether the step change's interval spans the threshold (neither beyond nor within ±it)."""
    t = s.threshold_pct
    return bool(s.step_method) and not (s.change_pct_low > t or s.change_pct_high < -t
                                        or (s.change_pct_low >= -t and s.change_pct_high <= t))


def context(c: Comparison) -> ComparisonView:
    """Everything the compare template and markdown show, formatted."""
    change = fmt.fixed(c.step_time_change_pct, 1, sign=True, grouped=False)
    band = fmt.fixed(c.noise_band_pct, 1, grouped=False)
    what = verdict_figure(c)
    st = c.stats
    stat_text = ""
    if st.method == "statistical":
        ci, thr = interval_text(st), fmt.fixed(st.threshold_pct, 1, grouped=False)
        stat_text = {
            "improved": f"faster: {what} {ci}, the whole interval below −{thr} %",
            "regressed": f"slower: {what} {ci}, the whole interval above +{thr} %",
            "unchanged": f"{what} {ci}, within ±{thr} %",
            "inconclusive": (f"{what} {ci}: the interval spans the ±{thr} % threshold" if _spans(st)
                             else f"{what} {ci}: {st.note}" if st.step_method
                             else f"{what} {change} %: {st.note}"),
        }.get(st.verdict, "")
        stat_text = f"Statistical test: {st.verdict}, {stat_text}" if stat_text else ""
    # the headline is the noise band's (docs/COMPARE.md: the test did not beat it on real fix pairs)
    verdict_text = {
        "improved": f"faster: {what} {change} %, beyond the ±{band} % noise band",
        "regressed": f"slower: {what} {change} %, beyond the ±{band} % noise band",
        "unchanged": f"{what} {change} %, within the ±{band} % noise band",
        "inconclusive": f"{what} {change} %",
        "not comparable": "no ProfilerStep annotations on one side: step times cannot be compared",
    }[c.verdict]
    kernels = kernel_rows(c.kernels)
    biggest = biggest_changes(c)
    cpu_ops = cpu_op_rows(c.cpu_ops)
    return ComparisonView(
        base_label=c.base_label, new_label=c.new_label,
        base_name=fmt.run_name(c.base_label), new_name=fmt.run_name(c.new_label),
        verdict=c.verdict, verdict_text=verdict_text, stat_text=stat_text,
        noise_band=fmt.pct(c.noise_band_pct),
        sides=side_rows(c),
        differences=tuple(c.differences),
        biggest=biggest,
        min_change=f"{MIN_CHANGE_PP:g} pp",
        nothing_else=(f"No {'other ' if biggest else ''}metric moved by {MIN_CHANGE_PP:g} pp or more."
                      if len(biggest) <= (1 if c.verdict != "not comparable" else 0) else ""),
        biggest_kernels=kernels[:BIGGEST_KERNELS],
        biggest_cpu_ops=() if kernels else cpu_ops[:BIGGEST_CPU_OPS],
        cpu_ops=cpu_ops,
        cpu_ops_note=(f"Self time per analyzed step (time in the op itself, not in the ops it calls), mean over "
                      f"ranks, of each rank's {CPU_OPS_LISTED} ops with the most self time: an op a side does not "
                      "list (only in base, only in new) counts 0 there."),
        no_cpu_ops=("No CPU op on either side." if not any(
            r.cpu.top_ops for side in (c.base, c.new) if side is not None for r in side.ranks)
            else "No CPU op's time per step changed."),
        overall=metric_rows(c.overall),
        ranks=tuple(RankChanges(label=_rank_label(r.rank, r.new_rank), rows=metric_rows(r.metrics)) for r in c.ranks),
        only_base=", ".join(str(r) for r in c.ranks_only_base),
        only_new=", ".join(str(r) for r in c.ranks_only_new),
        kernels=kernels,
        no_kernels=("No GPU kernels on either side." if not any(
            r.top_kernels for side in (c.base, c.new) if side is not None for r in side.ranks)
            else "No kernel's total time changed."),
        appeared=tuple(FindingChange(id=f.id, title=f.title, severity=f.severity) for f in c.findings_appeared),
        gone=tuple(FindingChange(id=f.id, title=f.title, severity=f.severity) for f in c.findings_gone),
        kept=tuple(c.findings_kept),
        statistical=st.method == "statistical",
        test_text=test_text(st),
        step_text=step_text(st),
        environment_text=environment_text(st),
        environment_named=st.environment_named,
        stat_note=st.note[:1].upper() + st.note[1:],
        items=item_rows(st.items),
        no_items=("No item changed significantly, and none ran on one side only." if st.method == "statistical"
                  else ""),
    )
