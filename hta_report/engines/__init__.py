"""Where the per-rank work runs: the engine seam of the pipeline.

An engine turns a trace directory into an :class:`~hta_report.model.AnalysisResult`
without advice (``api.analyze`` adds it):

- ``local`` (the default): this machine (:mod:`.local`). With several files,
  each is parsed and its rank analyzed in the same forked worker process
  (:mod:`.per_rank`); a lone file is loaded here
  (:func:`hta_report.load.load_traces`, its pieces parsed side by side) and
  analyzed by :func:`hta_report.analysis.analyze_loaded`.
- ``ray``: a Ray cluster (:mod:`.ray_engine`). Each rank is a task that reads
  its own trace (a path every worker can read, or a URL), parses it and runs
  the per-rank analyses on the worker; the driver keeps only small summaries
  and each rank's result, and runs the cross-rank part on them
  (:func:`hta_report.analysis.assemble`).

Both give the same result (``tests/test_engines.py``).
"""
from __future__ import annotations

from typing import Optional

from ..cache import Cache
from ..model import AnalysisResult

#: The engines ``--engine`` takes.
ENGINES = ("local", "ray")


def measure(engine: str, trace_dir, folder, recursive: bool, include_last_step: Optional[bool],
            max_trace_bytes: int, loader: str, cache: Optional[Cache],
            ray_address: Optional[str] = None) -> AnalysisResult:
    """The metrics of the traces ``trace_dir`` names, computed by ``engine`` (see the module doc).

    Args:
        engine: ``"local"`` or ``"ray"``.
        trace_dir: a directory, a trace file or a list of either, each a
            local path or a URL (see :func:`hta_report.load.discovery.find_trace_files`).
        folder: the run's folder (:func:`hta_report.load.discovery.input_dir`):
            the inventory's, where ``manifest.json`` is read.
        recursive, include_last_step, max_trace_bytes, loader: as
            :func:`hta_report.api.analyze`.
        cache: the parse cache's directory (``ray``: on storage every worker reads).
        ray_address: the cluster to connect to (``ray``; default ``RAY_ADDRESS``,
            else a Ray instance started on this machine).

    Raises:
        hta_report.errors.InputError: an unknown engine, Ray not installed, a
            missing or empty directory, two files claiming one rank.
        hta_report.errors.TraceError: no trace can be read or analyzed.
    """
    from ..errors import InputError

    if engine == "local":
        from . import local

        return local.measure(trace_dir, folder, recursive, include_last_step, max_trace_bytes, loader, cache)
    if engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InputError("--engine ray needs Ray, which is not installed: pip install \"hta-report[ray]\"")
        from . import ray_engine

        return ray_engine.measure(trace_dir, folder, recursive, include_last_step, max_trace_bytes, loader, cache,
                                  ray_address)
    raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
