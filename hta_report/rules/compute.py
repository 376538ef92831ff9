"""C12: GEMMs and convolutions not on Tensor Cores."""
from __future__ import annotations

from ..model import TENSOR_CORES_STEP, AnalysisResult, RankResult
from ..names import short_names
from ..replay_terms import EditLabel
from .base import (DOCS_AMP, GENERAL, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step,
                   pct_of_step, per, rule, worst_first)
from .config import AdviceConfig
from .wording import specific


def _major(r: RankResult) -> int:
    """The rank's ``computeMajor`` (-1 when the trace has none)."""
    major = r.tensor_cores.compute_major
    return -1 if major is None else major


def _device(r: RankResult) -> str:
    """The rank's GPU as the evidence names it: ``computeMajor N`` on NVIDIA,
    never on AMD (ROCm's ``computeMajor`` is no compute capability)."""
    if r.tensor_cores.amd_matrix_cores is not None:
        return "AMD, matrix cores" if r.tensor_cores.amd_matrix_cores else "AMD"
    tc = r.tensor_cores
    if tc.capability_from_kernels:
        return f"no deviceProperties; compute capability {tc.compute_major}.{tc.compute_minor or 0} or newer, from kernel names"
    return f"computeMajor {tc.compute_major}"


def target_dtype(r: RankResult) -> str:
    """The 16-bit precision the rank's GPU runs on its matrix units to move
    float32 matrix math to (``TensorCoreUse.matrix_dtypes``): ``bfloat16``
    where it has it (Ampere, Hopper, CDNA2 and newer), else ``float16`` (Volta,
    Turing), else ``""`` (no 16-bit matrix units, or a GPU the trace does not describe)."""
    dtypes = r.tensor_cores.matrix_dtypes
    return "bfloat16" if "bfloat16" in dtypes else "float16" if "float16" in dtypes else ""


def _has_tensor_cores(r: RankResult, cfg: AdviceConfig) -> bool:
    """A GPU with 16-bit matrix units (:func:`target_dtype`), NVIDIA from
    ``computeMajor`` ``tensor_core_min_major`` on."""
    if r.tensor_cores.amd_matrix_cores is not None:
        return bool(r.tensor_cores.amd_matrix_cores) and bool(target_dtype(r))
    return _major(r) >= cfg.tensor_core_min_major and bool(target_dtype(r))


def _tensor_core_evidence(r: RankResult) -> str:
    tc = r.tensor_cores
    shown = tc.top_non_tensor_core[:2]
    labels = short_names([k.name for k in shown])
    top = "; ".join(f"{labels[k.name]} ({ms(k.total_us)} in the trace)" for k in shown)
    low = (f", {ms(tc.low_precision_us_per_step)} already in 16 or 8 bits off Tensor Cores (no dtype to move)"
           if tc.low_precision_us_per_step > 0 else "")
    share = (f" ({tc.eligible_ops_kernel_pct:.0f} % of kernel time is launched by Tensor-Core-eligible ops, as "
             "the TensorBoard profiler counts it)" if tc.eligible_ops_kernel_pct else "")
    units = f"; the GPU runs {', '.join(tc.matrix_dtypes)} on its matrix units" if tc.matrix_dtypes else ""
    return (f"rank {r.rank} ({_device(r)}): GEMM/convolution kernels "
            f"{ms(tc.eligible_us_per_step)} {per(r)}{share}, {tc.tensor_core_pct:.1f} % on Tensor Cores{low}{units}; "
            f"largest in float32: {top}")


def non_tensor_core_us(r: RankResult) -> float:
    """GEMM/convolution kernel time per step in float32 off Tensor Cores (µs):
    the upper bound of what lower precision could save (kernels already in
    16 or 8 bits are not counted: there is no dtype to move them to)."""
    tc = r.tensor_cores
    return max(0.0, tc.eligible_us_per_step - tc.tensor_core_us_per_step - tc.low_precision_us_per_step)


def covered_pct(r: RankResult) -> float:
    """Share (%) of the rank's GEMM/convolution kernel time on Tensor Cores or already in 16/8 bits."""
    tc = r.tensor_cores
    if tc.eligible_us_per_step <= 0:
        return 100.0
    return 100 * (tc.tensor_core_us_per_step + tc.low_precision_us_per_step) / tc.eligible_us_per_step


