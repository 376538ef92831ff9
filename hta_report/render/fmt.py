"""Display formatting: every number a reporter shows is formatted here."""
from __future__ import annotations

from ..errors import plural

__all__ = ["ms", "pct", "num", "size", "gbps", "plural", "run_name"]


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
