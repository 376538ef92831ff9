#!/usr/bin/env python
"""Benchmark: many ranks, and large ranks, on the local engine and on Ray.

Rank sets, written gzipped (level 1) under ``--work`` (default /tmp/hta-scale;
never in the repository) and reused when already made with the same parameters:

  small  ``--ranks`` (default 8, 64, 256, 1024): N ranks made from the two
         real ranks of ../shared/traces/hta/two_ranks (rank r from file
         r mod 2), each with its own ``distributedInfo.rank`` and
         ``world_size`` N, and a plausible skew that stays physically
         possible: every timestamp of rank r is shifted by one seeded offset
         (:func:`rank_offset_us`), so the file's internal gaps (a GPU kernel
         behind its launch, a step's length) are those of the real trace:
           - clock skew between hosts: uniform in +-``SKEW_MAX_US`` (2 ms);
           - one rank in ``STRAGGLER_EVERY`` (16; ranks 8, 24, 40, ...) a
             straggler that starts ``STRAGGLER_US`` (10 ms) late: shifted,
             not stretched;
  big    ``--big NxSIZE`` (default 8x1GB; 0 skips): N ranks of SIZE
         decompressed JSON each, bench/tracegen.make_trace of
         ../shared/traces/hta/trace_diff/control in the fractional-us format
         current PyTorch writes (the base bench/load.py uses).

For every set and engine (``--engines``, default local,ray), in subprocesses:
``hta-report analyze DIR -o OUT.json --no-cache -q [--engine ray]`` against a
Ray head started here (``ray start --head --num-cpus CORES``; stopped at the
end by killing its own processes, found by its temp dir; one untimed job
first, so that no set pays the cluster's cold start), then the same on the
set's largest rank file alone (symlinked into its own directory). Measured:

  wall     seconds of the analyze process;
  CPU      user + system seconds of the whole tree: local, the analyze process
           and its children (``wait4`` rusage); ray, that plus the Ray
           cluster's processes (the head's daemons and their descendants, the
           ``ray::`` workers among them): utime + stime + reaped children's
           (/proc/PID/stat, through psutil) sampled before, every 100 ms
           during and after the run; a worker that exits with its job keeps
           its last sample (the raylet does not collect its workers' times);
           Ray's idle daemons count too;
  driver   peak RSS of the analyze process alone (``VmHWM``);
  tree     peak of the whole tree: the largest sum of PSS (shared pages
           counted once, /proc/PID/smaps_rollup) over the analyze process and
           its descendants (ray: and the Ray cluster's processes), sampled
           every 100 ms in the same run (the sampler costs some CPU of this
           machine: wall times are a little high, CPU times are not affected).

It checks that both engines give the same result, prints the tree peak of the
N-rank run over that of its largest rank alone (issue 34's target: <= 1.5x)
(with ``--capped``, also for a local run whose ``HTA_REPORT_MAX_MEMORY`` is that
peak: one rank analyzed at a time),
the per-rank costs and their growth, the exponent b of wall = a * bytes^b
(least squares in log-log; target 1, linear), the result's bytes per rank, and
projects a job of ``--project-ranks`` ranks of ``--project-mb`` MB on one box
and on a Ray cluster (an estimate from these figures, not a measurement).

    python bench/scale.py                    # 8, 64, 256, 1024 ranks and 8 x 1 GB (long)
    python bench/scale.py --quick            # 8, 16 ranks and 2 x 50 MB, a few minutes
    python bench/scale.py --ranks 8,64 --big 0 --engines local --json /tmp/scale.json
    python bench/scale.py --ranks 8 --big 8x1GB --engines local --capped
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = REPO.parent / "shared" / "traces" / "hta" / "two_ranks"
BIG_BASE = REPO.parent / "shared" / "traces" / "hta" / "trace_diff" / "control" / "control.json.gz"
#: Clock skew between hosts (µs): NTP/PTP-synchronised hosts agree within a few ms.
SKEW_MAX_US = 2_000
#: One rank in this many is a straggler (the one at index STRAGGLER_EVERY // 2 of each block).
STRAGGLER_EVERY = 16
#: How late a straggler starts (µs), on top of its clock skew.
STRAGGLER_US = 10_000
#: Bumped when the small ranks' content changes: files made before are remade.
SKEW_VERSION = 1
SAMPLE_S = 0.1


# ---------------------------------------------------------------- rank sets


def rank_offset_us(rank: int, seed: int = 0) -> int:
    """The shift of every timestamp of ``rank`` (µs): a seeded clock skew in
    [-SKEW_MAX_US, SKEW_MAX_US], plus STRAGGLER_US for one rank in STRAGGLER_EVERY."""
    skew = random.Random(f"{seed}:{rank}").randint(-SKEW_MAX_US, SKEW_MAX_US)
    return skew + (STRAGGLER_US if rank % STRAGGLER_EVERY == STRAGGLER_EVERY // 2 else 0)


def skewed(doc: dict, rank: int, world_size: int, seed: int = 0) -> Tuple[dict, int]:
    """A copy of the trace ``doc`` as rank ``rank`` of ``world_size``: its
    ``distributedInfo`` set so, and every event's ``ts`` moved by
    :func:`rank_offset_us` (one offset for the whole file: ``dur`` and every
    gap inside it unchanged). ``doc`` is not modified. Returns the copy and the offset (µs)."""
    off = rank_offset_us(rank, seed)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=rank, world_size=world_size)
    out["traceEvents"] = [dict(e, ts=e["ts"] + off) if isinstance(e.get("ts"), (int, float))
                          and not isinstance(e.get("ts"), bool) else e for e in doc.get("traceEvents", [])]
    return out, off


def _sidecar(d: Path) -> Path:
    return d.with_name(d.name + ".params.json")


def _reuse(d: Path, params: dict) -> Optional[List[int]]:
    """The decompressed sizes (bytes) recorded for ``d`` when made with ``params``."""
    try:
        saved = json.loads(_sidecar(d).read_text())
        if saved["params"] == params and len(list(d.glob("rank-*.json.gz"))) == len(saved["bytes"]):
            return [int(x) for x in saved["bytes"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def make_ranks(n: int, work: Path, seed: int = 0) -> Tuple[Path, List[int]]:
    """``work/N-ranks/``: N skewed rank files (gzip level 1) from the two real
    ranks (see :func:`skewed`), reused when made with the same parameters.
    Returns the directory and each file's decompressed size (bytes)."""
    import orjson

    d = work / f"{n}-ranks"
    params = {"source": str(SOURCE), "n": n, "seed": seed, "version": SKEW_VERSION, "skew_us": SKEW_MAX_US,
              "straggler": [STRAGGLER_EVERY, STRAGGLER_US]}
    sizes = _reuse(d, params)
    if sizes is not None:
        return d, sizes
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*"):
        old.unlink()
    docs = [orjson.loads(gzip.open(p).read()) for p in sorted(SOURCE.glob("*.json.gz"))]
    sizes = []
    for rank in range(n):
        data = orjson.dumps(skewed(docs[rank % len(docs)], rank, n, seed)[0])
        (d / f"rank-{rank}.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
        sizes.append(len(data))
    _sidecar(d).write_text(json.dumps({"params": params, "bytes": sizes}))
    return d, sizes


def parse_big(text: str) -> Tuple[int, int]:
    """``"8x1GB"`` -> (8, 10**9) (decimal units: KB, MB, GB); ``"0"`` -> (0, 0)."""
    if text.strip() in ("", "0"):
        return 0, 0
    n, _, size = text.lower().partition("x")
    size = size.strip().upper()
    for unit, mult in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size.endswith(unit):
            return int(n), int(float(size[:-2]) * mult)
    return int(n), int(size)


def make_big(n: int, size: int, work: Path) -> Tuple[Path, List[int]]:
    """``work/big-NxSIZE/``: N ranks of about ``size`` bytes of JSON each
    (tracegen.make_trace, fractional µs), generated in a subprocess (this
    process stays small) and reused by make_trace when present."""
    d = work / f"big-{n}x{size // 10**6}MB"
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_generate", str(d), str(n), str(size)],
                         check=True, capture_output=True, text=True).stdout
    return d, [int(x) for x in out.split()]


