"""Tensor Core use of GEMM and convolution kernels (TensorBoard profiler's check)."""
from __future__ import annotations

import json
import math
import re
from typing import List, Optional, Sequence, Tuple, TypeVar

import numpy as np
import pandas as pd

from ..model import ElementwiseWork, NamedTime, TensorCoreUse
from .events import RankEvents, is_step, name_test, runtime_calls, shared
from .launch_calls import KERNEL_LAUNCH_APIS
from .precision import lower_precision, matrix_dtypes
from .. import intervals
from .regions import in_windows, launched_from, per_step

#: CPU ops whose kernels can run on Tensor Cores (TensorBoard's list: mm, addmm, bmm, linear, conv*).
ELIGIBLE_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::conv", "aten::_convolution", "aten::cudnn_convolution")
#: Kernel names of GEMMs and convolutions (cuBLAS/CUTLASS GEMMs, cuDNN implicit-GEMM,
#: FFT and Winograd convolutions, cuBLAS's ``nvjet_*`` GEMMs on Hopper and Blackwell,
#: Tensile/hipBLASLt's ``Cijk_*`` GEMMs on ROCm); ``fbgemm`` is FBGEMM's library prefix, not a GEMM.
ELIGIBLE_KERNEL = re.compile(r"(?<!fb)gemm|gemv|cutlass|xmma|[sh]\d*cudnn|convolve|conv2d|conv3d|convolution|fprop|dgrad|"
                             r"wgrad|winograd|fft2d|implicit_gemm|^nvjet_|^Cijk_", re.IGNORECASE)
#: Kernels that GEMM/convolution ops (or cuDNN) launch but that do no matrix math:
#: batch norm, layout and dtype conversions, padding, elementwise epilogues,
#: reductions and split-K reductions, pooling, softmax.
NOT_MATMUL_KERNEL = re.compile(r"bn_fw|bn_bw|batch_?norm|nchwToNhwc|nhwcToNchw|scalePacked|computeOffsets|"
                               r"elementwise|reduce_kernel|splitKreduce|pooling|softmax|im2col|col2im|"
                               r"fill|copy|cast|transpose_|permute", re.IGNORECASE)
#: Name parts of Tensor Core kernels: TensorBoard's allowlist plus CUTLASS's ``tensorop``,
#: cuDNN's ``tensor16x8``, WMMA and cuBLAS's ``nvjet_*`` (its Hopper/Blackwell GEMMs, all on
#: Tensor Cores), and AMD's matrix-core (MFMA) kernels: :data:`MATRIX_CORE`.
TENSOR_CORE = re.compile(r"884|1688|16816|hmma|xmma|gmma|wgmma|wmma|tensorop|tensor16x8|^nvjet_", re.IGNORECASE)
#: Name parts of kernels that match :data:`TENSOR_CORE` yet run on the CUDA cores: cuBLAS's
#: fp32 ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` kernels name their FFMA (fp32 fused
#: multiply-add) main loop (seen on an H200 with torch 2.11, fp32 ``nn.Linear`` without TF32:
#: bench/record_cuda.py collect-amp; TensorBoard's allowlist counts any ``xmma_gemm`` as Tensor Core).
NOT_TENSOR_CORE = re.compile(r"ffma|_simt_", re.IGNORECASE)
#: Tensor Core GEMM/convolution kernels whose inputs are TF32, by name: cuBLAS's and cuDNN's
#: ``sm80_xmma_gemm_f32f32_tf32f32_f32_*``/``sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_*``
#: (A-type B-type in pairs: ``tf32f32`` is TF32 math on float32 storage), CUTLASS's
#: ``cutlass_80_tensorop_tf32_s1688gemm_*`` and ``cutlass_tensorop_s1688fprop_optimized_tf32_*``
#: (seen in the field traces: H100, A100, RTX 3090/4090/A4000, RTX 500 Ada). AMD is left out:
#: no kernel of the ROCm traces names an xf32 (MI300's TF32) type, and Tensile's data-type
#: letters (``_SS_``) do not tell xf32 math from float32. cuBLAS's ``nvjet_*`` names carry
#: no TF32 marker either (``nvjet_sm90_tst_*`` is bf16 in), so they are not counted. A name with
#: no type but ``s1688gemm`` (``cutlass_80_tensorop_s1688gemm_*``, ``ampere_s1688gemm_*``) is TF32
#: too: ``s`` is its float32 accumulate, ``1688`` the m16n8k8 MMA, which on Ampere and later takes
#: TF32 or 16-bit inputs, and 16-bit kernels name their type (``*_fp16_s1688gemm_fp16_*``: left out by
#: :func:`~.precision.lower_precision`); Turing's and Volta's m16n8k8/m8n8k4 MMAs are 16-bit only.
TF32_KERNEL = re.compile(r"tf32|^(?!.*(?:turing|volta)_).*s1688(?:gemm|fprop|dgrad|wgrad)", re.IGNORECASE)
#: cuDNN's layout-conversion kernels (``cudnn::ops::nchwToNhwcKernel``,
#: ``cudnn::engines_precompiled::nhwcToNchwKernel``, CUDA 10's unscoped ``nchwToNhwcKernel``;
#: mangled ``...16nchwToNhwcKernel...`` where the trace keeps the raw symbol): a convolution
#: given NCHW tensors whose engine computes in NHWC (cuDNN's Tensor-Core engines do) converts
#: its input and filter to NHWC and its output back, on every call. With the model and input in
#: ``torch.channels_last`` PyTorch hands cuDNN NHWC tensors and the conversions are not run.
#: Seen in 20 of the field, shared and sample traces, up to 14.5 % of kernel time (ResNet-18
#: on an RTX 3090). MIOpen's (AMD) transposes are named otherwise and are not counted.
LAYOUT_CONVERSION_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)
#: PyTorch's eager memory-bound kernels, by name (CUDA and ROCm builds alike): pointwise ops,
#: copies and casts (``elementwise_kernel`` in its vectorized/unrolled forms, ``index_elementwise``),
#: reductions (``reduce_kernel``), softmax (``cunn_SoftMaxForward``, ``softmax_warp_*``), layer
#: norm (``vectorized_layer_norm_kernel``, ``RowwiseMomentsCUDAKernel``...), dropout
#: (``fused_dropout_kernel``), ``cat`` (``CatArrayBatchedCopy``). Each reads its inputs from
#: device memory and writes its output back; Inductor (``torch.compile``) fuses runs of them.
ELEMENTWISE_KERNEL = re.compile(r"elementwise_kernel|reduce_kernel|softmax|layer_norm|LayerNorm|RowwiseMoments|"
                                r"GammaBeta|ComputeFusedParams|fused_dropout|CatArrayBatchedCopy|where_kernel",
                                re.IGNORECASE)
