"""The ``[memory]`` instant events of a trace, which HTA's parser drops.

``torch.profiler.profile(profile_memory=True)`` writes one instant event
(``"ph": "i"``, no ``dur``) per allocation and free of the caching allocator::

    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
     "pid": 1, "tid": 1, "ts": 1700000000000.5,
     "args": {"Total Reserved": 2097152, "Total Allocated": 512, "Bytes": 512,
              "Device Id": 0, "Device Type": 1, "Addr": 140000000, ...}}

HTA (and our parser, which returns what HTA's returns) keeps only events with
a ``dur``, so these are read here in a pass of their own over the file's
decompressed bytes: blocks without ``"[memory]"`` are skipped by a byte
search, and each hit is decoded as the JSON object around it
(``json.JSONDecoder.raw_decode``), so the pass costs one decompression and
does not depend on the event parser.

The pass is linear in the file's size, whatever the file holds: the ``{``
before each hit are found by a search that never goes back over text it
searched already, each ``{`` is decoded at most once per block (and no
further than :data:`MAX_EVENT_CHARS`), and the hits between two ``{`` that
no event holds are counted at once (a list of millions of ``"[memory]"``
strings costs one byte search, not one backward search per hit).

Values no device can hold are not believed (:func:`_event`): such an event
counts in :attr:`MemoryEvents.out_of_range`, as unknown, and in no figure.
"""
from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple, Union

import numpy as np

from ..files import PathOrURL, is_url, open_text_stream, version_key

#: What every ``[memory]`` event holds, and what the pass looks for.
NEEDLE = b'"[memory]"'
_BLOCK = 8 << 20
#: Bytes kept from the end of a block, so that an event cut by the block
#: boundary is read whole with the next block (Kineto's events are < 1 KB).
_TAIL = 1 << 16
#: The longest object (characters) read as a ``[memory]`` event: Kineto
#: writes them under 1 KB; a longer object around a hit (the document
#: itself, a list) is not one, and is not decoded further.
MAX_EVENT_CHARS = _TAIL
#: The first part of an object decoded (characters); the rest, up to
#: :data:`MAX_EVENT_CHARS`, only when the object is longer.
_FIRST_WINDOW = 4096
#: A decoding error this close (characters) to the end of what was decoded
#: may come from the cut (a literal such as ``true`` cut after ``tr`` is
#: reported where it starts): the object is read again with more text.
_NEAR_END = 64
#: How many ``{`` before a hit are tried as its event's start (a writer may
#: put ``args`` before ``name``, and ``args`` may hold an object).
_STARTS = 3
#: Totals (bytes) beyond this, either sign, are not believed: 2**50 (1 PiB)
#: is beyond any device's or host's memory (a GPU holds < 2**38; the largest
#: hosts < 2**45). Such an event counts as :attr:`MemoryEvents.out_of_range`,
#: as a memcpy's bytes beyond :data:`hta_report.analysis.transfers.MAX_COPY_BYTES`
#: count as unknown.
MAX_MEMORY_BYTES = 2 ** 50
#: ``Device Id`` values believed: c10's ``DeviceIndex`` is an ``int8``, -1
#: for none (the CPU).
DEVICE_IDS = range(-1, 128)
#: ``Device Type`` values believed: c10's ``DeviceType`` is an ``int8`` too.
DEVICE_TYPES = range(0, 128)
#: Largest ``|ts|`` believed (µs), as for every other event
#: (:data:`hta_report.load.validation.MAX_ABS_TIME_US`).
MAX_ABS_TS_US = float(2 ** 53)


@dataclass
class MemoryEvents:
    """The ``[memory]`` events of one file, in file order (arrays of equal length).

    Attributes:
        ts: time (µs, the file's own clock, as ``ts`` of every event).
        allocated: ``Total Allocated`` after the event (bytes).
        reserved: ``Total Reserved`` after the event (bytes; 0 for the CPU).
        device_type: ``Device Type`` (c10's ``DeviceType``: 0 CPU, 1 CUDA...).
        device_id: ``Device Id`` (-1 for the CPU).
        skipped: hits that were not a well-formed ``[memory]`` event.
        out_of_range: well-formed ``[memory]`` events holding a value no
            device has (:func:`_event`): unknown, in none of the arrays.
        decoded: JSON objects the pass decoded (at most one per ``{`` of a
            block; a measure of its work, which stays linear in the file).
    """

    ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    allocated: np.ndarray = field(default_factory=lambda: np.empty(0))
    reserved: np.ndarray = field(default_factory=lambda: np.empty(0))
    device_type: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    device_id: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    skipped: int = 0
    out_of_range: int = 0
    decoded: int = 0

    def __len__(self) -> int:
        return len(self.ts)

    def shifted(self, offset: float) -> "MemoryEvents":
        """The same events with ``offset`` (µs) subtracted from ``ts``."""
        return MemoryEvents(self.ts - offset, self.allocated, self.reserved, self.device_type, self.device_id,
                            self.skipped, self.out_of_range, self.decoded)


