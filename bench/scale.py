#!/usr/bin/env python
"""Benchmark: many ranks on the local engine and on a Ray cluster.

Writes N rank files (default 16, 64, 256) under ``--work`` (default
/tmp/hta-scale; never in the repository): copies of the two real ranks of
../shared/traces/hta/two_ranks, each with its own ``distributedInfo.rank``
and ``world_size`` N. Then, for each N, in subprocesses:

  local  ``hta-report analyze DIR --no-cache --json`` (this machine's processes);
  ray    the same with ``--engine ray`` against a Ray head started here
         (``ray start --head --num-cpus CORES``, stopped at the end).

For each it prints the wall time, the CPU time of the whole tree (for local;
Ray's workers are not children of the driver) and the **driver's** peak
resident memory (``VmHWM`` of the analyze process alone, read from /proc
while it runs), and checks that both engines give the same result. From the
per-rank figures it then projects a job of ``--project-ranks`` ranks of
``--project-mb`` MB each on a cluster of ``--project-nodes`` nodes with
``--project-cores`` cores (a written estimate, not a measurement).

    python bench/scale.py                        # 16, 64, 256 ranks (about 25 minutes on 2 cores)
    python bench/scale.py --ranks 16,64 --json /tmp/scale.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = REPO.parent / "shared" / "traces" / "hta" / "two_ranks"


def make_ranks(n: int, work: Path) -> Path:
    """``work/N-ranks/``: N rank files (gzipped JSON) copied from the two real ranks."""
    d = work / f"{n}-ranks"
    if d.is_dir() and len(list(d.glob("*.json.gz"))) == n:
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    docs = [json.loads(gzip.open(p).read()) for p in sorted(SOURCE.glob("*.json.gz"))]
    for rank in range(n):
        doc = docs[rank % len(docs)]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=rank, world_size=n)
        with gzip.open(d / f"rank-{rank}.json.gz", "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return d


def json_bytes(d: Path) -> int:
    """Decompressed JSON bytes of every file in ``d``."""
    total = 0
    for p in d.glob("*.json.gz"):
        with gzip.open(p, "rb") as fh:
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
    return total


def _peak_kb(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run(cmd: List[str], env: Dict[str, str]) -> dict:
    """Run ``cmd``; wall and CPU time (s, the process and its waited-for
    children) and the process's own peak RSS (bytes, VmHWM sampled every 50 ms)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            kb = _peak_kb(proc.pid)
            if kb:
                peak[0] = max(peak[0], kb)
            time.sleep(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    watcher.join()
    out, err = proc.communicate()
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "driver_peak_bytes": peak[0] * 1024,
            "stderr": err}


