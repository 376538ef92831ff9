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
import functools
import gc
import logging
import re
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import msgspec
import numpy as np
import orjson
import pandas as pd

from .. import progress
from ..errors import TraceError
from . import fastnative, sizecap
from .compat import ENCLOSING_STEPS, EXTERNAL_ID_LINKS, SHARED_CORRELATIONS, correlation_to_index, drop_enclosing_steps, is_legacy_annotation, modern_category
from .iteration import add_iteration
from .repair import REPAIRED_NAMES, repair_names
from .validation import MAX_ABS_TIME_US
from .exact import EXACT_COLUMNS, EXACT_DUR, EXACT_TS, will_round  # noqa: F401 (the columns, re-exported)
from .memory_events import NEEDLE as MEMORY_NEEDLE, note_absent
from .whitespace import IS_WHITESPACE, Collapser

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

logger = logging.getLogger(__name__)

#: Bumped whenever the dataframe this module produces may change (a parse-cache key).
PARSER_VERSION = "6"
#: Bytes of decompressed JSON read at a time; one block's events are parsed together.
BLOCK_BYTES = 8 << 20
#: Columns HTA drops from the event dataframe.
_DROPPED = frozenset(("ph", "id", "bp", "s"))
_WS = b" \t\n\r"
_NAN = float("nan")
_EMPTY: dict = {}
_ABSENT = object()
STR_DTYPE = pd.Series(["x"]).dtype  # what pandas infers for strings here (``str`` in pandas 3)
_TRACE_EVENTS_OPEN = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')


#: The trace metadata key saying which reader ran (see :data:`.fastnative.PARSER_USED`).
PARSER_USED = fastnative.PARSER_USED


def parser_used(pieces: Dict[str, int]) -> str:
    """``native``, ``python`` or ``native and python`` (the native reader read
    some pieces, the Python reader the rest), from the pieces each read."""
    used = [p for p in ("native", "python") if pieces.get(p)]
    return " and ".join(used) or "python"


class Unsupported(Exception):
    """The input is outside what the fast path reproduces exactly; HTA's parser takes it."""


# --------------------------------------------------------------------------- entry point


