"""Fixes from the fourth and fifth readings of field traces (issue 51): what a
16-bit move can remove from a GEMM, and from a matrix-vector product."""
import gzip
import json

import numpy as np
import pytest

from hta_report.analysis.replay.edits import GEMV_SPEEDUP, MATMUL_FIXED_US, matmul_after_16_bit
from hta_report.api import analyze
from kineto import FP32_GEMM, Sim, TraceBuilder

GEMV = ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(...)")


def test_only_the_part_beyond_a_kernels_fixed_cost_scales():
    out = matmul_after_16_bit(np.array([300.0, 6.0, 1.5]), 16.0)
    assert out[0] == pytest.approx(MATMUL_FIXED_US + (300.0 - MATMUL_FIXED_US) / 16)
    assert out[1] == pytest.approx(MATMUL_FIXED_US + 4.0 / 16)
    assert out[2] == 1.5  # shorter than the fixed cost: unchanged


def _run(tmp_path, kernel: str, name: "str | None" = "NVIDIA A100-SXM4-80GB", op: str = "aten::linear"):
    """Six steps of eight ``op`` calls, each launching a 300 µs ``kernel``
    (``name``: the deviceProperties' device, None for none), analyzed."""
    b = TraceBuilder(rank=0, gpu_name=name, compute_major=8)
    sim = Sim(b)
    for s in range(1, 7):
        start = sim.t
        for _ in range(8):
            sim.op(op, [(kernel, 300.0)], host_us=10.0)
        sim.synchronize()
        sim.idle(20.0)
        b.step(s, start, sim.t - start)
    path = tmp_path / "run" / "rank-0.json.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(json.dumps(b.document()).encode()))
    return analyze(path.parent)


@pytest.mark.parametrize("kernel, most", [(GEMV, GEMV_SPEEDUP), (FP32_GEMM, 16.0)], ids=["gemv", "gemm"])
def test_a_matrix_vector_product_gains_only_its_halved_bytes(tmp_path, kernel, most):
    """Eight 300 µs fp32 kernels a step on an A100 (16x Tensor Core peak over
    fp32): as GEMMs they may shrink to ~1/16; as matrix-vector products
    (memory-bound) to 1/2 at most, so the step saves under half of them."""
    r = _run(tmp_path, kernel)
    f = next(f for f in r.findings if f.id == "tensor-cores-unused")
    w = f.whatif
    assert w is not None
    saved = w.step_us_before - w.step_us_after
    kernels = 8 * 300.0
    if most == GEMV_SPEEDUP:
        assert saved <= kernels * (1 - 1 / GEMV_SPEEDUP) + 1.0
    else:
        assert saved > kernels * (1 - 1 / GEMV_SPEEDUP)


def test_late_starts_on_an_idle_gpu_withhold_every_prediction(tmp_path):
    """Nine starts 2 ms after their launch on an idle GPU, 60 % of the
    window: the replay would move those delays with the launches, so no
    what-if is made and the note says why, in words, in every finding's
    place; short delays (200 µs) keep the predictions."""
    from hta_report.render.replay_notes import replay_note
    from hta_report.replay_terms import NoteCode
    from test_field_round3 import late_start_trace

    late = tmp_path / "late"
    late.mkdir()
    late_start_trace(2000.0).write(late / "rank-0.json")
    r = analyze(late)
    rp = r.ranks[0].replay
    assert rp.whatifs == [] and rp.notes[-1].code == NoteCode.LATE_STARTS
    # the replay's events: the analyzed steps (the first is a warm-up): 2 of 3, 3 late starts each
    assert rp.notes[-1].values["starts"] == 6 and rp.notes[-1].values["late_pct"] > 10
    assert "does not show" in replay_note(rp)
    assert all(f.whatif is None for f in r.findings)
    short = tmp_path / "short"
    short.mkdir()
    late_start_trace(200.0).write(short / "rank-0.json")
    assert analyze(short).ranks[0].replay.whatifs


