"""Reading a run as the field records it (issue 51; several ranks in one file:
test_merged_ranks.py): the device's precisions and the kernels' own, what each collective does, lost
GPU records, a model on the CPU of a GPU machine, torch.compile's cold start,
and the CPU-only advice (dropout at inference, reference kernels, Python loops)."""
import gzip
import json

import pytest

from hta_report.analysis.precision import lower_precision, matrix_dtypes
from hta_report.api import analyze
from hta_report.render import render
from hta_report.render.replay_notes import replay_note
from hta_report.replay_terms import EditLabel, NoteCode
from kineto import FP32_GEMM, Sim, TraceBuilder


def _write_doc(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _steps(b: TraceBuilder, sim: Sim, steps: int, body) -> None:
    for s in range(1, steps + 1):
        start = sim.t
        body(sim)
        sim.idle(20.0)
        b.step(s, start, sim.t - start)


def test_precisions_come_from_the_device_and_the_kernel_names():
    """Turing runs float16 (no bfloat16, no TF32) on its Tensor Cores; Ampere
    adds bfloat16 and TF32; Hopper FP8; Pascal nothing; MI300 by name. FP8
    grouped GEMMs, fp16 Winograd convolutions and half GEMMs are already in
    lower precision; an fp32 SGEMM is not."""
    assert matrix_dtypes(7, 5, ["Tesla T4"], amd=False) == ("float16", "int8")
    assert "bfloat16" in matrix_dtypes(8, 6, ["NVIDIA RTX A4000"], amd=False)
    assert "float8" in matrix_dtypes(9, 0, ["NVIDIA H800"], amd=False)
    assert matrix_dtypes(6, 1, ["Tesla P40"], amd=False) == ()
    assert "bfloat16" in matrix_dtypes(None, None, ["AMD Instinct MI300X"], amd=True)
    for name in ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(...)",
                 "miopenSp3AsmConv_v30_3_1_gfx9_fp16_dot2_edc_f3x2_stride1", "turing_fp16_s1688gemm_fp16_128x256_nt",
                 "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI16x16x16x1"):
        assert lower_precision(name), name
    assert not lower_precision("volta_sgemm_128x64_tn") and not lower_precision("ampere_sgemm_128x64_nn")


def _fp32_gemm_run(tmp_path, name: str, major: int, minor: int, training: bool = True):
    b = TraceBuilder(rank=0, gpu_name=name, compute_major=major)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(8):
            s.op("aten::mm", [(FP32_GEMM, 300.0)], host_us=10.0)
        if training:
            with s.region("autograd::engine::evaluate_function: MmBackward0"):
                s.op("aten::mm", [(FP32_GEMM, 300.0)], host_us=10.0)
        s.synchronize()
    _steps(b, sim, 6, body)
    doc = b.document()
    doc["deviceProperties"][0]["computeMinor"] = minor
    return analyze(_write_doc(tmp_path / name.replace(" ", "_") / "rank-0.json.gz", doc).parent)


def test_tensor_core_advice_names_the_precision_the_device_has(tmp_path):
    """fp32 GEMMs on a Turing T4: float16 autocast with a GradScaler, no
    bfloat16 and no TF32; on an A100: bfloat16 or TF32."""
    t4 = next(f for f in _fp32_gemm_run(tmp_path, "Tesla T4", 7, 5).findings if f.id == "tensor-cores-unused")
    assert "float16" in t4.fix and "GradScaler" in t4.fix and "bfloat16" not in t4.fix and "tf32" not in t4.fix.lower()
    assert "float16" in t4.title
    a100 = next(f for f in _fp32_gemm_run(tmp_path, "NVIDIA A100-SXM4-80GB", 8, 0).findings
                if f.id == "tensor-cores-unused")
    assert "torch.bfloat16" in a100.fix and "set_float32_matmul_precision" in a100.fix


