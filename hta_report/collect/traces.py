"""Writing one profiler cycle to ``rank-<r>.<host>_<pid>.<cycle>.pt.trace.json.gz``, atomically.

``torch.profiler.tensorboard_trace_handler`` gzips straight into the final path,
so an interrupted run can leave a truncated ``.gz`` that looks like a trace.
Here the trace is exported and compressed under hidden temporary names in the
same directory, then renamed into place with :func:`os.replace`.
"""
from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from _typeshed import SupportsRead, SupportsWrite

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
    ``.<name>.json.tmp`` (Kineto writes it as ``.<name>.json.tmp.tmp`` and
    renames it when complete), is gzipped into ``.<name>.tmp`` and renamed.
    Kineto records the export path as ``traceName``; it is rewritten to the
    final path while compressing. On any failure every temporary file is
    removed.

    Kineto does not raise when it cannot write (a full disk, the file size
    limit): it logs, and leaves its partial file. That is detected here and
    raised as the cause it most likely was (:func:`export_failure`).

    Args:
        prof: a ``torch.profiler.profile`` inside its ``on_trace_ready`` callback.
        final_path: where the ``.pt.trace.json.gz`` file should end up.

    Returns:
        ``final_path``.

    Raises:
        OSError: the trace cannot be written; ``errno`` says why (ENOSPC:
            no space left on the device, EFBIG: the file size limit, ...;
            :func:`write_error_reason` words it).
    """
    final_path = Path(final_path)
    raw_tmp = final_path.with_name(f".{final_path.name}.json.tmp")
    kineto_tmp = raw_tmp.with_name(raw_tmp.name + ".tmp")
    gz_tmp = final_path.with_name(f".{final_path.name}.tmp")
    try:
        prof.export_chrome_trace(str(raw_tmp))
        if not raw_tmp.is_file():
            raise export_failure(raw_tmp, kineto_tmp)
        with open(raw_tmp, "rb") as src, gzip.open(gz_tmp, "wb", compresslevel=6) as dst:
            _copy_replacing(src, dst, _json_text(raw_tmp), _json_text(final_path))
        os.replace(gz_tmp, final_path)
    finally:
        for tmp in (raw_tmp, kineto_tmp, gz_tmp):
            try:
                tmp.unlink()
            except OSError:  # not there, or best effort: the error that got here matters more
                pass
    return final_path


#: Free space (bytes) below which a failed write is put down to a full device.
FULL_DEVICE_BYTES = 1 << 20


def export_failure(path: Path, partial: Path) -> OSError:
    """The error for an export that left no file at ``path`` (Kineto wrote
    ``partial``, as far as it got, and gave up without raising).

    The cause is worked out from what is left: the partial file reaching the
    process's file size limit (``ulimit -f``) is EFBIG, less than
    :data:`FULL_DEVICE_BYTES` free on the device is ENOSPC; otherwise an EIO
    saying how many bytes were written.
    """
    try:
        written = partial.stat().st_size
    except OSError:
        written = 0
    limit = file_size_limit()
    if limit is not None and written >= limit:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))
    try:
        fs = os.statvfs(path.parent)
        free = (fs.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else fs.f_bavail) * fs.f_frsize
    except (OSError, AttributeError):
        free = None
    if free is not None and free < FULL_DEVICE_BYTES:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return OSError(errno.EIO, f"the profiler stopped writing the trace after {written:,} bytes", str(path))


def file_size_limit() -> Optional[int]:
    """This process's file size limit in bytes (``ulimit -f``), or None when unlimited or unknown."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def write_error_reason(exc: BaseException) -> str:
    """One line saying why a write failed, its real cause first: ``no space
    left on device``, ``file too large (the file size limit, ulimit -f, is
    204,800 bytes)``, ``disk quota exceeded``, else the system's words."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC:
        return "no space left on device"
    if code == errno.EFBIG:
        limit = file_size_limit()
        return "file too large" + (f" (the file size limit, ulimit -f, is {limit:,} bytes)" if limit else "")
    if code == getattr(errno, "EDQUOT", None):
        return "disk quota exceeded"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__


def _json_text(path: Path) -> bytes:
    return json.dumps(str(path))[1:-1].encode("utf-8")


def _copy_replacing(src: SupportsRead[bytes], dst: SupportsWrite[bytes], old: bytes, new: bytes,
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
