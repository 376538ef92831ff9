#!/usr/bin/env python
"""Benchmark: the parse on one core, where its time goes, and the decoders beside it.

For each trace (gzipped or plain JSON; default: the three formats
``bench/load.py`` makes, about 60 MB each, generated under ``--work``), in
this one process and with one worker (``HTA_REPORT_WORKERS=1``: a quiet core):

  inflate       gzip decompression alone (reported apart: the rate below is of
                the decompressed JSON, read from a plain copy in the page cache);
  parse         :func:`hta_report.load.fastparse.parse_trace_file` as ``analyze``
                calls it (the report's args, exact times), best of ``--runs``;
                split into
                  decode   msgspec's typed decode of the event pieces (C),
                  columns  the pieces' columns from the decoded structs (Python),
                  frame    the merged columns as HTA's dataframe and symbols,
                  HTA's    the post-processing HTA's parser does (fwd/bwd links,
                           correlation index, iterations),
                  read     the rest: reading blocks, cutting them at events
                (the timed parse whose total is least of ``--runs``);
  floors        the same bytes decoded by msgspec into typed structs with no
                column work (the fastest Python-facing decoder here), orjson and
                stdlib ``json`` into dicts, and pyarrow's JSON reader (C++, one
                thread, after the array is made newline-delimited) where it reads
                the trace at all (string ``pid``/``tid`` given keys of their own:
                it refuses a column that holds numbers and strings). polars 2.1's
                ``read_json`` (Rust, one thread) read these traces at 26-32 MB/s
                on 2026-11-26 and is not a dependency, so it is not run here.

Rates are MB of decompressed JSON per second on one core. The issue's target
is 200 MB/s per core for ``parse``.

With the native reader built (``hta_report.load._native``), each trace is also
read by both readers on the same bytes (``HTA_REPORT_PARSER=native`` and
``python``), the median of ``--runs`` of each, timed in CPU seconds of this
process (MB/s per core, fair on a shared machine):

  tokenize          the native reader alone (``fastnative.read_events``) on the
                    events cut into runs of about 8 MB, as the parser cuts them;
  pieces            the same runs read into pieces (``fastparse.native_piece``
                    against ``fastparse._piece_from_bytes`` with the Python reader);
  JSON -> columns   the events read into the merged per-piece columns
                    (``fastparse._read`` into a ``_Frame``), from the plain JSON;
  .json.gz          the same from the gzipped file (streamed inflate included);
  parse             the whole ``parse_trace_file`` (the frame and HTA's steps too).

Issue 53's targets: JSON -> columns >= 500 MB/s per core, ``.json.gz`` >= 300.
``--native-only`` prints only this comparison.

    python bench/parse_rate.py                      # the three formats, ~60 MB each
    python bench/parse_rate.py TRACE.json.gz ...    # given traces
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
os.environ["HTA_REPORT_WORKERS"] = "1"

from memory_pass import best  # noqa: E402 - the least wall time of n calls (s), as the other benches take it


class Timers:
    """Seconds spent inside wrapped functions (the outermost call only)."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}
        self.depth: Dict[str, int] = {}

    def wrap(self, owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)

        def timed(*a, **k):
            if self.depth.get(label):
                return fn(*a, **k)
            self.depth[label] = 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0
                self.depth[label] = 0
        setattr(owner, attr, timed)


def breakdown(path: str, cfg) -> Dict[str, float]:
    """One parse of ``path`` with its parts timed (see the module doc)."""
    import hta.common.trace as hta_trace

    from hta_report.load import fastparse

    saved = {(o, a): getattr(o, a) for o, a in ((fastparse, "_decoded_piece"), (fastparse, "_typed_piece"),
                                                (fastparse, "_piece"), (fastparse._Frame, "frame"),
                                                (fastparse._Frame, "merge"), (hta_trace, "add_fwd_bwd_links"),
                                                (fastparse, "correlation_to_index"), (fastparse, "_add_iteration"))}
    t = Timers()
    try:
        t.wrap(fastparse, "_decoded_piece", "piece")
        t.wrap(fastparse, "_typed_piece", "columns")
        t.wrap(fastparse, "_piece", "columns (dicts)")
        t.wrap(fastparse._Frame, "frame", "frame")
        t.wrap(fastparse._Frame, "merge", "merge")
        t.wrap(hta_trace, "add_fwd_bwd_links", "hta")
        t.wrap(fastparse, "correlation_to_index", "hta ")
        t.wrap(fastparse, "_add_iteration", "hta  ")
        t0 = time.perf_counter()
        fastparse.parse_trace_file(path, cfg, fallback=False, exact_times=True)
        total = time.perf_counter() - t0
    finally:
        for (o, a), fn in saved.items():
            setattr(o, a, fn)
    s = t.seconds
    columns = s.get("columns", 0.0) + s.get("columns (dicts)", 0.0)
    hta = s.get("hta", 0.0) + s.get("hta ", 0.0) + s.get("hta  ", 0.0)
    parts = {"decode": s.get("piece", 0.0) - columns, "columns": columns + s.get("merge", 0.0),
             "frame": s.get("frame", 0.0), "HTA's": hta}
    parts["read"] = total - sum(parts.values())
    parts["total"] = total
    return parts


