"""One error hierarchy for hta-report, mapped to documented exit codes.

Exit codes (also in ``hta-report --help`` and the README):

* ``0`` (:data:`EXIT_OK`): success.
* ``1`` (:data:`EXIT_ERROR`): a usage error, or input that cannot be analyzed
  (missing directory, no trace files, an unreadable or invalid trace, an output
  path that cannot be written). Also when some traces of a directory are
  unreadable: the report covering the others is written first
  (:class:`PartialInputError`).
* ``2`` (:data:`EXIT_GATE`): reserved for quality gates (``--fail-on``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Union

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_GATE = 2

_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """``text`` with line breaks turned into `` / `` so that an error stays one
    line even when it quotes a trace string or a file name holding newlines."""
    return _LINE_BREAKS.sub(" / ", str(text))


def plural(n: int, noun: str, nouns: str = "") -> str:
    """``"1 rank"``, ``"2 ranks"``, ``"0 traces"``: ``n`` and ``noun``, with
    ``nouns`` (default ``noun + "s"``) unless ``n`` is 1."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


class HtaReportError(Exception):
    """Base class of every error hta-report raises on purpose.

    The CLI prints ``hta-report: <label>: <str(error)>`` as one line (no
    traceback unless ``--debug``) and exits with :attr:`exit_code`.

    Args:
        message: what is wrong; line breaks are replaced (see :func:`one_line`).
        path: the file or directory concerned; prefixed to the message.
    """

    exit_code = EXIT_ERROR
    #: The word the CLI prints before the message.
    label = "error"

    def __init__(self, message: str, path: Optional[Union[str, Path]] = None) -> None:
        self.message = one_line(message)
        self.path = str(path) if path is not None else None
        shown = one_line(self.path) if self.path else None
        super().__init__(f"{shown}: {self.message}" if shown else self.message)


class InputError(HtaReportError):
    """The input as a whole cannot be analyzed: missing directory, no trace files,
    two files claiming one rank."""


class PartialInputError(InputError):
    """Some traces of a directory are unreadable; the report covers the others
    (it is written before this error is raised)."""

    label = "input error"


class TraceError(HtaReportError):
    """One trace file cannot be read, is not a Kineto trace, or its analysis
    failed.

    Attributes:
        step: for a failure inside the analysis of a loadable trace, the step
            that failed (e.g. ``"idle time breakdown (HTA)"``); None otherwise.
    """

    def __init__(self, message: str, path: Optional[Union[str, Path]] = None, step: Optional[str] = None) -> None:
        super().__init__(message, path)
        self.step = step


class OutputError(HtaReportError):
    """An output file cannot be written (missing or unwritable directory)."""


class CollectError(HtaReportError):
    """``hta-report collect`` cannot run the requested workload."""
