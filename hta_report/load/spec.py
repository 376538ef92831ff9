"""One run, described once: which files are read and how.

:func:`describe_run` finds the trace files once (:mod:`.discovery`: the
folders listed, the windows of one process set aside) and resolves the
options; the frozen :class:`RunSpec` it returns then travels whole through
the pipeline (``api`` -> ``engines`` -> ``load``), and is the input of the
result cache's key (:meth:`RunSpec.key_fields`). A new load option is a new
field here and the line that reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..files import Location
from ..model import WorkerWindows
from .discovery import Inputs, find_trace_files, input_dir, input_label, split_windows
from .split import split_merged
from .validation import DEFAULT_MAX_TRACE_BYTES


@dataclass(frozen=True)
class RunSpec:
    """The traces of one run and the options they are read with.

    Attributes:
        label: the input as the user named it (``inventory.input_dir``).
        folder: the run's folder, where ``manifest.json`` is read
            (:func:`~.discovery.input_dir`).
        files: the trace files analyzed, sorted (local paths or URLs).
        windows: processes that wrote several profiling windows: only the
            latest of each is in ``files`` (:func:`~.discovery.split_windows`).
        recursive: subdirectories were searched.
        include_last_step: keep the last ``ProfilerStep`` (None: HTA's
            default unless a rank has fewer than two steps).
        max_trace_bytes: a trace decompressing past this many bytes is refused.
        loader: ``"fast"`` or ``"hta"`` (:func:`~.parse.resolve_loader`).
        engine: where the per-rank work runs (``"local"`` or ``"ray"``); the
            result does not depend on it.
        ray_address: the Ray cluster (``engine="ray"``; None: ``RAY_ADDRESS``
            or a local instance).
        merged: one line per file that held several ranks and was split into
            one file per rank (:func:`~.split.split_merged`), and per file
            not taken for a profiling window because its head names no rank
            (:func:`~.discovery.split_windows`), for the warnings.
    """

    label: str
    folder: Location
    files: Tuple[Location, ...]
    windows: Tuple[WorkerWindows, ...] = field(default_factory=tuple)
    recursive: bool = False
    include_last_step: Optional[bool] = None
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    loader: str = "fast"
    engine: str = "local"
    ray_address: Optional[str] = None
    merged: Tuple[str, ...] = field(default_factory=tuple)

    @property
    def read_files(self) -> List[Location]:
        """Every file this run reads or names: the traces analyzed, the
        windows set aside, and ``manifest.json`` (no output may replace one)."""
        others = [Path(o) for w in self.windows for o in w.others]
        return list(self.files) + others + [self.folder / "manifest.json"]

    def key_fields(self) -> Dict[str, Any]:
        """What the result depends on besides the files' contents and the
        rule configuration: the options and the files' names (the result
        cache's key, :meth:`hta_report.cache.ResultCache.key`)."""
        return {"loader": self.loader, "dir": str(self.folder), "recursive": self.recursive,
                "include_last_step": self.include_last_step, "max_trace_bytes": int(self.max_trace_bytes),
                "windows": [[w.worker, w.analyzed, list(w.others)] for w in self.windows]}


def describe_run(inputs: Inputs, recursive: bool = False, include_last_step: Optional[bool] = None,
                 max_trace_bytes: Optional[int] = None, loader: Optional[str] = None, engine: str = "local",
                 ray_address: Optional[str] = None) -> RunSpec:
    """Find the trace files of ``inputs`` once and resolve the options.

    Args:
        inputs: a directory, a trace file, or a list of either; each a local
            path or a URL (see :func:`~.discovery.find_trace_files`).
        recursive, include_last_step, engine, ray_address: see :class:`RunSpec`.
        max_trace_bytes: None: :data:`~.validation.DEFAULT_MAX_TRACE_BYTES` (4 GiB).
        loader: None: ``HTA_REPORT_LOADER``, else ``"fast"``.

    Raises:
        hta_report.errors.InputError: as :func:`~.discovery.find_trace_files`
            (a missing path, no trace files, a folder of several runs).
    """
    from .parse import resolve_loader

    found = find_trace_files(inputs, recursive)
    notes: List[str] = []
    files, windows = split_windows(found, notes)
    files, merged = split_merged(files)
    merged = notes + list(merged)
    return RunSpec(label=input_label(inputs), folder=input_dir(inputs), files=tuple(files),
                   windows=tuple(windows), recursive=bool(recursive), include_last_step=include_last_step,
                   max_trace_bytes=int(max_trace_bytes or DEFAULT_MAX_TRACE_BYTES), loader=resolve_loader(loader),
                   engine=engine, ray_address=ray_address, merged=tuple(merged))


def as_spec(inputs, **options) -> RunSpec:
    """``inputs`` itself when it is a :class:`RunSpec`, else :func:`describe_run` of it."""
    return inputs if isinstance(inputs, RunSpec) else describe_run(inputs, **options)


