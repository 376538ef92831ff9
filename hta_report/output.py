"""The one place that writes output files: atomically, never half a report."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import List, Sequence, Tuple

from .errors import OutputError


def write_atomic(path: os.PathLike | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same
    directory, renamed into place; an existing file is untouched on failure and
    no temporary file is left behind.

    Raises:
        OutputError: the directory is missing or not writable.
    """
    return write_all_atomic([(path, text)])[0]


def write_all_atomic(files: Sequence[Tuple[os.PathLike | str, str]]) -> List[Path]:
    """Write several files so that a failure leaves every one of them as it was.

    Each text goes to a temporary file beside its target first; only when all
    are written are they renamed into place. On any failure (a missing or
    unwritable directory, a full disk, an interrupt) the temporary files are
    removed and no target is touched. A report keeps the permissions of the
    file it replaces; a new one gets 0666 less the umask, as ``open()`` would
    give it. Characters that UTF-8 cannot encode
    (lone surrogates from odd file names or trace strings) are written as
    backslash escapes.

    Args:
        files: ``(path, text)`` pairs.

    Returns:
        The paths written, in order.

    Raises:
        OutputError: a directory is missing or not writable (names the file).
    """
    staged: List[Tuple[str, Path]] = []
    try:
        for path, text in files:
            path = Path(path)
            staged.append((_stage(path, text), path))
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise OutputError(f"cannot write: {exc.strerror or exc}", path) from exc
    except BaseException:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    return [path for _, path in staged]


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permission bits a report written to ``path`` gets: those of the
    file it replaces, else what ``open()`` would give a new file (0666 less the
    umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o777  # no set-id or sticky bit on a report
    except OSError:
        return 0o666 & ~_umask()


def _stage(path: Path, text: str) -> str:
    """Write ``text`` to a new temporary file beside ``path`` with the mode the
    report should have (:func:`_mode_for`); returns its name (removed again
    if writing fails)."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "its parent is not a directory" if parent.exists() else "the directory does not exist"
        raise OutputError(f"cannot write: {what}", path)
    if path.is_dir():
        raise OutputError("cannot write: it is a directory (give a file name)", path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror or exc}", path) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.chmod(tmp, _mode_for(path))
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write: {exc.strerror or exc}", path) from exc
        raise
    return tmp
