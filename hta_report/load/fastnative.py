"""The native reader's pieces: :func:`native_piece` is ``fastparse._piece_from_bytes``
for the events the compiled reader takes.

The extension module ``hta_report.load._native`` (C++17, ``native/`` in the
source tree, built by ``setup.py`` where a compiler is found) reads one run of
events (the bytes of a JSON array) into per-field arrays with the GIL released:
per event and field a kind (absent, int, float, string, true, false, null, JSON
text), the int64 and float64 values, and the index of the string or text among
the distinct ones. :func:`native_piece` turns them into the piece
:func:`hta_report.load.fastparse._columns` builds from the same events (the
same tags, values, kept rows and key order), with numpy where a column holds
one type and with fastparse's own functions (``_infer``, ``shared_values``...)
on the Python values where it holds several.

The native reader is strict and narrow: it takes only well-formed Kineto
events (RFC 8259 JSON, strict UTF-8, integers within int64, finite doubles,
nesting under 512, the keys of ``fastparse._FIELDS`` once each, ``ts``/``dur``
numbers, ``cat``/``name``/``ph`` strings, ``pid``/``tid`` ints or strings,
``args`` an object). On anything else (Kineto's unescaped quotes among them)
:func:`native_piece` returns None and the Python reader reads the same bytes:
it repairs what it repairs and raises its own errors, so the errors a user
sees are the Python reader's, word for word.

``HTA_REPORT_PARSER=python`` turns the native reader off (``native`` or
``auto``, the default: on where built).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import msgspec
import numpy as np
import orjson

try:  # built by setup.py where a C++ compiler was found
    from . import _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _native = None

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


class _Col:
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


_TYPES = {K_ABSENT: float, K_INT: int, K_FLOAT: float, K_STR: str, K_TRUE: bool, K_FALSE: bool,
          K_NULL: type(None)}


def native_piece(raw, arg_specs) -> Optional[Dict[str, Any]]:
    """The piece (``fastparse._columns``' dict) of the events in ``raw`` (the
    bytes of a JSON array of events, any bytes-like object) read by the native
    reader, or None where it does not take them or where the Python reader
    would raise :class:`~.fastparse.Unsupported` (the caller then runs the
    Python reader on the same bytes, which decides)."""
    from .fastparse import Unsupported

    got = read_events(raw, arg_specs)
    if isinstance(got, str):
        return None
    try:
        return _piece(got, arg_specs)
    except Unsupported:
        return None


def _numeric(col: _Col, n: int) -> Tuple[str, Any]:
    """``fastparse._infer`` of ``ts`` or ``dur`` (ints, floats, absent only)."""
    from .fastparse import _NAN

    kinds = col.present
    if kinds == {K_INT}:
        return "i8", col.i64
    if kinds == {K_ABSENT}:
        return "null", [_NAN] * n
    return ("f8i" if K_INT in kinds else "f8"), col.f64


def _piece(got: dict, arg_specs) -> Dict[str, Any]:
    from .fastparse import (_DROPPED, _NAN, MAX_ABS_TIME_US, Unsupported, _infer, _kept_codes, _null_mask,
                            _small_ints, shared_values)

    n = got["n"]
    keys: List[str] = got["keys"]
    cat, name = _Col(got["cat"]), _Col(got["name"])
    fields = {k: _Col(got[k]) for k in ("pid", "tid", "ts", "dur")}
    dur_tag, dur_vals = _numeric(fields["dur"], n)
    ts_tag, ts_vals = _numeric(fields["ts"], n)
    for tag, vals in ((dur_tag, dur_vals), (ts_tag, ts_vals)):
        if tag != "null" and len(vals) and float(np.nanmax(np.abs(vals))) > MAX_ABS_TIME_US:
            raise Unsupported("a ts or dur beyond ±2**53 µs")
    dur_null = _null_mask(dur_tag, dur_vals, n)
    ts_null = _null_mask(ts_tag, ts_vals, n)
    if dur_null.any() and np.frombuffer(got["ph_x"], dtype=np.uint8)[dur_null].any():
        raise Unsupported("complete events without dur")
    present = cat.codes >= 0
    trace = np.array([c == "Trace" for c in cat.strs], dtype=bool)
    is_trace = np.zeros(n, dtype=bool)
    if trace.any():
        is_trace[present] = trace[cat.codes[present]]
    kept_first = present & ~dur_null
    keep = kept_first & ~is_trace
    idx = np.flatnonzero(keep)
    take: Optional[list] = None

    columns: Dict[str, Any] = {}
    for k in keys:
        if k in _DROPPED or k in ("args", "cat", "name"):
            continue
        if k in ("ts", "dur"):
            tag, vals = (ts_tag, ts_vals) if k == "ts" else (dur_tag, dur_vals)
            tag = "f8" if tag == "f8i" else tag
        else:
            col = fields[k]
            if col.present == {K_INT}:
                tag, vals = "i8", col.i64
            else:
                raw = col.values(None, _NAN)
                tag, vals = _infer(raw, {_TYPES[c] for c in col.present})
                if tag == "f8i":
                    take = idx.tolist() if take is None else take
                    columns[k] = (tag, (vals[idx], list(map(raw.__getitem__, take))))
                    continue
        if isinstance(vals, np.ndarray):
            columns[k] = (tag, _small_ints(vals[idx]) if tag == "i8" else vals[idx])
        else:
            take = idx.tolist() if take is None else take
            kept = list(map(vals.__getitem__, take))
            columns[k] = (tag, shared_values(kept) if tag == "obj" else kept)

    if len(idx) and (name.codes[idx] < 0).any():
        raise Unsupported("a name or category that is not a string")
    arg_columns = {}
    for i, spec in enumerate(arg_specs):
        arg_columns[spec[0]] = _arg_column(_Col(got["args"][i]), idx, spec)
    return {
        "n": n, "has_args": "args" in keys,
        "cats_seen": set(cat.strs), "ts_any_null": bool(ts_null.any()),
        "end_any_null": bool((ts_null | dur_null).any()), "keep": idx,
        "trace_rows": np.flatnonzero(kept_first & is_trace),
        "cat": _kept_codes(cat.strs, cat.codes, idx),
        "name": _kept_codes(name.strs, name.codes, idx),
        "columns": columns, "args": arg_columns, "keys": keys, "first": None, "parser": "native",
    }


def _arg_column(col: _Col, idx: np.ndarray, spec) -> Tuple[str, Any]:
    """``fastparse._columns``' column of one arg spec (name, raw name, HTA's
    default, whether kept as an object) for the kept rows ``idx``."""
    from .fastparse import _Texts, _infer, _small_ints, shared_values

    default = spec[2]
    if not len(idx):
        return "empty", []
    if spec[3]:  # every value a JSON text (msgspec.Raw in the Python reader), the default's where absent
        codes = col.codes[idx].astype(np.int64)
        texts = list(col.texts)
        if (codes < 0).any():
            dtext = orjson.dumps(default)
            at = texts.index(dtext) if dtext in texts else len(texts)
            if at == len(texts):
                texts.append(dtext)
            codes[codes < 0] = at
        # the texts the kept rows hold (their order does not change the column: each row's value is
        # its own text's, and the tag depends on the set of values)
        order = np.flatnonzero(np.bincount(codes, minlength=len(texts)))
        lut = np.empty(len(texts), dtype=np.int32)
        lut[order] = np.arange(len(order), dtype=np.int32)
        uniques = [texts[j] for j in order.tolist()]
        kept = _Texts(uniques, lut[codes])
        distinct = [msgspec.json.decode(t) for t in uniques]
        if any(type(v) is list or type(v) is dict for v in distinct):
            return "obj", kept
        raw = list(map(distinct.__getitem__, kept.codes.tolist()))
        tag, vals = _infer(raw)
        if tag == "obj":
            return tag, kept
        if tag == "i8":
            return tag, _small_ints(vals)
        return tag, ((vals, raw) if tag == "f8i" else vals)
    kinds = col.kinds(idx)
    dtype = type(default)
    absent = K_ABSENT in kinds
    if kinds <= {K_INT, K_ABSENT} and (not absent or (dtype is int and -2**63 <= default < 2**63)):
        vals = col.i64[idx]
        if absent:
            vals = np.where(col.kind[idx] == K_ABSENT, default, vals)
        return "i8", _small_ints(vals)
    if kinds <= {K_FLOAT, K_ABSENT} and (not absent or (dtype is float and default == default)):
        vals = col.f64[idx]
        if absent:
            vals = np.where(col.kind[idx] == K_ABSENT, default, vals)
        return "f8", vals
    raw = col.values(idx, default)
    tag, vals = _infer(raw)
    if tag == "obj":
        return tag, shared_values(vals)
    if tag == "i8":
        return tag, _small_ints(vals)
    return tag, ((vals, raw) if tag == "f8i" else vals)
