"""Mutated Kineto traces for property-based tests (hypothesis) and bench/fuzz.py.

Used by tests only (not shipped). A *case* is a directory of one mutated trace,
sometimes beside a good trace of another rank. Mutations are structural (on
the parsed document: fields dropped, values of the wrong type, NaN, huge
integers, nested objects, hostile strings, events shuffled, duplicated or cut)
or on the bytes (truncated at a random point, bytes flipped, inserted or
overwritten), on plain or gzipped JSON.

:func:`run_case` analyzes a case and renders it (markdown and JSON; HTML on
request) and says how it ended; anything but success or an
:class:`~hta_report.errors.HtaReportError` propagates.
"""
from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from hypothesis import strategies as st

from kineto import TraceBuilder, simple_gpu_trace

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("HTA_REPORT_SHARED", HERE.parent.parent / "shared")) / "traces" / "hta"


def _cpu_only() -> Dict[str, Any]:
    b = TraceBuilder(rank=0)
    for i in range(3):
        t0 = i * 500.0
        b.step(i + 1, t0, 500)
        b.cpu_op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0 + 5, 50, cat="user_annotation")
        b.cpu_op("aten::mm", t0 + 100, 200)
        b.cpu_op("aten::item", t0 + 320, 30)
    return b.document()


def _shared(name: str) -> Optional[Dict[str, Any]]:
    """A small real trace from ../shared (read in place, never copied); None when absent."""
    folder = SHARED / name
    files = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not files:
        return None
    with gzip.open(files[0], "rb") as fh:
        return json.loads(fh.read())


def bases() -> List[Tuple[str, Dict[str, Any]]]:
    """The valid traces that get mutated: built GPU and CPU traces, plus
    ``triton_example`` from ../shared when present."""
    out = [("gpu", simple_gpu_trace(rank=0, steps=3).document()), ("cpu", _cpu_only())]
    triton = _shared("triton_example")
    if triton is not None:
        out.append(("triton_example", triton))
    return out


HOSTILE = [
    "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "$\\frac{$", "$$", "{{ 7*7 }}", "\x00\x1b[2J",
    "\ud800", "a|b\n## heading", "ProfilerStep#", "ProfilerStep#-1", "ProfilerStep#99999999999999999999999",
    "ProfilerStep#7", "ncclDevKernel_AllReduce", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)",
    "cudaStreamSynchronize", "cudaLaunchKernel", "enumerate(DataLoader)#x", "", " ", "kernel", "cpu_op",
    "gpu_memcpy", "gpu_memset", "cuda_runtime", "user_annotation", "Trace", "fwdbwd", "ac2g",
    "cuda_profiler_range", "X", "M", "i", "f", "s", "x" * 3000, "核函数", "\u202eevil",
]
NUMBERS = [0, -1, 1, 2 ** 31, 2 ** 53, 2 ** 53 + 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, -(10 ** 30), 1e308,
           float("nan"), float("inf"), float("-inf"), 0.5, -0.0, 1e-300]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s", "index", "end", "stream"]
ARG_KEYS = ["External id", "correlation", "stream", "device", "bytes", "memory bandwidth (GB/s)", "Collective name",
            "In msg nelems", "dtype", "Group size", "Rank", "Input Dims", "wait_on_stream", "Ev Idx"]
TOP_KEYS = ["traceEvents", "distributedInfo", "deviceProperties", "schemaVersion", "displayTimeUnit",
            "baseTimeNanoseconds", "schema", "nodes", "traceName"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.sampled_from(HOSTILE),
)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                                                         max_size=3), max_leaves=5)
_index = st.integers(min_value=0, max_value=10 ** 6)

