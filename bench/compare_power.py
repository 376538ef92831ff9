"""Power of ``hta-report compare``'s statistical verdict: false alarms and detections.

* **A/A pairs**: the same CPU workload recorded twice, each side in a process
  of its own (``record``: ``bench/record_cpu.py``'s ``healthy`` case, clean,
  14 steps, so 10 analyzed; seconds apart on a shared machine). Any
  ``regressed`` or ``improved`` verdict is a false alarm.
* **Injected regressions**: the new side of a pair with one host op made
  slower, physically, in its trace (:func:`slow_op`): every instance of the
  op lasts ``d`` µs longer and everything after its end on the timeline
  moves ``d`` later (enclosing ops and the ``ProfilerStep`` grow; the op's
  children and the other ops keep their durations), ``d`` chosen so that
  the mean step grows by k % (1, 3, 5, 10). A ``regressed`` verdict is a
  detection (counted for the headline, the noise band's, and for the
  statistical test's own verdict, ``stats.verdict``); the slowed op named first among the significant items counts
  as named. On a trace with GPU work the kernels would move with their
  launch under the same time warp; the pairs recorded here are CPU-only.

Usage::

    python bench/compare_power.py record /work/aa-pairs --pairs 40
    python bench/compare_power.py run /work/aa-pairs [--inject-pairs 20] [--cache DIR]
    python bench/compare_power.py fixpairs /tmp/fixbench/one-process [--rounds 0,1] [--cache DIR]

``fixpairs`` compares the before/after recordings of ``bench/fixbench/record.py``
(real fix pairs) and scores both verdicts against the pair's unprofiled
steps (:func:`unprofiled_truth`).

Traces stay outside the repository. ``run`` prints one line per pair and
the rates; docs/COMPARE.md records them with date and machine.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SIZES = (1.0, 3.0, 5.0, 10.0)
STEPS = 14


def record(out: Path, pairs: int) -> None:
    """Record ``pairs`` A/A pairs into ``out/NN-a`` and ``out/NN-b`` (one process per side; existing ones kept)."""
    code = ("import sys; sys.path.insert(0, {bench!r}); import record_cpu; "
            "record_cpu.run(sys.argv[1], 'healthy', 0.0, steps={steps}, clean=True)").format(bench=str(HERE),
                                                                                          steps=STEPS)
    for i in range(pairs):
        for s in "ab":
            d = out / f"{i:02d}-{s}"
            if d.exists():
                continue
            tmp = out / f"{i:02d}-{s}.tmp"
            subprocess.run([sys.executable, "-c", code, str(tmp)], check=True, capture_output=True)
            tmp.rename(d)


def _trace_file(d: Path) -> Path:
    files = sorted(p for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))
    if len(files) != 1:
        raise SystemExit(f"{d}: expected one trace file, found {len(files)}")
    return files[0]


def _read(p: Path) -> dict:
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt") as f:
        return json.load(f)


def slow_op(doc: dict, op: str, pct: float, step_us: float) -> Tuple[dict, float]:
    """``doc`` (a Kineto trace, changed in place) with every ``cpu_op``
    instance named ``op`` inside a ``ProfilerStep`` made ``d`` µs longer, ``d``
    = ``pct`` % of ``step_us`` / instances per step, and the timeline warped:
    an event starting at or after an instance's end moves later by the
    added time of every instance ending at or before its start; an event's
    end moves by that of every instance ending at or before it (so the
    instance and the events enclosing it grow). A GPU kernel, copy or set
    keeps its duration and moves by the time added before its launch (the
    runtime call of the same correlation): GPU ops move with their launch,
    as on a GPU that waited on the host. Returns ``(doc, d)``."""
    events = doc["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    inside = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("name") == op
              and any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] for s in steps)]
    if not inside or not steps:
        raise ValueError(f"no {op} inside a ProfilerStep")
    d = pct / 100 * step_us * len(steps) / len(inside)
    ends = sorted(float(e["ts"]) + float(e["dur"]) for e in inside)

    def shift(x: float) -> float:
        return d * bisect.bisect_right(ends, x)

    # GPU operations move with their launch, whole: a kernel keeps its duration and starts later by
    # what the host had been slowed when it launched it (a GPU that only waited on the host)
    launch = {e["args"]["correlation"]: float(e["ts"]) for e in events
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
              and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    for e in events:
        if "ts" not in e:
            continue
        ts = float(e["ts"])
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation", e.get("id") if e.get("ph") == "f" else None)
        if e.get("cat") in GPU_OPS or (e.get("ph") == "f" and corr in launch):
            e["ts"] = ts + shift(launch.get(corr, ts))
            continue
        if "dur" in e:
            end = ts + float(e["dur"])
            e["dur"] = float(e["dur"]) + shift(end) - shift(ts)
        e["ts"] = ts + shift(ts)
    return doc, d


#: Trace categories of GPU operations (moved whole with their launch by :func:`slow_op`).
GPU_OPS = ("kernel", "gpu_memcpy", "gpu_memset")


def run(root: Path, inject_pairs: int, cache: Optional[str], held_out_from: Optional[int] = None) -> Dict[str, object]:
    import hta_report
    from hta_report.compare import compare

    pairs = sorted({p.name[:-2] for p in root.iterdir() if p.name.endswith(("-a", "-b")) and p.is_dir()})
    pairs = [p for p in pairs if (root / f"{p}-a").is_dir() and (root / f"{p}-b").is_dir()]
    verdicts: List[str] = []  # the headline (noise band) verdicts
    stat_verdicts: List[str] = []  # the statistical test's (StatTest.verdict)
    detect: Dict[float, List[Tuple[str, bool]]] = {k: [] for k in SIZES}
    stat_detect: Dict[float, List[str]] = {k: [] for k in SIZES}
    work = Path(tempfile.mkdtemp(prefix="compare-power-"))
    for i, p in enumerate(pairs):
        a = hta_report.analyze(str(root / f"{p}-a"), cache=cache)
        b = hta_report.analyze(str(root / f"{p}-b"), cache=cache)
        c = compare(a, b)
        s = c.stats
        verdicts.append(c.verdict)
        stat_verdicts.append(s.verdict)
        print(f"A/A {p}: band {c.verdict:10s} test {s.verdict:12s} step {s.change_pct:+6.1f} % [{s.change_pct_low:+6.1f}, "
              f"{s.change_pct_high:+6.1f}] raw {s.raw_change_pct:+6.1f} % env x{s.environment_factor:.3f} "
              f"[{s.environment_low:.3f}, {s.environment_high:.3f}] items {s.items_significant}/{s.items_tested} "
              f"({s.step_method})", flush=True)
        if i >= inject_pairs:
            continue
        ops = [o for o in b.ranks[0].cpu.top_ops if o.category == "cpu_op"]
        target = ops[0].name
        src = _trace_file(root / f"{p}-b")
        for k in SIZES:
            doc, d = slow_op(_read(src), target, k, b.ranks[0].steps.mean_us)
            out = work / f"{p}-b-{k:g}"
            out.mkdir(exist_ok=True)
            (out / src.name.replace(".gz", "")).write_text(json.dumps(doc))
            bk = hta_report.analyze(str(out), cache=cache)
            ck = compare(a, bk)
            first = next((it for it in ck.stats.items if it.status == "changed"), None)
            named = first is not None and first.name == target
            detect[k].append((ck.verdict, named))
            stat_detect[k].append(ck.stats.verdict)
            sk = ck.stats
            print(f"  +{k:g} % {target} (+{d:.0f} us each): band {ck.verdict:10s} test {sk.verdict:12s} step {sk.change_pct:+6.1f} % "
                  f"[{sk.change_pct_low:+6.1f}, {sk.change_pct_high:+6.1f}] first: "
                  f"{first.name if first else '-'} {'(named)' if named else ''}", flush=True)
    n = len(verdicts)
    false = sum(v in ("regressed", "improved") for v in verdicts)
    summary: Dict[str, object] = {
        "aa_pairs": n, "aa_false": false, "aa_false_rate": false / n if n else 0.0,
        "aa_verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
    }
    stat_false = sum(v in ("regressed", "improved") for v in stat_verdicts)
    summary["aa_test_false"] = stat_false
    summary["aa_test_verdicts"] = {v: stat_verdicts.count(v) for v in sorted(set(stat_verdicts))}
    print(f"\nA/A: {n} pairs, false regressed/improved: band {false} ({100 * false / max(n, 1):.1f} %), "
          f"test {stat_false}; band verdicts {summary['aa_verdicts']}, test {summary['aa_test_verdicts']}")
    if held_out_from is not None:
        for name, part in (("tuning", verdicts[:held_out_from]), ("held out", verdicts[held_out_from:])):
            bad = sum(v in ("regressed", "improved") for v in part)
            counts = {v: part.count(v) for v in sorted(set(part))}
            summary["aa_" + name.replace(" ", "_")] = {"pairs": len(part), "false": bad, "verdicts": counts}
            print(f"  {name} pairs: {len(part)}, false: {bad}; verdicts {counts}")
    for k in SIZES:
        rows = detect[k]
        if not rows:
            continue
        hit = sum(v == "regressed" for v, _ in rows)
        named = sum(nm for _, nm in rows)
        test_hit = stat_detect[k].count("regressed")
        summary[f"inject_{k:g}"] = {"pairs": len(rows), "detected": hit, "test_detected": test_hit,
                                    "named_first": named,
                                    "verdicts": {v: [x for x, _ in rows].count(v) for v in set(x for x, _ in rows)}}
        print(f"+{k:g} % of the step: detected by the band {hit}/{len(rows)} ({100 * hit / len(rows):.0f} %), "
              f"by the test {test_hit}/{len(rows)}, "
              f"slowed op named first {named}/{len(rows)} ({100 * named / len(rows):.0f} %); "
              f"verdicts {summary[f'inject_{k:g}']['verdicts']}")
    return summary


#: Unprofiled change (%) beyond which a fix pair's truth is improved / regressed, and within which unchanged;
#: between the two the pair is not scored (the unprofiled timing itself cannot tell).
TRUTH_CHANGE_PCT, TRUTH_SAME_PCT = 5.0, 2.0


def unprofiled_truth(pair: Path) -> Tuple[float, str]:
    """A fix pair's change without the profiler (%, ``unprofiled.json`` of
    ``bench/fixbench/record.py``: each round's median step after / before,
    the median over rounds; medians, because a round's first steps and a
    neighbour's burst of load move single steps by 10x on the shared machine)
    and what it says: ``improved`` (< −5 %), ``regressed`` (> +5 %),
    ``unchanged`` (within ±2 %) or ``unclear``."""
    import statistics
    u = json.loads((pair / "unprofiled.json").read_text())
    ratios = [statistics.median(a) / statistics.median(b) for b, a in zip(u["before"], u["after"])]
    r = 100 * (statistics.median(ratios) - 1)
    truth = ("improved" if r < -TRUTH_CHANGE_PCT else "regressed" if r > TRUTH_CHANGE_PCT
             else "unchanged" if abs(r) < TRUTH_SAME_PCT else "unclear")
    return r, truth


def fixpairs(root: Path, rounds: List[str], cache: Optional[str]) -> Dict[str, int]:
    """Compare every ``root/<pair>/<round>-before`` with ``<round>-after`` and
    score the headline (band) verdict and the statistical test's against
    :func:`unprofiled_truth`; prints one line per comparison and the counts."""
    import hta_report
    from hta_report.compare import compare

    tot: Dict[str, int] = {"scored": 0, "band right": 0, "test right": 0, "test inconclusive": 0,
                           "test interval holds the unprofiled change": 0, "compared": 0}
    for pair in sorted(p for p in root.iterdir() if (p / "unprofiled.json").is_file()):
        r, truth = unprofiled_truth(pair)
        for rd in rounds:
            if not ((pair / f"{rd}-before").is_dir() and (pair / f"{rd}-after").is_dir()):
                continue
            c = compare(hta_report.analyze(str(pair / f"{rd}-before"), cache=cache),
                        hta_report.analyze(str(pair / f"{rd}-after"), cache=cache))
            s = c.stats
            holds = s.change_pct_low <= r <= s.change_pct_high
            tot["compared"] += 1
            tot["test interval holds the unprofiled change"] += holds
            if truth != "unclear":
                tot["scored"] += 1
                tot["band right"] += c.verdict == truth
                tot["test right"] += s.verdict == truth
                tot["test inconclusive"] += s.verdict == "inconclusive"
            print(f"{pair.name:34s} {rd}: unprofiled {r:+7.1f} % ({truth:9s}) band {c.verdict:10s} "
                  f"{c.step_time_change_pct:+7.1f} %  test {s.verdict:12s} {s.change_pct:+7.1f} % "
                  f"[{s.change_pct_low:+7.1f}, {s.change_pct_high:+7.1f}]{' holds' if holds else ''}", flush=True)
    print(tot)
    return tot


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--pairs", type=int, default=40)
    u = sub.add_parser("run")
    u.add_argument("root")
    u.add_argument("--inject-pairs", type=int, default=20, help="pairs whose new side gets the injections")
    u.add_argument("--cache", default=None, help="hta-report's cache folder (reruns skip the analyses)")
    u.add_argument("--json", default=None, help="also write the summary here")
    u.add_argument("--held-out-from", type=int, default=None,
                   help="the A/A rates also apart for the pairs before and from this index (tuning / held out)")
    f = sub.add_parser("fixpairs")
    f.add_argument("root", help="a mode folder of bench/fixbench/record.py's output (OUT/one-process)")
    f.add_argument("--rounds", default="0,1,2,3", help="comma-separated rounds to compare")
    f.add_argument("--cache", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "fixpairs":
        fixpairs(Path(args.root), args.rounds.split(","), args.cache)
        return 0
    if args.cmd == "record":
        os.makedirs(args.out, exist_ok=True)
        record(Path(args.out), args.pairs)
        return 0
    summary = run(Path(args.root), args.inject_pairs, args.cache, args.held_out_from)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
