"""Build small Kineto (PyTorch profiler) Chrome traces with known ground truth.

Used by tests and ``bench/diagnosis.py`` (not shipped). Times are µs. The
layout follows what torch.profiler writes: CPU ops and ``ProfilerStep#N`` user
annotations on host threads, ``cuda_runtime`` launch calls linked to GPU
kernels/memcpys/memsets by ``correlation`` (plus ``ac2g`` flow events),
``distributedInfo`` and ``deviceProperties`` at the top level.

Two layers:

* :class:`TraceBuilder` places every event by hand (exact ground truth);
* :class:`Sim` plays a training step on a simple host/GPU timeline (the host
  launches, the GPU runs each stream in order, blocking calls wait for the
  GPU) and writes the events through a builder, for realistic scenarios
  (:func:`training_trace`) whose causes are injected by knobs.
"""
from __future__ import annotations

import contextlib
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

PID, TID = 1000, 1000
#: A Tensor Core GEMM kernel name as cuBLAS names it on H100 (bf16, wgmma).
TC_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
#: A float32 GEMM that does not use Tensor Cores.
FP32_GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
FOREACH_KERNEL = "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>>(int)"
FILL_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"


class TraceBuilder:
    """Accumulates events; :meth:`write` saves a ``.json`` or ``.json.gz`` file.

    Args:
        rank: ``distributedInfo.rank`` (None: no distributedInfo).
        world_size, backend: the rest of ``distributedInfo``.
        gpu_name, compute_major: ``deviceProperties`` (None: no deviceProperties).
        base_ts: absolute time of t = 0.
        header: more top-level keys (``cuda_runtime_version``...).
    """

    def __init__(self, rank: Optional[int] = None, world_size: int = 1, gpu_name: Optional[str] = "NVIDIA H100",
                 base_ts: float = 1_000_000.0, compute_major: int = 9, backend: str = "nccl",
                 header: Optional[Dict[str, Any]] = None) -> None:
        self.header = dict(header or {})
        self.events: List[Dict[str, Any]] = []
        self.rank = rank
        self.world_size = world_size
        self.gpu_name = gpu_name
        self.compute_major = compute_major
        self.backend = backend
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

    def cpu_op(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = TID,
               dims: Optional[list] = None, types: Optional[list] = None) -> None:
        """A host-side event (``cpu_op``, ``user_annotation``, ``cuda_runtime``
        or ``python_function``), optionally with recorded input shapes/types."""
        args: Dict[str, Any] = {"External id": self._next()}
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        self._x(cat, name, ts, dur, tid=tid, **args)

    def python(self, name: str, ts: float, dur: float, python_id: int, parent: Optional[int],
               tid: int = TID) -> None:
        """A ``python_function`` event as ``with_stack=True`` writes it (torch 2.13):
        ``args`` ``Python id``, ``Python parent id`` (None for a root) and ``Ev Idx``."""
        self._x("python_function", name, ts, dur, tid=tid,
                **{"Python parent id": parent, "Python id": python_id, "Ev Idx": self._next()})

    def runtime(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        """A ``cuda_runtime`` call that launches nothing (``cudaStreamSynchronize``...)."""
        self._x("cuda_runtime", name, ts, dur, tid=tid, correlation=self._next())

    def _next(self) -> int:
        self._corr += 1
        return self._corr

    def _launch(self, api: str, launch_ts: float, launch_dur: float, tid: int) -> int:
        corr = self._next()
        self._x("cuda_runtime", api, launch_ts, launch_dur, tid=tid, correlation=corr, **{"External id": corr})
        self.events.append({"ph": "s", "id": corr, "pid": PID, "tid": tid, "ts": self.base + launch_ts,
                            "cat": "ac2g", "name": "ac2g"})
        return corr

    def _flow_end(self, corr: int, ts: float, device: int, stream: int) -> None:
        self.events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": self.base + ts,
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def kernel(self, name: str, ts: float, dur: float, launch_ts: Optional[float] = None, launch_dur: float = 5.0,
               stream: int = 7, device: int = 0, tid: int = TID, api: str = "cudaLaunchKernel",
               sm: Optional[Tuple[float, float]] = None, extra: Optional[Dict[str, Any]] = None) -> None:
        """A GPU kernel on ``stream`` with its launch call (default: 10 µs
        before); ``sm``: ``(blocks per SM, est. achieved occupancy %)`` as
        Kineto writes them on CUDA kernels (with ``warps per SM`` = 4 × blocks);
        ``extra``: more args (``Process Group Name`` of a collective...)."""
        launch_ts = ts - 10 if launch_ts is None else launch_ts
        corr = self._launch(api, launch_ts, launch_dur, tid)
        args: Dict[str, Any] = {"External id": corr, "grid": [1, 1, 1], "block": [128, 1, 1]}
        if sm is not None:
            args.update({"blocks per SM": sm[0], "warps per SM": 4 * sm[0], "est. achieved occupancy %": sm[1]})
        args.update(extra or {})
        self._x("kernel", name, ts, dur, pid=device, tid=stream, device=device, stream=stream, correlation=corr,
                **args)
        self._flow_end(corr, ts, device, stream)

    def memory(self, ts: float, allocated: int, reserved: int, nbytes: int = 512, device_type: int = 1,
               device_id: int = 0) -> None:
        """A ``[memory]`` instant event as ``profile_memory=True`` writes it
        (``Device Type`` 1: CUDA, 0: CPU with ``Device Id`` -1)."""
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID,
                            "tid": TID, "ts": self.base + ts,
                            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                                     "Device Id": device_id, "Device Type": device_type, "Addr": 1 << 40}})

    def memcpy(self, direction: str, memory: str, ts: float, dur: float, nbytes: int,
               launch_ts: Optional[float] = None, stream: int = 7, device: int = 0, launch_dur: float = 5.0,
               tid: int = TID, api: str = "cudaMemcpyAsync") -> None:
        """A ``Memcpy HtoD (Pageable -> Device)``-style copy; ``memory`` is
        ``Pageable`` or ``Pinned`` (ignored for ``DtoD``)."""
        launch_ts = ts - 10 if launch_ts is None else launch_ts
        corr = self._launch(api, launch_ts, launch_dur, tid)
        src, dst = {"HtoD": (memory, "Device"), "DtoH": ("Device", memory), "DtoD": ("Device", "Device")}[direction]
        self._x("gpu_memcpy", f"Memcpy {direction} ({src} -> {dst})", ts, dur, pid=device, tid=stream,
                device=device, stream=stream, correlation=corr, bytes=nbytes,
                **{"External id": corr, "memory bandwidth (GB/s)": nbytes / dur / 1e3})
        self._flow_end(corr, ts, device, stream)

    def memset(self, ts: float, dur: float, nbytes: int, launch_ts: Optional[float] = None, stream: int = 7,
               device: int = 0, tid: int = TID) -> None:
        """A ``Memset (Device)`` with its ``cudaMemsetAsync``."""
        launch_ts = ts - 10 if launch_ts is None else launch_ts
        corr = self._launch("cudaMemsetAsync", launch_ts, 5.0, tid)
        self._x("gpu_memset", "Memset (Device)", ts, dur, pid=device, tid=stream, device=device, stream=stream,
                correlation=corr, bytes=nbytes, **{"External id": corr})
        self._flow_end(corr, ts, device, stream)

    def document(self) -> Dict[str, Any]:
        """The trace as a dict."""
        doc: Dict[str, Any] = {"schemaVersion": 1}
        if self.gpu_name is not None:
            doc["deviceProperties"] = [{"id": 0, "name": self.gpu_name, "totalGlobalMem": 85_000_000_000,
                                        "computeMajor": self.compute_major, "computeMinor": 0, "numSms": 132}]
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": self.backend, "rank": self.rank, "world_size": self.world_size}
        doc.update(self.header)
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


