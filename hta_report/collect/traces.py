"""Writing one profiler cycle to ``rank-<r>.<host>_<pid>.<cycle>.pt.trace.json.gz``, atomically.

``torch.profiler.tensorboard_trace_handler`` gzips straight into the final path,
so an interrupted run can leave a truncated ``.gz`` that looks like a trace.
Here the trace is exported and compressed under hidden temporary names in the
same directory, then renamed into place with :func:`os.replace`.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, BinaryIO

TRACE_SUFFIX = ".pt.trace.json.gz"


def trace_file_name(rank: int, host: str, pid: int, cycle: int) -> str:
    """``rank-<rank>.<host>_<pid>.<cycle>.pt.trace.json.gz``.

    Args:
        rank: global rank of the writing process.
        host: host name (dots are replaced by ``-`` so the name stays parseable).
        pid: process id.
        cycle: 1-based index of the profiler cycle (``repeat`` counts cycles).
    """
    safe_host = host.replace(".", "-").replace(os.sep, "-") or "host"
    return f"rank-{rank}.{safe_host}_{pid}.{cycle}{TRACE_SUFFIX}"


def write_trace_atomically(prof: Any, final_path: Path) -> Path:
    """Export ``prof``'s last cycle as gzipped Chrome JSON at ``final_path``.

    The file appears complete or not at all: the JSON goes to a hidden
    ``.<name>.json.tmp``, is gzipped into ``.<name>.gz.tmp`` and renamed.
    Kineto records the export path as ``traceName``; it is rewritten to the
    final path while compressing.

    Args:
        prof: a ``torch.profiler.profile`` inside its ``on_trace_ready`` callback.
        final_path: where the ``.pt.trace.json.gz`` file should end up.

    Returns:
        ``final_path``.

    Raises:
        OSError: the directory cannot be written (temporary files are removed).
    """
    final_path = Path(final_path)
    raw_tmp = final_path.with_name(f".{final_path.name}.json.tmp")
    gz_tmp = final_path.with_name(f".{final_path.name}.tmp")
    try:
        prof.export_chrome_trace(str(raw_tmp))
        with open(raw_tmp, "rb") as src, gzip.open(gz_tmp, "wb", compresslevel=6) as dst:
            _copy_replacing(src, dst, _json_text(raw_tmp), _json_text(final_path))
        os.replace(gz_tmp, final_path)
    finally:
        for tmp in (raw_tmp, gz_tmp):
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
    return final_path


def _json_text(path: Path) -> bytes:
    return json.dumps(str(path))[1:-1].encode("utf-8")


def _copy_replacing(src: BinaryIO, dst: BinaryIO, old: bytes, new: bytes,
                    chunk: int = 1 << 20) -> None:
    """Copy ``src`` to ``dst`` replacing every ``old`` by ``new``, in bounded memory."""
    keep = len(old) - 1
    carry = b""
    while True:
        block = src.read(chunk)
        if not block:
            dst.write(carry)
            return
        data = (carry + block).replace(old, new)
        # hold back a tail that could be the start of a match split across blocks
        cut = max(len(data) - keep, 0)
        dst.write(data[:cut])
        carry = data[cut:]
