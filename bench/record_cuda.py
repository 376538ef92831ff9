#!/usr/bin/env python
"""Record before/after fix pairs on a CUDA GPU, for ``bench/whatif.py --pairs-dir``.

Two recorders, as the issue asks ("pairs recorded with ``collect`` and with
plain ``torch.profiler`` scripts"):

* :data:`COLLECT_PAIRS`: ``hta-report collect --workload ...`` run twice, the
  second time with the fix's flag (the collector sets
  ``enable_cuda_sync_events``, so these traces carry the sync events);
* :data:`PLAIN_CASES`: a training loop under plain ``torch.profiler`` (no
  sync events, as most users record), each case before and after its fix in
  its own subprocess.

Each side is recorded ``--repeats`` times, sides interleaved. Written under
OUT: ``<case>/<i>-before/`` and ``<case>/<i>-after/`` (one gzipped trace each)
and ``index.json`` (case -> recorder, fix, the rules whose finding names the
cause, seconds each recording took, and any failure). Recording stops starting
new pairs after ``--budget-s`` seconds, so a lent GPU's minutes are not lost
to one slow case; what was recorded is kept. Never writes into the repository
unless OUT is there.

Usage: ``python bench/record_cuda.py OUT [--repeats 2] [--budget-s 420] [--only NAME-OR-PART[,...]]`` (a whole case name selects that case alone);
``python bench/record_cuda.py OUT --unprofiled CASE[,...]`` times plain cases' steps without the profiler;
``python bench/record_cuda.py OUT --one-process CASE[,...] [--repeats 4]`` records and times both sides of
plain cases in this one process (:func:`record_in_one_process`);
``python bench/record_cuda.py --side OUT_DIR CASE before|after`` records one
side of a plain case (what the pairs run calls, one process per side).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Tuple

#: Plain-profiler cases: name -> (what the "before" side does, the fix, the rules naming the cause).
PLAIN_CASES: Dict[str, Tuple[str, str, List[str]]] = {
    "item-per-step": ("loss.item() every step on a launch-heavy MLP (host and GPU time comparable)",
                      "the per-step loss.item() removed (loss kept on the GPU)", ["sync-in-step"]),
    "pageable-copy": ("a 64 MB batch copied each step from pageable host memory (.to('cuda'))",
                      "the batch pinned and copied with non_blocking=True", ["pageable-memcpy", "blocking-copy"]),
    "zero-grad-zeros": ("zero_grad(set_to_none=False) over 168M parameters",
                        "zero_grad(set_to_none=True)", ["zero-grad-zeros"]),
    "unfused-optimizer": ("AdamW(foreach=False) over 96 small parameters",
                          "AdamW(fused=True)", ["unfused-optimizer"]),
    "cuda-graphs": ("a small MLP's eager training step (launch-bound)",
                    "the whole step captured once in a CUDA graph and replayed",
                    ["launch-bound", "host-bound", "low-gpu-utilization"]),
    # held out: other shapes of the same causes, recorded after the edits were written
    "pageable-copy-16m": ("a 16 MB batch copied each step from pageable host memory into a 4-layer MLP",
                          "the batch pinned and copied with non_blocking=True", ["pageable-memcpy", "blocking-copy"]),
    "cuda-graphs-wide": ("an 8-layer 1024-wide MLP's eager training step, batch 64",
                         "the whole step captured once in a CUDA graph and replayed",
                         ["launch-bound", "host-bound", "low-gpu-utilization"]),
    # held out, recorded 2026-11-27 after GRAPH_GAP_US was set from cuda-graphs
    "cuda-graphs-deep": ("a 32-layer 256-wide MLP's eager training step, batch 32",
                         "the whole step captured once in a CUDA graph and replayed",
                         ["launch-bound", "host-bound", "low-gpu-utilization"]),
    # held out, recorded 2026-11-27 after the GPU bound began counting the optimizer's kernels
    "unfused-optimizer-wide": ("AdamW(foreach=False) over 34 parameters of a 16-layer 512-wide MLP",
                               "AdamW(fused=True)", ["unfused-optimizer"]),
    # held out, recorded 2026-11-27 after the replay's span began after the work queued before the
    # first window (Graph.backlog)
    "pageable-copy-32m": ("a 32 MB batch copied each step from pageable host memory into a 3-layer MLP",
                          "the batch pinned and copied with non_blocking=True", ["pageable-memcpy", "blocking-copy"]),
    "pageable-copy-8m": ("an 8 MB batch copied each step from pageable host memory into a 6-layer 2048-wide MLP",
                         "the batch pinned and copied with non_blocking=True", ["pageable-memcpy", "blocking-copy"]),
}
#: ``collect`` pairs: name -> (flags of both sides, the fix's flags, the fix, the rules naming the cause).
COLLECT_PAIRS: Dict[str, Tuple[List[str], List[str], List[str], str, List[str]]] = {
    "collect-sync": (["--workload", "transformer", "--width", "256", "--depth", "4", "--batch-size", "32"],
                     ["--sync-every-step"], [], "the per-step loss.item() removed", ["sync-in-step"]),
    "collect-pinned": (["--workload", "cnn", "--width", "32", "--batch-size", "2048"],
                       ["--no-pin-memory"], ["--pin-memory"], "DataLoader(pin_memory=True), non_blocking copies",
                       ["pageable-memcpy", "blocking-copy"]),
    # held out, recorded 2026-11-27: the same fix where DataLoader workers make the batches and
    # pinning runs in the loader's pin thread, not in the step's thread
    "collect-pinned-workers": (["--workload", "cnn", "--width", "32", "--batch-size", "2048", "--num-workers", "4"],
                               ["--no-pin-memory"], ["--pin-memory"],
                               "DataLoader(pin_memory=True), non_blocking copies (4 workers)",
                               ["pageable-memcpy", "blocking-copy"]),
    "collect-slow-data": (["--workload", "cnn", "--width", "32", "--batch-size", "256", "--slow-data", "20"],
                          ["--num-workers", "0"], ["--num-workers", "4"], "DataLoader(num_workers=4)",
                          ["dataloader-bound", "dataloader-main-process"]),
    "collect-amp": (["--workload", "transformer", "--width", "1024", "--depth", "4", "--batch-size", "64"],
                    ["--no-amp"], ["--amp"], "bf16 autocast", ["tensor-cores-unused"]),
    # held out: recorded after the Tensor-Core edit was written
    "collect-amp-wide": (["--workload", "transformer", "--width", "2048", "--depth", "2", "--batch-size", "32"],
                         ["--no-amp"], ["--amp"], "bf16 autocast", ["tensor-cores-unused"]),
}
#: Recording order (the pairs the issue names first, so a short budget keeps them).
ORDER = ["collect-slow-data", "item-per-step", "collect-pinned", "zero-grad-zeros", "collect-sync",
         "pageable-copy", "unfused-optimizer", "collect-amp", "cuda-graphs", "pageable-copy-16m", "cuda-graphs-wide",
         "collect-amp-wide", "cuda-graphs-deep", "collect-pinned-workers", "unfused-optimizer-wide", "pageable-copy-32m",
         "pageable-copy-8m"]
#: Profiler schedule of the plain cases: 1 skipped, 1 warm-up, 7 recorded (as ``collect`` records).
WAIT, WARMUP, ACTIVE = 1, 1, 7


def _mlp(torch, width: int, depth: int, out: int = 10):
    mods = []
    for _ in range(depth):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, out))


def build_side(case: str, fix: bool, device: str = "cuda"):
    """One side of a plain case, ready to run: returns ``(step, sync)``,
    ``step(i)`` one training step and ``sync()`` waiting for the GPU. The
    model is seeded, so both sides start from the same weights; the fix's
    CUDA graph is captured here (after 3 eager warm-up steps on a side
    stream), and the step returned has run 3 unprofiled warm-up steps.
    Raises RuntimeError when ``device`` is cuda and no CUDA device is
    present."""
    import torch

    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    dev = torch.device(device)
    torch.manual_seed(0)
    loss_fn = torch.nn.CrossEntropyLoss()
    width, depth, batch = {"item-per-step": (256, 24, 64), "pageable-copy": (4096, 2, 4096),
                           "zero-grad-zeros": (2048, 40, 8), "unfused-optimizer": (64, 48, 32),
                           "cuda-graphs": (512, 16, 16), "pageable-copy-16m": (4096, 4, 1024),
                           "cuda-graphs-wide": (1024, 8, 64), "cuda-graphs-deep": (256, 32, 32),
                           "unfused-optimizer-wide": (512, 16, 64), "pageable-copy-32m": (4096, 3, 2048),
                           "pageable-copy-8m": (2048, 6, 1024)}[case]
    model = _mlp(torch, width, depth).to(dev)
    if case.startswith("unfused-optimizer"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if fix else {"foreach": False}))
    elif case.startswith("cuda-graphs"):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    copying = case.startswith("pageable-copy")
    pin = copying and fix and cuda
    pool = [torch.randn(batch, width, pin_memory=pin) for _ in range(2)]
    ys = torch.randint(0, 10, (batch,), device=dev)
    gpu_x = torch.randn(batch, width, device=dev)
    seen: list = []
    running = torch.zeros((), device=dev)

    def eager(i: int) -> None:
        nonlocal running
        x = pool[i % 2].to(dev, non_blocking=pin) if copying else gpu_x
        opt.zero_grad(set_to_none=not (case == "zero-grad-zeros" and not fix))
        loss = loss_fn(model(x), ys)
        loss.backward()
        opt.step()
        if case == "item-per-step":
            if fix:
                running = running + loss.detach()
            else:
                seen.append(loss.item())

    step = eager
    if case.startswith("cuda-graphs") and fix and cuda:  # PyTorch's "whole network capture" recipe (CUDA semantics docs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                eager(i)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(gpu_x), ys)
            static_loss.backward()
            opt.step()

        held = (model, opt, ys, gpu_x, static_loss)  # the graph's tensors live as long as its step

        def step(i: int) -> None:  # noqa: F811 - the fix's step
            assert held
            graph.replay()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(3):
        step(i)
    sync()
    return step, sync


def profile_steps(out: str, step, sync, cuda: bool) -> None:
    """WAIT + WARMUP + ACTIVE steps of ``step`` under ``torch.profiler`` with
    its default settings, one gzipped trace written into ``out``."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    os.makedirs(out, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
                 on_trace_ready=tensorboard_trace_handler(out, use_gzip=True)) as prof:
        for i in range(WAIT + WARMUP + ACTIVE):
            step(i)
            prof.step()
    sync()


