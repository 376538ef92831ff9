"""Large Kineto traces for the benchmark: a real trace repeated end to end in time.

Copy ``k`` of the base trace is shifted by ``k`` times the base trace's span (plus
a gap) and gets its correlation ids, ``External id``, flow ids and
``ProfilerStep#N`` numbers offset so that no two copies share one. Metadata
events (``ph == "M"``) appear once. Files are written gzipped (level 1: the
benchmark measures reading them, not writing them) under a cache directory
outside the repository and reused when their parameters match.

Formats (``fmt``), the traces people have:

- ``whole-us``: the base trace's events re-serialized (orjson, compact) as they are;
- ``fractional``: the same with fractional-µs timestamps, as PyTorch >= 2.3
  writes them (``"ts": 4457415638173.640``): every time point ``x`` (start and
  end of each event) becomes ``x - t0 + KINETO_BASE_US + h(x)`` with ``h(x)`` a
  fixed pseudo-random fraction in [0, 1) with 3 decimals. The map is monotone,
  so order, nesting and equal starts are kept, and events of 0 or 1 µs become
  sub-µs ones (which HTA rounds to ``dur = -1`` or 0), as in real traces;
- ``kineto-text`` (:func:`tile_text`): a trace recorded by ``hta-report
  collect`` tiled as text, keeping Kineto's own formatting (indentation,
  ``"ts": 4457415638173.640`` with three decimals, ``,`` on its own line);
  only the numbers that must differ between copies are rewritten.

:func:`whitespace_bomb` writes a small ``.json.gz`` that inflates to gigabytes
of whitespace inside a valid ``{"traceEvents": [...]}``.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import orjson

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: args that hold ids which must stay distinct between copies.
_ID_ARGS = ("correlation", "External id", "wait_on_cuda_event_record_corr_id", "Python id", "Python parent id")
GENERATOR_VERSION = 4
#: Where fractional-µs timestamps start (µs): the order of magnitude Kineto writes
#: (``baseTimeNanoseconds``-relative µs, ~4.5e12, where float64 still holds ns).
KINETO_BASE_US = 4457415638173
FORMATS = ("whole-us", "fractional", "kineto-text")


def _load(path: Path) -> dict:
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
        return orjson.loads(f.read())


def _offsets(events: List[dict]) -> Dict[str, int]:
    """Per-copy increments: one more than the largest id of each kind, the span, the step count."""
    off = {"ts": 0, "id": 0, "step": 0}
    lo, hi = None, None
    steps = []
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)):
            end = ts + (e.get("dur") or 0)
            lo = ts if lo is None or ts < lo else lo
            hi = end if hi is None or end > hi else hi
        if isinstance(e.get("id"), int):
            off["id"] = max(off["id"], e["id"] + 1)
        args = e.get("args")
        if isinstance(args, dict):
            for k in _ID_ARGS:
                v = args.get(k)
                if isinstance(v, int) and not isinstance(v, bool):
                    off[k] = max(off.get(k, 0), v + 1)
        m = _STEP.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    off["ts"] = int((hi - lo) + 1000) if lo is not None else 0
    off["step"] = (max(steps) - min(steps) + 1) if steps else 0
    return off


def _shift(e: dict, k: int, off: Dict[str, int]) -> dict:
    if k == 0:
        return e
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + k * off["ts"]
    if isinstance(e.get("id"), int):
        e["id"] = e["id"] + k * off["id"]
    args = e.get("args")
    if isinstance(args, dict):
        for key in _ID_ARGS:
            v = args.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0 and key in off:
                args[key] = v + k * off[key]
    m = _STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * off['step']}"
    return e


def _fraction(x: int) -> float:
    """A fixed pseudo-random fraction of a µs in [0, 1), 3 decimals, for time point ``x``."""
    return ((x * 2654435761) >> 7) % 1000 / 1000


def _fractional(e: dict, t0: int) -> dict:
    """``e`` with fractional-µs ``ts`` and ``dur`` (see the module docstring)."""
    ts = e.get("ts")
    if type(ts) is not int:
        return e
    dur = e.get("dur")
    start = ts - t0 + KINETO_BASE_US
    e["ts"] = start + _fraction(ts)
    if type(dur) is int:
        e["dur"] = round(dur + _fraction(ts + dur) - _fraction(ts), 3)
    return e


def _reuse(out: Path, params: dict) -> Optional[int]:
    """The decompressed size recorded beside ``out`` when it was made with ``params``."""
    side = out.with_name(out.name + ".params")
    if out.exists() and side.exists():
        try:
            saved = json.loads(side.read_text())
            if saved.get("params") == params:
                return int(saved["decompressed_bytes"])
        except (OSError, ValueError, KeyError):
            pass
    return None


def make_trace(base: Path, out: Path, target_bytes: int, rank: int = 0, world_size: int = 1,
               fmt: str = "whole-us") -> int:
    """Write ``out`` (gzipped) holding the whole number of copies of ``base``
    nearest ``target_bytes`` of JSON (at least one); returns the decompressed size.

    ``fmt``: one of :data:`FORMATS` (``kineto-text`` is :func:`tile_text`).
    Reuses ``out`` when its sidecar ``.params`` records the same parameters.
    """
    if fmt == "kineto-text":
        return tile_text(base, out, target_bytes, rank, world_size)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    params = {"base": str(base.resolve()), "base_size": base.stat().st_size, "target_bytes": target_bytes,
              "rank": rank, "world_size": world_size, "version": GENERATOR_VERSION, "fmt": fmt}
    side = out.with_name(out.name + ".params")
    reused = _reuse(out, params)
    if reused is not None:
        return reused
    raw = _load(base)
    events = raw["traceEvents"]
    off = _offsets(events)
    meta = {k: v for k, v in raw.items() if k != "traceEvents"}
    if world_size > 1 or "distributedInfo" in meta:
        info = dict(meta.get("distributedInfo") or {})
        info.update(rank=rank, world_size=max(world_size, 1))
        meta["distributedInfo"] = info
    base_bytes = orjson.dumps(events)
    t0 = min(e["ts"] for e in events if type(e.get("ts")) is int) if fmt == "fractional" else 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    written = 0
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        def w(b: bytes) -> None:
            nonlocal written
            f.write(b)
            written += len(b)

        # the metadata as Kineto writes it (": " after keys): HTA finds ranks with r'"rank":\s+(\d+)'
        head = json.dumps(meta)[:-1].encode()  # the metadata object without its closing brace
        w(head + (b', "traceEvents": [\n' if len(meta) else b'"traceEvents": [\n'))
        k, per_copy = 0, 0
        while k == 0 or written + per_copy / 2 < target_bytes:  # the whole number of copies nearest the target
            before = written
            copy = orjson.loads(base_bytes)  # a fresh copy to mutate
            shifted = (_shift(e, k, off) for e in copy if k == 0 or e.get("ph") != "M")
            if fmt == "fractional":
                shifted = (_fractional(e, t0) for e in shifted)
            parts = [orjson.dumps(e) for e in shifted]
            w((b"" if k == 0 else b",\n") + b",\n".join(parts))
            per_copy = written - before
            k += 1
        w(b"\n]}\n")
    os.replace(tmp, out)
    side.write_text(json.dumps({"params": params, "decompressed_bytes": written, "copies": k}))
    return written


_TEXT_TS = re.compile(rb'("ts"\s*:\s*)(-?\d+)(?:\.(\d+))?')
_TEXT_IDS = re.compile(rb'("(?:' + b"|".join(re.escape(k.encode()) for k in _ID_ARGS + ("id",)) + rb')"\s*:\s*)(\d+)')
_TEXT_STEP = re.compile(rb'("name"\s*:\s*"ProfilerStep#)(\d+)"')


def _split_events(body: bytes) -> Tuple[List[bytes], int]:
    """The text of each element of a JSON array whose body starts ``body``,
    cut at the commas outside strings and brackets, and the index of the
    array's closing ``]`` in ``body``."""
    out, depth, start, in_str, esc = [], 0, 0, False, False
    for i, c in enumerate(body):
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
            if depth < 0:
                out.append(body[start:i])
                return out, i
        elif c == 0x2C and depth == 0:
            out.append(body[start:i])
            start = i + 1
    raise ValueError("the array is not closed")


