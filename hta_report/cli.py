"""The ``hta-report`` command line: a thin layer over :mod:`hta_report.api`."""
from __future__ import annotations

import sys
import traceback
from typing import Optional

import click

from . import __version__
from .errors import EXIT_ERROR, EXIT_OK, HtaReportError, one_line

EPILOG = """\b
Exit codes:
  0  success
  1  usage error, or input that cannot be analyzed (the message names the file);
     also when some traces are unreadable: the report covering the others is
     written first and lists them
  2  a quality gate tripped (reserved for --fail-on)
"""


class SizeType(click.ParamType):
    """A byte size such as ``500MB`` or ``4GiB`` (see :func:`hta_report.validation.parse_size`)."""

    name = "SIZE"

    def convert(self, value, param, ctx):  # noqa: D102 - click's protocol
        if isinstance(value, int):
            return value
        from .validation import parse_size

        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hta-report")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Why is my GPU usage so low? Collect PyTorch profiler traces and turn them
    into a self-contained report of concrete advice."""
    ctx.obj = {"debug": debug}


@cli.command(epilog=EPILOG)
@click.argument("trace_dir", type=click.Path(path_type=str))
@click.option("-o", "--output", default="report.html", show_default=True,
              help="Report file; the format follows the extension (.html, .md, .json).")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "json"]), default=None,
              help="Report format, overriding the extension of --output.")
@click.option("--json", "json_path", default=None, help="Also save the result model as JSON here.")
@click.option("-r", "--recursive", is_flag=True, help="Also read traces in subdirectories.")
@click.option("--include-last-step/--drop-last-step", default=None,
              help="Keep or drop the last ProfilerStep. Default: drop it as HTA does "
                   "(its GPU work may be cut off), unless a rank has fewer than two steps.")
@click.option("--max-trace-size", "max_trace_size", type=SizeType(), default="4GiB", show_default=True,
              help="Refuse a trace whose decompressed size passes SIZE (e.g. 500MB, 4GiB), "
                   "checked before it is loaded.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def analyze(trace_dir: str, output: str, fmt: Optional[str], json_path: Optional[str], recursive: bool,
            include_last_step: Optional[bool], max_trace_size: int, quiet: bool) -> None:
    """Analyze TRACE_DIR (Kineto traces, one per rank, .json or .json.gz) and
    write a report.

    A trace that cannot be read (truncated, not a Kineto trace, over
    --max-trace-size...) is left out: the report covers the other ranks and
    lists it, each unreadable file is named on stderr, and the exit code is 1.
    When no trace can be read, no report is written. An existing report is
    only ever replaced by a complete one.

    \b
    Example:
      hta-report analyze traces/ -o report.html --json result.json
    """
    from .api import analyze as run_analysis, partial_input_error, write_reports
    from .render.terminal import render as summary

    result = run_analysis(trace_dir, recursive=recursive, include_last_step=include_last_step,
                          max_trace_bytes=max_trace_size)
    outputs = [(output, fmt)] + ([(json_path, "json")] if json_path else [])
    written = write_reports(result, outputs)
    if not quiet:
        click.echo(summary(result, [str(p) for p in written]))
    partial = partial_input_error(result)
    if partial is not None:
        for bad in result.inventory.unreadable:
            click.echo(f"hta-report: unreadable: {one_line(bad.path)}: {bad.reason}", err=True)
        raise partial


def _register_optional_commands() -> None:
    try:
        from .collect.command import collect_command
    except ImportError:  # pragma: no cover - collect ships with the package
        return
    cli.add_command(collect_command)


_register_optional_commands()


def main(argv: Optional[list] = None) -> int:
    """Entry point of the ``hta-report`` console script; returns the exit code
    (0 ok, 1 usage or input error, 2 gate tripped)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        rv = cli.main(args=args, prog_name="hta-report", standalone_mode=False)
        return rv if isinstance(rv, int) else EXIT_OK
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:  # usage errors: click's message, exit 1
        exc.show()
        return EXIT_ERROR
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return EXIT_ERROR
    except HtaReportError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"hta-report: {exc.label}: {exc}", err=True)
        return exc.exit_code
    except Exception as exc:  # an unexpected failure: one line, traceback with --debug
        if debug:
            traceback.print_exc()
        click.echo(f"hta-report: unexpected error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                   err=True)
        return EXIT_ERROR


def run() -> None:
    """Console-script wrapper that exits with :func:`main`'s code."""
    sys.exit(main())