def start_ray(cores: int, env: Dict[str, str]):
    """A Ray head on this machine; returns (address, temp dir)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="htar-", dir="/tmp")
    for attempt in range(3):  # Ray gives its raylet 30 s to start, which a loaded machine can miss
        proc = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus",
                               str(cores), "--port", str(port), "--include-dashboard=false", "--disable-usage-stats",
                               "--temp-dir", temp], capture_output=True, text=True, env=env)
        found = re.search(r"--address='([^']+)'", proc.stdout + proc.stderr)
        if proc.returncode == 0 and found:
            return found.group(1), temp
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True, env=env)
    raise SystemExit(f"ray start failed:\n{proc.stdout}\n{proc.stderr}")


def stop_ray(env: Dict[str, str], temp: str) -> None:
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True, env=env)
    shutil.rmtree(temp, ignore_errors=True)


def _same(a: Path, b: Path) -> bool:
    x, y = (json.loads(p.read_text()) for p in (a, b))
    for d in (x, y):
        d["inventory"]["analyzed_at"] = ""
    return x == y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="16,64,256", help="rank counts, comma separated")
    ap.add_argument("--work", default=os.environ.get("HTA_SCALE_DIR", "/tmp/hta-scale"))
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="--num-cpus of the Ray head")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--project-ranks", type=int, default=2048)
    ap.add_argument("--project-mb", type=float, default=500.0, help="decompressed MB per rank")
    ap.add_argument("--project-nodes", type=int, default=32)
    ap.add_argument("--project-cores", type=int, default=32, help="cores per node")
    args = ap.parse_args()
    if not SOURCE.is_dir():
        raise SystemExit(f"{SOURCE} not found (../shared is absent)")
    work = Path(args.work)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU cores, Ray head with {args.cores} CPUs; "
          f"ranks from {SOURCE}")
    address, temp = start_ray(args.cores, env)
    rows = []
    try:
        for n in [int(x) for x in args.ranks.split(",")]:
            d = make_ranks(n, work)
            size = json_bytes(d)
            row = {"ranks": n, "json_bytes": size}
            print(f"\n== {n} ranks, {size / 1e6:.0f} MB of JSON ({os.getloadavg()[0]:.1f} load)")
            for engine in ("local", "ray"):
                out = work / f"{n}-{engine}.json"
                cmd = [sys.executable, "-m", "hta_report", "analyze", str(d), "-o", str(out), "--no-cache", "-q",
                       "--engine", engine] + (["--ray-address", address] if engine == "ray" else [])
                got = run(cmd, env)
                row[engine] = {k: v for k, v in got.items() if k != "stderr"}
                cpu = f"{got['cpu_s']:7.1f} s CPU" if engine == "local" else "  (workers not children)"
                print(f"  {engine:5s}  {got['wall_s']:7.1f} s wall  {cpu}  driver peak RSS "
                      f"{got['driver_peak_bytes'] / 1e6:7.0f} MB")
            row["same_result"] = _same(work / f"{n}-local.json", work / f"{n}-ray.json")
            result_bytes = len((work / f"{n}-ray.json").read_bytes())
            row["result_bytes_per_rank"] = result_bytes / n
            print(f"  same result on both engines: {row['same_result']}; result {result_bytes / n / 1e3:.0f} kB "
                  "per rank")
            rows.append(row)
    finally:
        stop_ray(env, temp)
    first, last = rows[0], rows[-1]
    ratio = last["ray"]["driver_peak_bytes"] / first["ray"]["driver_peak_bytes"]
    print(f"\nray driver peak RSS at {last['ranks']} ranks / at {first['ranks']} ranks: {ratio:.2f} "
          f"(local: {last['local']['driver_peak_bytes'] / first['local']['driver_peak_bytes']:.2f})")
    # projection from the largest run: local CPU seconds per MB of JSON is the per-rank cost
    cpu_per_mb = last["local"]["cpu_s"] / (last["json_bytes"] / 1e6)
    per_rank_s = cpu_per_mb * args.project_mb
    cores = args.project_nodes * args.project_cores
    waves = -(-args.project_ranks // cores)
    driver_mb = first["ray"]["driver_peak_bytes"] / 1e6 + \
        (last["ray"]["driver_peak_bytes"] - first["ray"]["driver_peak_bytes"]) / 1e6 / \
        (last["ranks"] - first["ranks"]) * (args.project_ranks - first["ranks"])
    print(f"\nprojection: {args.project_ranks} ranks x {args.project_mb:.0f} MB on {args.project_nodes} nodes x "
          f"{args.project_cores} cores ({cores} tasks at a time)")
    print(f"  per-rank cost measured here: {cpu_per_mb:.2f} CPU s per MB of JSON (parse + analyses) -> "
          f"{per_rank_s:.0f} CPU s per {args.project_mb:.0f} MB rank")
    print(f"  {waves} wave(s) of tasks -> about {waves * per_rank_s / 60:.0f} min of parse and analyses, if every "
          f"core holds one rank's parse ({args.project_mb * 2 / 1e3:.1f} GB, at about 2x the JSON) in memory")
    print(f"  driver memory grows with ranks, not events: about {driver_mb:.0f} MB at {args.project_ranks} ranks "
          f"(linear in the ranks from the two runs above)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "projection": {
            "ranks": args.project_ranks, "mb": args.project_mb, "nodes": args.project_nodes,
            "cores": args.project_cores, "cpu_s_per_mb": cpu_per_mb, "minutes": waves * per_rank_s / 60,
            "driver_mb": driver_mb}}, indent=2))


if __name__ == "__main__":
    main()
