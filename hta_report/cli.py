"""The ``hta-report`` command line: a thin layer over :mod:`hta_report.api`."""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

import click

from . import __version__, teardown
from .errors import EXIT_ERROR, EXIT_GATE, EXIT_INCONCLUSIVE, EXIT_OK, HtaReportError, InputError, bug_reason, show_bugs
from .escape import redact_url, terminal
from .gates import GateResult, describe as describe_gate, evaluate as evaluate_gates, metrics_help, parse_gate
from .engines import ENGINES
from .render import FORMATS, REPORTERS

#: The extensions that select each format, for --help: ".html, .htm, .md, ...".
EXTENSIONS = ", ".join(e for r in REPORTERS.values() for e in r.extensions)
#: Each format and what it is, for --help: "html: one self-contained HTML page; md: ...".
FORMAT_HELP = "; ".join(f"{r.format}: {r.description}" for r in REPORTERS.values())

EPILOG = """\b
Exit codes:
  0  success
  1  usage error, or input that cannot be analyzed (the message names the file);
     also when some traces are unreadable, or analyzed only in part: the report
     covering the rest is written first and lists them (this wins over a
     tripped gate)
  2  a quality gate (--fail-on) tripped; the report is written first
"""

#: The environment variables hta-report reads, for ``--help``.
ENVIRONMENT = """\b
Environment:
  HTA_REPORT_CACHE_MAX_SIZE       cap on the cache (default 2GiB; e.g. 500MB)
  HTA_REPORT_CACHE_KEY            the file of the key that signs cached results
                                  (default: cache-signing.key in the user's
                                  data folder; created on first use)
  HTA_REPORT_WORKERS              worker processes for parsing and analysis
                                  (default: the CPU cores)
  HTA_REPORT_MAX_MEMORY           cap on the ranks analyzed at once, by their
                                  estimated memory (e.g. 8GB; 0: none; default:
                                  the memory available)
  HTA_REPORT_LOADER               fast (default) or hta: HTA's own trace parser
  RAY_ADDRESS                     the Ray cluster of --engine ray
  HTA_REPORT_RAY_CONNECT_TIMEOUT  seconds to reach it (default 30)
  XDG_CACHE_HOME                  where the cache folder lies (Linux)
"""
#: For commands that only read and print (``rules``, ``cache``).
SIMPLE_EPILOG = """\b
Exit codes:
  0  success
  1  usage error, or a configuration that cannot be read
"""

ANALYZE_EPILOG = (EPILOG + "\n\b\n--fail-on metrics:\n" + metrics_help(comparison=False) + "\n\n"
                  + ENVIRONMENT)
COMPARE_EPILOG = (EPILOG + "  3  --inconclusive fail, and the statistical test is inconclusive (no gate tripped)\n"
                  + "\n\b\nVerdict: improved, regressed or unchanged, the step change against the noise band.\n"
                  "Beside it, a statistical test: per-item tests (Mann-Whitney U, Benjamini-Hochberg\n"
                  "at --alpha) and the step change's 95 % interval after the environment factor,\n"
                  "against --threshold, with its own verdict (or inconclusive); see docs/COMPARE.md.\n"
                  + "\n\b\n--fail-on metrics (result metrics are of NEW; 'regression' = regressed>=1):\n"
                  + metrics_help(comparison=True) + "\n\n" + ENVIRONMENT)


def _report_gates(gates: Sequence[GateResult]) -> bool:
    """Print each tripped gate on stderr; True when one tripped."""
    hits = [g for g in gates if g.tripped]
    for g in hits:
        click.echo(f"hta-report: gate tripped: {terminal(describe_gate(g))}", err=True)
    return bool(hits)


class SizeType(click.ParamType):
    """A byte size such as ``500MB`` or ``4GiB`` (see :func:`hta_report.sizes.parse_size`)."""

    name = "SIZE"

    def convert(self, value, param, ctx):  # noqa: D102 - click's protocol
        if isinstance(value, int):
            return value
        from .sizes import parse_size

        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def cache_options(command):
    """The options shared by the commands that analyze trace directories:
    ``--cache-dir``, ``--no-cache`` and ``-v``."""
    command = click.option("-v", "--verbose", is_flag=True, help="Print the time of each stage on stderr.")(command)
    command = click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")(command)
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
                        help="Cache of parsed traces and results, keyed by file contents, at most "
                             "$HTA_REPORT_CACHE_MAX_SIZE (default 2GiB; least recently used entries "
                             "evicted; see `hta-report cache`) [default: the platform's cache folder, "
                             "~/.cache/hta-report on Linux].")(command)


