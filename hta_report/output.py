"""The one place that writes output files: atomically, never half a report.

What ``-o`` names decides how it is written (:func:`target_of`):

* a regular file, or a name that does not exist yet: a temporary file beside
  it, renamed over it once complete (atomic: a failure leaves it as it was);
* a symbolic link to a regular file (or to a name that does not exist yet):
  the same, beside the file the link points to; the link stays a link;
* a FIFO, a character device (``/dev/null``, a terminal) or a process's file
  descriptor (``/dev/stdout``, ``/proc/self/fd/1``): written through, as a
  shell's ``>`` would (opened for writing and written, never replaced). Such a
  write cannot be rolled back, and a FIFO blocks until a reader opens it;
* a directory, a socket or a block device: refused (:class:`OutputError`).
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import OutputError

#: Bytes of the target's name kept in its temporary file's name
#: (``.<name>.<random>.tmp``): any name legal for the target (up to 255 bytes)
#: leaves a legal temporary name.
TMP_NAME_BYTES = 64
#: Symbolic links followed from an output name before giving up (as Linux's ELOOP).
MAX_LINKS = 40
#: Bytes written to a written-through target per ``write`` call.
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Parts:
    """A text written in parts as ``make()`` makes them (a report too large to
    hold whole: the JSON of a thousand ranks); ``make`` is called once per
    write. A part that raises leaves the target as :func:`write_all_atomic`
    promises: a regular file untouched."""

    make: Callable[[], Iterable[str]]


#: What a target is given: its whole text, or its text in :class:`Parts`.
Text = Union[str, Parts]


def _parts(text: Text) -> Iterable[str]:
    return text.make() if isinstance(text, Parts) else (text,)


@dataclass(frozen=True)
class Target:
    """How one output is written (see the module docstring).

    Attributes:
        path: the name given (what errors name).
        how: ``"replace"`` (atomic, at ``real``), ``"through"`` (open
            ``path`` for writing) or ``"fd"`` (write to this process's file
            descriptor ``fd``).
        real: for ``"replace"``, the regular file (existing or not) to
            replace: ``path``, or where its links lead.
        fd: for ``"fd"``, the descriptor number.
    """

    path: Path
    how: str
    real: Optional[Path] = None
    fd: Optional[int] = None


def write_all_atomic(files: Sequence[Tuple[os.PathLike | str, Text]]) -> List[Path]:
    """Write several files so that a failure leaves every regular file as it was.

    Each target is classified first (:func:`target_of`; a directory, socket,
    block device or a missing directory fails before anything is written).
    Texts for regular files (and links to them) go to a temporary file beside
    the file first; only when all are written are they renamed into place.
    On any failure (an unwritable directory, a full disk, an interrupt) the
    temporary files are removed and no regular target is touched. Targets
    written through (FIFOs, character devices such as ``/dev/null``,
    ``/dev/stdout``) are written last, after the regular files are in place:
    such a write cannot be rolled back, so a failure there leaves the regular
    files written. A report keeps the permissions of the file it replaces; a
    new one gets 0666 less the umask, as ``open()`` would give it. Characters
    that UTF-8 cannot encode (lone surrogates from odd file names or trace
    strings) are written as backslash escapes.

    Args:
        files: ``(path, text)`` pairs; a text may come in :class:`Parts`.

    Returns:
        The paths written, as given, in order.

    Raises:
        OutputError: a target cannot be written (one line naming the file as
            given: a missing directory, a directory, a socket, no permission,
            no space left on the device...).
    """
    targets = [(target_of(Path(path)), text) for path, text in files]
    staged: List[Tuple[str, Target]] = []
    try:
        for target, text in targets:
            if target.how == "replace":
                staged.append((_stage(target, text), target))
        for tmp, target in staged:
            try:
                os.replace(tmp, _real(target))
            except OSError as exc:
                raise OutputError(f"cannot write: {_reason(exc)}", target.path) from exc
    except BaseException:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    for target, text in targets:
        if target.how != "replace":
            _write_through(target, text)
    return [target.path for target, _ in targets]


def target_of(path: Path) -> Target:
    """How ``path`` is written (see the module docstring); nothing is written.

    Symbolic links are followed one by one: one into this process's file
    descriptors (``/dev/stdout`` -> ``/proc/self/fd/1``) is written to that
    descriptor, one of another process's is opened as it is, any other leads
    to what it points to (a regular file there is replaced, the link kept).

    Raises:
        OutputError: ``path`` is (or leads to) a directory, a socket or a block
            device; its folder cannot be made (:func:`check_folder`); it
            cannot be written; its links loop (one line naming ``path``).
    """
    current = path
    for _ in range(MAX_LINKS + 1):
        fd = _own_fd(current)
        if fd is not None:
            try:
                os.fstat(fd)
            except OSError as exc:
                raise OutputError(f"cannot write: file descriptor {fd} is not open ({_reason(exc)})", path) from exc
            return Target(path, "fd", fd=fd)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            check_folder(current, path)
            return Target(path, "replace", real=current)  # a new file (where a dangling link points)
        except OSError as exc:
            check_folder(current, path)
            raise OutputError(f"cannot write: {_reason(exc)}", path) from exc
        if stat.S_ISREG(mode):
            return Target(path, "replace", real=current)
        if not stat.S_ISLNK(mode):
            return _through(path, current, mode)
        if _in_proc(current.parent):
            # another process's descriptor (its link may read "pipe:[123]"): the kernel opens it
            try:
                mode = os.stat(current).st_mode
            except OSError as exc:
                raise OutputError(f"cannot write: {_reason(exc)}", path) from exc
            return _through(path, current, mode)
        try:
            link = os.readlink(current)
        except OSError as exc:
            raise OutputError(f"cannot write: cannot read the link ({_reason(exc)})", path) from exc
        current = Path(os.path.join(current.parent, link))
    raise OutputError(f"cannot write: more than {MAX_LINKS} symbolic links", path)


def _through(path: Path, current: Path, mode: int) -> Target:
    """A target written through (a FIFO, a character device, a file reached
    through ``/proc``), after checking that it may be."""
    if stat.S_ISDIR(mode):
        raise OutputError("cannot write: it is a directory (give a file name)", path)
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
        what = "a socket" if stat.S_ISSOCK(mode) else "a block device" if stat.S_ISBLK(mode) else "not a file"
        raise OutputError(f"cannot write: it is {what} (give a file name, a FIFO or a character device)", path)
    if not os.access(current, os.W_OK):
        raise OutputError("cannot write: permission denied", path)
    return Target(path, "through")


def _in_proc(folder: Path) -> bool:
    """True for a folder of ``/proc`` (where links name open files, not paths)."""
    try:
        real = os.path.realpath(folder)
    except (OSError, ValueError):
        return False
    return real == "/proc" or real.startswith("/proc/")


def _own_fd(path: Path) -> Optional[int]:
    """The number of this process's file descriptor that ``path`` names
    (``/proc/self/fd/1``, ``/dev/fd/2``: a name in the folder that
    ``/proc/self/fd`` is), else None."""
    name = path.name
    if not name.isdigit() or not name.isascii() or sys.platform.startswith("win"):
        return None
    try:
        folder = os.path.realpath(path.parent)
    except (OSError, ValueError):
        return None
    return int(name) if folder == f"/proc/{os.getpid()}/fd" else None


def check_folder(path: os.PathLike | str, named: Optional[os.PathLike | str] = None) -> None:
    """Refuse, writing nothing, an output whose folder cannot be made: the
    nearest existing ancestor of its folder is not a directory, or cannot be
    written where folders are missing. Missing folders are created when the
    output is written (:func:`_stage`, as coverage.py does for its reports).

    Raises:
        OutputError: one line naming ``named`` (default ``path``: the name
            given, where ``path`` is where its links lead) and the ancestor.
    """
    named = path if named is None else named
    folder = Path(path).parent
    missing = False
    while not folder.exists() and not folder.is_symlink() and folder.parent != folder:
        missing = True
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write: {folder} is not a directory", named)
    if missing and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write: cannot create its folder in {folder}", named)


def _reason(exc: BaseException) -> str:
    """An OSError's reason as the system words it (``No space left on device``)."""
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__


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