def _fix(r: RankResult) -> str:
    """The fix toward the precision the rank's GPU runs fastest on its matrix units, for its workload."""
    dtype, tf32 = target_dtype(r), "tf32" in r.tensor_cores.matrix_dtypes
    inference = r.workload.kind in ("inference", "graph-capture")
    if inference:
        text = (f"model = model.to(torch.{dtype})   # 16-bit weights and activations (no loss scaling at inference)"
                if dtype == "bfloat16" else
                "model = model.half()   # float16, what this GPU's Tensor Cores run; check the outputs' range")
    elif dtype == "bfloat16":
        text = ("with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n"
                "    loss = loss_fn(model(x), y)")
    else:
        text = ("scaler = torch.amp.GradScaler(\"cuda\")   # float16, what this GPU's Tensor Cores run\n"
                "with torch.autocast(device_type=\"cuda\", dtype=torch.float16):\n"
                "    loss = loss_fn(model(x), y)\n"
                "scaler.scale(loss).backward(); scaler.step(opt); scaler.update()")
    if tf32:
        text += ("\n# or keep float32 and let matmuls use TF32 Tensor Cores:\n"
                 "torch.set_float32_matmul_precision(\"high\")")
    return specific(text)


@rule("tensor-cores-unused", "C12", "GEMMs and convolutions do not use Tensor Cores",
      "TensorBoard profiler (0 % on computeMajor >= 7); XProf 16-bit share < 10 %",
      lambda c: (f"computeMajor >= {c.tensor_core_min_major} (NVIDIA) or AMD matrix cores, and Tensor Core share "
                 f"of GEMM/convolution kernel time < {c.tensor_core_pct:g} % (kernels already in 16 or 8 bits "
                 "count as covered)"), DOCS_AMP, phase=GENERAL,
      needs=(TENSOR_CORES_STEP,), edit=EditLabel.TENSOR_CORES,
      description=("On GPUs whose matrix units run 16-bit math (NVIDIA Tensor Cores from Volta, `computeMajor` "
                   "7; AMD matrix cores from MI100; the table: docs/DEVICES.md), the share of GEMM and "
                   "convolution kernel time that runs on them or is already in 16 or 8 bits (an FP8 grouped "
                   "GEMM, an fp16 Winograd convolution: no dtype to move). The gain bound is the float32 time "
                   "off them. The fix names the precision the device has: bfloat16 from Ampere and CDNA2, "
                   "float16 with loss scaling on Volta and Turing, TF32 where the device has it."),
      fix=('Run matrix math in 16 bits: `with torch.autocast(device_type="cuda", '
           "dtype=torch.bfloat16):` (Ampere or newer; Volta and Turing: `float16` with "
           "`torch.amp.GradScaler`), or keep float32 and allow TF32: "
           '`torch.set_float32_matmul_precision("high")`.'))
def tensor_cores_unused(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C12: on GPUs with 16-bit matrix units (:func:`_has_tensor_cores`),
    GEMM/convolution kernels spend less than ``tensor_core_pct`` of their time
    on Tensor Cores (or MFMA) or in 16/8-bit kernels (:func:`covered_pct`).
    The gain bound is their float32 time off them (:func:`non_tensor_core_us`),
    claimed from the step's kernel time (the ``compute`` pool, which C12 owns;
    C13's misaligned GEMMs and C22's zero_grad kernels claim theirs first).
    The pool does not tell kernels apart: the ledger keeps the claims within
    the kernel time, not a misaligned GEMM that runs without Tensor Cores out
    of both. The fix names the precision the worst rank's GPU has
    (:func:`target_dtype`)."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    known = [r for r in gpu if r.tensor_cores.compute_major is not None or r.tensor_cores.amd_matrix_cores is not None]
    ranks = [r for r in known if r.tensor_cores.eligible_us_per_step > 0]
    if not ranks:
        if not known:
            return not_checked("no NVIDIA deviceProperties.computeMajor or AMD GPU in the traces")
        return not_checked("no GEMM or convolution kernels in the analyzed steps")
    units = [r for r in ranks if _has_tensor_cores(r, cfg)]
    if not units:
        return fine(f"the GPU has no 16-bit matrix units ({_device(ranks[0])}): no precision to move to")
    hits = worst_first([r for r in units if covered_pct(r) < cfg.tensor_core_pct], non_tensor_core_us)
    if not hits:
        return fine(f"Tensor Core share of GEMM/convolution time, or already 16/8-bit, at least "
                    f"{min(covered_pct(r) for r in units):.0f} % ({_device(max(units, key=_major))})")
    c = claim(fired, hits, ["compute"], non_tensor_core_us, "GEMM/convolution kernels without Tensor Cores")
    worst = c.worst
    dtype = target_dtype(worst)
    how = f"{dtype} {'weights' if worst.workload.kind in ('inference', 'graph-capture') else 'autocast'}" + \
        (" or TF32" if "tf32" in worst.tensor_cores.matrix_dtypes else "")
    return c.verdict(cfg, f"Use Tensor Cores ({how}): {pct_of_step(c.us(worst), worst):.0f} % "
                          f"{of_step(worst)} is float32 GEMM/convolution without them",
                     evidence_lines(c.hits, _tensor_core_evidence), _fix(worst))


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