def engine_options(command):
    """``--engine`` and ``--ray-address``: where the per-rank work runs."""
    command = click.option("--ray-address", default=None, metavar="ADDRESS",
                           help="With --engine ray: the cluster to connect to "
                                "[default: $RAY_ADDRESS, else a Ray instance started here]; given up after "
                                "30 s ($HTA_REPORT_RAY_CONNECT_TIMEOUT).")(command)
    return click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                        help="Where each rank is parsed and analyzed: this machine's processes, or a Ray "
                             "cluster (needs Ray: pip install \"ray>=2.10\").")(command)


def _open_html(outputs: Sequence[tuple], written: Sequence[Path]) -> None:
    """``--open``: open each HTML report written (a regular file) with the
    system's default browser (:func:`webbrowser.open`); say so when there is
    none. Where no browser opens (``webbrowser.open`` returns False, as on a
    machine without one, or raises), one line on stderr names the report's
    path; the exit code is not changed."""
    import webbrowser

    from .render import format_for_path

    pages = [p for (name, fmt), p in zip(outputs, written)
             if format_for_path(str(name), fmt) == "html" and Path(p).is_file()]
    if not pages:
        click.echo("hta-report: --open: no HTML report was written", err=True)
    for page in pages:
        path = Path(page).resolve()
        try:
            opened = webbrowser.open(path.as_uri())
        except Exception:  # webbrowser.Error, OSError from a broken launcher...: the report is written all the same
            opened = False
        if not opened:
            click.echo(f"hta-report: --open: no browser could be opened; the report is {path}", err=True)


def _cache_dir(cache_dir: Optional[str], no_cache: bool) -> Optional[Path]:
    """The cache directory a command uses: None with ``--no-cache``.

    Raises:
        InputError: ``HTA_REPORT_CACHE_MAX_SIZE`` is set to something that is not a size.
    """
    if no_cache:
        return None
    _cache_cap()
    return _cache_root(cache_dir)


def _cache_root(cache_dir: Optional[str]) -> Path:
    """``--cache-dir``, else the platform's cache folder."""
    from .cache import default_cache_dir

    return Path(cache_dir) if cache_dir else default_cache_dir()


def _cache_cap() -> int:
    """The cache's size cap (bytes).

    Raises:
        InputError: ``HTA_REPORT_CACHE_MAX_SIZE`` is set to something that is not a size.
    """
    from .cache import MAX_SIZE_ENV, max_cache_bytes

    try:
        return max_cache_bytes()
    except ValueError as exc:
        raise InputError(f"{MAX_SIZE_ENV}: {exc}") from None


def _memory_cap() -> None:
    """Check ``HTA_REPORT_MAX_MEMORY`` before any work.

    Raises:
        InputError: it is set to something that is not a size.
    """
    from .workers import MAX_MEMORY_ENV, memory_budget

    try:
        memory_budget()
    except ValueError as exc:
        raise InputError(f"{MAX_MEMORY_ENV}: {exc}") from None