def _generate(d: str, n: str, size: str) -> None:
    sys.path.insert(0, str(HERE))
    from tracegen import make_trace

    for r in range(int(n)):
        print(make_trace(BIG_BASE, Path(d) / f"rank-{r}.json.gz", int(size), rank=r, world_size=int(n),
                         fmt="fractional"), flush=True)


def single(d: Path, sizes: Sequence[int], work: Path) -> Path:
    """A directory holding only the largest rank file of ``d`` (a symlink)."""
    largest = max(range(len(sizes)), key=lambda i: sizes[i])
    one = work / "single" / d.name
    one.mkdir(parents=True, exist_ok=True)
    for old in one.glob("*"):
        old.unlink()
    (one / f"rank-{largest}.json.gz").symlink_to(d / f"rank-{largest}.json.gz")
    return one


# ---------------------------------------------------------------- processes


def _table() -> Dict[int, Tuple[int, str]]:
    """Every process: pid -> (parent pid, command line joined by spaces)."""
    import psutil

    out = {}
    for p in psutil.process_iter(["ppid", "cmdline"]):
        out[p.pid] = (p.info["ppid"] or 0, " ".join(p.info["cmdline"] or ()))
    return out


def _descendants(table: Dict[int, Tuple[int, str]], roots: Iterable[int]) -> Set[int]:
    kids: Dict[int, List[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    seen: Set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(kids.get(pid, []))
    return seen


def ray_pids(table: Dict[int, Tuple[int, str]], temp: str) -> Set[int]:
    """The processes of the Ray cluster started with ``--temp-dir temp``: those
    naming it on their command line (gcs_server, raylet, monitors) and their
    descendants (the ``ray::`` workers are the raylet's children)."""
    return _descendants(table, [pid for pid, (_, cmd) in table.items() if temp in cmd])


def _cpu_s(pids: Iterable[int], seen: Dict[Tuple[int, float], float]) -> None:
    """Record in ``seen`` the user + system seconds (reaped children's
    included) of each of ``pids``, keyed by (pid, start time): a process
    that exits keeps the last figure sampled (Ray's workers exit with their
    job, and the raylet does not collect their times)."""
    import psutil

    for pid in pids:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            seen[(pid, p.create_time())] = t.user + t.system + t.children_user + t.children_system
        except (psutil.Error, OSError):
            pass


def _proc_bytes(pid: int, name: str, key: str) -> int:
    """The ``key:`` line of ``/proc/PID/NAME`` (a figure in kB) in bytes; 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _pss(pid: int) -> int:
    return _proc_bytes(pid, "smaps_rollup", "Pss")


def _hwm(pid: int) -> int:
    return _proc_bytes(pid, "status", "VmHWM")


def run(cmd: List[str], env: Dict[str, str], ray_temp: Optional[str] = None) -> dict:
    """Run ``cmd`` and measure it (see the module docstring): wall and CPU
    seconds, the driver's peak RSS and the tree's peak PSS (bytes); with
    ``ray_temp``, the Ray cluster's processes are counted in CPU and tree, and
    ``ray_idle_bytes`` is their PSS before the run."""
    ray_before = ray_pids(_table(), ray_temp) if ray_temp else set()
    cpu_seen: Dict[Tuple[int, float], float] = {}
    _cpu_s(ray_before, cpu_seen)
    ray_cpu0 = sum(cpu_seen.values())
    ray_idle = sum(_pss(p) for p in ray_before)
    t0 = time.perf_counter()
    errfile = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=errfile)
    peak = {"driver": 0, "tree": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            table = _table()
            ray = ray_pids(table, ray_temp) if ray_temp else set()
            peak["tree"] = max(peak["tree"], sum(_pss(p) for p in _descendants(table, [proc.pid]) | ray))
            _cpu_s(ray, cpu_seen)
            peak["driver"] = max(peak["driver"], _hwm(proc.pid))
            stop.wait(SAMPLE_S)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)  # rusage of the process and its waited-for children
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    stop.set()
    watcher.join()
    code = proc.returncode
    errfile.seek(0)
    err = errfile.read().decode(errors="replace")
    errfile.close()
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err[-3000:]}")
    driver_cpu = usage.ru_utime + usage.ru_stime
    if ray_temp:
        _cpu_s(ray_pids(_table(), ray_temp), cpu_seen)
    ray_cpu = sum(cpu_seen.values()) - ray_cpu0
    return {"wall_s": wall, "cpu_s": driver_cpu + ray_cpu, "driver_cpu_s": driver_cpu, "ray_cpu_s": ray_cpu,
            "driver_peak_bytes": peak["driver"], "tree_peak_bytes": peak["tree"], "ray_idle_bytes": ray_idle,
            "exit_code": code, "stderr_tail": err[-2000:]}


def start_ray(cores: int, env: Dict[str, str]) -> Tuple[str, str]:
    """A Ray head on this machine; returns (address, temp dir)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="htar-", dir="/tmp")
    for _ in range(3):  # Ray gives its raylet 30 s to start, which a loaded machine can miss
        proc = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus",
                               str(cores), "--port", str(port), "--include-dashboard=false", "--disable-usage-stats",
                               "--temp-dir", temp], capture_output=True, text=True, env=env)
        found = re.search(r"--address='([^']+)'", proc.stdout + proc.stderr)
        if proc.returncode == 0 and found:
            return found.group(1), temp
        _kill(temp)
    raise SystemExit(f"ray start failed:\n{proc.stdout}\n{proc.stderr}")