def events_body(data: bytes) -> bytes:
    """The ``traceEvents`` array of a document, as bytes (a quick cut: the first
    ``[`` after the key, the last ``]``)."""
    i = data.find(b'"traceEvents"')
    return data[data.find(b"[", i): data.rfind(b"]") + 1]


def floors(data: bytes, runs: int, cfg) -> Dict[str, float]:
    """Seconds (best of ``runs``) of each decoder over the same events."""
    import msgspec
    import orjson

    from hta_report.load import fastparse

    body = events_body(data)
    out: Dict[str, float] = {}
    specs = tuple((a.name, a.raw_name, a.default_value, a.value_type.name == "Object") for a in cfg.get_args())
    dec = fastparse._typed_decoder(specs)[0]

    def typed() -> None:
        try:
            dec.decode(body)
        except msgspec.ValidationError:
            msgspec.json.decode(body)
    import gc

    gc.disable()  # as the parser does: millions of containers, freed by their owner
    try:
        out["msgspec typed structs"] = best(typed, runs)
        out["orjson dicts"] = best(lambda: orjson.loads(body), runs)
        out["json (stdlib) dicts"] = best(lambda: json.loads(body), max(1, runs - 1))
    finally:
        gc.enable()
    try:
        import pyarrow.json as pj

        # one event per line, as the reader needs; Kineto's pid and tid are numbers in some
        # events and strings in others, which it refuses: string ones get their own keys
        nd = b"\n".join(orjson.dumps(e) for e in orjson.loads(body))
        nd = nd.replace(b'"pid":"', b'"piS":"').replace(b'"tid":"', b'"tiS":"')

        def arrow() -> None:
            pj.read_json(io.BytesIO(nd), read_options=pj.ReadOptions(use_threads=False, block_size=8 << 20))
        arrow()
        out["pyarrow.json (1 thread, NDJSON)"] = best(arrow, runs)
    except Exception as exc:  # noqa: BLE001 - a reader that refuses the trace is reported as such
        out[f"pyarrow.json: refuses it ({str(exc).splitlines()[0][:70]})"] = float("nan")
    return out


def _cpu_median(fn, runs: int) -> float:
    """The median CPU seconds of this process over ``runs`` calls of ``fn``."""
    import statistics

    out = []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return statistics.median(out)


def native_vs_python(src: Path, plain: Path, cfg, runs: int) -> Dict[str, float]:
    """CPU seconds (median of ``runs``) of each reader on the same bytes (see the module doc)."""
    import gc

    from hta_report.load import fastparse

    def columns(path: Path) -> None:
        was = gc.isenabled()
        gc.disable()  # as parse_trace_file does
        try:
            fastparse._read(str(path), fastparse._Frame(cfg))
        finally:
            if was:
                gc.enable()

    import re

    from hta_report.load import fastnative

    data = plain.read_bytes()
    body = events_body(data)
    runs_of_events, start = [], 1
    seps = [m.start() for m in re.finditer(rb"\}\s*,\s*\{", body)]
    import bisect

    while start < len(body) - 1:
        k = bisect.bisect_left(seps, start + fastparse.BLOCK_BYTES) - 1
        end = seps[k] + 1 if k >= 0 and seps[k] + 1 > start and start + fastparse.BLOCK_BYTES < len(body) else len(body) - 1
        runs_of_events.append(b"[" + body[start:end] + b"]")
        start = body.index(b"{", end) if end < len(body) - 1 else len(body)
    specs = fastparse._Frame(cfg).args
    out: Dict[str, float] = {}
    saved = os.environ.get("HTA_REPORT_PARSER")
    gc.disable()
    try:
        out["native tokenize"] = _cpu_median(lambda: [fastnative.read_events(r, specs) for r in runs_of_events], runs)
        out["native pieces"] = _cpu_median(lambda: [fastparse.native_piece(r, specs) for r in runs_of_events], runs)
        os.environ["HTA_REPORT_PARSER"] = "python"
        out["python pieces"] = _cpu_median(lambda: [fastparse._piece_from_bytes(r, specs) for r in runs_of_events], runs)
    finally:
        gc.enable()
    try:
        for parser in ("native", "python"):
            os.environ["HTA_REPORT_PARSER"] = parser
            columns(plain)  # warm
            out[f"{parser} columns"] = _cpu_median(lambda: columns(plain), runs)
            if str(src).endswith(".gz"):
                out[f"{parser} gz"] = _cpu_median(lambda: columns(src), runs)
            out[f"{parser} parse"] = _cpu_median(
                lambda: fastparse.parse_trace_file(str(plain), cfg, fallback=False, exact_times=True), runs)
    finally:
        if saved is None:
            os.environ.pop("HTA_REPORT_PARSER", None)
        else:
            os.environ["HTA_REPORT_PARSER"] = saved
    return out