@click.group(epilog=EPILOG + "\n" + ENVIRONMENT, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hta-report")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Why is my GPU usage so low? Collect PyTorch profiler traces and turn them
    into a self-contained report of concrete advice."""
    ctx.obj = {"debug": debug}


def _system_allocator_for_arrow() -> None:
    """Have pyarrow (behind pandas' string columns) allocate with the C
    library's ``malloc`` instead of its default mimalloc, in this process and
    the workers it forks: mimalloc kept freed memory resident in every
    worker. On the 300 MB fractional benchmark traces (``bench/load.py``) the
    peak memory of the process tree fell from 0.93-0.99 to 0.85-0.92 GB (1
    rank) and from 0.54 to 0.48 GB (8 ranks), at the same speed or slightly
    faster (less system time). Only for the commands that analyze: ``collect`` runs the
    user's script in its process, whose allocator is not ours to change."""
    try:
        import pyarrow
    except ImportError:  # pandas without pyarrow: nothing to set
        return
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def _shown_path(path) -> str:
    """A written report's path as printed: absolute, so a terminal makes it a link."""
    try:
        return os.path.abspath(path)
    except (OSError, ValueError):  # the current directory was removed
        return str(path)


def _check_outputs(outputs) -> None:
    """Refuse an output whose format is unknown before any analysis runs.

    Raises:
        OutputError: the extension names no format and none is given (the
            message lists the extensions, see :data:`hta_report.render.REPORTERS`).
    """
    from .errors import OutputError
    from .render import format_for_path

    for path, fmt in outputs:
        if os.path.isdir(path):
            continue  # the writer names it ("it is a directory")
        try:
            format_for_path(path, fmt)
        except ValueError as exc:
            raise OutputError(str(exc), path) from None


def _sarif_note(result, outputs) -> None:
    """One line on stderr when a SARIF report was written with findings placed
    on no source line (:func:`hta_report.render.sarif.placement_note`)."""
    from .render import format_for_path, sarif

    if result is not None and any(format_for_path(path, f) == "sarif" for path, f in outputs):
        note = sarif.placement_note(result)
        if note:
            click.echo(terminal(f"hta-report: SARIF: {note}"), err=True)


@cli.command(epilog=ANALYZE_EPILOG)
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--output", default="report.html", show_default=True, metavar="FILE",
              help=f"Report file; the format follows the extension ({EXTENSIONS}).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help=f"Report format, overriding the extension of --output: {FORMAT_HELP}.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Also save the result model as JSON here.")
@click.option("-r", "--recursive", is_flag=True, help="Also read traces in subdirectories.")
@click.option("--include-last-step/--drop-last-step", default=None,
              help="Keep or drop the last ProfilerStep. Default: drop it as HTA does "
                   "(its GPU work may be cut off), unless a rank has fewer than two steps.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="EXPR",
              help="Exit 2 when EXPR holds, e.g. 'idle_pct>30' or 'severity>=high' (repeatable; metrics below).")
@click.option("--max-trace-size", "max_trace_size", type=SizeType(), default="4GiB", show_default=True,
              help="Refuse a trace whose decompressed size passes SIZE (e.g. 500MB, 4GiB), "
                   "checked before it is loaded.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--open", "open_report", is_flag=True,
              help="Open the written HTML report in the default browser (as pyinstrument does).")
@click.option("--config", "config_path", default=None, metavar="FILE.toml",
              help="Rule thresholds and disabled rules [default: [tool.hta-report] in ./pyproject.toml].")
@click.option("--source-root", "source_root", default=None,
              type=click.Path(exists=True, file_okay=False, path_type=str),
              help="Repository the traced code lives in: findings' source lines (with-stack traces) are read "
                   "from it and named relative to it [default: the git work tree holding each file].")
@cache_options
@engine_options
def analyze(traces: tuple, output: str, fmt: Optional[str], json_path: Optional[str], recursive: bool,
            include_last_step: Optional[bool], fail_on: tuple, max_trace_size: int, quiet: bool, open_report: bool,
            config_path: Optional[str], source_root: Optional[str], cache_dir: Optional[str], no_cache: bool,
            verbose: bool, engine: str, ray_address: Optional[str]) -> None:
    """Analyze the Kineto traces of one run and write a report. TRACES is a
    directory of traces (one file per rank, .json or .json.gz), a single
    trace file, or several of either (the ranks of one run); each a local
    path or a URL (file://, s3://... through fsspec). A folder that holds
    several runs in subfolders is named as such: analyze one of them, or
    compare two.

    A trace that cannot be read (truncated, not a Kineto trace, over
    --max-trace-size...) is left out: the report covers the other ranks and
    lists it, each unreadable file is named on stderr, and the exit code is 1.
    When no trace can be read, no report is written. An existing report is
    only ever replaced by a complete one.

    \b
    Examples:
      hta-report analyze traces/ -o report.html --json result.json
      hta-report analyze rank-0.pt.trace.json.gz -o report.md
      hta-report analyze traces/ -o findings.sarif --source-root .
    """
    from .api import analyze_run, check_outputs, describe, partial_input_error, preparations, write_reports
    from .render.terminal import incomplete_lines, render as summary, replaced_lines
    from .rules import load_config

    from . import progress, workers

    gates = [parse_gate(g) for g in fail_on]
    config = load_config(config_path)
    cache = _cache_dir(cache_dir, no_cache)
    _memory_cap()
    if verbose:
        show_bugs()
    _system_allocator_for_arrow()
    _skip_teardown()
    outputs = [(output, fmt)] + ([(json_path, "json")] if json_path else [])
    _check_outputs(outputs)
    with progress.using(progress.Progress(verbose=verbose, heartbeat=None if quiet else progress.HEARTBEAT_S)):
        spec = describe(list(traces), recursive=recursive, include_last_step=include_last_step,
                        max_trace_bytes=max_trace_size, engine=engine, ray_address=ray_address)
        check_outputs(outputs, spec.read_files)  # before any work
        with workers.meanwhile(*preparations(outputs)):
            result = analyze_run(spec, config=config, cache=cache, source_root=source_root)
            result.gates = evaluate_gates(gates, result=result)  # before writing: the reports say which tripped
            written = write_reports(result, outputs, cache=cache)
    if not quiet:
        click.echo(summary(result, [_shown_path(p) for p in written]))
    if open_report:
        _open_html(outputs, written)
    for line in replaced_lines(result):
        click.echo(line, err=True)
    _sarif_note(result, outputs)
    hits = _report_gates(result.gates)
    partial = partial_input_error(result)
    if partial is not None:  # incomplete input wins over a tripped gate
        for line in incomplete_lines(result):
            click.echo(line, err=True)
        raise partial
    if hits:
        raise click.exceptions.Exit(EXIT_GATE)


@cli.command(epilog=COMPARE_EPILOG)
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option("-o", "--output", default="compare.html", show_default=True, metavar="FILE",
              help=f"Comparison report; the format follows the extension ({EXTENSIONS}).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help=f"Report format, overriding the extension of --output: {FORMAT_HELP}.")
@click.option("-r", "--recursive", is_flag=True, help="Also read traces in subdirectories.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="EXPR",
              help="Exit 2 when EXPR holds, e.g. 'step_time_regression>5%' (repeatable; metrics below).")
@click.option("--max-result-size", "max_result_size", type=SizeType(), default="128MiB", show_default=True,
              help="Refuse a saved result (analyze --json) larger than SIZE (e.g. 200MB), "
                   "checked before it is read.")
@click.option("--threshold", "threshold_pct", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              metavar="PCT", help="The smallest step change (%) the verdict calls regressed or improved: "
                                  "the whole 95 % interval must lie beyond it.")
@click.option("--alpha", type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True), default=0.05,
              show_default=True, help="False-discovery rate of the per-item tests (Benjamini-Hochberg).")
@click.option("--inconclusive", "inconclusive", type=click.Choice(["pass", "fail"]), default="pass",
              show_default=True, help="An inconclusive statistical test passes (exit 0), or fails with exit code 3.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--open", "open_report", is_flag=True,
              help="Open the written HTML report in the default browser (as pyinstrument does).")
@click.option("--config", "config_path", default=None, metavar="FILE.toml",
              help="Rule thresholds and disabled rules for trace directories "
                   "[default: [tool.hta-report] in ./pyproject.toml].")
@cache_options
@engine_options
def compare(base: str, new: str, output: str, fmt: Optional[str], recursive: bool, fail_on: tuple,
            max_result_size: int, threshold_pct: float, alpha: float, inconclusive: str, quiet: bool,
            open_report: bool, config_path: Optional[str],
            cache_dir: Optional[str], no_cache: bool, verbose: bool, engine: str, ray_address: Optional[str]) -> None:
    """Compare BASE and NEW (each a trace directory, a trace file or a result
    saved by `analyze --json`): did the change make training faster or
    slower, and why?

    A trace directory analyzed before (by `analyze` or `compare`, with the
    same options) is read from the cache instead of being parsed again.

    \b
    Example:
      hta-report compare before/ after/ -o diff.html --fail-on 'step_time_regression>5%'
      hta-report compare before/ after/ --fail-on regression --inconclusive fail
    """
    from . import progress
    from .api import check_outputs, compare_paths, input_files, write_comparison
    from .render.terminal import comparison_summary
    from .rules import load_config

    gates = [parse_gate(g, comparison=True) for g in fail_on]
    config = load_config(config_path)
    if verbose:
        show_bugs()
    _check_outputs([(output, fmt)])
    _system_allocator_for_arrow()
    _skip_teardown()
    _memory_cap()
    check_outputs([(output, fmt)], input_files(base, recursive) + input_files(new, recursive))  # before any work
    with progress.using(progress.Progress(verbose=verbose, heartbeat=None if quiet else progress.HEARTBEAT_S)):
        comparison = compare_paths(base, new, max_result_size, alpha=alpha, threshold_pct=threshold_pct,
                                   recursive=recursive, config=config, engine=engine,
                                   ray_address=ray_address,
                                   cache=_cache_dir(cache_dir, no_cache))
        comparison.gates = evaluate_gates(gates, comparison=comparison)
        written = write_comparison(comparison, [(output, fmt)])
    if not quiet:
        click.echo(comparison_summary(comparison, [_shown_path(p) for p in written]))
    if open_report:
        _open_html([(output, fmt)], written)
    _sarif_note(comparison.new, [(output, fmt)])
    if _report_gates(comparison.gates):
        raise click.exceptions.Exit(EXIT_GATE)
    if inconclusive == "fail" and comparison.stats.verdict == "inconclusive":
        click.echo(f"hta-report: the statistical test is inconclusive ({terminal(comparison.stats.note or 'the interval spans the threshold')}); "
                   "--inconclusive fail", err=True)
        raise click.exceptions.Exit(EXIT_INCONCLUSIVE)


@cli.group("cache", epilog=SIMPLE_EPILOG)
def cache_group() -> None:
    """Show or empty the cache of parsed traces and results (the platform's
    cache folder, or --cache-dir). It holds at most $HTA_REPORT_CACHE_MAX_SIZE
    (default 2GiB): after each analysis the least recently used entries are
    evicted."""


@cache_group.command("info", epilog=SIMPLE_EPILOG)
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None, metavar="DIR",
              help="The cache folder [default: the platform's cache folder].")
def cache_info(cache_dir: Optional[str]) -> None:
    """Print the cache's folder, entries, size and cap."""
    from .cache import MAX_SIZE_ENV, usage
    from .sizes import format_size

    u = usage(_cache_root(cache_dir), max_bytes=_cache_cap())
    click.echo(f"folder:  {terminal(str(u.root))}\nentries: {u.entries}\n"
               f"size:    {format_size(u.size_bytes) if u.size_bytes else '0 bytes'} "
               f"of at most {format_size(u.max_bytes)} (${MAX_SIZE_ENV})")


@cache_group.command("clear", epilog=SIMPLE_EPILOG)
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None, metavar="DIR",
              help="The cache folder [default: the platform's cache folder].")
