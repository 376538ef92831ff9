"""Fuzz ``hta_report.analyze`` with mutated traces and count what happens.

    python bench/fuzz.py --cases 5000            # half structural, half byte-level
    python bench/fuzz.py --cases 2000 --mode bytes --seed 7 --html

Prints how many cases it tried, how they ended (ok; an error of our own; an
error converted by the catch-all from an unexpected exception, by type;
an unhandled exception, by type) and the time taken. Exits 1 when any case
ended in an unhandled exception. The mutations are those of the test suite
(tests/fuzzing.py); traces from ../shared are read in place when present.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import fuzzing  # noqa: E402


_saved = collections.Counter()


def _save(folder, outcome, files) -> None:
    if folder is None:
        return
    _saved[outcome] += 1
    case = folder / f"{outcome}-{_saved[outcome]}"
    case.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (case / name).write_bytes(data)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="number of cases (default 2000)")
    parser.add_argument("--mode", choices=["both", "structural", "bytes"], default="both")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--html", action="store_true", help="also render HTML (slower)")
    parser.add_argument("--show", type=int, default=3, help="tracebacks of unhandled exceptions to print")
    parser.add_argument("--save", type=Path, default=None,
                        help="save the files of each case that ended unhandled or converted under SAVE/<outcome>-<n>/")
    args = parser.parse_args(argv)

    modes = {"structural": [("structural", fuzzing.structural_case())], "bytes": [("bytes", fuzzing.byte_case())],
             "both": [("structural", fuzzing.structural_case()), ("bytes", fuzzing.byte_case())]}[args.mode]
    outcomes = collections.Counter()
    converted = collections.Counter()
    unhandled = collections.Counter()
    shown = []
    start = time.perf_counter()
    for i, (name, strategy) in enumerate(modes):
        n = args.cases // len(modes) + (1 if i < args.cases % len(modes) else 0)

        @seed(args.seed)
        @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def one(files):
            try:
                outcome, exc = fuzzing.run_case(files, html=args.html)
            except Exception as exc:  # what the test suite would fail on
                outcomes[(name, "unhandled")] += 1
                unhandled[type(exc).__name__] += 1
                if len(shown) < args.show:
                    shown.append("".join(traceback.format_exception(exc)))
                _save(args.save, "unhandled", files)
                return
            outcomes[(name, outcome)] += 1
            if outcome == "converted":
                _save(args.save, "converted", files)
            if outcome == "converted":
                message = str(exc)
                match = re.search(r"\b(\w+(?:Error|Exception|Warning))\b", message)
                converted[match.group(1) if match else message[:80]] += 1

        one()
    elapsed = time.perf_counter() - start
    tried = sum(outcomes.values())
    print(f"cases tried: {tried} in {elapsed:.1f} s ({tried / elapsed:.1f} cases/s)")
    for name, _ in modes:
        parts = {k[1]: v for k, v in outcomes.items() if k[0] == name}
        print(f"  {name}: " + ", ".join(f"{k} {parts.get(k, 0)}" for k in ("ok", "error", "converted", "unhandled")))
    print(f"converted by the catch-all: {sum(converted.values())} " +
          (f"({', '.join(f'{k} {v}' for k, v in converted.most_common())})" if converted else ""))
    print(f"unhandled exceptions: {sum(unhandled.values())} " +
          (f"({', '.join(f'{k} {v}' for k, v in unhandled.most_common())})" if unhandled else ""))
    for text in shown:
        print("-" * 60 + "\n" + text)
    return 1 if unhandled else 0


if __name__ == "__main__":
    sys.exit(main())