def time_steps(step, sync, steps: int) -> float:
    """Mean wall time per step (ms) of ``steps`` steps back to back without
    the profiler, from the first step's start to the GPU's end of the last."""
    sync()
    t = time.perf_counter()
    for i in range(steps):
        step(i)
    sync()
    return (time.perf_counter() - t) * 1e3 / steps


def record_side(out: str, case: str, fix: bool, device: str = "cuda", timed_steps: int = 0) -> float:
    """Train one side of a plain case on ``cuda`` for WAIT + WARMUP + ACTIVE
    steps (after 3 unprofiled warm-up steps) under ``torch.profiler`` with
    its default settings, writing one gzipped trace into ``out``
    (``device="cpu"``: a smoke test of the script where no GPU is, without
    pinning or graph capture). Returns 0.0.

    With ``timed_steps`` > 0, nothing is profiled or written: after the same
    warm-up, that many steps run back to back without the profiler and the
    mean wall time per step (ms, :func:`time_steps`) is returned: the step a
    user runs, against which the profiled trace's step can be compared.

    Raises RuntimeError when ``device`` is cuda and no CUDA device is present."""
    step, sync = build_side(case, fix, device)
    if timed_steps:
        return time_steps(step, sync, timed_steps)
    profile_steps(out, step, sync, device == "cuda")
    return 0.0


