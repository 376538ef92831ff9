"""``manifest.json``: what was collected, how, and where (written by rank 0)."""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from .. import __version__

MANIFEST_NAME = "manifest.json"


def utc_now_iso() -> str:
    """The current time as ISO 8601 UTC with a ``Z`` suffix, to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_manifest(*, start_time: str, schedule: Dict[str, int], profiler: Dict[str, Any],
                   world_size: int, devices: Iterable[str], device: str, host: str,
                   trace_files: Iterable[str], steps_run: int,
                   run: Optional[Dict[str, Any]] = None,
                   argv: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """The manifest as a JSON-ready dict.

    Args:
        start_time: ISO 8601 UTC time the profiler started.
        schedule: ``wait``, ``warmup``, ``active``, ``repeat`` (in profiler steps).
        profiler: profiler options (``record_shapes``, ``with_stack``, ...).
        world_size: number of ranks.
        devices: device names (see :func:`environment.device_names`).
        device: ``cpu`` or ``cuda``.
        host: host name of the writing rank.
        trace_files: trace file names relative to the manifest's directory.
        steps_run: profiler steps taken on the writing rank.
        run: what ran: ``{"mode": "workload", "workload": ..., ...}`` or a script.
        argv: the command line; defaults to ``sys.argv``.
    """
    import importlib

    try:
        torch_version = importlib.import_module("torch").__version__
    except ImportError:
        torch_version = None
    argv = list(sys.argv if argv is None else argv)
    return {
        "tool": "hta-report collect",
        "hta_report_version": __version__,
        "command_line": argv,
        "start_time": start_time,
        "end_time": utc_now_iso(),
        "host_name": host,
        "torch_version": torch_version,
        "python_version": sys.version.split()[0],
        "device": device,
        "device_names": list(devices),
        "world_size": world_size,
        "schedule": dict(schedule),
        "profiler": dict(profiler),
        "steps_run": steps_run,
        "run": run or {"mode": "api"},
        "trace_files": sorted(trace_files),
    }


def write_manifest(out_dir: Path, manifest: Dict[str, Any]) -> Path:
    """Write ``manifest.json`` into ``out_dir`` atomically (temporary file, then rename).

    Raises:
        OSError: the directory cannot be written.
    """
    path = Path(out_dir) / MANIFEST_NAME
    tmp = path.with_name(f".{MANIFEST_NAME}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