#: Kernels that are already fused or belong to another fix: Inductor's and hand-written Triton
#: kernels, the optimizer's ``multi_tensor_apply`` (fused optimizers are their fix).
NOT_ELEMENTWISE = re.compile(r"^triton_|multi_tensor_apply|nccl|rccl", re.IGNORECASE)
#: AMD matrix-core (MFMA) kernels: Tensile/hipBLASLt GEMMs name their matrix
#: instruction (``Cijk_..._MI16x16x1_...``; a kernel without one has no ``MI``
#: part), Composable Kernel names its XDL (MFMA) pipelines ``xdl``/``xdlops``,
#: MIOpen's assembly implicit GEMMs ``igemm_*_gtcx*`` (``x``: xdlops), and
#: ``mfma`` appears in hand-written kernels' names.
MATRIX_CORE = re.compile(r"_MI[1-9]\d*x\d+x\d+|xdl|mfma|igemm_\w*?gtcx", re.IGNORECASE)
_NOT_NVIDIA = re.compile(r"AMD|Radeon|Instinct|\bMI\d", re.IGNORECASE)
#: AMD Instinct GPUs with matrix cores (CDNA: MI100, MI200, MI300 and newer), by device name.
_AMD_MATRIX_CORES = re.compile(r"\bMI[1-9]\d\d", re.IGNORECASE)
#: AMD's wavefront: 64 lanes on every CDNA/GCN GPU, where NVIDIA's warp has 32.
AMD_WARP_SIZE = 64


#: The TensorBoard profiler's Tensor-Core-eligible ops (``TC_OP_Allowlist``,
#: from autocast's lower-precision list, with their backward nodes); a
#: backward node may end in its version number (``AddmmBackward0``).
TB_ELIGIBLE_OPS = frozenset((
    "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution",
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::prelu", "aten::addmm", "aten::addmv",
    "aten::addr", "aten::matmul", "aten::mm", "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm",
    "aten::bmm", "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell", "aten::rnn_relu_cell",
    "CudnnConvolutionBackward", "BmmBackward", "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward", "MmBackward", "aten::cudnn_convolution_backward_weight", "aten::addmm_",
    "AddmvBackward", "MvBackward", "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input", "AddmmBackward", "aten::cudnn_convolution_backward_input",
    "AddbmmBackward", "aten::cudnn_convolution_backward", "ConvolutionBackward", "aten::convolution_backward"))
_VERSION = re.compile(r"\d+$")


def tb_eligible_share(ev: RankEvents, w: np.ndarray) -> float:
    """The TensorBoard profiler's "Kernels with N % time are launched by
    Tensor Cores eligible operators": kernel time launched from inside an op
    of :data:`TB_ELIGIBLE_OPS` as % of the kernel time launched from inside
    any op (its ``tc_eligible_ops_kernel_ratio``), over kernels starting in
    ``w``. The plugin counts each kernel under the innermost eligible op;
    counting it once under any of them gives the same sum. On plain arrays:
    a 310 MB rank's 440,000 ops in 0.05 s."""
    kernels = in_windows(ev.gpu[ev.gpu["s_cat"].eq("kernel")], w)
    if kernels.empty:
        return 0.0
    cpu = ev.cpu
    cat, names = cpu["s_cat"], cpu["s_name"]
    ops = (cat.isin(("cpu_op", "user_annotation")) & ~is_step(names)).to_numpy()
    distinct = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else names.unique()
    chosen = [n for n in distinct if _VERSION.sub("", str(n)) in TB_ELIGIBLE_OPS]  # once per distinct name
    eligible = ops & names.isin(chosen).to_numpy()
    corr = pd.to_numeric(cpu["correlation"], errors="coerce").to_numpy(dtype=float) \
        if "correlation" in cpu.columns else np.full(len(cpu), np.nan)
    launch = cat.eq("cuda_runtime").to_numpy() & (corr > 0)
    ts, end, thread = cpu["ts"].to_numpy(dtype=float), cpu["end"].to_numpy(dtype=float), cpu["thread"].to_numpy()
    k_corr = pd.to_numeric(kernels["correlation"], errors="coerce").to_numpy(dtype=float)
    k_dur = kernels["dur"].to_numpy(dtype=float)

    def launched_inside(regions: np.ndarray) -> np.ndarray:
        """The correlation ids of launch calls that start inside ``regions`` (a row mask) on their thread."""
        inside = np.zeros(len(cpu), dtype=bool)
        for t in np.unique(thread[regions]):
            here = thread == t
            u = intervals.union(ts[regions & here], end[regions & here])
            rows = np.flatnonzero(launch & here)
            j = np.searchsorted(u[:, 0], ts[rows], side="right") - 1
            inside[rows] = (j >= 0) & (ts[rows] < u[np.maximum(j, 0), 1])
        return corr[inside]

    total = float(k_dur[np.isin(k_corr, launched_inside(ops))].sum())
    under = float(k_dur[np.isin(k_corr, launched_inside(eligible))].sum())
    return 100 * under / total if total > 0 else 0.0


