"""C12: GEMMs and convolutions not on Tensor Cores."""
from __future__ import annotations

from ..model import TENSOR_CORES_STEP, AnalysisResult, RankResult
from ..names import short_names
from .base import (DOCS_AMP, GENERAL, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step,
                   pct_of_step, per, rule, worst_first)
from .config import AdviceConfig


def _major(r: RankResult) -> int:
    """The rank's ``computeMajor`` (-1 when the trace has none)."""
    major = r.tensor_cores.compute_major
    return -1 if major is None else major


def _device(r: RankResult) -> str:
    """The rank's GPU as the evidence names it: ``computeMajor N`` on NVIDIA,
    never on AMD (ROCm's ``computeMajor`` is no compute capability)."""
    if r.tensor_cores.amd_matrix_cores is not None:
        return "AMD, matrix cores" if r.tensor_cores.amd_matrix_cores else "AMD"
    return f"computeMajor {r.tensor_cores.compute_major}"


def _has_tensor_cores(r: RankResult, cfg: AdviceConfig) -> bool:
    """NVIDIA with ``computeMajor`` >= ``tensor_core_min_major``, or AMD with matrix cores."""
    return bool(r.tensor_cores.amd_matrix_cores) or _major(r) >= cfg.tensor_core_min_major


def _tensor_core_evidence(r: RankResult) -> str:
    tc = r.tensor_cores
    shown = tc.top_non_tensor_core[:2]
    labels = short_names([k.name for k in shown])
    top = "; ".join(f"{labels[k.name]} ({ms(k.total_us)} in the trace)" for k in shown)
    share = (f" ({tc.eligible_ops_kernel_pct:.0f} % of kernel time is launched by Tensor-Core-eligible ops, as "
             "the TensorBoard profiler counts it)" if tc.eligible_ops_kernel_pct else "")
    return (f"rank {r.rank} ({_device(r)}): GEMM/convolution kernels "
            f"{ms(tc.eligible_us_per_step)} {per(r)}{share}, {tc.tensor_core_pct:.1f} % on Tensor Cores; "
            f"largest: {top}")


def non_tensor_core_us(r: RankResult) -> float:
    """GEMM/convolution kernel time per step not on Tensor Cores (µs): the
    upper bound of what lower precision could save."""
    tc = r.tensor_cores
    return max(0.0, tc.eligible_us_per_step - tc.tensor_core_us_per_step)


@rule("tensor-cores-unused", "C12", "GEMMs and convolutions do not use Tensor Cores",
      "TensorBoard profiler (0 % on computeMajor >= 7); XProf 16-bit share < 10 %",
      lambda c: (f"computeMajor >= {c.tensor_core_min_major} (NVIDIA) or AMD matrix cores, and Tensor Core share "
                 f"of GEMM/convolution kernel time < {c.tensor_core_pct:g} %"), DOCS_AMP, phase=GENERAL,
      needs=(TENSOR_CORES_STEP,), edit="matmuls on Tensor Cores",
      description=("On NVIDIA GPUs with Tensor Cores (`computeMajor` 7 or more) and AMD GPUs with matrix "
                   "cores (Instinct MI100 or newer; MFMA kernels), the share of GEMM and convolution kernel "
                   "time spent in Tensor Core or matrix-core kernels. The gain bound is their time outside "
                   "them."),
      fix=('Run matrix math in 16 bits: `with torch.autocast(device_type="cuda", '
           "dtype=torch.bfloat16):` (Ampere or newer; Volta and Turing: `float16` with "
           "`torch.amp.GradScaler`), or keep float32 and allow TF32: "
           '`torch.set_float32_matmul_precision("high")`.'))
