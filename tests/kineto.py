"""Build small Kineto (PyTorch profiler) Chrome traces with known ground truth.

Used by tests only (not shipped). Times are µs. The layout follows what
torch.profiler writes: CPU ops and ``ProfilerStep#N`` user annotations on the
host thread, ``cuda_runtime`` launch calls linked to GPU kernels/memcpys by
``correlation`` (plus ``ac2g`` flow events), ``distributedInfo`` and
``deviceProperties`` at the top level.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

PID, TID = 1000, 1000


class TraceBuilder:
    """Accumulates events; :meth:`write` saves a ``.json`` or ``.json.gz`` file."""

    def __init__(self, rank: Optional[int] = None, world_size: int = 1, gpu_name: str = "NVIDIA H100",
                 base_ts: float = 1_000_000.0) -> None:
        self.events: List[Dict[str, Any]] = []
        self.rank = rank
        self.world_size = world_size
        self.gpu_name = gpu_name
        self.base = base_ts
        self._corr = 100

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: Any = PID, tid: Any = TID, **args: Any) -> Dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self.base + ts, "dur": dur,
              "args": args}
        self.events.append(ev)
        return ev

    def step(self, number: int, ts: float, dur: float) -> None:
        """A ``ProfilerStep#number`` annotation on the host thread."""
        self._x("user_annotation", f"ProfilerStep#{number}", ts, dur, **{"External id": self._next()})

    def cpu_op(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        """A host-side event (``cpu_op``, ``user_annotation`` or ``cuda_runtime``)."""
        self._x(cat, name, ts, dur, **{"External id": self._next()})

    def _next(self) -> int:
        self._corr += 1
        return self._corr

    def _launch(self, api: str, launch_ts: float, launch_dur: float) -> int:
        corr = self._next()
        self._x("cuda_runtime", api, launch_ts, launch_dur, correlation=corr, **{"External id": corr})
        self.events.append({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": self.base + launch_ts,
                            "cat": "ac2g", "name": "ac2g"})
        return corr

    def kernel(self, name: str, ts: float, dur: float, launch_ts: Optional[float] = None, launch_dur: float = 5.0,
               stream: int = 7, device: int = 0) -> None:
        """A GPU kernel on ``stream`` with its ``cudaLaunchKernel`` call (default: 10 µs before)."""
        launch_ts = ts - 10 if launch_ts is None else launch_ts
        corr = self._launch("cudaLaunchKernel", launch_ts, launch_dur)
        self._x("kernel", name, ts, dur, pid=device, tid=stream, device=device, stream=stream, correlation=corr,
                **{"External id": corr, "grid": [1, 1, 1], "block": [128, 1, 1]})
        self.events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": self.base + ts,
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def memcpy(self, direction: str, memory: str, ts: float, dur: float, nbytes: int,
               launch_ts: Optional[float] = None, stream: int = 7, device: int = 0) -> None:
        """A ``Memcpy HtoD (Pageable -> Device)``-style copy; ``memory`` is
        ``Pageable`` or ``Pinned``."""
        launch_ts = ts - 10 if launch_ts is None else launch_ts
        corr = self._launch("cudaMemcpyAsync", launch_ts, 5.0)
        src, dst = {"HtoD": (memory, "Device"), "DtoH": ("Device", memory), "DtoD": ("Device", "Device")}[direction]
        self._x("gpu_memcpy", f"Memcpy {direction} ({src} -> {dst})", ts, dur, pid=device, tid=stream,
                device=device, stream=stream, correlation=corr, bytes=nbytes,
                **{"External id": corr, "memory bandwidth (GB/s)": nbytes / dur / 1e3})

    def document(self) -> Dict[str, Any]:
        """The trace as a dict."""
        doc: Dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": self.gpu_name, "totalGlobalMem": 85_000_000_000,
                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        }
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        meta = [{"name": "process_name", "ph": "M", "ts": self.base, "pid": PID, "tid": 0, "args": {"name": "python"}}]
        doc["traceEvents"] = meta + self.events
        doc["traceName"] = "built"
        doc["displayTimeUnit"] = "ms"
        return doc

    def write(self, path: Path) -> Path:
        """Save as JSON (gzipped when ``path`` ends in ``.gz``)."""
        path = Path(path)
        data = json.dumps(self.document()).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def simple_gpu_trace(kernel_name: str = "void gemm_kernel<float, 128>(float*)", rank: Optional[int] = 0,
                     steps: int = 3, step_us: float = 1000.0) -> TraceBuilder:
    """``steps`` steps of ``step_us`` each; per step one kernel of 400 µs, a
    DataLoader annotation of 100 µs, one pageable HtoD copy of 50 µs (1 MB)
    and one ``cudaStreamSynchronize`` of 20 µs."""
    b = TraceBuilder(rank=rank)
    for i in range(steps):
        t0 = i * step_us
        b.step(i + 1, t0, step_us)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 5, 100, cat="user_annotation")
        b.cpu_op("aten::linear", t0 + 120, 60)
        b.memcpy("HtoD", "Pageable", t0 + 200, 50, 1_000_000)
        b.kernel(kernel_name, t0 + 300, 400)
        b.cpu_op("cudaStreamSynchronize", t0 + 800, 20, cat="cuda_runtime")
    return b
