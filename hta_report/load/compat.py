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
  for dtype 'int16'``; pandas 2 only warned and wrapped the values). And
  its join of launches to kernels is an inner merge on ``correlation``: ids
  shared by many events (0, or a writer that reuses them) make it quadratic
  (2,000 such kernels asked for 33.5 GiB), so an id held by several host
  events is split first, each GPU event keeping the call that launched it
  (:func:`distinct_correlations`).
* :func:`drop_enclosing_steps`: a ``ProfilerStep`` annotation around other
  steps (a harness that names its whole loop like a step) made HTA number
  every event inside as its one iteration and the analyzed window empty:
  busy 0 %, idle 0 %.
* :mod:`.iteration` (not here: it replaces a whole HTA step): HTA's
  ``add_iteration`` asserts on an op named ``ProfilerStep`` or
  ``ProfilerStep#`` (no number); the parsers number such traces themselves.
"""
from __future__ import annotations

import re
from typing import Dict, Tuple

import numpy as np

#: Runtime and driver calls that put work on a GPU stream (CUDA, HIP, driver
#: API: ``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``hipMemcpyAsync``,
#: ``cudaMemsetAsync``, ``cudaGraphLaunch``...).
LAUNCH_CALL = re.compile(r"^(?:cuda|cu|hip)\w*(?:Launch|Memcpy|Memset)", re.IGNORECASE)

#: The key of a parse's metadata that holds how many events shared a
#: correlation id with another event of their side (host or GPU) and were
#: paired in time order (:func:`distinct_correlations`); absent when none did.
SHARED_CORRELATIONS = "hta_report_shared_correlations"
#: The key of a parse's metadata that holds how many ``ProfilerStep``
#: annotations enclosed other steps and were left out (:func:`drop_enclosing_steps`).
ENCLOSING_STEPS = "hta_report_enclosing_steps"
#: The key of a parse's metadata that holds how many GPU events were linked to
#: their launch calls by ``External id`` (:func:`link_by_external_id`); absent when none were.
EXTERNAL_ID_LINKS = "hta_report_external_id_links"
#: Trace categories of GPU work (kernels, copies, memsets).
_GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
#: Categories of the GPU runtime's and driver's calls.
_RUNTIME = ("cuda_runtime", "cuda_driver")

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


def distinct_correlations(corr: np.ndarray, gpu: np.ndarray, launches: np.ndarray,
                          ts: np.ndarray) -> Tuple[np.ndarray, int]:
    """Correlation ids made one host event each, so joins on them stay linear.

    CUPTI and roctracer give each launch call its own id, echoed by the GPU
    work it launched: one kernel or copy, or every kernel of a CUDA graph
    (one call, many kernels: left as it is). Where an id (-1 excluded: no id)
    is held by more than one host event, its k-th launch call in time order
    and its k-th GPU event in time order get one fresh id (a GPU runs one
    stream's work in launch order, and the work of an id is one launch's);
    launch calls or GPU events left without a partner get fresh ids of their
    own, and other host rows holding such an id (``cudaEventRecord``,
    synchronizations: they launch no GPU work) lose it (-1). Fresh ids are
    positive and above every id in ``corr``.

    Args:
        corr: ``correlation`` per row (int64, shape ``(n,)``); not changed.
        gpu: True where the row is GPU work (``stream >= 0``), shape ``(n,)``.
        launches: True where the row is a call that launches GPU work
            (:data:`LAUNCH_CALL`), shape ``(n,)``.
        ts: start per row (µs), shape ``(n,)``.

    Returns:
        The ids to use (``corr`` itself when no id is shared), and how many
        rows held a shared id.
    """
    import pandas as pd

    host_ids = pd.Series(corr[(corr != -1) & ~gpu])
    repeated = host_ids[host_ids.duplicated()].unique()
    if not len(repeated):
        return corr, 0
    out = corr.copy()
    rows = np.flatnonzero(np.isin(corr, repeated))
    shared = len(rows)
    out[rows] = -1
    rows = rows[gpu[rows] | launches[rows]]
    both = pd.DataFrame({"c": corr[rows], "g": gpu[rows], "ts": ts[rows], "row": rows}).sort_values("ts", kind="stable")
    both["k"] = both.groupby(["g", "c"], sort=False).cumcount()
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([both["c"], both["k"]]))
    out[both["row"].to_numpy()] = max(int(corr.max()), 0) + 1 + codes.astype(np.int64)
    return out, shared


def link_by_external_id(df, symbols) -> int:
    """Stream and correlation of GPU work in traces that give neither, from
    the track and ``External id`` (in place); returns how many GPU events
    were linked.

    ROCm builds of PyTorch 2.x (roctracer, seen with ROCm 6.x) wrote GPU
    events with no ``stream``, ``correlation`` or ``device`` argument: a
    kernel carries only ``External id``, which equals the ``External id``
    of the ``hip*`` call that launched it (the two ends of its ``ac2g``
    flow), and sits on the track ``pid`` = GPU index, ``tid`` = stream.
    Read as written, such a trace has no GPU work at all ("CPU only"). Here,
    only where no GPU event of the file has a stream (the whole file is in
    that format): each GPU event with an ``External id`` gets its ``tid`` as
    its stream and the id as its correlation, and a runtime call without a
    correlation gets its ``External id`` as one where that id is a linked
    GPU event's (its launch). Elsewhere ``External id`` links a runtime call
    to the op that ran it and nothing is changed.

    Args:
        df: the event frame (``cat`` and ``name`` as symbol ids into
            ``symbols``; ``stream``, ``correlation``, ``external_id``, ``tid``
            columns, -1 where absent).
        symbols: the symbol table's list of strings.
    """
    import pandas as pd

    need = ("cat", "stream", "correlation", "external_id", "tid")
    if df.empty or any(c not in df.columns for c in need):
        return 0
    cats = df["cat"].to_numpy()
    gpu = np.isin(cats, [i for i, s in enumerate(symbols) if s in _GPU_WORK])
    stream = df["stream"].to_numpy()
    if not gpu.any() or (stream[gpu] >= 0).any():
        return 0
    ext = df["external_id"].to_numpy().astype(np.int64)
    corr = df["correlation"].to_numpy().astype(np.int64)
    tid = pd.to_numeric(df["tid"], errors="coerce").to_numpy(dtype=float)
    rows = gpu & (ext >= 0) & (corr < 0) & np.isfinite(tid) & (tid >= 0)
    if not rows.any():
        return 0
    new_stream = stream.astype(np.int64)
    new_stream[rows] = tid[rows].astype(np.int64)
    runtime = np.isin(cats, [i for i, s in enumerate(symbols) if s in _RUNTIME])
    launch = runtime & (corr < 0) & np.isin(ext, ext[rows])
    corr = corr.copy()
    corr[rows | launch] = ext[rows | launch]
    df["stream"] = new_stream
    df["correlation"] = corr
    return int(rows.sum())


def correlation_to_index(df, table):
    """HTA's ``transform_correlation_to_index(df, table)`` (``index_correlation``:
    the row of the event each kernel launch or kernel links to), run on an
    ``int64`` copy of ``correlation`` so that the row indices HTA writes fit;
    ``correlation`` then gets back the dtype HTA's downcast gave it, so the
    frame is the one HTA's parser returns where HTA does not fail.

    Args:
        df: HTA's event frame of one trace (after ``_compress_df``).
        table: its ``TraceSymbolTable``.

    GPU work written without stream and correlation is linked by its
    ``External id`` first (:func:`link_by_external_id`; ``df.attrs``
    [:data:`EXTERNAL_ID_LINKS`] says how many events). Ids shared by several
    events of one side are made one-to-one first
    (:func:`distinct_correlations`), in the frame's ``correlation`` too, so
    that HTA's merges on it (here and in its analyses) stay linear;
    ``df.attrs`` [:data:`SHARED_CORRELATIONS`] says how many rows had a
    shared id.

    Returns:
        The frame with ``index_correlation`` (HTA returns the same object).

    Raises:
        Exception: whatever HTA raises.
    """
    from hta.common.trace import transform_correlation_to_index

    if "correlation" not in df.columns:
        return transform_correlation_to_index(df, table)
    linked = link_by_external_id(df, table.get_sym_table())
    dtype = df["correlation"].dtype
    corr = df["correlation"].to_numpy().astype(np.int64)
    gpu = df["stream"].to_numpy() >= 0 if "stream" in df.columns else np.zeros(len(df), dtype=bool)
    symbols = table.get_sym_table()
    launch_ids = [i for i, name in enumerate(symbols) if LAUNCH_CALL.search(str(name))]
    launches = df["name"].isin(launch_ids).to_numpy() & ~gpu if "name" in df.columns else np.zeros(len(df), bool)
    joined, shared = distinct_correlations(corr, gpu, launches, df["ts"].to_numpy())
    df["correlation"] = joined
    df = transform_correlation_to_index(df, table)
    if linked:
        df.attrs[EXTERNAL_ID_LINKS] = linked
    if shared:
        df.attrs[SHARED_CORRELATIONS] = shared
    elif dtype.kind == "i":
        df["correlation"] = df["correlation"].astype(dtype)
    return df


def drop_enclosing_steps(df, table):
    """``df`` without the ``ProfilerStep`` annotations that enclose another
    one on the same host thread (it starts at or before the other's start
    and ends at or after its end): the steps are the inner ones. Run before
    HTA numbers iterations.

    Args:
        df: HTA's event frame of one trace (``name`` as symbol ids; ``ts``,
            ``dur`` in µs; ``pid``, ``tid``).
        table: its ``TraceSymbolTable``.

    Returns:
        ``(frame, how many annotations were dropped)``; the frame is ``df``
        itself when none was.
    """
    step_ids = table.get_profiler_step_ids()
    if not step_ids or "name" not in df.columns or "dur" not in df.columns:
        return df, 0
    steps = df[df["name"].isin(step_ids) & (df["stream"] < 0 if "stream" in df.columns else True)]
    if len(steps) < 2:
        return df, 0
    keys = [c for c in ("pid", "tid") if c in steps.columns]
    ordered = steps.assign(_end=steps["ts"] + steps["dur"]).sort_values(keys + ["ts", "_end"],
                                                                          ascending=[True] * (len(keys) + 1) + [False])
    same = np.ones(len(ordered) - 1, dtype=bool)
    for k in keys:
        v = ordered[k].to_numpy()
        same &= v[1:] == v[:-1]
    ts, end = ordered["ts"].to_numpy(), ordered["_end"].to_numpy()
    outer = np.zeros(len(ordered), dtype=bool)
    outer[:-1] = same & (ts[1:] >= ts[:-1]) & (end[1:] <= end[:-1])
    if not outer.any():
        return df, 0
    return df.drop(index=ordered.index[outer]), int(outer.sum())
