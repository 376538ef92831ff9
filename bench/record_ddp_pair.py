"""Record 2-rank gloo DDP fix pairs on the CPU and score the job prediction.

Why: where ranks wait for each other at collectives, a fix's effect on the
job depends on which rank it shortens (docs/whatif.md, "Ranks that wait for
each other"). Two pairs, each recorded before and after the fix with
``torchrun --nproc-per-node 2`` under ``torch.profiler`` (ProfilerStep):

- ``straggler-loader``: rank 1's batches take ``--slow-ms`` to load
  (``num_workers=0``), rank 0's ``--fast-ms``; rank 0 waits for rank 1 in
  the gradient all-reduce. The fix (``num_workers=2``) removes the loading
  from the straggler: the job gains.
- ``waiting-loader``: rank 0's batches take ``--slow-ms`` to load, and rank
  1 spends ``--other-ms`` in host work no DataLoader fix touches (so it
  arrives last). The same fix shortens only the rank that waits: the job
  gains nothing.

For each pair: the job's measured step before and after (the largest of the
ranks' mean analyzed steps), the report's prediction for the DataLoader
finding (``findings[].whatif``, the job's figure), and what the rank saving
the most predicted alone (the figure the report gave before 2026-11-29).
Prints one line a pair. The traces go under ``--out`` (never the repository).

    python bench/record_ddp_pair.py --out /tmp/ddp-pairs
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset

    load_ms = {int(k): float(v) for k, v in (x.split(":") for x in sys.argv[1].split(","))}
    other_ms = {int(k): float(v) for k, v in (x.split(":") for x in sys.argv[2].split(","))}
    workers, out = int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)

    class Slow(Dataset):
        def __len__(self): return 10_000
        def __getitem__(self, i):
            time.sleep(load_ms.get(rank, 0.0) / 1e3 / 8)  # a batch of 8: load_ms a batch
            return torch.randn(256), torch.randint(0, 10, ()).item()

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=8, num_workers=workers, persistent_workers=workers > 0,
                        prefetch_factor=4 if workers else None)
    it = iter(loader)
    for _ in range(3):  # start the workers and fill their queue before the profiler
        next(it)
    time.sleep(0.5)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(out)) as prof:
        for step in range(10):
            x, y = next(it)
            if other_ms.get(rank):
                with torch.profiler.record_function("augment_on_host"):
                    t = time.perf_counter()
                    while time.perf_counter() - t < other_ms[rank] / 1e3:
                        pass
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()
''')

PAIRS = {
    # name: (load ms by rank, other host ms by rank)
    "straggler-loader": (lambda a: {0: a.fast_ms, 1: a.slow_ms}, lambda a: {}),
    "waiting-loader": (lambda a: {0: a.slow_ms, 1: a.fast_ms}, lambda a: {1: a.other_ms}),
}


def record(script: Path, out: Path, load: dict, other: dict, workers: int, port: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spec = lambda d: ",".join(f"{k}:{v}" for k, v in d.items()) or "0:0"  # noqa: E731
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", f"--master-port={port}",
           str(script), spec(load), spec(other), str(workers), str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))


def job_step_ms(result) -> float:
    """The job's measured step: the largest of the ranks' mean analyzed steps (ms)."""
    return max(r.steps.mean_us for r in result.ranks) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/ddp-pairs"))
    ap.add_argument("--slow-ms", type=float, default=40.0)
    ap.add_argument("--fast-ms", type=float, default=4.0)
    ap.add_argument("--other-ms", type=float, default=60.0)
    a = ap.parse_args()
    from hta_report.api import analyze

    a.out.mkdir(parents=True, exist_ok=True)
    script = a.out / "ddp_job.py"
    script.write_text(SCRIPT)
    rows = []
    for i, (name, (load, other)) in enumerate(PAIRS.items()):
        before, after = a.out / name / "before", a.out / name / "after"
        record(script, before, load(a), other(a), 0, 29500 + 2 * i)
        record(script, after, load(a), other(a), 2, 29501 + 2 * i)
        rb, ra = analyze(str(before), cache=None), analyze(str(after), cache=None)
        f = next((f for f in rb.findings if f.whatif is not None and f.whatif.edit == "DataLoader hidden"), None)
        best = max(((w.step_us_before - w.step_us_after) / w.step_us_before, x.rank)
                   for x in rb.ranks for w in x.replay.whatifs if w.edit == "DataLoader hidden" and w.applies)
        row = {"pair": name, "before_ms": round(job_step_ms(rb), 2), "after_ms": round(job_step_ms(ra), 2),
               "predicted_ms": round(f.whatif.step_us_after / 1e3, 2) if f else None,
               "interval_ms": [round(f.whatif.step_us_low / 1e3, 2), round(f.whatif.step_us_high / 1e3, 2)] if f
               else None, "finding": f.id if f else None,
               "best_rank_saving_pct": round(100 * best[0], 1), "best_rank": best[1]}
        rows.append(row)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
