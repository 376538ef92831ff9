"""A faster drop-in for HTA's ``parse_trace_file``.

:func:`parse_trace_file` returns what ``hta.common.trace.parse_trace_file`` returns
for the same file and :class:`~hta.configs.parser_config.ParserConfig` (HTA's
default JSON backend): the trace metadata, the event dataframe (same columns in
the same order, same dtypes, same values, same index) and a local
``TraceSymbolTable`` (same symbols; ids in the same order when called in the
same process). It gets there without HTA's per-event Python work:

- the file is read in blocks (gzip streamed) and the ``traceEvents`` array is
  cut at event boundaries into pieces of a few MB, each parsed with orjson, so
  that only one piece's Python objects are alive at a time;
- each piece becomes columns at once (``map(dict.get, ...)`` per field, one
  field at a time, only for the ``args`` that ``cfg`` asks for), with pandas'
  dtype inference reproduced piece by piece (see :class:`_Column`);
- HTA's per-row steps (``_compress_df``'s ``Series.apply`` per arg and per
  symbol, ``add_iteration``'s per-row lookups) are done with numpy;
- the cyclic garbage collector is paused while pieces are parsed.

Anything this module does not reproduce exactly (other parser backends,
``parse_all_args``, ``cuda_profiler_range`` counters, mixed value types that
pandas would keep as objects, malformed or truncated JSON...) is handed to
HTA's own parser, so the result, or the error raised, is HTA's.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import re
from itertools import repeat
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import orjson
import pandas as pd

logger = logging.getLogger(__name__)

#: Bumped whenever the dataframe this module produces may change (a parse-cache key).
PARSER_VERSION = "1"
#: Bytes of decompressed JSON read at a time; one block's events are parsed together.
BLOCK_BYTES = 8 << 20
#: Columns HTA drops from the event dataframe.
_DROPPED = frozenset(("ph", "id", "bp", "s"))
_WS = b" \t\n\r"
_NAN = float("nan")
_EMPTY: dict = {}
STR_DTYPE = pd.Series(["x"]).dtype  # what pandas infers for strings here (``str`` in pandas 3)
_STEP_NUMBER = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\Z')
_EXACT_FLOAT_INT = 2**53  # timestamps beyond this lose precision as float64


class Unsupported(Exception):
    """The input is outside what the fast path reproduces exactly; HTA's parser takes it."""


# --------------------------------------------------------------------------- entry point


def parse_trace_file(path, cfg=None, fallback: bool = True, workers: int = 1):
    """Parse one Kineto trace like ``hta.common.trace.parse_trace_file``.

    Args:
        path: a ``.json`` or ``.json.gz`` trace.
        cfg: HTA's ``ParserConfig`` (default: HTA's default config); only the
            args it lists become columns.
        fallback: hand inputs the fast path does not reproduce exactly (and
            any failure) to HTA's parser. ``False`` raises :class:`Unsupported`
            or the error instead (for tests).
        workers: processes that parse pieces of a large file side by side
            (forked; 1: all in this process).

    Returns:
        ``(meta, df, symbol_table)`` as HTA returns them.
    """
    from hta.configs.parser_config import ParserConfig

    path = str(path)
    if not (path.endswith(".gz") or path.endswith(".json")):
        raise ValueError(f"expect the value of trace_file ({path}) ends with '.gz' or 'json'")
    cfg = cfg or ParserConfig.get_default_cfg()
    try:
        _check_config(cfg)
        with _gc_paused():
            try:
                return _parse(path, cfg, workers)
            except _BadCut:  # a cut the parallel reader could not check: read again, in order
                return _parse(path, cfg, 1)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if not fallback:
            raise
        logger.debug("fast parser handed %s to HTA's parser: %s: %s", path, type(exc).__name__, exc)
        return hta_parse_trace_file(path, cfg)


def hta_parse_trace_file(path, cfg=None):
    """HTA's own ``parse_trace_file`` (the reference implementation)."""
    from hta.common.trace import parse_trace_file as _hta

    return _hta(str(path), cfg)