def parse_trace_file(path, cfg=None, fallback: bool = True, workers: int = 1, exact_times: bool = False,
                     max_bytes: Optional[int] = None):
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
        exact_times: also keep the times HTA rounds (see :func:`hta_report.load.exact.add_exact_times`).
        max_bytes: the size cap of a gzipped file, enforced while inflating it
            (:mod:`hta_report.load.sizecap`); None: no cap.

    Returns:
        ``(meta, df, symbol_table)`` as HTA returns them (with ``exact_times``,
        plus the :data:`EXACT_TS` and :data:`EXACT_DUR` columns where HTA rounded).

    Raises:
        hta_report.errors.TraceError: the file inflates past ``max_bytes`` (never
            handed to HTA's parser).
    """
    from hta.configs.parser_config import ParserConfig

    from ..files import bare

    path = str(path)
    if not (bare(path).endswith(".gz") or bare(path).endswith(".json")):
        raise ValueError(f"expect the value of trace_file ({path}) ends with '.gz' or 'json'")
    cfg = cfg or ParserConfig.get_default_cfg()
    try:
        _check_config(cfg)
        with _gc_paused():
            try:
                return _parse(path, cfg, workers, exact_times, max_bytes)
            except _BadCut:  # a cut the parallel reader could not check: read again, in order
                return _parse(path, cfg, 1, exact_times, max_bytes)
    except (MemoryError, KeyboardInterrupt, TraceError):
        raise
    except Exception as exc:
        if not fallback:
            raise
        logger.debug("fast parser handed %s to HTA's parser: %s: %s", path, type(exc).__name__, exc)
        return hta_parse_trace_file(path, cfg, exact_times)


def hta_parse_trace_file(path, cfg=None, exact_times: bool = False):
    """HTA's own ``parse_trace_file`` (the reference implementation); with
    ``exact_times``, the times it rounds are kept as in :func:`parse_trace_file`
    (by running HTA's functions as it does, :func:`hta_report.load.hta_parser.hta_parse`)."""
    if exact_times:
        from .hta_parser import hta_parse

        return hta_parse(path, cfg, exact_times=True)
    from hta.common.trace import parse_trace_file as _hta

    meta, df, table = _hta(str(path), cfg)
    meta[PARSER_USED] = "hta"
    return meta, df, table


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


_WS_RUN = re.compile(rb"[ \t\n\r]*")


def _ws_before(buf: bytearray, i: int, lo: int) -> int:
    """The index of the last byte before ``i`` (not before ``lo``) that is not
    whitespace, or ``lo - 1``."""
    j = i - 1
    for _ in range(16):  # the usual case: none or a few
        if j < lo or buf[j] not in _WS:
            return j
        j -= 1
    with memoryview(buf) as mv:
        other = np.flatnonzero(~IS_WHITESPACE[np.frombuffer(mv[lo:j + 1], dtype=np.uint8)])
    return lo + int(other[-1]) if len(other) else lo - 1


def _ws_end(buf: Union[bytes, bytearray], start: int, end: int) -> int:
    """The index of the first byte of ``buf[start:end]`` that is not JSON whitespace (``end`` when none)."""
    m = _WS_RUN.match(buf, start, end)
    assert m is not None  # a run of zero or more bytes matches anywhere
    return m.end()


class _Buffer:
    """Decompressed bytes read block by block into one reusable buffer.

    The unread data lives in ``buf[1:end]``; ``buf[0]`` holds ``[`` so that a run
    of events ``buf[1:j+1]`` parses as one JSON array once ``buf[j+1]`` is set to
    ``]``, without copying it. Unread data that grows past a block without an
    event boundary has its runs of whitespace cut short (:meth:`squeeze`).
    """

    def __init__(self, path: str, max_bytes: Optional[int] = None) -> None:
        from ..files import bare, open_text_stream

        self.path = path
        self.gz = bare(path).endswith(".gz")
        self.fh = open_text_stream(path)  # a local path or a URL (fsspec); ISA-L inflate when installed
        #: the file as stored (under the gzip reader), whose position is the progress in bytes
        self._stored_fh: Any = getattr(self.fh, "fileobj", None) if self.gz else None
        self._stored = 0
        self.max_bytes = max_bytes if self.gz else None
        self.total = 0
        # room for a block after the part of an event a cut leaves (< 64 KB in Kineto's traces)
        # without growing the buffer
        self.buf = bytearray(BLOCK_BYTES + 1 + (1 << 16))
        self.buf[0] = 0x5B
        self.start = self.end = 1
        self.eof = False
        self.collapser: Optional[Collapser] = None
        self.clean = 1  # the unread data before this index is squeezed
        #: whether the bytes read so far hold ``"[memory]"`` (see :func:`~.memory_events.note_absent`)
        self.memory_seen = False
        self._tail = b""  # the last bytes read, for a needle cut by a block's end

    def advance(self, start: int) -> None:
        """Mark the data before ``start`` (outside any string) as read."""
        self.start = self.clean = start
        self.collapser = None

    def squeeze(self) -> None:
        """Once the unread data passes a block (no event ends in it: one huge
        event, or a run of whitespace), cut each run of whitespace outside
        strings in it to one byte (:class:`~hta_report.load.whitespace.Collapser`),
        and then each block read until the next cut (:meth:`advance`): a valid
        trace padded with gigabytes of whitespace is read in the memory of its
        events."""
        if self.collapser is None and self.end - self.start <= BLOCK_BYTES:
            return
        if self.collapser is None:
            self.collapser, self.clean = Collapser(), self.start
        with memoryview(self.buf) as mv:
            text = bytes(mv[self.clean:self.end])
        out = self.collapser.feed(text)
        self.buf[self.clean:self.clean + len(out)] = out
        self.end = self.clean = self.clean + len(out)

    def close(self) -> None:
        self.fh.close()

    def fill(self) -> None:
        """Move the unread data to the front and read one more block after it."""
        buf, r = self.buf, self.end - self.start
        if self.start > 1:
            buf[1:1 + r] = buf[self.start:self.end]
        self.clean -= self.start - 1
        self.start, self.end = 1, 1 + r
        if len(buf) - self.end < BLOCK_BYTES:
            buf.extend(bytes(BLOCK_BYTES + self.end - len(buf)))
        with memoryview(buf) as mv:
            n = self.fh.readinto(mv[self.end:self.end + BLOCK_BYTES])
        if n and not self.memory_seen:
            lo, keep = self.end, len(MEMORY_NEEDLE) - 1
            head = bytes(buf[lo:lo + min(n, keep)])
            self.memory_seen = fastnative.find(buf, MEMORY_NEEDLE, lo, lo + n) >= 0 or MEMORY_NEEDLE in self._tail + head
            self._tail = (self._tail + bytes(buf[max(lo, lo + n - keep):lo + n]))[-keep:]
        self.end += n
        self.eof = n == 0
        self.total += n
        self._count_stored(n)
        sizecap.check(self.path, self.total, self.max_bytes)

    def _count_stored(self, n: int) -> None:
        """Add the bytes of the file as stored that this block consumed to the
        run's progress (:func:`hta_report.progress.add_bytes`): ``n`` for a
        plain file, the compressed reader's advance for a gzip."""
        if not self.gz:
            progress.add_bytes(n)
            return
        try:
            pos = int(self._stored_fh.tell()) if self._stored_fh is not None else self._stored
        except (OSError, ValueError, AttributeError, TypeError):
            return
        progress.add_bytes(pos - self._stored)
        self._stored = pos

    def data(self) -> bytes:
        with memoryview(self.buf) as mv:  # one copy (a bytearray slice would be a second)
            return bytes(mv[self.start:self.end])

    def last_separator(self) -> Optional[Tuple[int, int]]:
        """The last ``}`` , ``{`` (whitespace allowed) in the unread data: (index
        of ``}``, index after the comma). A candidate only: a cut inside a string
        or a nested object leaves an unbalanced run that orjson rejects."""
        buf, lo, hi = self.buf, self.start, self.end
        i = buf.rfind(b",", lo, hi)
        while i > lo:
            j = _ws_before(buf, i, lo)
            k = _ws_end(buf, i + 1, hi)
            if j >= lo and buf[j] == 0x7D and k < hi and buf[k] == 0x7B:
                return j, i + 1
            i = buf.rfind(b",", lo, i)
        return None

    def events_bytes(self, close: int) -> bytes:
        """A copy of the events up to ``close`` (a ``}``) as a JSON array."""
        with self.events_view(close) as view:
            return bytes(view)

    @contextlib.contextmanager
    def events_view(self, close: int) -> Iterator[memoryview]:
        """The events from the start of the unread data to ``close`` (a ``}``)
        as a JSON array, without a copy (valid inside the ``with`` only): the
        byte before them is ``[`` and the one after ``]`` meanwhile."""
        buf, lo = self.buf, self.start - 1
        saved_lo, saved = buf[lo], buf[close + 1]
        buf[lo], buf[close + 1] = 0x5B, 0x5D
        try:
            with memoryview(buf) as mv, mv[lo:close + 2] as view:
                yield view
        finally:
            buf[lo], buf[close + 1] = saved_lo, saved


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


class _BadCut(Exception):
    """A piece sent to a worker did not parse: maybe a wrong cut, maybe bad JSON."""


def _piece_from_bytes(raw, arg_specs) -> dict:
    """One run of events (the bytes of a JSON array) as a piece (see
    :func:`_piece`): decoded straight into typed structs (:func:`_typed_piece`)
    when every event fits them, else into dicts (:func:`_piece`). Events whose
    name Kineto left unescaped (:func:`~.repair.repair_names`) are repaired
    when ``raw`` does not parse: the piece then says how many (``repaired``)
    and holds the repaired text (``raw``). The native reader
    (:func:`native_piece`) reads it first where it is built and
    enabled; the bytes it does not take are read here (``piece["parser"]``
    says which did).

    Raises:
        _BadCut: ``raw`` is not valid JSON, repaired or not (a wrong cut, or bad JSON).
        Unsupported: an element is not an object, or values the fast path
            does not reproduce.
    """
    if fastnative.enabled():
        piece = native_piece(raw, arg_specs)
        if piece is not None:
            return piece
    if isinstance(raw, memoryview):
        # msgspec.Raw values (object args) keep the buffer they were decoded from exported; an
        # error raised while they are alive (Unsupported, in a traceback's frames, kept while the
        # cyclic collector is paused) would leave the reader's buffer exported and its release
        # would raise BufferError in its place: decode a copy (~1 ms per 8 MB run)
        raw = bytes(raw)
    try:
        return _decoded_piece(raw, arg_specs)
    except _BadCut:
        fixed, repaired = repair_names(bytes(raw))
        if not repaired:
            raise
        piece = _decoded_piece(fixed, arg_specs)
        piece["repaired"], piece["raw"] = repaired, fixed
        return piece


def _decoded_piece(raw, arg_specs) -> dict:
    """:func:`_piece_from_bytes` without the repair."""
    with _gc_paused():
        try:
            events = _typed_decoder(arg_specs)[0].decode(raw)
        except msgspec.ValidationError:
            events = None  # a key or a value type the structs do not take: dicts
        except msgspec.DecodeError as exc:
            raise _BadCut(str(exc)) from None
        if events is not None:
            return _typed_piece(events, arg_specs)
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
        self.pool: Optional[ProcessPoolExecutor] = None
        self.pending: List[Any] = []

    def submit_bytes(self, raw: bytes) -> None:
        if self.pool is None:
            from .. import workers

            self.pool = workers.pool(self.workers)
        self.pending.append((self.pool.submit(_piece_from_bytes, raw, self.sink.args), raw))
        while len(self.pending) > 2 * self.workers:
            self._merge_first()

    def _merge_first(self) -> None:
        future, raw = self.pending.pop(0)
        self.sink.merge(future.result(), raw)

    def drain(self) -> None:
        while self.pending:
            self._merge_first()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _merge_view(rd: _Buffer, close: int, sink: "_Frame", pieces: _Pieces) -> None:
    """Parse the events up to ``close`` here and merge them after the pieces
    still in workers. Raises :class:`_BadCut` when they are not valid JSON."""
    with rd.events_view(close) as raw:
        piece = _piece_from_bytes(raw, sink.args)
        pieces.drain()
        sink.merge(piece, raw)


def _read(path: str, sink: "_Frame", workers: int = 1, max_bytes: Optional[int] = None) -> dict:
    """Stream ``path``'s events into ``sink`` a block at a time; returns the
    parsed document with an empty ``traceEvents``."""
    rd = _Buffer(path, max_bytes)
    pieces = _Pieces(sink, workers)
    try:
        doc = _read_from(rd, sink, pieces)
        if not rd.memory_seen:  # every byte was read: the [memory] pass would find nothing
            note_absent(path)
        return doc
    finally:
        pieces.close()
        rd.close()


def _events_array(prefix: bytes) -> Optional[int]:
    """The index of the ``[`` opening the top-level ``traceEvents`` array in
    ``prefix`` (the start of the document), or None. The bracket structure is
    computed only up to each candidate, not over the whole block."""
    for m in _TRACE_EVENTS_OPEN.finditer(prefix):
        p = m.end() - 1
        spos, skind, depth = _structure(prefix[: p + 1])
        if len(spos) and spos[-1] == p and depth[-1] == 2:  # not inside a string or a nested value
            return p
    return None


def _read_from(rd: _Buffer, sink: "_Frame", pieces: _Pieces) -> dict:
    head = None
    while head is None:  # the part before the traceEvents array (metadata, usually small)
        rd.fill()
        rd.squeeze()
        prefix = rd.data()
        lead = _ws_end(prefix, 0, len(prefix))
        if lead < len(prefix) and prefix[lead] != 0x7B:
            raise Unsupported("the document is not a JSON object")
        p = _events_array(prefix)
        if p is not None:
            head = prefix[: p + 1]
            rd.advance(rd.start + p + 1)
        if head is None and (rd.eof or len(prefix) > 64 * BLOCK_BYTES):
            raise Unsupported("no traceEvents array")
    after_comma = False
    # the events read with the head first: a second block is read only after them, so the
    # buffer holds one block, not two (8 MB less, no growth to fault in, no block moved)
    first = True
    while not rd.eof:
        if not first:
            rd.fill()
        first = False
        if rd.collapser is not None:  # squeezing since the last cut: squeeze the new block first
            rd.squeeze()
        cut = rd.last_separator()
        if cut is None:
            rd.squeeze()
            continue
        if pieces.workers > 1 and not rd.eof:  # parse in workers (a large file)
            pieces.submit_bytes(rd.events_bytes(cut[0]))
        else:
            try:
                _merge_view(rd, cut[0], sink, pieces)
            except _BadCut:
                exact = _exact_separator(rd.data())
                if exact is None:
                    rd.squeeze()
                    continue
                cut = (exact[0] + rd.start, exact[1] + rd.start)
                _merge_view(rd, cut[0], sink, pieces)
        rd.advance(cut[1])
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
        raw = b"[" + tail + b"]"
        try:
            piece = _piece_from_bytes(raw, sink.args)
        except _BadCut as exc:
            raise Unsupported(f"invalid JSON in the last events: {exc}") from None
        sink.merge(piece, raw)
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


def _infer(values: list, types: Optional[set] = None) -> Tuple[str, Any]:
    """pandas' dtype for ``values`` as a tag and the values converted to it
    (``types``: the set of their types, when known).

    Tags: ``i8``, ``f8``, ``bool``, ``str`` (values stay a list), ``obj`` (the
    Python objects, a list), ``null`` (only NaN/None: a list).
    """
    if not values:
        return "empty", values
    if types is None:
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
    elif str in types and types & {int, bool, list, dict}:
        # a string beside a value that is neither a string nor missing: pandas keeps
        # objects (Kineto's pid and tid: ints, and names such as "Spans")
        return "obj", values
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
        decoded: Dict[bytes, Any] = {}  # JSON text -> its value, shared by the pieces
        for t, vals in self.pieces:
            if t == "empty":
                continue
            if t == "f8i":  # (floats, the original ints and NaN)
                vals = vals[0] if tag == "f8" else vals[1]
                if isinstance(vals, _Values):  # the native reader's: made only here
                    vals = vals.values()
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
                elif isinstance(vals, _Texts):
                    parts.append(_decoded(vals, decoded))
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


def _decoded(piece: "_Texts", decoded: Dict[bytes, Any]) -> list:
    """The values of a :class:`_Texts` piece, each distinct text decoded once
    across pieces (``decoded``: text -> value)."""
    values = np.empty(len(piece.texts), dtype=object)
    for i, text in enumerate(piece.texts):
        value = decoded.get(text, _ABSENT)
        if value is _ABSENT:
            value = decoded[text] = msgspec.json.decode(text)
        values[i] = value
    return values[piece.codes].tolist() if len(piece.codes) else []


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
    if set(map(type, values)) <= {int, str}:  # no two of these types compare equal
        return list(map(seen.setdefault, values, values))
    out: List[Any] = []
    append, dumps = out.append, orjson.dumps
    for v in values:
        t = type(v)
        key = (t, dumps(v)) if t is list or t is dict else (t, v)
        got = seen.get(key)
        if got is None:
            seen[key] = got = v
        append(got)
    return out


def _codes(values: list, check: bool = True) -> Tuple[list, np.ndarray]:
    """Distinct strings of ``values`` in order of first appearance and each
    value's index among them (``check``: raise :class:`Unsupported` for a value
    that is not a string)."""
    uniques = list(dict.fromkeys(values))
    if check and set(map(type, uniques)) - {str}:
        raise Unsupported("a name or category that is not a string")
    ids = {u: i for i, u in enumerate(uniques)}
    return uniques, np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))


