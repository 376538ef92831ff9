"""What ``collect`` does once its options are checked: a built-in workload or a script.

Imports torch (through the workloads); :mod:`.command` imports this module lazily.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

from .. import teardown
from ..errors import CollectError, plural
from . import environment as env
from .session import prepare_output_dir, profile


def _profile(opts: Dict[str, Any], device: str, run: Dict[str, Any]) -> profile:
    return profile(Path(opts["output"]), opts["wait"], opts["warmup"], opts["active"],
                   opts["repeat"], record_shapes=opts["record_shapes"],
                   with_stack=opts["with_stack"], profile_memory=opts["profile_memory"],
                   device=device, quiet=opts["quiet"], run=run)


def collect_workload(name: str, opts: Dict[str, Any], options: Dict[str, Any]) -> profile:
    """Train built-in workload ``name`` under the profiler; DDP under torchrun.

    Args:
        name: ``cnn``, ``rnn`` or ``transformer``.
        opts: the command's parsed options.
        options: the same, JSON-ready, for the manifest.

    Returns:
        the finished :class:`profile` (its ``trace_files`` are this rank's files).

    Raises:
        CollectError: unavailable device, non-empty output directory, ``--steps``
            shorter than one cycle, ``--repeat 0`` without ``--steps``.
    """
    device = env.resolve_device(opts["device"])
    prepare_output_dir(Path(opts["output"]))
    from .workloads import WORKLOADS
    from .workloads.train import WorkloadConfig, init_distributed, run_workload

    cycle = opts["wait"] + opts["warmup"] + opts["active"]
    steps = opts["steps"] or cycle * opts["repeat"]
    if not steps:
        raise CollectError("--repeat 0 (unlimited cycles) needs --steps")
    if steps < cycle:
        raise CollectError(f"--steps {steps} is shorter than one profiler cycle "
                           f"(wait+warmup+active = {cycle} steps): no trace would be written")
    _, width, depth, batch = WORKLOADS[name]
    cfg = WorkloadConfig(name=name, steps=steps, batch_size=opts["batch_size"] or batch,
                         width=opts["width"] or width, depth=opts["depth"] or depth,
                         num_workers=opts["num_workers"],
                         pin_memory=(device == "cuda" if opts["pin_memory"] is None
                                     else opts["pin_memory"]),
                         slow_data_ms=opts["slow_data"], sync_every_step=opts["sync_every_step"],
                         amp=opts["amp"], device=device)
    ranks = env.rank_info()
    backend = init_distributed(ranks, device)
    run = {"mode": "workload", "workload": name, "knobs": cfg.as_dict(),
           "distributed_backend": backend, "collect_options": options}
    finished = False
    try:
        with _profile(opts, device, run) as prof:
            prof.expected_steps = steps
            prof.run["result"] = run_workload(cfg, prof, ranks)
        finished = True
    finally:
        if backend is not None:
            _leave_group(finished)
    return prof


def _leave_group(finished: bool) -> None:
    """Destroy the default process group; after a finished run, all ranks
    first meet at a barrier (no rank tears down its gloo or NCCL connections
    while a peer still writes its trace or waits on the store), and the
    process may then end without the interpreter's teardown, which can abort
    a gloo rank whose files are written (:mod:`..teardown`). After an error
    there is no barrier: the peers may never reach it (torchtitan#1342)."""
    import torch.distributed as dist

    if finished:
        dist.barrier()
    dist.destroy_process_group()
    if finished:
        teardown.skip_teardown()


def collect_script(command: List[str], opts: Dict[str, Any], options: Dict[str, Any]) -> int:
    """Run a user script in-process under the profiler (see :mod:`.script`).

    Args:
        command: ``[python] script.py ARGS`` or ``[python] -m module ARGS``.
        opts: the command's parsed options.
        options: the same, JSON-ready, for the manifest.

    Returns:
        the script's exit code (``sys.exit`` code, else 0; 130 after SIGINT,
        143 after SIGTERM: traces of completed cycles are kept). A script
        calling ``os._exit`` ends the process there, after the profiler is
        stopped and the manifest written.

    Raises:
        CollectError: missing script or module, unavailable device, non-empty
            output directory; the script raised (its traceback is printed
            first); the script succeeded but ran fewer steps than one cycle.
    """
    from .script import exit_hook, install_step_hook, parse_command, run_script, terminate_raises

    spec = parse_command(command)
    device = env.resolve_device(opts["device"])
    run = {"mode": "script", "command": list(command), "step_on": opts["step_on"],
           "collect_options": options, "cwd": os.getcwd()}  # where analyze finds the script's files
    with _profile(opts, device, run) as prof:
        remove_hook = install_step_hook(opts["step_on"], prof.step)

        def before_exit(code: int) -> None:  # the script calls os._exit(code)
            remove_hook()
            prof.run.update(exit_code=code, error=None)
            prof.stop(raise_errors=False)

        try:
            with terminate_raises(), exit_hook(before_exit):
                outcome = run_script(spec)
        finally:
            remove_hook()
        prof.run.update(exit_code=outcome.exit_code,
                        error=outcome.error_line or (f"ended by {outcome.signal}" if outcome.signal else None))
    if outcome.signal:
        prof.progress.message(f"script {spec.display} ended by {outcome.signal}; "
                              f"{len(prof.trace_files)} trace(s) of completed cycles kept")
        return outcome.exit_code
    if outcome.error is not None:
        raise CollectError(f"script {spec.display} failed: {outcome.error_line}")
    if not prof.trace_files and outcome.exit_code == 0:
        raise CollectError(
            f"no trace written: {spec.display} took {plural(prof.steps_run, 'profiler step')} "
            f"(--step-on {opts['step_on']}) but one cycle needs {prof.cycle_length} "
            "(wait+warmup+active); lower --wait/--warmup/--active or change --step-on")
    if outcome.exit_code:
        prof.progress.message(f"script {spec.display} exited with code {outcome.exit_code}")
    return outcome.exit_code
