"""Trace files by local path or by URL.

A trace directory or file is a local path, or a URL that fsspec reads
(``file://``, ``memory://``, ``s3://``, ``gs://``, ... with the matching
fsspec package installed, e.g. ``s3fs``). :func:`location` turns either into
a path object with the ``pathlib`` interface (``name``, ``stat()``,
``open()``, ``glob()``, ``/``): :class:`pathlib.Path` for local files,
``upath.UPath`` (universal_pathlib, over fsspec) for the rest. The loader
opens every trace through :func:`open_bytes` and :func:`open_text_stream`,
so a worker that reads a URL reads it itself: nothing passes through the
process that listed the files.

A URL is shown (in a report, a saved result, a message) only through
:func:`shown`: its login and secret query parameters redacted
(:func:`hta_report.escape.redact_url`); it is read with the full URL.
``file:///abs/path`` and ``file://localhost/abs/path`` (RFC 8089) are the
local path ``/abs/path``. A protocol whose files cannot be named by URL
without losing their host and login (``ftp://``, ``sftp://``, ``smb://``...:
fsspec keeps those apart from the path) is refused up front, as is one whose
fsspec package is missing; a URL that fails to answer while the files are
found is one line naming it (:func:`url_error`).
"""
from __future__ import annotations

import functools
import gzip
import os
import re
import stat
import warnings
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Protocol, Tuple, Type, TypeVar, Union, cast

from .escape import redact_url

if TYPE_CHECKING:
    from types import TracebackType

    from _typeshed import WriteableBuffer
    from typing_extensions import Self
    from upath import UPath

    from .errors import InputError

#: A trace location as the loader handles it: a :class:`pathlib.Path`, or an
#: ``upath.UPath`` for a URL (which has the ``pathlib`` interface but is no
#: ``os.PathLike``: it names no local file).
Location = Union[Path, "UPath"]

#: A file or folder as given: a string (a path or a URL), a path, or a URL's ``upath.UPath``.
PathOrURL = Union[str, "os.PathLike[str]", "UPath"]

_T = TypeVar("_T")


class ByteStream(Protocol):
    """An open file's bytes as the loader reads them: a local file, a URL's
    fsspec file, or a gzip reader over either (:func:`open_bytes`,
    :func:`open_text_stream`)."""

    def read(self, size: int = ..., /) -> bytes:
        """At most ``size`` bytes (all that is left when negative); ``b""`` at the end."""
        ...

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        """Read into ``buffer``; the number of bytes read, 0 at the end."""
        ...

    def seek(self, offset: int, whence: int = ..., /) -> int:
        """Move to byte ``offset`` (from the start, or as ``whence`` says); the new position."""
        ...

    def close(self) -> None:
        """Close the file."""
        ...

    def __enter__(self) -> Self:
        ...

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType], /) -> None:
        ...


def is_url(p: PathOrURL) -> bool:
    """True for a URL other than ``file://`` (and for an ``upath.UPath`` of one)."""
    if isinstance(p, Path):
        return False
    text = str(p)
    return "://" in text and not text.startswith("file://")


def bare(p: PathOrURL) -> str:
    """``str(p)`` without a URL's query and fragment: what a presigned
    ``https://…/rank0.json?X-Amz-Signature=…`` names is ``…/rank0.json``, so
    that its name ends in ``.json``. A local path (whose names may hold a
    ``?``) is returned as is."""
    text = str(p)
    if is_url(text):
        text = text.split("#", 1)[0].split("?", 1)[0]
    return text


def bare_name(p: PathOrURL) -> str:
    """The last part of :func:`bare` of ``p``: a file's name without a URL's query."""
    return p.name if isinstance(p, Path) else bare(p).rstrip("/").rsplit("/", 1)[-1]


def has_query(p: PathOrURL) -> bool:
    """True for a URL (not a local path) with a query or a fragment."""
    return is_url(p) and bare(p) != str(p)


def shown(p: PathOrURL) -> str:
    """``p`` as shown in a report, a saved result or a message: a URL with its
    login and secret query parameters redacted (:func:`hta_report.escape.redact_url`),
    a local path as is."""
    text = str(p)
    return redact_url(text) if "://" in text else text


def location(p: PathOrURL) -> Location:
    """``p`` as a path object: a :class:`pathlib.Path` for a local path or a
    ``file://`` URL (``file:///abs`` or ``file://localhost/abs``), an
    ``upath.UPath`` for any other URL.

    Raises:
        hta_report.errors.InputError: a URL whose protocol fsspec does not
            know, or whose fsspec package is not installed; a protocol whose
            files lose their host and login when named by URL (``ftp://``...);
            a ``file://`` URL naming another host. The message names the URL
            redacted (:func:`shown`).
    """
    if isinstance(p, Path) or (isinstance(p, os.PathLike) and not is_url(p)):  # a local upath.UPath is one too
        return Path(p)
    text = str(p)
    if text.startswith("file://"):
        return _file_url(text)
    if not is_url(text):
        return Path(text)
    return _url_location(text)