def _check_config(cfg) -> None:
    from hta.common.trace_parser import get_default_trace_parsing_backend
    from hta.configs.parser_config import ParserBackend

    backend = cfg.parser_backend or get_default_trace_parsing_backend()
    if backend != ParserBackend.JSON:
        raise Unsupported(f"parser backend {backend}")
    if cfg.parse_all_args:
        raise Unsupported("parse_all_args")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing allocates millions of
    containers that would trigger collections, and frees them itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# --------------------------------------------------------------------------- reading


class _Buffer:
    """Decompressed bytes read block by block into one reusable buffer.

    The unread data lives in ``buf[1:end]``; ``buf[0]`` holds ``[`` so that a run
    of events ``buf[1:j+1]`` parses as one JSON array once ``buf[j+1]`` is set to
    ``]``, without copying it.
    """

    def __init__(self, path: str) -> None:
        from ..files import open_text_stream

        self.fh = open_text_stream(path)  # a local path or a URL (fsspec)
        self.buf = bytearray(BLOCK_BYTES + 1)
        self.buf[0] = 0x5B
        self.start = self.end = 1
        self.eof = False

    def close(self) -> None:
        self.fh.close()

    def fill(self) -> None:
        """Move the unread data to the front and read one more block after it."""
        buf, r = self.buf, self.end - self.start
        if self.start > 1:
            buf[1:1 + r] = buf[self.start:self.end]
        self.start, self.end = 1, 1 + r
        if len(buf) - self.end < BLOCK_BYTES:
            buf.extend(bytes(BLOCK_BYTES + self.end - len(buf)))
        with memoryview(buf) as mv:
            n = self.fh.readinto(mv[self.end:self.end + BLOCK_BYTES])
        self.end += n
        self.eof = n == 0

    def data(self) -> bytes:
        return bytes(self.buf[self.start:self.end])

    def last_separator(self) -> Optional[Tuple[int, int]]:
        """The last ``}`` , ``{`` (whitespace allowed) in the unread data: (index
        of ``}``, index after the comma). A candidate only: a cut inside a string
        or a nested object leaves an unbalanced run that orjson rejects."""
        buf, lo, hi = self.buf, self.start, self.end
        i = buf.rfind(b",", lo, hi)
        while i > lo:
            j = i - 1
            while j >= lo and buf[j] in _WS:
                j -= 1
            k = i + 1
            while k < hi and buf[k] in _WS:
                k += 1
            if j >= lo and buf[j] == 0x7D and k < hi and buf[k] == 0x7B:
                return j, i + 1
            i = buf.rfind(b",", lo, i)
        return None

    def events_bytes(self, close: int) -> bytes:
        """A copy of the events up to ``close`` (a ``}``) as a JSON array."""
        buf = self.buf
        saved = buf[close + 1]
        buf[close + 1] = 0x5D
        try:
            return bytes(buf[0:close + 2])
        finally:
            buf[close + 1] = saved

    def events_until(self, close: int) -> list:
        """Parse the events from the start of the unread data to ``close`` (a ``}``)."""
        buf = self.buf
        if self.start != 1:
            raise AssertionError("fill() first")
        saved = buf[close + 1]
        buf[close + 1] = 0x5D
        try:
            with memoryview(buf) as mv:
                events = orjson.loads(mv[0:close + 2])
        finally:
            buf[close + 1] = saved
        if set(map(type, events)) != {dict}:
            raise Unsupported("an element of traceEvents is not an object")
        return events


_CLASS = np.zeros(256, dtype=np.int8)
for _ch, _v in ((b'"', 1), (b"\\", 2), (b"{", 3), (b"}", 4), (b"[", 5), (b"]", 6)):
    _CLASS[_ch[0]] = _v


