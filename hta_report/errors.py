"""One error hierarchy for hta-report, mapped to documented exit codes.

Exit codes (also in ``hta-report --help`` and the README):

* ``0`` (:data:`EXIT_OK`): success.
* ``1`` (:data:`EXIT_ERROR`): a usage error, or input that cannot be analyzed
  (missing directory, no trace files, an unreadable or invalid trace, an output
  path that cannot be written).
* ``2`` (:data:`EXIT_GATE`): reserved for quality gates (``--fail-on``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_GATE = 2


class HtaReportError(Exception):
    """Base class of every error hta-report raises on purpose.

    The CLI prints ``str(error)`` as one line (no traceback unless ``--debug``)
    and exits with :attr:`exit_code`.

    Args:
        message: what is wrong, in one line.
        path: the file or directory concerned; prefixed to the message.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, path: Optional[Union[str, Path]] = None) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        super().__init__(f"{self.path}: {message}" if self.path else message)


class InputError(HtaReportError):
    """The input as a whole cannot be analyzed: missing directory, no trace files,
    two files claiming one rank."""


class TraceError(HtaReportError):
    """One trace file cannot be read or is not a Kineto trace."""


class OutputError(HtaReportError):
    """An output file cannot be written (missing or unwritable directory)."""


class CollectError(HtaReportError):
    """``hta-report collect`` cannot run the requested workload."""
