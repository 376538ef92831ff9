"""Checks that a file is a Kineto trace, each failure a one-line reason.

Called by the loader (:mod:`hta_report.load`, the only code that reads traces); kept
apart so that the loader's internals can be replaced without losing them.
Every check is cheap next to parsing:

* :func:`check_file` runs before a file is parsed: the size cap (the file size
  of a ``.json``; a streaming count of a ``.json.gz``, holding at most one
  chunk in memory) and a look at the first 64 KiB of text, which turns away
  files that are not JSON objects, PyTorch execution traces and the like
  without parsing gigabytes.
* :func:`check_document` and :func:`clean_events` run on the parsed document,
  once, before HTA builds its dataframe: top-level structure, then one pass
  over the events that leaves out those HTA cannot use (no ``ts``, a negative
  ``dur``...) and counts them.
* :func:`describe_error` maps what reading or parsing raised to a reason.

Times in traces are microseconds (µs): Chrome-trace ``ts`` and ``dur`` are
always µs, and ``displayTimeUnit`` (``"ms"`` or ``"ns"``) only tells a viewer
how to display them. Kineto writes ``ts`` as µs with three decimals whatever
``displayTimeUnit`` says, and HTA ignores the field; so does hta-report.
"""
from __future__ import annotations

import codecs
import gzip
import json
import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ..errors import TraceError, one_line
from ..files import Location
from ..sizes import format_size, parse_size  # noqa: F401 (parse_size: the name the CLI and tests import)

#: Default cap on a trace's decompressed size (``--max-trace-size``): 4 GiB.
DEFAULT_MAX_TRACE_BYTES = 4 * 1024 ** 3
#: How much decompressed text :func:`check_file` inspects.
HEAD_BYTES = 64 * 1024
#: Deflate expands data at most about 1032-fold, so a ``.gz`` file smaller than
#: cap / this bound cannot pass the cap and is not counted in full.
MAX_DEFLATE_RATIO = 1032
#: Largest |ts| and dur accepted (µs): 2**53, past which float64 loses whole
#: microseconds (epoch-based µs timestamps are about 1.7e15).
MAX_ABS_TIME_US = float(2 ** 53)
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"



@dataclass
class FileHead:
    """What :func:`check_file` learned without parsing.

    Attributes:
        head: the first :data:`HEAD_BYTES` of decompressed text (bytes).
        size_bytes: decompressed size in bytes when known (the file size of a
            ``.json``; for a ``.json.gz``, known only when it was counted).
    """

    head: bytes
    size_bytes: Optional[int]


def is_gzip_name(path: Location) -> bool:
    """True for ``*.gz`` file names (any case; a URL's without its query)."""
    from ..files import bare_name

    return bare_name(path).lower().endswith(".gz")