def cache_clear(cache_dir: Optional[str]) -> None:
    """Remove every cached parse and result (the next analysis parses again)."""
    from .cache import clear
    from .sizes import format_size

    root = _cache_root(cache_dir)
    removed = clear(root)
    click.echo(f"removed {format_size(removed) if removed else '0 bytes'} from {terminal(str(root))}")


@cli.command("schema", epilog=SIMPLE_EPILOG)
@click.argument("name", type=click.Choice(["result", "comparison"]), default="result")
@click.option("--list", "list_all", is_flag=True,
              help="List every schema (name, schema_version, title, published copy) instead.")
def schema_command(name: str, list_all: bool) -> None:
    """Print the JSON Schema of a saved result (analyze --json) or of a
    comparison (compare -o x.json), generated from the result model.
    schema_version is the major version: within it, changes are additive
    (new optional fields); see docs/MCP.md."""
    from .schema import SCHEMA_VERSION, SCHEMAS, schema

    if list_all:
        for key, (_, title) in SCHEMAS.items():
            click.echo(f"{key}\t{SCHEMA_VERSION}\t{title}\tdocs/schema/{key}.schema.json")
        return
    click.echo(json.dumps(schema(name), indent=2, sort_keys=True))


@cli.command("rules", epilog=SIMPLE_EPILOG)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="Plain text, a JSON list, or the markdown of docs/RULES.md.")
@click.option("--config", "config_path", default=None, metavar="FILE.toml",
              help="Show the thresholds of this configuration [default: [tool.hta-report] in ./pyproject.toml].")