#: The host of a ``file://`` URL that names this machine (RFC 8089 §2).
_LOCAL_HOSTS = ("", "localhost")


def _file_url(text: str) -> Path:
    """The local path of a ``file://`` URL: ``file:///abs/path`` and
    ``file://localhost/abs/path`` are ``/abs/path`` (RFC 8089).

    Raises:
        hta_report.errors.InputError: the URL names another host.
    """
    host, _, path = text[len("file://"):].partition("/")
    if host.lower() not in _LOCAL_HOSTS:
        from .errors import InputError

        raise InputError(f"a file:// URL names an absolute path on this machine (file:///abs/path or "
                         f"file://localhost/abs/path), not on host {host.rpartition('@')[2]!r}: give the path itself",
                         shown(text))
    if os.name == "nt" and re.match(r"[A-Za-z]:", path):  # pragma: no cover - file:///C:/x on Windows
        return Path(path)
    return Path("/" + path)


def _url_location(text: str) -> Location:
    """The ``upath.UPath`` of a URL other than ``file://`` (see :func:`location`)."""
    from .errors import InputError, one_line

    try:
        import fsspec
        from upath import UPath

        with warnings.catch_warnings():  # "filesystem not explicitly implemented": fsspec's own still reads it
            warnings.simplefilter("ignore")
            loc = UPath(text)
    except (ImportError, ValueError) as exc:
        raise InputError(f"cannot read this URL: {one_line(str(exc))} (install the fsspec package for its "
                         "protocol, e.g. s3fs for s3://)", shown(text)) from exc
    scheme = _scheme(text)
    if "::" in text and "://" in text.split("::", 1)[0]:  # zip://member::file:///a.zip: a file inside a file
        raise InputError(f"{scheme}://…::… is not supported (a file inside an archive or another file: "
                         "hta-report judges a trace by the end of its URL); extract the traces to a folder "
                         "first", shown(text))
    if not _named_by_url(scheme) or not _survives_str(loc):
        raise InputError(f"{scheme}:// is not supported: its files cannot be named by URL without losing the "
                         "host and login, which fsspec keeps apart; copy the traces to a local folder "
                         "(or serve them over http(s)://) first", shown(text))
    for protocol in _protocols(text):  # a missing package said now, not on the first read
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as exc:
            raise InputError(f"cannot read {protocol}:// URLs here: {one_line(str(exc))}", shown(text)) from exc
    return loc


def _scheme(text: str) -> str:
    return text.split("://", 1)[0].lower()


def _protocols(text: str) -> list:
    """The protocols of a URL, chained ones included (``zip://a::s3://b`` -> ``zip``, ``s3``)."""
    return [part.split("://", 1)[0].lower() for part in text.split("::") if "://" in part]


def _survives_str(loc) -> bool:
    """True when ``str(loc)`` names the same file as ``loc``: what the loader
    hands to the processes that read the files."""
    from upath import UPath

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = UPath(str(loc))
    except Exception:  # noqa: BLE001 - not even parseable again
        return False
    return again.storage_options == loc.storage_options and again.path == loc.path


@functools.lru_cache(maxsize=None)
def _named_by_url(scheme: str) -> bool:
    """True unless ``scheme``'s URLs keep their host or login apart from the
    path (``ftp``, ``sftp``, ``smb``, ``github``...): a URL of it with a login
    does not survive :func:`_survives_str`."""
    from upath import UPath

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe = UPath(f"{scheme}://user:password@host.invalid:21/folder/trace.json")
    except Exception:  # noqa: BLE001 - such a URL is not even valid: leave it to the URL given
        return True
    return _survives_str(probe)


def url_error(exc: BaseException, p: PathOrURL) -> InputError:
    """The :class:`~hta_report.errors.InputError` for a URL that failed to
    answer (connection refused, a server error, a package missing...):
    one line naming the URL (redacted) and the cause."""
    from .errors import InputError

    return InputError(f"cannot read it: {failure(exc)}", shown(p))


def unless_missing(url: Location) -> None:
    """Return when the URL ``url`` (an ``upath.UPath``) is missing; raise
    when it failed to answer instead. fsspec's ``exists`` says False, and
    http's ``info`` raises ``FileNotFoundError``, for a connection refused
    or a server error too, the real failure as its cause.

    Raises:
        hta_report.errors.InputError: the URL failed to answer (:func:`url_error`).
    """
    from .errors import InputError

    try:
        url.stat()
    except FileNotFoundError as exc:
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, FileNotFoundError) and getattr(cause, "status", None) != 404:
            raise url_error(cause, url) from cause
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a remote filesystem raises is the URL's failure
        raise url_error(exc, url) from exc