def tensor_cores_unused(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C12: on NVIDIA GPUs with ``computeMajor`` >= 7 and AMD GPUs with
    matrix cores (``amd_matrix_cores``: ROCm's ``computeMajor`` is the GCN
    architecture, no compute capability), GEMM/convolution kernels spend
    less than ``tensor_core_pct`` of their time in Tensor Core (or MFMA) kernels.
    The gain bound is their non-Tensor-Core time, claimed from the step's
    kernel time (the ``compute`` pool, which C12 owns; C13's misaligned
    GEMMs and C22's zero_grad kernels claim theirs first). The pool does not
    tell kernels apart: the ledger keeps the claims within the kernel time,
    not a misaligned GEMM that runs without Tensor Cores out of both."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    known = [r for r in gpu if r.tensor_cores.compute_major is not None or r.tensor_cores.amd_matrix_cores is not None]
    ranks = [r for r in known if r.tensor_cores.eligible_us_per_step > 0]
    if not ranks:
        if not known:
            return not_checked("no NVIDIA deviceProperties.computeMajor or AMD GPU in the traces")
        return not_checked("no GEMM or convolution kernels in the analyzed steps")
    hits = worst_first([r for r in ranks if _has_tensor_cores(r, cfg)
                        and r.tensor_cores.tensor_core_pct < cfg.tensor_core_pct], non_tensor_core_us)
    if not hits:
        return fine(f"Tensor Core share of GEMM/convolution time at least "
                    f"{min(r.tensor_cores.tensor_core_pct for r in ranks):.0f} % "
                    f"({_device(max(ranks, key=_major))})")
    c = claim(fired, hits, ["compute"], non_tensor_core_us, "GEMM/convolution kernels without Tensor Cores")
    fix = ("with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):   # Ampere or newer\n"
           "    loss = loss_fn(model(x), y)\n"
           "# Volta/Turing: dtype=torch.float16 with torch.amp.GradScaler(\"cuda\")\n"
           "# or keep float32 and allow TF32 matmuls on Ampere or newer:\n"
           "torch.set_float32_matmul_precision(\"high\")")
    worst = c.worst
    return c.verdict(cfg, f"Use Tensor Cores (bf16/fp16 autocast or TF32): {pct_of_step(c.us(worst), worst):.0f} % "
                          f"{of_step(worst)} is GEMM/convolution without them",
                     evidence_lines(c.hits, _tensor_core_evidence), fix)


@rule("misaligned-gemm", "C13", "16-bit GEMMs with dimensions not multiples of 8",
      "PyTorch profiler pattern matcher, performance tuning guide; NVIDIA Matrix Multiplication Background",
      lambda c: "any fp16/bf16 mm/addmm/bmm/linear whose K or N is not a multiple of 8", DOCS_AMP,
      needs=(TENSOR_CORES_STEP,),
      description=("fp16/bf16 GEMM ops (`mm`, `addmm`, `bmm`, `linear`) whose reduction dimension K or "
                   "output columns N are not multiples of 8, the rows Tensor Cores load 16 bytes at a time "
                   "(M, the token count, does not count). The gain bound is the share of their kernels' "
                   "time padding could save: the narrow loads' cost at most, less the padded work. Needs "
                   "`record_shapes=True`."),
      fix=("Pad hidden sizes and the vocabulary to multiples of 8 (64 helps on newer GPUs), e.g. "
           "`vocab_size = (vocab_size + 63) // 64 * 64`."))
def misaligned_gemm(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C13: ``c10::Half``/``c10::BFloat16`` GEMM ops whose ``K`` or ``N`` is
    not a multiple of 8 (:func:`~hta_report.analysis.kernels.misaligned`):
    Tensor Cores load rows of 16 bytes, and ``K`` and ``N`` are the row
    lengths of the operands and the output; ``M`` (tokens, batch ×
    sequence) is no row length, so 559 tokens through a 1024 × 1024 linear
    layer are aligned. The gain is a bound, not the kernels' whole time:
    ``misaligned_bound_us_per_step``, the most padding could save
    (:func:`~hta_report.analysis.kernels.padding_bound`: a misaligned GEMM
    still runs on Tensor Cores since cuBLAS 11, with loads ``8 / g`` times
    narrower at worst, and the padded GEMM does more work). Needs ``record_shapes``."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    ranks = [r for r in gpu if r.tensor_cores.shapes_recorded]
    if not ranks:
        return not_checked("no input shapes in the traces (profile with record_shapes=True)")
    if not any(r.tensor_cores.half_gemm_ops_per_step for r in ranks):
        return not_checked("no fp16/bf16 GEMM ops in the analyzed steps")
    hits = worst_first([r for r in ranks if r.tensor_cores.misaligned_ops_per_step > 0
                        and r.tensor_cores.misaligned_bound_us_per_step > 0],
                       lambda r: r.tensor_cores.misaligned_bound_us_per_step)
    if not hits:
        return fine("every fp16/bf16 GEMM has K and N multiples of 8")
    fix = ("# pad hidden sizes and the vocabulary to multiples of 8 (64 helps on newer GPUs):\n"
           "vocab_size = (vocab_size + 63) // 64 * 64")
    return claim(fired, hits, ["compute"], lambda r: r.tensor_cores.misaligned_bound_us_per_step).verdict(
        cfg, "Pad fp16/bf16 GEMM dimensions to multiples of 8", evidence_lines(hits, _misaligned_evidence), fix)


def _misaligned_evidence(r: RankResult) -> str:
    tc = r.tensor_cores
    return (f"rank {r.rank}: {tc.misaligned_ops_per_step:.0f} of {tc.half_gemm_ops_per_step:.0f} fp16/bf16 GEMM ops "
            f"{per(r)} have K or N not a multiple of 8, their kernels {ms(tc.misaligned_us_per_step)} {per(r)}, "
            f"of which padding could save at most {ms(tc.misaligned_bound_us_per_step)} (a bound); e.g. "
            + "; ".join(tc.misaligned_examples[:2]))
