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


def measure(spec, cache: Optional[Cache]) -> AnalysisResult:
    """The metrics of the run ``spec`` (a :class:`~hta_report.load.spec.RunSpec`)
    describes, computed by its engine (``spec.engine``, see the module doc).

    Args:
        spec: the run: its files and options, its engine and Ray address.
        cache: the parse cache (``ray``: on storage every worker reads), or None.

    Raises:
        hta_report.errors.InputError: an unknown engine, Ray not installed,
            two files claiming one rank.
        hta_report.errors.TraceError: no trace can be read or analyzed.
    """
    from ..errors import InputError

    if spec.engine == "local":
        from . import local

        return local.measure(spec, cache)
    if spec.engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InputError("--engine ray needs Ray, which is not installed: pip install \"ray>=2.10\"")
        from . import ray_engine

        return ray_engine.measure(spec, cache)
    raise InputError(f"unknown engine {spec.engine!r}; choose one of {', '.join(ENGINES)}")
