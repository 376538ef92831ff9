"""The one place that writes output files: atomically, never half a report."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OutputError


def write_atomic(path: os.PathLike | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same
    directory, renamed into place; an existing file is untouched on failure and
    no temporary file is left behind.

    Raises:
        OutputError: the directory is missing or not writable.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError("cannot write: the directory does not exist", path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror or exc}", path) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write: {exc.strerror or exc}", path) from exc
        raise
    return path
