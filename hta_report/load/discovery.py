"""Finding trace files in a directory and the rank each one belongs to."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

from ..errors import InputError

#: File names that sit beside traces but are not traces.
NOT_TRACES = {"manifest.json"}

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def is_trace_name(path: Path) -> bool:
    """True for ``*.json`` and ``*.json.gz`` files other than :data:`NOT_TRACES`."""
    name = path.name.lower()
    return (name.endswith(".json") or name.endswith(".json.gz")) and name not in NOT_TRACES


def is_hta_report_output(path: Path) -> bool:
    """True for a result or comparison saved by hta-report (``analyze --json``,
    ``compare -o x.json``): uncompressed JSON whose first key is ``schema_version``."""
    if not path.name.lower().endswith(".json"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    return head.lstrip().startswith(b'{') and b'"schema_version"' in head


def find_trace_files(trace_dir: Path, recursive: bool = False) -> List[Path]:
    """Every trace file in ``trace_dir``, sorted by path.

    Args:
        trace_dir: a directory as written by ``tensorboard_trace_handler`` or
            ``export_chrome_trace`` (one file per rank).
        recursive: also descend into subdirectories.

    Raises:
        InputError: the directory does not exist, is not a directory, or holds
            no ``.json``/``.json.gz`` file.
    """
    from ..files import location

    trace_dir = location(trace_dir)
    if not trace_dir.exists():
        raise InputError("no such directory", trace_dir)
    if not trace_dir.is_dir():
        raise InputError("not a directory (pass the folder that holds the traces)", trace_dir)
    pattern = "**/*" if recursive else "*"
    files = sorted(p for p in trace_dir.glob(pattern)
                   if p.is_file() and is_trace_name(p) and not is_hta_report_output(p))
    if not files:
        hint = "" if recursive else " (use --recursive to search subdirectories)"
        raise InputError(f"no trace files (*.json, *.json.gz) found{hint}", trace_dir)
    return files


def rank_from_file_name(path: Path) -> Optional[int]:
    """The rank in a file name such as ``rank-3``, ``rank3`` or ``rank_3``; None if absent."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None