def _device_props(meta: dict) -> List[dict]:
    props = meta.get("deviceProperties") if isinstance(meta, dict) else None
    return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []


def amd_device(meta: dict) -> bool:
    """True when the trace's ``deviceProperties`` describe an AMD GPU: an AMD
    name (``AMD Instinct MI300X``, ``AMD Radeon Graphics``) or, where ROCm
    left the name empty, a warp of :data:`AMD_WARP_SIZE` lanes (ROCm reports
    the GCN architecture's major as ``computeMajor``: 9 on an MI300X is no
    NVIDIA compute capability)."""
    return any(_NOT_NVIDIA.search(str(p.get("name", ""))) or p.get("warpSize") == AMD_WARP_SIZE
               for p in _device_props(meta))


def compute_major(meta: dict, device: Optional[int] = None) -> Optional[int]:
    """``deviceProperties[].computeMajor`` of ``device`` (else the largest
    recorded); None when absent or when the device is not an NVIDIA GPU
    (:func:`amd_device`)."""
    cands = [p for p in _device_props(meta) if isinstance(p.get("computeMajor"), int)]
    if not cands or amd_device(meta):
        return None
    mine = [p for p in cands if p.get("id") == device]
    if mine:
        return int(mine[0]["computeMajor"])
    return max(int(p["computeMajor"]) for p in cands)


def compute_minor(meta: dict, device: Optional[int] = None) -> Optional[int]:
    """``deviceProperties[].computeMinor`` of ``device`` (else of the device
    with the largest ``computeMajor``); None when absent or not an NVIDIA GPU."""
    cands = [p for p in _device_props(meta) if isinstance(p.get("computeMajor"), int)
             and isinstance(p.get("computeMinor"), int)]
    if not cands or amd_device(meta):
        return None
    mine = [p for p in cands if p.get("id") == device] or [max(cands, key=lambda p: p["computeMajor"])]
    return int(mine[0]["computeMinor"])


#: Kernel name prefixes that name the NVIDIA architecture a library kernel was built for (cuBLAS's
#: ``volta_sgemm_*``, ``turing_fp16_*``, ``ampere_sgemm_*``, cuBLASLt/CUTLASS ``sm80_xmma_*``,
#: ``sm90_xmma_*``): a device runs kernels of its own architecture or older, so the newest one named
#: is a floor of its compute capability. Newest first.
KERNEL_ARCH: Sequence[Tuple[re.Pattern, Tuple[int, int]]] = tuple((re.compile(p), cc) for p, cc in (
    (r"^sm1\d\d_|^sm_1\d\d_", (10, 0)), (r"^sm90a?_|^sm_90a?_", (9, 0)), (r"^sm89_|^sm_89_", (8, 9)),
    (r"^sm86_|^sm_86_", (8, 6)), (r"^ampere_|^sm80_|^sm_80_", (8, 0)), (r"^turing_|^sm75_|^sm_75_", (7, 5)),
    (r"^volta_|^sm70_|^sm_70_", (7, 0)),
))


def capability_from_names(names: "pd.Series") -> Optional[Tuple[int, int]]:
    """The compute capability floor (major, minor) the kernel ``names`` give
    (:data:`KERNEL_ARCH`: the newest architecture any of them was built
    for), or None where none names one."""
    distinct = pd.unique(names.astype(str))
    best: Optional[Tuple[int, int]] = None
    for pattern, cc in KERNEL_ARCH:
        if any(pattern.search(n) for n in distinct):
            best = cc if best is None or cc > best else best
    return best


