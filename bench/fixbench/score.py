"""Score the fix bench: each pair's "before" finding's prediction against its measured "after" step.

For every pair ``record.py`` wrote under OUT (``OUT/index.json``), every
recording is analyzed with ``hta_report.api.analyze`` (no cache). The step
of a recording is rank 0's measured mean analyzed step
(``ranks[0].steps.mean_us``; ``replay.gpu_paced_step_us`` where it is > 0).
On the "before" side, the first finding (in the report's order) whose id is
in the pattern's ``RULES`` predicts the "after" step: its
``whatif.step_us_after`` where it has a what-if (with the interval
``whatif.step_us_low``..``step_us_high`` where the model has one), else the
bound ``before step - gain_ms_per_step`` (marked ``bound``). The error is
``(predicted - measured) / measured`` (%).

Which recordings are compared: by default the least disturbed of each side
(the lowest measured step); with ``--paired`` each round's "before" against
the same round's "after", the pair's line showing the median round by error.
A second column scores the same prediction against the steps timed without
the profiler (``unprofiled.json``): the "after" step it should have been is
the profiled "before" step times the unprofiled after/before ratio (median
step of each side; least disturbed: the lowest round median of each side;
``--paired``: the same round's).

Usage: ``python bench/fixbench/score.py [OUT] [--paired] [--json FILE] [--only PATTERN[,..]]
[--mode one-process|per-process] [--jobs 1]``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import patterns  # noqa: E402
from record import DEFAULT_OUT, MODES  # noqa: E402

#: The targets printed beside the summary: most median and worst |error| (%),
#: and the share of the intervals that should cover the measured step (%).
TARGET_MEDIAN_PCT = 10.0
TARGET_WORST_PCT = 25.0
TARGET_COVERAGE_PCT = (70.0, 90.0)
#: A pair is steady when every recording of each side is within this much of
#: that side's lowest (%, :attr:`PairResult.spread_pct`): on a shared machine a
#: disturbed recording is slower as a whole, and where a side's recordings
#: spread widely its lowest may be disturbed too (a side disturbed alike in
#: every recording shows no spread: neither measure catches it).
STEADY_PCT = 25.0
NAN = float("nan")


@dataclass
class FindingBrief:
    """What the scorer keeps of one finding: its id, severity, gain (ms per
    step, an upper bound), the edit of its what-if ("" without one) and the
    what-if's step after the fix with its interval (µs; NaN where absent)."""

    id: str
    severity: str
    gain_ms: float
    edit: str = ""
    after_us: float = NAN
    low_us: float = NAN
    high_us: float = NAN


@dataclass
class Side:
    """One analyzed recording: its folder, its step (µs, see the module doc),
    its findings in the report's order, and the analysis error ("" when none)."""

    path: str
    step_us: float = NAN
    findings: List[FindingBrief] = field(default_factory=list)
    error: str = ""


def analyze_side(path: str) -> Side:
    """Analyze the recording in ``path`` (``hta_report.api.analyze``, no
    cache) and keep what the scorer needs; an analysis that fails gives a
    :class:`Side` with its ``error``."""
    from hta_report.api import analyze

    try:
        result = analyze(path, cache=None)
    except Exception as exc:  # noqa: BLE001 - a recording that cannot be analyzed is reported, the rest scored
        return Side(path, error=f"{type(exc).__name__}: {exc}"[:300])
    rank = result.ranks[0]
    paced = rank.replay.gpu_paced_step_us if rank.replay is not None else 0.0
    findings = []
    for f in result.findings:
        wi = f.whatif
        findings.append(FindingBrief(
            f.id, f.severity, f.gain_ms_per_step, wi.edit if wi is not None else "",
            wi.step_us_after if wi is not None else NAN,
            _number(getattr(wi, "step_us_low", None)), _number(getattr(wi, "step_us_high", None))))
    return Side(path, paced if paced > 0 else rank.steps.mean_us, findings)


def _number(value) -> float:
    """``value`` as a float, NaN for None."""
    return NAN if value is None else float(value)


