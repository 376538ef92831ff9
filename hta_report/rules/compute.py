"""C12: GEMMs and convolutions not on Tensor Cores; C34: float32 matmuls on TF32 Tensor Cores;
C35: layout conversions; C36: unfused elementwise kernels."""
from __future__ import annotations

from typing import List

from ..model import TENSOR_CORES_STEP, TF32_TO_16_BIT_SPEEDUP, AnalysisResult, NamedTime, RankResult
from ..names import short_names
from ..replay_terms import EditLabel
from .base import (DOCS_AMP, DOCS_COMPILE, GENERAL, Fired, Verdict, claim, evidence_lines, fine, ms, not_checked, of_step,
                   pct_of_step, per, rule, worst_first)
from .config import AdviceConfig
from .idle import utilization_pct
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
      "TensorBoard profiler (0 % on computeMajor >= 7), XProf (16-bit share < 10 %); here: most of the time off them",
      lambda c: (f"computeMajor >= {c.tensor_core_min_major} (NVIDIA) or AMD matrix cores, Tensor Core share "
                 f"of GEMM/convolution kernel time < {c.tensor_core_pct:g} % (kernels already in 16 or 8 bits "
                 f"count as covered), and the float32 time off them >= {c.tensor_core_min_step_pct:g} % of the "
                 "step"), DOCS_AMP, phase=GENERAL,
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
    low = [r for r in units if covered_pct(r) < cfg.tensor_core_pct]
    hits = worst_first([r for r in low if pct_of_step(non_tensor_core_us(r), r) >= cfg.tensor_core_min_step_pct],
                       non_tensor_core_us)
    if low and not hits:
        return fine(f"float32 GEMM/convolution time off Tensor Cores under {cfg.tensor_core_min_step_pct:g} % "
                    f"of the step (at most {max(pct_of_step(non_tensor_core_us(r), r) for r in low):.2f} %): "
                    "a precision change cannot save more")
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


def tf32_bound_us(r: RankResult) -> float:
    """What bf16 autocast could save of the rank's TF32 GEMM/convolution
    kernel time (µs per step), a bound: the part beyond
    ``1 / TF32_TO_16_BIT_SPEEDUP`` of it (:data:`~hta_report.model.TF32_TO_16_BIT_SPEEDUP`:
    the dense 16-bit Tensor-Core peak is twice the TF32 peak)."""
    return r.tensor_cores.tf32_us_per_step * (1 - 1 / TF32_TO_16_BIT_SPEEDUP)


def _tf32_evidence(r: RankResult) -> str:
    tc = r.tensor_cores
    shown = tc.top_tf32[:2]
    labels = short_names([k.name for k in shown])
    top = "; ".join(f"{labels[k.name]} ({ms(k.total_us)} in the trace)" for k in shown)
    units = f"; the GPU runs {', '.join(tc.matrix_dtypes)} on its matrix units" if tc.matrix_dtypes else ""
    return (f"rank {r.rank} ({_device(r)}): TF32 GEMM/convolution kernels {ms(tc.tf32_us_per_step)} {per(r)} "
            f"({pct_of_step(tc.tf32_us_per_step, r):.0f} % {of_step(r)}), of "
            f"{ms(tc.eligible_us_per_step)} of GEMM/convolution kernels{units}; largest: {top}")


def _tf32_fix(r: RankResult) -> str:
    """bf16 for the rank's workload: autocast in training, bf16 weights at inference."""
    if r.workload.kind in ("inference", "graph-capture"):
        text = ("model = model.to(torch.bfloat16)   # bf16 weights and activations: twice the TF32 Tensor-Core "
                "rate\n# (no loss scaling at inference); check the outputs against float32")
    else:
        text = ("# bf16 matmuls run at twice the TF32 Tensor-Core rate; keep the float32 weights and optimizer:\n"
                "with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):\n"
                "    loss = loss_fn(model(x), y)")
    return specific(text)


