"""The fix bench's patterns: one module per known performance problem and its fix.

Each module is a small plain PyTorch script (see ``bench/fixbench/harness.py``
for what it declares and its command line); :data:`NAMES` lists them and
:func:`load` imports one by name.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import List

#: The pattern modules' names, sorted.
NAMES: List[str] = sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


def load(name: str) -> ModuleType:
    """The pattern module ``name`` (one of :data:`NAMES`).

    Raises:
        ValueError: no such pattern.
    """
    if name not in NAMES:
        raise ValueError(f"no pattern {name!r} (one of {', '.join(NAMES)})")
    return importlib.import_module(f"{__name__}.{name}")
