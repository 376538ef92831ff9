"""``python -m hta_report.collect [OPTIONS] [-- SCRIPT ARGS]``: the collect command alone
(handy under ``torchrun -m hta_report.collect``).  Errors print one line; exit code 1.
A torchrun rank of a finished ``--workload`` run ends without the interpreter's
teardown (:mod:`..teardown`)."""
from __future__ import annotations

from typing import List, Optional

import click

from .. import teardown
from ..errors import HtaReportError
from .command import collect_command


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``collect`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    teardown.reset()
    try:
        result = collect_command.main(args=argv, prog_name="python -m hta_report.collect",
                                      standalone_mode=False)
    except HtaReportError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    teardown.finish(main())
