"""The fix bench's shared harness: profile, time and run one side of a pattern.

A pattern module (``bench/fixbench/patterns/<name>.py``) declares
``PATTERN``, ``VARIANTS``, ``RULES``, ``FIX`` and ``build(fix, variant)``
(one training or inference step that pulls its own batch) and ends with
``sys.exit(harness.main(sys.modules[__name__]))``: this module gives it the
command line, the warm-up, the profiler and the unprofiled timing, the way
a user script profiles itself (plain ``torch.profiler``, a schedule,
``tensorboard_trace_handler``, ``prof.step()`` per iteration; never
``hta-report collect``).

Command line of a pattern script::

    python bench/fixbench/patterns/NAME.py --out DIR [--fix] [--variant V] [--steps 7]
    python bench/fixbench/patterns/NAME.py --unprofiled N [--fix] [--variant V]

The first writes one trace into DIR; the second prints the N step times
(ms) measured without the profiler as a JSON list on the last line.
"""
from __future__ import annotations

import argparse
import json
import time
from types import ModuleType
from typing import Callable, List, Tuple

#: Steps run before anything is profiled or timed (first-call allocations, DataLoader workers starting).
WARMUP_STEPS = 3
#: Steps of a profiled recording: wait 1, warm-up 1, then ``steps - 2`` active steps.
PROFILED_STEPS = 7
#: Steps timed without the profiler, per side and round.
UNPROFILED_STEPS = 20

Step = Callable[[], None]


def batches(*pool, batch: int) -> Callable[[], tuple]:
    """A function returning the next ``batch`` rows of each tensor of ``pool``
    (synthetic data made once, all with the same first dimension, a multiple
    of ``batch``), cycling over them: the batch a step pulls, at the cost of
    slicing it out.

    Raises:
        ValueError: the first dimension is not a multiple of ``batch``.
    """
    n = len(pool[0])
    if n % batch:
        raise ValueError(f"{n} rows are not a multiple of the batch of {batch}")
    at = [0]

    def next_batch() -> tuple:
        i = at[0]
        at[0] = (i + batch) % n
        return tuple(t[i:i + batch] for t in pool)

    return next_batch


def round_order(i: int) -> Tuple[bool, bool]:
    """The sides of round ``i`` in the order they run (False: "before", True:
    "after"): before first in even rounds, after first in odd ones, so that a
    host whose speed drifts over a run favours neither side."""
    return (False, True) if i % 2 == 0 else (True, False)


def side_name(fix: bool) -> str:
    """``"after"`` for the fixed side, ``"before"`` for the other."""
    return "after" if fix else "before"


def warm_up(step: Step, steps: int = WARMUP_STEPS) -> None:
    """Run ``steps`` steps of ``step`` and discard them."""
    for _ in range(steps):
        step()


def profile_steps(out: str, step: Step, steps: int = PROFILED_STEPS) -> None:
    """Run ``steps`` iterations of ``step`` under plain ``torch.profiler``
    (CPU activity, ``schedule(wait=1, warmup=1, active=steps - 2)``,
    ``prof.step()`` after each) and write the trace into the folder ``out``."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps - 2),
                 on_trace_ready=tensorboard_trace_handler(out)) as prof:
        for _ in range(steps):
            step()
            prof.step()


def time_steps(step: Step, steps: int = UNPROFILED_STEPS) -> List[float]:
    """The wall time of each of ``steps`` steps of ``step`` without the profiler (ms)."""
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def build_warm(pattern: ModuleType, fix: bool, variant: str) -> Step:
    """``pattern.build(fix, variant)`` after :data:`WARMUP_STEPS` steps of warm-up.

    Raises:
        ValueError: ``variant`` is not one of ``pattern.VARIANTS``.
    """
    if variant not in pattern.VARIANTS:
        raise ValueError(f"{pattern.PATTERN}: no variant {variant!r} (one of {', '.join(pattern.VARIANTS)})")
    step = pattern.build(fix, variant)
    warm_up(step)
    return step


def main(pattern: ModuleType, argv=None) -> int:
    """The command line of a pattern script (see the module doc); returns the exit code."""
    ap = argparse.ArgumentParser(description=f"{pattern.PATTERN}: {(pattern.__doc__ or '').strip().splitlines()[0]}")
    ap.add_argument("--out", help="folder the trace is written into")
    ap.add_argument("--fix", action="store_true", help=f"apply the fix: {pattern.FIX}")
    ap.add_argument("--variant", default=next(iter(pattern.VARIANTS)), choices=list(pattern.VARIANTS))
    ap.add_argument("--steps", type=int, default=PROFILED_STEPS,
                    help="profiled steps (wait 1, warm-up 1, active the rest)")
    ap.add_argument("--unprofiled", type=int, default=0, metavar="N",
                    help="time N steps without the profiler instead and print them (ms) as JSON")
    args = ap.parse_args(argv)
    if bool(args.out) == bool(args.unprofiled):
        ap.error("give one of --out DIR and --unprofiled N")
    if args.steps < 3:
        ap.error("--steps must be at least 3 (wait 1, warm-up 1, active 1 or more)")
    step = build_warm(pattern, args.fix, args.variant)
    if args.unprofiled:
        print(json.dumps([round(ms, 4) for ms in time_steps(step, args.unprofiled)]))
    else:
        profile_steps(args.out, step, args.steps)
    return 0