@dataclass
class Score:
    """One "before" recording's prediction against one "after" step.

    Attributes:
        label: which recordings (``round 2``, ``least disturbed``).
        before_us, after_us: the measured steps of the two recordings (µs).
        rule: the finding that predicts ("" when none of the pattern's rules fired).
        severity, position, findings: its severity, its 1-based place among
            the ``findings`` of the "before" recording.
        edit: the what-if's edit, ``bound`` for a finding without one.
        predicted_us, low_us, high_us: the predicted step and its interval (µs; NaN where absent).
        unprofiled_after_us: the "after" step measured without the profiler,
            on the profiled basis (the "before" step times the unprofiled
            after/before ratio; µs, NaN without timings).
        fired: the ids of the findings the "before" recording has (for a pair without a prediction).
    """

    label: str
    before_us: float
    after_us: float
    rule: str = ""
    severity: str = ""
    position: int = 0
    findings: int = 0
    edit: str = ""
    predicted_us: float = NAN
    low_us: float = NAN
    high_us: float = NAN
    unprofiled_after_us: float = NAN
    fired: List[str] = field(default_factory=list)

    @property
    def error_pct(self) -> float:
        """``(predicted - measured after) / measured after`` (%); NaN without a prediction."""
        return _error(self.predicted_us, self.after_us)

    @property
    def unprofiled_error_pct(self) -> float:
        """The same error against :attr:`unprofiled_after_us` (%)."""
        return _error(self.predicted_us, self.unprofiled_after_us)

    @property
    def covered(self) -> Optional[bool]:
        """Whether the interval holds the measured "after" step; None without an interval."""
        if not (self.low_us == self.low_us and self.high_us == self.high_us):
            return None
        return self.low_us <= self.after_us <= self.high_us

    @property
    def predicted_saving_pct(self) -> float:
        """What the prediction says the fix saves, as % of the "before" step."""
        return (self.before_us - self.predicted_us) / self.before_us * 100 if self.before_us > 0 else NAN

    @property
    def measured_saving_pct(self) -> float:
        """What the fix saved in the recordings, as % of the "before" step."""
        return (self.before_us - self.after_us) / self.before_us * 100 if self.before_us > 0 else NAN

    @property
    def unprofiled_saving_pct(self) -> float:
        """What the fix saved without the profiler, as % of the step (the after/before ratio's complement)."""
        return (self.before_us - self.unprofiled_after_us) / self.before_us * 100 if self.before_us > 0 else NAN


def _error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured`` (%), NaN where either is missing."""
    return (predicted - measured) / measured * 100 if measured > 0 and predicted == predicted else NAN


def predict(label: str, before: Side, after_us: float, rules: Iterable[str], unprofiled_ratio: float) -> Score:
    """Score ``before``'s first finding among ``rules`` against ``after_us``
    (see the module doc); ``unprofiled_ratio``: the after/before ratio of
    the steps timed without the profiler (NaN where not timed)."""
    s = Score(label, before.step_us, after_us, findings=len(before.findings),
              unprofiled_after_us=before.step_us * unprofiled_ratio, fired=[f.id for f in before.findings])
    rules = set(rules)
    for i, f in enumerate(before.findings):
        if f.id in rules:
            s.rule, s.severity, s.position = f.id, f.severity, i + 1
            if f.after_us == f.after_us:
                s.edit, s.predicted_us, s.low_us, s.high_us = f.edit, f.after_us, f.low_us, f.high_us
            else:
                s.edit, s.predicted_us = "bound", before.step_us - f.gain_ms * 1e3
            break
    return s


@dataclass
class PairResult:
    """A pair's score: the shown :class:`Score` (the least disturbed
    recordings, or the median round), with ``--paired`` every round's, and
    ``spread_pct``: the larger of the two sides' spread, a side's highest
    measured step over its lowest, less 1 (%; NaN where a side has no
    analyzed recording)."""

    key: str
    pattern: str
    variant: str
    mode: str
    rules: List[str]
    shown: Optional[Score]
    rounds: List[Score] = field(default_factory=list)
    note: str = ""
    spread_pct: float = NAN

    @property
    def steady(self) -> bool:
        """Whether each side's recordings lie within :data:`STEADY_PCT` of that side's lowest."""
        return self.spread_pct <= STEADY_PCT


def _medians(times: List[List[float]]) -> List[float]:
    """The median of each round's step times (ms), NaN for a round without a finite one."""
    out = []
    for ms in times:
        ok = [t for t in ms if t == t]
        out.append(statistics.median(ok) if ok else NAN)
    return out


