"""Record CPU training traces with plain ``torch.profiler`` (not hta-report's collector).

Each case trains a small model on synthetic data the way a user script would:
a ``DataLoader``, an optimizer, ``torch.profiler.profile`` with a schedule and
``tensorboard_trace_handler``, ``prof.step()`` per iteration. One knob injects
one cause; everything else stays as a well-tuned script has it (a fused
optimizer, a cheap dataset). Used by ``bench/diagnosis.py`` (the real-derived
tier) and by the tests; the traces go where the caller says (a temporary
directory), never into the repository.

``fix`` records the same script after the fix a user would make for the
case's cause (:data:`FIXES`): the other half of a before/after pair for
``bench/whatif.py --pairs`` (the cause's cost stays in the script, only the
fix changes; ``extra_ms`` gives both halves the same injected cost).

Usage: ``python bench/record_cpu.py OUT_DIR CASE [--strength 0.4] [--fix] [--extra-ms MS]``
with CASE one of :data:`CASES`; ``ddp-*`` cases spawn two gloo ranks. The
injected cost it used is printed as ``extra_ms <ms>``.
``python bench/record_cpu.py OUT_DIR --one-process CASE[,...] [--rounds 8]``
records both sides of each fix pair in this one process, in rounds
(:func:`record_in_one_process`; score with ``bench/whatif.py --pairs-dir
OUT_DIR --paired``); ``python bench/record_cpu.py OUT_DIR --collect-pairs``
records :data:`COLLECT_PAIRS` with ``hta-report collect`` instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

#: Samples per micro-batch of the ``micro-batches`` case.
MICRO_BATCH = 2
#: The cases: name -> (ranks, description).
CASES = {
    "healthy": (1, "fused AdamW, cheap in-memory dataset"),
    "slow-data": (1, "Dataset.__getitem__ does CPU work: the step waits for the DataLoader (num_workers=0)"),
    "unfused-optimizer": (1, "AdamW(foreach=False) over many small parameters (PyTorch's default on CPU)"),
    "per-sample-loop": (1, "the model called once per sample: 64 forwards of one sample per step, one backward"),
    "micro-batches": (1, "gradient accumulation over micro-batches of 2: 32 forwards and backwards per step"),
    "ddp-healthy": (2, "two gloo ranks, DDP, fused AdamW"),
    "ddp-straggler": (2, "two gloo ranks; rank 1 preprocesses each batch on the CPU first"),
    "item-per-step": (1, "loss.item() read every step (a host-device sync on a GPU, a scalar read on the CPU)"),
    "zero-grad-zeros": (1, "zero_grad(set_to_none=False) over many large parameters: every gradient zeroed by aten::zero_"),
}
#: DataLoader worker processes of the ``slow-data`` fix: 2, not the issue's 4,
#: since this machine has 2 cores (4 workers would time-share them with the
#: training process; 2 already hide a slow batch at the strengths used).
FIX_WORKERS = 2
#: The fix :func:`run` applies with ``fix=True``: case -> what changes.
FIXES = {
    "slow-data": f"DataLoader(num_workers={FIX_WORKERS}): the slow __getitem__ runs in worker processes",
    "item-per-step": "the per-step loss.item() removed",
    "zero-grad-zeros": "zero_grad(set_to_none=True)",
    "unfused-optimizer": "AdamW(foreach=True)",
}
#: Fix pairs: case -> the rules whose finding names that cause.
PAIR_RULES = {
    "slow-data": frozenset({"dataloader-bound", "dataloader-main-process"}),
    "item-per-step": frozenset({"sync-in-step"}),
    "zero-grad-zeros": frozenset({"zero-grad-zeros"}),
    "unfused-optimizer": frozenset({"unfused-optimizer"}),
}


def _model(torch, layers: int, width: int):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))


def _burn(torch, ms: float) -> None:
    """CPU work for about ``ms`` milliseconds, as aten ops (a preprocessing step)."""
    end = time.perf_counter() + ms / 1e3
    x = torch.randn(384, 384)
    while time.perf_counter() < end:
        x = torch.tanh(x @ x.T / 384)


def build_side(case: str, strength: float, rank: int = 0, world: int = 1, layers: int = 0, clean: bool = False,
               fix: bool = False, extra_ms: Optional[float] = None) -> Tuple[Callable[[], None], float]:
    """Build one side of ``case`` (the model, a ``DataLoader`` over an
    endless supply of batches, the optimizer; arguments as in :func:`run`)
    and warm it up: three steps that also calibrate the injected cost when
    ``extra_ms`` is None (``strength`` times the step measured here, as the
    share of the resulting step). Returns (one training step, taking its
    batch from the loader; the injected cost used, ms per step, 0 for a case
    without one). Sets one intra-op thread (as DataLoader workers have)."""
    import torch
    from torch.utils.data import DataLoader, Dataset, Sampler

    torch.manual_seed(rank)
    torch.set_num_threads(1)
    layers_override = layers
    width, layers, batch = 512, 4, 128
    if case == "unfused-optimizer":
        width, layers = 64, 24  # many small parameters: per-parameter work dominates
    if case in ("per-sample-loop", "micro-batches"):
        batch = 64  # samples per optimizer step
    if case == "zero-grad-zeros":
        # 8.4M parameters and a small batch: zeroing the gradients (and adding into them in
        # backward) is a measurable share of the step next to the matmuls
        width, layers, batch = 1024, 8, 8
    if fix and case not in FIXES:
        raise ValueError(f"case {case!r} has no fix (one of {', '.join(FIXES)})")
    layers = layers_override or layers
    model = _model(torch, layers, width)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    data_x, data_y = torch.randn(4096, width), torch.randint(0, 10, (4096,))

    class Batches(Dataset):
        """Whole batches by index list (the sampler feeds it): one fetch per step."""

        def __len__(self):
            return len(data_x)

        def __getitem__(self, idx):
            if case == "slow-data":
                _burn(torch, slow_batch_ms)  # decoding / augmentation on the training thread
            return data_x[idx], data_y[idx]

    class Endless(Sampler):
        """The batches' index lists in order, over and over (rounds of a one-process recording outlast an epoch)."""

        def __iter__(self):
            while True:
                for i in range(0, len(data_x) - batch + 1, batch):
                    yield list(range(i, i + batch))

    slow_batch_ms = 0.0
    loader = DataLoader(Batches(), sampler=Endless(), batch_size=None, num_workers=0)
    if case == "unfused-optimizer" and fix:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    elif case == "unfused-optimizer" and not clean:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        if case == "ddp-straggler" and rank == 1:
            _burn(torch, straggle_ms)
        opt.zero_grad(set_to_none=not (case == "zero-grad-zeros" and not clean and not fix))
        if case == "per-sample-loop" and not clean:
            loss = sum(loss_fn(model(x[i:i + 1]), y[i:i + 1]) for i in range(len(x))) / len(x)
            loss.backward()
        elif case == "micro-batches" and not clean:
            for i in range(0, len(x), MICRO_BATCH):  # accumulate gradients over micro-batches
                (loss_fn(model(x[i:i + MICRO_BATCH]), y[i:i + MICRO_BATCH]) * MICRO_BATCH / len(x)).backward()
        else:
            loss = loss_fn(model(x), y)
            loss.backward()
            if case == "item-per-step" and not clean and not fix:
                seen.append(loss.item())  # logging the loss every step
        opt.step()

    # calibrate the injected cost against this machine's step time (strength = share of the resulting step)
    seen: list = []
    it = iter(loader)
    straggle_ms = 0.0
    t0 = time.perf_counter()
    for _ in range(3):
        step(*next(it))
    step_ms = (time.perf_counter() - t0) / 3 * 1e3
    if extra_ms is None:
        extra_ms = 0.0 if clean or case not in ("slow-data", "ddp-straggler") else strength / (1 - strength) * step_ms
    if case == "slow-data":
        slow_batch_ms = extra_ms
    straggle_ms = extra_ms if case == "ddp-straggler" else 0.0
    if case == "slow-data" and fix:  # workers fork now, with the calibrated cost, and stay for every round
        loader = DataLoader(Batches(), sampler=Endless(), batch_size=None, num_workers=FIX_WORKERS,
                            persistent_workers=True)
        it = iter(loader)
        step(*next(it))
    return (lambda: step(*next(it))), extra_ms


