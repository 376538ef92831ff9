"""Ending a process without the interpreter's teardown, once its work is written.

Two kinds of process use it:

- ``analyze`` and ``compare``, whose reports are closed and renamed into place
  before the command returns: the interpreter's teardown (freeing every object,
  unloading pandas, pyarrow, matplotlib and HTA) costs time and frees nothing
  the OS would not (mypy does the same, ``mypy.util.hard_exit``).
- a rank of ``collect --workload`` under torchrun, whose traces and manifest
  are written and whose process group is destroyed: the C++ threads of gloo and
  the profiler can abort the teardown ("terminate called without an active
  exception", SIGABRT; pytorch/pytorch#179291 describes gloo worker threads
  crashing interpreter finalization), and torchrun then reports the whole job
  as failed although every file is in place.

Never for ``collect`` running a user's script: its ``atexit`` handlers
(loggers, writers) must run.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

_STATE = {"skip": False}


def reset() -> None:
    """Forget an earlier :func:`skip_teardown` (a new command starts)."""
    _STATE["skip"] = False


def skip_teardown() -> None:
    """Let :func:`finish` end this process with ``os._exit`` once the command returns."""
    _STATE["skip"] = True


def teardown_skipped() -> bool:
    """True after :func:`skip_teardown` (and before :func:`reset`)."""
    return _STATE["skip"]


def finish(code: int) -> NoReturn:
    """End the process with exit code ``code``: flush logging and the standard
    streams, then ``os._exit`` when :func:`skip_teardown` was called, else
    ``sys.exit`` (the normal teardown)."""
    if _STATE["skip"]:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (| head), a closed stream
                pass
        os._exit(code)
    sys.exit(code)