def score_pair(key: str, entry: dict, sides: Dict[str, Side], pair_dir: Path, paired: bool) -> PairResult:
    """Score one pair of ``index.json`` (``entry``) from its analyzed recordings ``sides`` (path -> Side)."""
    rules = sorted(patterns.load(entry["pattern"]).RULES)
    res = PairResult(key, entry["pattern"], entry["variant"], entry["mode"], rules, None)
    recs: Dict[bool, Dict[int, Side]] = {False: {}, True: {}}
    for d in sorted(p for p in pair_dir.iterdir() if p.is_dir()):
        i, _, side = d.name.partition("-")
        got = sides[str(d)]
        if got.error or not got.step_us > 0:
            res.note += f"{d.name}: {got.error or 'no step'}; "
            continue
        recs[side == "after"][int(i)] = got
    if not recs[False] or not recs[True]:
        res.note += "a side has no analyzed recording"
        return res
    res.spread_pct = max((max(s.step_us for s in r.values()) / min(s.step_us for s in r.values()) - 1) * 100
                         for r in recs.values())
    times = json.loads((pair_dir / "unprofiled.json").read_text()) if (pair_dir / "unprofiled.json").is_file() else {}
    before_ms, after_ms = _medians(times.get("before", [])), _medians(times.get("after", []))
    if paired:
        for i in sorted(set(recs[False]) & set(recs[True])):
            ratio = after_ms[i] / before_ms[i] if i < min(len(before_ms), len(after_ms)) else NAN
            res.rounds.append(predict(f"round {i}", recs[False][i], recs[True][i].step_us, rules, ratio))
        res.shown = _median_round(res.rounds)
        res.note += _round_note(res.rounds)
        return res
    before = min(recs[False].values(), key=lambda s: s.step_us)
    after = min(s.step_us for s in recs[True].values())
    finite = [x for x in before_ms if x == x], [x for x in after_ms if x == x]
    ratio = min(finite[1]) / min(finite[0]) if finite[0] and finite[1] else NAN
    res.shown = predict("least disturbed", before, after, rules, ratio)
    res.note += (f"before {' '.join(f'{s.step_us / 1e3:.2f}' for _, s in sorted(recs[False].items()))} ms, "
                 f"after {' '.join(f'{s.step_us / 1e3:.2f}' for _, s in sorted(recs[True].items()))} ms")
    return res