def check_file(path: Location, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> FileHead:
    """Refuse a file that is too large or plainly not a Kineto trace, before parsing.

    A ``.json`` over ``max_bytes`` is refused from its size. A ``.json.gz`` is
    decompressed in 1 MiB chunks and counted, never held in memory, and
    refused as soon as the count passes ``max_bytes`` (skipped when the file
    is too small to expand past the cap). Then the first 64 KiB of text must
    be UTF-8 and start a JSON object that is not a PyTorch execution trace.

    Args:
        path: a ``.json`` or ``.json.gz`` file.
        max_bytes: cap on the decompressed size (bytes).

    Returns:
        The first 64 KiB and, when known, the decompressed size.

    Raises:
        TraceError: (naming ``path``) unreadable, over the cap, corrupt or
            truncated gzip, not UTF-8, not a JSON object, an execution trace.
    """
    try:
        on_disk = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        gz = is_gzip_name(path)
        if gz and head and head[:2] != _GZIP_MAGIC:
            raise TraceError("not gzip data although the name ends in .gz (if it is plain JSON, rename it to .json)",
                             str(path))
        if not gz and head[:2] == _GZIP_MAGIC:
            raise TraceError("gzip data in a file whose name does not end in .gz (rename it to .json.gz)", str(path))
        if not gz:
            if on_disk > max_bytes:
                raise TraceError(f"is {format_size(on_disk)}, over the --max-trace-size cap of "
                                 f"{format_size(max_bytes)} (raise the cap to analyze it)", str(path))
            size: Optional[int] = on_disk
        else:
            head, size = _gzip_head_and_size(path, on_disk, max_bytes)
    except TraceError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(describe_error(exc), str(path)) from exc
    sniff(head, str(path), complete=size is not None and size <= len(head))
    return FileHead(head=head, size_bytes=size)


def _gzip_head_and_size(path: Location, compressed: int, max_bytes: int) -> Tuple[bytes, Optional[int]]:
    """The first :data:`HEAD_BYTES` of decompressed text and the decompressed size
    (None when not counted: the file cannot expand past ``max_bytes``).

    Raises:
        TraceError: the count passed ``max_bytes``.
        EOFError, gzip.BadGzipFile, zlib.error, OSError: truncated or corrupt.
    """
    count_all = compressed * MAX_DEFLATE_RATIO > max_bytes
    head = b""
    total = 0
    from ..files import open_text_stream

    with open_text_stream(path) as fh:
        while True:
            chunk = fh.read(_CHUNK)  # at most 1 MiB of output, whatever the compression ratio
            if not chunk:
                break
            if len(head) < HEAD_BYTES:
                head += chunk[: HEAD_BYTES - len(head)]
            total += len(chunk)
            if total > max_bytes:
                raise TraceError(f"decompresses to more than the --max-trace-size cap of {format_size(max_bytes)} "
                                 f"({format_size(compressed)} compressed; raise the cap to analyze it)", str(path))
            if not count_all and len(head) >= HEAD_BYTES:
                return head, None
    return head, total


def sniff(head: bytes, path: Union[str, Path], complete: bool = False) -> None:
    """Check the first bytes of a trace's text (see :func:`check_file`).

    Args:
        head: the start of the decompressed text.
        path: named in errors.
        complete: ``head`` is the whole text.

    Raises:
        TraceError: empty, not UTF-8, not a JSON object, an execution trace.
    """
    if not head:
        raise TraceError("is empty (no JSON at all; was the job killed before the trace was written?)", path)
    if complete and not head.strip():
        raise TraceError("holds only whitespace, no JSON", path)
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=complete)
    except UnicodeDecodeError as exc:
        raise TraceError(describe_error(exc), path) from exc
    text = text.lstrip("\ufeff \t\r\n")
    if not text:  # 64 KiB of whitespace and more to come: the full parse will tell
        return
    first = text[:1]
    if first == "[":
        raise TraceError(_not_an_object("list"), path)
    if first != "{":
        if complete:
            try:
                value = json.loads(text)
            except ValueError:
                pass
            else:
                raise TraceError(_not_an_object(_json_kind(value)), path)
        raise TraceError(f"not valid JSON: the text starts with {_quote(text[:24])}, not with '{{'", path)
    keys = top_level_keys(text)
    if "schema" in keys and "nodes" in keys:
        raise TraceError(EXECUTION_TRACE, path)


#: The reason given for a PyTorch execution trace.
EXECUTION_TRACE = ("a PyTorch execution trace (top-level \"schema\" and \"nodes\"), not a Kineto trace; "
                   "record one with torch.profiler (tensorboard_trace_handler or export_chrome_trace)")


