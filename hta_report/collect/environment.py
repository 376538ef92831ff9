"""Where collection runs: PyTorch availability, ranks under torchrun, devices.

Nothing here imports torch at module level; :func:`require_torch` does it on demand.
"""
from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from typing import Any, List, Optional

from ..errors import CollectError

TORCH_MISSING = "PyTorch is not installed: pip install torch"

#: ``KINETO_LOG_LEVEL`` above libkineto's highest level (``USDT`` = 5 in
#: libkineto/include/ILoggerObserver.h): libkineto prints nothing on stderr.
KINETO_SILENT = "6"


def quiet_kineto() -> None:
    """Keep libkineto's own stderr lines (``USDT:... profiler_start``) out of a
    quiet run: set ``KINETO_LOG_LEVEL`` above its highest level, unless the
    user set it. libkineto reads it once, when the profiler first starts in
    the process (libkineto/src/init.cpp), so call this before that."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_SILENT)


def require_torch() -> Any:
    """Import and return the ``torch`` module.

    Raises:
        CollectError: PyTorch is not installed.
    """
    try:
        import torch
    except ImportError as exc:  # also raised when sys.modules["torch"] is None
        raise CollectError(TORCH_MISSING) from exc
    return torch


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a torchrun job, read from the environment.

    Attributes:
        rank: global rank (``RANK``), 0 when not launched by torchrun.
        local_rank: rank on this host (``LOCAL_RANK``).
        world_size: number of processes (``WORLD_SIZE``), 1 when not under torchrun.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def distributed(self) -> bool:
        """True when launched by torchrun (or anything setting RANK/WORLD_SIZE) with more than one process."""
        return self.world_size > 1


def rank_info() -> RankInfo:
    """Read ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` as torchrun sets them.

    Raises:
        CollectError: one of them is set but is not a non-negative integer.
    """
    rank, local, world = _env_int("RANK"), _env_int("LOCAL_RANK"), _env_int("WORLD_SIZE")
    rank = 0 if rank is None else rank
    return RankInfo(rank=rank, local_rank=rank if local is None else local,
                    world_size=max(1, 1 if world is None else world))


def _env_int(key: str) -> Optional[int]:
    """The environment variable ``key`` as a non-negative integer; None when unset or empty.

    Raises:
        CollectError: it is set but is not a non-negative integer.
    """
    raw = os.environ.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise CollectError(f"environment variable {key}={raw!r} is not an integer") from None
    if value < 0:
        raise CollectError(f"environment variable {key}={raw!r} is negative")
    return value


def current_rank() -> int:
    """The global rank: ``RANK`` if set, else ``torch.distributed``'s rank if initialized, else 0."""
    if os.environ.get("RANK", "").isdigit():
        return int(os.environ["RANK"])
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return 0


def resolve_device(requested: str) -> str:
    """Turn ``auto|cpu|cuda`` into ``cpu`` or ``cuda``.

    Args:
        requested: ``auto`` picks ``cuda`` when ``torch.cuda.is_available()``.

    Raises:
        CollectError: ``cuda`` was requested but CUDA is not available, or the
            value is unknown, or PyTorch is missing.
    """
    torch = require_torch()
    if requested not in ("auto", "cpu", "cuda"):
        raise CollectError(f"unknown device {requested!r} (choose auto, cpu or cuda)")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise CollectError("--device cuda requested but CUDA is not available to this PyTorch "
                           f"({torch.__version__})")
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else :func:`platform.processor`, else ``"cpu"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def device_names(device: str) -> List[str]:
    """Human-readable names of the devices in use.

    Args:
        device: ``cpu`` or ``cuda``; for ``cuda`` every visible GPU is listed.
    """
    names = [f"cpu: {cpu_name()} ({os.cpu_count()} logical cores)"]
    if device == "cuda":
        torch = require_torch()
        for index in range(torch.cuda.device_count()):
            names.append(f"cuda:{index}: {torch.cuda.get_device_name(index)}")
    return names


def host_name() -> str:
    """This machine's host name."""
    return socket.gethostname()