def _median_round(rounds: List[Score]) -> Optional[Score]:
    """The round whose error is the median (the lower middle one for an even
    count) among the rounds with a prediction; where none has one, the round
    whose measured saving is the median."""
    if not rounds:
        return None
    scored = sorted((s for s in rounds if s.error_pct == s.error_pct), key=lambda s: s.error_pct)
    pool = scored or sorted(rounds, key=lambda s: s.measured_saving_pct)
    return pool[(len(pool) - 1) // 2]


def _round_note(rounds: List[Score]) -> str:
    """Every round's error (%), or its measured saving where it has no prediction."""
    return "rounds: " + " ".join(f"{s.error_pct:+.1f}" if s.error_pct == s.error_pct
                                 else f"(saved {s.measured_saving_pct:+.1f})" for s in rounds)


def score(out: Path, paired: bool = False, only: str = "", mode: str = "", jobs: int = 1) -> List[PairResult]:
    """Analyze every recording of the selected pairs under ``out`` (``jobs``
    processes) and score each pair (:func:`score_pair`), in ``index.json``'s
    order; ``only``: comma-separated patterns, ``mode``: one mode."""
    index: Dict[str, dict] = json.loads((out / "index.json").read_text())
    names = {n for n in only.split(",") if n}
    chosen = {k: e for k, e in index.items()
              if (not names or e["pattern"] in names) and (not mode or e["mode"] == mode)}
    paths = [str(d) for k in chosen for d in sorted((out / k).iterdir()) if d.is_dir()]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            sides = dict(zip(paths, pool.map(analyze_side, paths)))
    else:
        sides = {p: analyze_side(p) for p in paths}
    return [score_pair(k, e, sides, out / k, paired) for k, e in chosen.items()]


def _ms(us: float, width: int = 7) -> str:
    """``us`` (µs) as ms, two decimals; ``-`` for NaN."""
    return f"{us / 1e3:>{width}.2f}" if us == us else f"{'-':>{width}}"


def _pct(value: float, width: int = 7) -> str:
    """A signed percentage, one decimal; ``-`` for NaN."""
    return f"{value:>+{width}.1f}" if value == value else f"{'-':>{width}}"


#: The columns of :func:`line`: steps and the interval in ms, the rest in %.
HEADER = (f"{'pattern':22} {'variant':13} {'mode':11} {'spread':>7} {'before':>7} {'after':>7} {'pred':>7} "
          f"{'err %':>7}  {'interval ms':15} {'cov':3}  {'finding':24} {'sev':6} {'pos':>5}  "
          f"{'pred sav':>8} {'meas sav':>8}  {'unprof':>7} {'err %':>7}")


def _spread(pct: float) -> str:
    """A pair's spread (%), ``*`` after it when the pair is not steady."""
    if pct != pct:
        return f"{'-':>7}"
    return f"{pct:>6.0f}{'*' if pct > STEADY_PCT else ' '}"


def line(p: PairResult) -> str:
    """One pair's row under :data:`HEADER` (steps in ms, errors and savings in %), then its note."""
    s = p.shown
    head = f"{p.pattern[:22]:22} {p.variant[:13]:13} {p.mode:11} {_spread(p.spread_pct)}"
    if s is None:
        return f"{head} not scored: {p.note}"
    if not s.rule:
        what = "probe (no rule)" if not p.rules else "no finding"
        fired = ", ".join(s.fired[:4]) or "none"
        return (f"{head} {_ms(s.before_us)} {_ms(s.after_us)} {'-':>7} {'-':>7}  {'-':15} {'-':3}  {what:24} "
                f"{'-':6} {'-':>5}  {'-':>8} {_pct(s.measured_saving_pct, 8)}  {_ms(s.unprofiled_after_us)} "
                f"{'-':>7}   findings: {fired}; {p.note}")
    interval = (f"{s.low_us / 1e3:.2f}-{s.high_us / 1e3:.2f}" if s.covered is not None
                else "bound" if s.edit == "bound" else "no interval")
    cov = "-" if s.covered is None else "yes" if s.covered else "no"
    return (f"{head} {_ms(s.before_us)} {_ms(s.after_us)} {_ms(s.predicted_us)} {_pct(s.error_pct)}  {interval:15} "
            f"{cov:3}  {s.rule[:24]:24} {s.severity:6} {f'{s.position}/{s.findings}':>5}  "
            f"{_pct(s.predicted_saving_pct, 8)} {_pct(s.measured_saving_pct, 8)}  {_ms(s.unprofiled_after_us)} "
            f"{_pct(s.unprofiled_error_pct)}   {p.note}")


def summary(results: List[PairResult]) -> Dict[str, dict]:
    """Per mode: pairs, predictions (of which bounds), median and worst
    |error| (%) against the profiled and the unprofiled "after" step, the
    same over the steady pairs (:attr:`PairResult.steady`), the intervals
    and how many covered the measured step (% of them), pairs whose finding
    was absent, probes (no rule)."""
    out: Dict[str, dict] = {}
    for mode in dict.fromkeys(p.mode for p in results):
        shown = [p.shown for p in results if p.mode == mode and p.shown is not None]
        ruled = [p.shown for p in results if p.mode == mode and p.shown is not None and p.rules]
        errs = [abs(s.error_pct) for s in shown if s.error_pct == s.error_pct]
        unprof = [abs(s.unprofiled_error_pct) for s in shown if s.unprofiled_error_pct == s.unprofiled_error_pct]
        cov = [s.covered for s in shown if s.covered is not None]
        steady = [abs(p.shown.error_pct) for p in results
                  if p.mode == mode and p.shown is not None and p.steady and p.shown.error_pct == p.shown.error_pct]
        out[mode] = {
            "pairs": sum(p.mode == mode for p in results), "predicted": len(errs),
            "bounds": sum(s.edit == "bound" for s in shown),
            "median_abs_error_pct": statistics.median(errs) if errs else NAN,
            "worst_abs_error_pct": max(errs) if errs else NAN,
            "unprofiled_median_abs_error_pct": statistics.median(unprof) if unprof else NAN,
            "unprofiled_worst_abs_error_pct": max(unprof) if unprof else NAN,
            "steady_pairs": sum(p.mode == mode and p.steady for p in results), "steady_predicted": len(steady),
            "steady_median_abs_error_pct": statistics.median(steady) if steady else NAN,
            "steady_worst_abs_error_pct": max(steady) if steady else NAN,
            "intervals": len(cov), "covered_pct": sum(cov) / len(cov) * 100 if cov else NAN,
            "no_finding": sum(not s.rule for s in ruled),
            "probes": sum(not p.rules for p in results if p.mode == mode),
            "not_scored": sum(p.mode == mode and p.shown is None for p in results),
        }
    return out


def _errs(median: float, worst: float) -> str:
    """``median M %, worst W %``, or ``none`` where there was nothing to take them over (NaN)."""
    return f"median {median:.1f} %, worst {worst:.1f} %" if median == median else "none"


def summary_lines(summ: Dict[str, dict]) -> List[str]:
    """The summary as printed, one block per mode, with the targets beside it."""
    lines = []
    for mode, s in summ.items():
        lines += [
            f"{mode}: {s['pairs']} pairs, {s['predicted']} predicted ({s['bounds']} by a bound), "
            f"{s['no_finding']} without the finding, {s['probes']} probes, {s['not_scored']} not scored",
            f"  |error| against the profiled after-step: "
            f"{_errs(s['median_abs_error_pct'], s['worst_abs_error_pct'])}   "
            f"(target: median <= {TARGET_MEDIAN_PCT:g} %, worst <= {TARGET_WORST_PCT:g} %)",
            f"  |error| against the unprofiled after-step: "
            f"{_errs(s['unprofiled_median_abs_error_pct'], s['unprofiled_worst_abs_error_pct'])}",
            f"  steady pairs (each side's recordings within {STEADY_PCT:g} %): {s['steady_pairs']}, "
            f"{s['steady_predicted']} predicted: |error| "
            f"{_errs(s['steady_median_abs_error_pct'], s['steady_worst_abs_error_pct'])}",
            "  interval covered the measured after-step: "
            + (f"{s['covered_pct']:.0f} % ({round(s['covered_pct'] * s['intervals'] / 100)}/{s['intervals']})"
               if s["intervals"] else "no interval")
            + f"   (target: {TARGET_COVERAGE_PCT[0]:g}-{TARGET_COVERAGE_PCT[1]:g} %)",
        ]
    return lines


def to_json(results: List[PairResult], summ: Dict[str, dict], paired: bool) -> dict:
    """The scores as JSON-ready data: each pair with its shown score and
    rounds (their derived errors and savings included), and the summary;
    NaN becomes null."""
    def score_dict(s: Score) -> dict:
        d = asdict(s)
        for name in ("error_pct", "unprofiled_error_pct", "covered", "predicted_saving_pct", "measured_saving_pct",
                     "unprofiled_saving_pct"):
            d[name] = getattr(s, name)
        return d

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    pairs = [{**{k: v for k, v in asdict(p).items() if k not in ("shown", "rounds")}, "steady": p.steady,
              "shown": score_dict(p.shown) if p.shown else None, "rounds": [score_dict(s) for s in p.rounds]}
             for p in results]
    return clean({"paired": paired, "pairs": pairs, "summary": summ})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="what record.py wrote")
    ap.add_argument("--paired", action="store_true",
                    help="each round's before against the same round's after; the median round per pair")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the scores as JSON")
    ap.add_argument("--only", default="", help="comma-separated patterns")
    ap.add_argument("--mode", choices=MODES, default="", help="one mode only")
    ap.add_argument("--jobs", type=int, default=1, help="processes analyzing the recordings")
    args = ap.parse_args(argv)
    if not (args.out / "index.json").is_file():
        ap.error(f"{args.out / 'index.json'} not found: record first (bench/fixbench/record.py {args.out})")
    results = score(args.out, args.paired, args.only, args.mode, args.jobs)
    print(HEADER)
    for p in results:
        print(line(p))
    summ = summary(results)
    print()
    print("\n".join(summary_lines(summ)))
    if args.json:
        args.json.write_text(json.dumps(to_json(results, summ, args.paired), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
