"""What ``with_stack=True`` costs, and whether it disturbs ``record_function`` ranges.

Runs one small training loop (an MLP on CPU, a DataLoader with
``num_workers=0``, SGD, ``loss.item()`` each step, and a user
``record_function("my_range")`` around forward and backward) under plain
``torch.profiler.profile`` with and without ``with_stack``, in alternation
(``--rounds`` of each, same process), and prints per configuration:

* host time per step while profiling (median over the active steps of all
  rounds) and the ratio with / without;
* the trace's size and its events, and the ratio;
* the ``user_annotation`` ranges (``ProfilerStep#``, ``enumerate(DataLoader)#``,
  ``Optimizer.step#``, ``my_range``): how many per step, their mean
  duration, and whether every one still nests inside its ``ProfilerStep``;
* then whether analyze locates the DataLoader finding's line;
* and what the attribution's timeline costs on ``--events`` synthetic
  ``python_function`` events (nests of four: user, torch, C call, user),
  split by one cause interval per nest.

Usage: ``python bench/with_stack.py [--rounds 3] [--steps 8] [--events 1000000]``. Prints the
machine's ``uptime`` load: timings are noisy on a shared machine, the ratio
(measured in the same run, rounds interleaved) is the figure to read.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

RANGES = ("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer.step#", "my_range")


def run_once(out: Path, with_stack: bool, steps: int) -> list:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            x = torch.randn(256)
            return x, x.sum().reshape(1)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = iter(DataLoader(Data(), batch_size=64, num_workers=0))
    times = []
    sched = torch.profiler.schedule(wait=0, warmup=2, active=steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                with_stack=with_stack, record_shapes=True,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out),
                                                                                      use_gzip=True)) as prof:
        for _ in range(steps + 2):
            t0 = time.perf_counter()
            x, y = next(loader)
            with torch.profiler.record_function("my_range"):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
            opt.step()
            loss.item()
            prof.step()
            times.append(time.perf_counter() - t0)
    return times[2:]


def trace_facts(out: Path) -> dict:
    (path,) = list(out.glob("*.json.gz"))
    doc = json.loads(gzip.open(path).read())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    counts, durs, outside = defaultdict(int), defaultdict(list), defaultdict(int)
    for e in events:
        if e.get("cat") != "user_annotation":
            continue
        key = next((r for r in RANGES if e["name"].startswith(r)), None)
        if key is None:
            continue
        counts[key] += 1
        durs[key].append(e["dur"])
        if key != "ProfilerStep#" and not any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1
                                              for s in steps):
            outside[key] += 1
    return {"bytes": path.stat().st_size, "events": len(events), "steps": len(steps),
            "python_function": sum(e.get("cat") == "python_function" for e in events),
            "ranges": {k: (counts[k] / max(len(steps), 1), statistics.mean(durs[k]), outside[k]) for k in RANGES
                       if counts[k]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"torch {torch.__version__}, {args.rounds} rounds of each, {args.steps} active steps per round")
    step_times = {False: [], True: []}
    facts = {}
    keep = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for ws in (False, True):
                out = Path(tmp) / f"{'stack' if ws else 'plain'}{r}"
                step_times[ws] += run_once(out, ws, args.steps)
                facts[ws] = trace_facts(out)
                keep[ws] = out
        for ws in (False, True):
            f = facts[ws]
            print(f"\nwith_stack={ws}: host time per step {statistics.median(step_times[ws]) * 1e3:.2f} ms "
                  f"(median of {len(step_times[ws])}); trace {f['bytes'] / 1e3:.0f} kB gz, {f['events']} events "
                  f"({f['python_function']} python_function), {f['steps']} ProfilerSteps")
            for k, (per_step, mean, outside) in f["ranges"].items():
                print(f"  {k:<24} {per_step:.2f} per step, mean {mean:.1f} us, {outside} outside their step")
        p, s = statistics.median(step_times[False]), statistics.median(step_times[True])
        size = facts[True]["bytes"] / facts[False]["bytes"]
        print(f"\nratio with/without: host time per step x{s / p:.2f}, trace size x{size:.1f}, "
              f"events x{facts[True]['events'] / facts[False]['events']:.1f}")
        per_step = {ws: {k: v[0] for k, v in facts[ws]["ranges"].items()} for ws in (False, True)}
        same = per_step[True] == per_step[False]
        print(f"record_function ranges per step identical with and without: {same}")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from hta_report.api import analyze

        result = analyze(keep[True], source_root=Path(__file__).resolve().parents[1])
        for f in result.findings:
            if f.locations:
                print(f"finding {f.id}: " + ", ".join(f"{loc.path}:{loc.line} ({loc.how}, {loc.share_pct:.0f} %)"
                                                      for loc in f.locations))
    timeline_cost(args.events)
    return 0


def timeline_cost(events: int) -> None:
    """Time :class:`hta_report.analysis.code._Thread` and its ``split`` on synthetic nests."""
    import numpy as np

    from hta_report.analysis.code import _Thread

    reps = max(events // 4, 1)
    base = np.arange(reps, dtype=float) * 10
    ts = np.stack([base, base + 1, base + 2, base + 3], 1).ravel()
    end = np.stack([base + 9, base + 8, base + 7, base + 4], 1).ravel()
    names = ["train.py(10): step", "torch/nn/modules/module.py(1782): _call_impl",
             "<built-in method linear of type object at 0x1>", "model.py(5): forward"] * reps
    t0 = time.perf_counter()
    th = _Thread(ts, end, names)
    t1 = time.perf_counter()
    acc = defaultdict(float)
    th.split(np.stack([base + 2.5, base + 6.5], 1), acc)
    t2 = time.perf_counter()
    print(f"\nattribution timeline: {len(ts):,} python_function events in {t1 - t0:.2f} s "
          f"({(t1 - t0) / len(ts) * 1e6:.2f} us per event); {reps:,} cause intervals split in {t2 - t1:.2f} s")


if __name__ == "__main__":
    raise SystemExit(main())
