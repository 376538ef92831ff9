#!/usr/bin/env python
"""Benchmark: how well the replay (``hta_report/analysis/replay/``, issue 30)
reproduces the measured step time, and what it costs.

For every trace directory under ``../shared/traces`` (``hta/``, ``tracelens/``,
``legacy/``; each folder holding ``.json``/``.json.gz`` files is one run) and
under ``sample_traces/``, each rank is loaded as ``analyze`` loads it and
replayed over its analyzed windows (the ``ProfilerStep`` windows but the
first, or the whole trace without steps). Printed per rank: measured and
replayed mean step (µs), the error (%), the replay's own seconds, the
structural error (:func:`structural_error`: the replay without the measured
per-operation GPU delays, which make the unmodified replay exact by
construction) and the what-ifs; then the median and maximum error over the replayed ranks and
how many are above 10 % (the issue's target: median <= 3 %, none above 10 %),
and the replay's cost per rank.

Prediction (the issue's "How it is judged", bullets 2 and 3):

* ``--injected``: a cause put into each HTA trace with steps (``bench/inject.py``:
  a DataLoader stall, an ``.item()`` sync, a pageable copy, a second unfused
  optimizer) at one strength, and DDP without overlap (the compute stream
  waiting for each gradient all-reduce but the step's last) where the trace
  has all-reduce kernels; the finding of the rule for that cause predicts
  the step time without it (its ``whatif``, else the bound: step minus gain),
  compared with the un-injected trace's measured step (target: within 10 %,
  median <= 5 %); where the fix keeps part of what was injected
  (``inject.FIXED_TWINS``: the host work after an ``.item()``, the batch's copy
  once pinned), with the measured step of that fixed twin, the un-injected
  error printed beside it. Steps are on the throughput basis
  (:func:`throughput_step_us`, as the pairs are): a pinned copy that no longer
  blocks lets the host run ahead of the GPU, and the ``ProfilerStep`` windows
  then time the host alone.
* ``--pairs``: before/after pairs of a real fix recorded here with plain
  ``torch.profiler`` (``bench/record_cpu.py --fix``); the "before" side's
  finding predicts the "after" side's measured step (target: median <= 10 %,
  worst <= 25 %).
* ``--pairs-dir DIR``: the same for pairs recorded on a GPU by
  ``bench/record_cuda.py DIR``, or here, both sides in one process, by
  ``bench/record_cpu.py DIR --one-process CASES``; where
  ``DIR/unprofiled.json`` times a case's steps without the profiler, each
  line also scores the prediction against that step
  (:func:`against_unprofiled_step`). ``--paired`` scores each round's two
  recordings together (a one-process recording).

``--all`` runs the three parts, ``--quick`` one injected case and one pair;
``--cost TRACE_DIR`` times ``analyze`` with and without the replay stage.

Usage: ``python bench/whatif.py [--shared DIR] [--only SUBSTRING] [--injected] [--pairs] [--all] [--quick]
[--strength 0.3] [--repeats 3]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hta_report.analysis.events import RankEvents  # noqa: E402
from hta_report.analysis.regions import host_windows  # noqa: E402
from hta_report.analysis.replay import rank_graph, replay, schedule, span, step_times  # noqa: E402
from hta_report.analysis.replay.graph import GPU  # noqa: E402
from hta_report.load import load_traces  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import diagnosis_real  # noqa: E402
import inject  # noqa: E402
from record_cpu import FIXES, PAIR_RULES  # noqa: E402

from hta_report.model import AnalysisResult, RankResult, combined_edit  # noqa: E402
from hta_report.replay_terms import EditLabel  # noqa: E402


def trace_dirs(roots: List[Path]) -> List[Path]:
    """Folders under ``roots`` that directly hold trace files, sorted."""
    out = set()
    for root in roots:
        if not root.is_dir():
            continue
        for f in root.rglob("*"):
            if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz")):
                out.add(f.parent)
    return sorted(out)


def structural_error(ev: RankEvents, hw) -> float:
    """The replay's error (%) with the GPU operations' measured delays set to
    0: each operation then starts only when its launch (plus the launch
    latency), its stream and the inferred cross-stream waits allow. What the
    graph's edges explain of the measured times, without the per-operation
    slack that makes the unmodified replay exact by construction."""
    built = rank_graph(ev, hw)
    if isinstance(built, str):
        return float("nan")
    g, w, steps = built
    g = dataclasses.replace(g, delay=np.where(g.kind == GPU, 0.0, g.delay))
    _, end, _ = schedule(g)
    m = float((w[:, 1] - w[:, 0]).mean()) if steps else None
    r = float(step_times(g, w, end, not steps).mean())
    if m is None:
        _, end0, _ = schedule(built[0])
        m = float(step_times(built[0], w, end0, True).mean())
    return abs(r - m) / m * 100 if m > 0 else 0.0


# ---------------------------------------------------------------- prediction

#: Share of the resulting step the injected cause takes (``--injected``), and of the slow batch (``--pairs``).
STRENGTH = 0.3
#: Recordings of each side of a fix pair; the least disturbed (lowest measured step) of each side is used:
#: this machine's 2 cores are shared, and a run that shares its core with another process is slowed as a whole.
REPEATS = 3
#: The issue's targets: (most |error| % allowed for every prediction, for their median).
INJECTED_TARGET = (10.0, 5.0)
PAIRS_TARGET = (25.0, 10.0)
#: Cross pairs of ``--pairs-dir``: two cases of ``bench/record_cuda.py`` whose
#: recordings differ only by fixes, scored like a pair: the least disturbed
#: "before" recording of the first case, its rank 0 what-if named by the
#: edit (a combination: :func:`~hta_report.model.combined_edit`), against the
#: least disturbed recording of the second case's side. (first case, second
#: case, its side, edit, the fixes applied). ``collect-pinned-workers`` is
#: ``collect-pinned`` with ``--num-workers 4``.
CROSS_PAIRS = [
    ("collect-pinned", "collect-pinned-workers", "before", EditLabel.DATALOADER_HIDDEN,
     "DataLoader(num_workers=4), copies still pageable"),
    ("collect-pinned", "collect-pinned-workers", "after",
     combined_edit([EditLabel.DATALOADER_HIDDEN, EditLabel.COPIES_PINNED]),
     "DataLoader(num_workers=4, pin_memory=True), non_blocking copies"),
]


@dataclass
class Prediction:
    """One predicted step time against the measured one (µs, on the finding's worst rank).

    ``before_us``: the measured mean analyzed step of the side with the
    cause; ``predicted_us``: the finding's :attr:`~hta_report.model.Finding.whatif`
    ``step_us_after``, or, for a finding without an edit (``bound``), the
    step minus its gain (an upper bound of the saving); ``actual_us``: the
    measured mean step without the cause (the un-injected trace, or the
    recording after the fix). ``rule`` is empty when no finding for the cause
    fired (no prediction)."""

    label: str
    rule: str = ""
    edit: str = ""
    rank: int = 0
    before_us: float = float("nan")
    predicted_us: float = float("nan")
    actual_us: float = float("nan")
    bound: bool = False
    note: str = ""

    @property
    def error_pct(self) -> float:
        """``(predicted - actual) / actual`` (%): negative when the prediction is faster than what was measured."""
        if not self.rule or not self.actual_us > 0:
            return float("nan")
        return (self.predicted_us - self.actual_us) / self.actual_us * 100


def measured_step_us(rank: RankResult) -> float:
    """A rank's measured mean analyzed step (µs): the replay's
    ``measured_step_us`` (the same windows its what-ifs replay), else the
    analyzed window (``window_us``) where the rank was not replayed."""
    return rank.replay.measured_step_us if rank.replay.steps else rank.window_us


def throughput_step_us(trace_dir: Path, rank: int) -> float:
    """A rank's time per analyzed step counting the GPU work the steps
    leave behind (µs): the replay's measured span (first analyzed window's
    start to the later of the last window's end and the end of the GPU work,
    :func:`~hta_report.analysis.replay.span`) over the number of windows.
    Where the host runs ahead of a busy GPU (pinned copies, CUDA graphs, no
    sync in a short profile) the ``ProfilerStep`` windows measure the host
    alone: 2.0 ms a step for a GPU busy 16.6 ms a step (bench/record_cuda.py
    pageable-copy after its fix); this is the step a user's throughput sees.
    Falls back to :func:`measured_step_us`'s window where the rank is not
    replayed (NaN)."""
    loaded = load_traces(trace_dir)
    ev = RankEvents.from_loaded(loaded, rank)
    built = rank_graph(ev, host_windows(ev))
    if isinstance(built, str):
        return float("nan")
    g, w, steps = built
    return span(g, w, schedule(g)[1], steps) / len(w)


def step_us(trace_dir: Path, result: AnalysisResult, rank: int) -> float:
    """Rank ``rank``'s step on the throughput basis (:func:`throughput_step_us`),
    else (a rank the replay cannot read) its measured window (:func:`measured_step_us`)."""
    s = throughput_step_us(trace_dir, rank)
    return s if s == s else measured_step_us(next(r for r in result.ranks if r.rank == rank))


def predict(result: AnalysisResult, rules: FrozenSet[str], label: str) -> Prediction:
    """The prediction of the finding among ``rules`` with the largest gain
    (an empty ``rule`` when none fired); ``actual_us`` left to the caller."""
    found = [f for f in result.findings if f.id in rules]
    if not found:
        fired = ", ".join(f.id for f in result.findings if f.gain_pct >= 1) or "none"
        return Prediction(label, note=f"no finding for the cause (findings >= 1 %: {fired})")
    f = max(found, key=lambda f: f.gain_ms_per_step)
    wi = getattr(f, "whatif", None)
    worst = max(f.rank_gains, key=lambda g: g.gain_us) if f.rank_gains else None
    rank = getattr(wi, "rank", None) if wi is not None else None
    rank = rank if rank is not None else (worst.rank if worst else f.ranks[0])
    if wi is not None:
        return Prediction(label, f.id, wi.edit, rank, wi.step_us_before, wi.step_us_after)
    before = measured_step_us(next(r for r in result.ranks if r.rank == rank))
    gain = next((g.gain_us for g in f.rank_gains if g.rank == rank), f.gain_ms_per_step * 1e3)
    return Prediction(label, f.id, "bound", rank, before, before - gain, bound=True)


#: Causes injected for the what-ifs alone (not scored by the diagnosis benchmark): DDP
#: without overlap (``inject.inject_no_overlap``) where the trace reduces gradients with
#: all-reduce kernels. Strength is not its knob.
WHATIF_CAUSES = {"trace_diff/control": ("no-overlap",), "trace_diff/test": ("no-overlap",)}
#: The rules whose finding names each of :data:`WHATIF_CAUSES`.
WHATIF_RULES = {"no-overlap": frozenset({"exposed-communication"})}


def injected_cases(hta: Path, only: str = "", quick: bool = False) -> List[Tuple[str, Path, str]]:
    """(trace label, folder, cause) of every HTA trace with steps and every
    cause :data:`diagnosis_real.GPU_TRACES` injects into it (no straggler:
    it needs a pair of ranks), then :data:`WHATIF_CAUSES`; ``quick``: the first alone."""
    pairs = [(folder, cause) for folder, causes in diagnosis_real.GPU_TRACES.values() for cause in causes]
    pairs += [(folder, cause) for folder, causes in WHATIF_CAUSES.items() for cause in causes]
    out = [(folder, hta / folder, cause) for folder, cause in pairs
           if (hta / folder).is_dir() and only in f"{folder}/{cause}"]
    return out[:1] if quick else out


def run_injected(hta: Path, strength: float = STRENGTH, only: str = "", quick: bool = False) -> List[Prediction]:
    """Inject each cause of :func:`injected_cases` at ``strength`` into the
    traces under ``hta`` (a temporary copy), analyze it (no cache) and
    compare the cause's finding's prediction with the un-injected trace's
    measured step on the same rank; prints one line per case."""
    from hta_report.api import analyze

    out: List[Prediction] = []
    base: Dict[Path, AnalysisResult] = {}
    _header()
    with tempfile.TemporaryDirectory(prefix="hta-report-whatif-") as tmp:
        for i, (folder, src, cause) in enumerate(injected_cases(hta, only, quick)):
            t = time.perf_counter()
            if src not in base:
                base[src] = analyze(src)
            d = Path(tmp) / str(i)
            for f in sorted(src.iterdir()):
                if f.name.endswith((".json", ".json.gz")):
                    doc = inject.inject(inject.read(f), cause, strength)
                    inject.write(doc, d / (f.name.split(".json")[0] + ".json.gz"))
            injected = analyze(d)
            rules = WHATIF_RULES.get(cause) or diagnosis_real.EXPECTED[cause]
            p = predict(injected, rules, f"{folder} {cause} {strength:g}")
            if not p.rule:  # no prediction: the slowest injected rank's step, and without the cause
                worst = max(injected.ranks, key=measured_step_us)
                p.rank = worst.rank
            before = step_us(d, injected, p.rank)
            if p.rule:  # the finding's saving, on the throughput basis the truth is measured on
                p.predicted_us = before - (p.before_us - p.predicted_us)
            p.before_us = before
            p.actual_us = step_us(src, base[src], p.rank)
            twin = inject.FIXED_TWINS.get(cause)
            if twin and p.rule:  # the fix keeps part of what was injected: the truth is the fixed twin
                bare = p.error_pct
                dt = Path(tmp) / f"{i}-fixed"
                for f in sorted(src.iterdir()):
                    if f.name.endswith((".json", ".json.gz")):
                        doc = inject.inject(inject.read(f), twin, strength)
                        inject.write(doc, dt / (f.name.split(".json")[0] + ".json.gz"))
                p.actual_us = step_us(dt, analyze(dt), p.rank)
                p.note = f"against the {twin} twin; against the un-injected trace {bare:+.1f} %"
            out.append(p)
            _line(p, time.perf_counter() - t)
    return out


def _record(out: Path, case: str, fix: bool, extra_ms: Optional[float], strength: float) -> float:
    """Record one side of a pair with ``bench/record_cpu.py`` in a subprocess
    (one thread, as :mod:`diagnosis_real` records); returns its injected cost (ms)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, str(ROOT / "bench" / "record_cpu.py"), str(out), case, "--strength", str(strength)]
    cmd += (["--fix"] if fix else []) + (["--extra-ms", f"{extra_ms:.6f}"] if extra_ms is not None else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"record_cpu {case} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return float(proc.stdout.split("extra_ms")[-1].split()[0])


#: A fix pair's recordings: False (before the fix) / True (after) -> (result, trace folder) per recording.
Sides = Dict[bool, List[Tuple[AnalysisResult, Path]]]


def run_pairs(repeats: int = REPEATS, only: str = "", quick: bool = False,
              strength: float = STRENGTH) -> List[Prediction]:
    """Record each case of :data:`PAIR_RULES` before and after its fix
    (``repeats`` times each, interleaved; every recording after the first
    gets the first's injected cost), analyze every recording (no cache) and
    compare the prediction of the least disturbed "before" recording (the
    lowest measured step) with the least disturbed "after" recording's
    measured step; ``quick``: the slow DataLoader once. Prints one line per
    pair with every recording's measured step (the noise)."""
    from hta_report.api import analyze

    cases = ["slow-data"] if quick else [c for c in PAIR_RULES if only in c]
    out: List[Prediction] = []
    _header()
    with tempfile.TemporaryDirectory(prefix="hta-report-pairs-") as tmp:
        for case in cases:
            t = time.perf_counter()
            extra: Optional[float] = None
            sides: Sides = {False: [], True: []}
            for i in range(repeats):
                for fix in (False, True):
                    d = Path(tmp) / f"{case}-{i}-{'after' if fix else 'before'}"
                    used = _record(d, case, fix, extra, strength)
                    extra = used if extra is None else extra
                    sides[fix].append((analyze(d), d))
            out.append(_pair(f"{case} ({FIXES[case]})", PAIR_RULES[case], sides))
            _line(out[-1], time.perf_counter() - t)
    return out


def run_recorded_pairs(root: Path, only: str = "", paired: bool = False) -> List[Prediction]:
    """The pairs recorded elsewhere (``bench/record_cuda.py OUT`` on a GPU:
    ``OUT/index.json`` and ``OUT/<case>/<i>-before|after/``): each recording
    analyzed here (no cache), the least disturbed "before" recording's
    finding for the case's rules against the least disturbed "after"
    recording's measured step, as :func:`run_pairs` does; a case whose
    recording failed is listed and skipped. Prints one line per pair.

    Where ``OUT/unprofiled.json`` (``record_cuda.py OUT --unprofiled``) times
    a case's steps without the profiler, the line also gives the fastest
    unprofiled step of each side and the prediction's error against the
    unprofiled "after" step, and a summary of those errors follows: the
    profiler's own cost differs between the sides (CUPTI records every kernel
    of a replayed CUDA graph), so the profiled "after" trace is not the step
    the fix buys.

    ``paired``: score each round of a one-process recording
    (``record_cuda.py OUT --one-process``) on its own instead, the round's
    "before" recording against the same round's "after" one (recorded
    seconds apart, in alternating order), and give each case the median of
    its rounds' errors (:func:`_paired_rounds`); cross pairs and unprofiled
    timings are left out."""
    import json

    from hta_report.api import analyze

    index = json.loads((root / "index.json").read_text())
    unprofiled = json.loads((root / "unprofiled.json").read_text()) if (root / "unprofiled.json").is_file() else {}
    out: List[Prediction] = []
    against_unprofiled: List[float] = []
    share_unprofiled: List[float] = []
    recorded: Dict[str, Tuple[Sides, Dict[bool, List[float]]]] = {}  # case -> recordings, their steps
    pooled: List[float] = []  # paired: every round's |error| (%), predictions by an edit
    _header()
    for case, entry in index.items():
        if only not in case:
            continue
        if entry.get("error"):
            print(f"{case}: not recorded ({entry['error'][:120]})")
            continue
        t = time.perf_counter()
        sides: Sides = {False: [], True: []}
        for d in sorted((root / case).iterdir()):
            sides[d.name.endswith("-after")].append((analyze(d), d))
        label = f"{case} ({entry['recorder']}: {entry['fix']})"
        if paired:
            rounds = _paired_rounds(label, frozenset(entry["rules"]), sides)
            pooled += [abs(p.error_pct) for p in rounds if p.rule and not p.bound and p.actual_us > 0]
            out.append(_median_round(rounds))
            _line(out[-1], time.perf_counter() - t)
            continue
        recorded[case] = sides, throughput_steps(sides)
        out.append(_pair(label, frozenset(entry["rules"]), *recorded[case]))
        errs = against_unprofiled_step(out[-1], unprofiled.get(case, {}))
        if errs is not None:
            against_unprofiled.append(abs(errs[0]))
            share_unprofiled.append(abs(errs[1]))
        _line(out[-1], time.perf_counter() - t)
    for first, second, side, edit, fixes in CROSS_PAIRS:
        if first in recorded and second in recorded and only in first + second:
            out.append(_cross_pair(f"{first} -> {second} {side} ({fixes})", *recorded[first],
                                   recorded[second][1][side == "after"], edit))
            _line(out[-1], 0.0)
    if pooled:
        print(f"\nevery round paired with its own ({len(pooled)} rounds predicted by an edit): |error| median "
              f"{statistics.median(pooled):.1f} %, worst {max(pooled):.1f} %, within {PAIRS_TARGET[0]:g} %: "
              f"{sum(e <= PAIRS_TARGET[0] for e in pooled)}/{len(pooled)}")
    if against_unprofiled:
        print(f"\nagainst the unprofiled after-step ({len(against_unprofiled)} case(s)): |error| median "
              f"{statistics.median(against_unprofiled):.1f} %, worst {max(against_unprofiled):.1f} %; the predicted "
              f"share of the step on the unprofiled before-step: median {statistics.median(share_unprofiled):.1f} %, "
              f"worst {max(share_unprofiled):.1f} %")
    return out


def _round_of(d: Path) -> int:
    """The round number of a recording folder ``<i>-before`` or ``<i>-after``."""
    return int(d.name.split("-", 1)[0])


def _paired_rounds(label: str, rules: FrozenSet[str], sides: Sides) -> List[Prediction]:
    """One prediction per round recorded on both sides: the round's "before"
    recording (its throughput step less what its finding says the fix saves)
    against the same round's "after" recording, as :func:`_pair` scores the
    least disturbed ones. Both recordings of a round were made seconds apart
    in one process, so a host whose speed drifts over the run slows both
    (the least disturbed recordings of each side may come from different
    minutes: the fused-optimizer case's "before" steps ranged 29.3-39.6 ms
    within one process on the H200)."""
    by_round: Dict[int, Dict[bool, Tuple[AnalysisResult, Path]]] = {}
    for fix, recs in sides.items():
        for rec in recs:
            by_round.setdefault(_round_of(rec[1]), {})[fix] = rec
    out = []
    for i in sorted(by_round):
        pair = by_round[i]
        if len(pair) == 2:
            out.append(_pair(f"{label} round {i}", rules, {False: [pair[False]], True: [pair[True]]}))
    return out


def _median_round(rounds: List[Prediction]) -> Prediction:
    """The round whose error is the median of ``rounds``' (the lower of the
    two middle ones for an even count; rounds without a prediction count as
    missing), with every round's error in its note; the first round when
    none predicted."""
    scored = sorted((p for p in rounds if p.rule and p.actual_us > 0), key=lambda p: p.error_pct)
    if not scored:
        return rounds[0] if rounds else Prediction("(no round recorded on both sides)")
    mid = scored[(len(scored) - 1) // 2]
    errs = " ".join(f"{p.error_pct:+.1f}" for p in rounds if p.rule and p.actual_us > 0)
    unpredicted = len(rounds) - len(scored)
    mid.label = mid.label.rsplit(" round ", 1)[0]
    mid.note = (f"median of {len(scored)} rounds (errors {errs} %"
                + (f"; {unpredicted} round(s) without a finding" if unpredicted else "") + f"); {mid.note}")
    return mid


def against_unprofiled_step(p: Prediction, times: Dict[str, List[float]]) -> Optional[Tuple[float, float]]:
    """The errors (%) of ``p``'s prediction against the fastest unprofiled
    "after" step of ``times`` (``{"before": [ms...], "after": [ms...]}``, as
    ``record_cuda.py --unprofiled`` writes; NaN marks a failed run): of the
    predicted step itself, and of the predicted share of the step (predicted
    over the profiled before-step) applied to the fastest unprofiled "before"
    step (the profiler's own host cost, in both profiled sides of a host-bound
    step, out of the comparison); both sides' fastest steps appended to
    ``p.note``. None (and the note untouched) when ``p`` has no prediction by
    an edit or a side has no timing."""
    ok = {side: [ms for ms in times.get(side, []) if ms == ms] for side in ("before", "after")}
    if not p.rule or p.bound or not (ok["before"] and ok["after"]):
        return None
    after_us = min(ok["after"]) * 1e3
    err = (p.predicted_us - after_us) / after_us * 100
    share = p.predicted_us / p.before_us if p.before_us > 0 else float("nan")
    scaled = (min(ok["before"]) * 1e3 * share - after_us) / after_us * 100
    p.note += (f"; without the profiler: before {min(ok['before']):.2f} ms, after {after_us / 1e3:.2f} ms, "
               f"error {err:+.1f} %, predicted share {share:.3f} of the unprofiled before-step: {scaled:+.1f} %")
    return err, scaled


def _cross_pair(label: str, first: Sides, first_steps: Dict[bool, List[float]], target_steps: List[float],
                edit: str) -> Prediction:
    """A :data:`CROSS_PAIRS` entry: the least disturbed "before" recording of
    ``first`` (its throughput steps ``first_steps``), less what its rank 0
    what-if ``edit`` saves, against the least of ``target_steps`` (the other
    case's recordings of one side, µs); a prediction without a rule (listed,
    not scored) where the what-if is missing."""
    befores = first_steps[False]
    i = befores.index(min(befores))
    result = first[False][i][0]
    after = min(target_steps)
    replay = result.ranks[0].replay
    wi = next((x for x in (replay.whatifs if replay else []) if x.edit == edit), None)
    if wi is None:
        return Prediction(label, before_us=befores[i], actual_us=after, note=f"no what-if {edit!r}")
    return Prediction(label, "(combined)" if " + " in edit else "(what-if)", edit, result.ranks[0].rank,
                      befores[i], befores[i] - (wi.step_us_before - wi.step_us_after), after,
                      note=f"before {_ms(befores)} ms")


def throughput_steps(sides: Sides) -> Dict[bool, List[float]]:
    """Each recording's rank 0 step on the throughput basis (:func:`step_us`, µs), per side."""
    return {fix: [step_us(d, r, r.ranks[0].rank) for r, d in rs] for fix, rs in sides.items()}


def _ms(values_us: Sequence[float]) -> str:
    """``values_us`` (µs) as ms with two decimals, space-separated."""
    return " ".join(f"{v / 1e3:.2f}" for v in values_us)


def _pair(label: str, rules: FrozenSet[str], sides: Sides,
          steps: Optional[Dict[bool, List[float]]] = None) -> Prediction:
    """The prediction of the least disturbed "before" recording against the
    least disturbed "after" recording, both on the throughput basis
    (:func:`throughput_step_us`: lowest is least disturbed; ``steps``: the
    recordings' :func:`throughput_steps` where already measured): the predicted
    step is the "before" throughput step less what the finding says the fix
    saves (its what-if's ``step_us_before - step_us_after``, or its gain for
    a bound). Every recording's throughput step goes in the note (the
    noise), with the ``ProfilerStep`` window where the two differ by > 5 %."""
    steps = steps or throughput_steps(sides)
    windows = {fix: [measured_step_us(r.ranks[0]) for r, _ in rs] for fix, rs in sides.items()}
    i = steps[False].index(min(steps[False]))
    p = predict(sides[False][i][0], rules, label)
    before = steps[False][i]
    after = min(steps[True])
    noise = f"before {_ms(steps[False])} ms, after {_ms(steps[True])} ms"
    if any(abs(w - s) > 0.05 * s for fix in steps for s, w in zip(steps[fix], windows[fix])):
        noise += f" (ProfilerStep windows: before {_ms(windows[False])}, after {_ms(windows[True])})"
    if p.rule:
        p.predicted_us = before - (p.before_us - p.predicted_us)
        p.before_us, p.actual_us = before, after
        p.note = noise
    else:
        p.before_us, p.actual_us = before, after
        p.note += f"; measured change {(after - before) / before * 100:+.1f} %; {noise}"
    return p


def _header() -> None:
    print(f"\n{'case':58} {'rule':24} {'edit':22} {'rank':>4} {'before ms':>9} {'pred ms':>8} "
          f"{'actual ms':>9} {'err %':>7} {'s':>4}")


def _line(p: Prediction, seconds: float) -> None:
    if not p.rule:
        print(f"{p.label[:58]:58} {'(no finding)':24} {'-':22} {'-':>4} {p.before_us / 1e3:>9.2f} {'-':>8} "
              f"{p.actual_us / 1e3:>9.2f} {'-':>7} {seconds:>4.0f}  {p.note}", flush=True)
        return
    print(f"{p.label[:58]:58} {p.rule:24} {p.edit[:22]:22} {p.rank:>4} {p.before_us / 1e3:>9.2f} "
          f"{p.predicted_us / 1e3:>8.2f} {p.actual_us / 1e3:>9.2f} {p.error_pct:>+7.1f} {seconds:>4.0f}"
          f"{'  (bound)' if p.bound else ''}{'  ' + p.note if p.note else ''}", flush=True)


def report(title: str, preds: List[Prediction], target: Tuple[float, float]) -> Dict[str, float]:
    """Print the median and worst |error| (%) of the predictions with an edit
    (the target's), of the bounds, and how many cases had no finding;
    returns the first two figures (nan without predictions)."""
    edited = [abs(p.error_pct) for p in preds if p.rule and not p.bound]
    bounds = [abs(p.error_pct) for p in preds if p.bound]
    worst, med = target
    print(f"\n{title}: {len(preds)} case(s)")

    def line(name: str, errs: List[float]) -> None:
        if errs:
            print(f"  {name}: {len(errs)}; |error| median {statistics.median(errs):.1f} %, worst {max(errs):.1f} %, "
                  f"within {worst:g} %: {sum(e <= worst for e in errs)}/{len(errs)}")
        else:
            print(f"  {name}: none")
    line("predicted by an edit", edited)
    print(f"    target: median <= {med:g} %, worst <= {worst:g} %")
    line("bounds (finding without an edit: step minus gain)", bounds)
    if bounds:  # a bound holds where the measured step is at least what it leaves (it claimed at least the saving)
        held = sum(p.actual_us >= p.predicted_us for p in preds if p.bound)
        print(f"    held (measured step after the fix >= the step the bound leaves): {held}/{len(bounds)}")
    print(f"  no finding for the cause (no prediction): {sum(not p.rule for p in preds)}")
    nan = float("nan")
    return {"median": statistics.median(edited) if edited else nan, "worst": max(edited) if edited else nan}


def cost(trace_dir: Path, runs: int = 3) -> Dict[str, float]:
    """What the replay stage adds to ``analyze`` on ``trace_dir`` (the issue's
    target: at most 20 % on the 300 MB benchmark trace): ``analyze`` (no
    cache) with and without the stage, alternating, ``runs`` times each in
    this process (the per-rank analyses run in this process for a single
    rank); prints and returns the medians (s) and their ratio."""
    import hta_report.analysis.rank as rank_steps
    from hta_report.api import analyze
    from hta_report.model import Replay

    import resource

    def cpu_s() -> float:  # this process and its reaped children (the parse's piece workers)
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def skipped(*args, **kwargs) -> Replay:  # the stage's place kept, nothing replayed
        return Replay(note="skipped")

    own: List[Tuple[float, float]] = []  # the replay's own (wall, CPU) per run with it

    def timed(*args, **kwargs) -> Replay:  # in this process: a lone large rank is analyzed here
        t, c = time.perf_counter(), time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            own.append((time.perf_counter() - t, time.process_time() - c))

    real = rank_steps.replay
    times: Dict[bool, List[float]] = {True: [], False: []}
    cpu: Dict[bool, List[float]] = {True: [], False: []}
    for _ in range(runs):
        for with_replay in (True, False):
            rank_steps.replay = timed if with_replay else skipped
            t, c = time.perf_counter(), cpu_s()
            try:
                got = analyze(trace_dir)
            finally:
                rank_steps.replay = real
            times[with_replay].append(time.perf_counter() - t)
            cpu[with_replay].append(cpu_s() - c)
            failed = [f.step for r in got.ranks for f in r.failures]
            if failed:
                raise SystemExit(f"analyze {'with' if with_replay else 'without'} the replay: steps failed: {failed}")
    on, off = statistics.median(times[True]), statistics.median(times[False])
    con, coff = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(f"\nreplay cost on {trace_dir}: analyze {on:.2f} s with the replay, {off:.2f} s without "
          f"(medians of {runs}): {(on / off - 1) * 100:+.1f} % (target <= 20 %); runs with "
          f"{', '.join(f'{x:.2f}' for x in times[True])} / without {', '.join(f'{x:.2f}' for x in times[False])}")
    print(f"  CPU (this process and the parse's workers): {con:.2f} s with, {coff:.2f} s without (medians): "
          f"{(con / coff - 1) * 100:+.1f} %")
    # within each run with the replay: its own time against the rest of that run (the runs' spread cancels)
    shares = [w / (total - w) * 100 for (w, _), total in zip(own, times[True]) if total > w]
    cpu_shares = [c / (total - c) * 100 for (_, c), total in zip(own, cpu[True]) if total > c]
    if shares:
        print(f"  the replay stage itself, within each run with it: {statistics.median(w for w, _ in own):.2f} s "
              f"wall ({statistics.median(c for _, c in own):.2f} s CPU), adding {statistics.median(shares):+.1f} % "
              f"to the rest of the run's wall time ({min(shares):+.1f} to {max(shares):+.1f} %) and "
              f"{statistics.median(cpu_shares):+.1f} % to its CPU (target <= 20 %)")
    return {"with": on, "without": off, "ratio": on / off, "cpu_with": con, "cpu_without": coff,
            "own_pct": statistics.median(shares) if shares else float("nan")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--only", default="")
    ap.add_argument("--injected", action="store_true", help="prediction on causes injected into real traces")
    ap.add_argument("--pairs", action="store_true", help="prediction on before/after fix pairs recorded here")
    ap.add_argument("--pairs-dir", type=Path, metavar="DIR",
                    help="prediction on pairs recorded elsewhere by bench/record_cuda.py DIR (on a GPU)")
    ap.add_argument("--paired", action="store_true",
                    help="with --pairs-dir: score each one-process round's before against its own after")
    ap.add_argument("--all", action="store_true", help="fidelity, injected causes and fix pairs")
    ap.add_argument("--quick", action="store_true", help="one injected case and one pair")
    ap.add_argument("--strength", type=float, default=STRENGTH,
                    help="share of the step the injected cause takes")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="recordings of each side of a pair")
    ap.add_argument("--cost", type=Path, metavar="TRACE_DIR",
                    help="what the replay adds to analyze on this folder (e.g. the 300 MB benchmark trace)")
    args = ap.parse_args()
    if args.cost:
        cost(args.cost, args.repeats)
        return 0
    if args.pairs_dir:
        how = ", each round paired with its own, median round per case" if args.paired else ""
        report(f"fix pairs recorded by bench/record_cuda.py or record_cpu.py --one-process ({args.pairs_dir}{how})",
               run_recorded_pairs(args.pairs_dir, args.only, args.paired), PAIRS_TARGET)
        return 0
    injected, pairs = args.injected or args.all or args.quick, args.pairs or args.all or args.quick
    if not (injected or pairs) or args.all:
        fidelity(args)
    if injected:
        t = time.perf_counter()
        report("injected causes", run_injected(
            args.shared / "hta", args.strength, args.only, quick=args.quick), INJECTED_TARGET)
        print(f"injected part: {time.perf_counter() - t:.0f} s")
    if pairs:
        t = time.perf_counter()
        report("fix pairs recorded here", run_pairs(
            args.repeats if not args.quick else 1, args.only, quick=args.quick), PAIRS_TARGET)
        print(f"pairs part: {time.perf_counter() - t:.0f} s")
    return 0


def fidelity(args: argparse.Namespace) -> None:
    """The fidelity part: every shared trace replayed unmodified (see the module doc)."""
    dirs = [d for d in trace_dirs([args.shared / "hta", args.shared / "tracelens", args.shared / "legacy",
                                   ROOT / "sample_traces"]) if args.only in str(d)]
    errors, structural, costs, skipped = [], [], [], []
    print(f"{'trace':58} {'rank':>4} {'steps':>5} {'measured µs':>12} {'replayed µs':>12} {'err %':>6} "
          f"{'s':>5} {'struct %':>8}  what-ifs (µs after)")
    for d in dirs:
        label = str(d.relative_to(args.shared)) if args.shared in d.parents else str(d.relative_to(ROOT))
        try:
            loaded = load_traces(d)
        except Exception as exc:  # a folder the loader refuses: say so and go on
            print(f"{label:58} not loaded: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        for info in loaded.files:
            ev = RankEvents.from_loaded(loaded, info.rank)
            t = time.perf_counter()
            try:
                r = replay(ev, host_windows(ev))
            except Exception as exc:
                print(f"{label:58} {info.rank:>4} replay failed: {type(exc).__name__}: {exc}")
                errors.append(float("inf"))
                continue
            dt = time.perf_counter() - t
            if not r.steps:
                skipped.append(label)
                print(f"{label:58} {info.rank:>4} {'-':>5} {r.note}")
                continue
            costs.append(dt)
            errors.append(r.error_pct)
            se = structural_error(ev, host_windows(ev))
            structural.append(se)
            wi = ", ".join(f"{w.edit}: {w.step_us_after:,.0f}" for w in r.whatifs)
            window = "" if "no ProfilerStep" not in r.note else " (window)"
            print(f"{label:58} {info.rank:>4} {r.steps:>5} {r.measured_step_us:>12,.1f} {r.replayed_step_us:>12,.1f} "
                  f"{r.error_pct:>6.2f} {dt:>5.2f} {se:>8.2f}  {wi}{window}")
    if errors:
        finite = [e for e in errors if e != float("inf")]
        print(f"\nreplayed ranks: {len(errors)}; error median {statistics.median(errors):.2f} %, "
              f"max {max(errors):.2f} %, above 10 %: {sum(e > 10 for e in errors)}, above 3 %: "
              f"{sum(e > 3 for e in errors)}; failed: {len(errors) - len(finite)}")
    if structural:
        print(f"structural (GPU delays at 0): error median {statistics.median(structural):.2f} %, "
              f"max {max(structural):.2f} %, above 10 %: {sum(e > 10 for e in structural)}")
    if costs:
        print(f"replay cost per rank: median {statistics.median(costs):.3f} s, max {max(costs):.3f} s")
    print(f"not replayed: {len(skipped)} rank(s): {', '.join(sorted(set(skipped)))}")


if __name__ == "__main__":
    sys.exit(main())