def test_host_bound_on_cpu_random_tensors_says_to_draw_them_on_the_gpu(tmp_path):
    """Each step draws its input on the CPU (aten::normal_, 3 ms) and copies it
    to the GPU before a 1 ms kernel: host-bound, and the fix names the op's
    remedy (draw on the device) rather than moving preprocessing to workers."""
    b = TraceBuilder(rank=0, gpu_name="Tesla T4", compute_major=7)
    sim = Sim(b)
    for s in range(1, 7):
        start = sim.t
        with sim.region("aten::randn"):
            sim.cpu("aten::normal_", 3000.0)
        sim.copy("HtoD", 4 << 20, pinned=False, non_blocking=False)
        sim.op("aten::mm", [(FP32_GEMM, 1000.0)], host_us=10.0)
        sim.idle(20.0)
        b.step(s, start, sim.t - start)
    path = tmp_path / "run" / "rank-0.json.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(json.dumps(b.document()).encode()))
    r = analyze(path.parent)
    f = next(f for f in r.findings if f.id == "host-bound")
    assert 'device="cuda"' in f.fix and "aten::normal_" in f.fix


def test_random_draws_that_launch_a_kernel_are_not_called_cpu_draws(tmp_path):
    """The same host time in aten::normal_, but the op launches its kernel (the
    tensor is drawn on the GPU, as on an MI350X run where the fix told the user
    to draw on the GPU): the host-bound fix must not name CPU random draws."""
    b = TraceBuilder(rank=0, gpu_name="Tesla T4", compute_major=7)
    sim = Sim(b)
    for s in range(1, 7):
        start = sim.t
        with sim.region("aten::randn"):
            sim.op("aten::normal_", [("void at::native::(anonymous namespace)::distribution_elementwise_grid_"
                                      "stride_kernel<float, 4>(int, at::PhiloxCudaState)", 20.0)], host_us=3000.0)
        sim.op("aten::mm", [(FP32_GEMM, 1000.0)], host_us=10.0)
        sim.idle(20.0)
        b.step(s, start, sim.t - start)
    path = tmp_path / "run" / "rank-0.json"
    path.parent.mkdir(parents=True)
    b.write(path)
    r = analyze(path.parent)
    assert r.ranks[0].cpu.host_random_us == 0.0
    f = next(f for f in r.findings if f.id == "host-bound")
    assert 'device="cuda"' not in f.fix and "draws random tensors" not in f.fix


def _small_grid_run(tmp_path, beside: bool):
    """Per step a 400 µs GEMM with 0.5 blocks per SM on stream 7; with
    ``beside``, another stream's kernel runs over the whole of it."""
    b = TraceBuilder(rank=0)
    for i in range(5):
        t = i * 1000.0
        b.step(i + 1, t, 1000.0)
        b.kernel(FP32_GEMM, t + 100, 400.0, sm=(0.5, 25.0))
        if beside:
            b.kernel("void side_stream_kernel<float>(float*)", t + 90, 420.0, stream=20, sm=(2.0, 50.0))
    d = tmp_path / ("beside" if beside else "alone")
    d.mkdir()
    b.write(d / "rank-0.json")
    return analyze(d).ranks[0].occupancy


def test_a_small_grid_leaves_sms_idle_only_while_no_other_stream_runs(tmp_path):
    alone = _small_grid_run(tmp_path, beside=False)
    assert alone.idle_sm_us_per_step == pytest.approx(0.5 * 400.0)
    beside = _small_grid_run(tmp_path, beside=True)
    assert beside.idle_sm_us_per_step == pytest.approx(0.0)


def _two_ranks(tmp_path, backend: str, nccl_kernel: bool):
    from kineto import NCCL_ALLREDUCE
    d = tmp_path / f"{backend}-{nccl_kernel}"
    d.mkdir()
    for rank in range(2):
        b = TraceBuilder(rank=rank, world_size=2, backend=backend)
        for i in range(4):
            t = i * 1000.0
            b.step(i + 1, t, 1000.0)
            b.kernel(FP32_GEMM, t + 100, 300.0)
            if nccl_kernel:  # c10d's host op around the launch, as torch records it
                b.cpu_op("c10d::allreduce_", t + 420, 40.0)
                b.kernel(NCCL_ALLREDUCE, t + 450, 200.0, launch_ts=t + 430, stream=20)
            else:
                b.cpu_op("gloo:all_reduce", t + 450, 300.0)
        b.write(d / f"rank-{rank}.json")
    return analyze(d)