def _structure(buf: bytes) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Brackets of ``buf`` that lie outside strings: positions, kinds (3 ``{``,
    4 ``}``, 5 ``[``, 6 ``]``) and the nesting depth after each, for ``buf``
    starting outside any string at depth 0."""
    a = np.frombuffer(buf, dtype=np.uint8)
    cls = _CLASS[a]
    pos = np.flatnonzero(cls)
    kind = cls[pos]
    quote = kind == 1
    if (kind == 2).any():  # a quote preceded by an odd run of backslashes is escaped
        for i in np.flatnonzero(quote):
            p = int(pos[i]) - 1
            run = 0
            while p >= 0 and a[p] == 0x5C:
                run += 1
                p -= 1
            if run % 2:
                quote[i] = False
    inside = (np.cumsum(quote) - quote) % 2 == 1
    keep = (kind >= 3) & ~inside
    spos, skind = pos[keep], kind[keep]
    depth = np.cumsum(np.where((skind == 3) | (skind == 5), 1, -1))
    return spos, skind, depth


def _exact_separator(data: bytes) -> Optional[Tuple[int, int]]:
    """The last event end followed by ``,`` and another event in ``data``
    (which starts between two events), from its exact bracket structure:
    (index of ``}``, index after the comma)."""
    spos, skind, depth = _structure(data)
    n = len(data)
    for j in spos[(skind == 4) & (depth == 0)][::-1]:
        k = int(j) + 1
        while k < n and data[k] in _WS:
            k += 1
        if k < n and data[k] == 0x2C:
            k2 = k + 1
            while k2 < n and data[k2] in _WS:
                k2 += 1
            if k2 < n and data[k2] == 0x7B:
                return int(j), k + 1
    return None


def _loads_events(piece: bytes) -> list:
    events = orjson.loads(b"[" + piece + b"]")
    if set(map(type, events)) != {dict}:
        raise Unsupported("an element of traceEvents is not an object")
    return events


class _BadCut(Exception):
    """A piece sent to a worker did not parse: maybe a wrong cut, maybe bad JSON."""


def _piece_from_bytes(raw: bytes, arg_specs) -> dict:
    """Worker side: parse one run of events and compute its piece."""
    with _gc_paused():
        try:
            events = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _BadCut(str(exc)) from None
        if set(map(type, events)) != {dict}:
            raise Unsupported("an element of traceEvents is not an object")
        return _piece(events, arg_specs)


class _Pieces:
    """Turns runs of events into pieces merged into ``sink`` in file order:
    here, or in up to ``workers`` forked processes (at most two runs in flight
    per worker, so memory stays bounded)."""

    def __init__(self, sink: "_Frame", workers: int) -> None:
        self.sink, self.workers = sink, workers
        self.pool = None
        self.pending: List[Any] = []

    def submit_bytes(self, raw: bytes) -> None:
        if self.pool is None:
            from .. import workers

            self.pool = workers.pool(self.workers)
        self.pending.append(self.pool.submit(_piece_from_bytes, raw, self.sink.args))
        while len(self.pending) > 2 * self.workers:
            self.sink.merge(self.pending.pop(0).result())

    def drain(self) -> None:
        while self.pending:
            self.sink.merge(self.pending.pop(0).result())

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _read(path: str, sink: "_Frame", workers: int = 1) -> dict:
    """Stream ``path``'s events into ``sink`` a block at a time; returns the
    parsed document with an empty ``traceEvents``."""
    rd = _Buffer(path)
    pieces = _Pieces(sink, workers)
    try:
        return _read_from(rd, sink, pieces)
    finally:
        pieces.close()
        rd.close()


def _read_from(rd: _Buffer, sink: "_Frame", pieces: _Pieces) -> dict:
    head = None
    while head is None:  # the part before the traceEvents array (metadata, usually small)
        rd.fill()
        prefix = rd.data()
        lead = prefix.lstrip(_WS)
        if lead and lead[:1] != b"{":
            raise Unsupported("the document is not a JSON object")
        spos, skind, depth = _structure(prefix)
        for p in spos[(skind == 5) & (depth == 2)]:
            if _TRACE_EVENTS_KEY.search(prefix, max(0, int(p) - 64), int(p)):
                head = prefix[: int(p) + 1]
                rd.start += int(p) + 1
                break
        if head is None and (rd.eof or len(prefix) > 64 * BLOCK_BYTES):
            raise Unsupported("no traceEvents array")
    after_comma = False
    while not rd.eof:
        rd.fill()
        cut = rd.last_separator()
        if cut is None:
            continue
        if pieces.workers > 1 and not rd.eof:  # parse in workers (a large file)
            pieces.submit_bytes(rd.events_bytes(cut[0]))
        else:
            try:
                events = rd.events_until(cut[0])
            except orjson.JSONDecodeError:
                exact = _exact_separator(rd.data())
                if exact is None:
                    continue
                cut = (exact[0] + rd.start, exact[1] + rd.start)
                events = rd.events_until(cut[0])
            pieces.drain()
            sink.add(events)
            del events
        rd.start = cut[1]
        after_comma = True
    pieces.drain()
    # the rest: the last events, the closing bracket, the metadata after it
    data = rd.data()
    spos, skind, depth = _structure(data)
    closing = spos[(skind == 6) & (depth == -1)]
    if not len(closing):
        raise Unsupported("traceEvents is not closed (truncated file?)")
    j = int(closing[0])
    tail = data[:j]
    if tail.strip(_WS):
        events = _loads_events(tail)
        sink.add(events)
        del events
    elif after_comma:
        raise Unsupported("a comma after the last event")
    suffix = data[j + 1:]
    if b'"traceEvents"' in suffix:
        raise Unsupported("traceEvents appears twice")
    doc = orjson.loads(head + b"]" + suffix)
    if not isinstance(doc, dict) or doc.get("traceEvents") != []:
        raise Unsupported("unexpected document structure")
    return doc


# --------------------------------------------------------------------------- columns


def _infer(values: list) -> Tuple[str, Any]:
    """pandas' dtype for ``values`` as a tag and the values converted to it.

    Tags: ``i8``, ``f8``, ``bool``, ``str`` (values stay a list), ``obj`` (the
    Python objects, a list), ``null`` (only NaN/None: a list).
    """
    if not values:
        return "empty", values
    types = set(map(type, values))
    if types == {int}:
        try:
            return "i8", np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    elif types and types <= {int, float}:
        arr = np.array(values, dtype=np.float64)
        if types == {float} and np.isnan(arr).all():
            return "null", values
        return ("f8i" if int in types else "f8"), arr
    elif types == {str}:
        return "str", values
    if types <= {float, type(None)} and all(v is None or v != v for v in values):
        return "null", values
    dtype = pd.Series(values).dtype
    if dtype == object:
        return "obj", values
    if dtype == STR_DTYPE:
        return "str", values
    if dtype == np.float64:
        return ("f8i" if int in types else "f8"), pd.Series(values).to_numpy()
    if dtype == np.bool_:
        return "bool", np.array(values, dtype=bool)
    raise Unsupported(f"values of dtype {dtype}")


class _Column:
    """One column built piece by piece, with the dtype pandas would infer over
    all its values (not only the rows kept), as ``pd.DataFrame(events)`` or
    ``Series.apply`` infers it."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: List[Tuple[str, Any]] = []

    def add(self, tag: str, kept: Any) -> None:
        self.pieces.append((tag, kept))

    def tag(self) -> str:
        tags = {t for t, _ in self.pieces} - {"empty"}
        real = {("f8" if t == "f8i" else t) for t in tags} - {"null", "absent"}
        has_null = bool(tags & {"null", "absent"})
        if not real:
            nulls = [v for t, vals in self.pieces if t == "null" for v in vals]
            if any(v is None for v in nulls):
                raise Unsupported("a column of JSON nulls only")
            return "f8"
        if real <= {"i8", "f8"}:
            return "f8" if ("f8" in real or has_null) else "i8"
        if len(real) == 1:
            (only,) = real
            if only == "bool" and has_null:
                return "obj"
            return only
        return "obj"

    def build(self) -> Tuple[str, Any]:
        """The column's tag and its values (numpy array or list) for the kept rows."""
        tag = self.tag()
        parts = []
        for t, vals in self.pieces:
            if t == "empty":
                continue
            if t == "f8i":  # (floats, the original ints and NaN)
                vals = vals[0] if tag == "f8" else vals[1]
            if tag == "i8":
                parts.append(vals)
            elif tag == "f8":
                if t in ("null", "absent"):
                    parts.append(np.full(len(vals) if t == "null" else vals, np.nan))
                else:
                    parts.append(np.asarray(vals, dtype=np.float64))
            elif tag == "bool":
                parts.append(vals)
            else:  # str or obj: Python objects
                if t == "absent":
                    parts.append([_NAN] * vals)
                elif isinstance(vals, np.ndarray):  # a numeric piece of an object column
                    parts.append(shared_values(vals.tolist()))
                else:
                    parts.append(vals)
        if tag in ("i8", "f8", "bool"):
            if not parts:
                return tag, np.array([], dtype={"i8": np.int64, "f8": np.float64, "bool": bool}[tag])
            return tag, np.concatenate(parts)
        out: list = []
        for p in parts:
            out.extend(p)
        return tag, out

    def series(self) -> pd.Series:
        tag, values = self.build()
        if tag == "str":
            return pd.Series(values, dtype=STR_DTYPE)
        if tag == "obj":
            return pd.Series(values, dtype=object)
        return pd.Series(values)