def _not_an_object(kind: str) -> str:
    hint = " (the Chrome trace array format, which Kineto does not write)" if kind == "list" else ""
    return f"not a Kineto trace: a JSON {kind}{hint}, expected an object with traceEvents"


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _quote(text: str, limit: int = 40) -> str:
    """``repr`` of a trace-derived string, cut to ``limit`` characters (for messages)."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def top_level_keys(text: str) -> List[str]:
    """Keys of the JSON object that ``text`` starts, in order, as far as ``text``
    reaches (values running past its end, e.g. a long ``traceEvents``, end the scan)."""
    decoder = json.JSONDecoder()
    keys: List[str] = []
    ws = re.compile(r"[ \t\r\n]*")

    def skip(at: int) -> int:
        """The index of the first character at or after ``at`` that is not JSON whitespace."""
        m = ws.match(text, at)
        assert m is not None  # a run of zero or more characters matches anywhere
        return m.end()

    i = skip(0)
    if text[i:i + 1] != "{":
        return keys
    i += 1
    try:
        while True:
            i = skip(i)
            if text[i:i + 1] != '"':
                return keys
            # typeshed's json.decoder lacks scanstring (the C or Python scanner JSONDecoder itself uses)
            key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            i = skip(i)
            if text[i:i + 1] != ":":
                return keys
            keys.append(key)
            _, i = decoder.raw_decode(text, skip(i + 1))
            i = skip(i)
            if text[i:i + 1] != ",":
                return keys
            i += 1
    except (ValueError, RecursionError):
        return keys


def decode_text(raw: bytes, path: Union[str, Path]) -> str:
    """``raw`` as UTF-8 text (a leading byte-order mark is dropped); ``path`` is named in errors.

    Raises:
        TraceError: not UTF-8 (names the first bad byte and its offset).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(describe_error(exc), path) from exc
    return text[1:] if text.startswith("\ufeff") else text


def check_document(doc: Any, path: Union[str, Path]) -> List[Any]:
    """Check the top level of a parsed trace (``path`` is named in errors).

    Returns:
        ``doc["traceEvents"]``.

    Raises:
        TraceError: not an object, an execution trace, no ``traceEvents``,
            ``traceEvents`` not a list or empty.
    """
    if not isinstance(doc, dict):
        raise TraceError(_not_an_object(_json_kind(doc)), path)
    if "schema" in doc and "nodes" in doc:
        raise TraceError(EXECUTION_TRACE, path)
    if "traceEvents" not in doc:
        if not doc:
            raise TraceError("no traceEvents: not a Kineto trace (an empty JSON object)", path)
        keys = ", ".join(_quote(str(k), 30) for k in list(doc)[:8]) + (", ..." if len(doc) > 8 else "")
        raise TraceError(f"no traceEvents: not a Kineto trace (top-level keys: {keys})", path)
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TraceError(f"traceEvents is a JSON {_json_kind(events)}, expected a list of events", path)
    if not events:
        raise TraceError("traceEvents is empty: the profiler recorded no events "
                         "(did the profiled code run during the schedule's active steps?)", path)
    return events


@dataclass
class EventReport:
    """What :func:`clean_events` did to a trace's events.

    Attributes:
        total: events in ``traceEvents``.
        kept: events handed to HTA.
        duration_events: kept events with a ``dur`` (the ones HTA analyzes).
        with_args: of those, events with an ``args`` object.
        dropped: (singular, plural) reason -> events left out for it.
        ignored: (singular, plural) reason -> events where one field was
            removed (HTA then uses its default) but the event kept.
        repaired_names: event names that were not valid JSON strings (Kineto
            did not escape them) and were repaired before parsing
            (:mod:`hta_report.load.repair`).
    """

    total: int = 0
    kept: int = 0
    duration_events: int = 0
    with_args: int = 0
    dropped: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)
    repaired_names: int = 0

    def warning(self) -> Optional[str]:
        """One line for the report's warnings, or None when nothing was done."""
        parts = []
        n_dropped = sum(self.dropped.values())
        if n_dropped:
            parts.append(f"{n_dropped:,} of {self.total:,} trace events left out: {_reasons(self.dropped)}")
        if self.ignored:
            parts.append(f"a field was ignored in {_reasons(self.ignored, count_events=True)}")
        return "; ".join(parts) or None

    def empty_reason(self) -> str:
        """Why no event can be analyzed (when :attr:`duration_events` is 0)."""
        if self.dropped:
            others = self.total - sum(self.dropped.values())
            rest = f" (the other {others:,} are metadata, instant or flow events)" if others else ""
            return f"none of its {self.total:,} trace events can be analyzed: {_reasons(self.dropped)}{rest}"
        return (f"holds no trace events with a duration (its {self.total:,} events are metadata, "
                "instant or flow events)")


def _reasons(counter: Counter, count_events: bool = False) -> str:
    out = []
    for (one, many), n in counter.most_common():
        if count_events:
            out.append(f"{n:,} event{'s' if n > 1 else ''} that {one if n == 1 else many}")
        else:
            out.append(f"{n:,} {one if n == 1 else many}")
    return ", ".join(out)