def test_an_unnamed_backend_running_nccl_kernels_is_nccl(tmp_path):
    """torch 2.x writes backend 'undefined' for init_process_group() without
    a backend, which runs NCCL for CUDA tensors: NCCL kernels in the trace
    mean NCCL, whatever distributedInfo says; gloo ops on a GPU run do not."""
    r = _two_ranks(tmp_path, "undefined", nccl_kernel=True)
    assert not any(f.id == "non-nccl-backend" for f in r.findings)
    r = _two_ranks(tmp_path, "gloo", nccl_kernel=False)
    assert any(f.id == "non-nccl-backend" for f in r.findings)


ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_a_stalled_collective_does_not_choose_the_kind_of_the_fix(tmp_path):
    """Tensor-parallel inference (an all-reduce after each layer) with one
    all-gather a step, one of which stalls for 20 ms (a cold pass, a late
    peer): the stall is left out of the finding, so the fix is that of the
    tensor-parallel collectives, not of the stalled all-gather's kind."""
    from kineto import NCCL_ALLREDUCE
    b = TraceBuilder(rank=0, world_size=2)
    sim = Sim(b)
    for s in range(1, 8):
        start = sim.t
        for _ in range(6):
            sim.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
            with sim.region("nccl:all_reduce"):
                sim.launch(NCCL_ALLREDUCE, 150.0, stream=7)
        with sim.region("nccl:all_gather"):
            sim.launch(ALLGATHER, 20_000.0 if s == 4 else 100.0, stream=7)
        sim.synchronize()
        sim.idle(20.0)
        b.step(s, start, sim.t - start)
    d = tmp_path / "tp"
    d.mkdir()
    b.write(d / "rank-0.json")
    r = analyze(d)
    assert r.ranks[0].comm.stalls == 1
    f = next(f for f in r.findings if f.id == "exposed-communication")
    assert "tensor-parallel" in f.title.lower()


def test_collectives_that_take_the_step_are_communication_bound_not_overlap(tmp_path):
    """Two ranks whose all-reduce runs 800 µs of each 1 ms step: with compute
    perfectly overlapped the step still lasts 800 µs, so the finding says the
    collectives are the bound and gives no overlap prediction."""
    from kineto import NCCL_ALLREDUCE
    d = tmp_path / "bound"
    d.mkdir()
    for rank in range(2):
        b = TraceBuilder(rank=rank, world_size=2)
        for i in range(5):
            t = i * 1000.0
            b.step(i + 1, t, 1000.0)
            b.kernel(FP32_GEMM, t + 20, 150.0)
            b.cpu_op("c10d::allreduce_", t + 160, 20.0)
            b.kernel(NCCL_ALLREDUCE, t + 180, 800.0, launch_ts=t + 165, stream=20)
        b.write(d / f"rank-{rank}.json")
    r = analyze(d)
    f = next(f for f in r.findings if f.id == "exposed-communication")
    assert f.title.startswith("Communication-bound") and f.whatif is None
    assert "nccl-tests" in f.fix


def _read_loop(b: TraceBuilder, t: float, n: int) -> None:
    """``[x[i].cpu() for i in range(n)]`` on a CUDA tensor: per element a
    select and a ``aten::to`` holding a 4-byte pageable copy to the host and
    its stream synchronize, no kernel."""
    for k in range(n):
        s = t + 10 + 40 * k
        b.cpu_op("aten::select", s, 4)
        b.cpu_op("aten::to", s + 5, 30)
        b.cpu_op("aten::_to_copy", s + 6, 28)
        b.memcpy("DtoH", "Pageable", s + 18, 1.0, 4, launch_ts=s + 8)
        b.runtime("cudaStreamSynchronize", s + 20, 10)


def test_a_loop_of_per_element_reads_is_a_removable_sync_not_launch_overhead(tmp_path):
    """4,096 per-element reads to the host and no kernel: the reads are
    synchronizations a single read of the whole tensor removes (kind
    ``element``), and the finding is sync-in-step with the vectorizing fix,
    not launch-bound ("0 kernels") or "the read of the model's output"."""
    b = TraceBuilder(rank=0)
    step = 10_000.0
    for i in range(3):
        b.step(i + 1, i * step, step)
        _read_loop(b, i * step, n=240)
    d = tmp_path / "reads"
    d.mkdir()
    b.write(d / "rank-0.json")
    r = analyze(d)
    kinds = {k.kind: k for k in r.ranks[0].cpu.sync_kinds}
    assert "element" in kinds and kinds["element"].removable
    assert r.findings[0].id == "sync-in-step"
    assert "one element at a time" in r.findings[0].fix


