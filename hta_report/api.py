"""The Python API behind the CLI."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .analysis import analyze
from .errors import PartialInputError
from .model import AnalysisResult
from .output import write_all_atomic
from .render import format_for_path, render

__all__ = ["analyze", "write_reports", "load_result", "partial_input_error"]


def write_reports(result: AnalysisResult, outputs: Sequence[Tuple[os.PathLike | str, Optional[str]]]) -> List[Path]:
    """Render ``result`` once per ``(path, format)`` and write each atomically.

    Every report is rendered before any file is written, and all are written
    to temporary files before any is renamed into place, so a rendering or
    writing error leaves every existing file byte-identical (and no
    temporary file behind).

    Args:
        result: the analysis.
        outputs: ``(path, format)`` pairs; ``format`` None guesses from the
            extension (see :func:`hta_report.render.format_for_path`).

    Returns:
        The paths written.

    Raises:
        hta_report.errors.OutputError: a directory is missing or not writable.
    """
    rendered = [(Path(p), render(result, format_for_path(str(p), f))) for p, f in outputs]
    return write_all_atomic(rendered)


def partial_input_error(result: AnalysisResult) -> Optional[PartialInputError]:
    """The error to report after writing ``result`` when some traces were
    unreadable (``N of M traces unreadable; the report covers the rest``), else None."""
    bad = result.inventory.unreadable
    if not bad:
        return None
    total = len(bad) + len(result.inventory.files)
    return PartialInputError(f"{len(bad)} of {total} traces unreadable; the report covers the rest")


def load_result(path: os.PathLike | str) -> AnalysisResult:
    """Read a result saved by ``analyze --json``.

    Raises:
        hta_report.errors.InputError: unreadable file or not an hta-report result.
    """
    from .errors import InputError

    try:
        return AnalysisResult.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a readable hta-report result: {exc}", path) from exc