def _tmp_prefix(name: str) -> str:
    """``.<name>.`` with ``name`` cut to :data:`TMP_NAME_BYTES` bytes (as the
    file system stores it), so that the temporary name stays legal."""
    while len(os.fsencode(name)) > TMP_NAME_BYTES:
        name = name[:-1]
    return f".{name}."


def stage_beside(real: Path, write: Callable[[str], None], mode: Optional[int] = None) -> str:
    """The one way hta-report makes a file appear whole: call ``write(tmp)`` on
    a new temporary file beside ``real`` (missing folders made first), give it
    ``mode`` (None: mkstemp's private 0600), and return its name for the caller
    to ``os.replace`` over ``real``. Used for reports (:func:`write_all_atomic`)
    and cache entries (:func:`replace_atomically`).

    Raises:
        OSError: the folder, the temporary file or the write failed; the
            temporary file is removed first. Anything ``write`` raises is
            re-raised after the same clean-up.
    """
    parent = real.parent if str(real.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(real.name), suffix=".tmp", dir=parent)
    try:
        os.close(fd)
        write(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def replace_atomically(path: Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it
    over ``path`` (:func:`stage_beside`; the file stays private, mode 0600).
    Readers see the old file or the new one, never half of one.

    Raises:
        OSError: as :func:`stage_beside`, or the rename failed (the temporary
            file is removed); anything ``write`` raises.
    """
    tmp = stage_beside(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str) -> None:
    """Remove a temporary file left by a failed write (already gone: fine)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _real(target: Target) -> Path:
    """``target.real`` of a ``"replace"`` target (:func:`target_of` always sets it)."""
    if target.real is None:
        raise ValueError(f"{target.path}: a {target.how!r} target has no file to replace")
    return target.real


def _write_text(text: Text) -> Callable[[str], None]:
    """A writer for :func:`stage_beside`: ``text`` (whole or in parts) as
    UTF-8, characters UTF-8 cannot encode (lone surrogates) as backslash escapes."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as fh:
            for part in _parts(text):
                fh.write(part)
    return write


def _stage(target: Target, text: Text) -> str:
    """Write ``text`` to a new temporary file beside the file ``target``
    replaces, with the mode the report should have (:func:`_mode_for`); returns
    its name (removed again if writing fails).

    Raises:
        OutputError: the folder, the temporary file or the write failed (names ``target.path``).
    """
    real = _real(target)
    try:
        return stage_beside(real, _write_text(text), _mode_for(real))
    except OSError as exc:
        raise OutputError(f"cannot write: {_reason(exc)}", target.path) from exc


def _write_through(target: Target, text: Text) -> None:
    """Write ``text`` (whole or in parts) to a FIFO, a device or a file
    descriptor without replacing it (see :func:`write_all_atomic`).

    Raises:
        OutputError: it cannot be opened or written (names the file).
    """
    if isinstance(text, Parts):  # made whole first: a part that fails must not leave half a report in a pipe
        text = "".join(text.make())
    try:
        if target.how == "fd":
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()  # what we printed before comes first
                except (AttributeError, OSError, ValueError):
                    pass
            if target.fd is None:
                raise ValueError(f"{target.path}: an 'fd' target without its descriptor")
            fd = os.dup(target.fd)
        else:
            fd = os.open(target.path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOCTTY", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        try:
            for part in _parts(text):
                view = memoryview(part.encode("utf-8", errors="backslashreplace"))
                while view:
                    n = os.write(fd, view[:_CHUNK])
                    view = view[n:]
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"cannot write: {_reason(exc)}", target.path) from exc