def test_geforce_boards_are_not_advised_tf32_which_runs_at_their_float32_rate(tmp_path):
    """RTX 3060 (GA106) and RTX 4090 (AD102) run TF32 at the float32 rate
    (GA102/Ada whitepapers): bfloat16 is advised, TF32 is not; an A10 of
    the same capability 8.6 keeps TF32 (twice its float32 rate)."""
    assert "tf32" not in matrix_dtypes(8, 6, ["NVIDIA GeForce RTX 3060"], amd=False)
    assert "tf32" not in matrix_dtypes(8, 9, ["NVIDIA GeForce RTX 4090"], amd=False)
    assert "bfloat16" in matrix_dtypes(8, 9, ["NVIDIA GeForce RTX 4090"], amd=False)
    assert "tf32" in matrix_dtypes(8, 6, ["NVIDIA A10"], amd=False)
    f = next(f for f in _fp32_gemm_run(tmp_path, "NVIDIA GeForce RTX 3060", 8, 6).findings
             if f.id == "tensor-cores-unused")
    assert "torch.bfloat16" in f.fix and "set_float32_matmul_precision" not in f.fix and "TF32" not in f.title


def test_a_gpu_without_16_bit_matrix_units_gets_no_precision_advice(tmp_path):
    r = _fp32_gemm_run(tmp_path, "Tesla P100-PCIE-16GB", 6, 0)
    assert not any(f.id == "tensor-cores-unused" for f in r.findings)


ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_a_forward_all_reduce_is_tensor_parallel_and_gets_no_overlap_prediction(tmp_path):
    """Inference whose forward all-reduces after every layer (a tensor-parallel
    model): the collectives are tensor-parallel, the finding's fix speaks of
    tensor parallelism, and DDP's overlap edit does not apply (no prediction)."""
    b = TraceBuilder(rank=0, world_size=2)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(6):
            s.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
            with s.region("nccl:all_reduce"):
                s.launch(ALLREDUCE, 150.0, stream=7)
        s.synchronize()
    _steps(b, sim, 6, body)
    r = analyze(_write_doc(tmp_path / "tp" / "rank-0.json.gz", b.document()).parent)
    kinds = {k.kind for k in r.ranks[0].comm.kinds}
    assert kinds == {"tp"}
    f = next(f for f in r.findings if f.id == "exposed-communication")
    assert "tensor-parallel" in f.title.lower() or "tensor-parallel" in f.fix and f.whatif is None
    assert "no_sync" not in f.fix


def _gradient_loop(tmp_path, name: str, ddp: bool):
    """A training step on GPU: forward and backward GEMMs, then 12 NCCL all-reduces of 150 µs
    after the backward pass, one per parameter; with ``ddp`` a DistributedDataParallel.forward
    annotation marks the wrapper."""
    b = TraceBuilder(rank=0, world_size=2)
    sim = Sim(b)

    def body(s: Sim) -> None:
        if ddp:
            with s.region("DistributedDataParallel.forward", cat="user_annotation"):
                s.op("aten::mm", [(FP32_GEMM, 300.0)], host_us=10.0)
        else:
            s.op("aten::mm", [(FP32_GEMM, 300.0)], host_us=10.0)
        s.op("autograd::engine::evaluate_function: MmBackward0", [(FP32_GEMM, 600.0)], host_us=10.0)
        for _ in range(12):
            with s.region("nccl:all_reduce"):
                s.launch(ALLREDUCE, 150.0, stream=7)
        s.synchronize()
    _steps(b, sim, 6, body)
    return analyze(_write_doc(tmp_path / name / "rank-0.json.gz", b.document()).parent)


def test_gradients_all_reduced_one_by_one_without_ddp_are_named(tmp_path):
    """12 all-reduces a step after backward and no DDP in the trace: the gradients are reduced by
    hand (a course's "naive DDP"): the finding says so and its fix wraps the model in DDP; with
    DDP in the trace the fix is DDP's own tuning."""
    r = _gradient_loop(tmp_path, "loop", ddp=False)
    assert r.ranks[0].comm.wrapper == ""
    f = next(f for f in r.findings if f.id == "exposed-communication")
    assert f.title.startswith("Gradients reduced by hand, 12 collectives a step after the backward pass")
    assert "model = torch.nn.parallel.DistributedDataParallel(model)" in f.fix
    r = _gradient_loop(tmp_path, "ddp", ddp=True)
    assert r.ranks[0].comm.wrapper == "DDP"
    f = next(f for f in r.findings if f.id == "exposed-communication")
    assert f.title.startswith("Overlap the gradient reduction") and "bucket_cap_mb=50" in f.fix