# (singular, plural) reasons; the plural follows a count ("43 have no ts").
_NOT_OBJECT = ("is not a JSON object", "are not JSON objects")
_RESERVED = ("has a top-level 'index' key", "have a top-level 'index' key")


def _missing(name: str) -> Tuple[str, str]:
    return (f"has no {name}", f"have no {name}")


def _bad(name: str, what: str) -> Tuple[str, str]:
    return (f"has a {name} that is not {what}", f"have a {name} that is not {what}")


_NO = {k: _missing(k) for k in ("ts", "dur", "name", "cat", "pid", "tid")}
_BAD_TIME = {k: _bad(k, "a number") for k in ("ts", "dur")}
_HUGE_TIME = {k: (f"has a {k} beyond ±2**53 µs (nanoseconds written as µs?)",
                  f"have a {k} beyond ±2**53 µs (nanoseconds written as µs?)") for k in ("ts", "dur")}
_BAD_STR = {k: _bad(k, "a string") for k in ("name", "cat")}
_BAD_ID = {k: _bad(k, "an integer or a string") for k in ("pid", "tid")}
_NEGATIVE_DUR = ("has a negative dur", "have a negative dur")
_BAD_ARGS = ("has args that are not a JSON object", "have args that are not a JSON object")


def _is_time(v: Any) -> bool:
    # type() rather than isinstance: bool is an int subclass; NaN and ±inf fail the comparison.
    return (type(v) is int or type(v) is float) and -MAX_ABS_TIME_US <= v <= MAX_ABS_TIME_US


def _time_problem(key: str, v: Any) -> Tuple[str, str]:
    """The reason a ``ts``/``dur`` value that failed :func:`_is_time` is refused."""
    if (type(v) is int or (type(v) is float and math.isfinite(v))) and abs(v) > MAX_ABS_TIME_US:
        return _HUGE_TIME[key]
    return _BAD_TIME[key]


def _is_id(v: Any) -> bool:
    return (type(v) is int and -(2 ** 63) <= v < 2 ** 63) or type(v) is str


def _valid_unicode(s: str) -> bool:
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from "\\ud800" escapes
        return False
    return True


#: How an ``args`` value HTA extracts must look, by kind (see :func:`arg_kinds`).
_ARG_CHECKS = {
    "int": lambda v: type(v) is int and -(2 ** 63) <= v < 2 ** 63,
    "float": lambda v: (type(v) is int or type(v) is float) and math.isfinite(v),
    "str": lambda v: type(v) is str,
}


def arg_kinds(specs: Any) -> Dict[str, str]:
    """``args`` keys that HTA extracts into columns -> ``"int"``, ``"float"`` or
    ``"str"``, from HTA's ``ParserConfig.get_args()`` (objects are not checked)."""
    out = {}
    for spec in specs:
        kind = getattr(getattr(spec, "value_type", None), "name", "").lower()
        if kind in _ARG_CHECKS:
            out[spec.raw_name] = kind
    return out


