"""Record the fix bench: every pattern x variant before and after its fix, in alternating rounds.

A pair is one pattern's variant (``bench/fixbench/patterns/``) recorded
without its fix ("before") and with it ("after"), each side a plain PyTorch
script profiled with plain ``torch.profiler`` (see ``harness.py``). Two
modes:

* ``one-process``: both sides built in one Python process (a fresh one per
  pair), warmed up, then recorded in ``--rounds`` rounds, seconds apart: a
  host whose speed drifts slows both sides of a round alike.
* ``per-process``: each side of each round in its own subprocess (the
  pattern script run standalone), as a user records "before" and "after" as
  two runs.

In both, the order of the sides alternates from round to round (before
first in even rounds), and each round also times ``--unprofiled`` steps of
each side without the profiler, in the same order. Layout::

    OUT/index.json                                   per pair: pattern, variant, mode, fix, rules, seconds, errors
    OUT/<mode>/<pattern>-<variant>/<i>-before/       one trace
    OUT/<mode>/<pattern>-<variant>/<i>-after/        one trace
    OUT/<mode>/<pattern>-<variant>/unprofiled.json   {"steps": N, "before": [[ms...] per round], "after": [...]}

A pair's folder is emptied before it is recorded again; ``index.json``
keeps the pairs an earlier run into the same OUT recorded.

Usage: ``python bench/fixbench/record.py [OUT] [--mode one-process|per-process|both] [--rounds 4]
[--only PATTERN[,..]] [--steps 7] [--unprofiled 20]`` (OUT: /tmp/fixbench by default; never
inside the repository). Score with ``bench/fixbench/score.py OUT``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import patterns  # noqa: E402

#: The recording modes, in the order ``--mode both`` runs them.
MODES = ("one-process", "per-process")
#: Rounds of both sides per pair (the least the bench accepts: alternating needs an even count).
MIN_ROUNDS = 4
#: Wall-clock limit of one subprocess (s): a side recorded or timed, or a whole one-process pair.
SUBPROCESS_TIMEOUT_S = 900
#: Where the recordings go when OUT is not given.
DEFAULT_OUT = Path("/tmp/fixbench")


def pair_key(mode: str, pattern: str, variant: str) -> str:
    """A pair's key in ``index.json`` and its folder under OUT: ``<mode>/<pattern>-<variant>``."""
    return f"{mode}/{pattern}-{variant}"


def select(only: str = "") -> List[Tuple[str, str]]:
    """(pattern, variant) of every pair, patterns sorted, variants in their
    declared order; ``only``: the comma-separated patterns to keep, each
    ``PATTERN`` (its variants) or ``PATTERN:VARIANT``.

    Raises:
        ValueError: ``only`` names an unknown pattern or variant.
    """
    out = []
    for item in [n for n in only.split(",") if n] or patterns.NAMES:
        name, _, variant = item.partition(":")
        declared = list(patterns.load(name).VARIANTS)
        if variant and variant not in declared:
            raise ValueError(f"{name} has no variant {variant!r} (one of {', '.join(declared)})")
        out += [(name, v) for v in declared if v == variant or not variant]
    return out


def record_here(pattern: str, variant: str, pair_dir: Path, rounds: int, steps: int,
                unprofiled: int) -> List[float]:
    """Record one pair with both sides in this process: build and warm up
    both sides, then per round profile each side (``steps`` steps) into
    ``pair_dir/<i>-before|after/`` and time ``unprofiled`` steps of each
    without the profiler, the sides in :func:`harness.round_order`. Writes
    ``pair_dir/unprofiled.json``; returns each recording's wall time (s)."""
    module = patterns.load(pattern)
    sides = {fix: harness.build_warm(module, fix, variant) for fix in (False, True)}
    seconds: List[float] = []
    times: Dict[str, List[List[float]]] = {"before": [], "after": []}
    for i in range(rounds):
        for fix in harness.round_order(i):
            t = time.perf_counter()
            harness.profile_steps(str(pair_dir / f"{i}-{harness.side_name(fix)}"), sides[fix], steps)
            seconds.append(round(time.perf_counter() - t, 2))
        for fix in harness.round_order(i):
            times[harness.side_name(fix)].append([round(ms, 4) for ms in harness.time_steps(sides[fix], unprofiled)])
    _save(pair_dir / "unprofiled.json", {"steps": unprofiled, **times})
    return seconds


def _run(cmd: List[str]) -> Tuple[float, str, Optional[str]]:
    """Run ``cmd``; returns (its wall time in s, its stdout, an error line or None)."""
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, "", f"timed out after {SUBPROCESS_TIMEOUT_S} s: {' '.join(cmd[1:4])}"
    error = None
    if proc.returncode != 0:
        error = f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    return time.perf_counter() - t, proc.stdout, error