def record_in_one_process(out: str, cases: List[str], rounds: int = 4, timed_steps: int = 300,
                          device: str = "cuda") -> Dict[str, dict]:
    """Record plain cases with both sides in this one process: each case's
    two sides are built and warmed up (:func:`build_side`), then ``rounds``
    rounds each record both sides (``out/<case>/<i>-before|after/``), then
    ``rounds`` rounds time each side for ``timed_steps`` steps without the
    profiler (``out/unprofiled.json``); within a round the sides run in
    :func:`_round_order` (alternating, so that a host whose speed drifts
    over the rounds favours neither side: ``whatif.py --pairs-dir OUT
    --paired`` scores each round's two recordings together).

    Why: a separate process per recording (:func:`record_all`) draws its own
    host speed; on the H200's host the same ``aten::linear`` took 38 to 66 µs
    (median per recording) from one process to the next (2026-11-27), which
    on a host-bound step outweighs the fix being measured. In one process
    both sides run seconds apart. It did not remove the spread: recorded so
    on the H200 the same day, the fused-optimizer case's "before" steps
    still ranged 29.3-39.6 ms within the one process (see docs/whatif.md). Writes
    ``out/index.json`` (recorder ``torch.profiler, one process``) after each
    case, keeping an earlier run's cases, and returns it."""
    path, upath = os.path.join(out, "index.json"), os.path.join(out, "unprofiled.json")
    index: Dict[str, dict] = _earlier(path)
    unprofiled: Dict[str, Dict[str, List[float]]] = _earlier(upath)
    cuda = device == "cuda"
    for case in cases:
        _what, fix_text, rules = PLAIN_CASES[case]
        entry: dict = {"recorder": "torch.profiler, one process", "fix": fix_text, "rules": rules, "seconds": [],
                       "error": ""}
        try:
            sides = {fx: build_side(case, fx, device) for fx in (False, True)}
            for i in range(rounds):
                for fx in _round_order(i):
                    t = time.perf_counter()
                    profile_steps(os.path.join(out, case, f"{i}-{'after' if fx else 'before'}"), *sides[fx], cuda)
                    entry["seconds"].append(round(time.perf_counter() - t, 1))
            unprofiled[case] = {"before": [], "after": []}
            for i in range(rounds):
                for fx in _round_order(i):
                    unprofiled[case]["after" if fx else "before"].append(round(time_steps(*sides[fx], timed_steps), 4))
        except Exception as e:  # noqa: BLE001 - a failing case is recorded as such; the others still run
            entry["error"] = f"{type(e).__name__}: {e}"[:600]
        print(f"{case}: {entry['seconds']} s {entry['error'][:200]} unprofiled {unprofiled.get(case)}", flush=True)
        index[case] = entry
        _save(path, index)
        _save(upath, unprofiled)
    return index