def test_launches_whose_gpu_records_were_lost_get_no_gpu_advice(tmp_path):
    """The host launched kernels, the trace holds none of them: the report
    says the GPU side is missing, in every format, and gives no GPU finding."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(10):
            s.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
        s.synchronize()
    _steps(b, sim, 5, body)
    doc = b.document()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel" and e.get("ph") != "f"]
    r = analyze(_write_doc(tmp_path / "lost" / "rank-0.json.gz", doc).parent)
    x = r.ranks[0]
    assert not x.has_gpu and x.integrity.launches == x.integrity.launches_without_ops >= 40  # the steps analyzed
    assert [f.id for f in r.findings] == ["trace-window"] and "lost its GPU side" in r.findings[0].title
    for fmt in ("md", "html"):
        assert "GPU side" in render(r, fmt)
    assert x.replay.whatifs == [] and x.replay.notes[-1].code == NoteCode.LOST_GPU
    assert "no GPU record" in replay_note(x.replay)


def _lost_kernels(tmp_path, name: str, drop: int, last: bool = False):
    """Five steps of ten 100 µs GEMMs, each after 1 ms of host work (a GPU mostly idle, as in a
    decode fragment); the GPU records of the first ``drop`` kernels are removed."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(10):
            s.idle(1000.0)
            s.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
        s.synchronize()
    _steps(b, sim, 5, body)
    doc = b.document()
    lost = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    lost = set(sorted(lost)[-drop:] if last else sorted(lost)[:drop])
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not (e.get("cat") == "kernel" and e["args"]["correlation"] in lost)]
    return analyze(_write_doc(tmp_path / name / "rank-0.json.gz", doc).parent).ranks[0]


def test_a_few_lost_records_that_hide_little_work_leave_the_figures_standing(tmp_path):
    """3 of the 40 launches of the analyzed steps (7.5 %, past the 5 %
    tolerated) lost their GPU records, in a window of about 44 ms whose
    longest kernel is 100 µs: they hide at most 0.3 ms, under 5 % of it, so
    the rank's figures stand and rules advise (a field decode fragment lost 2
    of 30 Triton launches and got no advice); with most launches lost (a
    sample too small to bound them) its idle time is unknown."""
    few = _lost_kernels(tmp_path, "few", 3)
    assert few.integrity.launches_without_ops == 3
    assert few.integrity.lost_work_us == pytest.approx(300.0, rel=0.05)
    assert not few.integrity.idle_unreliable and not few.integrity.records_lost
    assert "can hide at most 0.30 ms" in few.integrity.notes[0]
    many = _lost_kernels(tmp_path, "many", 35)
    assert many.integrity.idle_unreliable and many.integrity.records_lost
    assert "no rule advises" in many.integrity.notes[0]


def test_records_lost_at_the_end_say_the_profiler_stopped_before_the_gpu(tmp_path):
    """The last 35 launches have no GPU record and every earlier one has (a field L40 run: 923 of
    1,556 launches, all after +30.2 ms, the GPU 32 ms behind its host): the profiler stopped
    before the GPU ran them. The note and the finding say so and ask for a synchronize before the
    profiler stops, not for a shorter window; records lost at the start keep the buffer reading."""
    tail = _lost_kernels(tmp_path, "tail", 35, last=True)
    assert tail.integrity.lost_tail and tail.integrity.records_lost
    assert "the profiler stopped while the GPU was still behind" in tail.integrity.notes[0]
    head = _lost_kernels(tmp_path, "head", 35)
    assert not head.integrity.lost_tail and "pytorch/pytorch#192021" in head.integrity.notes[0]


