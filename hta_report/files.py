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
"""
from __future__ import annotations

import gzip
import zlib
import os
from pathlib import Path
from typing import IO, Optional, Tuple, Union

#: A trace location as the loader handles it.
Location = Union[Path, "os.PathLike[str]"]


def is_url(p: Union[str, os.PathLike]) -> bool:
    """True for a URL other than ``file://`` (and for an ``upath.UPath`` of one)."""
    if isinstance(p, Path):
        return False
    text = str(p)
    return "://" in text and not text.startswith("file://")


def location(p: Union[str, os.PathLike]) -> Location:
    """``p`` as a path object: a :class:`pathlib.Path` for a local path or a
    ``file://`` URL, an ``upath.UPath`` for any other URL.

    Raises:
        hta_report.errors.InputError: a URL whose protocol fsspec does not
            know, or whose fsspec package is not installed.
    """
    if isinstance(p, Path) or (not isinstance(p, str) and not is_url(p)):
        return Path(p)
    text = str(p)
    if text.startswith("file://"):
        return Path(text[len("file://"):])
    if not is_url(text):
        return Path(text)
    from .errors import InputError

    try:
        from upath import UPath

        return UPath(text)
    except (ImportError, ValueError) as exc:
        raise InputError(f"cannot read this URL: {exc} (install the fsspec package for its protocol, "
                         "e.g. s3fs for s3://)", text) from exc


def open_bytes(p: Union[str, os.PathLike]) -> IO[bytes]:
    """The file's bytes as stored (compressed or not), opened for reading.

    Raises:
        OSError: the file cannot be opened.
    """
    return location(p).open("rb")


def open_text_stream(p: Union[str, os.PathLike]) -> IO[bytes]:
    """The file's JSON bytes, decompressed when the name ends in ``.gz``.

    Raises:
        OSError: the file cannot be opened.
    """
    raw = open_bytes(p)
    return _Gunzip(raw) if str(p).endswith(".gz") else raw


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

    def read(self, size: int = -1) -> bytes:
        try:
            return super().read(size)
        except _InflateError as exc:
            raise zlib.error(str(exc)) from exc

    def readinto(self, b) -> int:
        try:
            return super().readinto(b)
        except _InflateError as exc:
            raise zlib.error(str(exc)) from exc

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def size(p: Union[str, os.PathLike]) -> int:
    """The file's size as stored (bytes).

    Raises:
        OSError: the file cannot be found.
    """
    return int(location(p).stat().st_size)


def identity(p: Union[str, os.PathLike]) -> str:
    """A string naming the file for this run's memos: the resolved local
    path, or the URL."""
    loc = location(p)
    return str(loc.resolve()) if isinstance(loc, Path) else str(loc)


def version_key(p: Union[str, os.PathLike]) -> Tuple[str, int, Optional[float]]:
    """``(identity, size in bytes, modification time)`` of the file ``p``
    (the time in ns, or in s from a store without ns): a key for what this
    run remembers of a file, which changes when the file is rewritten.

    Raises:
        OSError: the file cannot be stat'ed.
        hta_report.errors.InputError: a URL no fsspec package reads.
    """
    st = location(p).stat()
    return identity(p), st.st_size, getattr(st, "st_mtime_ns", None) or getattr(st, "st_mtime", None)