def _kill(temp: str) -> None:
    """Kill this script's Ray cluster only (its processes, by pid), not other users' Ray."""
    pids = ray_pids(_table(), temp)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(2)
        pids = ray_pids(_table(), temp)
        if not pids:
            break


def stop_ray(temp: str) -> None:
    import shutil

    _kill(temp)
    shutil.rmtree(temp, ignore_errors=True)


class RayHead:
    """This script's Ray head (see :func:`start_ray`); :meth:`ensure` starts it
    again when its processes are gone (``ray stop`` run elsewhere on this
    machine stops every cluster, this one too) and says so."""

    def __init__(self, cores: int, env: Dict[str, str]) -> None:
        self.cores, self.env = cores, env
        self.address, self.temp = start_ray(cores, env)

    def ensure(self) -> bool:
        """Start a new head if this one is gone; True when it did."""
        if any(self.temp in cmd for _, cmd in _table().values()):
            return False
        print("  (the Ray head is gone, stopped from outside: starting a new one)", flush=True)
        stop_ray(self.temp)
        self.address, self.temp = start_ray(self.cores, self.env)
        return True

    def stop(self) -> None:
        stop_ray(self.temp)


def _same(a: Path, b: Path) -> bool:
    x, y = (json.loads(p.read_text()) for p in (a, b))
    for d in (x, y):
        d["inventory"]["analyzed_at"] = ""
    return x == y