def shared_values(values: list) -> list:
    """``values`` with equal values of one type made one shared object.

    HTA keeps ``pid``/``tid`` (when some are names) and shapes such as
    ``input_dims`` as Python objects, one per event: a 300 MB trace held some
    1.4 million int objects and 400,000 lists of lists (~250 MB). Traces
    repeat a few distinct values, so sharing them keeps the column equal
    value for value at a fraction of the memory, and forked workers that read
    the column touch (and so copy) far fewer pages. Lists and dicts are
    compared by their JSON text (ints, floats and bools stay distinct); NaNs
    are never merged. The shared objects must not be mutated in place.
    """
    seen: Dict[Any, Any] = {}
    out = []
    append, dumps = out.append, orjson.dumps
    for v in values:
        t = type(v)
        key = (t, dumps(v)) if t is list or t is dict else (t, v)
        got = seen.get(key)
        if got is None:
            seen[key] = got = v
        append(got)
    return out


def _codes(values: list) -> Tuple[list, np.ndarray]:
    """Distinct strings of ``values`` in order of first appearance and each value's index among them."""
    uniques = list(dict.fromkeys(values))
    if set(map(type, uniques)) - {str}:
        raise Unsupported("a name or category that is not a string")
    ids = {u: i for i, u in enumerate(uniques)}
    return uniques, np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))