def _cpu_run(tmp_path, name: str, ops, gpu_name=None, steps: int = 6, annotations=()):
    """A CPU-only trace of ``steps`` steps, each running ``ops`` (name, µs,
    children) in turn on the host thread."""
    b = TraceBuilder(rank=0, gpu_name=gpu_name)
    t = 100.0
    for s in range(1, steps + 1):
        start = t
        for note, us in annotations:
            b.cpu_op(note, t, us, cat="user_annotation")
        for op, us, children in ops:
            b.cpu_op(op, t, us)
            inner = t + 1.0
            for child, cus, *recorded in children:
                b.cpu_op(child, inner, cus, **(recorded[0] if recorded else {}))
                inner += cus + 0.5
            t += us + 2.0
        b.step(s, start, t - start)
        t += 5.0
    return analyze(_write_doc(tmp_path / name / "rank-0.json.gz", b.document()).parent)


def test_dropout_active_at_inference_is_found_and_its_removal_predicted(tmp_path):
    """No backward pass, and dropout draws a mask each step: the model is in
    training mode at inference; eval mode removes the masks' time."""
    ops = [("aten::linear", 400.0, [("aten::addmm", 380.0)]),
           ("aten::dropout", 300.0, [("aten::native_dropout", 290.0)]),
           ("aten::linear", 400.0, [("aten::addmm", 380.0)])]
    r = _cpu_run(tmp_path, "dropout", ops)
    f = next(f for f in r.findings if f.id == "train-mode-inference")
    assert "model.eval()" in f.fix and f.whatif is not None
    assert f.whatif.step_us_before - f.whatif.step_us_after == pytest.approx(300.0, rel=0.1)


BN_TRAIN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct)"
BN_INFER = "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float, cudnnTensorStruct)"