structural_op = st.one_of(
    st.tuples(st.just("drop_field"), _index, st.sampled_from(EVENT_KEYS)),
    st.tuples(st.just("set_field"), _index, st.sampled_from(EVENT_KEYS) | st.text(max_size=6), values),
    st.tuples(st.just("set_arg"), _index, st.sampled_from(ARG_KEYS), values),
    st.tuples(st.just("drop_field_everywhere"), st.sampled_from(["ts", "dur", "name", "cat", "pid", "tid", "args", "ph"]),
              st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("set_field_everywhere"), st.sampled_from(["ts", "dur", "name", "cat", "pid", "tid", "args"]),
              values, st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("set_top"), st.sampled_from(TOP_KEYS), values),
    st.tuples(st.just("drop_top"), st.sampled_from(TOP_KEYS)),
    st.tuples(st.just("set_dist"), st.sampled_from(["rank", "backend", "world_size"]), values),
    st.tuples(st.just("set_device"), st.sampled_from(["name", "id", "totalGlobalMem"]), values),
    st.tuples(st.just("shuffle"), st.randoms(use_true_random=False)),
    st.tuples(st.just("cut"), st.floats(min_value=0, max_value=1)),
    st.tuples(st.just("duplicate"), _index, st.integers(min_value=1, max_value=5)),
    st.tuples(st.just("replace_event"), _index, values),
    st.tuples(st.just("scale_times"), st.sampled_from([1e3, 1e-3, -1, 1e12, 0])),
)

byte_op = st.one_of(
    st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(min_value=0, max_value=1), st.integers(1, 255)),
                                        min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("overwrite"), st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=64)),
)


def _pick(seq: List[Any], i: int) -> Any:
    return seq[i % len(seq)] if seq else None


def _every(events: List[Any], step: int) -> List[Dict[str, Any]]:
    return [e for i, e in enumerate(events) if isinstance(e, dict) and i % step == 0]


def mutate(doc: Dict[str, Any], ops: List[tuple]) -> Any:
    """A deep copy of ``doc`` with ``ops`` (from :data:`structural_op`) applied."""
    doc = copy.deepcopy(doc)
    for op in ops:
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        events = events if isinstance(events, list) else []
        kind = op[0]
        if kind == "drop_field":
            e = _pick(events, op[1])
            if isinstance(e, dict):
                e.pop(op[2], None)
        elif kind == "set_field":
            e = _pick(events, op[1])
            if isinstance(e, dict):
                e[op[2]] = copy.deepcopy(op[3])
        elif kind == "set_arg":
            e = _pick(events, op[1])
            if isinstance(e, dict):
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"][op[2]] = copy.deepcopy(op[3])
        elif kind == "drop_field_everywhere":
            for e in _every(events, op[2]):
                e.pop(op[1], None)
        elif kind == "set_field_everywhere":
            for e in _every(events, op[3]):
                e[op[1]] = copy.deepcopy(op[2])
        elif kind == "set_top" and isinstance(doc, dict):
            doc[op[1]] = copy.deepcopy(op[2])
        elif kind == "drop_top" and isinstance(doc, dict):
            doc.pop(op[1], None)
        elif kind == "set_dist" and isinstance(doc, dict):
            if not isinstance(doc.get("distributedInfo"), dict):
                doc["distributedInfo"] = {}
            doc["distributedInfo"][op[1]] = copy.deepcopy(op[2])
        elif kind == "set_device" and isinstance(doc, dict):
            props = doc.get("deviceProperties")
            if isinstance(props, list) and props and isinstance(props[0], dict):
                props[0][op[1]] = copy.deepcopy(op[2])
        elif kind == "shuffle":
            op[1].shuffle(events)
        elif kind == "cut":
            del events[int(len(events) * op[1]):]
        elif kind == "duplicate":
            e = _pick(events, op[1])
            events.extend(copy.deepcopy(e) for _ in range(op[2]))
        elif kind == "replace_event" and events:
            events[op[1] % len(events)] = copy.deepcopy(op[2])
        elif kind == "scale_times":
            for e in events:
                if isinstance(e, dict):
                    for key in ("ts", "dur"):
                        if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool):
                            e[key] = e[key] * op[1]
    return doc


def mutate_bytes(data: bytes, ops: List[tuple]) -> bytes:
    """``data`` with ``ops`` (from :data:`byte_op`) applied."""
    buf = bytearray(data)
    for op in ops:
        at = int(len(buf) * op[1]) if op[0] != "flip" else 0
        if op[0] == "truncate":
            del buf[at:]
        elif op[0] == "flip":
            for where, mask in op[1]:
                if buf:
                    i = min(int(len(buf) * where), len(buf) - 1)
                    buf[i] ^= mask
        elif op[0] == "insert":
            buf[at:at] = op[2]
        elif op[0] == "overwrite":
            buf[at:at + len(op[2])] = op[2]
    return bytes(buf)


