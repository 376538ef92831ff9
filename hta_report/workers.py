"""Using the machine's cores: how many worker processes, and one forked call.

``HTA_REPORT_WORKERS=1`` keeps everything in one process.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import multiprocessing as mp
import os
from typing import Any, Callable, Iterator


def count() -> int:
    """Worker processes to use: ``HTA_REPORT_WORKERS``, else the CPU cores available."""
    env = os.environ.get("HTA_REPORT_WORKERS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """True when this process may fork worker processes: the platform has
    ``fork`` and this is not a daemonic multiprocessing worker (which may not
    have children)."""
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


class Forked:
    """``fn()`` run in a forked child (which sees this process's memory as it
    was, without copying or pickling it); :meth:`result` returns its
    (pickled) return value or raises its exception. If the child dies without
    answering, :meth:`result` runs ``fn`` here instead."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        ctx = mp.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)

        def run() -> None:
            try:
                out = (True, fn())
            except BaseException as exc:  # sent back and raised in the parent
                out = (False, exc)
            try:
                send.send(out)
            finally:
                send.close()

        self._proc = ctx.Process(target=run, daemon=True)
        self._proc.start()
        send.close()

    def result(self) -> Any:
        try:
            ok, value = self._recv.recv()
        except (EOFError, OSError):
            ok, value = True, None
            self._proc.join()
            return self.fn()
        finally:
            self._recv.close()
        self._proc.join()
        if not ok:
            raise value
        return value


def release_free_memory() -> None:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``; a
    no-op elsewhere). Pages freed by the parse otherwise stay resident and,
    after a fork, every child writing into them holds a private copy."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


@contextlib.contextmanager
def fork_friendly() -> Iterator[None]:
    """Prepare this process for forking workers that only read its data:
    collect garbage, move every object to the collector's permanent
    generation (``gc.freeze``: the children's collections then leave their
    pages alone instead of writing into, and so copying, each one) and
    release free heap pages; unfreeze on exit."""
    gc.collect()
    gc.freeze()
    release_free_memory()
    try:
        yield
    finally:
        gc.unfreeze()
