#!/usr/bin/env python
"""Record GPU pairs for ``bench/compare_power.py``: fix pairs and A/A pairs with ``collect``.

Issue 52 judges ``compare`` on same-configuration (A/A) pairs and on real fix
pairs "from the GPU recordings when a device is lent". This script records
both on a CUDA machine, each recording in its own process as a user records
"before" and "after" (``python -m hta_report collect --workload ...``), with
12 recorded steps (10 analyzed; ``collect``'s default is 7), so that a
recording stays near 1-2 MB and 60 of them come back from a lent machine:

* ``OUT/fix/<case>/<i>-before/`` and ``<i>-after/`` for each case of
  :data:`FIX_CASES`, rounds ``i`` alternating which side runs first, and
  ``OUT/fix/<case>/unprofiled.json``: the same workload's step without the
  profiler, ``{"before": [[ms, ...] per round], "after": [...]}``, each list
  the mean step (ms) of consecutive blocks of :data:`BLOCK` steps
  (``torch.cuda.synchronize`` closes each block; the first block is warm-up
  and dropped). That is the layout ``compare_power.py fixpairs`` reads.
* ``OUT/aa/NN-a/`` and ``NN-b/``: the :data:`AA_CASE` workload recorded twice,
  seconds apart: ``compare_power.py run`` reads them.

Recording stops starting new recordings after ``--budget-s`` seconds; what was
recorded is kept. Usage::

    python bench/compare_gpu.py record OUT [--rounds 4] [--aa-pairs 12] [--budget-s 300]
    python bench/compare_gpu.py time OUT CASE [--rounds 4]   # the unprofiled steps of one case

Needs a CUDA device; never writes into the repository unless OUT is there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # ``time`` runs as a script: hta_report from this checkout, installed or not

#: case -> (flags of both sides, the "before" side's flags, the "after" side's flags, the fix).
FIX_CASES: Dict[str, Tuple[List[str], List[str], List[str], str]] = {
    "pinned-workers": (["--workload", "cnn", "--width", "32", "--batch-size", "2048", "--num-workers", "4"],
                       ["--no-pin-memory"], ["--pin-memory"], "DataLoader(pin_memory=True), non_blocking copies"),
    "slow-data": (["--workload", "cnn", "--width", "32", "--batch-size", "256", "--slow-data", "20"],
                  ["--num-workers", "0"], ["--num-workers", "4"], "DataLoader(num_workers=4)"),
    "amp": (["--workload", "transformer", "--width", "1024", "--depth", "2", "--batch-size", "64"],
            ["--no-amp"], ["--amp"], "bf16 autocast"),
    "pinned": (["--workload", "cnn", "--width", "32", "--batch-size", "2048"],
               ["--no-pin-memory"], ["--pin-memory"],
               "DataLoader(pin_memory=True) without workers (pinning on the training thread)"),
}
#: The A/A workload: both sides identical.
AA_CASE: List[str] = ["--workload", "transformer", "--width", "256", "--depth", "1", "--batch-size", "32"]
#: Profiler schedule of every recording: 1 skipped, 1 warm-up, 12 recorded steps (10 analyzed).
SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "12"]
#: Steps per timed block of the unprofiled run, and blocks timed after the warm-up block.
BLOCK, BLOCKS = 20, 5


#: Where the recordings run: ``cuda``; ``cpu`` only for a smoke test of this script (``--device cpu``).
DEVICE = "cuda"


def _collect(out: Path, flags: List[str]) -> Tuple[float, str]:
    """One ``collect`` run into ``out``: (seconds, error or '')."""
    cmd = [sys.executable, "-m", "hta_report", "collect", "-o", str(out), "--device", DEVICE, "-q",
           *SCHEDULE, *flags]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
        err = "" if p.returncode == 0 else f"rc {p.returncode}: {p.stderr.strip()[-400:]}"
    except subprocess.TimeoutExpired:
        err = "timed out after 120 s"
    return time.perf_counter() - t, err


def _side_flags(case: str, after: bool) -> List[str]:
    common, before, fixed, _fix = FIX_CASES[case]
    return [*common, *(fixed if after else before)]


def record(out: Path, rounds: int, aa_pairs: int, budget_s: float) -> dict:
    """Fix rounds, then each case's unprofiled steps, then A/A pairs, until
    ``budget_s`` seconds have passed; writes and returns ``out/index.json``."""
    start = time.perf_counter()
    index: dict = {"fix": {c: {"fix": FIX_CASES[c][3], "seconds": [], "errors": []} for c in FIX_CASES},
                   "aa": {"flags": AA_CASE, "seconds": [], "errors": []}, "schedule": SCHEDULE}
    left = lambda: budget_s - (time.perf_counter() - start)  # noqa: E731
    for i in range(rounds):
        for case in FIX_CASES:
            for after in ((False, True) if i % 2 == 0 else (True, False)):
                if left() <= 0:
                    break
                secs, err = _collect(out / "fix" / case / f"{i}-{'after' if after else 'before'}",
                                     _side_flags(case, after))
                index["fix"][case]["seconds"].append(round(secs, 1))
                if err:
                    index["fix"][case]["errors"].append(err)
                print(f"{case} {i} {'after' if after else 'before'}: {secs:.1f} s {err[:200]}", flush=True)
    _save(out / "index.json", index)
    for case in FIX_CASES:
        t = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "time", str(out), case,
                                "--rounds", str(rounds), "--device", DEVICE], capture_output=True, text=True, timeout=90, cwd=str(ROOT))
            err = "" if p.returncode == 0 else p.stderr.strip()[-400:]
        except subprocess.TimeoutExpired:
            err = "timed out"
        index["fix"][case]["unprofiled_seconds"] = round(time.perf_counter() - t, 1)
        index["fix"][case]["unprofiled_error"] = err
        print(f"unprofiled {case}: {time.perf_counter() - t:.1f} s {err[:200]}", flush=True)
    _save(out / "index.json", index)
    for n in range(aa_pairs):
        if left() <= 0:
            break
        for s in "ab":
            secs, err = _collect(out / "aa" / f"{n:02d}-{s}", AA_CASE)
            index["aa"]["seconds"].append(round(secs, 1))
            if err:
                index["aa"]["errors"].append(err)
            print(f"aa {n:02d}-{s}: {secs:.1f} s {err[:200]}", flush=True)
    _save(out / "index.json", index)
    return index


class _BlockTimer:
    """Stands in for the profiler in ``run_workload``: every :data:`BLOCK`
    steps it waits for the GPU and notes the mean step (ms) of the block."""

    def __init__(self, torch) -> None:
        self.torch, self.n, self.blocks = torch, 0, []
        self.t = 0.0

    def step(self) -> None:
        self.n += 1
        if self.n % BLOCK == 0:
            if DEVICE == "cuda":
                self.torch.cuda.synchronize()
            now = time.perf_counter()
            if self.n > BLOCK:  # the first block is warm-up
                self.blocks.append(round((now - self.t) * 1e3 / BLOCK, 4))
            self.t = now


def time_case(out: Path, case: str, rounds: int) -> Dict[str, List[List[float]]]:
    """Run both sides of ``case`` without the profiler in this process,
    ``rounds`` rounds in alternating order; writes ``unprofiled.json``."""
    import torch

    from hta_report.collect.environment import rank_info
    from hta_report.collect.workloads import WORKLOADS
    from hta_report.collect.workloads.train import WorkloadConfig, run_workload

    res: Dict[str, List[List[float]]] = {"before": [], "after": []}
    for i in range(rounds):
        for after in ((False, True) if i % 2 == 0 else (True, False)):
            f = _side_flags(case, after)
            opt = {f[k].lstrip("-"): f[k + 1] for k in range(len(f) - 1) if f[k].startswith("--")
                   and not f[k + 1].startswith("--")}
            name = opt["workload"]
            _, width, depth, batch = WORKLOADS[name]
            cfg = WorkloadConfig(name=name, steps=BLOCK * (BLOCKS + 1),
                                 batch_size=int(opt.get("batch-size", batch)), width=int(opt.get("width", width)),
                                 depth=int(opt.get("depth", depth)), num_workers=int(opt.get("num-workers", 0)),
                                 pin_memory="--no-pin-memory" not in f and DEVICE == "cuda", slow_data_ms=float(opt.get("slow-data", 0)),
                                 amp="--amp" in f, device=DEVICE)
            timer = _BlockTimer(torch)
            run_workload(cfg, timer, rank_info())
            res["after" if after else "before"].append(timer.blocks)
    _save(out / "fix" / case / "unprofiled.json", res)
    print(json.dumps(res))
    return res


def _save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--rounds", type=int, default=4)
    r.add_argument("--aa-pairs", type=int, default=12)
    r.add_argument("--budget-s", type=float, default=300.0)
    t = sub.add_parser("time")
    t.add_argument("out")
    t.add_argument("case", choices=sorted(FIX_CASES))
    t.add_argument("--rounds", type=int, default=4)
    for p in (r, t):
        p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke test only")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.cmd == "time":
        time_case(Path(args.out), args.case, args.rounds)
        return 0
    index = record(Path(args.out), args.rounds, args.aa_pairs, args.budget_s)
    errs = [e for c in index["fix"].values() for e in c["errors"]] + index["aa"]["errors"]
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
