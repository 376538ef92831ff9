"""Valid traces that HTA's parser gets wrong, put right at our boundary.

HTA is a dependency we build on, not code we patch: where its functions fail
on a valid Kineto trace, the input they see is adjusted here, before they run,
and their own functions are called unchanged. Both parsers (:mod:`.fastparse`
and :mod:`.hta_parser`) go through these functions.

* :data:`LEGACY_CATEGORIES`: PyTorch 1.8 and 1.9 (Kineto before its June 2021
  refactor, pytorch/kineto#206) wrote capitalised categories (``Kernel``,
  ``Memcpy``, ``Memset``, ``Runtime``, ``Operator``, ``User``), and 1.10-1.11
  still the GPU ones (with ``cpu_op`` and ``gpu_user_Annotation``); HTA and
  every analysis know only the names Kineto writes today (``kernel``,
  ``gpu_memcpy``...), so such a trace read as CPU-only.
* :func:`correlation_to_index`: HTA's ``_compress_df`` downcasts every integer
  column, so ``correlation`` is ``int8``/``int16`` when a trace's ids are small;
  HTA's ``transform_correlation_to_index`` then writes row indices into a
  column of that type, which pandas 3 refuses (``TypeError: Invalid value ...
  for dtype 'int16'``; pandas 2 only warned and wrapped the values).
* :mod:`.iteration` (not here: it replaces a whole HTA step): HTA's
  ``add_iteration`` asserts on an op named ``ProfilerStep`` or
  ``ProfilerStep#`` (no number); the parsers number such traces themselves.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

#: Category names of PyTorch 1.8-1.9 traces -> the names Kineto writes since
#: (libkineto ``output_json.cpp`` before and after pytorch/kineto#206;
#: ``ActivityType.cpp`` for the new names). ``Trace`` (the profiler's own
#: span) is the same in both and is dropped by HTA's parser.
LEGACY_CATEGORIES: Dict[str, str] = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "Operator": "cpu_op",
    "User": "gpu_user_annotation",
    "gpu_user_Annotation": "gpu_user_annotation",  # PyTorch 1.10-1.11 (ActivityType.cpp until 2021-11)
}


#: Legacy traces wrote every host range as ``Operator``, the ``record_function``
#: ranges of PyTorch itself included; these names are ``user_annotation`` events
#: in today's traces (the profiler's steps, the DataLoader's and the optimizer's
#: ranges), and become that category (:func:`modern_categories`). A user's own
#: ``record_function`` names cannot be told from ops and stay ``cpu_op``.
LEGACY_ANNOTATION_PREFIXES = ("ProfilerStep#", "enumerate(DataLoader)#", "enumerate(DataPipe)#", "Optimizer.")


def modern_category(cat):
    """The category Kineto writes today for ``cat`` (a legacy name, see
    :data:`LEGACY_CATEGORIES`); any other value is returned unchanged."""
    return LEGACY_CATEGORIES.get(cat, cat) if type(cat) is str else cat


def is_legacy_annotation(cat, name) -> bool:
    """Whether a legacy event (category ``cat`` before :func:`modern_category`)
    is one of PyTorch's own ``record_function`` ranges
    (:data:`LEGACY_ANNOTATION_PREFIXES`): its category is then ``user_annotation``."""
    return cat == "Operator" and type(name) is str and name.startswith(LEGACY_ANNOTATION_PREFIXES)


def modern_categories(df) -> None:
    """Rename the legacy categories of a raw event frame (one row per event,
    ``cat`` and ``name`` as strings; before HTA's ``_compress_df``) in place:
    :data:`LEGACY_CATEGORIES`, and ``user_annotation`` for
    :data:`LEGACY_ANNOTATION_PREFIXES`. A frame without legacy names is left
    as it is."""
    if "cat" not in df.columns or not df["cat"].isin(list(LEGACY_CATEGORIES)).any():
        return
    cats = df["cat"].tolist()
    names = df["name"].tolist() if "name" in df.columns else [None] * len(cats)
    df["cat"] = ["user_annotation" if is_legacy_annotation(c, n) else modern_category(c) for c, n in zip(cats, names)]


def correlation_to_index(df, table):
    """HTA's ``transform_correlation_to_index(df, table)`` (``index_correlation``:
    the row of the event each kernel launch or kernel links to), run on an
    ``int64`` copy of ``correlation`` so that the row indices HTA writes fit;
    ``correlation`` then gets back the dtype HTA's downcast gave it, so the
    frame is the one HTA's parser returns where HTA does not fail.

    Args:
        df: HTA's event frame of one trace (after ``_compress_df``).
        table: its ``TraceSymbolTable``.

    Returns:
        The frame with ``index_correlation`` (HTA returns the same object).

    Raises:
        Exception: whatever HTA raises.
    """
    from hta.common.trace import transform_correlation_to_index

    if "correlation" not in df.columns:
        return transform_correlation_to_index(df, table)
    dtype = df["correlation"].dtype
    widened = dtype.kind == "i" and dtype.itemsize < 8
    if widened:
        df["correlation"] = df["correlation"].astype(np.int64)
    df = transform_correlation_to_index(df, table)
    if widened:
        df["correlation"] = df["correlation"].astype(dtype)
    return df
