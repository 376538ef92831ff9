#!/usr/bin/env python
"""Record GEMM-heavy runs in each precision a CUDA device offers, for the precision advice (issue 51).

The advice must name a faster precision only where the device has it and the
kernels do not use it already (docs/DEVICES.md). These recordings test that
on a real device: one trace per run, plain ``torch.profiler`` as users record
(1 skipped, 1 warm-up, 7 recorded steps), written to ``OUT/<device>-<run>/``:

* ``mlp-fp32``: an 8-layer 4096-wide MLP trained in float32 (TF32 off, PyTorch's default);
* ``mlp-tf32``: the same with ``torch.backends.cuda.matmul.allow_tf32 = True``;
* ``mlp-bf16``: the same under bf16 autocast;
* ``mlp-fp16``: the same under fp16 autocast with a GradScaler;
* ``fp8-gemm``: an inference loop of ``torch._scaled_mm`` on float8_e4m3fn
  8192x8192 operands (compute capability 8.9 and up only).

Usage: ``python bench/record_precision.py OUT [--only mlp-fp32,...]``. Prints one
line per run (seconds, or the error); a run that fails does not stop the others.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

RUNS = ["mlp-fp32", "mlp-tf32", "mlp-bf16", "mlp-fp16", "fp8-gemm"]
WAIT, WARMUP, ACTIVE = 1, 1, 7


def _mlp_step(torch, run: str):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(4096, 1000)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(4096, 4096, device=dev)
    y = torch.randint(0, 1000, (4096,), device=dev)
    torch.backends.cuda.matmul.allow_tf32 = run == "mlp-tf32"
    dtype = {"mlp-bf16": torch.bfloat16, "mlp-fp16": torch.float16}.get(run)
    scaler = torch.amp.GradScaler("cuda") if run == "mlp-fp16" else None

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    return step


def _fp8_step(torch):
    dev = torch.device("cuda")
    n = 8192
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device=dev)

    def step() -> None:
        with torch.inference_mode():
            for _ in range(8):
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return step


def record(out: str, run: str) -> None:
    """Record ``run`` into ``out/<device>-<run>/``. Raises RuntimeError without CUDA."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    step = _fp8_step(torch) if run == "fp8-gemm" else _mlp_step(torch, run)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    name = torch.cuda.get_device_name().replace("NVIDIA ", "").replace(" ", "").lower()
    d = os.path.join(out, f"{name}-{run}")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
                 on_trace_ready=tensorboard_trace_handler(d, use_gzip=True)) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            step()
            prof.step()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", default=",".join(RUNS))
    args = ap.parse_args(argv)
    failed = 0
    for run in args.only.split(","):
        t = time.perf_counter()
        try:
            record(args.out, run)
            print(f"{run}: {time.perf_counter() - t:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - one failing run does not stop the others
            failed += 1
            print(f"{run}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
