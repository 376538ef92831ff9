"""Tensor Core use of GEMM and convolution kernels (TensorBoard profiler's check)."""
from __future__ import annotations

import json
import re
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from ..model import NamedTime, TensorCoreUse
from .events import RankEvents, is_step
from .. import intervals
from .regions import in_windows, launched_from, per_step

#: CPU ops whose kernels can run on Tensor Cores (TensorBoard's list: mm, addmm, bmm, linear, conv*).
ELIGIBLE_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::conv", "aten::_convolution", "aten::cudnn_convolution")
#: Kernel names of GEMMs and convolutions (cuBLAS/CUTLASS GEMMs, cuDNN implicit-GEMM,
#: FFT and Winograd convolutions); ``fbgemm`` is FBGEMM's library prefix, not a GEMM.
ELIGIBLE_KERNEL = re.compile(r"(?<!fb)gemm|gemv|cutlass|xmma|[sh]\d*cudnn|convolve|conv2d|conv3d|convolution|fprop|dgrad|"
                             r"wgrad|winograd|fft2d|implicit_gemm", re.IGNORECASE)
#: Kernels that GEMM/convolution ops (or cuDNN) launch but that do no matrix math:
#: batch norm, layout and dtype conversions, padding, elementwise epilogues,
#: reductions and split-K reductions, pooling, softmax.
NOT_MATMUL_KERNEL = re.compile(r"bn_fw|bn_bw|batch_?norm|nchwToNhwc|nhwcToNchw|scalePacked|computeOffsets|"
                               r"elementwise|reduce_kernel|splitKreduce|pooling|softmax|im2col|col2im|"
                               r"fill|copy|cast|transpose_|permute", re.IGNORECASE)
#: Name parts of Tensor Core kernels: TensorBoard's allowlist plus CUTLASS's ``tensorop`` and cuDNN's ``tensor16x8``.
TENSOR_CORE = re.compile(r"884|1688|16816|hmma|xmma|gmma|wgmma|tensorop|tensor16x8", re.IGNORECASE)
_NOT_NVIDIA = re.compile(r"AMD|Radeon|Instinct|\bMI\d", re.IGNORECASE)


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


def compute_major(meta: dict, device: Optional[int] = None) -> Optional[int]:
    """``deviceProperties[].computeMajor`` of ``device`` (else the largest
    recorded); None when absent or when the device is not an NVIDIA GPU."""
    props = meta.get("deviceProperties") if isinstance(meta, dict) else None
    if not isinstance(props, list):
        return None
    cands = [p for p in props if isinstance(p, dict) and isinstance(p.get("computeMajor"), int)]
    if not cands or any(_NOT_NVIDIA.search(str(p.get("name", ""))) for p in cands):
        return None
    mine = [p for p in cands if p.get("id") == device]
    if mine:
        return int(mine[0]["computeMajor"])
    return max(int(p["computeMajor"]) for p in cands)


def tensor_core_use(ev: RankEvents, meta: dict, w: np.ndarray, top: int = 5) -> TensorCoreUse:
    """Eligible and Tensor Core kernel time per analyzed step (µs) of one rank.

    Eligible kernels are launched from a GEMM/convolution op
    (:data:`ELIGIBLE_OPS`) or named like a GEMM or convolution
    (:data:`ELIGIBLE_KERNEL`), and are not one of the helper kernels such ops
    launch (:data:`NOT_MATMUL_KERNEL`: batch norm, layout conversions,
    elementwise epilogues...): a batch-norm kernel is not a convolution
    without Tensor Cores."""
    n = len(w)
    kernels = ev.gpu[ev.gpu["s_cat"].eq("kernel") & ev.gpu["kernel_type"].eq("COMPUTATION")]
    device = int(kernels["pid"].iloc[0]) if len(kernels) and str(kernels["pid"].iloc[0]).isdigit() else None
    out = TensorCoreUse(compute_major=compute_major(meta, device))
    kernels = in_windows(kernels, w)
    if kernels.empty:
        return out
    out.eligible_ops_kernel_pct = tb_eligible_share(ev, w)
    cpu = ev.cpu
    ops = cpu[cpu["s_cat"].eq("cpu_op") & cpu["s_name"].str.startswith(ELIGIBLE_OPS)]
    from_ops = launched_from(ev, ops)
    eligible = kernels[(kernels["correlation"].isin(from_ops["correlation"])
                        | kernels["s_name"].str.contains(ELIGIBLE_KERNEL))
                       & ~kernels["s_name"].str.contains(NOT_MATMUL_KERNEL)]
    if eligible.empty:
        return out
    is_tc = eligible["s_name"].str.contains(TENSOR_CORE)
    total = float(eligible["dur"].sum())
    tc = float(eligible[is_tc]["dur"].sum())
    out.eligible_us_per_step = per_step(total, n)
    out.tensor_core_us_per_step = per_step(tc, n)
    out.tensor_core_pct = 100 * tc / total if total else 0.0
    rest = eligible[~is_tc].groupby("s_name")["dur"].agg(["size", "sum"]).sort_values("sum", ascending=False).head(top)
    out.top_non_tensor_core = [NamedTime(name=str(k), count=int(r["size"]), total_us=float(r["sum"]))
                               for k, r in rest.iterrows()]
    return out


#: 16-bit GEMM ops checked for dimensions that are not multiples of 8.
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
_HALF = re.compile(r"c10::Half|c10::BFloat16|\bHalf\b|BFloat16")


def _dims(value) -> List[List[int]]:
    """``Input Dims`` as HTA holds them (a list, or its JSON text)."""
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


def misaligned(dims: List[List[int]]) -> bool:
    """True when an input among the first two has a last-two dimension that is
    not a multiple of 8 (PyTorch's ``MatMulDimInFP16Pattern``)."""
    return any(any(x % 8 for x in d[-2:]) for d in dims[:2] if d)


def add_misaligned_gemms(out: TensorCoreUse, ev: RankEvents, w: np.ndarray, examples: int = 3) -> TensorCoreUse:
    """Fill the misaligned 16-bit GEMM fields of ``out`` over the host windows ``w``."""
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
    mask = []
    for name, text in zip(half["s_name"], half["input_dims"]):
        bad = misaligned(_dims(text))
        mask.append(bad)
        if bad and len(bad_rows) < examples:
            bad_rows.append((str(name), str(_dims(text))))
    bad = half[np.array(mask, dtype=bool)] if len(half) else half
    out.half_gemm_ops_per_step = per_step(len(half), n)
    out.misaligned_ops_per_step = per_step(len(bad), n)
    kernels = launched_from(ev, bad) if len(bad) else bad
    out.misaligned_us_per_step = per_step(float(kernels["dur"].sum()) if len(kernels) else 0.0, n)
    out.misaligned_examples = [f"{name} {dims}" for name, dims in bad_rows]
    return out