def test_without_steps_the_loop_thread_is_the_one_with_the_dataloader(tmp_path):
    """No ProfilerStep; the main thread iterates the DataLoader (3 ms a
    batch) and launches the forward, autograd's thread launches more calls
    (the backward): the replay's step thread is the DataLoader's, so hiding
    the DataLoader (workers) is predicted to save most of its time."""
    b = TraceBuilder(rank=0)
    main, autograd = 100, 200
    t = 0.0
    for i in range(6):
        b.cpu_op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t, 3000.0, cat="user_annotation",
                 tid=main)
        t += 3000.0
        for k in range(3):
            b.kernel(FP32_GEMM, t + 20 + 100 * k, 90.0, launch_ts=t + 10 + 100 * k, tid=main)
        t += 300.0
        for k in range(6):
            b.kernel(FP32_GEMM, t + 20 + 100 * k, 90.0, launch_ts=t + 10 + 100 * k, tid=autograd)
        t += 700.0
    d = tmp_path / "nosteps"
    d.mkdir()
    b.write(d / "rank-0.json")
    r = analyze(d)
    f = next(f for f in r.findings if f.id == "dataloader-bound")
    assert f.whatif is not None
    saved = f.whatif.step_us_before - f.whatif.step_us_after
    assert saved > 0.5 * 6 * 3000.0


def test_a_scalar_read_with_no_runtime_call_inside_is_not_a_sync():
    """``aten::item`` of a CPU tensor calls no runtime function; a GPU read
    holds its copy and synchronize. On a trace that records runtime calls,
    only the second is a synchronization; on a rank that launches nothing,
    a synchronize waits for nothing queued."""
    import pandas as pd
    from hta_report.analysis.cpu_side import is_sync
    cpu = pd.DataFrame({
        "s_name": ["cudaDeviceSynchronize", "cudaLaunchKernel", "aten::item", "aten::_local_scalar_dense",
                   "aten::item", "aten::_local_scalar_dense", "cudaMemcpyAsync", "cudaStreamSynchronize"],
        "s_cat": ["cuda_runtime", "cuda_runtime", "cpu_op", "cpu_op", "cpu_op", "cpu_op", "cuda_runtime",
                  "cuda_runtime"],
        "ts": [0.0, 100.0, 200.0, 201.0, 300.0, 301.0, 302.0, 305.0],
        "end": [50.0, 105.0, 210.0, 209.0, 320.0, 319.0, 304.0, 318.0],
        "thread": [1] * 8})
    # the first synchronize may wait for work queued before the profiler started: it stays one
    assert is_sync(cpu).tolist() == [True, False, False, False, True, True, False, True]
    # a rank that launches nothing (a model run on the CPU): no call waits for GPU work
    cpu_only = cpu[~cpu["s_name"].isin(["cudaLaunchKernel", "cudaMemcpyAsync"])]
    assert not is_sync(cpu_only).any()


def test_a_scalar_read_waits_for_the_device_only_through_a_copy_or_synchronize():
    """Where runtime calls are recorded, a read holding only a device query
    (``cudaGetDevice``) read no device tensor; one holding its copy and
    synchronize did. Where none is recorded (a CPU-only run, or a device the
    profile missed), a read shorter than any device read
    (``DEVICE_READ_MIN_US``: an optimizer's CPU step counter, 1.3 µs) waits
    for nothing, a longer one may have waited."""
    import pandas as pd
    from hta_report.analysis.cpu_side import DEVICE_READ_MIN_US, is_sync
    cpu = pd.DataFrame({
        "s_name": ["cudaLaunchKernel", "aten::item", "cudaGetDevice", "aten::item", "cuMemcpyDtoHAsync_v2",
                   "cuStreamSynchronize"],
        "s_cat": ["cuda_runtime", "cpu_op", "cuda_runtime", "cpu_op", "cuda_driver", "cuda_driver"],
        "ts": [0.0, 100.0, 101.0, 200.0, 201.0, 205.0],
        "end": [5.0, 130.0, 102.0, 230.0, 204.0, 229.0],
        "thread": [1] * 6})
    assert is_sync(cpu).tolist() == [False, False, False, True, False, False]
    unrecorded = pd.DataFrame({
        "s_name": ["aten::item", "aten::_local_scalar_dense", "aten::item", "aten::_local_scalar_dense"],
        "s_cat": ["cpu_op"] * 4,
        "ts": [0.0, 0.4, 100.0, 100.5],
        "end": [1.3, 0.9, 100.0 + DEVICE_READ_MIN_US, 100.0 + DEVICE_READ_MIN_US - 0.5],
        "thread": [1] * 4})
    assert is_sync(unrecorded).tolist() == [False, False, True, False]