# --------------------------------------------------------------------------- simulator
class Sim:
    """A host thread and GPU streams on one timeline, writing through a :class:`TraceBuilder`.

    The host clock ``t`` advances with every op; a launch call takes
    ``launch_us``; the GPU runs each stream's work in launch order, starting
    ``latency_us`` after the launch call at the earliest. Blocking calls
    (``cudaStreamSynchronize``, pageable copies) return when the GPU is done.

    Args:
        b: the builder to write into.
        launch_us: duration of each launch call (µs).
        latency_us: launch-to-start latency on an idle GPU (µs).
        h2d_gbps: pinned host-to-device bandwidth (pageable copies run at half).
    """

    def __init__(self, b: TraceBuilder, launch_us: float = 6.0, latency_us: float = 5.0, h2d_gbps: float = 20.0,
                 tid: int = TID) -> None:
        self.b = b
        self.t = 0.0
        self.launch_us = launch_us
        self.latency_us = latency_us
        self.h2d_gbps = h2d_gbps
        self.tid = tid
        self.free: Dict[int, float] = defaultdict(float)
        self.py_stack: List[int] = []
        self.py_ids = 0

    @contextlib.contextmanager
    def frame(self, name: str, start: Optional[float] = None) -> Iterator[None]:
        """A Python frame (``python_function``) around the ``with`` block,
        nested in the frames open around it (``start``: an earlier start)."""
        self.py_ids += 1
        me, parent = self.py_ids, (self.py_stack[-1] if self.py_stack else None)
        begin = self.t if start is None else start
        self.py_stack.append(me)
        try:
            yield
        finally:
            self.py_stack.pop()
            self.b.python(name, begin, max(self.t - begin, 0.5), me, parent, tid=self.tid)

    # host side
    def idle(self, us: float) -> None:
        """Host time in Python that no profiled op covers."""
        self.t += us

    @contextlib.contextmanager
    def region(self, name: str, cat: str = "cpu_op", dims: Optional[list] = None,
               types: Optional[list] = None) -> Iterator[None]:
        """An op or annotation around whatever runs inside the ``with`` block."""
        start = self.t
        yield
        self.b.cpu_op(name, start, max(self.t - start, 1.0), cat=cat, tid=self.tid, dims=dims, types=types)

    def cpu(self, name: str, us: float, cat: str = "cpu_op") -> None:
        """A host op of ``us`` with no GPU work."""
        with self.region(name, cat):
            self.t += us

    def launch(self, name: str, dur: float, stream: int = 7, launch_us: Optional[float] = None,
               after: Sequence[int] = ()) -> float:
        """Launch a kernel of ``dur`` µs on ``stream`` (after the work queued on
        the ``after`` streams, as ``cudaStreamWaitEvent`` orders it); returns its end."""
        call = self.t
        lu = self.launch_us if launch_us is None else launch_us
        start = max([call + lu + self.latency_us, self.free[stream]] + [self.free[s] for s in after])
        self.b.kernel(name, start, dur, launch_ts=call, launch_dur=lu, stream=stream, tid=self.tid)
        self.free[stream] = start + dur
        self.t = call + lu
        return start + dur

    def op(self, name: str, kernels: Sequence[Tuple[str, float]], host_us: float = 10.0, stream: int = 7,
           dims: Optional[list] = None, types: Optional[list] = None) -> None:
        """A CPU op spending ``host_us`` of framework time and launching ``kernels``."""
        with self.region(name, dims=dims, types=types):
            self.t += host_us / 2
            for k, d in kernels:
                self.launch(k, d, stream)
            self.t += host_us / 2

    def gpu_done(self) -> float:
        """When all queued GPU work ends."""
        return max(self.free.values(), default=0.0)

    def synchronize(self, name: str = "cudaStreamSynchronize") -> None:
        """A synchronizing runtime call: returns when the GPU is done."""
        start = self.t
        end = max(start + 2.0, self.gpu_done() + 2.0)
        self.b.runtime(name, start, end - start, tid=self.tid)
        self.t = end

    def copy(self, direction: str, nbytes: int, pinned: bool, non_blocking: bool, stream: int = 7) -> None:
        """``x.to(device)`` (HtoD) or ``x.cpu()`` (DtoH): ``aten::to`` >
        ``aten::_to_copy`` > ``aten::copy_`` with a ``cudaMemcpyAsync``; a
        pageable copy blocks its call until the copy ends, ``non_blocking=False``
        adds a ``cudaStreamSynchronize``."""
        gbps = self.h2d_gbps if pinned else self.h2d_gbps / 2
        dur = nbytes / gbps / 1e3
        with self.region("aten::to"), self.region("aten::_to_copy"), self.region("aten::copy_"):
            self.t += 5
            call = self.t
            start = max(call + self.latency_us, self.free[stream])
            end_call = start + dur + 2 if not pinned else call + self.launch_us
            self.b.memcpy(direction, "Pinned" if pinned else "Pageable", start, dur, nbytes, launch_ts=call,
                          launch_dur=end_call - call, stream=stream, tid=self.tid)
            self.free[stream] = start + dur
            self.t = end_call
            if not non_blocking:
                self.synchronize()
            self.t += 3

    def item(self) -> None:
        """``loss.item()``: a 4-byte DtoH copy and a stream synchronization."""
        with self.region("aten::item"), self.region("aten::_local_scalar_dense"):
            self.t += 3
            call = self.t
            start = max(call + self.latency_us, self.gpu_done())
            self.b.memcpy("DtoH", "Pageable", start, 2.0, 4, launch_ts=call, launch_dur=self.launch_us, tid=self.tid)
            self.free[7] = max(self.free[7], start + 2.0)
            self.t = call + self.launch_us
            self.synchronize()