def encode(doc: Any, gz: bool) -> bytes:
    """``doc`` as trace file bytes (NaN and Infinity as JSON extensions, as Python writes them)."""
    data = json.dumps(doc, allow_nan=True).encode("utf-8")
    return gzip.compress(data, compresslevel=1) if gz else data


def good_rank(rank: int = 1) -> bytes:
    """A valid CPU-only trace of ``rank`` to sit beside a mutated one (cheap to analyze)."""
    doc = _cpu_only()
    doc["distributedInfo"]["rank"] = rank
    return encode(doc, gz=False)


def run_case(files: Dict[str, bytes], html: bool = False,
             analyze: Optional[Callable] = None) -> Tuple[str, Optional[BaseException]]:
    """Analyze a directory holding ``files`` (name -> bytes) and render the result.

    Returns:
        ``("ok", None)``, ``("error", exc)`` for an HtaReportError raised by
        our checks, ``("converted", exc)`` for one converted from an unexpected
        exception (HTA's or ours) by the catch-all in loading or analysis
        (also when that rank was only listed as unreadable beside good ones).
        Any other exception propagates.
    """
    from hta_report.api import analyze as default_analyze
    from hta_report.errors import HtaReportError, TraceError
    from hta_report.model import UnreadableTrace
    from hta_report.model_check import check_result
    from hta_report.render import render

    analyze = analyze or default_analyze
    folder = Path(tempfile.mkdtemp(prefix="hta-fuzz-"))
    try:
        for name, data in files.items():
            (folder / name).write_bytes(data)
        try:
            result = analyze(folder)
        except HtaReportError as exc:
            return ("converted" if is_converted(exc) else "error"), exc
        render(result, "md")
        check_result(json.loads(render(result, "json")))  # what analyze writes, compare reads back
        if html:
            render(result, "html")
        converted = [u for u in result.inventory.unreadable if is_converted_reason(u.reason)]
        converted += [UnreadableTrace(path=r.file, reason=f"analysis failed at {f.step}: {f.reason}")
                      for r in result.ranks for f in r.failures]  # a step failed, the rest of the rank reported
        return ("converted", TraceError(converted[0].reason, converted[0].path)) if converted else ("ok", None)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def is_converted_reason(reason: str) -> bool:
    """True for a reason made by the catch-all from an unexpected exception."""
    return reason.startswith(("analysis failed at", "parsing failed", "cannot be read as a Kineto trace")) or \
        "all " in reason and ("analysis failed at" in reason or "parsing failed" in reason
                              or "cannot be read as a Kineto trace" in reason)


def is_converted(exc: BaseException) -> bool:
    """True for an error the catch-all made from an unexpected exception."""
    return getattr(exc, "step", None) is not None or is_converted_reason(getattr(exc, "message", ""))


BASES = bases()
GOOD_RANK1 = good_rank(1)


@st.composite
def structural_case(draw) -> Dict[str, bytes]:
    """A directory: one structurally mutated trace (plain or gzipped), and in a
    quarter of the cases a good rank-1 trace beside it."""
    _, doc = draw(st.sampled_from(BASES))
    ops = draw(st.lists(structural_op, min_size=1, max_size=4))
    gz = draw(st.booleans())
    files = {"rank0.json.gz" if gz else "rank0.json": encode(mutate(doc, ops), gz)}
    if draw(st.integers(0, 3)) == 0:
        files["rank1.json"] = GOOD_RANK1
    return files


@st.composite
def byte_case(draw) -> Dict[str, bytes]:
    """A directory: one trace mutated at the byte level (before or after gzip),
    and in a quarter of the cases a good rank-1 trace beside it."""
    _, doc = draw(st.sampled_from(BASES))
    ops = draw(st.lists(byte_op, min_size=1, max_size=3))
    where = draw(st.sampled_from(["json", "gz-inner", "gz-outer"]))
    plain = encode(doc, gz=False)
    if where == "json":
        files = {"rank0.json": mutate_bytes(plain, ops)}
    elif where == "gz-inner":
        files = {"rank0.json.gz": gzip.compress(mutate_bytes(plain, ops), compresslevel=1)}
    else:
        files = {"rank0.json.gz": mutate_bytes(gzip.compress(plain, compresslevel=1), ops)}
    if draw(st.integers(0, 3)) == 0:
        files["rank1.json"] = GOOD_RANK1
    return files
