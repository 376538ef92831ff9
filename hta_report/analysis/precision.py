"""Which precisions a GPU runs on its matrix units, and which a kernel already uses.

Advice toward a lower precision is only worth giving toward one the device
runs faster and the kernels do not use yet: bf16 on a Turing GPU has no
Tensor Cores to run on, and an FP8 or fp16 kernel moved to bf16 is a
downgrade or nothing. The device's generation comes from the trace's
``deviceProperties`` (NVIDIA's compute capability; AMD's device name, since
ROCm's ``computeMajor`` is the GCN architecture), a kernel's precision from
its name (cuBLAS, CUTLASS, cuDNN, Tensile, MIOpen and Composable Kernel name
their input types). ``docs/DEVICES.md`` is the table with its sources.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

#: Matrix-unit precisions by NVIDIA compute capability (major, minor), from NVIDIA's
#: architecture whitepapers (Volta, Turing, Ampere GA100 and GA102, Ada, Hopper, Blackwell):
#: the first entry whose (major, minor) is at most the device's applies.
NVIDIA_MATRIX = (
    ((10, 0), ("float16", "bfloat16", "tf32", "float8", "float4", "int8")),  # Blackwell (sm_100, sm_120)
    ((9, 0), ("float16", "bfloat16", "tf32", "float8", "int8")),  # Hopper
    ((8, 9), ("float16", "bfloat16", "tf32", "float8", "int8")),  # Ada
    ((8, 0), ("float16", "bfloat16", "tf32", "int8")),  # Ampere (A100 8.0; A10/A40/RTX 30 8.6; Orin 8.7)
    ((7, 5), ("float16", "int8")),  # Turing: no bf16, no tf32
    ((7, 0), ("float16",)),  # Volta
)
#: GeForce boards (Ampere GA10x, Ada AD10x, Blackwell GB20x) run TF32 on their Tensor Cores at
#: their float32 rate, not faster: GA102 whitepaper, RTX 3090 35.6 TFLOP/s TF32 (dense) and
#: 35.6 float32; AD102, RTX 4090 82.6 and 82.6; RTX 5090 104.8 and 104.8. Their data-centre and
#: workstation siblings (A10, A40, L4, L40S) run TF32 at twice float32. On these boards TF32 is no
#: lever and is not advised; 16-bit math is (fp16/bf16 with float32 accumulate at 2x float32).
TF32_AT_FP32_RATE = re.compile(r"GeForce", re.IGNORECASE)
#: Matrix-core (MFMA) precisions of AMD Instinct GPUs by name, from AMD's CDNA whitepapers.
AMD_MATRIX = (
    (re.compile(r"MI3\d\d", re.IGNORECASE), ("float16", "bfloat16", "tf32", "float8", "int8")),  # CDNA3
    (re.compile(r"MI2\d\d", re.IGNORECASE), ("float16", "bfloat16", "int8")),  # CDNA2
    (re.compile(r"MI100", re.IGNORECASE), ("float16", "bfloat16", "int8")),  # CDNA1 (bf16 at half rate)
)
#: Kernel name parts that give its inputs in 16 or 8 bits (the kernel already runs in lower
#: precision): cuBLAS ``*_fp16_s1688gemm_*``, ``*_bf16bf16_*``, CUTLASS ``cutlass::bfloat16_t``/
#: ``half_t``, FP8 ``e4m3``/``e5m2``/``fp8``, Tensile's data-type letters (``_HHS_``: half in,
#: single accumulate; ``_BBS_``: bf16), MIOpen's ``_fp16_``/``_half_`` and Triton's ``bf16``.
LOW_PRECISION = re.compile(r"bf16|bfloat16|fp16|f16|half|e4m3|e5m2|fp8|float8|f8f8|int8|i8i8|s8s8|u8u8|"
                           r"_[HB][HB]S_|_[HB][HB]_|hgemm|h884|h1688|h16816", re.IGNORECASE)


def matrix_dtypes(compute_major: Optional[int], compute_minor: Optional[int], device_names: Sequence[str],
                  amd: bool) -> Tuple[str, ...]:
    """The precisions the rank's GPU runs on its matrix units (Tensor Cores,
    matrix cores): by compute capability on NVIDIA (:data:`NVIDIA_MATRIX`),
    by name on AMD (:data:`AMD_MATRIX`); empty for a GPU without them (before
    Volta, AMD without MFMA) or one the trace does not describe. TF32 is left
    out on GeForce boards, which run it no faster than float32
    (:data:`TF32_AT_FP32_RATE`)."""
    if amd:
        for pattern, dtypes in AMD_MATRIX:
            if any(pattern.search(str(n)) for n in device_names):
                return dtypes
        return ()
    if compute_major is None:
        return ()
    cc = (compute_major, compute_minor or 0)
    found: Tuple[str, ...] = next((dtypes for floor, dtypes in NVIDIA_MATRIX if cc >= floor), ())
    if any(TF32_AT_FP32_RATE.search(str(n)) for n in device_names):
        found = tuple(d for d in found if d != "tf32")
    return found


def lower_precision(kernel_name: str) -> bool:
    """Whether a GEMM or convolution kernel's name says its inputs are 16 or 8 bits (:data:`LOW_PRECISION`)."""
    return LOW_PRECISION.search(kernel_name) is not None


def target_dtype(dtypes: Sequence[str]) -> str:
    """The 16-bit precision to move float32 matrix math to on a GPU running
    ``dtypes`` on its matrix units: ``bfloat16`` where it has it (no loss
    scaling), else ``float16`` (with a GradScaler in training), else ``""``."""
    return "bfloat16" if "bfloat16" in dtypes else "float16" if "float16" in dtypes else ""