def op_loop_trace(host_us: float, kernel_us: float, steps: int = 5, ops: int = 30) -> TraceBuilder:
    """Per step, ``ops`` host ops of ``host_us`` each launching a ``kernel_us``
    kernel (6 µs launches): host-bound where ``host_us`` exceeds the kernel."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    for s in range(1, steps + 1):
        t0 = sim.t
        for _ in range(ops):
            sim.op("aten::add", [(ELEMENTWISE, kernel_us)], host_us=host_us)
        sim.idle(10)
        b.step(s, t0, sim.t - t0)
    return b


def training_trace(rank: Optional[int] = 0, world_size: int = 1, steps: int = 8, *,
                   layers: int = 6, gemm_us: float = 100.0, tensor_cores: bool = True, host_op_us: float = 30.0,
                   dataloader_us: float = 15.0, workers: bool = True,
                   batch_bytes: int = 1_000_000, pinned: bool = True, non_blocking: bool = True,
                   item_every_step: bool = False, item_per_layer: bool = False, params: int = 24, optimizer: str = "foreach",
                   set_to_none: bool = True, allreduce_us: float = 0.0, comm_wait_us: float = 0.0,
                   overlap_comm: bool = True, extra_compute_us: float = 0.0, slow_steps: Sequence[int] = (),
                   slow_step_us: float = 0.0, slow_launch_us: float = 0.0, half_dims: Optional[list] = None,
                   data_parallel: bool = False, backend: str = "nccl", py_overhead_us: float = 20.0,
                   gpu_name: str = "NVIDIA H100", compute_major: int = 9,
                   with_stack: Optional[str] = None) -> TraceBuilder:
    """A data-parallel training loop played on :class:`Sim`, one rank.

    Per step: the DataLoader (``dataloader_us`` on the training thread: in
    the main process, or waiting for ``workers``), the batch copy
    (``batch_bytes``; ``pinned``, ``non_blocking``), forward and backward
    (``layers`` × linear GEMMs of ``gemm_us`` plus an elementwise kernel;
    ``tensor_cores`` picks the GEMM kernel name), an all-reduce of
    ``allreduce_us`` (+ ``comm_wait_us`` waiting for other ranks) when > 0,
    launched when its gradient bucket is ready: mid-backward with
    ``overlap_comm``, else after the last layer,
    zero_grad and the optimizer step (``foreach``, ``fused`` or ``single``
    over ``params`` tensors), and ``loss.item()`` when ``item_every_step``
    (after every forward layer when ``item_per_layer``).
    Injections: ``extra_compute_us`` (a GEMM of that length in this rank's forward),
    ``slow_steps``/``slow_step_us`` (host stall in those steps),
    ``slow_launch_us`` (every 10th launch call takes that long),
    ``half_dims`` (bf16 linears with these ``Input Dims``), ``data_parallel``
    (wrap forward in ``DataParallel.forward``), ``backend``.

    ``with_stack`` (a script name, e.g. ``train.py``) adds ``python_function``
    events shaped like those torch 2.13 records with ``with_stack=True``
    (see ``tests/test_source_lines.py``): ``SCRIPT(STACK_LINES["module"]): <module>``
    and ``SCRIPT(STACK_LINES["main"]): main`` running when tracing starts (their
    lines are those being executed then), the DataLoader's
    ``torch/utils/data/dataloader.py(720): __next__`` with the user's
    ``SCRIPT(STACK_LINES["getitem"]): __getitem__`` entered inside it,
    ``<built-in method item of Tensor object at 0x..>`` around ``loss.item()``
    and ``torch/optim/optimizer.py(509): wrapper`` around the optimizer step.
    """
    b = TraceBuilder(rank=rank, world_size=world_size, backend=backend, gpu_name=gpu_name,
                     compute_major=compute_major)
    sim = Sim(b)
    gemm = TC_GEMM if tensor_cores else FP32_GEMM
    launches = [0]
    base_launch = sim.launch

    def launch(name, dur, stream=7, launch_us=None, after=()):
        launches[0] += 1
        if slow_launch_us and launches[0] % 10 == 0 and launch_us is None:
            launch_us = slow_launch_us
        return base_launch(name, dur, stream, launch_us, after)

    sim.launch = launch  # type: ignore[method-assign]
    dims = half_dims or [[64, 1024], [1024, 1024], [1024]]
    types = ["c10::BFloat16"] * 3 if half_dims else ["float", "float", "float"]
    stack = contextlib.ExitStack()
    frame = (lambda name: sim.frame(name)) if with_stack else (lambda name: contextlib.nullcontext())
    if with_stack:
        stack.enter_context(sim.frame(f"{with_stack}({STACK_LINES['module']}): <module>"))
        sim.t += 0.6
        stack.enter_context(sim.frame(f"{with_stack}({STACK_LINES['main']}): main"))
        sim.t += 0.6
    with stack:
        _steps(sim, b, steps, frame, with_stack, locals())
    return b


#: Lines of the Python frames ``training_trace(with_stack=...)`` records.
STACK_LINES = {"module": 20, "main": 15, "getitem": 6}


def _steps(sim, b, steps, frame, with_stack, o) -> None:
    """The steps of :func:`training_trace` (``o``: its arguments and locals)."""
    (layers, gemm_us, host_op_us, dataloader_us, workers, batch_bytes, pinned, non_blocking, item_every_step,
     item_per_layer, params, optimizer, set_to_none, allreduce_us, comm_wait_us, overlap_comm, extra_compute_us,
     slow_steps, slow_step_us, data_parallel, py_overhead_us, gemm, dims, types) = (
        o[k] for k in ("layers", "gemm_us", "host_op_us", "dataloader_us", "workers", "batch_bytes", "pinned",
                       "non_blocking", "item_every_step", "item_per_layer", "params", "optimizer", "set_to_none",
                       "allreduce_us", "comm_wait_us", "overlap_comm", "extra_compute_us", "slow_steps",
                       "slow_step_us", "data_parallel", "py_overhead_us", "gemm", "dims", "types"))
    for s in range(1, steps + 1):
        step_start = sim.t
        name = "_MultiProcessingDataLoaderIter" if workers else "_SingleProcessDataLoaderIter"
        if not with_stack:
            sim.cpu(f"enumerate(DataLoader)#{name}.__next__", dataloader_us, cat="user_annotation")
        else:  # 10 % in the DataLoader's own code, 90 % in the Dataset's __getitem__
            with frame("torch/utils/data/dataloader.py(720): __next__"), \
                    sim.region(f"enumerate(DataLoader)#{name}.__next__", cat="user_annotation"):
                sim.t += dataloader_us * 0.05
                with frame(f"{with_stack}({STACK_LINES['getitem']}): __getitem__"):
                    sim.t += dataloader_us * 0.9
                sim.t += dataloader_us * 0.05
        with frame("<built-in method to of Tensor object at 0x7f6011216cf0>"):
            sim.copy("HtoD", batch_bytes, pinned, non_blocking)
        fwd = sim.region("DataParallel.forward", cat="user_annotation") if data_parallel else contextlib.nullcontext()
        with fwd, sim.region("## forward ##", cat="user_annotation"):
            for _ in range(layers):
                sim.op("aten::linear", [(gemm, gemm_us)], host_op_us, dims=dims, types=types)
                sim.op("aten::relu", [(ELEMENTWISE, 20.0)], host_op_us / 2)
                if item_per_layer:
                    with frame("<built-in method item of Tensor object at 0x7f60110a1590>"):
                        sim.item()
            if extra_compute_us:
                sim.op("aten::mm", [(gemm, extra_compute_us)], host_op_us)
        with sim.region("## backward ##", cat="user_annotation"):
            for layer in range(layers):
                sim.op("aten::mm", [(gemm, gemm_us)], host_op_us)
                sim.op("aten::mm", [(gemm, gemm_us)], host_op_us)
                sim.op("aten::threshold_backward", [(ELEMENTWISE, 20.0)], host_op_us / 2)
                # DDP all-reduces a gradient bucket once it is ready (the comm stream waits for
                # the compute stream); with overlap, mid-backward, else after the last layer
                if allreduce_us and layer == (layers // 2 - 1 if overlap_comm else layers - 1):
                    with sim.region("record_param_comms"), sim.region("nccl:all_reduce"):
                        sim.t += 5
                        sim.launch(NCCL_ALLREDUCE, allreduce_us + comm_wait_us, stream=20, after=(7,))
        if allreduce_us:
            sim.free[7] = max(sim.free[7], sim.free[20])  # the optimizer waits for the gradients
        with sim.region("Optimizer.zero_grad#AdamW.zero_grad", cat="user_annotation"):
            sim.t += 5
            if not set_to_none:
                for _ in range(params):
                    sim.op("aten::zero_", [(FILL_KERNEL, 4.0)], 8.0)
        with frame("torch/optim/optimizer.py(509): wrapper"), \
                sim.region("Optimizer.step#AdamW.step", cat="user_annotation"):
            if optimizer == "single":
                for _ in range(params):
                    for op in ("aten::mul_", "aten::add_", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_"):
                        sim.op(op, [(ELEMENTWISE, 3.0)], 12.0)
            elif optimizer == "fused":
                sim.op("aten::_fused_adamw_", [(FOREACH_KERNEL, 40.0)], 20.0)
            else:
                for op in ("aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_addcdiv_"):
                    sim.op(op, [(FOREACH_KERNEL, 15.0)], 15.0)
        if item_every_step:
            with frame("<built-in method item of Tensor object at 0x7f60110a1590>"):
                sim.item()
        if s in slow_steps:
            sim.cpu("aten::save", slow_step_us)
        sim.idle(py_overhead_us)
        # the host may run ahead of the GPU; a ProfilerStep ends where the next begins
        b.step(s, step_start, sim.t - step_start)