def _round_order(i: int) -> Tuple[bool, bool]:
    """The sides of round ``i`` in the order they run (False: "before"):
    before then after in even rounds, after then before in odd ones."""
    return (False, True) if i % 2 == 0 else (True, False)


def _save(path: str, data: dict) -> None:
    """Write ``data`` as JSON to ``path``, its folder made first."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1)


def _earlier(path: str) -> dict:
    """What an earlier run into the same folder wrote to the JSON file ``path`` ({} when none)."""
    if not os.path.isfile(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def time_unprofiled(out: str, cases: List[str], steps: int = 300, repeats: int = 3,
                    device: str = "cuda") -> Dict[str, Dict[str, List[float]]]:
    """Each plain case's step without the profiler, before and after its fix
    (ms per step, ``repeats`` runs of ``steps`` steps each, each side in its
    own subprocess as when recorded; NaN: a run that failed); writes
    ``out``/unprofiled.json (keeping the cases an earlier run wrote there)
    and returns it. Says whether the profiler's own cost differs between the
    sides (CUPTI records every kernel of a replayed CUDA graph one by one)."""
    path = os.path.join(out, "unprofiled.json")
    res: Dict[str, Dict[str, List[float]]] = _earlier(path)
    for case in cases:
        res[case] = {"before": [], "after": []}
        for _ in range(repeats):
            for which in ("before", "after"):
                try:
                    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--side", "-", case, which,
                                           "--timed-steps", str(steps), "--device", device],
                                          capture_output=True, text=True, timeout=120)
                    ms = float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else float("nan")
                except subprocess.TimeoutExpired:
                    ms = float("nan")
                res[case][which].append(round(ms, 4))
        print(f"unprofiled {case}: {res[case]}", flush=True)
        _save(path, res)  # after each case: a run cut short keeps what it timed
    return res


def _run(cmd: List[str], timeout: float) -> Tuple[float, str]:
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        err = "" if proc.returncode == 0 else f"rc {proc.returncode}: {proc.stderr.strip()[-600:]}"
    except subprocess.TimeoutExpired:
        err = f"timed out after {timeout:.0f} s"
    return time.perf_counter() - t, err


def selected(name: str, only: str) -> bool:
    """Whether ``--only`` (comma-separated; '' selects every case) selects the
    case ``name``: a token that is a case's whole name selects that case
    alone (``unfused-optimizer`` is not ``unfused-optimizer-wide``), any
    other token every case whose name holds it (``pinned``)."""
    names = set(PLAIN_CASES) | set(COLLECT_PAIRS)
    return any(o == name or (o not in names and o in name) for o in only.split(","))


def record_all(out: str, repeats: int, budget_s: float, only: str = "") -> Dict[str, dict]:
    """Record every pair of :data:`COLLECT_PAIRS` and :data:`PLAIN_CASES`
    that ``only`` selects (:func:`selected`; ``repeats`` recordings per side, interleaved)
    until ``budget_s`` seconds have passed; writes and returns the index. An
    index already in ``out`` (an earlier run into the same folder) is kept and
    its cases replaced where recorded again."""
    start = time.perf_counter()
    path = os.path.join(out, "index.json")
    index: Dict[str, dict] = _earlier(path)
    jobs = []
    for name, (common, before, after, fix, rules) in COLLECT_PAIRS.items():
        jobs.append((name, "collect", fix, rules,
                     lambda d, fx, c=common, b=before, a=after: [
                         sys.executable, "-m", "hta_report", "collect", "-o", d, "--device", "cuda", "-q",
                         *c, *(a if fx else b)]))
    for name, (_what, fix, rules) in PLAIN_CASES.items():
        jobs.append((name, "torch.profiler", fix, rules,
                     lambda d, fx, n=name: [sys.executable, os.path.abspath(__file__), "--side", d, n,
                                            "after" if fx else "before"]))
    jobs.sort(key=lambda j: ORDER.index(j[0]))
    for name, recorder, fix, rules, cmd in jobs:
        if not selected(name, only):
            continue
        if time.perf_counter() - start > budget_s:
            if name not in index or index[name].get("error"):  # never drop an earlier run's recording
                index[name] = {"recorder": recorder, "fix": fix, "rules": rules, "error": "skipped: budget spent"}
            continue
        entry: dict = {"recorder": recorder, "fix": fix, "rules": rules, "seconds": [], "error": ""}
        for i in range(repeats):
            for fx in (False, True):
                d = os.path.join(out, name, f"{i}-{'after' if fx else 'before'}")
                secs, err = _run(cmd(d, fx), timeout=180)
                entry["seconds"].append(round(secs, 1))
                entry["error"] = entry["error"] or err
                print(f"{name} {i} {'after' if fx else 'before'}: {secs:.1f} s {err[:200]}", flush=True)
        index[name] = entry
        _save(path, index)
    _save(path, index)
    return index


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("rest", nargs="*", help="with --side: CASE before|after")
    ap.add_argument("--side", action="store_true", help="record one side of a plain case")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="cuda", help="with --side: cpu for a smoke test without a GPU")
    ap.add_argument("--timed-steps", type=int, default=0,
                    help="with --side: time this many steps without the profiler and print ms per step")
    ap.add_argument("--one-process", default="", metavar="CASES",
                    help="comma-separated plain cases: both sides recorded and timed in this one process")
    ap.add_argument("--unprofiled", default="", metavar="CASES",
                    help="comma-separated plain cases: time each side without the profiler into OUT/unprofiled.json")
    args = ap.parse_args(argv)
    if args.side:
        case, which = args.rest
        ms = record_side(args.out, case, which == "after", args.device, args.timed_steps)
        if args.timed_steps:
            print(ms)
        return 0
    if args.one_process:
        index = record_in_one_process(args.out, args.one_process.split(","), args.repeats,
                                      args.timed_steps or 300, args.device)
        return 0 if not any(e["error"] for e in index.values()) else 1
    if args.unprofiled:
        time_unprofiled(args.out, args.unprofiled.split(","), device=args.device)
        return 0
    os.makedirs(args.out, exist_ok=True)
    index = record_all(args.out, args.repeats, args.budget_s, args.only)
    return 0 if index and not any(e["error"] for e in index.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
