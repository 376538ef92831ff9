"""Labelled diagnosis benchmark for the advice engine.

Runs ``analyze`` over labelled cases and prints, per case, the expected and
the reported top finding, then ``top-1 accuracy: N/M (P %), false high on
healthy: K``.

Cases and their labels (set by what was injected, before looking at outputs):

* **cpu-***: built-in workloads recorded now, on this machine's CPU, by
  ``hta-report collect`` into a temporary directory (``--active 5``, one
  intra-op thread); healthy ones run the collector's defaults, the others
  inject slow data loading in the main process (``--num-workers 0
  --slow-data 5``, the README's example);
* **gpu-***: GPU traces played by the timeline simulator of ``tests/kineto.py``
  (a host thread launching kernels onto GPU streams that run them in order;
  blocking calls wait for the GPU). Each injects one cause through a knob of
  :func:`kineto.training_trace`; the others stay at the healthy defaults;
* the real traces in ``../shared/traces/hta`` are analyzed and shown, but not
  scored: nothing is known about what was injected into them, and a label
  read off the same evidence the rules use would prove nothing.

Scoring: the reported top finding is the report's first finding (largest
estimated gain). An injected case is right when it is one of the expected
rule ids (two ids when two rules name the same injected cause: slow loading
in the main process is both ``dataloader-bound`` and
``dataloader-main-process``). A healthy case is right when no finding has
medium or high severity (low findings are notes under 5 % of the step);
"false high on healthy" counts high-severity findings on healthy cases.

The **real-derived tier** (``bench/diagnosis_real.py``: real GPU traces with one
injected cause, CPU runs recorded with plain ``torch.profiler``) is printed
separately, scored by top-1, top-3 and attribution against its targets.

Usage: ``python bench/diagnosis.py [--tier own|real|all] [--skip-collect] [--skip-cpu] [--quick]
[--only TEXT] [--keep DIR]``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the trace builder (tests/kineto.py)

from kineto import training_trace  # noqa: E402

HEALTHY = "healthy"
SHARED = Path(os.environ.get("HTA_REPORT_SHARED", REPO.parent / "shared")) / "traces" / "hta"
DATALOADER = frozenset({"dataloader-bound", "dataloader-main-process"})


@dataclass
class Case:
    """One labelled case: ``make(dir)`` writes its traces into ``dir``."""

    name: str
    expected: FrozenSet[str]
    make: Callable[[Path], None]
    injected: str
    kind: str


@dataclass
class Outcome:
    case: Case
    top: str = HEALTHY
    top_severity: str = ""
    top_gain: float = 0.0
    highs: int = 0
    correct: bool = False
    error: str = ""
    seconds: float = 0.0
    notes: List[str] = field(default_factory=list)


def _sim(**knobs) -> Callable[[Path], None]:
    """Write one simulated rank (or ``world`` ranks with per-rank knobs)."""
    world = knobs.pop("world", 1)
    per_rank: Dict[int, dict] = knobs.pop("per_rank", {})

    def make(d: Path) -> None:
        for r in range(world):
            k = dict(knobs, **per_rank.get(r, {}))
            training_trace(rank=r, world_size=world, **k).write(d / f"rank-{r}.json.gz")
    return make


def _collect(*args: str, ranks: int = 1) -> Callable[[Path], None]:
    """Record a built-in workload with ``hta-report collect`` (CPU)."""
    def make(d: Path) -> None:
        # one intra-op thread per process: on a small shared machine, OpenMP threads that spin while
        # another process holds the cores inflate the compute many times over, and the
        # recorded steps would measure the machine's load rather than the workload
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "hta_report", "collect", "-o", str(d), "-q", "--device", "cpu", *args]
        if ranks > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
                   "--master-port", "29517", "-m", "hta_report", *cmd[3:]]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"collect failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return make


def cases(skip_collect: bool = False, only: str = "") -> List[Case]:
    """The labelled cases (see the module docstring)."""
    straggle = 1500.0
    gpu = [
        Case("gpu-healthy", frozenset({HEALTHY}), _sim(), "nothing", "sim"),
        Case("gpu-healthy-ddp4", frozenset({HEALTHY}), _sim(world=4, allreduce_us=300), "nothing (4 ranks, DDP overlap)", "sim"),
        Case("gpu-dataloader-main", DATALOADER, _sim(workers=False, dataloader_us=4000),
             "num_workers=0, 4 ms of loading per batch", "sim"),
        Case("gpu-dataloader-workers", frozenset({"dataloader-bound"}), _sim(dataloader_us=4000),
             "workers that deliver a batch 4 ms late", "sim"),
        Case("gpu-pageable-copy", frozenset({"pageable-memcpy"}), _sim(pinned=False, batch_bytes=16_000_000),
             "pin_memory=False, 16 MB batch", "sim"),
        Case("gpu-blocking-copy", frozenset({"blocking-copy"}), _sim(non_blocking=False, batch_bytes=16_000_000),
             "non_blocking=False, 16 MB batch", "sim"),
        Case("gpu-sync-per-layer", frozenset({"sync-in-step"}), _sim(item_per_layer=True),
             ".item() after every layer", "sim"),
        Case("gpu-tiny-kernels", frozenset({"launch-bound"}), _sim(gemm_us=5),
             "5 µs GEMMs (tiny batch)", "sim"),
        Case("gpu-slow-launches", frozenset({"launch-outliers"}), _sim(slow_launch_us=400),
             "every 10th launch call takes 400 µs", "sim"),
        Case("gpu-fp32-gemm", frozenset({"tensor-cores-unused"}), _sim(tensor_cores=False),
             "float32 SGEMM kernels on an H100", "sim"),
        Case("gpu-misaligned-bf16", frozenset({"misaligned-gemm"}), _sim(half_dims=[[64, 1020], [1020, 1020], [1020]]),
             "bf16 linears of width 1020", "sim"),
        Case("gpu-exposed-comm", frozenset({"exposed-communication"}),
             _sim(world=2, allreduce_us=1500, overlap_comm=False), "1.5 ms all-reduce after backward", "sim"),
        Case("gpu-straggler", frozenset({"rank-straggler"}),
             _sim(world=4, allreduce_us=300, per_rank={0: dict(comm_wait_us=straggle), 1: dict(comm_wait_us=straggle),
                                                      2: dict(extra_compute_us=straggle), 3: dict(comm_wait_us=straggle)}),
             "rank 2 computes 1.5 ms more per step", "sim"),
        Case("gpu-single-tensor-adam", frozenset({"unfused-optimizer"}), _sim(optimizer="single", params=48),
             "foreach=False over 48 parameters", "sim"),
        Case("gpu-zero-grad-zeros", frozenset({"zero-grad-zeros"}), _sim(set_to_none=False, params=200),
             "zero_grad(set_to_none=False), 200 parameters", "sim"),
        Case("gpu-checkpoint-stall", frozenset({"step-time-outliers"}),
             _sim(steps=10, slow_steps=(5,), slow_step_us=20_000), "a 20 ms host stall in step 5", "sim"),
        Case("gpu-data-parallel", frozenset({"data-parallel"}), _sim(data_parallel=True),
             "torch.nn.DataParallel", "sim"),
    ]
    common = ("--active", "5")
    cpu = [
        Case("cpu-cnn-healthy", frozenset({HEALTHY}), _collect("--workload", "cnn", *common), "collector defaults", "collect"),
        Case("cpu-rnn-healthy", frozenset({HEALTHY}), _collect("--workload", "rnn", *common), "collector defaults", "collect"),
        Case("cpu-transformer-healthy", frozenset({HEALTHY}), _collect("--workload", "transformer", *common),
             "collector defaults", "collect"),
        Case("cpu-ddp2-healthy", frozenset({HEALTHY}), _collect("--workload", "cnn", *common, ranks=2),
             "collector defaults, 2 gloo ranks", "collect"),
        Case("cpu-cnn-slow-data", DATALOADER, _collect("--workload", "cnn", "--num-workers", "0", "--slow-data", "5", *common),
             "--num-workers 0 --slow-data 5", "collect"),
        Case("cpu-rnn-slow-data", DATALOADER, _collect("--workload", "rnn", "--num-workers", "0", "--slow-data", "5", *common),
             "--num-workers 0 --slow-data 5", "collect"),
        Case("cpu-transformer-slow-data", DATALOADER,
             _collect("--workload", "transformer", "--num-workers", "0", "--slow-data", "5", *common),
             "--num-workers 0 --slow-data 5", "collect"),
    ]
    return [c for c in gpu + ([] if skip_collect else cpu) if only in c.name]


def evaluate(case: Case, root: Path) -> Outcome:
    """Make the case's traces under ``root`` and analyze them."""
    from hta_report.api import analyze

    out = Outcome(case)
    d = root / case.name
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        case.make(d)
        result = analyze(d)
    except Exception as exc:  # a case that cannot run counts as a miss, with the reason
        out.error = f"{type(exc).__name__}: {exc}"
        out.seconds = time.time() - t0
        return out
    out.seconds = time.time() - t0
    if result.findings:
        f = result.findings[0]
        out.top, out.top_severity, out.top_gain = f.id, f.severity, f.gain_pct
    out.highs = sum(f.severity == "high" for f in result.findings)
    if HEALTHY in case.expected:
        out.correct = not any(f.severity in ("high", "medium") for f in result.findings)
    else:
        out.correct = out.top in case.expected
    return out


