"""What must hold of a report on any real trace, whoever recorded it.

Used by ``tests/test_real_traces.py`` (every folder under ``../shared/traces``)
and ``bench/population.py`` (any folder tree of traces). Each check returns
the invariants a result breaks, as ``(name, detail)``; none means it holds.

The GPU check reads the raw files with the standard library's ``json``, not
with hta-report's loader, so a loader that misses the GPU cannot also hide it.
"""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

#: GPU event categories in every Kineto generation: today's names and
#: PyTorch 1.8-1.9's (compared in lower case).
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
#: TraceLens parity: our exact span busy % within this many points of its
#: ``busy_time`` where the two spans agree (issue 28, item 7).
TRACELENS_POINTS = 1.5
#: Spans "agree" when they differ by less than this share.
SPAN_AGREEMENT = 0.01
#: Float slack for sums of percentages.
SLACK = 1e-6

Broken = Tuple[str, str]


def _events(path: Path) -> list:
    """The raw ``traceEvents`` of a file (standard library ``json``), or []."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError, EOFError):
        return []
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else []
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def raw_gpu_events(path: Path) -> int:
    """GPU events (kernels, memcpys, memsets, any generation's spelling) in a
    trace file, counted from the raw JSON; 0 when it does not parse."""
    return sum(1 for e in _events(path) if str(e.get("cat", "")).lower() in GPU_CATEGORIES)


def raw_host_steps(path: Path) -> int:
    """``ProfilerStep#N`` annotations on the host (not their copies on the GPU's timeline) in a trace file."""
    return sum(1 for e in _events(path) if str(e.get("name", "")).startswith("ProfilerStep#")
               and str(e.get("cat", "")).lower() != "gpu_user_annotation")


def tracelens_reference(folder: Path) -> Optional[Dict[str, float]]:
    """TraceLens's own ``gpu_timeline`` of a ``tracelens/<case>`` folder
    (``reference_gpu_timeline/<case>.csv`` beside it): type -> (ms, %), the
    first block where the file splits recompute; None without one."""
    ref = folder.parent / "reference_gpu_timeline" / f"{folder.name}.csv"
    if not ref.is_file():
        return None
    out: Dict[str, float] = {}
    with ref.open() as fh:
        for row in csv.DictReader(fh):
            if row.get("is_recompute", "False") != "False":
                continue
            out[f"{row['type']}_ms"] = float(row["time ms"])
            out[f"{row['type']}_pct"] = float(row["percent"])
    return out


def check(result: dict, folder: Path, markdown: str = "", files: Iterable[Path] = ()) -> List[Broken]:
    """The invariants ``result`` (the JSON of ``analyze --json``) breaks.

    Args:
        result: the result as a dict.
        folder: the trace folder it came from (the TraceLens reference is looked up beside it).
        markdown: the markdown report of the same result (for what it tells the reader).
        files: the trace files (raw GPU events are counted in them).
    """
    broken: List[Broken] = []
    inv = result["inventory"]
    for u in inv["unreadable"]:
        broken.append(("no failure", f"{Path(u['path']).name}: unreadable: {u['reason'][:160]}"))
    for r in result["ranks"]:
        for f in r["failures"]:
            broken.append(("no failure", f"rank {r['rank']}: {f['step']} not computed: {f['reason'][:160]}"))
            if not f["reason"].strip():
                broken.append(("partial only with a reason", f"rank {r['rank']}: {f['step']} without a reason"))
    by_file = {r["file"]: r for r in result["ranks"]}
    for path in files:
        n = raw_gpu_events(path)
        r = by_file.get(str(path))
        if n and r is not None and not r["has_gpu"]:
            broken.append(("GPU seen", f"{path.name}: {n:,} GPU events in the file, the report says no GPU"))
        steps = raw_host_steps(path)
        if r is not None and not inv["last_step_included"] and steps >= 2 and r["steps"]["count"] >= steps:
            broken.append(("the last step dropped where the report says so",
                           f"{path.name}: {steps} steps in the file, {r['steps']['count']} in the report"))
    gains: Dict[int, float] = {}
    idle_claims: Dict[int, float] = {}
    for f in result["findings"]:
        for g in f["rank_gains"]:
            gains[g["rank"]] = gains.get(g["rank"], 0.0) + g["gain_pct"]
            idle = sum(us for pool, us in g["sources"].items() if pool.startswith("idle:"))
            idle_claims[g["rank"]] = idle_claims.get(g["rank"], 0.0) + idle
    for r in result["ranks"]:
        rank, window = r["rank"], r["window_us"]
        if gains.get(rank, 0.0) > 100 + SLACK:
            broken.append(("gains within the window", f"rank {rank}: findings claim {gains[rank]:.1f} % of it"))
        if r["has_gpu"] and window > 0:
            busy = 100 * r["idle_attribution"]["busy_us"] / window
            claimed = 100 * idle_claims.get(rank, 0.0) / window
            if busy + claimed > 100 + SLACK:
                broken.append(("busy + claimed idle within the window",
                               f"rank {rank}: busy {busy:.1f} % + idle claimed by findings {claimed:.1f} %"))
    unchecked = [c for c in result["checks"] if c["status"] == "not checked"
                 and ("failed" in c["detail"] or "is not known" in c["detail"])]
    incomplete = bool(inv["unreadable"]) or any(r["failures"] for r in result["ranks"]) or bool(unchecked)
    if "looks healthy" in markdown and incomplete:
        broken.append(("never 'looks healthy' with a section not analyzed",
                       "the report says the run looks healthy although part of it was not analyzed"))
    ref = tracelens_reference(folder)
    gpu = [r for r in result["ranks"] if r["has_gpu"]]
    if ref is not None and len(gpu) == 1 and "gpu_span_busy_pct" in gpu[0]:  # (results of before schema 3 lack it)
        r = gpu[0]
        span_ref = ref["total_time_ms"] * 1e3
        agree = abs(r["gpu_span_us"] - span_ref) <= SPAN_AGREEMENT * span_ref
        diff = r["gpu_span_busy_pct"] - ref["busy_time_pct"]
        if agree and abs(diff) > TRACELENS_POINTS:
            broken.append(("TraceLens busy parity", f"ours {r['gpu_span_busy_pct']:.2f} %, TraceLens "
                                                      f"{ref['busy_time_pct']:.2f} % over the same span"))
    return broken


def tracelens_row(result: dict, folder: Path) -> Optional[str]:
    """``ours 99.03 % / TraceLens 99.03 % (span 159.99 ms, same)``, or None without a reference."""
    ref = tracelens_reference(folder)
    gpu = [r for r in result["ranks"] if r["has_gpu"]]
    if ref is None or len(gpu) != 1 or "gpu_span_busy_pct" not in gpu[0]:
        return None
    r = gpu[0]
    span_ref = ref["total_time_ms"] * 1e3
    same = abs(r["gpu_span_us"] - span_ref) <= SPAN_AGREEMENT * span_ref
    spans = (f"span {span_ref / 1e3:.2f} ms, same" if same else
             f"spans differ: ours {r['gpu_span_us'] / 1e3:.2f} ms, TraceLens {span_ref / 1e3:.2f} ms")
    return f"ours {r['gpu_span_busy_pct']:.2f} % / TraceLens {ref['busy_time_pct']:.2f} % ({spans})"