def tensor_core_use(ev: RankEvents, meta: dict, w: np.ndarray, top: int = 5) -> TensorCoreUse:
    """Eligible and Tensor Core kernel time per analyzed step (µs) of one rank.

    Eligible kernels are launched from a GEMM/convolution op
    (:data:`ELIGIBLE_OPS`) or named like a GEMM or convolution
    (:data:`ELIGIBLE_KERNEL`), and are not one of the helper kernels such ops
    launch (:data:`NOT_MATMUL_KERNEL`: batch norm, layout conversions,
    elementwise epilogues...): a batch-norm kernel is not a convolution
    without Tensor Cores. On an AMD GPU (:func:`amd_device`, or ``hip*``
    runtime calls) ``compute_major`` stays None (ROCm's ``computeMajor`` is
    no compute capability), matrix-core kernels (:data:`MATRIX_CORE`) count
    as Tensor Core kernels, and ``amd_matrix_cores`` says whether the GPU has
    matrix cores: an Instinct MI100 or newer by name, or any MFMA kernel in
    the rank's trace."""
    n = len(w)
    kernels = ev.gpu[ev.gpu["s_cat"].eq("kernel") & ev.gpu["kernel_type"].eq("COMPUTATION")]
    device = int(kernels["pid"].iloc[0]) if len(kernels) and str(kernels["pid"].iloc[0]).isdigit() else None
    amd = amd_device(meta) or bool(ev.cpu["s_name"].str.startswith("hip").any())
    out = TensorCoreUse(compute_major=None if amd else compute_major(meta, device),
                        compute_minor=None if amd else compute_minor(meta, device))
    names = [str(p.get("name", "")) for p in _device_props(meta)]
    if amd:
        named = any(_AMD_MATRIX_CORES.search(n) for n in names)
        out.amd_matrix_cores = named or bool(kernels["s_name"].str.contains(MATRIX_CORE).any())
    if not amd and out.compute_major is None and not names:
        floor = capability_from_names(ev.gpu.loc[ev.gpu["s_cat"].eq("kernel"), "s_name"])
        if floor is not None:
            out.compute_major, out.compute_minor = floor
            out.capability_from_kernels = True
    out.matrix_dtypes = list(matrix_dtypes(out.compute_major, out.compute_minor, names, amd))
    if out.capability_from_kernels:  # a GeForce board runs TF32 no faster than float32: not advised unseen
        out.matrix_dtypes = [d for d in out.matrix_dtypes if d != "tf32"]
    if amd and out.amd_matrix_cores and not out.matrix_dtypes:  # MFMA kernels ran on an unnamed Instinct GPU
        out.matrix_dtypes = ["float16", "bfloat16"]
    kernels = in_windows(kernels, w)
    if kernels.empty:
        return out
    out.eligible_ops_kernel_pct = tb_eligible_share(ev, w)
    every, every_tc = _all_matmuls(ev)
    inside = every.index.isin(kernels.index)  # a kernel's class does not depend on the window
    eligible, is_tc = every[inside], every_tc[inside]
    if eligible.empty:
        return out
    # matrix math only: a stalled kernel's time past its name's median is no precision's (stall_excess)
    total = float(eligible["matmul_us"].sum())
    tc = float(eligible[is_tc]["matmul_us"].sum())
    low = _low_precision(eligible, is_tc)
    out.eligible_us_per_step = per_step(total, n)
    out.tensor_core_us_per_step = per_step(tc, n)
    out.low_precision_us_per_step = per_step(float(eligible[low]["matmul_us"].sum()), n)
    out.tensor_core_pct = 100 * tc / total if total else 0.0
    out.top_non_tensor_core = top_by_time(eligible[~is_tc & ~low], "matmul_us", top)
    tf32 = eligible[tf32_kernels(eligible, is_tc, amd)]
    out.tf32_us_per_step = per_step(float(tf32["matmul_us"].sum()), n)
    out.top_tf32 = top_by_time(tf32, "matmul_us", top)
    return out


def top_by_time(rows: pd.DataFrame, column: str, top: int) -> List[NamedTime]:
    """The ``top`` kernel names of ``rows`` (rows of ``ev.gpu``) by their
    summed ``column`` (µs), with their call counts, largest first."""
    by_time = rows.groupby("s_name")[column].agg(["size", "sum"]).sort_values("sum", ascending=False).head(top)
    return [NamedTime(name=str(k), count=int(r["size"]), total_us=float(r["sum"])) for k, r in by_time.iterrows()]


def tf32_kernels(eligible: pd.DataFrame, is_tc: pd.Series, amd: bool = False) -> pd.Series:
    """Per GEMM/convolution kernel of ``eligible`` (rows as :func:`_matmuls`
    gives them, with its ``is_tc``): True for a Tensor Core kernel whose name
    says its inputs are TF32 (:data:`TF32_KERNEL`) and not 16 or 8 bits
    (:data:`~.precision.LOW_PRECISION`). False everywhere on an AMD rank
    (``amd``): ROCm's kernel names show no TF32 marker."""
    if eligible.empty or amd:
        return pd.Series(False, index=eligible.index, dtype=bool)
    names = eligible["s_name"]
    tf32 = name_test(names, lambda s: TF32_KERNEL.search(s) is not None and not lower_precision(s))
    return pd.Series(tf32, index=eligible.index, dtype=bool) & is_tc.fillna(False).astype(bool)


def tf32_matmuls(ev: RankEvents) -> pd.DataFrame:
    """The rank's TF32 GEMM/convolution kernels (:func:`tf32_kernels`; rows
    of ``ev.gpu``, the whole trace): what bf16 autocast moves from TF32 to
    16-bit Tensor Core math (the replay's ``TF32 matmuls in bf16``). Empty on
    an AMD rank (``hip*`` runtime calls)."""
    eligible, is_tc = _all_matmuls(ev)
    amd = bool(ev.cpu["s_name"].str.startswith("hip").any()) if len(ev.cpu) else False
    return eligible[tf32_kernels(eligible, is_tc, amd)]