@rule("tf32-matmuls", "C34", "Float32 matmuls run on TF32 Tensor Cores at half the 16-bit rate",
      "NVIDIA A100/H100/H200, L40S and GA102 datasheets, AMD MI300X: dense 16-bit Tensor-Core peak is 2x TF32",
      lambda c: (f"TF32 GEMM/convolution kernels at least {c.tf32_pct:g} % of the step, on a GPU with bf16 "
                 "matrix units (not where tensor-cores-unused fired)"), DOCS_AMP, phase=GENERAL,
      needs=(TENSOR_CORES_STEP,), edit=EditLabel.TF32_TO_BF16,
      description=("Float32 GEMMs and convolutions that run on Tensor Cores in TF32 "
                   "(`torch.set_float32_matmul_precision(\"high\")`, `allow_tf32=True`, cuDNN's default for "
                   "convolutions), named by their kernels (`*_tf32f32_*`, `*_tensorop_*_tf32_*`; NVIDIA only: "
                   "AMD's kernel names show no TF32 marker). On every device with TF32 (NVIDIA Ampere and "
                   "newer, GeForce boards too; AMD MI300) the dense bf16/fp16 Tensor-Core rate is twice the "
                   "TF32 rate (docs/DEVICES.md), so bf16 autocast can halve that time. The gain bound is half "
                   "the TF32 kernel time. Where tensor-cores-unused fires on a rank its fix (autocast) moves "
                   "these kernels too, and this rule claims nothing there."),
      fix=('Run matrix math in bf16: `with torch.autocast(device_type="cuda", dtype=torch.bfloat16):` '
           "(training; the weights and optimizer stay float32), or `model.to(torch.bfloat16)` at inference."))
def tf32_matmuls(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C34: on GPUs with bf16 matrix units (:func:`target_dtype`), the TF32
    GEMM/convolution kernels (``TensorCoreUse.tf32_us_per_step``) take at
    least ``tf32_pct`` % of the step. The gain bound is :func:`tf32_bound_us`
    (the 16-bit rate is twice the TF32 rate on every device with TF32),
    claimed from the step's kernel time (the ``compute`` pool, after its owner
    C12, on which it defers: where tensor-cores-unused claimed on a rank, its
    autocast moves these kernels as well and this rule claims nothing there).
    Never toward a precision the device lacks: a rank without bf16 on its
    matrix units (no TF32 either) is fine."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    ranks = [r for r in gpu if r.tensor_cores.eligible_us_per_step > 0]
    if not ranks:
        return not_checked("no GEMM or convolution kernels in the analyzed steps")
    tf32 = [r for r in ranks if r.tensor_cores.tf32_us_per_step > 0]
    if not tf32:
        return fine("no GEMM or convolution kernel runs in TF32")
    units = [r for r in tf32 if target_dtype(r) == "bfloat16"]
    if not units:
        return fine(f"the GPU has no bf16 matrix units to move TF32 matmuls to ({_device(tf32[0])})")
    hits = worst_first([r for r in units if pct_of_step(r.tensor_cores.tf32_us_per_step, r) >= cfg.tf32_pct],
                       tf32_bound_us)
    if not hits:
        worst = max(units, key=lambda r: pct_of_step(r.tensor_cores.tf32_us_per_step, r))
        return fine(f"TF32 GEMM/convolution kernels at most "
                    f"{pct_of_step(worst.tensor_cores.tf32_us_per_step, worst):.0f} % {of_step(worst)}")
    c = claim(fired, hits, ["compute"], tf32_bound_us, "TF32 GEMM/convolution kernels")
    worst = c.worst
    how = "bf16 weights" if worst.workload.kind in ("inference", "graph-capture") else "bf16 autocast"
    return c.verdict(cfg, f"Run float32 matmuls in bf16 ({how}): "
                          f"{pct_of_step(worst.tensor_cores.tf32_us_per_step, worst):.0f} % {of_step(worst)} "
                          "is TF32 GEMM/convolution at half the 16-bit Tensor-Core rate",
                     evidence_lines(c.hits, _tf32_evidence), _tf32_fix(worst))


#: PyTorch's channels-last tutorial (NVIDIA's performance guide: Tensor Core convolutions run in NHWC).
DOCS_CHANNELS_LAST = "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"


def _calls_and_time(shown: List[NamedTime]) -> str:
    """Kernels by their short names, each with its calls and time in the trace."""
    labels = short_names([k.name for k in shown])
    return "; ".join(f"{labels[k.name]} ({k.count} calls, {ms(k.total_us)} in the trace)" for k in shown)


def _layout_evidence(r: RankResult) -> str:
    tc = r.tensor_cores
    top = _calls_and_time(tc.top_layout_conversion[:2])
    return (f"rank {r.rank}: {tc.layout_conversions_per_step:.0f} cuDNN NCHW/NHWC layout conversions {per(r)}, "
            f"{ms(tc.layout_conversion_us_per_step)} ({pct_of_step(tc.layout_conversion_us_per_step, r):.1f} % "
            f"{of_step(r)}): {top}")