def _value(v) -> Optional[float]:
    """A JSON number as a float (NaN and ±infinity included: Python's reader
    takes ``NaN`` and ``Infinity``, and an integer too large for a float
    reads as infinite); None for anything else (a string, a bool, null)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _number(v) -> Optional[float]:
    """A finite JSON number as a float; None otherwise."""
    v = _value(v)
    return v if v is not None and np.isfinite(v) else None


#: What :func:`_event` returns for a ``[memory]`` event holding a value out of range.
OUT_OF_RANGE = "out of range"


def _event(obj):
    """``(ts, allocated, reserved, device type, device id)`` of a ``[memory]``
    event; None when ``obj`` is not one (no ``args``, no numeric ``ts`` or
    ``Total Allocated``); :data:`OUT_OF_RANGE` when it is one but holds a
    number no device has: ``|ts|`` beyond :data:`MAX_ABS_TS_US` µs, a total
    beyond ±:data:`MAX_MEMORY_BYTES` bytes, NaN or infinite, a ``Device Id``
    outside :data:`DEVICE_IDS` or a ``Device Type`` outside
    :data:`DEVICE_TYPES` (or not whole). As before, a ``Total Reserved``
    that is absent or not a number reads as 0, and an absent or non-numeric
    ``Device Type`` or ``Device Id`` as -1."""
    if type(obj) is not dict or obj.get("name") != "[memory]":
        return None
    args = obj.get("args")
    ts = _value(obj.get("ts"))
    allocated = _value(args.get("Total Allocated")) if type(args) is dict else None
    if ts is None or allocated is None:
        return None
    reserved = _value(args.get("Total Reserved"))
    dtype, did = _value(args.get("Device Type")), _value(args.get("Device Id"))
    reserved = 0.0 if reserved is None else reserved
    dtype = -1.0 if dtype is None else dtype
    did = -1.0 if did is None else did
    believed = (abs(ts) <= MAX_ABS_TS_US and abs(allocated) <= MAX_MEMORY_BYTES  # NaN fails every test
                and abs(reserved) <= MAX_MEMORY_BYTES
                and (dtype == -1 or (dtype.is_integer() and int(dtype) in DEVICE_TYPES))
                and did.is_integer() and int(did) in DEVICE_IDS)
    if not believed:
        return OUT_OF_RANGE
    return (ts, allocated, reserved, int(dtype), int(did))


class _Block:
    """Finds the object around each hit of one decoded block in time linear in
    the block's length: the ``{`` before a hit are found by a backward search
    bounded by the previous hit (the last :data:`_STARTS` are kept), each
    ``{`` is decoded at most once (its outcome kept while it is among them),
    and no further than :data:`MAX_EVENT_CHARS`.

    Args:
        text: the block.
        last: whether the block ends the file (an object cut by its end is
            then not read with the next block).
        decoder: a ``json.JSONDecoder``.
    """

    #: An object cut by the block's end (read again with the next block).
    CUT = "cut"

    def __init__(self, text: str, last: bool, decoder: json.JSONDecoder) -> None:
        self.text, self.last, self.decoder = text, last, decoder
        self.starts: List[int] = []  # the last _STARTS '{' before `searched`, ascending
        self.searched = 0  # every '{' before this is known
        self.outcome: dict = {}  # start -> (object, end), None (no object), CUT
        self.decoded = 0

    def _starts_before(self, hit: int) -> List[int]:
        """The :data:`_STARTS` nearest ``{`` before ``hit`` (nearest first);
        ``hit`` never decreases from one call to the next."""
        found: List[int] = []
        j = hit
        while len(found) < _STARTS:
            j = self.text.rfind("{", self.searched, j)
            if j < 0:
                break
            found.append(j)
        self.starts = (self.starts + found[::-1])[-_STARTS:]
        self.searched = hit
        for s in [s for s in self.outcome if s not in self.starts]:
            del self.outcome[s]
        return self.starts[::-1]

    def _decode(self, start: int) -> Union[Tuple[Any, int], str, None]:
        """``(object, end)`` of the object starting at ``start``; None when
        none does (not JSON, nested too deep, or longer than
        :data:`MAX_EVENT_CHARS`); :attr:`CUT` when the block ends inside it."""
        if start in self.outcome:
            return self.outcome[start]
        text = self.text
        out: Union[Tuple[Any, int], str, None] = None
        for width in (_FIRST_WINDOW, MAX_EVENT_CHARS):
            stop = min(len(text), start + width)
            self.decoded += 1
            try:
                obj, end = self.decoder.raw_decode(text[start:stop])
                out = (obj, start + end)
                break
            except RecursionError:
                break
            except json.JSONDecodeError as exc:
                near_end = exc.pos >= stop - start - _NEAR_END or "Unterminated" in exc.msg
                if stop == len(text):  # the block's end, not the window's
                    out = self.CUT if near_end and not self.last else None
                    break
                if width == MAX_EVENT_CHARS or not near_end:
                    break  # longer than any event, or not JSON before the window's end
        self.outcome[start] = out
        return out

    def around(self, hit: int):
        """``(object, start, end)`` of the object around ``text[hit]``: tries
        the nearest ``{`` before it, then the ones before that. ``object`` is
        None when none decodes around the hit; ``end`` None when the block
        ends inside it (cut: read again with the next block)."""
        for start in self._starts_before(hit):
            got = self._decode(start)
            if got is self.CUT:
                return None, start, None
            if isinstance(got, tuple) and got[1] > hit:  # an (object, end), not None
                return got[0], start, got[1]
        return None, hit, hit + 1

    def next_start(self, after: int) -> int:
        """Where the next ``{`` after ``after`` is (``len(text)`` when none):
        the hits before it have the same ``{`` before them as the hit at
        ``after``, so no object holds them when none holds that one."""
        j = self.text.find("{", after)
        return len(self.text) if j < 0 else j


#: Local files that a complete read in this process found without
#: :data:`NEEDLE`, by :func:`hta_report.files.version_key`.
_ABSENT: Set[tuple] = set()


def _identity(path: PathOrURL) -> Optional[tuple]:
    """:func:`hta_report.files.version_key` of a local file, None for a URL or
    a file that cannot be stat'ed (its pass is then never skipped)."""
    if is_url(path):
        return None
    try:
        return version_key(path)
    except (OSError, TypeError, ValueError):
        return None


def note_absent(path: PathOrURL) -> None:
    """Record that every decompressed byte of the local file ``path`` was read
    (by the fast parser, :mod:`.fastparse`) and :data:`NEEDLE` is not among
    them, so that :func:`read_memory_events` skips its pass: the same answer
    (it looks for the same bytes) without decompressing the file again (0.03 s
    per 28 MB rank, 0.25 s of the 8-rank fractional benchmark). Kept per
    process, keyed by size and modification time, so a rewritten file is read
    again; a parse served from the cache, or by HTA's parser, records nothing."""
    key = _identity(path)
    if key is not None:
        _ABSENT.add(key)


def read_memory_events(path: PathOrURL) -> MemoryEvents:
    """Every ``[memory]`` event of the trace at ``path`` (``.json`` or
    ``.json.gz``, a local path or a URL), in file order; none, without
    reading, for a file :func:`note_absent` recorded.

    Raises:
        OSError: the file cannot be read (its events were parsed before, so
            this is rare: the caller records the memory step as failed).
    """
    key = _identity(path)
    if key is not None and key in _ABSENT:
        return MemoryEvents()
    rows: List[tuple] = []
    skipped = out_of_range = decoded = 0
    needle = NEEDLE.decode()
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    carry = b""
    with open_text_stream(path) as fh:
        while True:
            block = fh.read(_BLOCK)
            last = not block
            buf = carry + block
            if NEEDLE not in buf:
                carry = b"" if last else buf[-_TAIL:]
                if last:
                    break
                continue
            text = utf8.decode(buf, final=True)
            utf8.reset()
            scan = _Block(text, last, decoder)
            pos, keep_from = 0, None
            while True:
                hit = text.find(needle, pos)
                if hit < 0:
                    break
                obj, start, end = scan.around(hit)
                if end is None and not last:
                    keep_from = start
                    break
                ev = _event(obj) if obj is not None else None
                if ev is OUT_OF_RANGE:
                    out_of_range += 1
                elif ev is not None:
                    rows.append(ev)
                elif obj is None and end == hit + 1:
                    # no object holds this hit, nor any hit before the next '{': count them at once
                    stop = scan.next_start(hit + 1)
                    skipped += text.count(needle, hit, stop)
                    end = text.rfind(needle, hit, stop) + 1
                else:
                    skipped += 1
                pos = max(end or hit + 1, hit + 1)
            decoded += scan.decoded
            if last:
                break
            if keep_from is not None:
                carry = text[keep_from:].encode("utf-8")
            else:
                tail = text[max(pos, len(text) - _TAIL):]
                carry = tail.encode("utf-8")
    if not rows:
        return MemoryEvents(skipped=skipped, out_of_range=out_of_range, decoded=decoded)
    a = np.array([r[:3] for r in rows], dtype=float)
    d = np.array([r[3:] for r in rows], dtype=np.int64)
    return MemoryEvents(ts=a[:, 0], allocated=a[:, 1], reserved=a[:, 2], device_type=d[:, 0], device_id=d[:, 1],
                        skipped=skipped, out_of_range=out_of_range, decoded=decoded)