def default_traces(work: Path) -> List[Path]:
    """The three formats of ``bench/load.py``, about 60 MB of JSON each."""
    import load
    from tracegen import make_trace

    out = []
    for fmt in ("whole-us", "fractional", "kineto-text"):
        p = work / f"{fmt}-60MB.json.gz"
        make_trace(load.BASES[fmt], p, 60_000_000, fmt=fmt)
        out.append(p)
    return out


def plain_copy(path: Path, work: Path) -> Path:
    """A decompressed copy of a gzipped trace under ``work`` (the parse is then
    timed without the inflate); a plain trace as it is."""
    if not str(path).endswith(".gz"):
        return path
    out = work / (path.name[:-3] + ".plain.json")
    if not out.is_file() or out.stat().st_mtime < path.stat().st_mtime:
        with gzip.open(path, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help="traces (.json or .json.gz); default: three generated formats")
    ap.add_argument("--work", default=os.environ.get("HTA_BENCH_DIR", "/tmp/hta-bench"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--native-only", action="store_true", help="only the native against the Python reader")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    traces = [Path(t) for t in args.traces] or default_traces(work)

    import hta.common.trace  # noqa: F401 - imported before any timing

    from hta_report.load import fastparse
    from hta_report.load.parse import report_parser_config

    cfg = report_parser_config()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}; one process, one worker; "
          f"MB/s of decompressed JSON on one core (target: parse >= 200)")
    rows = []
    for src in traces:
        plain = plain_copy(src, work)
        data = plain.read_bytes()
        mb = len(data) / 1e6
        row: Dict[str, object] = {"trace": str(src), "mb": mb}
        print(f"\n== {src.name}: {mb:.0f} MB of JSON")
        from hta_report.load import fastnative

        if fastnative.available():
            nv = native_vs_python(src, plain, cfg, args.runs)
            row["native_vs_python_cpu_s"] = nv
            print(f"  {'tokenize':22s} native {mb / nv['native tokenize']:6.0f} MB/s per core")
            for what in ("pieces", "columns", "gz", "parse"):
                if f"native {what}" not in nv:
                    continue
                n_s, p_s = nv[f"native {what}"], nv[f"python {what}"]
                label = {"pieces": "pieces", "columns": "JSON -> columns", "gz": ".json.gz -> columns",
                         "parse": "parse (whole)"}[what]
                print(f"  {label:22s} native {mb / n_s:6.0f} MB/s per core, python {mb / p_s:6.0f} MB/s per core, "
                      f"{p_s / n_s:4.1f}x (CPU s, median of {args.runs})")
        else:
            print("  the native reader is not built: python setup.py build_ext --inplace")
        if args.native_only:
            rows.append(row)
            continue
        if str(src).endswith(".gz"):
            def inflate() -> None:
                with gzip.open(src, "rb") as fh:
                    while fh.read(8 << 20):
                        pass
            sec = best(inflate, args.runs)
            row["inflate_s"] = sec
            print(f"  inflate (gzip, apart)          {sec:6.2f} s  {mb / sec:6.0f} MB/s")
        fastparse.parse_trace_file(str(plain), cfg, fallback=False, exact_times=True)  # warm: decoders, imports
        sec = best(lambda: fastparse.parse_trace_file(str(plain), cfg, fallback=False, exact_times=True), args.runs)
        row["parse_s"] = sec
        print(f"  parse                          {sec:6.2f} s  {mb / sec:6.0f} MB/s  "
              f"({'met' if mb / sec >= 200 else 'not met'})")
        parts = min((breakdown(str(plain), cfg) for _ in range(args.runs)), key=lambda d: d["total"])
        row["parts"] = parts
        for name in ("decode", "columns", "frame", "HTA's", "read"):
            print(f"    {name:10s}                   {parts[name]:6.2f} s  ({100 * parts[name] / parts['total']:4.1f} %"
                  f" of a timed parse of {parts['total']:.2f} s)")
        fl = floors(data, args.runs, cfg)
        row["floors"] = fl
        for name, s in fl.items():
            print(f"  {name:31s}{s:6.2f} s  {mb / s:6.0f} MB/s" if s == s else f"  {name}")
        rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
