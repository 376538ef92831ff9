#!/usr/bin/env python
"""Benchmark: hta-report on a population of real traces nobody here recorded.

For every folder under the given roots that holds trace files itself (one run
each), runs ``hta-report analyze FOLDER -o report.md --json result.json
--no-cache`` in its own process and sorts the run into

  complete  every file read, every rank analyzed in full;
  partial   a report, but a file unreadable or a section of a rank not computed;
  failed    no report (the command's last line says why);

then checks what must hold of any report (``tests/invariants.py``): no
failure, a reason for every missing part, the GPU seen wherever the files
hold kernels (counted from the raw JSON, any Kineto generation), findings'
gains within each rank's window, busy plus the idle findings claim within
the window, never "looks healthy" when part was not analyzed, and, for
TraceLens's traces, our exact GPU-span busy time within 1.5 points of
TraceLens's own ``gpu_timeline`` where the spans agree.

    python bench/population.py ../shared/traces                 # the shared traces
    python bench/population.py ../shared/traces /data/traces --json population.json

Prints one line per run, the TraceLens comparison, and the counts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from invariants import check, tracelens_row  # noqa: E402


def is_trace(p: Path) -> bool:
    name = p.name.lower()
    return p.is_file() and (name.endswith(".json") or name.endswith(".json.gz")) and name != "manifest.json" \
        and "reference" not in p.parent.name


def runs(roots: List[Path]) -> List[Path]:
    """Every folder under ``roots`` that directly holds trace files, sorted."""
    found = set()
    for root in roots:
        for p in [root, *root.rglob("*")]:
            if p.is_dir() and any(is_trace(f) for f in p.iterdir()):
                found.add(p)
    return sorted(found)


def analyze(folder: Path, timeout: int) -> dict:
    """One run of the CLI on ``folder``: status, seconds, the result and what broke."""
    with tempfile.TemporaryDirectory(prefix="hta-pop-") as tmp:
        out, md = Path(tmp) / "r.json", Path(tmp) / "r.md"
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(folder), "-o", str(md),
                                   "--json", str(out), "--no-cache", "-q"], capture_output=True, text=True,
                                  timeout=timeout)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            code, err = None, f"timed out after {timeout} s"
        seconds = time.perf_counter() - t0
        if code is None or not out.is_file():
            last = (err.strip().splitlines() or ["no output"])[-1]
            return {"folder": str(folder), "status": "failed", "seconds": seconds, "exit": code, "why": last,
                    "broken": [("no failure", last)]}
        result = json.loads(out.read_text())
        markdown = md.read_text() if md.is_file() else ""
    files = [f for f in folder.iterdir() if is_trace(f)]
    broken = check(result, folder, markdown, files)
    partial = bool(result["inventory"]["unreadable"]) or any(r["failures"] for r in result["ranks"])
    gpu = [r for r in result["ranks"] if r["has_gpu"]]
    return {"folder": str(folder), "status": "partial" if partial else "complete", "seconds": seconds,
            "exit": code, "ranks": len(result["ranks"]), "gpu_ranks": len(gpu),
            "busy_pct": result["aggregate"]["busy_pct"], "span_busy_pct": result["aggregate"].get("span_busy_pct", 0.0),
            "tracelens": tracelens_row(result, folder), "findings": [f["id"] for f in result["findings"]][:3],
            "broken": broken}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", type=Path, help="folders to search for runs (folders holding trace files)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run (default 600)")
    ap.add_argument("--json", default=None, help="also write every run's figures here")
    args = ap.parse_args()
    found = runs([r.resolve() for r in args.roots])
    if not found:
        print("no folder holding trace files under", ", ".join(map(str, args.roots)))
        return 1
    common = Path(*Path(str(found[0])).parts[:1]) if len(found) == 1 else Path(
        __import__("os").path.commonpath([str(f) for f in found]))
    rows = []
    for folder in found:
        row = analyze(folder, args.timeout)
        rows.append(row)
        name = str(folder.relative_to(common)) if folder != common else folder.name
        gpu = (f"GPU {row['gpu_ranks']}/{row['ranks']} ranks, busy {row['busy_pct']:.1f} % of the window, "
               f"{row['span_busy_pct']:.1f} % of the GPU span") if row["status"] != "failed" else row["why"][:120]
        print(f"{row['status']:8s} {row['seconds']:6.1f} s  {name:50s} {gpu}", flush=True)
        for what, detail in row["broken"]:
            print(f"{'':17s} BROKEN {what}: {detail}", flush=True)
    print("\n== TraceLens's gpu_timeline busy time against ours (exact union of kernels, memcpys, memsets)")
    for row in rows:
        if row.get("tracelens"):
            print(f"  {Path(row['folder']).name:32s} {row['tracelens']}")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("complete", "partial", "failed")}
    clean = sum(1 for r in rows if not r["broken"])
    print(f"\n== {len(rows)} runs: {counts['complete']} complete, {counts['partial']} partial, {counts['failed']} failed; "
          f"{clean} with every invariant holding")
    by_invariant = {}
    for r in rows:
        for what, _ in r["broken"]:
            by_invariant.setdefault(what, []).append(Path(r["folder"]).name)
    for what, where in sorted(by_invariant.items()):
        print(f"  {what}: {len(where)} ({', '.join(where[:6])}{' ...' if len(where) > 6 else ''})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
