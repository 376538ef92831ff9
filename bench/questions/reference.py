"""Reference answers read straight from a Kineto trace file with json alone
(no hta-report, no HTA): what the question bank checks the MCP tools against.

Every function takes the trace's events (``traceEvents``) and returns the
answer with the raw bytes of the events it read (their compact JSON), which
is what an agent without hta-report would have to read.
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def load(path: Path) -> Dict[str, Any]:
    """The trace document of ``path`` (``.json`` or ``.json.gz``)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return json.load(fh)


def _bytes(events: List[dict]) -> int:
    return sum(len(json.dumps(e, separators=(",", ":"))) for e in events)


def kernels(doc: Dict[str, Any]) -> List[dict]:
    """Complete events of category ``kernel`` (any case)."""
    return [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
            and str(e.get("cat", "")).lower() == "kernel"]


def steps(doc: Dict[str, Any]) -> Tuple[Dict[int, float], int]:
    """``ProfilerStep#N`` annotations on the host: number -> duration (µs)."""
    ev = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
          and STEP.match(str(e.get("name", ""))) and str(e.get("cat", "")).lower() in ("user_annotation", "cpu_op", "operator")]
    return {int(STEP.match(e["name"]).group(1)): float(e["dur"]) for e in ev}, _bytes(ev)


def kernel_totals(doc: Dict[str, Any]) -> Tuple[Dict[str, Tuple[int, float]], int]:
    """Kernel name -> (calls, total µs) over the whole trace."""
    ks = kernels(doc)
    out: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    for e in ks:
        out[e["name"]][0] += 1
        out[e["name"]][1] += float(e.get("dur", 0))
    return {k: (int(v[0]), v[1]) for k, v in out.items()}, _bytes(ks)


def longest_kernel(doc: Dict[str, Any]) -> Tuple[dict, int]:
    """The single longest kernel call (its event)."""
    ks = kernels(doc)
    return (max(ks, key=lambda e: float(e.get("dur", 0))) if ks else {}), _bytes(ks)


def device_name(doc: Dict[str, Any]) -> Tuple[str, int]:
    """The first ``deviceProperties`` entry's name ("" without one)."""
    props = doc.get("deviceProperties") or []
    return (str(props[0].get("name", "")) if props else ""), len(json.dumps(props, separators=(",", ":")))


def step_windows(doc: Dict[str, Any]) -> List[Tuple[int, float, float]]:
    """``(number, start, end)`` of each ``ProfilerStep#N`` (µs, the trace's clock), by start."""
    ev = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
          and STEP.match(str(e.get("name", ""))) and str(e.get("cat", "")).lower() in ("user_annotation", "cpu_op", "operator")]
    return sorted(((int(STEP.match(e["name"]).group(1)), float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev),
                  key=lambda w: w[1])


def analyzed_kernels(doc: Dict[str, Any]) -> Tuple[List[dict], int]:
    """The kernels of the analyzed window by the rule hta-report documents
    (HTA's step filter, ``--drop-last-step``, the default): with two or more
    ``ProfilerStep`` annotations, the kernels launched by a host call (same
    ``correlation``, a runtime event) that starts before the last step
    starts; with fewer, every kernel. Returns the kernels and the bytes of
    every event read (kernels, runtime calls, step annotations)."""
    ks = kernels(doc)
    wins = step_windows(doc)
    if len(wins) < 2:
        return ks, _bytes(ks)
    rt = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
          and str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cuda_driver")]
    launch = {e.get("args", {}).get("correlation"): float(e["ts"]) for e in rt}
    cutoff = wins[-1][1]
    out = [k for k in ks if launch.get(k.get("args", {}).get("correlation"), float("inf")) < cutoff]
    return out, _bytes(ks) + _bytes(rt)


def totals(ks: List[dict]) -> Dict[str, Tuple[int, float]]:
    """Kernel name -> (calls, total µs) of ``ks``."""
    out: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    for e in ks:
        out[e["name"]][0] += 1
        out[e["name"]][1] += float(e.get("dur", 0))
    return {k: (int(v[0]), v[1]) for k, v in out.items()}


# ------------------------------------------------------------------ idle time, synchronizations, optimizer

#: GPU activity: what keeps the GPU busy (kernels, copies, memsets), by Kineto category.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")  # the last two: PyTorch 1.8-1.9
#: Calls that block the host until the GPU is done (runtime) and the ops that make them (``.item()``).
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize")
SYNC_OPS = SYNC_CALLS + ("aten::item", "aten::_local_scalar_dense")
#: Calls that put work on the GPU (the host's next launch after a sync).
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
            "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyAsync",
            "hipMemsetAsync", "cudaGraphLaunch", "hipGraphLaunch")
