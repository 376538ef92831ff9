"""The ``hta-report collect`` click command.

Importing this module does not import torch; the command imports it when run
and raises :class:`~hta_report.errors.CollectError` if it is missing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import click

from ..errors import CollectError
from .environment import quiet_kineto, require_torch
from .script import STEP_EVENTS  # no torch import there

WORKLOAD_NAMES = ("cnn", "rnn", "transformer")
#: Options that only make sense with --workload (checked when given with a script).
WORKLOAD_ONLY = ("batch_size", "num_workers", "pin_memory", "slow_data", "sync_every_step",
                 "amp", "width", "depth", "steps")

EPILOG = """\b
Examples:
  hta-report collect -o traces/ --workload cnn
  hta-report collect -o traces/ --workload cnn --num-workers 0 --slow-data 5
  hta-report collect -o traces/ -- python train.py --epochs 1
  hta-report collect -o traces/ --step-on forward -- python infer.py
  torchrun --nproc-per-node 2 -m hta_report collect -o traces/ --workload cnn

\b
Each rank writes rank-<r>.<host>_<pid>.<cycle>.pt.trace.json.gz per completed
profiler cycle (a cycle cut short is not written); rank 0 writes manifest.json.
A script's exit code and exceptions propagate.
"""


@click.command("collect", epilog=EPILOG,
               context_settings={"allow_interspersed_args": False,
                                 "help_option_names": ["-h", "--help"]})
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="Directory for the traces and manifest.json (created; must hold no traces).")
@click.option("--workload", metavar="|".join(WORKLOAD_NAMES),
              help="Train a built-in model on synthetic data instead of running a script.")
@click.option("--wait", default=1, show_default=True, help="Profiler schedule: steps skipped per cycle.")
@click.option("--warmup", default=1, show_default=True, help="Profiler schedule: warm-up steps per cycle.")
@click.option("--active", default=7, show_default=True,
              help="Profiler schedule: recorded steps per cycle (7: analyze drops the first as warm-up and the "
              "last as HTA does, leaving 5 analyzed steps).")
@click.option("--repeat", default=1, show_default=True, help="Profiler schedule: cycles (0 = unlimited).")
@click.option("--record-shapes/--no-record-shapes", default=True, show_default=True,
              help="Record operator input shapes.")
@click.option("--with-stack", is_flag=True,
              help="Record Python stacks: analyze then names the lines of your code behind each finding "
                   "(bigger traces, slower host; see docs/collect.md).")
@click.option("--profile-memory", is_flag=True, help="Record tensor allocations.")
@click.option("--device", default="auto", show_default=True, metavar="auto|cpu|cuda",
              help="Device to train on and profile (cuda adds GPU activity).")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress lines on stderr, and none of libkineto's (KINETO_LOG_LEVEL=6 unless set).")
@click.option("--step-on", default="optimizer", show_default=True, metavar="|".join(STEP_EVENTS),
              help="Script only: what ends a profiler step: every optimizer.step(), every "
                   "outermost nn.Module call (inference scripts), or every backward().")
@click.option("--steps", type=int, help="Workload: training steps per rank "
              "[default: wait+warmup+active times repeat].")
@click.option("--batch-size", type=int, help="Workload: samples per step per rank "
              "[default: cnn 32, rnn 16, transformer 16].")
@click.option("--num-workers", type=int, default=0, show_default=True,
              help="Workload: DataLoader worker processes.")
@click.option("--pin-memory/--no-pin-memory", default=None,
              help="Workload: DataLoader pin_memory [default: on with cuda].")
@click.option("--slow-data", type=float, default=0.0, show_default=True, metavar="MS",
              help="Workload: CPU milliseconds of per-sample work per batch "
                   "(each sample burns MS/batch-size ms in Dataset.__getitem__).")
@click.option("--sync-every-step", is_flag=True, help="Workload: loss.item() every step.")
@click.option("--amp/--no-amp", default=False, show_default=True,
              help="Workload: bf16 autocast.")
@click.option("--width", type=int, help="Workload: model width "
              "[default: cnn 8 channels, rnn 128 units, transformer 64 dims].")
@click.option("--depth", type=int, help="Workload: model depth [default: 2 stages/layers].")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[--] [python] SCRIPT|-m MODULE [ARGS]...")
@click.pass_context
def collect_command(ctx: click.Context, command: List[str], **opts: Any) -> None:
    """Profile PyTorch training with torch.profiler and write Kineto traces
    for `hta-report analyze`: a built-in workload (--workload) or an
    unmodified script run in-process (after --)."""
    workload: Optional[str] = opts["workload"]
    if workload is not None and command:
        raise CollectError("pass either --workload or a script command, not both")
    if workload is None and not command:
        raise CollectError("nothing to run: pass --workload cnn|rnn|transformer "
                           "or -- python script.py ARGS")
    if workload is not None and workload not in WORKLOAD_NAMES:
        raise CollectError(f"unknown workload {workload!r} (choose {', '.join(WORKLOAD_NAMES)})")
    if opts["device"] not in ("auto", "cpu", "cuda"):
        raise CollectError(f"unknown device {opts['device']!r} (choose auto, cpu or cuda)")
    if opts["step_on"] not in STEP_EVENTS:
        raise CollectError(f"unknown --step-on {opts['step_on']!r} (choose {', '.join(STEP_EVENTS)})")
    _check_numbers(opts)
    given = {name for name in opts
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    if workload is None:
        misplaced = sorted(given & set(WORKLOAD_ONLY))
        if misplaced:
            flag = "--" + misplaced[0].replace("_", "-")
            raise CollectError(f"{flag} only applies to --workload, not to a script")
    elif "step_on" in given:
        raise CollectError("--step-on only applies to a script, not to --workload")

    if opts["quiet"]:
        quiet_kineto()  # before torch is imported: a CUDA build may start libkineto early
    require_torch()
    from .session import check_schedule

    check_schedule(opts["wait"], opts["warmup"], opts["active"], opts["repeat"])
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in opts.items()}
    if workload is not None:
        from .run import collect_workload

        collect_workload(workload, opts, options)
        return
    from .run import collect_script

    code = collect_script(list(command), opts, options)
    if code:
        ctx.exit(code)


def _check_numbers(opts: Dict[str, Any]) -> None:
    for name in ("steps", "batch_size", "width", "depth"):
        if opts[name] is not None and opts[name] < 1:
            raise CollectError(f"--{name.replace('_', '-')} must be >= 1 (got {opts[name]})")
    if opts["num_workers"] < 0:
        raise CollectError(f"--num-workers must be >= 0 (got {opts['num_workers']})")
    if opts["slow_data"] < 0:
        raise CollectError(f"--slow-data must be >= 0 ms (got {opts['slow_data']})")
