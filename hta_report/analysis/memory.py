"""Memory use per device from the ``[memory]`` events (C20).

The caching allocator's totals (``Total Allocated``: bytes in live tensors;
``Total Reserved``: bytes the allocator holds from the device, what
``nvidia-smi`` shows, less the CUDA context) after each allocation or free,
from :func:`hta_report.load.memory_events.read_memory_events`; device
capacity from ``deviceProperties[].totalGlobalMem`` (bytes) of the trace's
metadata, matched by ``id``. Neither HTA nor PyTorch's memory tools read
these offline.
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..load.memory_events import MAX_MEMORY_BYTES
from ..model import DeviceMemory, MemoryPoint, MemorySummary
from .events import RankEvents
from .steps import step_windows

#: c10's ``DeviceType`` numbers as the ``[memory]`` events write them.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 20: "privateuseone"}
#: Device types whose ``deviceProperties`` give a capacity.
GPU_TYPES = (1, 6)
#: Points kept per device timeline (each the largest values of its stretch of time).
TIMELINE_POINTS = 300


def device_label(device_type: int, device_id: int) -> str:
    """``cuda:0``, ``cpu``, ``type 9:0`` (an unknown type)."""
    name = DEVICE_TYPES.get(device_type, f"type {device_type}")
    return name if device_type == 0 or device_id < 0 else f"{name}:{device_id}"


def capacities(meta: dict) -> dict:
    """``deviceProperties[]``: device id -> ``totalGlobalMem`` (bytes), entries
    with a positive capacity up to
    :data:`~hta_report.load.memory_events.MAX_MEMORY_BYTES` only (a larger
    one is no device's: unknown)."""
    props = meta.get("deviceProperties") if isinstance(meta, dict) else None
    out = {}
    for p in props if isinstance(props, list) else []:
        if not isinstance(p, dict):
            continue
        did, mem = p.get("id"), p.get("totalGlobalMem")
        if isinstance(did, int) and not isinstance(did, bool) and isinstance(mem, (int, float)) \
                and not isinstance(mem, bool) and np.isfinite(mem) and 0 < mem <= MAX_MEMORY_BYTES:
            out[did] = int(mem)
    return out


def timeline(ts: np.ndarray, allocated: np.ndarray, reserved: np.ndarray,
             points: int = TIMELINE_POINTS) -> List[MemoryPoint]:
    """At most ``points`` points of a device's memory over time: all events
    when there are few, else one per equal stretch of time holding the
    stretch's largest allocated and reserved totals (so peaks survive)."""
    if len(ts) <= points:
        return [MemoryPoint(float(t), int(a), int(r)) for t, a, r in zip(ts, allocated, reserved)]
    edges = np.linspace(ts[0], ts[-1], points + 1)
    idx = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, points - 1)
    out = []
    for b in np.unique(idx):
        sel = idx == b
        i = np.flatnonzero(sel)[int(np.argmax(allocated[sel]))]
        out.append(MemoryPoint(float(ts[i]), int(allocated[i]), int(reserved[sel].max())))
    return out


def memory_summary(events, meta: dict, ev: RankEvents) -> MemorySummary:
    """Peaks per device and their timelines from ``events`` (a
    :class:`~hta_report.load.memory_events.MemoryEvents` on the aligned
    timeline), with capacities from ``meta`` (the trace metadata).
    Negative totals (a free of a block allocated before profiling started)
    count as 0. A GPU's event whose allocated or reserved total is above the
    device's capacity (bytes) is not believed, as the reader does not believe
    totals beyond 2**50 bytes: both count in
    :attr:`~hta_report.model.MemorySummary.out_of_range` and in no figure.
    The rank's main device is its GPU with the most events, else the device
    with the most events."""
    out = MemorySummary(out_of_range=int(getattr(events, "out_of_range", 0)))
    if len(events) == 0:
        out.recorded = out.out_of_range > 0
        return out
    out.recorded = True
    order = np.argsort(events.ts, kind="stable")
    ts, dtype, did = events.ts[order], events.device_type[order], events.device_id[order]
    alloc = np.maximum(events.allocated[order], 0.0)
    resv = np.maximum(events.reserved[order], 0.0)
    caps = capacities(meta)
    believed = np.ones(len(ts), dtype=bool)
    for i, cap in caps.items():
        gpu = np.isin(dtype, GPU_TYPES) & (did == i)
        believed &= ~(gpu & ((alloc > cap) | (resv > cap)))
    out.out_of_range += int((~believed).sum())
    ts, dtype, did, alloc, resv = ts[believed], dtype[believed], did[believed], alloc[believed], resv[believed]
    if not len(ts):
        return out
    keys = sorted({(int(a), int(b)) for a, b in zip(dtype, did)})
    for t, i in keys:
        sel = (dtype == t) & (did == i)
        d = DeviceMemory(device=device_label(t, i), events=int(sel.sum()),
                         peak_allocated_bytes=int(alloc[sel].max()), peak_reserved_bytes=int(resv[sel].max()))
        if t in GPU_TYPES and i in caps:
            d.capacity_bytes = caps[i]
            d.peak_allocated_pct = 100 * d.peak_allocated_bytes / d.capacity_bytes
            d.peak_reserved_pct = 100 * d.peak_reserved_bytes / d.capacity_bytes
        d.timeline = timeline(ts[sel], alloc[sel], resv[sel])
        out.devices.append(d)
    gpus = [d for d, (t, _) in zip(out.devices, keys) if t in GPU_TYPES]
    main = max(gpus or out.devices, key=lambda d: d.events)
    out.device = main.device
    out.peak_allocated_bytes, out.peak_reserved_bytes = main.peak_allocated_bytes, main.peak_reserved_bytes
    out.capacity_bytes = main.capacity_bytes
    out.peak_allocated_pct, out.peak_reserved_pct = main.peak_allocated_pct, main.peak_reserved_pct
    out.step_starts_us = [float(s) for s in step_windows(ev)[:, 1]]
    return out