#: The top-level keys of Kineto's events, the fields of the typed structs.
_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s")


@functools.lru_cache(maxsize=8)
def _typed_decoder(arg_specs: Tuple[Tuple[str, str, Any, bool], ...]):
    """A msgspec decoder of a JSON array of events into structs, and the args
    struct with its defaults. Every field defaults to the one NaN object
    :data:`_NAN` (a missing key, as ``dict.get(key, NaN)`` reads it); args
    default to HTA's defaults (``arg_specs``: name, raw name, default, whether
    HTA keeps it as a Python object). Object args (shapes, types) stay JSON
    text (``msgspec.Raw``), decoded once per distinct text (:func:`_decode_shared`).
    The types are those of well-formed Kineto traces (``ts`` a number, ``pid``
    an int or a string...); an unknown top-level key or another type raises
    ``msgspec.ValidationError`` and the piece is decoded into dicts instead."""
    args = msgspec.defstruct(
        "Args", [(f"a{i}", msgspec.Raw, msgspec.Raw(orjson.dumps(default))) if obj else (f"a{i}", Any, default)
                 for i, (_, _, default, obj) in enumerate(arg_specs)],
        rename={f"a{i}": spec[1] for i, spec in enumerate(arg_specs)}, gc=False)
    number, ident = Union[int, float], Union[int, str]
    types = {"ph": str, "cat": str, "name": str, "pid": ident, "tid": ident, "ts": number, "dur": number,
             "args": args, "id": Any, "bp": Any, "s": Any}
    event = msgspec.defstruct("Event", [(k, types[k], _NAN) for k in _FIELDS], forbid_unknown_fields=True, gc=False)
    # a Struct made at run time (msgspec.defstruct) is no type mypy can use in List[...]
    return msgspec.json.Decoder(List[event]), args  # type: ignore[valid-type]


