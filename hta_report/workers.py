"""Using the machine's cores: the one module that creates worker processes.

Every process pool of hta-report (parsing files, parsing the pieces of one
large file, per-rank analyses) comes from :func:`pool`: forked workers, which
see this process's memory as it was at the fork without copying or pickling
it. What the workers of a pool read is handed over once, as the pool's
``state`` (:func:`state` in a worker), not through a module global of the
caller. ``HTA_REPORT_WORKERS=1`` keeps everything in one process.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator, List, Optional

logger = logging.getLogger(__name__)

#: In a worker of :func:`pool`: the ``state`` its pool was created with.
_STATE: Any = None
#: Work for this process while its workers work (:func:`meanwhile`, :func:`idle`).
_IDLE: List[Callable[[], None]] = []


def count() -> int:
    """Worker processes to use: ``HTA_REPORT_WORKERS``, else the CPU cores available."""
    env = os.environ.get("HTA_REPORT_WORKERS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


#: The environment variable that caps the memory of the ranks analyzed at once
#: in worker processes (a size: ``8GB``, ``1.5GiB``; ``0``: no cap).
MAX_MEMORY_ENV = "HTA_REPORT_MAX_MEMORY"


def memory_budget() -> Optional[int]:
    """Bytes that the ranks analyzed at once in worker processes may hold
    together, by the estimate of :func:`hta_report.engines.per_rank.rank_memory_bytes`:
    ``HTA_REPORT_MAX_MEMORY`` (a size, see :func:`hta_report.sizes.parse_size`;
    ``0``: no cap), else the memory available when it is read (``MemAvailable``
    of ``/proc/meminfo``), else (not Linux) None: no cap. A rank is always
    analyzed when none is, whatever its estimate.

    Raises:
        ValueError: ``HTA_REPORT_MAX_MEMORY`` is set to something that is not a size.
    """
    from .sizes import parse_size

    env = os.environ.get(MAX_MEMORY_ENV, "").strip()
    if env:
        return None if env == "0" else parse_size(env)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def can_fork() -> bool:
    """True when this process may fork worker processes: the platform has
    ``fork`` and this is not a daemonic multiprocessing worker (which may not
    have children)."""
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


@contextlib.contextmanager
def meanwhile(*tasks: Callable[[], None]) -> Iterator[None]:
    """Within this block, ``tasks`` run in this process, once each, the first
    time it hands work to worker processes and waits for them (:func:`idle`);
    those that have not run by the end are dropped. For what the run will
    need later and this process alone can prepare (e.g. importing and
    warming up matplotlib before the charts are drawn in workers forked from
    it), at no cost while a worker runs on each core, instead of
    on the critical path after the workers are done."""
    _IDLE.extend(tasks)
    try:
        yield
    finally:
        for task in tasks:
            if task in _IDLE:
                _IDLE.remove(task)


def idle() -> None:
    """Run the tasks of :func:`meanwhile` (each once; called by the callers
    of :func:`pool` once their work is submitted, before they wait for it). A
    task that fails is logged and dropped: it prepares, the run does not
    depend on it."""
    while _IDLE:
        task = _IDLE.pop(0)
        try:
            task()
        except Exception:  # noqa: BLE001 - the run goes on without it
            logger.debug("a task run while waiting for the workers failed", exc_info=True)


def _set_state(value: Any) -> None:
    global _STATE
    _STATE = value


def state() -> Any:
    """In a worker of :func:`pool`: the ``state`` the pool was created with
    (None elsewhere)."""
    return _STATE


class _Pool(ProcessPoolExecutor):
    """A ``ProcessPoolExecutor`` that, left by an exception (Ctrl-C, an input
    error, a caller that stops reading its results), stops its workers at once
    instead of waiting for the calls they are running: their results are no
    longer wanted, and a rank of a large trace can take tens of seconds."""

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return super().__exit__(exc_type, exc, tb)
        stop(self)
        return False


def stop(executor: ProcessPoolExecutor) -> None:
    """Cancel ``executor``'s pending calls and kill its worker processes
    (their running calls are lost), then shut it down."""
    terminate = getattr(executor, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()
    executor.shutdown(wait=True, cancel_futures=True)


def pool(n: int, state: Any = None) -> ProcessPoolExecutor:
    """A pool of ``n`` forked worker processes; leaving it through an
    exception stops its workers at once (:class:`_Pool`).

    Args:
        n: number of workers (at least 1).
        state: what the workers read (e.g. the parsed traces); each worker
            gets it through the fork, without pickling, and reads it with
            :func:`state`. Submitted calls and their results are pickled.

    Raises:
        RuntimeError: this process cannot fork (see :func:`can_fork`); callers
            check first and run the work here instead.
    """
    if not can_fork():
        raise RuntimeError("this process cannot fork worker processes")
    return _Pool(max_workers=max(1, n), mp_context=mp.get_context("fork"), initializer=_set_state,
                 initargs=(state,))


def release_free_memory() -> None:
    """Collect garbage, then give the heap's free pages back to the OS
    (:func:`trim_heap`). Pages freed by the parse otherwise stay resident
    and, after a fork, every child writing into them holds a private copy; a
    worker that idles while another runs would keep its temporaries."""
    gc.collect()
    trim_heap()


#: A rank (or a file being parsed) of this many events or more, about 100 MB
#: of JSON, hands the heap's free pages back between the steps that build
#: and analyze it (:func:`trim_heap`, about 1.3 ms a call there). Smaller
#: ranks skip the trims: their temporaries are a few MB each.
TRIM_MIN_EVENTS = 250_000


def trim_heap() -> None:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim(0)``; a
    no-op elsewhere), without collecting garbage.

    Freed numpy and pandas buffers mostly stay resident: glibc returns only
    the top of the heap, and the holes that a step's temporaries leave
    between live blocks are too small for the next step's arrays, so a
    process's resident memory grows by each step's peak. On the 286 MB
    benchmark rank, trimming after each of its 24 analysis steps took
    32 ms in all and lowered the resident memory between steps from about
    525 to 370 MB; after each column of the parsed frame, 39 ms, and the
    frame's build peaked at 433 MB instead of 571 MB. Setting
    ``MALLOC_MMAP_THRESHOLD_`` instead cost 2 s of system time in page
    faults. See :data:`TRIM_MIN_EVENTS` for where the callers trim."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (looked up once: ``find_library`` reads the loader cache)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


@contextlib.contextmanager
def fork_friendly() -> Iterator[None]:
    """Prepare this process for forking workers that only read its data:
    collect garbage, move every object to the collector's permanent
    generation (``gc.freeze``: the children's collections then leave their
    pages alone instead of writing into, and so copying, each one) and
    release free heap pages; unfreeze on exit."""
    release_free_memory()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
