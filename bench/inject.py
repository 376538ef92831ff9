"""Put one known cause of GPU idleness into a real Kineto trace.

Used by ``bench/diagnosis.py``'s real-derived tier: the traces under
``../shared/traces/hta/`` come from real jobs (A100, V100, MI250); this module
adds, in every ``ProfilerStep``, one cause at a chosen strength (the share of
the resulting step it costs), the way the PyTorch profiler would have recorded
it, and writes the result elsewhere (``/tmp``), never over the input.

What is added is what ``torch.profiler`` writes for the real thing:

* ``dataloader``: an ``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``
  annotation at the start of the step (workers that deliver late);
* ``item``: ``aten::item`` → ``aten::_local_scalar_dense`` → ``cudaMemcpyAsync``
  with a 4-byte ``Memcpy DtoH (Device -> Pageable)`` on the compute stream and
  a ``cudaStreamSynchronize``, then host work that uses the value (unprofiled
  Python) before the next launch;
* ``pageable``: ``aten::to`` → ``aten::_to_copy`` → ``aten::copy_`` →
  ``cudaMemcpyAsync`` of a large ``Memcpy HtoD (Pageable -> Device)`` (the
  batch, not pinned), which blocks the host until it is done;
* ``optimizer``: a second optimizer's ``Optimizer.step#SGD.step`` annotation
  (``Adagrad`` when the trace's own is SGD) after the step's own optimizer,
  running per-parameter ops (``aten::mul_``, ``aten::add_``...) that each
  launch one tiny elementwise kernel;
* ``straggler`` (two ranks): the slow rank runs extra GPU work at the start
  of each step (uneven inputs); the other rank's first collective kernel of
  the step waits that long for it (it lasts longer and everything after it
  moves later).

Fixed twins (:data:`FIXED_TWINS`) are the same script after the user's fix, where
the fix keeps part of the cause: ``item-fixed`` (the host work that used the
value, without the read) and ``pageable-fixed`` (the batch copied from pinned
memory with ``non_blocking=True``, see :meth:`Trace.queue_copy`).

Every added runtime call gets a correlation id shared with its GPU
operation, with ``External id`` and flow events as the trace's own, and the
ids are then handed out again in call order (:meth:`Trace.renumber`), as
CUPTI numbers calls as they are made; the host
timeline after an insertion moves later by the inserted time, enclosing
annotations on that thread grow, and the GPU work launched after it is
replayed stream by stream (each operation starts after its new launch and
after the previous operation on its stream, keeping the extra wait it had in
the original), so queued work still runs while the host stalls.
"""
from __future__ import annotations

import copy
import gzip
import json
import re
from bisect import bisect_right, insort
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
FLOW_CATS = ("ac2g", "async_cpu_to_gpu")
CAUSES = ("dataloader", "item", "pageable", "optimizer", "straggler", "no-overlap")
#: An operation that started later than this (µs) after the operation it is taken to have
#: waited for ended did not wait for it (:meth:`Trace._replay`): a stream wait resolves within
#: a few µs, where launch latency on an idle stream runs 8-25 µs (median and p90 of the A100
#: trace_diff traces' kernels and copies), and the host-bound gaps of a trace far more.
WAIT_GAP_US = 10.0
#: How many operations (by end) back a stream wait's dependency is searched for.
MAX_LOOKBACK = 2000
#: Gradient all-reduce kernels (NCCL/RCCL), the collectives DDP overlaps with backward.
ALLREDUCE_KERNEL = re.compile(r"^(nccl|rccl).*allreduce", re.IGNORECASE)
#: Pageable host-to-device bandwidth assumed for the injected copy (bytes per µs = MB/s; 3 GB/s).
PAGEABLE_BYTES_PER_US = 3000.0
#: Host time per optimizer op and its kernel's duration (µs), a per-parameter SGD/Adam step.
OPT_OP_US, OPT_KERNEL_US = 20.0, 3.0
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
               "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
               "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
               "at::detail::Array<char*, 3>)")