def profile_steps(out: str, one_step: Callable[[], None], steps: int = 7, shapes: bool = False) -> None:
    """Run ``steps`` iterations of ``one_step`` under plain ``torch.profiler``
    (wait 1, warm-up 1, active ``steps - 2``; ``shapes``: ``record_shapes=True``)
    and write the trace into ``out``."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes,
                 schedule=schedule(wait=1, warmup=1, active=steps - 2),
                 on_trace_ready=tensorboard_trace_handler(out)) as prof:
        for _ in range(steps):
            one_step()
            prof.step()


def run(out: str, case: str, strength: float, rank: int = 0, world: int = 1, steps: int = 7,
        layers: int = 0, clean: bool = False, shapes: bool = False, fix: bool = False,
        extra_ms: Optional[float] = None) -> float:
    """Train ``steps`` iterations under the profiler (wait 1, warm-up 1,
    active ``steps - 2``) and write the trace of this rank into ``out``
    (``layers``: hidden layers of the model, 0 for the case's default;
    ``clean``: the same script with the case's cause switched off, a baseline;
    ``shapes``: ``record_shapes=True``; ``fix``: the case's fix of
    :data:`FIXES` applied, the cause's cost kept; ``extra_ms``: the injected
    cost (ms per step) instead of ``strength`` times the step measured here).
    Returns the injected cost used (ms per step, 0 for a case without one)."""
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    one_step, extra_ms = build_side(case, strength, rank, world, layers, clean, fix, extra_ms)
    profile_steps(out, one_step, steps, shapes)
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    return extra_ms


def record_in_one_process(out: str, cases: List[str], rounds: int = 8, strength: float = 0.3,
                          steps: int = 7) -> Dict[str, dict]:
    """Record the fix pairs of :data:`FIXES` with both sides in this one
    process, as ``bench/record_cuda.py --one-process`` does on a GPU: each
    case's two sides are built and warmed up (:func:`build_side`, the "after"
    side with the "before" side's calibrated cost), then ``rounds`` rounds
    each record both sides into ``out/<case>/<i>-before|after/``, the order
    alternating from round to round (before first in even rounds), so that a
    host whose speed drifts favours neither side: ``bench/whatif.py
    --pairs-dir OUT --paired`` scores each round's two recordings together.
    Why: on this shared 2-core machine recordings made in separate processes
    vary by up to 70 % (the least disturbed of 3 per side, what ``whatif.py
    --pairs`` uses, still differs from run to run). Writes ``out/index.json``
    (case -> recorder, fix, the rules whose finding names the cause, seconds
    per recording, error) after each case, keeping an earlier run's cases,
    and returns it. Raises ValueError for a case without a fix."""
    from record_cuda import _earlier, _round_order, _save  # the GPU recorder's order of the sides, its index files

    path = os.path.join(out, "index.json")
    index: Dict[str, dict] = _earlier(path)
    for case in cases:
        if case not in FIXES:
            raise ValueError(f"case {case!r} has no fix (one of {', '.join(FIXES)})")
        entry: dict = {"recorder": "torch.profiler, one process (CPU)", "fix": FIXES[case],
                       "rules": sorted(PAIR_RULES[case]), "seconds": [], "error": ""}
        try:
            before, extra = build_side(case, strength)
            sides = {False: before, True: build_side(case, strength, fix=True, extra_ms=extra)[0]}
            for i in range(rounds):
                for fx in _round_order(i):
                    t = time.perf_counter()
                    profile_steps(os.path.join(out, case, f"{i}-{'after' if fx else 'before'}"), sides[fx], steps)
                    entry["seconds"].append(round(time.perf_counter() - t, 1))
        except Exception as e:  # noqa: BLE001 - a failing case is recorded as such; the others still run
            entry["error"] = f"{type(e).__name__}: {e}"[:600]
        print(f"{case}: {entry['seconds']} s {entry['error'][:200]}", flush=True)
        index[case] = entry
        _save(path, index)
    return index


#: Fix pairs recorded with ``hta-report collect`` on a built-in workload, a
#: process per side: case -> (the options of both sides, the "before" side's,
#: the "after" side's, the fix, the rules whose finding names the cause).
#: ``--slow-data 5``: the README's sample trace's input-bound CNN.
COLLECT_PAIRS = {
    "collect-workers": (["--workload", "cnn", "--slow-data", "5"], ["--num-workers", "0"],
                        ["--num-workers", str(FIX_WORKERS)], f"DataLoader(num_workers={FIX_WORKERS}) (collect)",
                        ["dataloader-bound", "dataloader-main-process"]),
}
#: Steps ``record_collect_pairs`` lets pass before the profiler's warm-up
#: (``collect --wait``): a process's first steps run slower (in the one-process
#: CPU pairs the "after" side's steps took 13.8-14.8 ms in the first two rounds
#: and 11.9-12.4 ms in the third and fourth), and the fix is judged on the steps
#: a long run is made of.
COLLECT_WAIT = 10


def record_collect_pairs(out: str, rounds: int = 8, wait: int = COLLECT_WAIT) -> Dict[str, dict]:
    """Record each of :data:`COLLECT_PAIRS` with ``hta-report collect`` on
    the CPU, one process per side and round (``out/<case>/<i>-before|after/``,
    the order alternating from round to round), for ``whatif.py --pairs-dir
    OUT`` (least disturbed recordings) or ``--paired`` (each round's two
    recordings, made seconds apart). Writes ``out/index.json`` as
    :func:`record_in_one_process` does (recorder ``hta-report collect, a
    process per side``) and returns it."""
    import subprocess

    from record_cuda import _earlier, _round_order, _save

    path = os.path.join(out, "index.json")
    index: Dict[str, dict] = _earlier(path)
    for case, (common, before, after, fix_text, rules) in COLLECT_PAIRS.items():
        entry: dict = {"recorder": "hta-report collect, a process per side", "fix": fix_text, "rules": rules,
                       "seconds": [], "error": ""}
        for i in range(rounds):
            for fx in _round_order(i):
                d = os.path.join(out, case, f"{i}-{'after' if fx else 'before'}")
                cmd = [sys.executable, "-m", "hta_report", "collect", "-o", d, "-q", "--device", "cpu",
                       "--wait", str(wait), *common, *(after if fx else before)]
                t = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                entry["seconds"].append(round(time.perf_counter() - t, 1))
                if proc.returncode != 0:
                    entry["error"] = entry["error"] or f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
        print(f"{case}: {entry['seconds']} s {entry['error'][:200]}", flush=True)
        index[case] = entry
        _save(path, index)
    return index


def _worker(rank: int, out: str, case: str, strength: float, world: int, port: int, layers: int,
            clean: bool) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    run(out, case, strength, rank=rank, world=world, layers=layers, clean=clean)


def record(out: str, case: str, strength: float = 0.4, port: int = 29531, layers: int = 0,
           clean: bool = False, shapes: bool = False, fix: bool = False,
           extra_ms: Optional[float] = None) -> Optional[float]:
    """Record ``case`` into ``out`` (one trace per rank); ``fix`` and
    ``extra_ms`` as in :func:`run` (single-rank cases only). Returns the
    injected cost used (ms per step), None for the multi-rank cases."""
    ranks = CASES[case][0]
    if (fix and case not in FIXES) or (ranks > 1 and extra_ms is not None):
        raise ValueError(f"case {case!r}: fix is for {', '.join(FIXES)}; extra_ms for the single-rank cases")
    os.makedirs(out, exist_ok=True)
    if ranks == 1:
        return run(out, case, strength, layers=layers, clean=clean, shapes=shapes, fix=fix, extra_ms=extra_ms)
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(out, case, strength, ranks, port, layers, clean), nprocs=ranks, join=True)
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("case", nargs="?", choices=sorted(CASES))
    ap.add_argument("--one-process", default="", metavar="CASES",
                    help="comma-separated cases of FIXES: both sides recorded in this one process, in rounds")
    ap.add_argument("--collect-pairs", action="store_true",
                    help="the COLLECT_PAIRS recorded with hta-report collect, a process per side, in rounds")
    ap.add_argument("--rounds", type=int, default=8, help="with --one-process or --collect-pairs: rounds of both sides")
    ap.add_argument("--strength", type=float, default=None,
                    help="share of the step the injected cause takes (0.4; with --one-process 0.3, whatif.py's)")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--layers", type=int, default=0, help="hidden layers of the model (0: the case's default)")
    ap.add_argument("--clean", action="store_true", help="the same script with the cause switched off (a baseline)")
    ap.add_argument("--record-shapes", action="store_true", help="profile(record_shapes=True): input shapes in the trace")
    ap.add_argument("--fix", action="store_true", help="the case's fix applied (FIXES), its cause's cost kept")
    ap.add_argument("--extra-ms", type=float, default=None,
                    help="the injected cost (ms per step) instead of calibrating it from --strength")
    args = ap.parse_args(argv)
    if args.one_process:
        index = record_in_one_process(args.out, args.one_process.split(","), args.rounds,
                                      0.3 if args.strength is None else args.strength)
        return 1 if any(e["error"] for e in index.values()) else 0
    if args.collect_pairs:
        index = record_collect_pairs(args.out, args.rounds)
        return 1 if any(e["error"] for e in index.values()) else 0
    if args.case is None:
        ap.error("CASE is required without --one-process or --collect-pairs")
    used = record(args.out, args.case, 0.4 if args.strength is None else args.strength, args.port, args.layers,
                  args.clean, args.record_shapes, args.fix, args.extra_ms)
    if used is not None:
        print(f"extra_ms {used:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