def record_one_process(pattern: str, variant: str, pair_dir: Path, rounds: int, steps: int,
                       unprofiled: int) -> Tuple[List[float], List[str]]:
    """One-process mode: :func:`record_here` in a fresh Python process (no
    state, such as a thread count or DataLoader workers, left from another
    pair); returns (seconds per recording, errors)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), str(pair_dir), "--in-this-process", f"{pattern}:{variant}",
           "--rounds", str(rounds), "--steps", str(steps), "--unprofiled", str(unprofiled)]
    _, out, error = _run(cmd)
    if error:
        return [], [error]
    return json.loads(out.strip().splitlines()[-1]), []


def record_per_process(pattern: str, variant: str, pair_dir: Path, rounds: int, steps: int,
                       unprofiled: int) -> Tuple[List[float], List[str]]:
    """Per-process mode: per round, each side recorded by the pattern script
    run standalone (``--out``), then each side's unprofiled steps timed by
    it (``--unprofiled``), one subprocess each, in :func:`harness.round_order`.
    Writes ``pair_dir/unprofiled.json`` (NaN steps for a run that failed);
    returns (seconds per recording, subprocess included; errors)."""
    script = str(HERE / "patterns" / f"{pattern}.py")
    seconds: List[float] = []
    errors: List[str] = []
    times: Dict[str, List[List[float]]] = {"before": [], "after": []}
    for i in range(rounds):
        for fix in harness.round_order(i):
            cmd = [sys.executable, script, "--out", str(pair_dir / f"{i}-{harness.side_name(fix)}"),
                   "--variant", variant, "--steps", str(steps)] + (["--fix"] if fix else [])
            took, _, error = _run(cmd)
            seconds.append(round(took, 2))
            errors += [error] if error else []
        for fix in harness.round_order(i):
            cmd = [sys.executable, script, "--unprofiled", str(unprofiled), "--variant", variant] + (
                ["--fix"] if fix else [])
            _, out, error = _run(cmd)
            errors += [error] if error else []
            times[harness.side_name(fix)].append(json.loads(out.strip().splitlines()[-1]) if not error
                                                 else [float("nan")] * unprofiled)
    _save(pair_dir / "unprofiled.json", {"steps": unprofiled, **times})
    return seconds, errors


def record(out: Path, modes: List[str], rounds: int = MIN_ROUNDS, only: str = "",
           steps: int = harness.PROFILED_STEPS, unprofiled: int = harness.UNPROFILED_STEPS) -> Dict[str, dict]:
    """Record every selected pair (:func:`select`) in each of ``modes``
    into ``out`` (see the module doc); writes ``out/index.json`` after each
    pair and returns it (key :func:`pair_key` -> pattern, variant, mode,
    fix, rules, seconds per recording, errors, wall time of the pair in s).
    The command line asks for at least :data:`MIN_ROUNDS` rounds, an even
    count; fewer (a test's single round) record as many.

    Raises:
        ValueError: ``out`` is inside the repository, no round, an unknown
            mode, pattern or variant.
    """
    out = out.resolve()
    if out == REPO or REPO in out.parents:
        raise ValueError(f"{out} is inside the repository: record elsewhere (e.g. {DEFAULT_OUT})")
    if rounds < 1:
        raise ValueError(f"at least one round, not {rounds}")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)} (one of {', '.join(MODES)})")
    chosen = select(only)
    index_path = out / "index.json"
    index: Dict[str, dict] = json.loads(index_path.read_text()) if index_path.is_file() else {}
    recorders = {"one-process": record_one_process, "per-process": record_per_process}
    for mode in modes:
        for pattern, variant in chosen:
            module = patterns.load(pattern)
            key = pair_key(mode, pattern, variant)
            pair_dir = out / key
            shutil.rmtree(pair_dir, ignore_errors=True)
            pair_dir.mkdir(parents=True)
            t = time.perf_counter()
            seconds, errors = recorders[mode](pattern, variant, pair_dir, rounds, steps, unprofiled)
            index[key] = {"pattern": pattern, "variant": variant, "mode": mode, "fix": module.FIX,
                          "rules": sorted(module.RULES), "seconds": seconds, "errors": errors,
                          "wall_s": round(time.perf_counter() - t, 1)}
            _save(index_path, index)
            print(f"{key}: {index[key]['wall_s']:.0f} s{'; ' + errors[0][:200] if errors else ''}", flush=True)
    return index


def _save(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT,
                    help=f"where the recordings go (default {DEFAULT_OUT}; never inside the repository)")
    ap.add_argument("--mode", choices=[*MODES, "both"], default="both")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS, help="rounds of both sides per pair (even, >= 4)")
    ap.add_argument("--only", default="", help="comma-separated PATTERN or PATTERN:VARIANT (default: all)")
    ap.add_argument("--steps", type=int, default=harness.PROFILED_STEPS,
                    help="profiled steps per recording (wait 1, warm-up 1, active the rest)")
    ap.add_argument("--unprofiled", type=int, default=harness.UNPROFILED_STEPS,
                    help="steps timed without the profiler per side and round")
    ap.add_argument("--in-this-process", metavar="PATTERN:VARIANT",
                    help="record one pair's two sides in this process into OUT (what --mode one-process runs "
                         "in a fresh process per pair); prints the recordings' seconds as JSON")
    args = ap.parse_args(argv)
    if args.in_this_process:
        pattern, _, variant = args.in_this_process.partition(":")
        print(json.dumps(record_here(pattern, variant, args.out, args.rounds, args.steps, args.unprofiled)))
        return 0
    if args.rounds < MIN_ROUNDS or args.rounds % 2:
        ap.error(f"--rounds must be even and at least {MIN_ROUNDS} (the order alternates), not {args.rounds}")
    modes = list(MODES) if args.mode == "both" else [args.mode]
    try:
        index = record(args.out, modes, args.rounds, args.only, args.steps, args.unprofiled)
    except ValueError as exc:
        ap.error(str(exc))
    return 1 if any(e["errors"] for e in index.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