def _shift_text(text: bytes, k: int, off: Dict[str, int]) -> bytes:
    """One event's text for copy ``k``: ``ts`` moved by ``k`` spans (decimals kept),
    ids and step numbers offset; everything else byte for byte."""
    def ts(m: re.Match) -> bytes:
        whole, frac = int(m.group(2)) + k * off["ts"], m.group(3)
        return m.group(1) + (b"%d.%s" % (whole, frac) if frac is not None else b"%d" % whole)

    def ids(m: re.Match) -> bytes:
        key = m.group(1).split(b'"')[1].decode()
        inc = off.get(key, 0) if key != "id" else off["id"]
        return m.group(1) + b"%d" % (int(m.group(2)) + k * inc)

    text = _TEXT_TS.sub(ts, text)
    text = _TEXT_IDS.sub(ids, text)
    return _TEXT_STEP.sub(lambda m: m.group(1) + b'%d"' % (int(m.group(2)) + k * off["step"]), text)


def tile_text(base: Path, out: Path, target_bytes: int, rank: int = 0, world_size: int = 1) -> int:
    """Write ``out`` (gzipped): the trace ``base`` (as ``hta-report collect``
    writes it) tiled as text to the whole number of copies nearest
    ``target_bytes``; returns the decompressed size.

    The header, every event's text and the part after the events are kept
    byte for byte, Kineto's formatting included; copy ``k`` rewrites only the
    numbers that must differ (``ts`` plus ``k`` spans with its decimals, ids,
    ``ProfilerStep#N``) and leaves out the metadata events (``"ph": "M"``).
    Ranks come from the file name (``base`` has no ``distributedInfo``), so
    ``rank`` and ``world_size`` only name the parameters.

    Raises:
        ValueError: ``base``'s events do not split into texts that parse as its events.
    """
    params = {"base": str(base.resolve()), "base_size": base.stat().st_size, "target_bytes": target_bytes,
              "rank": rank, "world_size": world_size, "version": GENERATOR_VERSION, "fmt": "kineto-text"}
    reused = _reuse(out, params)
    if reused is not None:
        return reused
    with (gzip.open(base, "rb") if base.suffix == ".gz" else open(base, "rb")) as f:
        raw = f.read()
    events = orjson.loads(raw)["traceEvents"]
    m = re.search(rb'"traceEvents"\s*:\s*\[', raw)
    start = m.end()
    texts, close = _split_events(raw[start:])
    close += start
    if len(texts) != len(events) or any(orjson.loads(t) != e for t, e in zip(texts, events)):
        raise ValueError(f"{base}: cannot split its events as text")
    off = _offsets(events)
    head, tail = raw[:start], raw[close:]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    written, k, per_copy = 0, 0, 0
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(head)
        written += len(head)
        while k == 0 or written + per_copy / 2 < target_bytes:
            parts = texts if k == 0 else [_shift_text(t, k, off) for t, e in zip(texts, events) if e.get("ph") != "M"]
            chunk = (b"" if k == 0 else b",") + b",".join(parts)
            f.write(chunk)
            written += len(chunk)
            per_copy = len(chunk)
            k += 1
        f.write(tail)
        written += len(tail)
    os.replace(tmp, out)
    out.with_name(out.name + ".params").write_text(
        json.dumps({"params": params, "decompressed_bytes": written, "copies": k}))
    return written