def failure(exc: BaseException, limit: int = 300) -> str:
    """One line for why reading failed: an ``OSError``'s own words (``Connection
    refused``), else ``Type: message``; secrets in URLs redacted."""
    from .errors import one_line

    if isinstance(exc, OSError) and exc.strerror and str(exc).startswith("[Errno"):
        text = exc.strerror  # "Connection refused", not "[Errno 111] Connection refused"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = redact_url(one_line(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def open_bytes(p: PathOrURL) -> ByteStream:
    """The file's bytes as stored (compressed or not), opened for reading.

    Raises:
        OSError: the file cannot be opened.
    """
    loc = location(p)
    if isinstance(loc, Path):
        return loc.open("rb")
    # UPath types open("rb") as a BinaryIO; what fsspec opens is an io.IOBase reader with readinto.
    fh = cast(ByteStream, _as_oserror(lambda: loc.open("rb")))
    try:  # the path object may hold its filesystem (an archive, a cache): alive while the file is open
        setattr(fh, "_hta_report_location", loc)
    except (AttributeError, TypeError):  # pragma: no cover - a file object without attributes
        pass
    return fh


def _as_oserror(call: Callable[[], _T]) -> _T:
    """``call()``, a failure of a URL's filesystem raised as ``OSError`` (as a
    local file's would be), its cause in the message."""
    try:
        return call()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - aiohttp, botocore, ftplib... errors are the URL's failure
        raise OSError(failure(exc)) from exc


def open_text_stream(p: PathOrURL) -> ByteStream:
    """The file's JSON bytes, decompressed when the name ends in ``.gz``.

    Raises:
        OSError: the file cannot be opened.
    """
    raw = open_bytes(p)
    return _Gunzip(raw) if bare(p).endswith(".gz") else raw


if TYPE_CHECKING:  # the gzip module's fallback below has the same interface (IGzipFile is a gzip.GzipFile)
    from isal.igzip import IGzipFile as _GzipFile

    _InflateError: Type[Exception]  # isal's stub declares `error` an Exception instance: it is the class
else:
    try:  # ISA-L inflates at about 3x zlib's speed (the fast parser's gzip traces)
        from isal.igzip import IGzipFile as _GzipFile
        from isal.isal_zlib import error as _InflateError
    except ImportError:  # pragma: no cover - a platform without isal's wheels
        _GzipFile = gzip.GzipFile
        _InflateError = zlib.error


class _Gunzip(_GzipFile):
    """A gzip reader over an open file object that closes that file too.
    A corrupt stream raises ``zlib.error`` (ISA-L's own error type is
    translated), as the gzip module does."""

    def read(self, size: Optional[int] = -1) -> bytes:
        try:
            return super().read(size)
        except _InflateError as exc:
            raise zlib.error(str(exc)) from exc

    def readinto(self, b: WriteableBuffer) -> int:
        try:
            return super().readinto(b)
        except _InflateError as exc:
            raise zlib.error(str(exc)) from exc

    def __init__(self, raw: ByteStream) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def size(p: PathOrURL) -> int:
    """The file's size as stored (bytes).

    Raises:
        OSError: the file cannot be found.
    """
    loc = location(p)
    return int((loc.stat() if isinstance(loc, Path) else _as_oserror(loc.stat)).st_size)


def identity(p: PathOrURL) -> str:
    """A string naming the file for this run's memos: the resolved local
    path, or the URL."""
    loc = location(p)
    return str(loc.resolve()) if isinstance(loc, Path) else str(loc)


def version_key(p: PathOrURL) -> Tuple[str, int, Optional[float]]:
    """``(identity, size in bytes, modification time)`` of the file ``p``
    (the time in ns, or in s from a store without ns): a key for what this
    run remembers of a file, which changes when the file is rewritten.

    Raises:
        OSError: the file cannot be stat'ed.
        hta_report.errors.InputError: a URL no fsspec package reads.
    """
    loc = location(p)
    st = loc.stat() if isinstance(loc, Path) else _as_oserror(loc.stat)
    return identity(p), st.st_size, getattr(st, "st_mtime_ns", None) or getattr(st, "st_mtime", None)


def stored_bytes(paths: Iterable[PathOrURL]) -> int:
    """The files' sizes as stored (bytes; compressed for a gzip), what the
    readers count for progress; a file that cannot be sized counts 0."""
    total = 0
    for p in paths:
        try:
            total += size(p)
        except OSError:
            pass
    return total


def read_regular(path: Union[str, os.PathLike], limit: int,
                 check: Optional[Callable[[os.stat_result], bool]] = None) -> Optional[bytes]:
    """The bytes of the local file ``path`` when it is a regular file of at
    most ``limit`` bytes, opened without following a link (``O_NOFOLLOW``) or
    waiting on a FIFO (``O_NONBLOCK``), and, with ``check``, when
    ``check(fstat of the opened file)`` holds; None when it is anything else,
    larger, or fails the check. The cache reads its entries and the source
    finder the files frames name through it: what is read is what was opened,
    never what a link swapped in names.

    Raises:
        OSError: the file cannot be opened or read (FileNotFoundError when absent).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or (check is not None and not check(st)):
            return None
        data = fh.read(limit + 1)
    return data if len(data) <= limit else None