def read(path: Path) -> dict:
    """A trace file (``.json`` or ``.json.gz``) as a dict."""
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def write(doc: dict, path: Path) -> Path:
    """Save ``doc`` as gzipped JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=3))
    return path


class Trace:
    """A Kineto trace being edited (times in the trace's µs)."""

    def __init__(self, doc: dict) -> None:
        self.doc = copy.deepcopy(doc)
        self.ev: List[dict] = self.doc["traceEvents"]
        steps = [e for e in self.ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                 and e.get("cat") == "user_annotation"]
        if not steps:
            raise ValueError("no ProfilerStep annotations to inject into")
        self.main = (steps[0]["pid"], steps[0]["tid"])
        self.hip = any(e.get("cat") == "cuda_runtime" and str(e.get("name", "")).startswith("hip") for e in self.ev)
        self.flow_cat = next((e["cat"] for e in self.ev if e.get("cat") in FLOW_CATS), None)
        ids = [int(e["args"].get("correlation", 0)) for e in self.ev if isinstance(e.get("args"), dict)
               and isinstance(e["args"].get("correlation"), (int, float))]
        ext = [int(e["args"].get("External id", 0)) for e in self.ev if isinstance(e.get("args"), dict)
               and isinstance(e["args"].get("External id"), (int, float))]
        self._next = self._first_id = max(ids + ext + [0]) + 1_000_000
        gpu = self.gpu_ops()
        by_stream: Dict[tuple, float] = defaultdict(float)
        for e in gpu:
            if e["cat"] == "kernel":
                by_stream[(e["pid"], e["tid"])] += float(e.get("dur", 0))
        self.device_pid, self.stream = max(by_stream, key=by_stream.get) if by_stream else (0, 7)

    # ------------------------------------------------------------------ views
    def steps(self) -> List[dict]:
        """The ``ProfilerStep`` annotations, in time order."""
        return sorted((e for e in self.ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                       and str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])

    def gpu_ops(self) -> List[dict]:
        return [e for e in self.ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS]

    def _runtime_by_corr(self) -> Dict[int, dict]:
        out = {}
        for e in self.ev:
            if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
                c = e.get("args", {}).get("correlation")
                if isinstance(c, (int, float)) and c > 0:
                    out.setdefault(int(c), e)
        return out

    def drain_time(self, t: float, stream: Optional[Tuple] = None) -> float:
        """When the GPU work launched before ``t`` ends (on ``stream``, else on any stream)."""
        rt = self._runtime_by_corr()
        end = t
        for e in self.gpu_ops():
            if stream is not None and (e["pid"], e["tid"]) != stream:
                continue
            call = rt.get(int(e.get("args", {}).get("correlation", -1) or -1))
            if call is not None and call["ts"] < t:
                end = max(end, e["ts"] + e.get("dur", 0))
        return end

    def top_level_gap(self, lo: float, hi: float) -> float:
        """A time in ``[lo, hi]`` at which the main thread is inside no
        ``cpu_op`` (between two top-level ops) and the compute stream has the
        most work queued (where a script reads ``loss.item()``: after
        launching the step's work), else ``hi``."""
        ops = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in self.ev if e.get("ph") == "X"
                     and e.get("cat") == "cpu_op" and (e["pid"], e["tid"]) == self.main and e["ts"] < hi)
        cands, run_end = [], None
        for ts, end in ops:
            if run_end is not None and ts > run_end and lo <= run_end <= hi:
                cands.append(run_end + 0.5)  # a gap between top-level ops begins at run_end
            run_end = end if run_end is None else max(run_end, end)
        if not cands:
            return hi
        cands = cands[:: max(1, len(cands) // 40)]
        return max(cands, key=lambda x: (self.stream_end(x) - x, x))

    # ------------------------------------------------------------------ edits
    def _id(self) -> int:
        self._next += 1
        return self._next

    def stall(self, t: float, d: float, thread: Optional[tuple] = None) -> None:
        """The host stops for ``d`` µs at ``t`` on ``thread`` (default: the
        main thread). Host events from ``t`` on move later by the shift in
        force at their time, the ones on that thread that enclose ``t`` grow,
        and GPU work launched from ``t`` on is replayed (:meth:`_replay`).

        The shift starts at ``d`` and shrinks at each blocking call of the
        thread after ``t`` (a stream/device/event synchronization, or a
        pageable or device-to-host copy) that waited for GPU work: that work
        moved later by less than ``d`` when queued work ran during the stall,
        so the call returns that much earlier than ``t + d`` would put it, as
        it would have on the machine."""
        thread = thread or self.main
        rt = self._runtime_by_corr()
        gpu = self.gpu_ops()
        launch = self._launches(gpu, rt)
        waits = self._stream_waits(gpu)
        shifts = [(t, d)]  # (host time, shift from there on), ascending

        def shift_at(x: float) -> float:
            if x < t:
                return 0.0
            return shifts[bisect_right(shifts, (x, float("inf"))) - 1][1]

        for call, awaited in self._blocking_after(t, thread, gpu, rt):
            cur = shift_at(call["ts"])
            if cur <= 0:
                break
            moved = self._replay(gpu, launch, shift_at, upto=awaited, waits=waits)
            b0, b1 = float(call["ts"]), float(call["ts"]) + float(call.get("dur", 0))
            got = moved - float(awaited["ts"])  # how much later the awaited work now ends
            floor = b0 + cur + min(5.0, b1 - b0) - b1  # the call cannot end before it starts
            shifts.append((b1, max(floor, min(cur, max(0.0, got)))))
        for e in self.ev:
            if e.get("cat") in GPU_CATS or e.get("ph") == "M" or "ts" not in e or e.get("cat") in FLOW_CATS:
                continue
            ts, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0) or 0)
            if e.get("ph") == "X" and e.get("cat") == "Trace":
                e["dur"] = e.get("dur", 0) + shift_at(end)
                continue
            if ts >= t:
                new_ts = ts + shift_at(ts)
                if e.get("ph") == "X":
                    e["dur"] = max(0.0, end + shift_at(end) - new_ts) if end > ts else e.get("dur", 0)
                e["ts"] = new_ts
            elif e.get("ph") == "X" and (e.get("pid"), e.get("tid")) == thread and end > t:
                e["dur"] = e.get("dur", 0) + shift_at(end)
        self._replay(gpu, launch, shift_at, apply=True, waits=waits)
        self._fix_flows()

    def deoverlap(self) -> None:
        """No two operations of one stream overlap: one that starts before the
        previous ends (an added operation and replayed work) waits for it."""
        streams: Dict[tuple, List[dict]] = defaultdict(list)
        for e in self.gpu_ops():
            streams[(e["pid"], e["tid"])].append(e)
        for ops in streams.values():
            ops.sort(key=lambda e: float(e["ts"]))
            end = float("-inf")
            for e in ops:
                e["ts"] = max(float(e["ts"]), end)
                end = e["ts"] + float(e.get("dur", 0))

    def shift_from(self, t: float, d: float, skip: Optional[dict] = None) -> None:
        """Everything (host and GPU) from ``t`` on moves ``d`` later; events on
        the main thread that enclose ``t`` (and the whole-trace event) grow."""
        for e in self.ev:
            if e.get("ph") == "M" or "ts" not in e or e is skip:
                continue
            if e["ts"] >= t:
                e["ts"] += d
            elif e.get("ph") == "X" and e["ts"] + e.get("dur", 0) > t and (
                    e.get("cat") == "Trace" or (e.get("pid"), e.get("tid")) == self.main):
                e["dur"] = e.get("dur", 0) + d

    def _blocking_after(self, t: float, thread: tuple, gpu: List[dict], rt: Dict[int, dict]):
        """Blocking calls on ``thread`` starting at or after ``t``, in time
        order, each with the GPU operation it waited for: its own copy (a
        pageable or device-to-host copy), or the last GPU operation launched
        before it that ended before it returned (a synchronization)."""
        gpu_by_corr = {int(e["args"]["correlation"]): e for e in gpu if isinstance(e.get("args"), dict)
                       and isinstance(e["args"].get("correlation"), (int, float))}
        launched = sorted(((float(rt[c]["ts"]), float(e["ts"]) + float(e.get("dur", 0)), id(e), e)
                           for c, e in gpu_by_corr.items() if c in rt), key=lambda x: x[0])
        launch_ts = [x[0] for x in launched]
        calls = sorted((e for e in self.ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
                        and (e.get("pid"), e.get("tid")) == thread and e["ts"] >= t), key=lambda e: e["ts"])
        for call in calls:
            name = str(call.get("name", ""))
            b0, b1 = float(call["ts"]), float(call["ts"]) + float(call.get("dur", 0))
            if name.endswith(("StreamSynchronize", "DeviceSynchronize", "EventSynchronize")):
                i = bisect_right(launch_ts, b0)
                done = [x for x in launched[max(0, i - 400):i] if x[1] <= b1 + 2.0]
                if done:
                    yield call, max(done, key=lambda x: x[1])[3]
            elif "Memcpy" in name:
                op = gpu_by_corr.get(int(call.get("args", {}).get("correlation", -1) or -1))
                if op is not None and ("Pageable" in str(op["name"]) or "DtoH" in str(op["name"])
                                       or not name.endswith("Async")):
                    yield call, op

    def _replay(self, gpu: List[dict], launch: Dict[int, Optional[float]], shift_at, upto: Optional[dict] = None,
                apply: bool = False, insert: Optional[Tuple[tuple, float, float]] = None,
                gate: Optional[Tuple[tuple, float, float]] = None,
                waits: Optional[Dict[int, float]] = None) -> float:
        """Replay GPU operations in start order after the host moved launch
        calls by ``shift_at(launch time)``. An operation that started as soon
        as it was ready (its launch call had started and the previous operation
        on its stream had ended, 5 µs of latency allowed) moves by as much as
        its readiness moved; one that waited longer waited on something else
        (another stream's event, a collective's peers): it moves with the
        operation that ended last before it started, where that one ended at
        most :data:`WAIT_GAP_US` before it (else the wait was launch latency),
        and never starts before it is ready. The first operation launched after a
        stream-wait call on its thread (:meth:`_stream_waits`) also starts no
        earlier than the other stream's work it waited for now ends (plus the
        gap it had, up to :data:`WAIT_GAP_US`). Only an operation launched before it can hold it back (a
        stream waits on events recorded before its wait was queued): work
        launched later never moves work launched earlier. ``insert``: an
        operation added at ``(stream, start, end)`` (not in ``gpu``): the
        stream's later work waits for it. ``gate``: ``(stream, t, end)``, a
        ``cudaStreamWaitEvent`` made at ``t``: the first operation on the stream
        launched at ``t`` or later starts after ``end``. Returns the new end of
        ``upto`` (stopping there) and, with ``apply``, moves the operations."""
        neg = float("-inf")
        prev: Dict[tuple, Tuple[float, float]] = {}
        # (original end, delay, original launch, stream code), sorted
        ends: List[Tuple[float, float, float, int]] = []
        codes: Dict[tuple, int] = {}
        new_ts: Dict[int, float] = {}
        waits = self._stream_waits(gpu) if waits is None else waits
        for e in sorted(gpu, key=lambda e: float(e["ts"])):
            start, dur = float(e["ts"]), float(e.get("dur", 0))
            key = (e["pid"], e["tid"])
            code = codes.setdefault(key, len(codes))
            if insert is not None and key == insert[0] and start >= insert[1]:
                p_orig, p_new = prev.get(key, (neg, neg))
                prev[key] = (p_orig, max(p_new, insert[2]))
                insert = None
            l_orig = launch[id(e)]
            l_new = (l_orig + shift_at(l_orig)) if l_orig is not None else neg
            l_orig = l_orig if l_orig is not None else neg
            p_orig, p_new = prev.get(key, (neg, neg))
            ready_orig, ready_new = max(l_orig, p_orig), max(l_new, p_new)
            if gate is not None and key == gate[0] and l_orig >= gate[1]:
                ready_new = max(ready_new, gate[2])
                gate = None
            if start - ready_orig <= 5.0:
                new = start + max(0.0, ready_new - ready_orig)
            else:
                # the operation launched before it that ended last before it started
                i, dep = bisect_right(ends, (start, float("inf"), float("inf"), 0)), 0.0
                while i > 0:
                    i -= 1
                    if ends[i][2] <= l_orig or l_orig == neg:  # an op without its launch: the last one
                        # it waited on that op only if it started as that op ended; later, its
                        # start after its launch was latency (A100 traces here: 8-25 µs)
                        dep = ends[i][1] if start - ends[i][0] <= WAIT_GAP_US else 0.0
                        break
                new = max(start + dep, ready_new + 5.0 if ready_new > neg else start)
            w_ts = waits.get(id(e))
            if w_ts is not None:  # launched after a stream wait: after the other stream's work it waited for
                i = bisect_right(ends, (start + 2.0, float("inf"), float("inf"), 0))
                for j in range(i - 1, max(-1, i - 1 - MAX_LOOKBACK), -1):
                    o_end, o_delay, o_launch, o_code = ends[j]
                    if o_code != code and o_launch <= w_ts:
                        new = max(new, o_end + o_delay + max(0.0, min(start - o_end, WAIT_GAP_US)))
                        break
            prev[key] = (start + dur, new + dur)
            insort(ends, (start + dur, new - start, l_orig, code))
            new_ts[id(e)] = new
            if upto is not None and e is upto:
                return new + dur
        if apply:
            for e in gpu:
                e["ts"] = new_ts[id(e)]
        return neg

    def _stream_waits(self, gpu: List[dict]) -> Dict[int, float]:
        """For the first GPU operation launched after each stream-wait call
        (``cudaStreamWaitEvent``, HIP's) on its thread: the wait's start (µs),
        by ``id`` of the operation. The trace names no event, so the stream
        it waits for is taken to be the other stream whose work launched
        before the wait ended last before the operation started, as
        hta-report's replay graph infers its cross-stream edges
        (:meth:`_replay`)."""
        calls: Dict[tuple, List[Tuple[float, int, Optional[int]]]] = defaultdict(list)
        by_corr: Dict[int, dict] = {}
        for e in gpu:
            c = e.get("args", {}).get("correlation")
            if isinstance(c, (int, float)):
                prior = by_corr.get(int(c))
                if prior is None or float(e["ts"]) < float(prior["ts"]):
                    by_corr[int(c)] = e
        for e in self.ev:
            if e.get("ph") != "X" or e.get("cat") not in ("cuda_runtime", "cuda_driver"):
                continue
            name = str(e.get("name", ""))
            c = e.get("args", {}).get("correlation")
            if name.endswith("StreamWaitEvent"):
                calls[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), 0, None))
            elif isinstance(c, (int, float)) and int(c) in by_corr:
                calls[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), 1, int(c)))
        out: Dict[int, float] = {}
        for seq in calls.values():
            seq.sort(key=lambda x: (x[0], x[1]))
            pending: Optional[float] = None
            for ts, kind, corr in seq:
                if kind == 0:
                    pending = ts  # the latest wait before the launch
                elif pending is not None and corr is not None:
                    out[id(by_corr[corr])] = pending
                    pending = None
        return out

    def renumber(self) -> None:
        """Correlation ids in the order the calls were made, as CUPTI numbers
        them: the inserted calls got fresh ids above every other, which would
        put them last in launch order although they run mid-trace (a GPU
        stream's work then seems to run out of order, and hta-report's clock
        check rightly refuses the rank). The ids in use are handed out again
        to the runtime and driver calls sorted by start time; their GPU
        operations and flow events follow."""
        calls = [e for e in self.ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), (int, float))
                 and e["args"]["correlation"] > 0]
        calls.sort(key=lambda e: float(e["ts"]))
        new = dict(zip((int(e["args"]["correlation"]) for e in calls),
                       sorted(int(e["args"]["correlation"]) for e in calls)))
        for e in self.ev:
            args = e.get("args")
            if isinstance(args, dict) and isinstance(args.get("correlation"), (int, float)):
                old = int(args["correlation"])
                if old in new:
                    if args.get("External id") == old and e.get("cat") in ("cuda_runtime", "cuda_driver") + GPU_CATS \
                            and old >= self._first_id:
                        args["External id"] = new[old]  # an inserted call's own id
                    args["correlation"] = new[old]
            if e.get("cat") in FLOW_CATS and "id" in e and isinstance(e["id"], (int, float)) and int(e["id"]) in new:
                e["id"] = new[int(e["id"])]

    def _fix_flows(self) -> None:
        """Flow events follow the runtime call (host side) and the GPU operation (device side)."""
        if not self.flow_cat:
            return
        host = {int(e["args"]["correlation"]): e["ts"] for e in self.ev if e.get("ph") == "X"
                and e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict)
                and isinstance(e["args"].get("correlation"), (int, float))}
        dev = {int(e["args"]["correlation"]): (e["ts"], e["pid"], e["tid"]) for e in self.ev if e.get("ph") == "X"
               and e.get("cat") in GPU_CATS and isinstance(e.get("args"), dict)
               and isinstance(e["args"].get("correlation"), (int, float))}
        for e in self.ev:
            if e.get("cat") not in FLOW_CATS or "id" not in e:
                continue
            i = int(e["id"])
            if i in dev and (e.get("pid"), e.get("tid")) == dev[i][1:]:
                e["ts"] = dev[i][0]
            elif i in host:
                e["ts"] = host[i]

    def _x(self, cat: str, name: str, ts: float, dur: float, pid, tid, **args) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        self.ev.append(e)
        return e

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        """A host event on the main thread."""
        self._x(cat, name, ts, dur, *self.main, **{"External id": self._id()})

    def launch(self, api: str, ts: float, dur: float, cat: str, name: str, start: float, gdur: float,
               nbytes: Optional[int] = None) -> None:
        """A runtime call on the main thread and the GPU operation it launches
        on the compute stream, with a shared correlation id and flow events."""
        corr = self._id()
        if self.hip:
            api = api.replace("cuda", "hip")
        self._x("cuda_runtime", api, ts, dur, *self.main, correlation=corr, **{"External id": corr})
        args = {"External id": corr, "device": self.device_pid, "stream": self.stream, "correlation": corr}
        if nbytes is not None:
            args["bytes"] = nbytes
            args["memory bandwidth (GB/s)"] = nbytes / max(gdur, 1e-3) / 1e3
        self._x(cat, name, start, gdur, self.device_pid, self.stream, **args)
        if self.flow_cat:
            self.ev.append({"ph": "s", "id": corr, "pid": self.main[0], "tid": self.main[1], "ts": ts,
                            "cat": self.flow_cat, "name": "ac2g"})
            self.ev.append({"ph": "f", "id": corr, "pid": self.device_pid, "tid": self.stream, "ts": start,
                            "cat": self.flow_cat, "name": "ac2g", "bp": "e"})

    def queue_copy(self, ts: float, dur: float, name: str, start: float, gdur: float, nbytes: int) -> None:
        """A copy call at ``ts`` on the main thread that returns at once (``dur``
        µs: pinned memory, ``non_blocking=True``) and its copy on the compute
        stream from ``start`` for ``gdur`` µs. The stream's later work waits
        for the copy, and work on other streams that waited on it moves with
        it (:meth:`_replay`; it moves less where the stream had idle time);
        the first blocking call of the main thread after ``ts``
        whose awaited GPU operation now ends later (a synchronization, a
        blocking read: the sync drains the queue) returns that much later,
        and the host from there on moves with it (:meth:`stall`, whose shift
        shrinks at later blocking calls as queued work absorbs it)."""
        self._move_gpu(ts, lambda: self.launch("cudaMemcpyAsync", ts, dur, "gpu_memcpy", name, start, gdur,
                                               nbytes=nbytes), insert=((self.device_pid, self.stream), start, start + gdur))

    def _move_gpu(self, at: float, added: Optional[Callable[[], None]] = None, **edit) -> None:
        """GPU work moved in place (:meth:`_replay` with the host where it is and
        ``edit``: its ``insert`` or ``gate``), then ``added()`` (the operation
        that caused the move, put into the trace), then the main thread's first
        blocking call after ``at`` whose awaited operation now ends later
        returns that much later (:meth:`_host_waits`)."""
        rt = self._runtime_by_corr()
        gpu = self.gpu_ops()
        blocking = list(self._blocking_after(at, self.main, gpu, rt))
        old_end = {id(op): float(op["ts"]) + float(op.get("dur", 0)) for _, op in blocking}
        self._replay(gpu, self._launches(gpu, rt), lambda x: 0.0, apply=True, **edit)
        if added is not None:
            added()
        self._host_waits(blocking, old_end)

    def _launches(self, gpu: List[dict], rt: Dict[int, dict]) -> Dict[int, Optional[float]]:
        """Each GPU operation's launch call start (µs; None: no call in the trace)."""
        out: Dict[int, Optional[float]] = {}
        for e in gpu:
            c = rt.get(int(e.get("args", {}).get("correlation", -1) or -1))
            out[id(e)] = float(c["ts"]) if c is not None else None
        return out

    def _host_waits(self, blocking: List[Tuple[dict, dict]], old_end: Dict[int, float]) -> None:
        """After GPU work moved: the first of the main thread's ``blocking``
        calls (with the operation each waited for, whose end was ``old_end``)
        whose operation now ends later returns that much later (:meth:`stall`)."""
        for call, op in blocking:
            moved = float(op["ts"]) + float(op.get("dur", 0)) - old_end[id(op)]
            if moved > 0.5:
                end = float(call["ts"]) + float(call.get("dur", 0))
                self.stall(max(float(call["ts"]), end - 0.01), moved)
                return

    def wait_for(self, k: dict) -> None:
        """The compute stream waits for the GPU operation ``k`` (a collective on
        another stream): a ``cudaStreamWaitEvent`` on the thread that launched
        ``k``, right after its launch call (that thread's later calls move 2 µs
        later), and the first compute-stream operation launched after it starts
        once ``k`` ends; the stream's later work, work on other streams that
        waited on it, and the main thread's next blocking call that waited for
        moved work follow (:meth:`_move_gpu`)."""
        rt = self._runtime_by_corr()
        call = rt[int(k["args"]["correlation"])]
        thread, at = (call["pid"], call["tid"]), float(call["ts"]) + float(call.get("dur", 0))
        self.stall(at, 2.0, thread)
        corr = self._id()
        api = "hipStreamWaitEvent" if self.hip else "cudaStreamWaitEvent"
        self._x("cuda_runtime", api, at + 0.5, 1.0, *thread, correlation=corr, **{"External id": corr})
        self._move_gpu(at, gate=((self.device_pid, self.stream), at + 0.5, float(k["ts"]) + float(k["dur"])))

    def pinned_bytes_per_us(self) -> float:
        """The machine's pinned host-to-device rate (bytes per µs): the median
        rate of the trace's pinned copies of at least 1 MiB (hta_report's
        ``MIN_SAMPLE_BYTES``: what this machine measured, all of them, where
        hta-report's edit keeps the largest), else the device's PCIe link from
        ``deviceProperties`` (hta_report's table, 80 % of x16), else PCIe gen 4."""
        from hta_report.analysis.kernels import by_device_name
        from hta_report.analysis.pinned_copy import (MIN_SAMPLE_BYTES, PCIE_EFFICIENCY, PCIE_GENERATION,
                                                     PCIE_X16_GBPS)
        rates = sorted(float(e["args"]["bytes"]) / float(e["dur"]) for e in self.gpu_ops()
                       if "HtoD (Pinned" in str(e.get("name")) and float(e.get("dur", 0)) > 0
                       and float(e.get("args", {}).get("bytes", 0) or 0) >= MIN_SAMPLE_BYTES)
        if rates:
            return rates[len(rates) // 2]
        names = [str(d.get("name", "")) for d in self.doc.get("deviceProperties", []) if isinstance(d, dict)]
        gen = by_device_name(PCIE_GENERATION, names) or 4
        return PCIE_X16_GBPS[gen] * PCIE_EFFICIENCY * 1e3

    def stream_end(self, t: float) -> float:
        """When the compute stream's work launched before ``t`` ends (at least ``t``)."""
        return self.drain_time(t, (self.device_pid, self.stream))


#: The trace after the user's fix, where the fix keeps part of what the cause added:
#: ``item`` adds a sync and then host work that uses the value (unprofiled Python); removing
#: the ``.item()`` removes the sync, not that work, so ``item-fixed`` adds the same host work
#: at the same place without the read (the GPU keeps running queued work meanwhile).
#: ``pageable`` copies the batch from pageable memory; pinning it and copying with
#: ``non_blocking=True`` keeps the copy, so ``pageable-fixed`` copies the same bytes from pinned
#: memory at this machine's pinned rate (:meth:`Trace.pinned_bytes_per_us`) on the compute
#: stream, without blocking the host (:meth:`Trace.queue_copy`).
FIXED_TWINS = {"item": "item-fixed", "pageable": "pageable-fixed"}
#: Host time (µs) of ``aten::to`` on a pinned batch with ``non_blocking=True``: the ops and a
#: ``cudaMemcpyAsync`` that returns once the copy is queued (Kineto traces of pinned copies:
#: 10-30 µs; the H200 pairs of bench/record_cuda.py, pageable-copy after its fix: 14-22 µs).
PINNED_CALL_US = 20.0


def extra_us(step_us: float, strength: float) -> float:
    """Time to add so that it is ``strength`` of the resulting step."""
    return strength / (1 - strength) * step_us


def inject(doc: dict, cause: str, strength: float) -> dict:
    """A copy of trace ``doc`` with ``cause`` (one of :data:`CAUSES` but
    ``straggler``, see :func:`inject_straggler`, or a twin of
    :data:`FIXED_TWINS`) added to every step at
    ``strength`` (0-1, the share of the resulting step).

    Raises:
        ValueError: an unknown cause, or a trace without ``ProfilerStep``.
    """
    if cause == "no-overlap":
        return inject_no_overlap(doc)
    t = Trace(doc)
    rate = t.pinned_bytes_per_us() if cause == "pageable-fixed" else 0.0
    for step in reversed(t.steps()):  # last first: an insertion moves only what comes after it
        s0, dur = float(step["ts"]), float(step["dur"])
        want = extra_us(dur, strength)
        if cause == "dataloader":
            at = s0 + 1
            stall = max(0.0, t.drain_time(at) - at) + want  # queued work hides the first part of a stall
            t.stall(at, stall)
            t.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", at, stall, cat="user_annotation")
        elif cause == "item-fixed":  # the same script after the fix: the host work stays, the sync goes
            at = t.top_level_gap(s0 + 0.3 * dur, s0 + 0.95 * dur)
            t.stall(at, want)
        elif cause == "item":
            at = t.top_level_gap(s0 + 0.3 * dur, s0 + 0.95 * dur)
            copy_start = max(at + 10, t.stream_end(at) + 1)
            ret = copy_start + 2 + 3
            total = (ret + 5 - at) + want
            t.stall(at, total)
            t.cpu("aten::item", at, ret + 5 - at)
            t.cpu("aten::_local_scalar_dense", at + 1, ret + 3 - at)
            t.launch("cudaMemcpyAsync", at + 3, ret - at - 3, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)",
                     copy_start, 2.0, nbytes=4)
            t._x("cuda_runtime", "cudaStreamSynchronize" if not t.hip else "hipStreamSynchronize", ret + 0.5, 2.0,
                 *t.main, correlation=t._id())
        elif cause == "pageable":
            at = s0 + 1
            copy_us = want
            copy_start = max(at + 12, t.stream_end(at) + 1)
            ret = copy_start + copy_us + 5
            t.stall(at, ret + 8 - at)
            t.cpu("aten::to", at, ret + 8 - at)
            t.cpu("aten::_to_copy", at + 1, ret + 6 - at)
            t.cpu("aten::copy_", at + 3, ret + 3 - at)
            t.launch("cudaMemcpyAsync", at + 5, ret - at - 5, "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)",
                     copy_start, copy_us, nbytes=int(copy_us * PAGEABLE_BYTES_PER_US))
        elif cause == "pageable-fixed":  # the same batch pinned, copied with non_blocking=True
            at = s0 + 1
            nbytes = int(want * PAGEABLE_BYTES_PER_US)
            t.stall(at, PINNED_CALL_US + 4)
            t.cpu("aten::to", at, PINNED_CALL_US + 2)
            t.cpu("aten::_to_copy", at + 1, PINNED_CALL_US)
            t.cpu("aten::copy_", at + 3, PINNED_CALL_US - 4)
            call = at + PINNED_CALL_US - 12
            copy_start = max(call + 5, t.stream_end(call) + 1)
            t.queue_copy(call, 6.0, "Memcpy HtoD (Pinned -> Device)", copy_start, nbytes / rate, nbytes)
        elif cause == "optimizer":
            opt = [e for e in t.ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("Optimizer.step#")
                   and s0 <= e["ts"] < s0 + dur and (e["pid"], e["tid"]) == t.main]
            at = (max(e["ts"] + e["dur"] for e in opt) if opt else s0 + dur - 2) + 0.5
            queued = max(0.0, t.drain_time(at) - at)  # work the GPU still runs while the host steps
            n_ops = max(10, int((want + queued) / (OPT_OP_US - OPT_KERNEL_US)))
            host = n_ops * OPT_OP_US + 2
            t.stall(at, host)
            present = {str(e.get("name")) for e in opt}
            name = next(n for n in ("Optimizer.step#SGD.step", "Optimizer.step#Adagrad.step") if n not in present)
            t.cpu(name, at, host, cat="user_annotation")  # a second optimizer, single-tensor
            ready = t.stream_end(at)
            names = ("aten::mul_", "aten::add_", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_")
            for i in range(n_ops):
                o = at + 1 + i * OPT_OP_US
                t.cpu(names[i % len(names)], o, OPT_OP_US - 2)
                start = max(o + 15, ready)
                t.launch("cudaLaunchKernel", o + 8, 5.0, "kernel", ELEMENTWISE, start, OPT_KERNEL_US)
                ready = start + OPT_KERNEL_US
        else:
            raise ValueError(f"unknown cause {cause!r} (one of {', '.join(CAUSES)})")
    t.deoverlap()
    t.renumber()
    t._fix_flows()
    return t.doc


def inject_no_overlap(doc: dict) -> dict:
    """A copy of ``doc`` as DDP without overlap would have run it: in each
    ``ProfilerStep`` the compute stream waits for every gradient all-reduce
    kernel launched in the step (:data:`ALLREDUCE_KERNEL`) but the last,
    which the optimizer already waits for (:meth:`Trace.wait_for`, earliest
    first, each seeing the moves of the ones before). The strength is not a
    knob: the cost is what the all-reduces take.

    Raises:
        ValueError: a trace without ``ProfilerStep``, or no step with two all-reduces.
    """
    t = Trace(doc)
    ars = [e for e in t.gpu_ops() if ALLREDUCE_KERNEL.search(str(e["name"]))]
    launched = t._launches(ars, t._runtime_by_corr())
    picks: List[dict] = []
    for step in t.steps():
        s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
        ks = sorted((e for e in ars if launched[id(e)] is not None and s0 <= launched[id(e)] < s1), key=lambda e: float(e["ts"]))
        picks += ks[:-1]
    if not picks:
        raise ValueError("no step launches two gradient all-reduce kernels")
    for k in sorted(picks, key=lambda e: float(e["ts"])):
        t.wait_for(k)
    t.deoverlap()
    t.renumber()
    t._fix_flows()
    return t.doc


def _work_kernel(t: Trace) -> str:
    """A compute kernel name of the trace that is not a GEMM or convolution
    (the longest in total), for extra work that no other rule claims."""
    import re
    matmul = re.compile(r"gemm|cutlass|xmma|cudnn|conv|nccl|Memcpy|Memset", re.IGNORECASE)
    total: Dict[str, float] = defaultdict(float)
    for e in t.gpu_ops():
        if e["cat"] == "kernel" and not matmul.search(str(e["name"])):
            total[str(e["name"])] += float(e.get("dur", 0))
    return max(total, key=total.get) if total else ELEMENTWISE


def inject_straggler(slow: dict, waiting: dict, strength: float) -> Tuple[dict, dict]:
    """Two ranks of one job. ``slow`` gets more GPU work in every step (one
    kernel of the trace's own kind, ``strength`` of the resulting step, just
    before the first kernel launched in the step: uneven inputs such as longer
    sequences); in ``waiting``, the first collective (``nccl*``) kernel
    launched in each step lasts that much longer, waiting for the slow rank.
    On both, everything from that point on moves later by as much.

    Raises:
        ValueError: a trace without ``ProfilerStep`` or ``waiting`` without
            communication kernels.
    """
    s, w = Trace(slow), Trace(waiting)
    name = _work_kernel(s)
    for step in reversed(s.steps()):
        s0, dur = float(step["ts"]), float(step["dur"])
        extra = extra_us(dur, strength)
        first = _first_launched(s, s0, dur, lambda e: (e["pid"], e["tid"]) == (s.device_pid, s.stream))
        if first is None:
            raise ValueError("no kernel launched in a step of the slow rank")
        at, call_ts = float(first["ts"]), float(s._runtime_by_corr()[int(first["args"]["correlation"])]["ts"])
        s.shift_from(at, extra)
        s.launch("cudaLaunchKernel", call_ts - 1.0, 0.5, "kernel", name, at, extra)
    for step in reversed(w.steps()):
        s0, dur = float(step["ts"]), float(step["dur"])
        extra = extra_us(dur, strength)
        k = _first_launched(w, s0, dur, lambda e: str(e["name"]).lower().startswith("nccl"))
        if k is None:
            raise ValueError("no communication kernel in a step of the waiting rank")
        end = float(k["ts"]) + float(k["dur"])
        w.shift_from(end, extra, skip=k)
        k["dur"] = float(k["dur"]) + extra
    s.renumber()
    s._fix_flows()
    w._fix_flows()
    return s.doc, w.doc


def _first_launched(t: Trace, s0: float, dur: float, which) -> Optional[dict]:
    """The first kernel (by start) launched in the step ``[s0, s0 + dur]`` for which ``which`` holds."""
    rt = t._runtime_by_corr()
    launched = {c for c, call in rt.items() if s0 <= call["ts"] < s0 + dur}
    ks = sorted((e for e in t.gpu_ops() if e["cat"] == "kernel" and which(e)
                 and int(e.get("args", {}).get("correlation", -1) or -1) in launched), key=lambda e: e["ts"])
    return ks[0] if ks else None


def as_rank(doc: dict, rank: int, world: int) -> dict:
    """``doc`` with ``distributedInfo`` saying ``rank`` of ``world`` (a copy)."""
    out = copy.deepcopy(doc)
    info = dict(out.get("distributedInfo") or {"backend": "nccl"})
    info.update(rank=rank, world_size=world)
    out["distributedInfo"] = info
    return out
