"""The native reader's glue: the extension module, whether it runs, its columns.

The extension module ``hta_report.load._native`` (C++17, ``native/`` in the
source tree, built by ``setup.py`` where a compiler is found) reads one run of
events (the bytes of a JSON array) into per-field arrays with the GIL released:
per event and field a kind (absent, int, float, string, true, false, null, JSON
text), the int64 and float64 values, and the index of the string or text among
the distinct ones (:class:`Col`). :func:`hta_report.load.fastparse.native_piece`
turns them into the piece :func:`hta_report.load.fastparse._columns` builds
from the same events (the same tags, values, kept rows and key order).
This module imports nothing else of the package.

The native reader is strict and narrow: it takes only well-formed Kineto
events (RFC 8259 JSON, strict UTF-8, integers within int64, finite doubles,
nesting under 512, the keys of ``fastparse._FIELDS`` once each, ``ts``/``dur``
numbers, ``cat``/``name``/``ph`` strings, ``pid``/``tid`` ints or strings,
``args`` an object). On anything else (Kineto's unescaped quotes among them)
:func:`~hta_report.load.fastparse.native_piece` returns None and the Python
reader reads the same bytes:
it repairs what it repairs and raises its own errors, so the errors a user
sees are the Python reader's, word for word.

``HTA_REPORT_PARSER=python`` turns the native reader off (``native`` or
``auto``, the default: on where built).
"""
from __future__ import annotations

import functools
import os
from typing import Any, Optional

import msgspec
import numpy as np
import orjson

try:  # built by setup.py where a C++ compiler was found
    from . import _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _native = None

#: The trace metadata key saying which reader read the events: ``native``, ``python``,
#: ``native and python`` (:func:`hta_report.load.fastparse.parser_used`) or ``hta``
#: (HTA's own parser, or the validating reader of :mod:`hta_report.load.hta_parser`).
PARSER_USED = "hta_report_parser"

#: The values of ``HTA_REPORT_PARSER``.
PARSERS = ("auto", "native", "python")

# the kinds of native/reader.hpp
K_ABSENT, K_INT, K_FLOAT, K_STR, K_TRUE, K_FALSE, K_NULL, K_TEXT = range(8)


def available() -> bool:
    """Whether the extension module was built and imports."""
    return _native is not None


def enabled() -> bool:
    """Whether pieces go to the native reader first: built, and not turned off
    by ``HTA_REPORT_PARSER=python``."""
    return _native is not None and os.environ.get("HTA_REPORT_PARSER", "auto").strip().lower() != "python"


def read_events(raw, arg_specs) -> Any:
    """The extension's raw answer for ``raw`` (a JSON array of events): its dict
    of columns, or a str saying why it did not take the bytes (for tests and the
    fuzz target's Python twin).

    Raises:
        RuntimeError: the extension is not built.
    """
    if _native is None:
        raise RuntimeError("the native reader is not built")
    names = tuple(spec[1] for spec in arg_specs)
    objects = tuple(bool(spec[3]) for spec in arg_specs)
    return _native.read_events(raw, names, objects)


def read_piece(raw, arg_specs) -> Any:
    """The extension's piece of ``raw`` (a JSON array of events): its dict
    (the kept rows' columns built in C++, mixed ones as per-row arrays; see
    :func:`hta_report.load.fastparse.native_piece`), or a str saying why the
    Python reader must read the bytes. ``arg_specs``: fastparse's (name, raw
    name, HTA's default, whether kept as an object).

    Raises:
        RuntimeError: the extension is not built.
    """
    if _native is None:
        raise RuntimeError("the native reader is not built")
    try:
        names, objects, defaults = _cached_specs(arg_specs)
    except TypeError:  # a default that does not hash (a list): not cached
        names, objects, defaults = _specs(arg_specs)
    return _native.read_piece(raw, names, objects, defaults)