def _typed_piece(events: list, arg_specs) -> dict:
    """:func:`_piece` for events decoded into the structs of :func:`_typed_decoder`.

    A struct does not keep the order of its keys; ``first`` gives, for each
    key, the first event holding it, and the merge reads the order of the keys
    of such an event from the text only when two new keys first appear in it
    (:func:`_key_order`)."""
    n = len(events)
    values = _struct_fields(events)
    fields = list(values)
    # the types of the columns built from the values (cat, name and args are a str or a
    # struct where present: their types are not needed; ph is dropped)
    types = {k: set(map(type, values[k])) for k in ("pid", "tid", "ts", "dur")}
    first: Dict[str, int] = {}
    for k in fields[:-1]:  # present where not the NaN default; a float only there, but in ts and dur
        if k not in types:
            i = 0 if n and values[k][0] is not _NAN else _first_present(values[k])
            if i < n:
                first[k] = i
            continue
        t = types[k]
        if t and float not in t:
            first[k] = 0
        elif t and (k in ("ts", "dur") or len(t) > 1):
            i = _first_present(values[k])
            if i < n:
                first[k] = i

    def kept_args(take: List[int]):
        args = list(map(values["args"].__getitem__, take))
        defaults = _typed_decoder(arg_specs)[1]()
        if args.count(_NAN):
            args = [defaults if a is _NAN else a for a in args]
        names = [f"a{i}" for i in range(len(arg_specs))]
        if len(names) > 1 and args:
            # the struct's fields are a0, a1... in this order: astuple reads them all in C
            # (a 28 MB rank's args: 59 ms, against 79 ms with attrgetter(*names))
            columns = list(zip(*map(msgspec.structs.astuple, args)))
        else:
            columns = [tuple(map(attrgetter(a), args)) for a in names]

        def arg(i: int) -> Tuple[Union[Tuple[list, _Texts], Sequence[Any]], bool]:
            if arg_specs[i][3]:
                return _decode_shared(columns[i], getattr(defaults, names[i])), True
            return columns[i], False
        return arg

    piece = _columns(n, set(first), values.__getitem__, types.__getitem__, kept_args, arg_specs)
    piece["keys"] = sorted(first, key=first.__getitem__)
    piece["first"] = first
    return piece


def _struct_fields(events: list) -> Dict[str, list]:
    """The values of the fields the columns are built from (not ``id``, ``bp``,
    ``s``), one list per field, ``ph`` last. A comprehension per field reads
    attributes about twice as fast as ``zip(*map(attrgetter(...)))``."""
    return {"cat": [e.cat for e in events], "name": [e.name for e in events], "pid": [e.pid for e in events],
            "tid": [e.tid for e in events], "ts": [e.ts for e in events], "dur": [e.dur for e in events],
            "args": [e.args for e in events], "ph": [e.ph for e in events]}


def _first_present(values) -> int:
    """Index of the first value that is not the missing-key default."""
    for i, v in enumerate(values):
        if v is not _NAN:
            return i
    return len(values)


class _Texts:
    """An object column of a piece as its distinct JSON texts and, per row, the
    index of its text: what a worker sends back instead of the objects. The
    frame decodes each distinct text of all pieces once (:meth:`_Column.build`),
    so that the objects it keeps (shapes, types) are few, shared and made
    together, not one set per piece left scattered through the heap."""

    __slots__ = ("texts", "codes")

    def __init__(self, texts: List[bytes], codes: np.ndarray) -> None:
        self.texts, self.codes = texts, codes

    def __len__(self) -> int:
        return len(self.codes)


def _decode_shared(raws: Sequence[msgspec.Raw], default: Optional[msgspec.Raw] = None) -> Tuple[list, _Texts]:
    """The distinct values of JSON texts, each decoded once (in order of first
    appearance), and the texts as :class:`_Texts`. A column holding only the
    arg's ``default`` text (an arg the piece never has: ``In split size`` in
    most traces) is recognized by one ``list.count``, without a ``bytes``
    copy and a lookup per row (12 ms per 90,000 events)."""
    n = len(raws)
    if default is not None and n and raws[0] == default and raws.count(default) == n:
        text = bytes(default)
        return [msgspec.json.decode(text)], _Texts([text], np.zeros(n, dtype=np.int32))
    texts = _texts_of(raws)
    uniques = list(dict.fromkeys(texts))
    ids = {t: i for i, t in enumerate(uniques)}
    codes = np.fromiter(map(ids.__getitem__, texts), dtype=np.int32, count=len(texts))
    return [msgspec.json.decode(t) for t in uniques], _Texts(uniques, codes)


def _texts_of(raws: Sequence[msgspec.Raw]) -> List[bytes]:
    """Each JSON text as ``bytes`` (to hash): joined and split again in C, twice
    as fast as ``bytes()`` on each ``msgspec.Raw`` (9 against 18 ms for 91,500).
    Valid JSON holds no NUL byte (in a string it is written ``\\u0000``); each NUL
    byte inside a text adds a part, so where the count differs the texts are
    converted one by one."""
    texts = b"\x00".join(raws).split(b"\x00") if raws else []
    return texts if len(texts) == len(raws) else list(map(bytes, raws))


def _first_texts(raw, count: int, prefix: int = 1 << 16) -> List[msgspec.Raw]:
    """The texts of the first ``count`` (or more) events of ``raw`` (a JSON
    array of events): from its first ``prefix`` bytes cut after an event
    when they hold enough (the usual case: new keys appear in the first
    events), else from all of it."""
    with memoryview(raw) as mv:
        head = bytes(mv[1:prefix])
    cut = _exact_separator(head) if len(raw) > prefix else None
    if cut is not None:
        texts = msgspec.json.decode(b"[" + head[:cut[0] + 1] + b"]", type=List[msgspec.Raw])
        if len(texts) >= count:
            return texts
    return msgspec.json.decode(raw, type=List[msgspec.Raw])