def _layout_fix(r: RankResult) -> str:
    fmt = "torch.channels_last_3d" if r.tensor_cores.conv3d_only else "torch.channels_last"
    return specific(f"model = model.to(memory_format={fmt})   # NHWC weights: cuDNN stops converting them\n"
                    f"# and each batch, before the forward (one conversion of the input instead of two per conv):\n"
                    f"x = x.to(memory_format={fmt})")


@rule("layout-conversions", "C35", "Convolutions convert between NCHW and NHWC on every call",
      "NVIDIA Deep Learning Performance guide (Tensor Core convolutions run in NHWC); PyTorch channels_last tutorial",
      lambda c: (f"cuDNN nchwToNhwc/nhwcToNchw kernels at least {c.layout_conversion_pct:g} % of the step"),
      DOCS_CHANNELS_LAST, needs=(TENSOR_CORES_STEP,),
      description=("cuDNN's NCHW <-> NHWC conversion kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`): a "
                   "convolution given tensors in PyTorch's default NCHW format, whose engine computes in NHWC "
                   "(the Tensor-Core engines do), converts its input and filter on the way in and its output on "
                   "the way out, every call. With the model and its input in `torch.channels_last` cuDNN is "
                   "handed NHWC tensors and runs none of them. The gain bound is the conversions' time (the "
                   "input's one conversion per step and any op without an NHWC kernel can keep part of it)."),
      fix=("Keep convolution nets in channels-last: `model = model.to(memory_format=torch.channels_last)` "
           "and `x = x.to(memory_format=torch.channels_last)` for each batch (`channels_last_3d` for 3-D "
           "convolutions)."))
