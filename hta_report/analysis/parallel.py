"""Every rank's analyses, side by side in worker processes.

:func:`analyze_ranks` runs each rank's two parts (:func:`~.rank.own_part` and
:func:`~.rank.hta_part`) in forked workers (:func:`hta_report.workers.pool`),
one per core (``HTA_REPORT_WORKERS``), largest rank first, and joins them;
with one worker, where ``fork`` is unavailable, or on small traces it runs
them here one after the other (:func:`~.rank.analyze_rank`). Both give the
same result (``tests/test_parallel.py``).
"""
from __future__ import annotations

import time
from concurrent.futures.process import BrokenProcessPool
from typing import Dict, List, Literal, Optional, Tuple, Union

from .. import progress, workers
from ..errors import TraceError, plural
from ..model import RankResult, TraceFileInfo
from ..load.traces import LoadedTraces
from .rank import HtaPart, OwnPart, analyze_rank, hta_part, join_parts, own_part

#: Below this many events in all, the ranks are analyzed in this process: a
#: pool of forked workers costs about 40 ms, more than it saves on such traces.
PARALLEL_MIN_EVENTS = 2000

#: A lone rank with at least this many events (about 100 MB of JSON) has its
#: two parts analyzed one after the other in this process, not side by side
#: in two workers, whose temporaries add up: on the 286 MB fractional
#: benchmark rank (736,679 events) the peak memory of the process tree was
#: 0.84-0.87 GB side by side (2.9-3.0 x the JSON) and 0.57 GB one after the
#: other (2.0 x), for about 1 s more (``bench/load.py``).
SEQUENTIAL_MIN_EVENTS = 250_000

#: A worker's part of a rank (:func:`_run_part`): ``("ok", part, seconds)``, the
#: part an :class:`~.rank.OwnPart` for an "own" job and an :class:`~.rank.HtaPart`
#: or None for an "hta" one, or ``("error", (message, step), seconds)``.
Outcome = Union[Tuple[Literal["ok"], Union[OwnPart, HtaPart, None], float],
                Tuple[Literal["error"], Tuple[str, Optional[str]], float]]


def analyze_ranks(loaded: LoadedTraces, infos: Optional[List[TraceFileInfo]] = None,
                  n_workers: Optional[int] = None) -> List[Union[RankResult, TraceError]]:
    """Analyze ``infos`` (default: every file of ``loaded``), each rank's two
    parts side by side in up to ``n_workers`` forked processes (default:
    :func:`hta_report.workers.count`; in this process when that is 1, where
    ``fork`` is unavailable, below :data:`PARALLEL_MIN_EVENTS` events, or for
    one rank of :data:`SEQUENTIAL_MIN_EVENTS` events or more, whose parts then
    run one after the other to bound the memory).

    Returns:
        Per file, in order, its :class:`~hta_report.model.RankResult` or the
        :class:`~hta_report.errors.TraceError` of the failing step.
    """
    infos = list(loaded.files if infos is None else infos)
    n = workers.count() if n_workers is None else n_workers
    events = sum(len(loaded.frame(info.rank)) for info in infos)
    if n <= 1 or not workers.can_fork() or events < PARALLEL_MIN_EVENTS:
        return [_here(loaded, info) for info in infos]
    if len(infos) == 1 and events >= SEQUENTIAL_MIN_EVENTS:
        workers.release_free_memory()  # the parse's garbage, before the analyses' peak
        return [_here(loaded, infos[0])]
    return _in_workers(loaded, infos, n)


def _here(loaded: LoadedTraces, info: TraceFileInfo) -> Union[RankResult, TraceError]:
    try:
        with progress.current().stage(f"analyze rank {info.rank}"):
            return analyze_rank(loaded, info)
    except TraceError as exc:
        return exc


def _run_part(kind: str, index: int, release: bool) -> Outcome:
    """One part of one rank, in a worker (the pool's state is the
    ``LoadedTraces``): ``("ok", part, seconds)`` or ``("error", (message,
    step), seconds)`` (a TraceError is rebuilt in the parent: its pickled
    form would repeat the path). With ``release``, the worker's garbage is
    collected and its free heap pages handed back afterwards: it may idle now
    while another worker runs, and would otherwise keep its temporaries (peak
    memory of the process tree)."""
    loaded = workers.state()
    info = loaded.files[index]
    t0 = time.perf_counter()
    try:
        part = own_part(loaded, info) if kind == "own" else hta_part(loaded, info)
    except TraceError as exc:
        return "error", (exc.message, exc.step), time.perf_counter() - t0
    finally:
        if release:
            workers.release_free_memory()
    return "ok", part, time.perf_counter() - t0


def _in_workers(loaded: LoadedTraces, infos: List[TraceFileInfo], n: int) -> List[Union[RankResult, TraceError]]:
    order = sorted(range(len(infos)), key=lambda k: -len(loaded.frame(infos[k].rank)))  # largest first
    jobs = [(kind, k) for k in order for kind in ("own", "hta")]
    outcomes: Dict[Tuple[str, int], Outcome] = {}
    size = min(n, len(jobs))
    stages = progress.current()
    with stages.stage(f"analyze {plural(len(infos), 'rank')} in {size} processes"), \
            workers.fork_friendly(), workers.pool(size, state=loaded) as pool:
        # the pool takes jobs in this order: a worker's last job is among the last ``size``
        futures = {job: pool.submit(_run_part, job[0], loaded.files.index(infos[job[1]]), i >= len(jobs) - size)
                   for i, job in enumerate(jobs)}
        workers.idle()
        for done, job in enumerate(jobs, 1):
            try:
                outcomes[job] = futures[job].result()
            except BrokenProcessPool:  # a worker died (e.g. out of memory): the rest runs here
                break
            what = "our analyses" if job[0] == "own" else "HTA's analyses"
            stages.record(f"analyze rank {infos[job[1]].rank}: {what} (worker)", outcomes[job][2])
            stages.update(f"analyzed {done}/{len(jobs)} parts of {plural(len(infos), 'rank')}")
    results: List[Union[RankResult, TraceError]] = []
    for k, info in enumerate(infos):
        own, hta = outcomes.get(("own", k)), outcomes.get(("hta", k))
        results.append(_here(loaded, info) if own is None or hta is None else _join(info, own, hta))
    return results


def _join(info: TraceFileInfo, own: Outcome, hta: Outcome) -> Union[RankResult, TraceError]:
    """Join a rank's two outcomes; when both parts failed, the error of the
    step that comes first in :func:`~.rank.analyze_rank` is the rank's."""
    errors = [outcome[1] for outcome in (own, hta) if outcome[0] == "error"]
    if errors:
        message, step = errors[0]
        return TraceError(message, info.path, step=step)
    own_value, hta_value = own[1], hta[1]
    # what the "own" and "hta" jobs hand back (see Outcome)
    assert isinstance(own_value, OwnPart) and (hta_value is None or isinstance(hta_value, HtaPart))
    try:
        return join_parts(own_value, hta_value, info)
    except TraceError as exc:
        return exc