#: Host categories an ``Optimizer.step#`` annotation is recorded under (not ``gpu_user_annotation``).
HOST_ANNOTATIONS = ("user_annotation", "cpu_op", "operator")
#: Queued stretches shorter than this (µs) are launch latency between back-to-back kernels, the
#: host's (HTA's ``consecutive_kernel_delay``, which hta-report documents as its cutoff).
QUEUED_MIN_US = 30.0
#: How late after a call a gap may start and still have begun in it (µs): CPU and GPU clocks.
TOL_US = 10.0


def _x(doc: Dict[str, Any]) -> List[dict]:
    return [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]


def per_step_windows(doc: Dict[str, Any]) -> List[Tuple[int, float, float]]:
    """The steps hta-report's per-step figures use, by its documented rule:
    ``ProfilerStep`` annotations, the last dropped when there are two or
    more (HTA's step filter), then the first of those left (warm-up) when
    two or more are left."""
    wins = step_windows(doc)
    kept = wins[:-1] if len(wins) >= 2 else wins
    return kept[1:] if len(kept) >= 2 else kept


def _union(iv: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    out: List[List[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def idle_gaps_per_step(doc: Dict[str, Any]) -> Tuple[float, Dict[str, float], int]:
    """GPU idle µs per analyzed step (:func:`per_step_windows`): the time in
    the steps with no kernel, copy or memset on any stream; and that idle
    split three ways: ``queued`` (stretches of :data:`QUEUED_MIN_US` or more
    in which a GPU operation had been launched, its launch call returned,
    and had not started: the GPU waited on another stream or rank, not on
    the host; a gap is split at that launch), then by where the rest's gap
    began on the host: ``sync`` (inside a synchronizing call or op of
    :data:`SYNC_OPS` that waits for the device (:func:`device_syncs`), or a device-to-host copy call, or after one before the
    thread's next launch: the GPU ran dry while the host waited) or
    ``host`` (the rest: the host was busy with other work or launching).
    Returns (idle, split, raw bytes read)."""
    ev = _x(doc)
    wins = per_step_windows(doc)
    gpu = [e for e in ev if str(e.get("cat", "")).lower() in GPU_CATS]
    busy = _union([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu])
    dtoh = {e.get("args", {}).get("correlation") for e in gpu if "DtoH" in str(e.get("name", ""))
            or "Device -> Pageable" in str(e.get("name", ""))}
    host = [e for e in ev if str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cpu_op", "operator")]
    device = {id(e) for e in device_syncs(host)}
    syncs = [e for e in host if id(e) in device
             or (e.get("name") in ("cudaMemcpy", "cudaMemcpyAsync", "hipMemcpy", "hipMemcpyAsync")
                 and e.get("args", {}).get("correlation") in dtoh)]
    launches: Dict[Any, List[float]] = defaultdict(list)
    for e in host:
        if e.get("name") in LAUNCHES:
            launches[e.get("tid")].append(float(e["ts"]))
    for v in launches.values():
        v.sort()
    import bisect
    spans = []
    for e in syncs:
        s, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        nxt = launches.get(e.get("tid"), [])
        j = bisect.bisect_left(nxt, end)
        spans.append((s, max(end + TOL_US, nxt[j] if j < len(nxt) else end)))
    sync_u = _union(spans)
    starts = [a for a, _ in sync_u]
    # queued work: for each GPU operation (by start), the earliest return of a launch call of it or of any
    # operation starting later: from then until the operation starts, work waited on the GPU
    ret = {e.get("args", {}).get("correlation"): float(e["ts"]) + float(e.get("dur", 0)) for e in host
           if e.get("name") in LAUNCHES}
    by_start = sorted((float(e["ts"]), ret.get(e.get("args", {}).get("correlation"), float("inf"))) for e in gpu)
    g_ts = [t for t, _ in by_start]
    suffix = [float("inf")] * (len(by_start) + 1)
    for i in range(len(by_start) - 1, -1, -1):
        suffix[i] = min(suffix[i + 1], by_start[i][1])
    idle, split = 0.0, {"sync": 0.0, "host": 0.0, "queued": 0.0}
    ends = [b for _, b in busy]
    for _, w0, w1 in wins:
        # idle pieces of the window: between busy intervals
        t = w0
        i = bisect.bisect_right(ends, w0)
        pieces = []
        while t < w1:
            if i < len(busy) and busy[i][0] <= t:
                t = max(t, busy[i][1])
                i += 1
                continue
            nb = busy[i][0] if i < len(busy) else w1
            pieces.append((t, min(nb, w1)))
            t = min(nb, w1)
        for a, b in pieces:
            if b <= a:
                continue
            idle += b - a
            q = suffix[bisect.bisect_left(g_ts, b - 1e-6)]  # launched, not started, from q to the gap's end
            if q < b and b - max(a, q) >= QUEUED_MIN_US:
                split["queued"] += b - max(a, q)
                b = max(a, q)
                if b <= a:
                    continue
            # the gap begins where the GPU activity before it ended (or at a)
            k = bisect.bisect_right(ends, a + 1e-9) - 1
            begin = ends[k] if k >= 0 and ends[k] <= a + 1e-9 else a
            j = bisect.bisect_right(starts, begin) - 1
            where = "sync" if j >= 0 and sync_u[j][0] <= begin <= sync_u[j][1] else "host"
            split[where] += b - a
    n = max(len(wins), 1)
    return idle / n, {k: v / n for k, v in split.items()}, _bytes(gpu) + _bytes(host)


RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")


def device_syncs(ev: List[dict]) -> List[dict]:
    """The events of ``ev`` (complete events of one trace) that make the host
    wait for the device: the :data:`SYNC_OPS` events, less a scalar read
    (``aten::item``, ``aten::_local_scalar_dense``) inside which no runtime
    or driver call starts on its thread (a CPU tensor's read: no copy, no
    wait) where the trace records runtime calls; none at all in a trace
    whose host launches no GPU work (nothing queued to wait for)."""
    rt = [e for e in ev if e.get("cat") in RUNTIME_CATS]
    sync = [e for e in ev if e.get("name") in SYNC_OPS]
    if not rt:
        return sync
    if not any(("Launch" in str(e.get("name")) or "Memcpy" in str(e.get("name")) or "Memset" in str(e.get("name")))
               for e in rt):
        return []
    starts: Dict[Any, List[float]] = defaultdict(list)
    for e in rt:
        starts[e.get("tid")].append(float(e["ts"]))
    for v in starts.values():
        v.sort()
    out = []
    for e in sync:
        if e.get("name") in ("aten::item", "aten::_local_scalar_dense"):
            s, t = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            c = starts.get(e.get("tid"), [])
            if bisect.bisect_left(c, t) <= bisect.bisect_left(c, s):
                continue
        out.append(e)
    return out


def sync_totals(doc: Dict[str, Any]) -> Tuple[Dict[str, float], int]:
    """Host µs of each synchronizing call or op (:data:`SYNC_OPS`) starting
    in the analyzed steps (every one without steps), by name."""
    wins = per_step_windows(doc)
    ev = device_syncs(_x(doc))
    if wins:
        ev = [e for e in ev if any(s <= float(e["ts"]) < t for _, s, t in wins)]
    out: Dict[str, float] = defaultdict(float)
    for e in ev:
        out[e["name"]] += float(e.get("dur", 0))
    return dict(out), _bytes(ev)


#: Frames that are not the user's code: installed packages, the standard library, built-ins.
NOT_USER = ("site-packages", "dist-packages", "/lib/python", "<built-in", "<frozen", "nn.Module:", "<string>")
#: Libraries a model's own code calls into (the first component of a frame's path as the profiler
#: trims it): PyTorch's and Hugging Face's packages, NumPy, Triton; the standard library besides.
LIBRARIES = frozenset({"torch", "torchvision", "torchaudio", "triton", "numpy", "transformers", "accelerate",
                       "datasets", "tokenizers", "huggingface_hub", "safetensors"})


def user_frame(name: str) -> bool:
    """Whether a ``python_function`` name is a frame of the user's code: none
    of :data:`NOT_USER` in it, and a relative path's first component neither
    one of :data:`LIBRARIES` nor a standard-library module."""
    import sys

    if any(x in name for x in NOT_USER) or "(" not in name:
        return False
    path = name.split("(")[0]
    top = path.split("/")[0].removesuffix(".py")
    return path.startswith("/") or (top not in LIBRARIES and top not in sys.stdlib_module_names)


def sync_line(doc: Dict[str, Any]) -> Tuple[str, Dict[str, float], int]:
    """The user's source line under which the host spends most time in
    synchronizations: for each outermost synchronizing call or op
    (:data:`SYNC_OPS`) in the analyzed steps (every one without steps), the
    innermost ``python_function`` frame on its thread that encloses it and
    is the user's (:func:`user_frame`), its time summed
    per frame ("file.py(line): function" as the trace names it). Returns
    the top frame ("" without one), every frame's µs, raw bytes read."""
    ev = _x(doc)
    wins = per_step_windows(doc)
    sync = sorted(device_syncs(ev), key=lambda e: (e.get("tid"), float(e["ts"])))
    if wins:
        sync = [e for e in sync if any(s <= float(e["ts"]) < t for _, s, t in wins)]
    outer, last = [], {}
    for e in sync:  # outermost: not inside an earlier sync event of the same thread
        s, t = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if e.get("tid") in last and s < last[e.get("tid")]:
            continue
        last[e.get("tid")] = t
        outer.append(e)
    py = [e for e in ev if str(e.get("cat", "")).lower() == "python_function"]
    by_tid: Dict[Any, List[dict]] = defaultdict(list)
    for e in py:
        by_tid[e.get("tid")].append(e)
    times: Dict[str, float] = defaultdict(float)
    for e in outer:
        s, t = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        frames = [f for f in by_tid.get(e.get("tid"), []) if float(f["ts"]) <= s
                  and float(f["ts"]) + float(f.get("dur", 0)) >= t and user_frame(str(f["name"]))]
        if frames:
            inner = max(frames, key=lambda f: float(f["ts"]))
            times[str(inner["name"])] += t - s
    top = max(times.items(), key=lambda kv: kv[1])[0] if times else ""
    return top, dict(times), _bytes(sync) + _bytes(py)


def optimizer_per_step(doc: Dict[str, Any]) -> Tuple[int, float, float, float, int]:
    """``Optimizer.step#...`` per analyzed step (:func:`per_step_windows`):
    the kernels launched from inside it (a kernel whose launch, the runtime
    call of the same ``correlation``, starts inside an ``Optimizer.step``
    annotation of the same thread), its host µs (the union of those
    annotations on the host, :data:`HOST_ANNOTATIONS`, starting in the
    steps; a ``gpu_user_annotation`` copy is not host time) and its launch
    overhead (the µs of the runtime calls inside it that launched those
    kernels). Returns (steps, kernels per step, host µs per step, launch µs
    per step, raw bytes read); (0, 0, 0, 0, bytes) without steps or annotations."""
    ev = _x(doc)
    wins = per_step_windows(doc)
    opt = [e for e in ev if str(e.get("name", "")).startswith("Optimizer.step#")
           and str(e.get("cat", "")).lower() in HOST_ANNOTATIONS and any(s <= float(e["ts"]) < t for _, s, t in wins)]
    ks = [e for e in ev if str(e.get("cat", "")).lower() == "kernel"]
    rt = [e for e in ev if str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cuda_driver")]
    raw = _bytes(opt) + _bytes(ks) + _bytes(rt)
    if not wins or not opt:
        return 0, 0.0, 0.0, 0.0, raw
    inside: Dict[Any, float] = {}
    for r in rt:
        s = float(r["ts"])
        if any(o.get("tid") == r.get("tid") and float(o["ts"]) <= s <= float(o["ts"]) + float(o.get("dur", 0))
               for o in opt):
            inside[r.get("args", {}).get("correlation")] = float(r.get("dur", 0))
    n = len(wins)
    launched = {k.get("args", {}).get("correlation") for k in ks} & set(inside)
    kernels = sum(1 for k in ks if k.get("args", {}).get("correlation") in inside)
    host = sum(b - a for a, b in _union([(float(o["ts"]), float(o["ts"]) + float(o.get("dur", 0))) for o in opt]))
    return n, kernels / n, host / n, sum(inside[c] for c in launched) / n, raw
