#!/usr/bin/env python
"""Benchmark: the step the replay predicts without the profiler, against steps timed without it.

Issues 51/52: on a host-bound GPU rank the profiler's own host cost
(:data:`~hta_report.analysis.replay.edits.NO_PROFILER_EVENT_US` per recorded host
event) is part of the step the replay reproduces; the
:attr:`~hta_report.replay_terms.EditLabel.NO_PROFILER` edit removes it. This script
replays each recording of ``bench/compare_gpu.py``'s fix pairs
(``PAIRS/<case>/<round>-<side>/``, rank 0) and prints, per trace, the measured
profiled step, the predicted unprofiled step with its interval ``[lo, hi]``, the
median of the same script's steps timed without the profiler
(``PAIRS/<case>/unprofiled.json``, that round's list) and the error (%), then per
round how many predictions are within ``--tolerance`` % and how many intervals
hold the measured step. The prediction is made whether or not the rank gets the
profiler-cost note (the note's gate is printed in the ``note`` column).

``--event-us C`` replaces the per-event cost (µs) with ``(C, C, C)`` for this run only
(the calibration grid: ``--event-us 2 --event-us 3 ...`` prints one table per value
and, per round, the median |error| of each), so the constant can be calibrated on one
round and checked on the other. Usage::

    python bench/noprof.py PAIRS [--case slow-data ...] [--event-us 4.5 ...] [--tolerance 15]

PAIRS defaults to ``/work/gpu/pairs/fix``; the recordings are never copied into the repository.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hta_report.analysis.events import RankEvents  # noqa: E402
from hta_report.analysis.regions import host_windows  # noqa: E402
from hta_report.analysis.replay import edits as E  # noqa: E402
from hta_report.analysis.replay import run as R  # noqa: E402
from hta_report.analysis.replay.whatif import WhatIfRunner  # noqa: E402
from hta_report.analysis.warmup import warmup_calls  # noqa: E402
from hta_report.load import load_traces  # noqa: E402
from hta_report.replay_terms import EditLabel  # noqa: E402

CASES = ("slow-data", "pinned-workers", "pinned", "amp")


def predict(d: Path) -> Tuple[float, float, float, float, bool]:
    """Rank 0 of the recording ``d``: the measured step, the predicted step without the
    profiler and its interval (µs), and whether the rank gets the profiler-cost note."""
    ev = RankEvents.from_loaded(load_traces(str(d)), 0)
    hw = host_windows(ev)
    built = R.rank_graph(ev, hw)
    if isinstance(built, str):
        raise SystemExit(f"{d}: not replayed ({built})")
    g, w, steps = built
    b = R.baseline(g, w, steps)
    _, host_share = R.path_entries(ev, g, w, b)
    basis = R.whatif_basis(g, w, steps, b)
    runner = WhatIfRunner(R.whatif_context(ev, g, w, steps, b, basis, 0, [], warmup_calls(ev)))
    cost = R.profiler_cost(ev, w, host_share, b.measured_us) if not basis.ahead else None
    # the note's figures where the rank gets the note, else the same prediction made for the bench alone
    v = R.without_profiler(runner, cost if cost is not None else R.note(R.NoteCode.PROFILER_COST)).values
    return b.measured_us, v["noprof_us"], v["noprof_low_us"], v["noprof_high_us"], cost is not None


def table(pairs: Path, cases: List[str], tolerance: float) -> Dict[int, List[float]]:
    """Print one row per recording; return the |error| (%) per round."""
    errs: Dict[int, List[float]] = {}
    print(f"{'trace':26s} {'note':>4s} {'profiled':>9s} {'predicted [lo, hi]':>24s} {'unprofiled':>10s} "
          f"{'error':>7s} {'in':>3s}")
    hits: Dict[int, List[Tuple[bool, bool]]] = {}
    for case in cases:
        unprof = json.loads((pairs / case / "unprofiled.json").read_text())
        for d in sorted((pairs / case).glob("*-*")):
            rd, side = d.name.split("-", 1)
            measured = statistics.median(unprof[side][int(rd)]) * 1e3
            m, mid, lo, hi, noted = predict(d)
            err = 100 * (mid - measured) / measured
            inside = lo <= measured <= hi
            errs.setdefault(int(rd), []).append(abs(err))
            hits.setdefault(int(rd), []).append((abs(err) <= tolerance, inside))
            print(f"{case + '/' + d.name:26s} {'yes' if noted else 'no':>4s} {m / 1e3:9.2f} "
                  f"{mid / 1e3:7.2f} [{lo / 1e3:6.2f}, {hi / 1e3:6.2f}] {measured / 1e3:10.2f} {err:+6.1f}% "
                  f"{'yes' if inside else 'no':>3s}", flush=True)
    for rd, h in sorted(hits.items()):
        print(f"round {rd}: within ±{tolerance:g} %: {sum(a for a, _ in h)}/{len(h)}; interval holds it: "
              f"{sum(b for _, b in h)}/{len(h)}; median |error| {statistics.median(errs[rd]):.1f} %")
    every = [x for h in hits.values() for x in h]
    print(f"all: within ±{tolerance:g} %: {sum(a for a, _ in every)}/{len(every)}; "
          f"interval holds it: {sum(b for _, b in every)}/{len(every)}")
    return errs


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pairs", nargs="?", default="/work/gpu/pairs/fix", type=Path)
    ap.add_argument("--case", action="append", choices=CASES)
    ap.add_argument("--event-us", action="append", type=float, help="per-event cost (µs) for this run only")
    ap.add_argument("--tolerance", type=float, default=15.0)
    a = ap.parse_args(argv)
    cases = a.case or list(CASES)
    if not a.event_us:
        print(f"per-event cost (best, mid, worst): {E.NO_PROFILER_EVENT_US} µs; "
              f"error_pct {E.EDITS[EditLabel.NO_PROFILER].error_pct:g} %")
        table(a.pairs, cases, a.tolerance)
        return 0
    summary = []
    for c in a.event_us:
        E.NO_PROFILER_EVENT_US = (c, c, c)  # this process only: the calibration grid
        print(f"\nper-event cost {c:g} µs")
        errs = table(a.pairs, cases, a.tolerance)
        summary.append((c, {rd: statistics.median(v) for rd, v in errs.items()}))
    print("\nmedian |error| (%) per round, per event cost:")
    for c, med in summary:
        print(f"  {c:4g} µs: " + ", ".join(f"round {rd} {v:.1f}" for rd, v in sorted(med.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