def _specs(arg_specs) -> tuple:
    """The extension's view of fastparse's arg specs: raw names, whether each
    is kept as an object, and each default as (kind: 1 an int64, 2 a float
    that is not NaN, 0 another; the int; the float; its JSON text)."""
    names = tuple(spec[1] for spec in arg_specs)
    objects = tuple(bool(spec[3]) for spec in arg_specs)
    defaults = []
    for spec in arg_specs:
        d = spec[2]
        if type(d) is int and -2**63 <= d < 2**63:
            defaults.append((1, d, 0.0, orjson.dumps(d)))
        elif type(d) is float and d == d:
            defaults.append((2, 0, d, orjson.dumps(d)))
        else:
            defaults.append((0, 0, 0.0, orjson.dumps(d) if spec[3] else b""))
    return names, objects, tuple(defaults)


_cached_specs = functools.lru_cache(maxsize=8)(_specs)


def find(buf, needle: bytes, start: int, end: int) -> int:
    """``buf.find(needle, start, end)`` (``needle`` of 2 bytes or more), in the
    extension where built: it filters on the needle's first two bytes (Kineto's
    ``"[memory]"``: 3 against 21 ms for 57 MB, where ``bytes.find`` stops at every quote)."""
    if _native is None:
        return buf.find(needle, start, end)
    return _native.find(buf, needle, start, end)


class Col:
    """One field's values over the piece's events, as the extension hands them back."""

    __slots__ = ("kind", "i64", "f64", "codes", "strs", "texts", "present")

    def __init__(self, t: tuple) -> None:
        kind, i64, f64, codes, self.strs, self.texts = t
        self.kind = np.frombuffer(kind, dtype=np.uint8)
        self.i64 = np.frombuffer(i64, dtype=np.int64)
        self.f64 = np.frombuffer(f64, dtype=np.float64)
        self.codes = np.frombuffer(codes, dtype=np.int32)
        self.present = set(np.flatnonzero(np.bincount(self.kind, minlength=8)).tolist())

    def kinds(self, rows: Optional[np.ndarray]) -> set:
        if rows is None:
            return self.present
        return set(np.flatnonzero(np.bincount(self.kind[rows], minlength=8)).tolist())

    def values(self, rows: Optional[np.ndarray], default: Any) -> list:
        """The Python values of ``rows`` (None: all), as the Python reader holds
        them (``default`` where absent; JSON text decoded with msgspec, as
        msgspec decodes an ``Any`` field)."""
        kind = self.kind if rows is None else self.kind[rows]
        out = np.empty(len(kind), dtype=object)
        for k in np.flatnonzero(np.bincount(kind, minlength=8)).tolist():
            pos = np.flatnonzero(kind == k)
            src = pos if rows is None else rows[pos]
            if k == K_ABSENT:
                out[pos] = _fill(default, len(pos))
            elif k == K_INT:  # scalars: np.array keeps each as one element
                out[pos] = np.array(self.i64[src].tolist(), dtype=object)
            elif k == K_FLOAT:
                out[pos] = np.array(self.f64[src].tolist(), dtype=object)
            elif k == K_STR:
                out[pos] = np.array(self.strs, dtype=object)[self.codes[src]]
            elif k in (K_TRUE, K_FALSE, K_NULL):
                out[pos] = _fill({K_TRUE: True, K_FALSE: False, K_NULL: None}[k], len(pos))
            else:
                out[pos] = _objects([msgspec.json.decode(t) for t in self.texts])[self.codes[src]]
        return out.tolist()


def _objects(values: list) -> np.ndarray:
    """``values`` as a 1-d object array (lists kept as elements, not unpacked)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _fill(value: Any, n: int) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


#: The Python type of the values of each kind (absent: the NaN of a missing key).
TYPES = {K_ABSENT: float, K_INT: int, K_FLOAT: float, K_STR: str, K_TRUE: bool, K_FALSE: bool,
          K_NULL: type(None)}