def test_a_read_that_gives_an_all_to_all_its_splits_is_required(tmp_path):
    """A training step reads a tensor to the host (.tolist()) and then calls
    all_to_all_single with those sizes: kind ``splits``, which the program
    needs, not a logged metric."""
    from kineto import NCCL_ALLREDUCE
    b = TraceBuilder(rank=0, world_size=2)
    for i in range(4):
        t = i * 2000.0
        b.step(i + 1, t, 2000.0)
        b.kernel(FP32_GEMM, t + 20, 300.0)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", t + 400, 50.0)
        b.cpu_op("aten::to", t + 500, 40.0)
        b.cpu_op("aten::_to_copy", t + 501, 38.0)
        b.memcpy("DtoH", "Pageable", t + 520, 2.0, 64, launch_ts=t + 505)
        b.runtime("cudaStreamSynchronize", t + 512, 20.0)
        b.cpu_op("c10d::alltoall_base_", t + 560, 30.0)
        b.kernel(NCCL_ALLREDUCE.replace("AllReduce_Sum_f32", "SendRecv"), t + 600, 200.0, launch_ts=t + 570,
                 stream=20)
    d = tmp_path / "a2a"
    d.mkdir()
    b.write(d / "rank-0.json")
    kinds = {k.kind: k for k in analyze(d).ranks[0].cpu.sync_kinds}
    assert "splits" in kinds and not kinds["splits"].removable
    assert "metric" not in kinds


def test_a_host_that_sleeps_is_told_to_stop_sleeping(tmp_path):
    """Each step: a kernel, then the script's time.sleep(2 ms) inside its
    Python frame: the GPU idles while the host waits on purpose; the
    host-bound fix names the sleep, not moving or compiling host work."""
    b = TraceBuilder(rank=0)
    for i in range(5):
        t = i * 3000.0
        b.step(i + 1, t, 3000.0)
        b.python("train.py(10): main", t, 2610.0, python_id=10 * i + 1, parent=None)
        b.cpu_op("aten::mm", t + 10, 20.0)
        b.kernel(FP32_GEMM, t + 40, 500.0, launch_ts=t + 15)
        b.python("<built-in function sleep>", t + 600, 2000.0, python_id=10 * i + 2, parent=10 * i + 1)
    d = tmp_path / "sleep"
    d.mkdir()
    b.write(d / "rank-0.json")
    r = analyze(d)
    f = next(f for f in r.findings if f.id == "host-bound")
    assert "time.sleep" in f.fix and "torch.compile" not in f.fix


@pytest.mark.parametrize("kernel, major, dtype", [("ampere_sgemm_128x64_tn", 8, "bfloat16"),
                                                  ("volta_sgemm_128x64_tn", 7, "float16")])
def test_without_device_properties_the_kernel_names_give_the_architecture(tmp_path, kernel, major, dtype):
    """A trace without deviceProperties (PyTorch 1.8-1.10) whose fp32 GEMMs
    are cuBLAS's ampere_/volta_ kernels: the device is at least that
    architecture, so the Tensor Core rule is checked, names the precision
    it has, and advises no TF32 (a GeForce Ampere runs it at fp32 rate)."""
    r = _run(tmp_path, kernel, name=None, op="aten::mm")
    tc = r.ranks[0].tensor_cores
    assert tc.capability_from_kernels and tc.compute_major == major
    f = next(f for f in r.findings if f.id == "tensor-cores-unused")
    assert dtype in f.title and "TF32" not in f.title and "from kernel names" in " ".join(f.evidence)