def _key_order(raw, first: Dict[str, int], keys: List[str]) -> List[str]:
    """``keys`` (of a piece decoded into structs) in order of first appearance
    in ``raw`` (the piece's JSON array): by first event, then by position in it."""
    by_event: Dict[int, List[str]] = {}
    for k in keys:
        by_event.setdefault(first[k], []).append(k)
    if all(len(v) == 1 for v in by_event.values()):
        return sorted(keys, key=first.__getitem__)
    texts = _first_texts(raw, max(by_event) + 1)
    out: List[str] = []
    for i in sorted(by_event):
        order = list(orjson.loads(bytes(texts[i])))
        out += sorted(by_event[i], key=order.index)
    return out


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
    cache: Dict[str, list] = {}

    def getter(k: str) -> list:
        if k not in cache:
            cache[k] = list(map(dict.get, events, repeat(k), repeat(_NAN)))
        return cache[k]

    def kept_args(take: List[int]):
        kept = list(map(events.__getitem__, take))
        args = list(map(dict.get, kept, repeat("args"), repeat(_EMPTY)))
        if set(map(type, args)) - {dict}:
            args = [a if type(a) is dict else _EMPTY for a in args]
        return lambda i: (list(map(dict.get, args, repeat(arg_specs[i][1]), repeat(arg_specs[i][2]))), False)

    piece = _columns(n, keys, getter, lambda k: set(map(type, getter(k))), kept_args, arg_specs)
    piece["keys"] = sorted(keys, key=first.__getitem__)
    piece["first"] = None
    return piece


def _columns(n: int, keys: set, getter, types, kept_args, arg_specs) -> dict:
    """The piece of ``n`` events (see :func:`_piece`) from accessors: ``keys``
    present, ``getter(key)`` the values of a key (NaN where missing) and
    ``types(key)`` the set of their types, ``kept_args(rows)(i)`` the values
    of the ``i``-th arg spec in those rows (HTA's default where missing) and
    whether equal values are already one object."""
    cats, durs, tss = getter("cat"), getter("dur"), getter("ts")
    dur_tag, dur_vals = _infer(durs, types("dur"))
    ts_tag, ts_vals = _infer(tss, types("ts"))
    for tag, vals in ((dur_tag, dur_vals), (ts_tag, ts_vals)):
        if tag not in ("i8", "f8", "f8i", "null"):
            raise Unsupported("non-numeric ts or dur")
        if tag != "null" and len(vals) and float(np.nanmax(np.abs(vals))) > MAX_ABS_TIME_US:
            # the validating path leaves such events out and says so (HTA would cast them to -2**63)
            raise Unsupported("a ts or dur beyond ±2**53 µs")
    dur_null = _null_mask(dur_tag, dur_vals, n)
    ts_null = _null_mask(ts_tag, ts_vals, n)
    if dur_null.any():
        # HTA drops complete ("X") events without dur silently; hand such a file to
        # the caller's validating path, which says how many were left out
        if "X" in set(map(getter("ph").__getitem__, np.flatnonzero(dur_null).tolist())):
            raise Unsupported("complete events without dur")
    cat_uniques, cat_codes = _codes(cats, check=False)
    cats_seen = set()
    present = np.zeros(len(cat_uniques), dtype=bool)
    for i, c in enumerate(cat_uniques):
        if type(c) is str:
            present[i] = True
            cats_seen.add(c)
        elif not (c is None or (type(c) is float and c != c)):
            raise Unsupported("a category that is not a string")
    trace = np.array([c == "Trace" for c in cat_uniques], dtype=bool)
    # HTA drops the rows without dur or cat, then the "Trace" rows (see _htas_index)
    kept_first = present[cat_codes] & ~dur_null if n else np.zeros(0, dtype=bool)
    is_trace = trace[cat_codes] if n else kept_first
    keep = kept_first & ~is_trace
    idx = np.flatnonzero(keep)
    take = idx.tolist()
    columns: Dict[str, Tuple[str, Union[np.ndarray, list, Tuple[np.ndarray, list]]]] = {}
    for k in keys:
        if k in _DROPPED or k in ("args", "cat", "name"):
            continue
        if k in ("ts", "dur"):  # numeric in every piece, so never an object column
            tag, vals = (ts_tag, ts_vals) if k == "ts" else (dur_tag, dur_vals)
            tag = "f8" if tag == "f8i" else tag
        else:
            raw = getter(k)
            tag, vals = _infer(raw, types(k))
            if tag == "f8i":  # ints and NaN: floats, unless another piece makes the column object
                columns[k] = (tag, (vals[idx], list(map(raw.__getitem__, take))))
                continue
        if isinstance(vals, np.ndarray):
            columns[k] = (tag, _small_ints(vals[idx]) if tag == "i8" else vals[idx])
        else:
            kept = list(map(vals.__getitem__, take))
            columns[k] = (tag, shared_values(kept) if tag == "obj" else kept)
    arg_values = kept_args(take)
    arg_columns = {}
    for i, spec in enumerate(arg_specs):
        raw, shared = arg_values(i)
        texts = None
        if shared:
            distinct, texts = raw
            if any(type(v) is list or type(v) is dict for v in distinct):
                # a list or dict among the values: pandas keeps the column as objects (_infer's
                # last case), whatever the rest; the texts are all the merge needs
                arg_columns[spec[0]] = ("obj", texts)
                continue
            raw = list(map(distinct.__getitem__, texts.codes.tolist()))
        tag, vals = _infer(raw)
        if tag == "obj":
            vals = texts if texts is not None else shared_values(vals)
        elif tag == "i8":
            vals = _small_ints(vals)
        arg_columns[spec[0]] = (tag, (vals, raw) if tag == "f8i" else vals)
    return {
        "n": n, "has_args": "args" in keys,
        "cats_seen": cats_seen, "ts_any_null": bool(ts_null.any()),
        "end_any_null": bool((ts_null | dur_null).any()), "keep": idx,
        "trace_rows": np.flatnonzero(kept_first & is_trace),
        "cat": _kept_codes(cat_uniques, cat_codes, idx),
        "name": _kept_codes(*_codes(getter("name"), check=False), idx),
        "columns": columns, "args": arg_columns,
    }


def _small_ints(values: np.ndarray) -> np.ndarray:
    """``values`` (int64) in the smallest of int8, int16, int32 and int64
    that holds them all. A piece's integer columns travel and wait for the
    merge this way: :meth:`_Column.build` concatenates them into the
    smallest type that holds every piece (numpy's promotion of signed types),
    and the frame's integer downcast (``pd.to_numeric(downcast="integer")``,
    HTA's ``_compress_df``) then picks, from the same values, the type it
    picks from int64. Most of Kineto's args (``stream``, ``Python id``,
    ``Group size``...) fit one byte: 12 of the 286 MB benchmark trace's
    columns took 72 MB as int64 until the frame was built."""
    if not len(values):
        return values
    lo, hi = int(values.min()), int(values.max())
    for t in _SIGNED:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return values.astype(t)
    return values


_SIGNED = (np.int8, np.int16, np.int32)


def _kept_codes(uniques: list, codes: np.ndarray, rows: np.ndarray) -> Tuple[list, np.ndarray]:
    """The strings of ``rows`` as :func:`_codes` gives them for those rows
    alone: distinct values in order of first appearance, and codes.

    Raises:
        Unsupported: one of them is not a string.
    """
    kept = codes[rows]
    if not len(kept):
        return [], kept
    used, at = np.unique(kept, return_index=True)
    order = used[np.argsort(at, kind="stable")]
    lut = np.empty(len(uniques), dtype=np.int32)
    lut[order] = np.arange(len(order))
    out = [uniques[i] for i in order.tolist()]
    if set(map(type, out)) - {str}:
        raise Unsupported("a name or category that is not a string")
    return out, lut[kept]