# ---------------------------------------------------------------- figures


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float]:
    """(a, b) of y = a * x^b by least squares on (log x, log y); needs two
    distinct positive x. b = 1 is linear growth."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    if len(lx) < 2 or sxx == 0:
        raise ValueError("need two distinct sizes to fit an exponent")
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx
    return math.exp(my - b * mx), b


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float]:
    """(intercept, slope) of y = c + s * x by least squares; a single point gives slope 0."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - s * mx, s


def _mb(b: float) -> str:
    return f"{b / 1e6:,.0f} MB" if b < 10e9 else f"{b / 1e9:,.1f} GB"


def analyze(path: Path, out: Path, engine: str, env: Dict[str, str], head: Optional[RayHead]) -> dict:
    """:func:`run` of ``hta-report analyze PATH -o OUT --no-cache -q`` on ``engine``;
    exits when no result is written (any earlier ``out`` is removed first)."""
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "hta_report", "analyze", str(path), "-o", str(out), "--no-cache", "-q",
           "--engine", engine]
    if engine == "ray" and head is not None:
        head.ensure()
        cmd += ["--ray-address", head.address]
    got = run(cmd, env, head.temp if engine == "ray" and head is not None else None)
    if not out.exists() and engine == "ray" and head is not None and head.ensure():
        cmd[-1] = head.address  # the head was stopped from outside during the run: once more on a new one
        got = run(cmd, env, head.temp)
    if not out.exists():
        raise SystemExit(f"{' '.join(cmd)} wrote no result (exit {got['exit_code']}):\n{got['stderr_tail']}")
    return got


