"""Display formatting: every number a reporter shows is formatted here."""
from __future__ import annotations


def ms(us: float) -> str:
    """µs -> ``"12.34 ms"`` (or ``"850 µs"`` below 1 ms)."""
    if abs(us) < 1000:
        return f"{us:.0f} µs"
    return f"{us / 1e3:,.2f} ms"


def pct(value: float) -> str:
    """0–100 -> ``"38.2 %"``."""
    return f"{value:.1f} %"


def num(value: float, digits: int = 0) -> str:
    """Thousands-separated number."""
    return f"{value:,.{digits}f}"


def size(nbytes: int) -> str:
    """bytes -> ``"1.5 MB"`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(nbytes) < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"


def gbps(value: float) -> str:
    """GB/s with two decimals."""
    return f"{value:,.2f} GB/s"