def _matmuls(ev: RankEvents, kernels: pd.DataFrame) -> Tuple[pd.DataFrame, pd.Series]:
    """The GEMM/convolution kernels among ``kernels`` (rows of ``ev.gpu``; see
    :func:`tensor_core_use` for what counts) and, per row, whether it runs on
    Tensor Cores or AMD matrix cores."""
    cpu = ev.cpu
    ops = cpu[cpu["s_cat"].eq("cpu_op") & cpu["s_name"].str.startswith(ELIGIBLE_OPS)]
    from_ops = kernels["correlation"].isin(launched_from(ev, ops)["correlation"])
    by_name = kernels["s_name"].str.contains(ELIGIBLE_KERNEL)
    eligible = kernels[(from_ops | (by_name & ~_own_kernels(ev, kernels[by_name & ~from_ops])))
                       & ~kernels["s_name"].str.contains(NOT_MATMUL_KERNEL)]
    names = eligible["s_name"]
    is_tc = (names.str.contains(TENSOR_CORE) & ~names.str.contains(NOT_TENSOR_CORE)) | names.str.contains(MATRIX_CORE)
    return eligible, is_tc


#: Launch calls of one kernel (a graph launch replays a captured graph, from no op).
DIRECT_LAUNCHES = tuple(x for x in KERNEL_LAUNCH_APIS if "Graph" not in x)


def _own_kernels(ev: RankEvents, kernels: pd.DataFrame) -> pd.Series:
    """Per row of ``kernels`` (rows of ``ev.gpu``), whether it is the user's
    own kernel, which no dtype setting of PyTorch reaches (a CUDA extension's
    hand-written GEMM, ``gemm_gpu_o4_kernel``: autocast and TF32 change
    aten's ops, not it): its kernel launch call (not a graph launch: a
    CUDA graph's replay is no op either) is in the trace and runs inside
    no recorded op, on a rank where other kernels' launches do run inside
    ops (the trace records the ops PyTorch launches from). Where it does
    not, or the launch is not recorded, nothing can be told: False."""
    out = pd.Series(False, index=kernels.index, dtype=bool)
    cpu = ev.cpu
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    if kernels.empty or ops.empty:
        return out
    runtime = runtime_calls(ev)
    direct = runtime[runtime["s_name"].isin(DIRECT_LAUNCHES) & (runtime["correlation"] > 0)]
    from_ops = launched_from(ev, ops)
    if not from_ops["correlation"].isin(direct["correlation"]).any():
        return out
    launched = kernels["correlation"].isin(direct["correlation"])
    inside = kernels["correlation"].isin(from_ops["correlation"])
    return (launched & ~inside).astype(bool)


def _low_precision(eligible: pd.DataFrame, is_tc: pd.Series) -> pd.Series:
    """Per GEMM/convolution kernel of ``eligible``: not on Tensor or matrix
    cores, but already in 16 or 8 bits by its name
    (:data:`~.precision.LOW_PRECISION`: an fp16 Winograd convolution, an FP8
    grouped GEMM whose name says nothing of Tensor Cores). Autocast moves
    nothing there: the lever is the kernel or solver, not the dtype."""
    if eligible.empty:
        return pd.Series([], dtype=bool)
    low = pd.Series(name_test(eligible["s_name"], lower_precision), index=eligible.index, dtype=bool)
    return low & ~is_tc.fillna(False).astype(bool)


def stall_excess(names: pd.Series, dur: np.ndarray) -> np.ndarray:
    """Per kernel (µs): how far it ran past the median of the kernels of its
    name where it ran :data:`~.transfers.STALL_FACTOR` times that median or
    longer, at least :data:`~.transfers.STALL_MIN_US` past it, among at least
    :data:`~.transfers.STALL_MIN_CALLS` calls; 0 elsewhere. Calls of one GEMM
    kernel do the same arithmetic on similar shapes, so 10x the median is a
    stall (a preempted or throttled GPU, a first call that loaded its
    module), not matrix math: a faster precision does not shorten it (a
    field run: an fp32 sgemm of 9.7, 9.5 and 2,440.7 µs on the same inputs)."""
    from .transfers import STALL_FACTOR, STALL_MIN_CALLS, STALL_MIN_US

    dur = np.asarray(dur, dtype=float)
    if not len(dur):
        return np.zeros(0)
    frame = pd.DataFrame({"n": names.astype(str).to_numpy(), "d": dur})
    by = frame.groupby("n", sort=False)["d"]
    median, calls = by.transform("median").to_numpy(float), by.transform("size").to_numpy()
    stalled = (calls >= STALL_MIN_CALLS) & (dur >= STALL_FACTOR * median) & (dur - median >= STALL_MIN_US)
    return np.where(stalled, dur - median, 0.0)


