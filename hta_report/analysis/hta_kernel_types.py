"""HTA's kernel classification, remembered per kernel name.

HTA's temporal breakdown, GPU kernel breakdown and communication overlap
(``hta.analyzers.breakdown_analysis``, ``hta.analyzers.communication_analysis``)
each classify every GPU event of a rank with ``hta.utils.utils.get_kernel_type(name)``
(up to three regular-expression matches) inside a row-by-row
``DataFrame.apply``. A trace has hundreds of distinct GPU event names and
tens of thousands of GPU events per rank, so :func:`install` puts the same
function behind :func:`functools.lru_cache` in the HTA modules that call it:
the results cannot change (the function depends on the name alone, and
returns a ``str``), and the row-by-row ``apply`` stays HTA's.

Measured on the 8-rank fractional benchmark traces (``bench/load.py``, 8 ranks
analyzed one after the other in one process): those three analyses took
1.41 s, and 0.96 s with the cache.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable, Optional

#: The HTA modules that call ``get_kernel_type`` row by row.
CALLERS = ("hta.analyzers.breakdown_analysis", "hta.analyzers.communication_analysis",
           "hta.analyzers.trace_counters")
#: Distinct names remembered (a trace has hundreds; a long-lived process may see many traces).
CACHE_SIZE = 1 << 16

_cached: Optional[Callable[[str], str]] = None


def install() -> int:
    """Have the modules of :data:`CALLERS` call the cached ``get_kernel_type``.

    A module whose ``get_kernel_type`` is not HTA's own (another HTA version,
    or one patched by someone else) is left alone. Safe to call again: a
    module already patched counts as patched.

    Returns:
        How many of :data:`CALLERS` call the cached function now (0 when HTA
        has no ``hta.utils.utils.get_kernel_type``).
    """
    global _cached
    try:
        from hta.utils import utils
    except ImportError:
        return 0
    original = getattr(utils, "get_kernel_type", None)
    if original is None:
        return 0
    if _cached is None or _cached.__wrapped__ is not original:
        _cached = functools.lru_cache(maxsize=CACHE_SIZE)(original)
    patched = 0
    for name in CALLERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        current = getattr(module, "get_kernel_type", None)
        if current is original:
            module.get_kernel_type = _cached
        if module.get_kernel_type is _cached:
            patched += 1
    return patched
