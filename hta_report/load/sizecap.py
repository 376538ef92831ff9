"""The size cap (``--max-trace-size``) on a gzipped trace, enforced while it is read.

A ``.json.gz`` may inflate to far more than its size on disk. Counting its
decompressed bytes before parsing costs a whole extra decompression (about 1 s
of the 3.5 s parse of a 285 MB trace); the readers (:mod:`.fastparse`,
:func:`.hta_parser.read_squeezed`) count the bytes they inflate instead and
stop at the cap with the reason :func:`over_cap` gives, so that a file over it
is refused after reading at most the cap, and nothing beyond it is held
(runs of whitespace are cut short, see :mod:`.whitespace`). A plain ``.json``
is still refused from its size on disk, before parsing
(:func:`~hta_report.load.validation.check_file`).
"""
from __future__ import annotations

from typing import Optional

from ..errors import TraceError
from ..files import Location, PathOrURL, size
from . import validation


def precheck_cap(path: Location, max_bytes: int) -> int:
    """The cap to hand :func:`~hta_report.load.validation.check_file`: ``max_bytes``
    for a plain file; for a gzip, one it cannot inflate past, so that the check
    reads only the head and the reader enforces ``max_bytes``."""
    if not validation.is_gzip_name(path):
        return max_bytes
    try:
        return max(max_bytes, path.stat().st_size * validation.MAX_DEFLATE_RATIO)
    except OSError:
        return max_bytes  # check_file names the problem


def over_cap(path: PathOrURL, max_bytes: int) -> TraceError:
    """The error for a gzipped trace (a local path or a URL) that inflates past ``max_bytes`` (bytes)."""
    try:
        compressed = f"{validation.format_size(size(path))} compressed; "
    except OSError:
        compressed = ""
    return TraceError(f"decompresses to more than the --max-trace-size cap of {validation.format_size(max_bytes)} "
                      f"({compressed}raise the cap to analyze it)", str(path))


def check(path: PathOrURL, total: int, max_bytes: Optional[int]) -> None:
    """Raise :func:`over_cap`'s error once ``total`` inflated bytes pass ``max_bytes`` (None: no cap)."""
    if max_bytes is not None and total > max_bytes:
        raise over_cap(path, max_bytes)