@shared
def _all_matmuls(ev: RankEvents) -> Tuple[pd.DataFrame, pd.Series]:
    """:func:`_matmuls` of all the rank's computation kernels, made once per
    rank (:func:`~.events.shared`) for :func:`tensor_core_use` (the analyzed
    windows' rows) and the replay's Tensor-Core edit (every row): the 286 MB
    benchmark rank classified them twice (0.19 s under the profiler), with a
    column ``matmul_us``: the duration less its stall (:func:`stall_excess`),
    the time a precision change acts on. Callers must not change them."""
    kernels = ev.gpu[ev.gpu["s_cat"].eq("kernel") & ev.gpu["kernel_type"].eq("COMPUTATION")]
    if not len(kernels):
        return kernels.assign(matmul_us=pd.Series([], dtype=float)), pd.Series([], dtype=bool)
    eligible, is_tc = _matmuls(ev, kernels)
    dur = eligible["dur"].to_numpy(dtype=float)
    return eligible.assign(matmul_us=dur - stall_excess(eligible["s_name"], dur)), is_tc


def matmuls_without_tensor_cores(ev: RankEvents) -> Tuple[pd.DataFrame, float]:
    """The rank's GEMM/convolution kernels that run without Tensor Cores or
    matrix cores in float32 (rows of ``ev.gpu``, the whole trace): what
    bf16/fp16 autocast would move onto them (the replay's ``matmuls on Tensor
    Cores``; kernels already in 16 or 8 bits are not, :func:`_low_precision`),
    with their ``matmul_us``; and the share (%) of all its GEMM/convolution
    kernel time (stalls left out: :func:`stall_excess`) on Tensor Cores or
    already in lower precision (100 when it has none)."""
    eligible, is_tc = _all_matmuls(ev)
    if eligible.empty:
        return eligible, 100.0
    tc = is_tc.fillna(False).to_numpy(dtype=bool) | _low_precision(eligible, is_tc).to_numpy(dtype=bool)
    total = float(eligible["matmul_us"].sum())
    share = 100 * float(eligible["matmul_us"].to_numpy()[tc].sum()) / total if total > 0 else 100.0
    return eligible[~tc], share


#: Dense 16-bit Tensor-Core (matrix-core) peak over plain fp32 peak, by device name part (vendors'
#: datasheets, no sparsity; fp16 where the device has no bf16): how much faster a GEMM can run after
#: autocast. The first match wins. H100/H200 989/67 TFLOP/s; A100 312/19.5; V100 125/15.7 (fp16);
#: T4 65/8.1; A10 125/31.2; A40 150/37.4; L4 121/30.3; L40S 362/91.6; L40 181/90.5; B200 2250/80;
#: MI300X 1307/163; MI250X 383/47.9; MI210 181/22.6. Measured on an H200 (bench/record_cuda.py
#: collect-amp): fp32 SIMT GEMMs 26.0 ms a step, the same GEMMs in bf16 1.4 ms (18.6x).
TENSOR_CORE_SPEEDUP: Sequence[Tuple[re.Pattern, float]] = tuple(
    (re.compile(p, re.IGNORECASE), k) for p, k in (
        (r"H100|H200|H800|GH200", 14.8), (r"B200|B100|GB200", 28.0), (r"A100|A800|A30\b", 16.0),
        (r"V100|TITAN V|T4\b", 8.0), (r"A10G?\b|A40\b|L4\b|L40S", 4.0), (r"L40\b", 2.0),
        (r"MI300|MI325|MI250|MI210", 8.0),
        # where no name above matches (a board name such as "PG509-210", an unlisted workstation or
        # GeForce card), the compute capability (:func:`capability_name`), at the class's slowest
        # board so a prediction does not overstate: Volta 8 (V100 125/15.7); Turing 4 (GeForce
        # RTX 20: fp16 with fp32 accumulate at half rate, 53.8/13.4); GA100 16 (A30 165/10.3);
        # GA102/AD10x/GB20x 2 (GeForce RTX 3090/4090/5090: 71/35.6, 165/82.6, 209/104.8);
        # Hopper 14.8 (H100 PCIe 756/51); Blackwell data centre 28 (B200).
        (r"^compute capability 7\.0$", 8.0), (r"^compute capability 7\.5$", 4.0),
        (r"^compute capability 8\.0$", 16.0), (r"^compute capability (8\.[6-9]|12\.\d+)$", 2.0),
        (r"^compute capability 9\.0$", 14.8), (r"^compute capability 10\.\d+$", 28.0),
    ))


def capability_name(compute_major: Optional[int], compute_minor: Optional[int]) -> List[str]:
    """``["compute capability 8.0"]`` for an NVIDIA GPU's ``deviceProperties``
    ``computeMajor``/``computeMinor`` (None on AMD, :func:`compute_major`), else
    ``[]``: put after a rank's device names, the device tables
    (:data:`TENSOR_CORE_SPEEDUP`, :data:`~.pinned_copy.PCIE_GENERATION`) fall
    back on it where no name matches (:func:`by_device_name` tries names in order)."""
    if compute_major is None:
        return []
    return [f"compute capability {compute_major}.{compute_minor or 0}"]


V = TypeVar("V")


def by_device_name(table: Sequence[Tuple[re.Pattern, Optional[V]]], device_names: Sequence[str]) -> Optional[V]:
    """The value of the first ``(pattern, value)`` of ``table`` matching a
    device name, for the first of ``device_names`` that has one (a matching
    entry whose value is None says the device is known to have none); None
    when no name has one."""
    for name in device_names:
        for pattern, value in table:
            if pattern.search(str(name)):
                return value  # None too: the device is known, and known to have none
    return None