def _bn_run(tmp_path, name: str, kernel: str, training: bool = False):
    """GPU steps of a convolution then a BatchNorm running ``kernel`` (300 µs), with a backward when ``training``."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA A100-SXM4-80GB", compute_major=8)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(4):
            s.op("aten::cudnn_convolution", [(FP32_GEMM, 400.0)], host_us=10.0)
            s.op("aten::cudnn_batch_norm", [(kernel, 300.0)], host_us=10.0)
        if training:
            with s.region("autograd::engine::evaluate_function: CudnnBatchNormBackward0"):
                s.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
        s.synchronize()
    _steps(b, sim, 6, body)
    return analyze(_write_doc(tmp_path / name / "rank-0.json.gz", b.document()).parent)


def test_batchnorm_in_training_mode_at_inference_is_found_from_its_kernels(tmp_path):
    """Inference whose BatchNorm runs cuDNN's training kernel (bn_fw_tr: the
    batch's statistics) is told to call model.eval(), and the prediction
    keeps part of those kernels (the inference kernel still normalizes); the
    same model in eval mode (bn_fw_inf), or training, gets no such finding."""
    r = _bn_run(tmp_path, "train-mode", BN_TRAIN)
    f = next(f for f in r.findings if f.id == "train-mode-inference")
    assert "BatchNorm" in f.title and "model.eval()" in f.fix
    p = r.ranks[0].patterns
    assert p.bn_training_per_step == 4 and p.bn_training_us_per_step == 1200.0
    w = f.whatif
    assert w is not None and w.edit == EditLabel.EVAL_MODE
    saved = w.step_us_before - w.step_us_after
    assert 0.1 * 1200 < saved < 1200  # part of the 1.2 ms of training kernels per step, not all of it
    for name, kernel, training in (("eval", BN_INFER, False), ("train", BN_TRAIN, True)):
        other = _bn_run(tmp_path, name, kernel, training)
        assert not any(f.id == "train-mode-inference" for f in other.findings), name


def test_the_cpu_reference_convolution_is_found(tmp_path):
    ops = [("aten::conv2d", 900.0, [("aten::_slow_conv2d_forward", 880.0)]), ("aten::relu", 50.0, [])]
    r = _cpu_run(tmp_path, "slow", ops)
    f = next(f for f in r.findings if f.id == "slow-cpu-kernels")
    assert "model.float()" in f.fix and f.whatif is not None and f.whatif.step_us_after < f.whatif.step_us_before
    assert "did not record the inputs" in " ".join(f.evidence)


def _slow_conv(tmp_path, name: str, types: list, dims: list):
    recorded = {"types": types, "dims": dims}
    ops = [("aten::conv2d", 900.0, [("aten::_slow_conv2d_forward", 880.0, recorded)]), ("aten::relu", 50.0, [])]
    return next(f for f in _cpu_run(tmp_path, name, ops).findings if f.id == "slow-cpu-kernels")


SLOW_ARGS = ["ScalarList", "", "ScalarList", "ScalarList"]


def test_the_reference_convolution_s_fix_follows_its_recorded_inputs(tmp_path):
    """The fix is the cause the recorded inputs show, not a fixed list: a
    float64 input is told to use float32 (and predicted), a float32 sample
    one at a time to batch, and float32 batches (which PyTorch gives oneDNN
    wherever the build has it: dtu MacBook, kernelforge) are the build's,
    with no code change suggested and no prediction."""
    double = _slow_conv(tmp_path, "double", ["double", "double"] + SLOW_ARGS,
                        [[32, 3, 32, 32], [8, 3, 3, 3], [], [], [], []])
    assert "model.float()" in double.fix and "double" in " ".join(double.evidence)
    assert double.whatif is not None and double.whatif.step_us_after < double.whatif.step_us_before
    single = _slow_conv(tmp_path, "single", ["float", "float"] + SLOW_ARGS, [[3, 32, 32], [8, 3, 3, 3], [], [], [], []])
    assert "batch the samples" in single.fix and "model.float()" not in single.fix
    batched = _slow_conv(tmp_path, "batched", ["float", "float"] + SLOW_ARGS,
                         [[5, 64, 56, 56], [64, 64, 3, 3], [], [], [], []])
    assert "mkldnn.is_available()" in batched.fix and "model.float()" not in batched.fix
    assert "batches of 5" in " ".join(batched.evidence) and batched.whatif is None


def test_a_model_on_the_cpu_of_a_gpu_machine_is_told_to_move(tmp_path):
    """deviceProperties lists an A100, the trace holds no GPU work, and the
    convolutions ran oneDNN's CPU kernels: move the model to the GPU."""
    ops = [("aten::conv1d", 2000.0, [("aten::mkldnn_convolution", 1990.0)]), ("aten::relu", 100.0, [])]
    r = _cpu_run(tmp_path, "oncpu", ops, gpu_name="NVIDIA A100-PCIE-40GB")
    assert r.findings[0].id == "gpu-unused" and "model.to(device)" in r.findings[0].fix
    assert not any(f.id == "gpu-unused" for f in _cpu_run(tmp_path, "nogpu", ops).findings)


def test_torch_compile_s_compile_phase_is_cold_start(tmp_path):
    """Dynamo's compile annotations are one-off warm-up: the window rule says
    so, and no what-if is made on a window that is mostly compiling."""
    ops = [("aten::mm", 100.0, [])]
    r = _cpu_run(tmp_path, "compile", ops, annotations=[("_compile.compile_inner (dynamo_timed)", 95.0)])
    assert r.ranks[0].warmup.us_per_step > 0


def test_the_few_steps_line_counts_the_steps_recorded(tmp_path):
    """Three ProfilerSteps recorded: HTA's load leaves the last out and the
    first is warm-up, so one is analyzed, and the line says three were
    recorded (it said "found 2 ... and the last is dropped": the drop counted twice)."""
    from hta_report.rules.config import AdviceConfig
    from hta_report.rules.window import problems
    r = _cpu_run(tmp_path, "few", [("aten::mm", 500.0, [])], steps=3)
    line = next(x for x in problems(r, AdviceConfig()) if "analyzed step" in x)
    assert "only 1 analyzed step (recorded 3; the first is left out (warm-up, or the profiler starting in it) and the last is dropped" in line