def measure_set(name: str, d: Path, sizes: List[int], engines: List[str], work: Path, env: Dict[str, str],
                head: Optional[RayHead], capped: bool = False) -> dict:
    """Every engine on the set ``d`` and on its largest rank alone; prints a line each. With
    ``capped``, the local engine once more with ``HTA_REPORT_MAX_MEMORY`` set to the tree peak
    of the largest rank alone (a budget of one rank: the ranks are analyzed one at a time)."""
    n, total = len(sizes), sum(sizes)
    row: dict = {"set": name, "ranks": n, "json_bytes": total, "largest_rank_bytes": max(sizes)}
    print(f"\n== {name}: {n} ranks, {_mb(total)} of JSON (largest rank {_mb(max(sizes))}; "
          f"load {os.getloadavg()[0]:.1f})", flush=True)
    one = single(d, sizes, work)
    for engine in engines:
        res = {label: analyze(path, work / f"{name}-{engine}-{label}.json", engine, env, head)
               for label, path in (("all", d), ("single", one))}
        got, alone = res["all"], res["single"]
        got["result_bytes"] = len((work / f"{name}-{engine}-all.json").read_bytes())
        got["single"] = {k: v for k, v in alone.items() if k != "stderr_tail"}
        got["tree_ratio"] = got["tree_peak_bytes"] / alone["tree_peak_bytes"]
        row[engine] = got
        extra = f" (driver {got['driver_cpu_s']:.1f} + Ray {got['ray_cpu_s']:.1f})" if engine == "ray" else ""
        print(f"  {engine:5s} {got['wall_s']:8.1f} s wall {got['cpu_s']:8.1f} s CPU{extra}  driver peak "
              f"{_mb(got['driver_peak_bytes'])}  tree peak {_mb(got['tree_peak_bytes'])}"
              + (f" (Ray idle {_mb(got['ray_idle_bytes'])})" if engine == "ray" else "")
              + (f"  exit {got['exit_code']}" if got["exit_code"] else ""))
        if engine == "local" and capped:
            cap = alone["tree_peak_bytes"]
            cut = analyze(d, work / f"{name}-local-capped.json", "local", dict(env, HTA_REPORT_MAX_MEMORY=str(cap)),
                          None)
            cut["tree_ratio"] = cut["tree_peak_bytes"] / alone["tree_peak_bytes"]
            cut["max_memory_bytes"] = cap
            row["local-capped"] = {k: v for k, v in cut.items() if k != "stderr_tail"}
            print(f"  local, HTA_REPORT_MAX_MEMORY={_mb(cap)} (the rank alone's peak): {cut['wall_s']:.1f} s wall "
                  f"({cut['wall_s'] / got['wall_s']:.2f}x uncapped) {cut['cpu_s']:.1f} s CPU, tree peak "
                  f"{_mb(cut['tree_peak_bytes'])} -> {cut['tree_ratio']:.2f}x the rank alone "
                  f"({'met' if cut['tree_ratio'] <= 1.5 else 'not met'}: target <= 1.5x); same result: "
                  f"{_same(work / f'{name}-local-all.json', work / f'{name}-local-capped.json')}", flush=True)
        if engine == "ray":  # Ray's daemons, idle before the run, dilute the ratio: also without them
            got["tree_ratio_less_idle"] = (got["tree_peak_bytes"] - got["ray_idle_bytes"]) / \
                max(alone["tree_peak_bytes"] - alone["ray_idle_bytes"], 1)
        print(f"        largest rank alone: {alone['wall_s']:.1f} s wall, tree peak {_mb(alone['tree_peak_bytes'])}"
              f" -> {n} ranks / 1 rank: {got['tree_ratio']:.2f}x "
              f"({'met' if got['tree_ratio'] <= 1.5 else 'not met'}: target <= 1.5x)"
              + (f"; less Ray's idle processes: {got['tree_ratio_less_idle']:.2f}x" if engine == "ray" else ""),
              flush=True)
    if "local" in engines and "ray" in engines:
        row["same_result"] = _same(work / f"{name}-local-all.json", work / f"{name}-ray-all.json")
        print(f"  same result on both engines: {row['same_result']}")
    return row


