"""What the bad-input checks cost when loading a directory of traces.

    python bench/validation_cost.py ../shared/traces/hta/trace_diff/control --repeat 5

For each trace: the checks before parsing (:func:`validation.check_file`: the
size cap, counting a .json.gz by streaming decompression when it could pass
the cap, and the first 64 KiB), reading and parsing once, and the pass over
the events (:func:`validation.clean_events`); then ``load_traces`` in full
against HTA parsing the same files by itself (``hta.common.trace.Trace``).
Times are the best of ``--repeat`` runs, in seconds.
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hta_report.load import validation  # noqa: E402
from hta_report.load.discovery import find_trace_files  # noqa: E402
from hta_report.load import load_traces, quiet_hta  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def hta_alone(trace_dir: Path) -> None:
    from hta.common.trace import Trace

    paths = find_trace_files(trace_dir)
    with quiet_hta():
        trace = Trace(trace_files={i: str(p.resolve()) for i, p in enumerate(paths)}, trace_dir=str(trace_dir))
        for key in range(len(paths)):
            trace.parse_single_rank(key)
        trace.align_and_filter_trace(False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-trace-size", type=validation.parse_size, default=validation.DEFAULT_MAX_TRACE_BYTES)
    args = parser.parse_args(argv)

    for path in find_trace_files(args.trace_dir):
        opener = gzip.open if validation.is_gzip_name(path) else open
        with opener(path, "rb") as fh:
            raw = fh.read()
        doc = json.loads(raw)
        n = len(doc["traceEvents"])
        counted = path.stat().st_size * validation.MAX_DEFLATE_RATIO > args.max_trace_size
        check = best(lambda: validation.check_file(path, args.max_trace_size), args.repeat)
        parse = best(lambda: json.loads(validation.decode_text(opener(path, "rb").read(), path)), args.repeat)
        clean = best(lambda: validation.clean_events(copy.copy(doc["traceEvents"])), args.repeat)
        print(f"{path}: {path.stat().st_size:,} bytes on disk, {len(raw):,} decompressed, {n:,} events")
        print(f"  check_file (size cap{', gzip counted in full' if counted else ''}, first 64 KiB): {check:.3f} s")
        print(f"  read + parse once: {parse:.3f} s; clean_events: {clean:.3f} s")
    ours = best(lambda: load_traces(args.trace_dir, max_trace_bytes=args.max_trace_size), args.repeat)
    theirs = best(lambda: hta_alone(args.trace_dir), args.repeat)
    print(f"load_traces (checks, parse once, HTA): {ours:.3f} s; HTA parsing alone: {theirs:.3f} s; "
          f"difference {ours - theirs:+.3f} s ({100 * (ours - theirs) / theirs:+.1f} %)")
    # the cap low enough that the gzip is counted in full
    small_cap = path.stat().st_size * validation.MAX_DEFLATE_RATIO - 1
    counted = best(lambda: validation.check_file(path, max(small_cap, len(raw) + 1)), args.repeat)
    print(f"check_file with a cap that forces the full streaming count of the last file: {counted:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