def _piece(events: list, arg_specs: List[Tuple[str, str, Any]]) -> dict:
    """The columns of one run of events (a "piece"), with what merging needs to
    reproduce pandas over the whole array: each column's inferred type over
    all the piece's events, the rows HTA keeps (``dur`` and ``cat`` present,
    ``cat`` not ``Trace``), keys in order of first appearance."""
    n = len(events)
    keys = set().union(*events)
    first = {}
    for k in keys:
        i = next(i for i, e in enumerate(events) if k in e)
        first[k] = (i, list(events[i]).index(k))
    cats = list(map(dict.get, events, repeat("cat"), repeat(_NAN)))
    durs = list(map(dict.get, events, repeat("dur"), repeat(_NAN)))
    tss = list(map(dict.get, events, repeat("ts"), repeat(_NAN)))
    dur_tag, dur_vals = _infer(durs)
    ts_tag, ts_vals = _infer(tss)
    for tag in (dur_tag, ts_tag):
        if tag not in ("i8", "f8", "f8i", "null"):
            raise Unsupported("non-numeric ts or dur")
    dur_null = _null_mask(dur_tag, dur_vals, n)
    ts_null = _null_mask(ts_tag, ts_vals, n)
    if dur_null.any():
        # HTA drops complete ("X") events without dur silently; hand such a file to
        # the caller's validating path, which says how many were left out
        phs = np.fromiter((p == "X" for p in map(dict.get, events, repeat("ph"))), dtype=bool, count=n)
        if (phs & dur_null).any():
            raise Unsupported("complete events without dur")
    ok = {}
    cats_seen = set()
    for c in set(cats):
        if type(c) is str:
            ok[c] = c != "Trace"
            cats_seen.add(c)
        elif c is None or (type(c) is float and c != c):
            ok[c] = False
        else:
            raise Unsupported("a category that is not a string")
    keep = np.fromiter(map(ok.__getitem__, cats), dtype=bool, count=n) & ~dur_null
    idx = np.flatnonzero(keep)
    take = idx.tolist()
    kept_events = list(map(events.__getitem__, take))
    columns = {}
    for k in keys:
        if k in _DROPPED or k in ("args", "cat", "name"):
            continue
        if k in ("ts", "dur"):  # numeric in every piece, so never an object column
            tag, vals = (ts_tag, ts_vals) if k == "ts" else (dur_tag, dur_vals)
            tag = "f8" if tag == "f8i" else tag
        else:
            raw = list(map(dict.get, events, repeat(k), repeat(_NAN)))
            tag, vals = _infer(raw)
            if tag == "f8i":  # ints and NaN: floats, unless another piece makes the column object
                columns[k] = (tag, (vals[idx], list(map(raw.__getitem__, take))))
                continue
        if isinstance(vals, np.ndarray):
            columns[k] = (tag, vals[idx])
        else:
            kept = list(map(vals.__getitem__, take))
            columns[k] = (tag, shared_values(kept) if tag == "obj" else kept)
    args = list(map(dict.get, kept_events, repeat("args"), repeat(_EMPTY)))
    if set(map(type, args)) - {dict}:
        args = [a if type(a) is dict else _EMPTY for a in args]
    arg_columns = {}
    for name, raw_name, default in arg_specs:
        raw = list(map(dict.get, args, repeat(raw_name), repeat(default)))
        tag, vals = _infer(raw)
        arg_columns[name] = (tag, (vals, raw) if tag == "f8i" else shared_values(vals) if tag == "obj" else vals)
    return {
        "n": n, "keys": sorted(keys, key=first.__getitem__), "has_args": "args" in keys,
        "cats_seen": cats_seen, "ts_any_null": bool(ts_null.any()),
        "end_any_null": bool((ts_null | dur_null).any()), "keep": idx,
        "cat": _codes(list(map(cats.__getitem__, take))),
        "name": _codes(list(map(dict.get, kept_events, repeat("name"), repeat(_NAN)))),
        "columns": columns, "args": arg_columns,
    }


