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
"""
from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import List, Optional, Set, Union

import numpy as np

from ..files import is_url, open_text_stream, version_key

#: What every ``[memory]`` event holds, and what the pass looks for.
NEEDLE = b'"[memory]"'
_BLOCK = 8 << 20
#: Bytes kept from the end of a block, so that an event cut by the block
#: boundary is read whole with the next block (Kineto's events are < 1 KB).
_TAIL = 1 << 16


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
    """

    ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    allocated: np.ndarray = field(default_factory=lambda: np.empty(0))
    reserved: np.ndarray = field(default_factory=lambda: np.empty(0))
    device_type: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    device_id: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.ts)

    def shifted(self, offset: float) -> "MemoryEvents":
        """The same events with ``offset`` (µs) subtracted from ``ts``."""
        return MemoryEvents(self.ts - offset, self.allocated, self.reserved, self.device_type, self.device_id,
                            self.skipped)


def _number(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if np.isfinite(v) else None


def _event(obj) -> Optional[tuple]:
    """``(ts, allocated, reserved, device type, device id)`` of a ``[memory]`` event, or None."""
    if type(obj) is not dict or obj.get("name") != "[memory]":
        return None
    args = obj.get("args")
    ts = _number(obj.get("ts"))
    if type(args) is not dict or ts is None:
        return None
    allocated = _number(args.get("Total Allocated"))
    if allocated is None:
        return None
    reserved = _number(args.get("Total Reserved")) or 0.0
    dtype = _number(args.get("Device Type"))
    did = _number(args.get("Device Id"))
    return (ts, allocated, reserved, int(dtype) if dtype is not None else -1, int(did) if did is not None else -1)


def _decode_at(text: str, hit: int, decoder: json.JSONDecoder):
    """The object around ``text[hit]``: tries the nearest ``{`` before it, then
    the ones before that (a writer may put ``args`` before ``name``).
    Returns ``(object, start, end)``; ``object`` None when none decodes
    around the hit; ``end`` None when the text ends inside it (cut block)."""
    start = hit
    for _ in range(3):
        start = text.rfind("{", 0, start)
        if start < 0:
            return None, hit, hit + 1
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if exc.pos >= len(text) - 1 or "Unterminated" in exc.msg:
                return None, start, None
            continue
        if end > hit:
            return obj, start, end
    return None, hit, hit + 1


#: Local files that a complete read in this process found without
#: :data:`NEEDLE`, by :func:`hta_report.files.version_key`.
_ABSENT: Set[tuple] = set()


def _identity(path) -> Optional[tuple]:
    """:func:`hta_report.files.version_key` of a local file, None for a URL or
    a file that cannot be stat'ed (its pass is then never skipped)."""
    if is_url(path):
        return None
    try:
        return version_key(path)
    except (OSError, TypeError, ValueError):
        return None


def note_absent(path) -> None:
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


def read_memory_events(path: Union[str, "object"]) -> MemoryEvents:
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
    skipped = 0
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
            pos, keep_from = 0, None
            while True:
                hit = text.find('"[memory]"', pos)
                if hit < 0:
                    break
                obj, start, end = _decode_at(text, hit, decoder)
                if end is None and not last:
                    keep_from = start
                    break
                ev = _event(obj) if obj is not None else None
                if ev is None:
                    skipped += 1
                else:
                    rows.append(ev)
                pos = max(end or hit + 1, hit + 1)
            if last:
                break
            if keep_from is not None:
                carry = text[keep_from:].encode("utf-8")
            else:
                tail = text[max(pos, len(text) - _TAIL):]
                carry = tail.encode("utf-8")
    if not rows:
        return MemoryEvents(skipped=skipped)
    a = np.array([r[:3] for r in rows], dtype=float)
    d = np.array([r[3:] for r in rows], dtype=np.int64)
    return MemoryEvents(ts=a[:, 0], allocated=a[:, 1], reserved=a[:, 2], device_type=d[:, 0], device_id=d[:, 1],
                        skipped=skipped)