def test_the_few_steps_line_names_only_the_steps_left_out(tmp_path):
    """Two ProfilerSteps recorded: HTA's load leaves the last out and the one
    left is analyzed, not taken as warm-up: the line must not say "the first is
    warm-up" (it did on a 2-step MI350X run whose one analyzed step was its first)."""
    from hta_report.rules.config import AdviceConfig
    from hta_report.rules.window import problems
    r = _cpu_run(tmp_path, "two", [("aten::mm", 500.0, [])], steps=2)
    assert r.ranks[0].steps_used == 1 and not r.ranks[0].steps.warmup_excluded
    line = next(x for x in problems(r, AdviceConfig()) if "analyzed step" in x)
    assert "only 1 analyzed step (recorded 2; the last is dropped, as HTA does)" in line
    assert "warm-up" not in line


ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_forward_all_gathers_under_deepspeed_zero3_are_parameter_gathers(tmp_path):
    """Forward all-gathers on a rank whose trace shows DeepSpeed's ZeRO-3
    optimizer gather parameters before use (ZeRO-3), not a tensor-parallel
    layer's activations: the same trace without the marker reads as TP (every
    all-gather: a Python bool's ~ made the TP mask an index, and all but one
    forward all-gather read "other")."""
    def run(name: str, marker: bool):
        b = TraceBuilder(rank=0, world_size=2)
        sim = Sim(b)

        def body(s: Sim) -> None:
            for _ in range(6):
                with s.region("nccl:all_gather"):
                    s.launch(ALLGATHER, 150.0, stream=7)
                s.op("aten::mm", [(FP32_GEMM, 100.0)], host_us=10.0)
            if marker:
                s.cpu("Optimizer.step#DeepSpeedZeroOptimizer_Stage3.step", 20.0, cat="user_annotation")
            s.synchronize()
        _steps(b, sim, 6, body)
        return analyze(_write_doc(tmp_path / name / "rank-0.json.gz", b.document()).parent)

    assert {k.kind for k in run("zero3", True).ranks[0].comm.kinds} == {"fsdp"}
    assert {k.kind for k in run("tp", False).ranks[0].comm.kinds} == {"tp"}


def test_backward_reductions_split_by_process_group(tmp_path):
    """Megatron-style TP and DP side by side, no DDP wrapper: each step's
    forward all-reduces in group "1" (tensor-parallel), its backward
    all-reduces in group "1" again and in group "0" (the gradients). The
    kernels name their groups: group 1's backward reductions are TP's, group
    0's are data-parallel; without the group names every backward reduction
    read as TP's."""
    def run(name: str, groups: bool):
        b = TraceBuilder(rank=0, world_size=4)
        for s in range(6):
            t = s * 3000.0
            b.step(s + 1, t, 3000.0)
            tp = {"Process Group Name": "1"} if groups else None
            dp = {"Process Group Name": "0"} if groups else None
            b.kernel(FP32_GEMM, t + 20, 300.0)
            b.cpu_op("nccl:all_reduce", t + 330, 20)
            b.kernel(ALLREDUCE, t + 360, 200.0, launch_ts=t + 335, extra=tp)
            b.cpu_op("autograd::engine::evaluate_function: MmBackward0", t + 600, 50)
            b.kernel(FP32_GEMM, t + 660, 300.0)
            b.cpu_op("nccl:all_reduce", t + 970, 20)
            b.kernel(ALLREDUCE, t + 1000, 200.0, launch_ts=t + 975, extra=tp)
            b.cpu_op("nccl:all_reduce", t + 1210, 20)
            b.kernel(ALLREDUCE, t + 1240, 600.0, launch_ts=t + 1215, extra=dp)
        d = tmp_path / name
        d.mkdir()
        b.write(d / "rank-0.json")
        return {k.kind: k.calls_per_step for k in analyze(d).ranks[0].comm.kinds}

    assert run("groups", True) == {"tp": 2.0, "dp": 1.0}
    assert run("nogroups", False) == {"tp": 3.0}