def layout_conversions(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C35: cuDNN's layout-conversion kernels
    (:data:`~hta_report.analysis.kernels.LAYOUT_CONVERSION_KERNEL`,
    ``TensorCoreUse.layout_conversion_us_per_step``) take at least
    ``layout_conversion_pct`` % of the step. The gain bound is their time,
    claimed from the step's kernel time (the ``compute`` pool, before its
    owner C12, as a cause found inside it: these are no matrix math, which
    C12's measure leaves out).
    No edit: no recorded pair measures what channels-last leaves (the input's
    conversion, ops without NHWC kernels), so the figure is a bound, not a
    prediction."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    seen = [r for r in gpu if r.tensor_cores.layout_conversion_us_per_step > 0]
    if not seen:
        return fine("no cuDNN NCHW/NHWC layout-conversion kernels in the analyzed steps")
    hits = worst_first([r for r in seen if pct_of_step(r.tensor_cores.layout_conversion_us_per_step, r)
                        >= cfg.layout_conversion_pct], lambda r: r.tensor_cores.layout_conversion_us_per_step)
    if not hits:
        worst = max(seen, key=lambda r: pct_of_step(r.tensor_cores.layout_conversion_us_per_step, r))
        return fine(f"cuDNN layout conversions at most "
                    f"{pct_of_step(worst.tensor_cores.layout_conversion_us_per_step, worst):.1f} % {of_step(worst)}")
    c = claim(fired, hits, ["compute"], lambda r: r.tensor_cores.layout_conversion_us_per_step,
              "cuDNN layout conversions")
    worst = c.worst
    fmt = "channels_last_3d" if worst.tensor_cores.conv3d_only else "channels_last"
    return c.verdict(cfg, f"Use {fmt} memory format: "
                          f"{pct_of_step(worst.tensor_cores.layout_conversion_us_per_step, worst):.0f} % "
                          f"{of_step(worst)} is cuDNN converting NCHW tensors to NHWC and back",
                     evidence_lines(c.hits, _layout_evidence), _layout_fix(worst))


def _elementwise_evidence(r: RankResult) -> str:
    e = r.elementwise
    top = _calls_and_time(e.top[:2])
    return (f"rank {r.rank}: kernels busy {utilization_pct(r):.0f} % {of_step(r)}; eager elementwise kernels "
            f"{ms(e.us_per_step)} {per(r)} ({pct_of_step(e.us_per_step, r):.0f} %), "
            f"{ms(e.chained_us_per_step)} of them in {e.chains_per_step:.0f} chains of back-to-back kernels "
            f"(up to {e.longest_chain}); fusing each chain saves {ms(e.fusible_us_per_step)} when they are "
            f"bandwidth-bound; largest: {top}")


def _elementwise_fix(r: RankResult) -> str:
    return specific("model = torch.compile(model)   # Inductor fuses each chain of elementwise ops (norms, "
                    "activations, casts, masks) into one kernel\n"
                    "# attention written out by hand (matmul, mask, softmax): one fused kernel instead\n"
                    "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)")


@rule("unfused-elementwise", "C36", "Chains of eager elementwise kernels in a GPU-bound step",
      "PyTorch 2 (TorchInductor fuses pointwise and reduction ops); bandwidth model of the chains: proposal",
      lambda c: (f"kernels busy at least {c.fusion_busy_pct:g} % of the step, and fusing the chains of "
                 f"back-to-back eager elementwise kernels saves at least {c.fusion_pct:g} % of it"),
      DOCS_COMPILE, needs=(TENSOR_CORES_STEP,),
      description=("PyTorch's eager elementwise kernels (pointwise ops, casts, reductions, softmax, layer norm, "
                   "dropout, `cat`) each read their inputs from device memory and write their output back. "
                   "Where the GPU is busy most of the step, runs of them back to back on a stream (chains) are "
                   "time torch.compile can fuse into one kernel each. The gain bound is each chain's time "
                   "times (2k - 2) / 3k for k kernels: what one fused kernel saves when the ops are "
                   "bandwidth-bound and each takes one input of its own (a chain of unary ops saves more). "
                   "Inductor's and Triton kernels (already fused) and the optimizer's multi_tensor_apply "
                   "kernels are not counted. Rated medium at most: the saving is a model's bound, not measured "
                   "on recorded pairs."),
      fix=("Compile the model (`model = torch.compile(model)`) so chains of elementwise ops run as one kernel "
           "each; write attention as `torch.nn.functional.scaled_dot_product_attention`."))
def unfused_elementwise(result: AnalysisResult, cfg: AdviceConfig, fired: Fired) -> Verdict:
    """C36: on a rank whose kernels run at least ``fusion_busy_pct`` % of the
    step, fusing the chains of eager elementwise kernels
    (``ElementwiseWork.fusible_us_per_step``, a bandwidth bound) saves at
    least ``fusion_pct`` % of it. Claimed from the step's kernel time (the
    ``compute`` pool, before its owner C12: no matrix math). No edit: no
    recorded pair measures what Inductor leaves, so the figure is a bound,
    and the engine rates the finding ``medium`` at most
    (:data:`~hta_report.rules.engine.MODEL_BOUND_CAPPED`)."""
    gpu = [r for r in result.ranks if r.has_gpu]
    if not gpu:
        return not_checked("no GPU activity in the traces")
    seen = [r for r in gpu if r.elementwise.us_per_step > 0]
    if not seen:
        return fine("no eager elementwise kernels in the analyzed steps")
    busy = [r for r in seen if utilization_pct(r) >= cfg.fusion_busy_pct]
    if not busy:
        worst = max(seen, key=utilization_pct)
        return fine(f"kernels busy at most {utilization_pct(worst):.0f} % {of_step(worst)}: the GPU's work does "
                    "not set the step, fusing kernels would not shorten it")
    hits = worst_first([r for r in busy if pct_of_step(r.elementwise.fusible_us_per_step, r) >= cfg.fusion_pct],
                       lambda r: r.elementwise.fusible_us_per_step)
    if not hits:
        worst = max(busy, key=lambda r: pct_of_step(r.elementwise.fusible_us_per_step, r))
        return fine(f"fusing the chains of elementwise kernels saves at most "
                    f"{pct_of_step(worst.elementwise.fusible_us_per_step, worst):.1f} % {of_step(worst)}")
    c = claim(fired, hits, ["compute"], lambda r: r.elementwise.fusible_us_per_step, "chains of elementwise kernels")
    worst = c.worst
    return c.verdict(cfg, f"Fuse elementwise kernels (torch.compile): "
                          f"{pct_of_step(worst.elementwise.chained_us_per_step, worst):.0f} % {of_step(worst)} "
                          "is chains of eager elementwise kernels on a busy GPU",
                     evidence_lines(c.hits, _elementwise_evidence), _elementwise_fix(worst))