def clean_events(events: List[Any], kinds: Optional[Dict[str, str]] = None) -> Tuple[List[Any], EventReport]:
    """Leave out the events HTA cannot analyze, counting each reason.

    Events with a ``dur`` (and ``"ph": "X"`` events, which should have one) are
    the ones HTA analyzes: they need a numeric ``ts`` and ``dur`` (µs, finite,
    within ±2**53; ``dur`` not negative: Kineto itself writes 0 rather than a
    negative duration), a string ``name`` and ``cat``, an integer or string
    ``pid`` and ``tid``. Other events (metadata, instant, flow), which HTA
    drops itself, are kept unless their ``ts`` is not a number. ``args``
    values HTA reads (``kinds``) of the wrong type are removed, so that HTA
    uses its default; a non-object ``args`` likewise. Strings with lone
    surrogates are escaped. Valid events are passed on untouched, in order.

    Args:
        events: ``traceEvents`` (modified in place where fields are removed).
        kinds: see :func:`arg_kinds`.

    Returns:
        The kept events and an :class:`EventReport`.
    """
    kinds = kinds or {}
    report = EventReport(total=len(events))
    dropped, ignored = report.dropped, report.ignored
    kept = []
    for e in events:
        if type(e) is not dict:
            dropped[_NOT_OBJECT] += 1
            continue
        if "index" in e:  # would collide with the column HTA numbers events in
            del e["index"]
            ignored[_RESERVED] += 1
        dur = e.get("dur")
        if dur is None:
            if e.get("ph") == "X":
                dropped[_NO["dur"]] += 1
                continue
            ts = e.get("ts")
            if ts is not None and not _is_time(ts):
                dropped[_time_problem("ts", ts)] += 1
                continue
            kept.append(e)
            continue
        reason = _event_problem(e, dur)
        if reason is not None:
            dropped[reason] += 1
            continue
        args = e.get("args")
        if args is not None:
            if type(args) is not dict:
                del e["args"]
                ignored[_BAD_ARGS] += 1
            elif kinds:
                for key, kind in kinds.items():
                    v = args.get(key)
                    if v is not None and not _ARG_CHECKS[kind](v):
                        del args[key]
                        ignored[_bad(f"args[{key!r}]", "a number" if kind != "str" else "a string")] += 1
        for key in ("name", "cat"):
            if not _valid_unicode(e[key]):
                e[key] = e[key].encode("utf-8", "backslashreplace").decode("utf-8")
                ignored[(f"has a {key} with invalid Unicode (escaped)", f"have a {key} with invalid Unicode (escaped)")] += 1
        report.duration_events += 1
        if type(e.get("args")) is dict:
            report.with_args += 1
        kept.append(e)
    if report.duration_events and not report.with_args:
        # HTA makes its stream/correlation columns from args and fails without any;
        # an empty one gives every event HTA's defaults (a CPU event, no correlation).
        next(e for e in kept if e.get("dur") is not None)["args"] = {}
    report.kept = len(kept)
    return kept, report


def _event_problem(e: Dict[str, Any], dur: Any) -> Optional[Tuple[str, str]]:
    if not _is_time(dur):
        return _time_problem("dur", dur)
    if dur < 0:
        return _NEGATIVE_DUR
    ts = e.get("ts")
    if ts is None:
        return _NO["ts"]
    if not _is_time(ts):
        return _time_problem("ts", ts)
    for key in ("name", "cat"):
        v = e.get(key)
        if v is None:
            return _NO[key]
        if type(v) is not str:
            return _BAD_STR[key]
    for key in ("pid", "tid"):
        v = e.get(key)
        if v is None:
            return _NO[key]
        if not _is_id(v):
            return _BAD_ID[key]
    return None


def describe_error(exc: BaseException) -> str:
    """A one-line reason for an exception raised while reading or parsing a trace."""
    if isinstance(exc, json.JSONDecodeError):
        if _ONLY_SPACE.match(exc.doc, exc.pos):
            return (f"truncated JSON: the text ends (line {exc.lineno}, column {exc.colno}) before the document "
                    "is complete; was the job killed while writing it?")
        return f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start:exc.start + 1]
        byte = f"byte 0x{bad[0]:02x} " if bad else ""
        return f"not UTF-8 text ({byte}at offset {exc.start:,}): not a JSON trace"
    if isinstance(exc, EOFError):
        return "truncated gzip: the compressed data ends early (was the job killed while writing it?)"
    if isinstance(exc, gzip.BadGzipFile):
        return f"corrupt gzip data ({exc})"
    if isinstance(exc, zlib.error):
        return f"corrupt gzip data (zlib: {exc})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse"
    if isinstance(exc, MemoryError):
        return "not enough memory to load it (lower --max-trace-size to refuse such files before loading)"
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return f"cannot be read as a Kineto trace ({exception_summary(exc)})"


def exception_summary(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` of an exception in one line of at most about ``limit`` characters."""
    text = one_line(str(exc)) or ("a consistency check failed" if isinstance(exc, AssertionError) else "no message")
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}"


_ONLY_SPACE = re.compile(r"[ \t\r\n]*\Z")
