"""Byte sizes as people write them (``500MB``, ``4GiB``) and as messages show
them: the size options of the CLI (``--max-trace-size``, ``--max-result-size``)
and ``HTA_REPORT_CACHE_MAX_SIZE``."""
from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024 ** 2, "mb": 1000 ** 2, "mib": 1024 ** 2,
    "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3,
    "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in a size such as ``500MB``, ``4GiB``, ``1.5G`` or ``1000000``.

    ``kB``/``MB``/``GB``/``TB`` are powers of 1000; ``KiB``/``MiB``/``GiB``/``TiB``
    and the bare ``K``/``M``/``G``/``T`` are powers of 1024; case is ignored.

    Raises:
        ValueError: not a positive size with a known unit.
    """
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size; write e.g. 500MB, 4GiB or 1000000 (bytes)")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{text!r}: the size must be more than 0 bytes")
    return value


def format_size(n: int) -> str:
    """A byte count for messages: ``4 GiB``, ``500 MB``, else ``1,234,567 bytes``."""
    for unit, base in (("TiB", 1024 ** 4), ("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024),
                       ("TB", 1000 ** 4), ("GB", 1000 ** 3), ("MB", 1000 ** 2), ("kB", 1000)):
        if n >= base and n % base == 0:
            return f"{n // base} {unit}"
    if n >= 1000 ** 2:
        return f"{n / 1000 ** 2:,.1f} MB"
    return f"{n:,} bytes"