def report_costs(rows: List[dict], engines: List[str]) -> Dict[str, dict]:
    """Per-rank costs, growth and the fitted exponents, printed; returns the exponents per engine."""
    fits: Dict[str, dict] = {}
    for engine in engines:
        print(f"\nper-rank cost, {engine} engine")
        print("  set           ranks    MB JSON  wall s/rank  CPU s/rank  wall s/MB  CPU s/MB  result kB/rank  "
              "tree/1 rank")
        for r in rows:
            g, mb = r[engine], r["json_bytes"] / 1e6
            print(f"  {r['set']:12s} {r['ranks']:6d} {mb:10,.0f} {g['wall_s'] / r['ranks']:12.3f} "
                  f"{g['cpu_s'] / r['ranks']:11.3f} {g['wall_s'] / mb:10.4f} {g['cpu_s'] / mb:9.4f} "
                  f"{g['result_bytes'] / r['ranks'] / 1e3:15.1f} {g['tree_ratio']:11.2f}")
        small = [r for r in rows if not r["set"].startswith("big")]
        if len(small) >= 2:
            first, last = small[0][engine], small[-1][engine]
            growth = (last["wall_s"] / small[-1]["ranks"]) / (first["wall_s"] / small[0]["ranks"])
            res = (last["result_bytes"] / small[-1]["ranks"]) / (first["result_bytes"] / small[0]["ranks"])
            print(f"  wall per rank at {small[-1]['ranks']} ranks / at {small[0]['ranks']}: {growth:.2f}; "
                  f"result bytes per rank: {res:.2f} (must not grow with N)")
        fits[engine] = {}
        for label, subset in (("small sets", small), ("all sets", rows)):
            if len({r["json_bytes"] for r in subset}) < 2:
                continue
            xs = [r["json_bytes"] for r in subset]
            _, bw = fit_exponent(xs, [r[engine]["wall_s"] for r in subset])
            _, bc = fit_exponent(xs, [r[engine]["cpu_s"] for r in subset])
            fits[engine][label] = {"wall_b": bw, "cpu_b": bc}
            shape = ("sublinear: fixed costs (start-up, per rank) outweigh bytes" if bw < 0.9 else
                     "superlinear" if bw > 1.1 else "linear within 0.1")
            print(f"  wall = a * bytes^b over the {label}: b = {bw:.2f} ({abs(bw - 1):.2f} from linear; {shape}); "
                  f"CPU b = {bc:.2f}")
    return fits