def rules(fmt: str, config_path: Optional[str]) -> None:
    """List the advice rules: id, title, threshold and its source."""
    from .api import rule_catalogue
    from .render.markdown import catalogue_markdown
    from .render.terminal import catalogue_text

    entries = rule_catalogue(config_path)
    if fmt == "json":
        click.echo(json.dumps(entries, indent=2))
    else:
        click.echo(catalogue_markdown(entries) if fmt == "markdown" else catalogue_text(entries), nl=fmt == "text")


@cli.command("mcp", epilog=SIMPLE_EPILOG)
@click.option("--root", "roots", multiple=True, metavar="DIR",
              help="A folder whose trace directories and saved results the tools may read (repeatable) "
                   "[default: the current directory]; no path outside them is read.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None, metavar="DIR",
              help="Keep analyses in this result cache [default: none; nothing is written].")
def mcp_command(roots: tuple, cache_dir: Optional[str]) -> None:
    """Serve hta-report's answers to an MCP client (an agent) on stdin/stdout:
    analyze, findings, kernels, ops, step time, idle gaps, compare, what-if.
    Needs the extra: pip install "hta-report[mcp]"."""
    try:
        from .mcp_server import serve
        import mcp  # noqa: F401 - the SDK, checked before serving
    except ImportError:
        from .mcp_server import MISSING_SDK

        raise click.ClickException(MISSING_SDK) from None
    for r in roots:
        if not os.path.isdir(r):
            raise click.ClickException(f"{terminal(r)}: --root is not a folder")
    serve(roots, cache_dir)