class _Codes:
    """Strings encoded in order of first appearance over all pieces (like ``Series.unique``)."""

    def __init__(self) -> None:
        self.ids: Dict[str, int] = {}
        self.pieces: List[np.ndarray] = []

    def add(self, uniques: list, codes: np.ndarray) -> None:
        ids = self.ids
        lut = np.array([ids.setdefault(u, len(ids)) for u in uniques], dtype=np.int64)
        self.pieces.append(lut[codes] if len(codes) else codes)

    def codes(self) -> np.ndarray:
        return np.concatenate(self.pieces) if self.pieces else np.array([], dtype=np.int64)


class _Frame:
    """Merges pieces of ``traceEvents`` (see :func:`_piece`) into the columns of HTA's dataframe."""

    def __init__(self, cfg) -> None:
        self.args = [(a.name, a.raw_name, a.default_value) for a in cfg.get_args()]
        self.n_events = 0
        self.keys: Dict[str, None] = {}  # top-level keys in order of first appearance
        self.columns: Dict[str, _Column] = {}
        self.arg_columns = {name: _Column() for name, _, _ in self.args}
        self.kept_rows = 0
        self.positions: List[np.ndarray] = []
        self.cat = _Codes()
        self.name = _Codes()
        self.has_args = False
        self.ts_any_null = False
        self.end_any_null = False
        self.cats_seen: set = set()

    def add(self, events: list) -> None:
        self.merge(_piece(events, self.args))

    def merge(self, piece: dict) -> None:
        base = self.n_events
        self.n_events += piece["n"]
        for k in piece["keys"]:
            if k not in self.keys:
                self.keys[k] = None
                if k not in _DROPPED and k not in ("args", "cat", "name"):
                    col = self.columns[k] = _Column()
                    if base:  # missing from every earlier event
                        col.add("absent", self.kept_rows)
        self.has_args |= piece["has_args"]
        self.cats_seen |= piece["cats_seen"]
        self.ts_any_null |= piece["ts_any_null"]
        self.end_any_null |= piece["end_any_null"]
        keep = piece["keep"]
        nk = len(keep)
        self.kept_rows += nk
        self.positions.append(keep + base)
        self.cat.add(*piece["cat"])
        self.name.add(*piece["name"])
        for k, col in self.columns.items():
            if k in piece["columns"]:
                col.add(*piece["columns"][k])
            else:
                col.add("absent", nk)
        for name, col in self.arg_columns.items():
            col.add(*piece["args"][name])

    def frame(self):
        """HTA's dataframe (``_compress_df`` done) and local symbol table."""
        from hta.common.trace_symbol_table import TraceSymbolTable

        if "cuda_profiler_range" in self.cats_seen:
            raise Unsupported("cuda_profiler_range counters")
        if self.n_events == 0 or "ts" not in self.keys or "name" not in self.keys or "index" in self.keys:
            raise Unsupported("HTA fails on this trace; let it say how")
        if "dur" not in self.keys or "cat" not in self.keys:
            return pd.DataFrame(), TraceSymbolTable()
        if not self.has_args:
            raise Unsupported("no args anywhere")
        positions = np.concatenate(self.positions)
        nrows = len(positions)
        cols: Dict[str, Any] = {"index": positions}
        ts_float = self.columns["ts"].tag() == "f8"
        for k in self.keys:
            if k in _DROPPED or k == "args":
                continue
            if k in ("cat", "name"):
                cols[k] = None  # filled after the symbol table
            else:
                cols[k] = self.columns[k].series()
        if ts_float:  # HTA's round_down_time_stamps (ns-resolution traces)
            ts = cols["ts"].to_numpy(dtype=np.float64)
            end = ts + cols["dur"].to_numpy(dtype=np.float64)
            ts_c, end_f = np.ceil(ts), np.floor(end)
            keep = ~np.isnan(end_f)
            new_ts = pd.Series(ts_c.astype(np.float64) if self.ts_any_null else ts_c.astype(np.int64))
            new_end = pd.Series(end_f if self.end_any_null else end_f.astype(np.int64))
            cols["ts"], cols["end"] = new_ts, new_end
            cols["dur"] = new_end - new_ts
            if not keep.all():
                raise Unsupported("events whose ts is missing")
        for name, _, _ in self.args:
            cols[name] = self.arg_columns[name].series()

        # the local symbol table, built as _compress_df builds it
        cat_codes, name_codes = self.cat.codes(), self.name.codes()
        table = TraceSymbolTable()
        # sets built from sequences, as from Series.unique(): a set built from a
        # dict is presized and would iterate in another order
        symbols = set(list(self.cat.ids)).union(set(list(self.name.ids)))
        table.add_symbols(symbols)
        sym_index = table.get_sym_id_map()
        cat_lut = np.array([sym_index[s] for s in self.cat.ids], dtype=np.int64)
        name_lut = np.array([sym_index[s] for s in self.name.ids], dtype=np.int64)
        cols["cat"] = pd.Series(cat_lut[cat_codes] if nrows else np.array([], dtype=np.int64))
        cols["name"] = pd.Series(name_lut[name_codes] if nrows else np.array([], dtype=np.int64))

        if nrows == self.n_events:
            index = pd.RangeIndex(nrows)
        else:
            index = pd.Index(positions, dtype=np.int64)
        df = pd.DataFrame({k: (v.to_numpy() if isinstance(v, pd.Series) and not isinstance(v.dtype, pd.StringDtype)
                               else v.array if isinstance(v, pd.Series) else v)
                           for k, v in cols.items()}, index=index, copy=False)
        if "stream" in df.columns:  # HTA's normalize_gpu_stream_numbers
            df["stream"] = pd.to_numeric(df["stream"], errors="coerce").fillna(-1).astype(int)
        for col in df.columns:  # HTA's integer downcast
            if df[col].dtype.kind == "i":
                df[col] = pd.to_numeric(df[col], errors="coerce", downcast="integer")
        return df, table


