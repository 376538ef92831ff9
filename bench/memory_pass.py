"""What reading the ``[memory]`` events and the occupancy args costs.

HTA's parser drops instant events, so :func:`hta_report.load.memory_events.read_memory_events`
reads each trace file a second time (one decompression; only blocks holding
``"[memory]"`` are decoded). This prints, per trace, the time of that pass
next to the parse it adds to (our fast parser with the report's args, and
HTA's own ``parse_trace_file``), all in this process and run, best of
``--repeat``, with the machine's load (``uptime``). Also the parse with and
without the three occupancy args (``SM_ARGS``) the report now reads.

Traces: every file under ``../shared/traces/hta`` and any given on the command line
(e.g. a ``collect --profile-memory`` run, which has [memory] events).

Usage: ``python bench/memory_pass.py [TRACE ...] [--repeat 3]``.
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import time
from pathlib import Path

from hta_report.load.fastparse import hta_parse_trace_file, parse_trace_file
from hta_report.load.memory_events import read_memory_events
from hta_report.load.parse import REPORT_ARGS, report_parser_config

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "hta"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    files = sorted(p for p in SHARED.rglob("*.json*")) + [
        p for t in args.traces for p in (sorted(t.glob("*.json*")) if t.is_dir() else [t]) if p.name != "manifest.json"]
    cfg = report_parser_config()
    base = report_parser_config()
    base.set_args([a for a in base.get_args() if a.name in REPORT_ARGS])
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"{'trace':58} {'[memory]':>8} {'pass s':>7} {'fast s':>7} {'HTA s':>7} {'pass/fast':>9} "
          f"{'pass/HTA':>8} {'+SM args':>8}")
    for f in files:
        n = len(read_memory_events(f))
        t_pass = best(lambda: read_memory_events(f), args.repeat)
        t_fast = best(lambda: parse_trace_file(f, cfg), args.repeat)
        t_base = best(lambda: parse_trace_file(f, base), args.repeat)
        t_hta = best(lambda: hta_parse_trace_file(f, cfg), 1)
        name = str(f.relative_to(SHARED)) if SHARED in f.parents else str(f)
        print(f"{name[-58:]:58} {n:8d} {t_pass:7.3f} {t_fast:7.3f} {t_hta:7.3f} {t_pass / t_fast:9.2f} "
              f"{t_pass / t_hta:8.2f} {t_fast / t_base:8.2f}")


if __name__ == "__main__":
    main()
