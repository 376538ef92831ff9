"""The ``hta-report`` command line: a thin layer over :mod:`hta_report.api`."""
from __future__ import annotations

import json
import sys
import traceback
from typing import Optional

import click

from . import __version__
from .errors import EXIT_ERROR, EXIT_OK, HtaReportError

EPILOG = """\b
Exit codes:
  0  success
  1  usage error, or input that cannot be analyzed (the message names the file)
  2  a quality gate tripped (reserved for --fail-on)
"""


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
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--config", "config_path", default=None, metavar="FILE.toml",
              help="Rule thresholds and disabled rules [default: [tool.hta-report] in ./pyproject.toml].")
def analyze(trace_dir: str, output: str, fmt: Optional[str], json_path: Optional[str], recursive: bool,
            include_last_step: Optional[bool], quiet: bool, config_path: Optional[str]) -> None:
    """Analyze TRACE_DIR (Kineto traces, one per rank, .json or .json.gz) and
    write a report.

    \b
    Example:
      hta-report analyze traces/ -o report.html --json result.json
    """
    from .api import analyze as run_analysis, write_reports
    from .render.terminal import render as summary
    from .rules import load_config

    config = load_config(config_path)
    result = run_analysis(trace_dir, recursive=recursive, include_last_step=include_last_step, config=config)
    outputs = [(output, fmt)] + ([(json_path, "json")] if json_path else [])
    written = write_reports(result, outputs)
    if not quiet:
        click.echo(summary(result, [str(p) for p in written]))


@cli.command("rules", epilog=EPILOG)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="A table, or a JSON list.")
@click.option("--config", "config_path", default=None, metavar="FILE.toml",
              help="Show the thresholds of this configuration [default: [tool.hta-report] in ./pyproject.toml].")
def rules(fmt: str, config_path: Optional[str]) -> None:
    """List the advice rules: id, title, threshold and its source."""
    from .api import rule_catalogue
    from .render.terminal import catalogue_text

    entries = rule_catalogue(config_path)
    click.echo(json.dumps(entries, indent=2) if fmt == "json" else catalogue_text(entries))


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
        click.echo(f"hta-report: error: {exc}", err=True)
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