class _Codes:
    """Strings encoded in order of first appearance over all pieces (like ``Series.unique``)."""

    def __init__(self) -> None:
        self.ids: Dict[str, int] = {}
        self.pieces: List[np.ndarray] = []

    def add(self, uniques: list, codes: np.ndarray) -> None:
        ids = self.ids
        lut = np.array([ids.setdefault(u, len(ids)) for u in uniques], dtype=np.int32)
        self.pieces.append(lut[codes] if len(codes) else codes)

    def codes(self) -> np.ndarray:
        return np.concatenate(self.pieces) if self.pieces else np.array([], dtype=np.int64)


class _Frame:
    """Merges pieces of ``traceEvents`` (see :func:`_piece`) into the columns of HTA's dataframe."""

    def __init__(self, cfg) -> None:
        self.args = tuple((a.name, a.raw_name, a.default_value, a.value_type.name == "Object")
                          for a in cfg.get_args())
        self.n_events = 0
        self.keys: Dict[str, None] = {}  # top-level keys in order of first appearance
        self.columns: Dict[str, _Column] = {}
        self.arg_columns = {spec[0]: _Column() for spec in self.args}
        self.kept_rows = 0
        self.positions: List[np.ndarray] = []
        self.trace_rows: List[np.ndarray] = []  # rows HTA drops only for their category "Trace"
        self.cat = _Codes()
        self.name = _Codes()
        self.has_args = False
        self.ts_any_null = False
        self.end_any_null = False
        self.cats_seen: set = set()
        self.repaired = 0  # event names repaired (see repair.py)
        self.parsers: Dict[str, int] = {}  # pieces read by each reader ("native", "python")

    def merge(self, piece: dict, raw) -> None:
        """Append ``piece`` (of the events in ``raw``, a JSON array, or in the
        piece's own ``raw`` where names were repaired)."""
        raw = piece.get("raw", raw)
        self.repaired += piece.get("repaired", 0)
        parser = piece.get("parser", "python")
        self.parsers[parser] = self.parsers.get(parser, 0) + 1
        base = self.n_events
        self.n_events += piece["n"]
        keys = piece["keys"]
        if piece["first"] is not None:  # structs: the order of new keys from the text
            new = [k for k in keys if k not in self.keys]
            if len(new) > 1:
                keys = _key_order(raw, piece["first"], new)
        for k in keys:
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
        if len(piece["trace_rows"]):
            self.trace_rows.append(piece["trace_rows"] + base)
        self.cat.add(*piece["cat"])
        self.name.add(*piece["name"])
        for k, col in self.columns.items():
            if k in piece["columns"]:
                col.add(*piece["columns"][k])
            else:
                col.add("absent", nk)
        for name, col in self.arg_columns.items():
            col.add(*piece["args"][name])

    def frame(self, exact_times: bool = False):
        """HTA's dataframe (``_compress_df`` done) and local symbol table; with
        ``exact_times``, plus the exact times where HTA rounds (:mod:`hta_report.load.exact`)."""
        from hta.common.trace_symbol_table import TraceSymbolTable

        if "cuda_profiler_range" in self.cats_seen:
            raise Unsupported("cuda_profiler_range counters")
        if self.n_events == 0 or "ts" not in self.keys or "name" not in self.keys or "index" in self.keys:
            raise Unsupported("HTA fails on this trace; let it say how")
        if "dur" not in self.keys or "cat" not in self.keys:
            return pd.DataFrame(), TraceSymbolTable()
        if not self.has_args:
            raise Unsupported("no args anywhere")
        # each piece list is dropped once its column is built (this is the last use of this
        # _Frame), and in a large file the heap's free pages are handed back after each
        # column: the pieces' freed arrays are too scattered for the columns to reuse
        # (286 MB benchmark trace: peak 585 MB with every piece kept, 571 MB dropping them,
        # 433 MB trimming too, for 39 ms)
        from .. import workers

        trim = workers.trim_heap if self.n_events >= workers.TRIM_MIN_EVENTS else (lambda: None)
        trim()
        positions = np.concatenate(self.positions)
        self.positions = []
        nrows = len(positions)
        cols: Dict[str, Any] = {"index": positions}
        ts_float = self.columns["ts"].tag() == "f8"
        for k in self.keys:
            if k in _DROPPED or k == "args":
                continue
            if k in ("cat", "name"):
                cols[k] = None  # filled after the symbol table
            else:
                cols[k] = self.columns.pop(k).series()
                trim()
        exact: Dict[str, Any] = {}
        if ts_float and not will_round(np.dtype(np.float64)):
            raise Unsupported("HTA's ns rounding is disabled")
        if ts_float:  # HTA's round_down_time_stamps (ns-resolution traces)
            ts = cols["ts"].to_numpy(dtype=np.float64)
            dur = cols["dur"].to_numpy(dtype=np.float64)
            end = ts + dur
            if exact_times:  # see exact.add_exact_times
                exact = {EXACT_TS: ts, EXACT_DUR: dur}
            ts_c, end_f = np.ceil(ts), np.floor(end)
            keep = ~np.isnan(end_f)
            new_ts = pd.Series(ts_c.astype(np.float64) if self.ts_any_null else ts_c.astype(np.int64))
            new_end = pd.Series(end_f if self.end_any_null else end_f.astype(np.int64))
            cols["ts"], cols["end"] = new_ts, new_end
            cols["dur"] = new_end - new_ts
            if not keep.all():
                raise Unsupported("events whose ts is missing")
        for name, *_ in self.args:
            cols[name] = self.arg_columns.pop(name).series()
            trim()
        cols.update(exact)

        # the local symbol table, built as _compress_df builds it
        cat_codes, name_codes = self.cat.codes(), self.name.codes()
        table = TraceSymbolTable()
        # sets built from sequences, as from Series.unique(): a set built from a
        # dict is presized and would iterate in another order
        cats = [modern_category(c) for c in self.cat.ids]  # PyTorch 1.8-1.9 names (compat.py)
        annotations = _legacy_annotations(self.cat.ids, self.name.ids, cat_codes, name_codes)
        if annotations is not None:
            cats.append("user_annotation")
            cat_codes = np.where(annotations, len(cats) - 1, cat_codes)
        symbols = set(_first_seen(cats, cat_codes)).union(set(list(self.name.ids)))
        table.add_symbols(symbols)
        sym_index = table.get_sym_id_map()
        cat_lut = np.array([sym_index[s] for s in cats], dtype=np.int64)
        name_lut = np.array([sym_index[s] for s in self.name.ids], dtype=np.int64)
        cols["cat"] = pd.Series(cat_lut[cat_codes] if nrows else np.array([], dtype=np.int64))
        cols["name"] = pd.Series(name_lut[name_codes] if nrows else np.array([], dtype=np.int64))

        index = _htas_index(self.n_events, positions, np.concatenate(self.trace_rows) if self.trace_rows else None)
        df = pd.DataFrame({k: (v.to_numpy() if isinstance(v, pd.Series) and not isinstance(v.dtype, pd.StringDtype)
                               else v.array if isinstance(v, pd.Series) else v)
                           for k, v in cols.items()}, index=index, copy=False)
        for k, v in cols.items():  # pandas 3 makes an object array of strings a str column: the kept rows of a
            if isinstance(v, pd.Series) and v.dtype == object and df[k].dtype != object:  # mixed column (a legacy
                df[k] = df[k].astype(object)  # tid: "5555" on ops, 5555 on dropped events) stay objects, as in HTA
        if "stream" in df.columns:  # HTA's normalize_gpu_stream_numbers
            df["stream"] = pd.to_numeric(df["stream"], errors="coerce").fillna(-1).astype(int)
        for col in df.columns:  # HTA's integer downcast
            if df[col].dtype.kind == "i":
                df[col] = pd.to_numeric(df[col], errors="coerce", downcast="integer")
        return df, table


