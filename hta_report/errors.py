"""One error hierarchy for hta-report, mapped to documented exit codes.

Exit codes (also in ``hta-report --help`` and docs/analyze.md):

* ``0`` (:data:`EXIT_OK`): success.
* ``1`` (:data:`EXIT_ERROR`): a usage error, or input that cannot be analyzed
  (missing directory, no trace files, an unreadable or invalid trace, an output
  path that cannot be written). Also when some traces of a directory are
  unreadable: the report covering the others is written first
  (:class:`PartialInputError`).
* ``2`` (:data:`EXIT_GATE`): reserved for quality gates (``--fail-on``).
"""
from __future__ import annotations

import os

import re
from pathlib import Path
from typing import Optional, Union

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_GATE = 2
#: ``compare --inconclusive fail``: the comparison's verdict is ``inconclusive`` (no gate tripped).
EXIT_INCONCLUSIVE = 3

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

    def __init__(self, message: str, path: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
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


class InternalError(TraceError):
    """An analysis or parse of a trace that passed every check failed inside
    HTA or hta-report: a bug to report, not a fault of the trace. The message
    names the step, the exception and the line of code it came from
    (:func:`bug_reason`); ``-v`` prints the traceback (:func:`log_bug`)."""

    label = "internal error"


class OutputError(HtaReportError):
    """An output file cannot be written (missing or unwritable directory)."""


class CollectError(HtaReportError):
    """``hta-report collect`` cannot run the requested workload."""


#: The logger that receives the traceback of every bug caught (:func:`log_bug`);
#: ``-v`` sends it to stderr.
BUG_LOGGER = "hta_report.bugs"


def bug_reason(exc: BaseException, limit: int = 200) -> str:
    """One line for an exception that is a bug: ``Type: message at FILE:LINE
    (function), a bug in HTA (or hta-report, pandas...) - not a fault of the
    trace; please report it (-v prints the traceback)``. The place is the
    innermost frame in HTA's or hta-report's code, so a failure inside pandas
    called by HTA is HTA's."""
    text = one_line(str(exc)) or ("a consistency check failed" if isinstance(exc, AssertionError) else "no message")
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    where, who = _origin(exc)
    return (f"{type(exc).__name__}: {text}{f' at {where}' if where else ''}: a bug in {who}, not a fault of the "
            "trace; please report it (hta-report -v prints the traceback)")


def _origin(exc: BaseException):
    """``(FILE:LINE (function), "HTA" or "hta-report")`` of the innermost
    frame of ``exc``'s traceback inside either package, else ``("", "hta-report")``."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        for package, who in (("/hta_report/", "hta-report"), ("/hta/", "HTA")):
            at = path.rfind(package)
            if at >= 0:
                return f"{path[at + 1:]}:{frame.lineno} ({frame.name})", who
    return "", "hta-report"


def log_bug(exc: BaseException, what: str) -> None:
    """Hand ``exc``'s traceback to :data:`BUG_LOGGER` (shown with ``-v``)."""
    import logging

    logging.getLogger(BUG_LOGGER).debug("%s failed", what, exc_info=(type(exc), exc, exc.__traceback__))


def internal_error(exc: BaseException, what: str, path: Optional[Union[str, Path]] = None,
                   step: Optional[str] = None) -> InternalError:
    """The :class:`InternalError` for ``exc`` raised while doing ``what``
    (``"analysis failed at idle time breakdown (HTA)"``, ``"parsing it with
    HTA's functions"``); its traceback is logged (:func:`log_bug`)."""
    log_bug(exc, what)
    return InternalError(f"{what}: {bug_reason(exc)}", path, step=step)


def show_bugs() -> None:
    """Print the traceback of every bug caught from now on (:func:`log_bug`)
    on stderr, in this process and the workers it forks (``-v``)."""
    import logging

    logger = logging.getLogger(BUG_LOGGER)
    if not any(getattr(h, "_hta_report_bugs", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("hta-report: traceback of a bug (%(message)s):"))
        handler._hta_report_bugs = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