def _register_collect() -> None:
    from .collect.command import collect_command  # needs no torch until it runs

    cli.add_command(collect_command)


_register_collect()


def main(argv: Optional[list] = None) -> int:
    """Entry point of the ``hta-report`` console script; returns the exit code
    (0 ok, 1 usage or input error, 2 gate tripped)."""
    args = list(sys.argv[1:] if argv is None else argv)
    teardown.reset()
    debug = "--debug" in args or "-v" in args or "--verbose" in args
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
            sys.stderr.write(redact_url(traceback.format_exc()))  # a URL's login stays out of it too
        click.echo(f"hta-report: {exc.label}: {terminal(redact_url(exc))}", err=True)
        return exc.exit_code
    except Exception as exc:  # a bug: one line saying so, the traceback with -v or --debug
        if debug:
            sys.stderr.write(redact_url(traceback.format_exc()))  # a URL's login stays out of it too
        click.echo(f"hta-report: unexpected error: {terminal(redact_url(bug_reason(exc)))}", err=True)
        return EXIT_ERROR


def _skip_teardown() -> None:
    """Let :func:`run` end this process with ``os._exit`` once the command
    returns (see :mod:`.teardown`). Not for ``collect`` with a script: its
    ``atexit`` handlers (loggers, writers) must run."""
    teardown.skip_teardown()


def run() -> None:
    """Console-script wrapper that exits with :func:`main`'s code.

    After ``analyze`` and ``compare``, whose reports are written (closed and
    renamed into place) before the command returns, and after a torchrun rank
    of ``collect --workload``, it flushes the standard streams and logging and
    ends the process with ``os._exit`` (:func:`.teardown.finish`): the
    interpreter's teardown took 0.2 s of every analyze run on the benchmark
    machine, and can abort a gloo rank whose files are all written. Their
    pools of worker processes are shut down before they return, and a Ray
    instance they started is shut down too."""
    teardown.finish(main())
