"""Large Kineto traces for the benchmark: a real trace repeated end to end in time.

Copy ``k`` of the base trace is shifted by ``k`` times the base trace's span (plus
a gap) and gets its correlation ids, ``External id``, flow ids and
``ProfilerStep#N`` numbers offset so that no two copies share one. Metadata
events (``ph == "M"``) appear once. Files are written gzipped (level 1: the
benchmark measures reading them, not writing them) under a cache directory
outside the repository and reused when their parameters match.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Dict, List

import orjson

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: args that hold ids which must stay distinct between copies.
_ID_ARGS = ("correlation", "External id", "wait_on_cuda_event_record_corr_id", "Python id", "Python parent id")
GENERATOR_VERSION = 3


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


def make_trace(base: Path, out: Path, target_bytes: int, rank: int = 0, world_size: int = 1) -> int:
    """Write ``out`` (gzipped) holding the whole number of copies of ``base``
    nearest ``target_bytes`` of JSON (at least one); returns the decompressed size.

    Reuses ``out`` when its sidecar ``.params`` records the same parameters.
    """
    params = {"base": str(base.resolve()), "base_size": base.stat().st_size, "target_bytes": target_bytes,
              "rank": rank, "world_size": world_size, "version": GENERATOR_VERSION}
    side = out.with_name(out.name + ".params")
    if out.exists() and side.exists():
        try:
            saved = json.loads(side.read_text())
            if saved.get("params") == params:
                return int(saved["decompressed_bytes"])
        except (OSError, ValueError, KeyError):
            pass
    raw = _load(base)
    events = raw["traceEvents"]
    off = _offsets(events)
    meta = {k: v for k, v in raw.items() if k != "traceEvents"}
    if world_size > 1 or "distributedInfo" in meta:
        info = dict(meta.get("distributedInfo") or {})
        info.update(rank=rank, world_size=max(world_size, 1))
        meta["distributedInfo"] = info
    base_bytes = orjson.dumps(events)
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
            parts = [orjson.dumps(_shift(e, k, off)) for e in copy if k == 0 or e.get("ph") != "M"]
            w((b"" if k == 0 else b",\n") + b",\n".join(parts))
            per_copy = written - before
            k += 1
        w(b"\n]}\n")
    os.replace(tmp, out)
    side.write_text(json.dumps({"params": params, "decompressed_bytes": written, "copies": k}))
    return written
