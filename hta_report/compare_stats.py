"""The statistical test of a comparison: one trace per side, tested item by item.

A pure function of the two sides' ranks (:func:`stat_test`), called by
:func:`hta_report.compare.compare`, which keeps the noise band's verdict as
the headline and stores this one in ``StatTest.verdict`` beside it
(docs/COMPARE.md: on the recorded pairs it did not beat the band on real fix
pairs). It reads the per-instance samples each
rank carries (:class:`~hta_report.model.InstanceSamples`) and the analyzed
``ProfilerStep`` durations, and returns a verdict and a
:class:`~hta_report.model.StatTest` (docs/COMPARE.md says the same in prose):

1. **Environment factor.** For every item (kernel, copy, host op) with at
   least :data:`MIN_INSTANCES` instances on both sides, the ratio of its mean
   durations new / base. A load, clock or thermal shift scales every item
   alike; the median of the log ratios over items (at least
   :data:`MIN_ENV_ITEMS`) is that factor, with a percentile bootstrap
   interval over items (:data:`BOOTSTRAP` resamples). The new side is divided
   by it; it is *named* when its interval lies beyond ±threshold.
2. **Items.** Each item's p-value is the largest of: the Mann-Whitney U test
   (``scipy.stats.mannwhitneyu``, two-sided) of its durations after the
   factor, the same test before it (in the same direction, else 1), and a
   z-test of its log ratio against the factor whose variance adds the items'
   spread around the factor beyond their own noise (weighted by time per
   step). Then the Benjamini-Hochberg adjustment over all items tested
   (``scipy.stats.false_discovery_control``, Benjamini & Hochberg 1995): an
   item is significant when its q-value is below α. Each one's effect, as %
   of its mean duration and as µs per step, has a bootstrap percentile
   interval (resampled within each mode of its durations, :func:`_modes`).
   Items kept on one side only are *appeared* / *disappeared*.
3. **Step.** Where the items' spread exceeds :data:`MAX_SPREAD_PCT`, no
   single factor describes the machine: ``inconclusive``. Otherwise the step
   change after the factor, with its interval: the analyzed steps as samples
   when both sides have :data:`MIN_STEPS` of them and no rank's host ran
   ahead of its GPU, where their interval is decisive; else the per-step sum
   of every item's change (GPU kernels and copies where a side has them, host
   ops' self time otherwise), bootstrapped, as % of the base step.
   ``regressed`` needs the whole interval above +threshold, ``improved``
   below −threshold, ``unchanged`` within ±threshold; anything else is
   ``inconclusive``. Two sides holding the same samples are ``unchanged``.

Every resample uses one seeded generator: the same inputs give the same verdict.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from .model import ItemChange, RankResult, StatTest

#: The false-discovery rate the Benjamini-Hochberg procedure keeps over the items tested.
DEFAULT_ALPHA = 0.05
#: The level of every interval.
CONFIDENCE = 0.95
#: The smallest step change (%) a verdict calls a change: the noise band's floor
#: (:data:`hta_report.compare.MIN_NOISE_BAND_PCT`); ``compare --threshold`` changes it.
DEFAULT_THRESHOLD_PCT = 1.0
#: Instances per side an item needs to be tested: below 5 per side a two-sided
#: Mann-Whitney test cannot reach p < 0.01 at all (the smallest exact p of 4
#: against 4 is 2/70 = 0.029).
MIN_INSTANCES = 5
#: σ of a normal distribution per unit of median absolute deviation (as :data:`hta_report.compare.MAD_TO_SIGMA`).
MAD_TO_SIGMA = 1.482602218505602
#: Analyzed steps per side for the steps to be the samples of the step change.
#: Steps are few (a profiler schedule records 3-20) and each one carries
#: every preemption of its host: in A/A pairs recorded on the shared 2-core
#: machine of docs/COMPARE.md, 10 steps a side gave decisive intervals for
#: changes of -17 % to +40 % that were not there (the load changed between
#: the recordings). Below 20 the items decide (their hundreds of instances,
#: trimmed, are far less moved by preemption). Where the steps are enough,
#: they decide only where their interval is decisive (beyond or within
#: ±threshold); otherwise the items' sum does.
MIN_STEPS = 20
#: Items tested for an environment factor to be estimated (a median of fewer is one item's ratio).
MIN_ENV_ITEMS = 5
#: A duration more than this times the one below it starts a new mode of an item (:func:`_modes`).
MODE_GAP = 1.5
#: The least share of an item's durations a mode holds (:func:`_modes`).
MODE_MIN_SHARE = 0.05
#: Share of the base's critical path on the host (%, ``Replay.host_share_pct``) from which a GPU
#: rank's step is the host's: the statistical verdict is then ``inconclusive`` (docs/COMPARE.md,
#: third measurement: the GPU items' sum read a DataLoader fix of -75 % as unchanged, and the
#: host's speed moved host-bound steps by up to +58 % between two processes of the same code).
HOST_BOUND_PCT = 50.0
#: The item kinds that run on the GPU (:class:`~hta_report.model.InstanceSample`).
GPU_KINDS = ("kernel", "memcpy")
#: The largest items' spread around the environment factor (:attr:`StatTest.item_spread_pct`, %)
#: under which a verdict is given. In 18 A/A pairs recorded on the shared 2-core machine of
#: docs/COMPARE.md the spread ran from 1.8 % to 399 %; every false regressed/improved came with a
#: spread of 7.6 % or more (the load slowed the long multi-threaded GEMMs far more than the short
#: ops), which no single factor can take out. Set on those 18 pairs; docs/COMPARE.md gives the
#: rates on the 22 pairs recorded after them apart.
MAX_SPREAD_PCT = 5.0
#: The largest share of the weight one item holds in the items' spread: uncapped, an op holding
#: half the step that the change slowed (the injected regressions of docs/COMPARE.md) was its own
#: spread and widened every interval with its own change.
MAX_ITEM_WEIGHT = 0.1
#: Bootstrap resamples of every interval.
BOOTSTRAP = 1000
#: Items listed in :attr:`StatTest.items`.
TOP_ITEMS = 20
#: Instances per item and side the tests use, pooled over ranks (a deterministic even spread beyond it).
MAX_POOLED = 1024
_SEED = 20240552

Key = Tuple[str, str, str]


@dataclass
class _Item:
    """One item pooled over a side's ranks: its kept durations (µs), all its
    instances and the analyzed steps of the ranks that kept it."""

    durations: List[float] = field(default_factory=list)
    count: int = 0


@dataclass
class _Side:
    items: Dict[Key, _Item] = field(default_factory=dict)
    steps: int = 0
    step_us: List[float] = field(default_factory=list)
    #: per kind, the smallest time per step of a kept item when the rank kept its full quota, else 0
    cut_us: Dict[str, float] = field(default_factory=dict)


def has_samples(ranks: Sequence[RankResult]) -> bool:
    """Whether every rank of a side carries instance samples (``samples.steps`` > 0)."""
    return bool(ranks) and all(r.samples.steps > 0 for r in ranks)


def _pool(ranks: Sequence[RankResult]) -> _Side:
    from .model import SAMPLE_ITEMS
    side = _Side()
    for r in ranks:
        s = r.samples
        side.steps += s.steps
        side.step_us += [float(t.duration_us) for t in r.steps.steps if not t.warmup and math.isfinite(t.duration_us)
                         and t.duration_us > 0]
        per_kind: Dict[str, List[float]] = {}
        for it in s.items:
            key = (it.kind, it.name, it.shape)
            pooled = side.items.setdefault(key, _Item())
            pooled.durations += [d for d in it.durations_us if math.isfinite(d) and d >= 0]
            pooled.count += max(int(it.count), 0)
            per_kind.setdefault(it.kind, []).append(it.total_us / s.steps)
        for kind, per_step in per_kind.items():
            if len(per_step) >= SAMPLE_ITEMS:
                side.cut_us[kind] = max(side.cut_us.get(kind, 0.0), min(per_step))
    return side


def _spread(values: List[float]) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if len(a) > MAX_POOLED:
        a = a[np.round(np.linspace(0, len(a) - 1, MAX_POOLED)).astype(np.int64)]
    return a


def _interval(reps: np.ndarray) -> Tuple[float, float]:
    lo, hi = np.percentile(reps, [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)])
    return float(lo), float(hi)


def _modes(x: np.ndarray) -> List[np.ndarray]:
    """``x`` sorted and cut into its modes: where one duration is more than
    :data:`MODE_GAP` times the one below it, with at least
    max(3, :data:`MODE_MIN_SHARE` of them) on each side of a cut (fewer stay
    with their neighbours: one preempted instance is not a mode). One op name
    often covers several shapes (a layer's ``aten::mm`` of 50 µs and
    another's of 5 ms) in proportions its code fixes; each mode is one of them."""
    x = np.sort(x)
    least = max(3, int(math.ceil(MODE_MIN_SHARE * len(x))))
    cuts, last = [], 0
    with np.errstate(divide="ignore", invalid="ignore"):
        jumps = np.flatnonzero(x[1:] > MODE_GAP * np.maximum(x[:-1], 1e-9)) + 1
    for j in jumps:
        if j - last >= least and len(x) - j >= least:
            cuts.append(int(j))
            last = int(j)
    return np.split(x, cuts) if cuts else [x]


def _loc(x: np.ndarray) -> float:
    """The location of an item's durations: their mean (µs). A trimmed mean
    was tried and dropped: where one op name covers shapes of 50 µs and of
    9 ms, trimming cut the 9 ms instances on one side and kept them on the
    other, reading a 54 % change in an A/A pair."""
    return float(x.mean())


def _boot_means(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """``BOOTSTRAP`` resampled means of ``x``, each mode (:func:`_modes`)
    resampled within itself: the proportions of the shapes are the code's,
    fixed from step to step, and redrawing them would widen the interval by
    the spread between shapes, which the trace does not have; within a mode
    the resampling is the ordinary bootstrap (a preempted instance widens
    the interval of its item, as it should)."""
    total = np.zeros(BOOTSTRAP)
    for p in _modes(x):
        total += p[rng.integers(0, len(p), (BOOTSTRAP, len(p)))].sum(axis=1)
    return total / len(x)


def _numeric_order(item: _Item, key: Key) -> tuple:
    """The order items are tested and bootstrapped in: by their figures (instances, then
    durations), the key last, so that what the test draws and lists does not depend on the
    names a trace gives (a renamed trace gets the same verdict and the same rows)."""
    return (-item.count, tuple(item.durations), key)


def _part(kind: str) -> str:
    """The machine part an item's kind runs on: ``gpu`` (:data:`GPU_KINDS`) or ``host``."""
    return "gpu" if kind in GPU_KINDS else "host"


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    """The weighted median of ``x`` (the first value at which the cumulative weight reaches half)."""
    order = np.argsort(x)
    cum = np.cumsum(w[order])
    if not len(x) or cum[-1] <= 0:
        return float(np.median(x)) if len(x) else 0.0
    return float(x[order][np.searchsorted(cum, cum[-1] / 2)])


def _verdict(lo: float, hi: float, threshold: float) -> str:
    if lo > threshold:
        return "regressed"
    if hi < -threshold:
        return "improved"
    if lo >= -threshold and hi <= threshold:
        return "unchanged"
    return "inconclusive"


def stat_test(base: Sequence[RankResult], new: Sequence[RankResult], base_step_us: float, paced: bool,
         alpha: float = DEFAULT_ALPHA, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Tuple[str, StatTest]:
    """The statistical verdict of ``new`` against ``base`` (the compared ranks of each side).

    Args:
        base, new: the ranks compared, each carrying instance samples
            (:func:`has_samples`); pooled per side.
        base_step_us: the base side's time per step (µs,
            :func:`hta_report.compare.time_per_step`), the denominator of the
            items' sum.
        paced: whether a rank of either side ran its host ahead of the GPU
            (the steps are then not the samples: the items' sum is).
        alpha: the false-discovery rate (0 < alpha < 1).
        threshold_pct: the smallest step change (%) a verdict calls a change (≥ 0).

    Returns:
        ``(verdict, stats)``: ``improved``, ``regressed``, ``unchanged`` or
        ``inconclusive``, and how it was reached (:class:`StatTest`).
    """
    with np.errstate(all="ignore"):
        verdict, st = _stat_test(base, new, base_step_us, paced, alpha, threshold_pct)
    return verdict, _finite(st)


def _finite(st: StatTest) -> StatTest:
    """``st`` with every figure finite (a saved result may hold any finite
    duration, 1e308 included, whose sums overflow): NaN becomes 0 and an
    infinity the largest float of its sign, which JSON can hold."""
    import dataclasses
    import sys

    def bound(x: float) -> float:
        if math.isnan(x):
            return 0.0
        return x if math.isfinite(x) else math.copysign(sys.float_info.max, x)
    objects: List[Union[StatTest, ItemChange]] = [st, *st.items]
    for obj in objects:
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, float):
                setattr(obj, f.name, bound(v))
    return st


def _stat_test(base: Sequence[RankResult], new: Sequence[RankResult], base_step_us: float, paced: bool,
               alpha: float, threshold_pct: float) -> Tuple[str, StatTest]:
    """:func:`stat_test` before its figures are made finite."""
    from scipy.stats import false_discovery_control, mannwhitneyu, norm

    rng = np.random.default_rng(_SEED)
    b, n = _pool(base), _pool(new)
    st = StatTest(method="statistical", alpha=alpha, confidence=CONFIDENCE, threshold_pct=threshold_pct)
    if b.step_us == n.step_us and {k: v.durations for k, v in b.items.items()} == \
            {k: v.durations for k, v in n.items.items()}:
        st.step_method = "identical"
        st.note = "the two sides hold the same steps and instance samples (a result against itself)"
        return "unchanged", st
    both = sorted(set(b.items) & set(n.items), key=lambda k: _numeric_order(b.items[k], k))
    arrays = {k: (_spread(b.items[k].durations), _spread(n.items[k].durations)) for k in both}
    tested = [k for k in both if min(len(arrays[k][0]), len(arrays[k][1])) >= MIN_INSTANCES
              and _loc(arrays[k][0]) > 0 and _loc(arrays[k][1]) > 0]

    # 1. the environment factor: one per machine part, the host's CPU and the GPU (a loaded host and
    # the GPU's clocks move independently: on H200 A/A pairs host ops moved by several % between
    # processes while the GPU kernels held within 0.1 %); a part with fewer than MIN_ENV_ITEMS items
    # takes the factor of all items together
    logs = np.array([math.log(_loc(arrays[k][1]) / _loc(arrays[k][0])) for k in tested])
    gpu = bool({k[0] for k in both} & set(GPU_KINDS))
    step_part = "gpu" if gpu else "host"
    # a GPU rank whose step is the host's (most of the base's critical path on the host): its GPU
    # items measure the GPU's work, not the step, and its host's speed moves between recordings by more
    # than one trace a side can tell (H200 A/A pairs: host-bound ProfilerStep windows -26 % to +58 %)
    host_share = float(np.mean([r.replay.host_share_pct for r in base])) if gpu else 0.0
    host_bound = gpu and not paced and host_share >= HOST_BOUND_PCT
    fac: Dict[str, float] = {}
    fac_reps: Dict[str, np.ndarray] = {}
    groups: Dict[str, np.ndarray] = {}
    for part in ("gpu", "host"):
        idx = np.array([i for i, k in enumerate(tested) if _part(k[0]) == part], dtype=np.int64)
        if len(idx) >= MIN_ENV_ITEMS:
            groups[part] = idx
    if len(groups) < 2 and (not groups or len(next(iter(groups.values()))) < len(tested)) \
            or (step_part not in groups):
        groups["all"] = np.arange(len(tested))
    for part, idx in groups.items():
        fac[part], fac_reps[part] = 1.0, np.ones(BOOTSTRAP)
        if len(idx) >= MIN_ENV_ITEMS:
            g = logs[idx]
            fac[part] = float(math.exp(np.median(g)))
            fac_reps[part] = np.exp(np.median(g[rng.integers(0, len(g), (BOOTSTRAP, len(g)))], axis=1))

    def group(k: Key) -> str:
        return _part(k[0]) if _part(k[0]) in groups else "all"
    sgroup = step_part if step_part in groups else "all"
    f, f_reps = fac[sgroup], fac_reps[sgroup]
    if len(groups[sgroup]) >= MIN_ENV_ITEMS:
        st.environment_factor = f
        st.environment_low, st.environment_high = _interval(f_reps)
        st.environment_items = int(len(groups[sgroup]))
        t = threshold_pct / 100
        st.environment_named = bool(st.environment_low > 1 + t or st.environment_high < 1 - t)

    # 2. the items: each must differ from the base in its own instances (Mann-Whitney U) and move beyond
    # the spread the items show around the environment factor (a z-test of its log ratio against that spread)
    boot_b = {k: _boot_means(rng, arrays[k][0]) for k in both if len(arrays[k][0]) and len(arrays[k][1])}
    boot_n = {k: _boot_means(rng, arrays[k][1]) for k in boot_b}
    ses = np.array([float(np.std(np.log(np.maximum(boot_n[k], 1e-12) / np.maximum(boot_b[k], 1e-12))))
                    for k in tested])
    # the items' spread beyond their own sampling noise (a method-of-moments random effect, as DerSimonian &
    # Laird 1986 take it): the robust variance of the log ratios less the typical sampling variance
    # ... each item weighted by its time per step: a load that slows the few long (multi-threaded) ops
    # far more than the many short ones must widen the intervals of the items that make the step
    spreads: Dict[str, float] = {}
    for part, idx in groups.items():
        spreads[part] = 0.0
        if len(idx) >= MIN_ENV_ITEMS:
            w = np.array([_loc(arrays[tested[i]][0]) * b.items[tested[i]].count / b.steps for i in idx])
            w = np.minimum(w, MAX_ITEM_WEIGHT * w.sum())  # one slowed op that holds most of the step is not the spread
            mad_sd = MAD_TO_SIGMA * _weighted_median(np.abs(logs[idx] - math.log(fac[part])), w)
            spreads[part] = math.sqrt(max(0.0, mad_sd ** 2 - _weighted_median(ses[idx] ** 2, w)))
    spread = spreads[sgroup]  # the spread of the part the step sums
    st.item_spread_pct = 100 * spread
    pvals = []
    for i, k in enumerate(tested):
        fk, sk = fac[group(k)], spreads[group(k)]
        p_mw = float(mannwhitneyu(arrays[k][0], arrays[k][1] / fk, alternative="two-sided").pvalue)
        se = float(ses[i])
        z = abs(logs[i] - math.log(fk)) / math.sqrt(se ** 2 + sk ** 2) if se > 0 or sk > 0 else math.inf
        # and it must differ before the factor is divided out too, in the same direction: an op the load
        # did not slow (a large GEMM among small overhead-bound ops) is not named as if it had slowed
        p_raw = float(mannwhitneyu(arrays[k][0], arrays[k][1], alternative="two-sided").pvalue)
        same_way = (logs[i] > 0) == (logs[i] - math.log(fk) > 0)
        pvals.append(max(p_mw, float(2 * norm.sf(z)), p_raw) if same_way else 1.0)
    qvals = [float(q) for q in false_discovery_control(pvals)] if pvals else []
    st.items_tested = len(tested)
    st.items_significant = sum(q < alpha for q in qvals)
    per_step_b = {k: b.items[k].count / b.steps for k in both}
    per_step_n = {k: n.items[k].count / n.steps for k in both}
    changes: List[ItemChange] = []
    item_reps: Dict[Key, np.ndarray] = {}
    item_raw: Dict[Key, np.ndarray] = {}
    for k in boot_b:
        mb, mn = boot_b[k], boot_n[k]
        item_raw[k] = mn * per_step_n[k] - mb * per_step_b[k]
        # the item's own departure from the factor, drawn from the items' spread, widens its interval
        mn = mn / fac_reps[group(k)] * np.exp(spreads[group(k)] * rng.standard_normal(BOOTSTRAP))
        item_reps[k] = mn * per_step_n[k] - mb * per_step_b[k]
        boot_n[k] = mn
    for k, p, q in zip(tested, pvals, qvals):
        if q >= alpha:
            continue
        xb, xn = arrays[k]
        mb, mn = boot_b[k], boot_n[k]
        pct = 100 * (mn / mb - 1)
        us_lo, us_hi = _interval(item_reps[k])
        pct_lo, pct_hi = _interval(pct)
        cb, cn = per_step_b[k], per_step_n[k]
        lb, ln = _loc(xb), _loc(xn)
        fk = fac[group(k)]
        changes.append(ItemChange(
            kind=k[0], name=k[1], shape=k[2], status="changed", base_us_per_step=float(lb * cb),
            new_us_per_step=float(ln / fk * cn), us_per_step=float(ln / fk * cn - lb * cb),
            us_per_step_low=us_lo, us_per_step_high=us_hi, change_pct=float(100 * (ln / fk / lb - 1)),
            change_pct_low=pct_lo, change_pct_high=pct_hi, p_value=p, q_value=q))
    changes.sort(key=lambda c: (-abs(c.us_per_step), c.base_us_per_step, c.new_us_per_step))

    one_side: List[ItemChange] = []
    fixed_raw: Dict[str, float] = {}
    fixed_reps: Dict[str, np.ndarray] = {}
    for side, other, status in ((n, b, "appeared"), (b, n, "disappeared")):
        for k in sorted(set(side.items) - set(other.items), key=lambda k: _numeric_order(side.items[k], k)):
            durations = _spread(side.items[k].durations)
            if not len(durations):
                continue
            per_step = side.items[k].count / side.steps
            t_us = per_step * float(np.median(durations))  # the median: one preempted instance is not its size
            cut = other.cut_us.get(k[0], 0.0)
            if t_us <= cut:  # it may only have fallen below the other side's kept items
                continue
            sign = 1.0 if status == "appeared" else -1.0
            fk, fk_reps = fac[group(k)], fac_reps[group(k)]
            reps = sign * per_step * _boot_means(rng, durations) / (fk_reps if status == "appeared" else 1.0)
            t_us = per_step * _loc(durations)
            if not cut:  # the other side kept all its items of this kind: this one is absent there
                fixed_raw[k[0]] = fixed_raw.get(k[0], 0.0) + sign * t_us
                fixed_reps[k[0]] = fixed_reps.get(k[0], np.zeros(BOOTSTRAP)) + reps
            lo, hi = _interval(reps)
            if cut:  # it may be there below the cut: up to ``cut`` µs a step
                lo, hi = (lo - cut, hi) if sign > 0 else (lo, hi + cut)
            one_side.append(ItemChange(
                kind=k[0], name=k[1], shape=k[2], status=status,
                base_us_per_step=0.0 if status == "appeared" else float(t_us),
                new_us_per_step=float(t_us / fk) if status == "appeared" else 0.0,
                us_per_step=float(sign * t_us / (fk if sign > 0 else 1.0)), us_per_step_low=float(lo),
                us_per_step_high=float(hi)))
    one_side.sort(key=lambda c: (-abs(c.us_per_step), c.base_us_per_step, c.new_us_per_step))
    st.items = (changes + one_side)[:TOP_ITEMS]

    # 3. the step: the steps decide where their interval does; else the items. Where the items strayed
    # from one factor by more than MAX_SPREAD_PCT, no single factor describes the machine and no verdict is given
    if st.item_spread_pct > MAX_SPREAD_PCT:
        st.note = (f"the items strayed {st.item_spread_pct:.0f} % from one environment factor (at most "
                   f"{MAX_SPREAD_PCT:g} % is tested): the machine moved them unevenly")
        spread_guard = True
    else:
        spread_guard = False
    verdict = "inconclusive"
    if not paced and min(len(b.step_us), len(n.step_us)) >= MIN_STEPS:
        sb, sn = np.asarray(b.step_us), np.asarray(n.step_us)
        ratio = (sn[rng.integers(0, len(sn), (BOOTSTRAP, len(sn)))].mean(axis=1)
                 / sb[rng.integers(0, len(sb), (BOOTSTRAP, len(sb)))].mean(axis=1))
        st.step_method, st.base_samples, st.new_samples = "steps", len(sb), len(sn)
        st.raw_change_pct = float(100 * (sn.mean() / sb.mean() - 1))
        st.change_pct = float(100 * (sn.mean() / f / sb.mean() - 1))
        st.change_pct_low, st.change_pct_high = _interval(100 * (ratio / f_reps - 1))
        verdict = _verdict(st.change_pct_low, st.change_pct_high, threshold_pct)
        if verdict != "inconclusive" and not spread_guard and not host_bound:
            return verdict, st
    gpu = bool({k[0] for k in item_reps} & set(GPU_KINDS))
    kinds = GPU_KINDS if gpu else ("cpu_op",)
    keys = [k for k in item_reps if k[0] in kinds]
    sig = [k for k, q in zip(tested, qvals) if q < alpha and k[0] in kinds]
    if not keys or not base_step_us > 0 or not any(k in tested for k in keys):
        if not st.step_method:
            st.note = (f"too few steps (fewer than {MIN_STEPS} analyzed per side) and item instances "
                       f"(fewer than {MIN_INSTANCES} per side) to test")
        return "inconclusive", st
    steps_said = (f"the steps' interval [{st.change_pct_low:+.1f}, {st.change_pct_high:+.1f}] % spans the "
                  "threshold, so " if st.step_method else
                  "a host ran ahead of its GPU, so " if paced else
                  f"fewer than {MIN_STEPS} analyzed steps on a side, so ")
    st.step_method = "items"
    st.base_samples = sum(len(arrays[k][0]) for k in keys)
    st.new_samples = sum(len(arrays[k][1]) for k in keys)
    point_raw = sum(_loc(arrays[k][1]) * per_step_n[k] - _loc(arrays[k][0]) * per_step_b[k] for k in keys)
    point = sum(_loc(arrays[k][1]) / fac[group(k)] * per_step_n[k] - _loc(arrays[k][0]) * per_step_b[k] for k in keys)
    fixed_r = sum(fixed_raw.get(k, 0.0) for k in kinds)
    fixed_rep = np.sum([fixed_reps[k] for k in kinds if k in fixed_reps], axis=0) if any(
        k in fixed_reps for k in kinds) else np.zeros(BOOTSTRAP)
    fixed_a = float(np.mean(fixed_rep))
    # every item counts, not only the significant ones: an interval of those alone would read [0, 0] %
    # ("unchanged", certain) wherever the noise hides a change; the significant ones are named
    reps = np.sum([item_reps[k] for k in keys], axis=0) + fixed_rep
    st.raw_change_pct = float(100 * (point_raw + fixed_r) / base_step_us)
    st.change_pct = float(100 * (point + fixed_a) / base_step_us)
    st.change_pct_low, st.change_pct_high = _interval(100 * reps / base_step_us)
    if spread_guard:
        return "inconclusive", st
    if host_bound:
        st.note = (f"the step is the host's ({host_share:.0f} % of the base's critical path on the host): "
                   "the GPU kernels' and copies' change above is the GPU's work, not the step, and the host's "
                   "speed moves between recordings by more than one trace a side can tell")
        return "inconclusive", st
    st.note = (steps_said + f"the step change is the per-step sum of the "
               f"{'GPU kernels and copies' if gpu else 'host ops'}' changes ({len(sig)} of them significant)")
    return _verdict(st.change_pct_low, st.change_pct_high, threshold_pct), st


def fallback(why: str, threshold_pct: float, alpha: float = DEFAULT_ALPHA) -> StatTest:
    """The :class:`StatTest` of a comparison judged by the noise band: ``why`` says which side lacks samples."""
    return StatTest(method="noise band", why=why, alpha=alpha, threshold_pct=threshold_pct,
                    note=f"no instance samples: band verdict ({why})")


__all__ = ["stat_test", "fallback", "has_samples", "DEFAULT_ALPHA", "DEFAULT_THRESHOLD_PCT", "CONFIDENCE",
           "MIN_INSTANCES", "MIN_STEPS", "MIN_ENV_ITEMS", "BOOTSTRAP", "TOP_ITEMS"]