def real_traces() -> List[tuple]:
    """(folder, top finding) for each real trace, unscored."""
    from hta_report.api import analyze

    rows = []
    if not SHARED.is_dir():
        return rows
    for folder in ["trace_diff/control", "trace_diff/test", "two_ranks", "alexnet", "amd_trace", "cpu_only",
                   "triton_example", "distributed_info_unavailable"]:
        path = SHARED / folder
        if not path.is_dir():
            continue
        try:
            result = analyze(path)
        except Exception as exc:
            rows.append((folder, f"error: {type(exc).__name__}: {exc}"))
            continue
        f = result.findings[0] if result.findings else None
        rows.append((folder, f"{f.id} [{f.severity}, {f.gain_pct:.1f} %]" if f else "no finding"))
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    """Run the benchmark; returns 0 (the figures are the result, not a gate)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-collect", action="store_true", help="leave out the cases recorded by hta-report collect")
    ap.add_argument("--keep", metavar="DIR", help="write the cases' traces here instead of a temporary directory")
    ap.add_argument("--only", default="", metavar="TEXT", help="run only the cases whose name contains TEXT")
    ap.add_argument("--tier", choices=("own", "real", "all"), default="all",
                    help="own: simulator and collector cases; real: the real-derived tier (bench/diagnosis_real.py)")
    ap.add_argument("--skip-cpu", action="store_true", help="real tier: leave out the CPU runs recorded now")
    ap.add_argument("--quick", action="store_true", help="real tier: only the 40 %% strength")
    args = ap.parse_args(argv)

    import logging
    logging.getLogger("hta").setLevel(logging.ERROR)
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    if args.tier in ("real", "all"):
        import diagnosis_real
        print("== real-derived tier: real traces with one injected cause, CPU runs recorded with plain torch.profiler")
        diagnosis_real.run(SHARED, args.only, args.quick, args.skip_cpu, args.keep)
        if args.tier == "real":
            print(f"load average at end: {os.getloadavg()[0]:.1f}")
            return 0
        print("\n== own tier: simulator (tests/kineto.py) and collector cases")
    with tempfile.TemporaryDirectory(prefix="hta-report-bench-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        outcomes = []
        print(f"{'case':<28} {'expected':<42} {'reported top finding':<42} result")
        for case in cases(args.skip_collect, args.only):
            o = evaluate(case, root)
            outcomes.append(o)
            expected = " | ".join(sorted(case.expected))
            reported = o.error[:60] if o.error else (
                f"{o.top} [{o.top_severity}, {o.top_gain:.1f} %]" if o.top != HEALTHY else "healthy (no finding)")
            if HEALTHY in case.expected and o.top != HEALTHY and not o.error:
                reported = f"healthy? top {o.top} [{o.top_severity}, {o.top_gain:.1f} %]"
            print(f"{case.name:<28} {expected:<42} {reported:<42} {'ok' if o.correct else 'MISS'}", flush=True)
        rows = real_traces() if not args.only else []
        if rows:
            print("\nreal traces (../shared/traces/hta), not scored: no injected label")
            for folder, top in rows:
                print(f"  {folder:<32} {top}")
    scored = len(outcomes)
    right = sum(o.correct for o in outcomes)
    false_high = sum(o.highs for o in outcomes if HEALTHY in o.case.expected)
    print(f"top-1 accuracy: {right}/{scored} ({100 * right / scored:.0f} %), false high on healthy: {false_high}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