def _null_mask(tag: str, vals: Any, n: int) -> np.ndarray:
    if tag == "null":
        return np.ones(n, dtype=bool)
    if tag in ("f8", "f8i"):
        return np.isnan(vals)
    return np.zeros(n, dtype=bool)


# --------------------------------------------------------------------------- HTA's post-processing


def _parse(path: str, cfg, workers: int = 1):
    from hta.common.trace import add_fwd_bwd_links, transform_correlation_to_index
    from hta.common.trace_parser import MetaDataKey, infer_gpu_type

    sink = _Frame(cfg)
    doc = _read(path, sink, workers)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    df, table = sink.frame()
    meta[str(MetaDataKey.DEVICE_TYPE)] = infer_gpu_type(meta, table.get_sym_id_map())
    if df.empty:
        return meta, df, table
    add_fwd_bwd_links(df)
    df = transform_correlation_to_index(df, table)
    _add_iteration(df, table)
    df["end"] = df["ts"] + df["dur"]
    return meta, df, table


def _step_lookup(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """HTA's ``_get_profiler_step`` for every ``ts``: the number of the last step
    (in row order) with ``start <= ts < end``, else -1."""
    out = np.full(len(ts), -1.0)
    if not len(starts) or not len(ts):
        return out
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    if (e[:-1] <= s[1:]).all():  # disjoint steps: at most one holds each ts
        i = np.searchsorted(s, ts, side="right") - 1
        valid = i >= 0
        i = np.where(valid, i, 0)
        hit = valid & (ts < e[i])
        out[hit] = numbers[order][i[hit]]
        return out
    for start, end, number in zip(starts, ends, numbers):
        out[(ts >= start) & (ts < end)] = number
    return out


def _add_iteration(df: pd.DataFrame, table) -> None:
    """HTA's ``add_iteration`` without its per-row ``apply`` calls."""
    if "index_correlation" not in df.columns:
        raise Unsupported("no correlation column: HTA's add_iteration fails")
    sym_index = table.get_sym_id_map()
    step_ids = [i for s, i in sym_index.items() if s.startswith("ProfilerStep")]
    names = df["name"].to_numpy()
    rows = np.flatnonzero(np.isin(names, step_ids)) if step_ids else np.array([], dtype=np.int64)
    sym = table.get_sym_table()
    number_of = {}
    for i in np.unique(names[rows]):
        m = _STEP_NUMBER.match(sym[i])
        if m is None:
            raise Unsupported(f"unparsable profiler step {sym[i]!r}")
        number_of[int(i)] = int(m.group(1))
    ts = df["ts"].to_numpy()
    dur = df["dur"].to_numpy()
    if ts.dtype.kind == "i" and len(ts) and np.abs(ts).max() >= _EXACT_FLOAT_INT and dur.dtype.kind == "f":
        raise Unsupported("timestamps too large to compare as float64")
    starts = ts[rows]
    ends = starts + dur[rows]
    numbers = np.array([number_of[int(i)] for i in names[rows]], dtype=np.float64)
    stream = df["stream"].to_numpy()
    iteration = np.full(len(df), np.nan)
    host = stream < 0
    iteration[host] = _step_lookup(ts[host], starts, ends, numbers)
    if "cpu_op" in sym_index:
        m0 = (stream == 0) & (df["cat"].to_numpy() == sym_index["cpu_op"])
        iteration[m0] = _step_lookup(ts[m0], starts, ends, numbers)
    gpu = stream > 0
    if gpu.any():
        x = df["index_correlation"].to_numpy()[gpu].astype(np.int64)
        labels = df.index.to_numpy()
        linked = x > 0
        at = np.searchsorted(labels, x[linked])
        if (at >= len(labels)).any() or (labels[np.minimum(at, len(labels) - 1)] != x[linked]).any():
            raise Unsupported("index_correlation points outside the frame")
        vals = np.full(len(x), -1.0)
        vals[linked] = iteration[at]
        iteration[gpu] = vals
    df["iteration"] = pd.to_numeric(pd.Series(iteration, index=df.index), downcast="integer")
