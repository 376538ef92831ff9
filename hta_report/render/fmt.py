"""Display formatting: every number a reporter shows is formatted here.

No figure prints as hundreds of digits: a magnitude of :data:`MAX_FIXED` or
more is written in scientific notation (``1.80e+308 ms``) by :func:`fixed`,
which every formatter here goes through. Traces cannot give such figures
(their times stop at 2**53 µs); a hand-edited or corrupt saved result or
cache entry can hold any finite number, and is shown as it says, readably.
"""
from __future__ import annotations

import math

from ..errors import plural

__all__ = ["ms", "pct", "share", "num", "size", "gbps", "fixed", "MAX_FIXED", "NOT_AVAILABLE", "plural", "run_name",
           "ms_range"]

#: Smallest magnitude written in scientific notation rather than fixed-point
#: (a thousand trillion: 31 years in µs, a petabyte in bytes).
MAX_FIXED = 1e15


def fixed(value: float, digits: int = 0, sign: bool = False, grouped: bool = True) -> str:
    """``value`` in fixed-point notation with ``digits`` decimals (``sign``:
    always a sign; ``grouped``: thousands separators), as ``f"{value:+,.2f}"``
    would write it, except that a magnitude of :data:`MAX_FIXED` or more is
    written in scientific notation with three significant digits
    (``1.80e+308``; an integer past the float range as ``1e+400``).
    NaN and infinities are written as Python writes them."""
    plus = "+" if sign else ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= MAX_FIXED:
        try:
            return f"{float(value):{plus}.2e}"
        except OverflowError:  # an integer past the float range
            return f"{'-' if value < 0 else plus}1e+{math.floor(math.log10(abs(value)))}"
    return f"{value:{plus}{',' if grouped else ''}.{digits}f}"


def ms(us: float) -> str:
    """µs -> ``"12.34 ms"`` (or ``"850 µs"`` below 1 ms)."""
    if abs(us) < 1000:
        return f"{fixed(us, 0, grouped=False)} µs"
    try:
        return f"{fixed(us / 1e3, 2)} ms"
    except OverflowError:  # an integer past the float range
        return f"{fixed(us // 1000, 2)} ms"


def interval_digits(low_us: float, high_us: float) -> int:
    """Decimals of a time in ms that an interval from ``low_us`` to
    ``high_us`` (µs) supports: two significant digits of its half-width,
    0 to 3 decimals (a half-width of 0.85 ms: 2; 8.5 ms: 1; 85 ms: 0)."""
    half = abs(high_us - low_us) / 2e3
    if not math.isfinite(half) or half <= 0:
        return 2
    return int(min(3, max(0, 1 - math.floor(math.log10(half)))))


def ms_range(before_us: float, after_us: float, low_us: float, high_us: float) -> str:
    """A predicted step with its interval, rounded to what the interval
    supports (:func:`interval_digits`): ``"16.8 → 10.8 ms (9.9–11.6)"``.
    Magnitudes of :data:`MAX_FIXED` or more in scientific notation."""
    d = interval_digits(low_us, high_us)
    try:
        b, a, lo, hi = (fixed(x / 1e3, d) for x in (before_us, after_us, low_us, high_us))
    except OverflowError:  # an integer past the float range
        b, a, lo, hi = (fixed(x // 1000, d) for x in (before_us, after_us, low_us, high_us))
    return f"{b} → {a} ms ({lo}–{hi})"


def pct(value: float) -> str:
    """0–100 -> ``"38.2 %"``."""
    return f"{fixed(value, 1, grouped=False)} %"


#: What a figure that cannot be computed from what a result holds is shown as.
NOT_AVAILABLE = "not available"


def share(part: float, whole: float, sign: bool = False) -> str:
    """``part`` as % of ``whole`` (same unit): ``"38.2 %"`` (``sign``:
    ``"+38.2 %"``); :data:`NOT_AVAILABLE` where ``whole`` is not positive or
    the share is not finite (a saved result's 1e308 against 1e-300): never
    ``inf %``, never a ZeroDivisionError or a numpy warning."""
    try:
        value = 100 * (part / whole) if whole > 0 else math.nan
    except (OverflowError, ZeroDivisionError):
        value = math.nan
    if not math.isfinite(value):
        return NOT_AVAILABLE
    return f"{fixed(value, 1, sign=sign, grouped=False)} %"


def num(value: float, digits: int = 0) -> str:
    """Thousands-separated number."""
    return fixed(value, digits)


def size(nbytes: int) -> str:
    """bytes -> ``"1.5 MB"`` (powers of 1000)."""
    try:
        value = float(nbytes)
    except OverflowError:  # an integer past the float range
        return f"{fixed(nbytes)} B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{fixed(value, 0, grouped=False)} {unit}" if unit == "B" else f"{fixed(value, 1)} {unit}"
        value /= 1000
    return f"{fixed(value, 1)} TB"


def gbps(value: float) -> str:
    """GB/s with two decimals."""
    return f"{fixed(value, 2)} GB/s"


def run_name(label: str) -> str:
    """The short name of a run from its input as given (``inventory.input_dir``
    or a comparison side): the folder's or file's name without ``.json.gz``
    (``/traces/control`` -> ``control``); for several inputs their shared
    folder's name, else ``"rank-0 and 1 more"``."""
    parts = [p.replace("\\", "/").rstrip("/") for p in str(label).split(", ") if p.strip()]
    names = []
    for p in parts:
        name = p.rsplit("/", 1)[-1]
        for suffix in (".json.gz", ".json"):
            if name.lower().endswith(suffix):
                name = name[: -len(suffix)]
        names.append(name or p)
    if not names:
        return str(label)
    if len(names) == 1:
        return names[0] or str(label)
    folders = {p.rsplit("/", 2)[-2] if p.count("/") >= 1 else "" for p in parts}
    folder = folders.pop() if len(folders) == 1 else ""
    return folder or f"{names[0]} and {len(names) - 1} more"


def base_name(path: str) -> str:
    """The last part of a path or URL (``/traces/rank-0.json.gz`` -> ``rank-0.json.gz``)."""
    text = str(path).replace("\\", "/").rstrip("/")
    return text.rsplit("/", 1)[-1] or text