def tensor_core_speedup(device_names: Sequence[str]) -> Optional[float]:
    """:data:`TENSOR_CORE_SPEEDUP` of the first device name that has one; None when none does."""
    return by_device_name(TENSOR_CORE_SPEEDUP, device_names)


#: 16-bit GEMM ops checked for dimensions that are not multiples of 8.
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
_HALF = re.compile(r"c10::Half|c10::BFloat16|\bHalf\b|BFloat16")


def input_dims(value) -> List[List[int]]:
    """One op's ``Input Dims`` as HTA holds them (a list, or its JSON text):
    the shapes that are lists of ints (``[]`` for a non-tensor input is kept;
    anything else, or unparsable text, is left out)."""
    dims = value
    if isinstance(value, str):
        try:
            dims = json.loads(value) if value.startswith("[") else []
        except ValueError:
            return []
    if not isinstance(dims, (list, tuple)):
        return []
    return [list(d) for d in dims if isinstance(d, (list, tuple)) and all(isinstance(x, int) for x in d)]


def _has_shapes(value) -> bool:
    """True when an ``Input Dims`` value holds a list of shapes (``[[...``)."""
    if isinstance(value, str):
        return value.startswith("[[")
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], (list, tuple))


#: Tensor Cores load 16-byte rows: K and N multiples of 8 16-bit elements
#: (NVIDIA, "Matrix Multiplication Background", Tensor Core requirements).
ALIGN = 8


def gemm_k_n(name: str, dims: List[List[int]]) -> Tuple[Optional[int], Optional[int]]:
    """The dimensions of a GEMM op that set its operands' row length: ``K``
    (the reduction) and ``N`` (the output columns), from ``Input Dims``:
    ``linear`` (input ``[..., K]``, weight ``[N, K]``), ``mm``/``bmm``/``matmul``
    (``[..., M, K]`` x ``[..., K, N]``), ``addmm``/``baddbmm`` (bias, then the
    two). ``M``, the rows (tokens, batch × sequence), is no row length of any
    operand: it is never a leading dimension and needs no alignment. None
    where the shapes do not tell (``N`` of a matrix-vector product)."""
    first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    if len(dims) < first + 2 or not dims[first] or not dims[first + 1]:
        return None, None
    a, b = dims[first], dims[first + 1]
    k = a[-1]
    if name == "aten::linear":
        return k, (b[0] if len(b) == 2 else None)
    return k, (b[-1] if len(b) >= 2 else None)


def misaligned(name: str, dims: List[List[int]]) -> bool:
    """True when the GEMM op ``name``'s ``K`` or ``N`` (:func:`gemm_k_n`) is
    not a multiple of :data:`ALIGN`, the dimensions Tensor Cores need
    aligned; the token count ``M`` does not count (PyTorch's
    ``MatMulDimInFP16Pattern`` tests every last-two dimension, ``M`` too)."""
    return any(x is not None and x % ALIGN for x in gemm_k_n(name, dims))


