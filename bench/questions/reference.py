"""Reference answers read straight from a Kineto trace file with json alone
(no hta-report, no HTA): what the question bank checks the MCP tools against.

Every function takes the trace's events (``traceEvents``) and returns the
answer with the raw bytes of the events it read (their compact JSON), which
is what an agent without hta-report would have to read.
"""
from __future__ import annotations

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