def _first_seen(values: list, codes: np.ndarray) -> list:
    """The distinct ``values[c]`` for the codes ``codes`` (one per row), in the
    order of their first row: ``Series.unique()`` of the decoded column, the
    sequence HTA's ``_compress_df`` builds its symbol set from. A set's
    iteration order depends on the order its strings were inserted (where
    their randomized hashes collide), so the symbol ids match HTA's only when
    the set is built from the same sequence."""
    if not len(codes):
        return []
    used, first = np.unique(codes, return_index=True)
    seen, out = set(), []
    for c in used[np.argsort(first, kind="stable")].tolist():
        v = values[c]
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def _legacy_annotations(cats: Dict[str, int], names: Dict[str, int], cat_codes: np.ndarray,
                        name_codes: np.ndarray) -> Optional[np.ndarray]:
    """Per row, whether it is one of PyTorch's own ranges in a legacy trace
    (:func:`~.compat.is_legacy_annotation`), which becomes ``user_annotation``;
    None when there is none (no legacy ``Operator`` category)."""
    op = cats.get("Operator")
    if op is None or not len(cat_codes):
        return None
    named = np.array([is_legacy_annotation("Operator", n) for n in names], dtype=bool)
    rows = (cat_codes == op) & named[name_codes]
    return rows if rows.any() else None


def _htas_index(n_events: int, kept: np.ndarray, trace_rows: Optional[np.ndarray]) -> pd.Index:
    """The index of HTA's frame: the positions ``kept`` of ``n_events``, as a
    ``RangeIndex`` or an ``Index`` as pandas makes it. ``_compress_df`` first
    drops the rows without ``dur`` or ``cat`` (``dropna``), then the rows of
    category ``Trace`` (``trace_rows``, None: none), and pandas keeps a range
    where the labels left are equally spaced, depending on the version. Both
    steps are done here by pandas on a two-column stand-in."""
    if trace_rows is None and len(kept) == n_events:
        return pd.RangeIndex(n_events)
    first = np.zeros(n_events, dtype=bool)
    first[kept] = True
    trace = np.zeros(n_events, dtype=bool)
    if trace_rows is not None:
        first[trace_rows] = True
        trace[trace_rows] = True
    probe = pd.DataFrame({"dur": np.where(first, 1.0, np.nan), "trace": trace})
    probe = probe.dropna(axis=0, subset=["dur"])
    if trace_rows is not None:
        probe = probe.drop(probe[probe["trace"]].index)
    return probe.index


def _null_mask(tag: str, vals: Any, n: int) -> np.ndarray:
    if tag == "null":
        return np.ones(n, dtype=bool)
    if tag in ("f8", "f8i"):
        return np.isnan(vals)
    return np.zeros(n, dtype=bool)


# --------------------------------------------------------------------------- HTA's post-processing


def _parse(path: str, cfg, workers: int = 1, exact_times: bool = False, max_bytes: Optional[int] = None):
    from hta.common.trace import add_fwd_bwd_links
    from hta.common.trace_parser import MetaDataKey, infer_gpu_type

    sink = _Frame(cfg)
    doc = _read(path, sink, workers, max_bytes)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    df, table = sink.frame(exact_times)
    meta[str(MetaDataKey.DEVICE_TYPE)] = infer_gpu_type(meta, table.get_sym_id_map())
    if sink.repaired:
        meta[REPAIRED_NAMES] = sink.repaired
    meta[PARSER_USED] = parser_used(sink.parsers)
    if df.empty:
        return meta, df, table
    df, enclosing = drop_enclosing_steps(df, table)
    if enclosing:
        meta[ENCLOSING_STEPS] = enclosing
    add_fwd_bwd_links(df)
    df = correlation_to_index(df, table)
    if df.attrs.get(SHARED_CORRELATIONS):
        meta[SHARED_CORRELATIONS] = df.attrs.pop(SHARED_CORRELATIONS)
    if df.attrs.get(EXTERNAL_ID_LINKS):
        meta[EXTERNAL_ID_LINKS] = df.attrs.pop(EXTERNAL_ID_LINKS)
    _add_iteration(df, table)
    df["end"] = df["ts"] + df["dur"]
    return meta, df, table


def _add_iteration(df: pd.DataFrame, table) -> None:
    """HTA's ``add_iteration`` without its per-row ``apply`` calls
    (:func:`.iteration.add_iteration`); what it cannot reproduce goes to HTA's parser."""
    try:
        add_iteration(df, table)
    except ValueError as exc:
        raise Unsupported(str(exc)) from exc


# --------------------------------------------------------------------------- the native reader's pieces


def native_piece(raw, arg_specs) -> Optional[Dict[str, Any]]:
    """The piece (``fastparse._columns``' dict) of the events in ``raw`` (the
    bytes of a JSON array of events, any bytes-like object) read by the native
    reader, or None where it does not take them or where the Python reader
    would raise :class:`~.fastparse.Unsupported` (the caller then runs the
    Python reader on the same bytes, which decides).

    The extension builds the kept rows' columns itself (``read_piece``) where
    their kinds are plain (ints, floats, object args holding a list or dict);
    a column of mixed kinds comes back as the reader's per-row arrays and is
    built here as the Python reader builds it (:func:`_arg_column`)."""
    got = fastnative.read_piece(raw, arg_specs)
    if isinstance(got, str):
        return None
    try:
        return _native_piece(got, arg_specs)
    except Unsupported:
        return None


def _native_array(tag: str, got: tuple) -> Any:
    if tag == "f8":
        return np.frombuffer(got[1], dtype=np.float64)
    dtype, data = got[1]
    return np.frombuffer(data, dtype=dtype)