def padding_bound(name: str, dims: List[List[int]]) -> float:
    """At most which share of a misaligned 16-bit GEMM's kernel time padding
    ``K`` and ``N`` to multiples of :data:`ALIGN` could save (0 to 1), a bound:
    since cuBLAS 11 (and on ROCm) a misaligned GEMM still runs on Tensor
    Cores, loading ``g = gcd(K, N, 8)`` elements per instruction instead of
    8 (NVIDIA, "Matrix Multiplication Background": alignment is a
    requirement before cuBLAS 11.0, an efficiency gain after). A kernel
    bound by nothing but those loads runs at most ``8 / g`` times slower than
    aligned, while the padded GEMM does ``padded / actual`` times the work
    (``K·N`` rounded up, over ``K·N``): padding saves at most
    ``1 - (g / 8) · padded / actual`` of the time, 0 where padding adds more
    work than narrow loads cost (``N = 1``: a vector padded to 8 columns)."""
    known = [x for x in gemm_k_n(name, dims) if x]
    if not known:
        return 0.0
    g = math.gcd(ALIGN, *known)
    actual = float(np.prod(known))
    padded = float(np.prod([-(-x // ALIGN) * ALIGN for x in known]))
    return max(0.0, 1.0 - (g / ALIGN) * padded / actual)


def add_layout_conversions(out: TensorCoreUse, ev: RankEvents, w: np.ndarray, top: int = 3) -> TensorCoreUse:
    """Fill the layout-conversion fields of ``out`` over the GPU windows ``w``
    (``(n, 2)`` µs, the analyzed steps): the kernels named by
    :data:`LAYOUT_CONVERSION_KERNEL`, their time (µs) and count per step,
    the largest by time, and whether every convolution op of the trace
    is 3-D (``conv3d_only``). Returns ``out``."""
    n = len(w)
    kernels = ev.gpu[ev.gpu["s_cat"].eq("kernel")]
    if kernels.empty:
        return out
    hit = kernels[name_test(kernels["s_name"], lambda s: LAYOUT_CONVERSION_KERNEL.search(s) is not None)]
    hit = in_windows(hit, w)
    if hit.empty:
        return out
    out.layout_conversion_us_per_step = per_step(float(hit["dur"].sum()), n)
    out.layout_conversions_per_step = per_step(len(hit), n)
    out.top_layout_conversion = top_by_time(hit, "dur", top)
    cpu = ev.cpu
    convs = cpu[cpu["s_cat"].eq("cpu_op") & cpu["s_name"].isin(("aten::conv1d", "aten::conv2d", "aten::conv3d"))]
    names = set(convs["s_name"].tolist())
    out.conv3d_only = names == {"aten::conv3d"}
    return out


def _is_elementwise(name: str) -> bool:
    return (ELEMENTWISE_KERNEL.search(name) is not None and NOT_ELEMENTWISE.search(name) is None
            and ELIGIBLE_KERNEL.search(name) is None)


def elementwise_work(ev: RankEvents, w: np.ndarray, top: int = 3) -> ElementwiseWork:
    """The rank's eager elementwise kernels (:data:`ELEMENTWISE_KERNEL`) in
    the GPU windows ``w`` (``(n, 2)`` µs), their chains (two or more back to
    back on one stream in start order, no other kernel between, within one
    step) and what
    fusing each chain saves when bandwidth-bound: its time times
    ``(2k - 2) / 3k`` for ``k`` kernels (:class:`~hta_report.model.ElementwiseWork`)."""
    out = ElementwiseWork()
    n = len(w)
    kernels = ev.gpu[ev.gpu["s_cat"].eq("kernel")]
    kernels = in_windows(kernels, w)
    if kernels.empty:
        return out
    kernels = kernels.sort_values(["stream", "ts"], kind="stable")
    is_ew = name_test(kernels["s_name"], _is_elementwise)
    if not is_ew.any():
        return out
    dur = kernels["dur"].to_numpy(float)
    stream = kernels["stream"].to_numpy()
    step = np.searchsorted(np.asarray(w, dtype=float)[:, 0], kernels["ts"].to_numpy(float), side="right") \
        if n else np.zeros(len(kernels), dtype=np.int64)
    out.us_per_step = per_step(float(dur[is_ew].sum()), n)
    # runs of consecutive elementwise kernels on one stream within one step (a step's end ends a chain)
    brk = np.ones(len(kernels), dtype=bool)
    brk[1:] = (~is_ew[1:]) | (~is_ew[:-1]) | (stream[1:] != stream[:-1]) | (step[1:] != step[:-1])
    run = np.cumsum(brk)
    ids, first, size = np.unique(run[is_ew], return_index=True, return_counts=True)
    time = np.bincount(run[is_ew], weights=dur[is_ew])[ids]
    chained = size >= 2
    out.chains_per_step = per_step(int(chained.sum()), n)
    out.chained_us_per_step = per_step(float(time[chained].sum()), n)
    k = size[chained].astype(float)
    out.fusible_us_per_step = per_step(float((time[chained] * (2 * k - 2) / (3 * k)).sum()), n)
    out.longest_chain = int(size.max()) if len(size) else 0
    out.top = top_by_time(kernels[is_ew], "dur", top)
    return out


def add_misaligned_gemms(out: TensorCoreUse, ev: RankEvents, w: np.ndarray, examples: int = 3) -> TensorCoreUse:
    """Fill the misaligned 16-bit GEMM fields of ``out`` over the host windows
    ``w``: 16-bit GEMM ops per step, those whose ``K`` or ``N`` is not a
    multiple of 8 (:func:`misaligned`), their kernels' time per step and the
    most padding could save of it (:func:`padding_bound`), µs."""
    n = len(w)
    cpu = ev.cpu
    if "input_dims" not in cpu.columns:
        return out
    ops = cpu[cpu["s_cat"].eq("cpu_op")]
    out.shapes_recorded = any(map(_has_shapes, ops["input_dims"].to_numpy()))
    gemm = in_windows(ops[ops["s_name"].isin(GEMM_OPS)], w)
    if gemm.empty:
        return out
    half = gemm[gemm["input_type"].astype(str).str.contains(_HALF)]
    bad_rows: List[Tuple[str, str]] = []
    mask, shares = [], []
    for name, text in zip(half["s_name"], half["input_dims"]):
        dims = input_dims(text)
        bad = misaligned(str(name), dims)
        mask.append(bad)
        if bad:
            shares.append(padding_bound(str(name), dims))
            if len(bad_rows) < examples:
                k, n_ = gemm_k_n(str(name), dims)
                bad_rows.append((str(name), f"{dims} (K={k}, N={n_})"))
    bad = half[np.array(mask, dtype=bool)] if len(half) else half
    out.half_gemm_ops_per_step = per_step(len(half), n)
    out.misaligned_ops_per_step = per_step(len(bad), n)
    kernels = launched_from(ev, bad) if len(bad) else bad
    out.misaligned_us_per_step = per_step(float(kernels["dur"].sum()) if len(kernels) else 0.0, n)
    share = np.array(shares)
    saved, seen = 0.0, pd.Index([])
    for bound in sorted(set(share.tolist()), reverse=True):  # a kernel of nested GEMM ops counts once, at its largest
        mine = launched_from(ev, bad[share == bound])
        mine = mine[~mine.index.isin(seen)]
        saved += bound * float(mine["dur"].sum())
        seen = seen.union(mine.index)
    out.misaligned_bound_us_per_step = per_step(saved, n)
    out.misaligned_examples = [f"{name} {dims}" for name, dims in bad_rows]
    return out