def whitespace_bomb(out: Path, whitespace_bytes: int, events: Optional[List[dict]] = None) -> int:
    """Write ``out`` (gzip, level 9): ``{"traceEvents": [`` the ``events`` (a
    small valid trace by default), ``whitespace_bytes`` of spaces and newlines,
    then ``]}``: valid JSON whose inflated size is nearly all whitespace
    between two events. Returns the decompressed size (bytes)."""
    if events is None:
        events = [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
             "args": {"External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
             "args": {"External id": 2}},
        ]
    params = {"whitespace_bytes": whitespace_bytes, "events": events, "version": GENERATOR_VERSION}
    reused = _reuse(out, params)
    if reused is not None:
        return reused
    first, rest = orjson.dumps(events[0]), b"".join(b"," + orjson.dumps(e) for e in events[1:])
    head, end = b'{"traceEvents": [' + first, rest + b"]}"
    block = b" " * ((16 << 20) - 1) + b"\n"  # 16 MiB: deflate's best ratio, about 1030:1
    written = len(head) + len(end)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wb", compresslevel=9) as f:
        f.write(head)
        left = whitespace_bytes
        while left > 0:
            piece = block if left >= len(block) else block[:left]
            f.write(piece)
            left -= len(piece)
        written += whitespace_bytes
        f.write(end)
    os.replace(tmp, out)
    out.with_name(out.name + ".params").write_text(json.dumps({"params": params, "decompressed_bytes": written}))
    return written