def _native_piece(got: dict, arg_specs) -> Dict[str, Any]:
    idx = np.frombuffer(got["keep"], dtype=np.int64)
    columns: Dict[str, Any] = {}
    for k, col in got["columns"].items():
        tag = col[0]
        if tag == "null":
            columns[k] = (tag, [_NAN] * len(idx))
        elif tag != "raw":
            columns[k] = (tag, _native_array(tag, col))
        else:
            columns[k] = _native_mixed(fastnative.Col(col[1]), idx)
    arg_columns: Dict[str, Any] = {}
    for spec, col in zip(arg_specs, got["args"]):
        tag = col[0]
        if tag == "empty":
            arg_columns[spec[0]] = ("empty", [])
        elif tag == "obj":
            arg_columns[spec[0]] = ("obj", _Texts(col[1], np.frombuffer(col[2], dtype=np.int32)))
        elif tag == "texts":
            arg_columns[spec[0]] = _texts_column(_Texts(col[1], np.frombuffer(col[2], dtype=np.int32)))
        elif tag == "f8i":
            f64 = np.frombuffer(col[1], dtype=np.float64)
            arg_columns[spec[0]] = ("f8i", (f64, _Values(f64, np.frombuffer(col[2], dtype=np.int64),
                                                         np.frombuffer(col[3], dtype=bool))))
        elif tag == "raw":
            arg_columns[spec[0]] = _arg_column(fastnative.Col(col[1]), idx, spec)
        else:
            arg_columns[spec[0]] = (tag, _native_array(tag, col))
    cat_uniques, cat_codes = got["cat"]
    name_uniques, name_codes = got["name"]
    keys = got["keys"]
    return {
        "n": got["n"], "has_args": "args" in keys,
        "cats_seen": set(got["cats"]), "ts_any_null": got["ts_any_null"],
        "end_any_null": got["end_any_null"], "keep": idx,
        "trace_rows": np.frombuffer(got["trace_rows"], dtype=np.int64),
        "cat": (cat_uniques, np.frombuffer(cat_codes, dtype=np.int32)),
        "name": (name_uniques, np.frombuffer(name_codes, dtype=np.int32)),
        "columns": columns, "args": arg_columns, "keys": keys, "first": None, "parser": "native",
    }


def _texts_column(kept: "_Texts") -> Tuple[str, Any]:
    """An object arg's column from the JSON texts of its kept rows (the
    default's where absent), as :func:`_columns` builds it."""
    distinct = [msgspec.json.decode(t) for t in kept.texts]
    if any(type(v) is list or type(v) is dict for v in distinct):
        return "obj", kept
    raw = list(map(distinct.__getitem__, kept.codes.tolist()))
    tag, vals = _infer(raw)
    if tag == "obj":
        return tag, kept
    if tag == "i8":
        return tag, _small_ints(vals)
    return tag, ((vals, raw) if tag == "f8i" else vals)


class _Values:
    """The Python values (ints and floats) of an ``f8i`` arg column of the
    native reader, made only where the merged column is an object column
    (:meth:`_Column.build`): the floats, the ints and which rows are ints."""

    __slots__ = ("f64", "i64", "isint")

    def __init__(self, f64: np.ndarray, i64: np.ndarray, isint: np.ndarray) -> None:
        self.f64, self.i64, self.isint = f64, i64, isint

    def __len__(self) -> int:
        return len(self.f64)

    def values(self) -> list:
        out = self.f64.astype(object)
        out[self.isint] = self.i64[self.isint].astype(object)
        return out.tolist()


def _native_mixed(col: fastnative.Col, idx: np.ndarray) -> Tuple[str, Any]:
    """``pid`` or ``tid`` of mixed kinds (ints and names, or absent in some
    events) for the kept rows ``idx``, as :func:`_columns` builds it."""
    raw = col.values(None, _NAN)
    tag, vals = _infer(raw, {fastnative.TYPES[c] for c in col.present})
    if tag == "f8i":
        return tag, (vals[idx], list(map(raw.__getitem__, idx.tolist())))
    if isinstance(vals, np.ndarray):
        return tag, (_small_ints(vals[idx]) if tag == "i8" else vals[idx])
    kept = list(map(vals.__getitem__, idx.tolist()))
    return tag, (shared_values(kept) if tag == "obj" else kept)


def native_piece_reference(raw, arg_specs) -> Optional[Dict[str, Any]]:
    """:func:`native_piece` with every column built here from the reader's
    per-row arrays (``read_events``): the reference the extension's own
    columns are tested against."""
    got = fastnative.read_events(raw, arg_specs)
    if isinstance(got, str):
        return None
    try:
        return _native_columns(got, arg_specs)
    except Unsupported:
        return None


def _numeric(col: fastnative.Col, n: int) -> Tuple[str, Any]:
    """``fastparse._infer`` of ``ts`` or ``dur`` (ints, floats, absent only)."""
    kinds = col.present
    if kinds == {fastnative.K_INT}:
        return "i8", col.i64
    if kinds == {fastnative.K_ABSENT}:
        return "null", [_NAN] * n
    return ("f8i" if fastnative.K_INT in kinds else "f8"), col.f64


def _native_columns(got: dict, arg_specs) -> Dict[str, Any]:
    n = got["n"]
    keys: List[str] = got["keys"]
    cat, name = fastnative.Col(got["cat"]), fastnative.Col(got["name"])
    fields = {k: fastnative.Col(got[k]) for k in ("pid", "tid", "ts", "dur")}
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
            if col.present == {fastnative.K_INT}:
                tag, vals = "i8", col.i64
            else:
                raw = col.values(None, _NAN)
                tag, vals = _infer(raw, {fastnative.TYPES[c] for c in col.present})
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
        arg_columns[spec[0]] = _arg_column(fastnative.Col(got["args"][i]), idx, spec)
    return {
        "n": n, "has_args": "args" in keys,
        "cats_seen": set(cat.strs), "ts_any_null": bool(ts_null.any()),
        "end_any_null": bool((ts_null | dur_null).any()), "keep": idx,
        "trace_rows": np.flatnonzero(kept_first & is_trace),
        "cat": _kept_codes(cat.strs, cat.codes, idx),
        "name": _kept_codes(name.strs, name.codes, idx),
        "columns": columns, "args": arg_columns, "keys": keys, "first": None, "parser": "native",
    }


def _arg_column(col: fastnative.Col, idx: np.ndarray, spec) -> Tuple[str, Any]:
    """``fastparse._columns``' column of one arg spec (name, raw name, HTA's
    default, whether kept as an object) for the kept rows ``idx``."""
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
        return _texts_column(_Texts(uniques, lut[codes]))
    kinds = col.kinds(idx)
    dtype = type(default)
    absent = fastnative.K_ABSENT in kinds
    if kinds <= {fastnative.K_INT, fastnative.K_ABSENT} and (not absent or (dtype is int and -2**63 <= default < 2**63)):
        vals = col.i64[idx]
        if absent:
            vals = np.where(col.kind[idx] == fastnative.K_ABSENT, default, vals)
        return "i8", _small_ints(vals)
    if kinds <= {fastnative.K_FLOAT, fastnative.K_ABSENT} and (not absent or (dtype is float and default == default)):
        vals = col.f64[idx]
        if absent:
            vals = np.where(col.kind[idx] == fastnative.K_ABSENT, default, vals)
        return "f8", vals
    raw = col.values(idx, default)
    tag, vals = _infer(raw)
    if tag == "obj":
        return tag, shared_values(vals)
    if tag == "i8":
        return tag, _small_ints(vals)
    return tag, ((vals, raw) if tag == "f8i" else vals)