def project(rows: List[dict], engines: List[str], args: argparse.Namespace) -> dict:
    """The projected job (an ESTIMATE from the figures measured here, not a
    measurement), printed and returned. Per engine:

    - CPU per rank: CPU s per MB of the largest ranks measured (the big set
      if any), less the CPU of a job of one small rank (the fixed start-up,
      Ray's workers starting), x ``--project-mb``;
    - memory per rank in flight: the growth of the single-rank tree peak with
      the rank's size (smallest small rank -> big rank) x ``--project-mb``
      (without a big set, the small rank's whole peak per MB: an upper bound);
    - driver: its peak (VmHWM) fitted linearly in the ranks over the small
      sets, at ``--project-ranks``; fixed time: the smallest single-rank run's wall;
    - one box (local): ranks in flight = min(cores, what fits in memory),
      time = waves x CPU per rank + fixed; Ray: one rank per core of every
      node, waves x CPU per rank + fixed + the driver's CPU growth in ranks.
    """
    small = [r for r in rows if not r["set"].startswith("big")]
    big = [r for r in rows if r["set"].startswith("big")]
    n, mb = args.project_ranks, args.project_mb
    out: dict = {"ranks": n, "mb_per_rank": mb}
    print(f"\nprojection (an ESTIMATE from the figures above, not a measurement): {n} ranks x {mb:.0f} MB of JSON")
    for engine in engines:
        ref, lo = (big or small)[-1], small[0]
        # marginal cost: the set's CPU less a one-small-rank job's (start-up, Ray's workers), per MB more
        cpu_per_mb = max(ref[engine]["cpu_s"] - lo[engine]["single"]["cpu_s"], 0.0) / \
            max(ref["json_bytes"] / 1e6 - lo["largest_rank_bytes"] / 1e6, 1e-9)
        rank_cpu = cpu_per_mb * mb
        lo_peak, lo_mb = lo[engine]["single"]["tree_peak_bytes"], lo["largest_rank_bytes"] / 1e6
        if big:
            hi = big[-1]
            per_mb = (hi[engine]["single"]["tree_peak_bytes"] - lo_peak) / max(hi["largest_rank_bytes"] / 1e6 - lo_mb,
                                                                              1e-9)
            how = f"single-rank tree peak from a {lo_mb:.1f} MB to a {hi['largest_rank_bytes'] / 1e6:.0f} MB rank"
        else:
            per_mb, how = lo_peak / lo_mb, "a small rank's whole peak per MB: an upper bound, no big set"
        per_rank = max(per_mb, 0.0) * mb
        base = max(lo_peak - per_mb * lo_mb, 0.0) if big else 0.0
        c0, slope = fit_line([r["ranks"] for r in small], [r[engine]["driver_peak_bytes"] for r in small])
        driver = max(c0 + slope * n, max(r[engine]["driver_peak_bytes"] for r in rows))
        fixed = lo[engine]["single"]["wall_s"]
        e: dict = {"cpu_s_per_mb": cpu_per_mb, "rank_cpu_s": rank_cpu, "rank_bytes_in_flight": per_rank,
                   "driver_bytes": driver, "fixed_s": fixed}
        print(f"  {engine}: {cpu_per_mb:.3f} CPU s per MB ({ref['set']} less a one-rank job) -> {rank_cpu:,.1f} CPU "
              f"s per rank; "
              f"{_mb(per_rank)} per rank in flight ({per_mb / 1e6:.2f} bytes per byte of JSON: {how}); "
              f"driver {_mb(driver)} at {n} ranks ({slope / 1e3:,.0f} kB more per rank over the small sets); "
              f"fixed {fixed:.1f} s")
        if engine == "local":
            mem = args.project_mem * 1e9
            fit = int((mem - driver - base) // per_rank) if per_rank > 0 else args.project_cores
            cores = max(1, min(args.project_cores, fit))
            waves = -(-n // cores)
            minutes = (waves * rank_cpu + fixed) / 60
            e.update(box_cores=args.project_cores, box_mem_gb=args.project_mem, ranks_fitting=fit,
                     ranks_in_flight=cores, waves=waves, minutes=minutes,
                     memory_bytes=driver + base + cores * per_rank)
            print(f"    one box, {args.project_cores} cores, {args.project_mem:.0f} GB: {fit} ranks fit in memory at "
                  f"once -> {cores} in flight, {waves} waves, about {minutes:.1f} min, "
                  f"{_mb(e['memory_bytes'])} at the peak")
        else:
            slots = args.project_nodes * args.project_cores
            waves = -(-n // slots)
            _, dslope = fit_line([r["ranks"] for r in small], [r[engine]["driver_cpu_s"] for r in small])
            driver_cpu = max(dslope * n, 0.0)
            minutes = (waves * rank_cpu + fixed + driver_cpu) / 60
            node_mem = args.project_cores * per_rank + ref[engine]["ray_idle_bytes"]
            e.update(nodes=args.project_nodes, cores_per_node=args.project_cores, waves=waves, minutes=minutes,
                     node_bytes=node_mem, driver_cpu_growth_s=driver_cpu)
            print(f"    Ray, {args.project_nodes} nodes x {args.project_cores} cores: {waves} wave(s), about "
                  f"{minutes:.1f} min (the driver's CPU grows {dslope:.3f} s per rank: +{driver_cpu:.0f} s), "
                  f"{_mb(node_mem)} per node (a rank in flight per core, plus Ray's own "
                  f"{_mb(ref[engine]['ray_idle_bytes'])}), driver {_mb(driver)}")
        out[engine] = e
    return out


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8,64,256,1024", help="small rank counts, comma separated")
    ap.add_argument("--big", default="8x1GB", help="N x SIZE of JSON per rank (e.g. 8x1GB); 0 skips")
    ap.add_argument("--engines", default="local,ray")
    ap.add_argument("--quick", action="store_true", help="--ranks 8,16 --big 2x50MB --engines local,ray")
    ap.add_argument("--seed", type=int, default=0, help="seed of the ranks' clock skews")
    ap.add_argument("--work", default=os.environ.get("HTA_SCALE_DIR", "/tmp/hta-scale"))
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="--num-cpus of the Ray head")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--capped", action="store_true",
                    help="also run the local engine with HTA_REPORT_MAX_MEMORY set to the largest rank alone's peak")
    ap.add_argument("--project-ranks", type=int, default=1024)
    ap.add_argument("--project-mb", type=float, default=150.0, help="decompressed MB per rank")
    ap.add_argument("--project-cores", type=int, default=32, help="cores of the box / of each node")
    ap.add_argument("--project-mem", type=float, default=256.0, help="GB of memory of the box")
    ap.add_argument("--project-nodes", type=int, default=32)
    args = ap.parse_args(argv)
    if args.quick:
        args.ranks, args.big, args.engines = "8,16", "2x50MB", "local,ray"
    for p in (SOURCE, BIG_BASE):
        if not p.exists():
            raise SystemExit(f"{p} not found (../shared is absent)")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPU cores, engines {', '.join(engines)}"
          f"{f' (Ray head with {args.cores} CPUs)' if 'ray' in engines else ''}; work dir {work}")
    print("CPU: analyze process + children (wait4); ray: + the Ray cluster's processes (/proc/PID/stat, sampled "
          f"before, every {SAMPLE_S * 1e3:.0f} ms and after). tree peak: sum of PSS over the tree (ray: + the "
          f"cluster), sampled every {SAMPLE_S * 1e3:.0f} ms (the sampler costs some CPU of this machine)")
    sets = []
    t0 = time.perf_counter()
    for n in [int(x) for x in args.ranks.split(",") if x.strip()]:
        d, sizes = make_ranks(n, work, args.seed)
        sets.append((f"{n}-ranks", d, sizes))
    nb, size = parse_big(args.big)
    if nb:
        d, sizes = make_big(nb, size, work)
        sets.append((f"big-{nb}x{size // 10**6}MB", d, sizes))
    print(f"rank files ready in {time.perf_counter() - t0:.0f} s", flush=True)
    head = RayHead(args.cores, env) if "ray" in engines else None
    rows = []
    try:
        if head and sets:
            name, d, sizes = sets[0]
            warm = analyze(single(d, sizes, work), work / "warm-up.json", "ray", env, head)
            print(f"Ray warm-up job (one rank of {name}, not counted): {warm['wall_s']:.1f} s wall")
        for name, d, sizes in sets:
            rows.append(measure_set(name, d, sizes, engines, work, env, head, args.capped))
    finally:
        if head:
            head.stop()
    fits = report_costs(rows, engines)
    projection = project(rows, engines, args) if any(not r["set"].startswith("big") for r in rows) else {}
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "fits": fits, "projection": projection}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_generate":
        _generate(*sys.argv[2:5])
    else:
        main()
