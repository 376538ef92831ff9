#!/usr/bin/env python
"""Fuzz the native Kineto reader (native/reader.cpp) with libFuzzer, ASan and UBSan.

Builds native/fuzz_reader.cpp with ``clang++ -fsanitize=fuzzer,address,undefined``
(any sanitizer report ends the run: ``-fno-sanitize-recover=all``), seeds a
corpus with runs of events cut from the sample traces, the shared real traces
(``../shared/traces`` where present) and hostile inputs (Kineto's unescaped
quotes, deep nesting, numbers out of range, invalid UTF-8), runs the fuzzer for
``--seconds`` and prints the executions and the sanitizer reports.

    python bench/fuzz_native.py                  # 300 s (the longer campaign)
    python bench/fuzz_native.py --seconds 60     # CI's bounded run (.ci/run)

Exit status: 0 with no report; 1 with a report (the crashing input is kept
under ``--work`` as ``crash-*``/``leak-*``/``timeout-*``); 2 without clang++ or its libFuzzer (compiler-rt).
The corpus under ``--work`` grows from run to run.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

REPO = Path(__file__).resolve().parent.parent
SOURCES = [REPO / "native" / "fuzz_reader.cpp", REPO / "native" / "reader.cpp", REPO / "native" / "reader.hpp"]
SHARED = Path(os.environ.get("HTA_REPORT_SHARED", REPO.parent / "shared")) / "traces"
_SEP = re.compile(rb"\}\s*,\s*\{")

#: Hand-written seeds: the hostile inputs of tests/test_native_reader.py and tests/test_hostile_load.py in small.
HOSTILE = [
    b'[{"ph":"X","cat":"user_annotation","name":"user "quoted" range","pid":1,"tid":2,"ts":5,"dur":1}]',
    b'[{"ph":"X","cat":"cpu_op","name":"cast "x", "id": 7 y","pid":1,"tid":2,"ts":5,"dur":1}]',
    b'[{"ph":"X","name":"a","args":{"Input Dims":' + b"[" * 600 + b"]" * 600 + b"}}]",
    b'[{"ts":1e400,"dur":123456789012345678901234567890,"pid":-9223372036854775809}]',
    b'[{"name":"\xff\xc0\x80\xed\xa0\x80\xe2\x82","cat":"\\ud800\\udc00\\ud800"}]',
    b'[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":"stream 7","ts":4457415652144.981,"dur":1.5,'
    b'"args":{"stream":7,"correlation":9,"bytes":1024,"Input type":["float","Scalar"],"blocks per SM":2.5,'
    b'"est. achieved occupancy %":100,"warps per SM":null}},{"ph":"f","id":9,"bp":"e","s":true}]',
]


def clang() -> str:
    for name in ("clang++", "clang++-18", "clang++-17", "clang++-16", "clang++-15", "clang++-14"):
        path = shutil.which(name)
        if path:
            return path
    return ""


def build(work: Path, cxx: str) -> Path:
    """The fuzzer binary under ``work`` (rebuilt when a source is newer)."""
    exe = work / "fuzz_reader"
    if exe.is_file() and all(exe.stat().st_mtime >= s.stat().st_mtime for s in SOURCES):
        return exe
    cmd = [cxx, "-std=c++17", "-g", "-O1", "-fno-omit-frame-pointer",
           "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
           str(SOURCES[0]), str(SOURCES[1]), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(2)  # no usable libFuzzer (clang without compiler-rt): as without clang
    return exe


def _trace_files(limit: int) -> List[Path]:
    out = sorted((REPO / "sample_traces").rglob("*.json.gz"))
    if SHARED.is_dir():
        shared = sorted(p for p in SHARED.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
        out += [p for p in shared if p.stat().st_size < 8 << 20]
    return out[:limit]


def chunks(path: Path, size: int = 4096, count: int = 8) -> Iterator[bytes]:
    """Up to ``count`` runs of whole events of about ``size`` bytes from the
    ``traceEvents`` array of ``path``, each as a JSON array."""
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    i = data.find(b'"traceEvents"')
    if i < 0:
        return
    start = data.find(b"[", i) + 1
    step = max(size, (len(data) - start) // max(1, count))
    for k in range(count):
        lo = start + k * step
        if lo >= len(data):
            return
        first = data.find(b"{", lo)
        m = None
        for m in _SEP.finditer(data, first + size // 2, first + size * 2):
            break
        if first < 0 or m is None:
            return
        yield b"[" + data[first:m.start() + 1] + b"]"


def seed(seeds: Path, limit: int) -> int:
    seeds.mkdir(parents=True, exist_ok=True)
    n = 0
    for k, data in enumerate(HOSTILE):
        (seeds / f"hostile-{k}.json").write_bytes(data)
        n += 1
    for f, path in enumerate(_trace_files(limit)):
        for k, data in enumerate(chunks(path)):
            (seeds / f"trace-{f}-{k}.json").write_bytes(data)
            n += 1
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--work", default=os.environ.get("HTA_FUZZ_DIR", "/tmp/hta-fuzz-native"))
    ap.add_argument("--max-len", type=int, default=16384)
    ap.add_argument("--traces", type=int, default=40, help="trace files to seed from (sample traces first)")
    args = ap.parse_args(argv)
    cxx = clang()
    if not cxx:
        print("clang++ not found: the fuzz target needs libFuzzer (apt-get install clang)", file=sys.stderr)
        return 2
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    exe = build(work, cxx)
    built = time.perf_counter() - t0
    n_seeds = seed(work / "seeds", args.traces)
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    cmd = [str(exe), str(corpus), str(work / "seeds"), f"-max_total_time={args.seconds}", f"-max_len={args.max_len}",
           "-print_final_stats=1", "-rss_limit_mb=2048", "-timeout=10", f"-artifact_prefix={work}/"]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    log = proc.stdout + proc.stderr
    (work / "last-run.log").write_text(log)
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    rate = re.search(r"stat::average_exec_per_sec:\s*(\d+)", log)
    reports = len(re.findall(r"ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)", log))
    reports += len(re.findall(r"runtime error:", log))
    print(f"clang++: {cxx} (build {built:.1f} s); seeds: {n_seeds}; corpus: {len(list(corpus.iterdir()))} inputs")
    print(f"executions: {execs.group(1) if execs else '?'} in {args.seconds} s "
          f"({rate.group(1) if rate else '?'}/s); sanitizer reports: {reports}; exit {proc.returncode}")
    if proc.returncode != 0 or reports:
        print(log[-4000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
