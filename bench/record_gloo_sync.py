"""Record three 2-rank gloo runs that sync gradients three ways, and read them.

Why: on a CPU backend the step thread waits for its collectives in
``Work.wait()``, which the profiler does not record, while gloo's own thread
runs ``gloo:all_reduce``; before 2026-11-29 the report saw none of that wait
(``exposed-communication`` looked at communication kernels only). The three
ways, the same 8-layer 512-wide MLP, batch 64, SGD, one thread per rank:

- ``perparam``: a Python loop of blocking ``dist.all_reduce`` over the
  parameters after ``loss.backward()`` (the "naive DDP" of course labs);
- ``gather``: per parameter, ``dist.gather`` to rank 0, the mean there, then
  ``dist.scatter`` back;
- ``ddp``: ``DistributedDataParallel`` (bucketed, started during backward).

Each is recorded under ``torchrun --nproc-per-node 2`` with a profiler
schedule (wait 1, warmup 1, active 5), then analyzed; one line per run: the
mean step, the step thread's wait for its collectives (% of the step, per
rank), and the report's first finding. The traces go under ``--out`` (never
the repository).

    python bench/record_gloo_sync.py --out /tmp/gloo-sync
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import sys, torch, torch.distributed as dist
    from torch.profiler import profile, schedule, ProfilerActivity
    mode, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo"); rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1); torch.manual_seed(0)
    layers = []
    for i in range(8):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 512), torch.randn(64, 512)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        if mode == "perparam":
            for p in model.parameters():
                dist.all_reduce(p.grad); p.grad /= world
        elif mode == "gather":
            for p in model.parameters():
                if rank == 0:
                    bufs = [torch.empty_like(p.grad) for _ in range(world)]
                    dist.gather(p.grad, bufs, dst=0)
                    dist.scatter(p.grad, [torch.stack(bufs).mean(0)] * world, src=0)
                else:
                    dist.gather(p.grad, dst=0)
                    dist.scatter(p.grad, src=0)
        opt.step()

    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=5),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.pt.trace.json")) as prof:
        for _ in range(7):
            step(); prof.step()
    dist.barrier(); dist.destroy_process_group()
''')

MODES = ("perparam", "gather", "ddp")


def record(out: Path, mode: str) -> Path:
    """Record ``mode`` into ``out/mode`` (two rank files); returns that folder."""
    folder = out / mode
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    script = out / "gloo_sync.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    str(script), mode, str(folder)], check=True, env=env, capture_output=True, timeout=300)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES)
    args = ap.parse_args()
    from hta_report.api import analyze

    for mode in args.modes:
        result = analyze(record(args.out, mode), cache=None)
        step = max(r.steps.mean_us for r in result.ranks) / 1e3
        waits = ", ".join(f"rank {r.rank} {100 * r.comm.host_exposed_us_per_step / r.window_us:.0f} %"
                          for r in result.ranks if r.window_us > 0)
        first = result.findings[0] if result.findings else None
        print(f"{mode:9s} step {step:6.2f} ms; step thread waits for its collectives: {waits}; first finding: "
              + (f"{first.id} [{first.severity}] {first.title}" if first else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
