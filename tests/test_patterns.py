"""Code-pattern rules C23 (tensor filled on the CPU then copied), C25 (conv
bias before BatchNorm) and C28 (DDP accumulation without no_sync()): exact
ground truth on built traces, and traces recorded with plain torch.profiler
(DDP with and without no_sync(); a Conv2d + BatchNorm2d model)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hta_report.api import analyze
from hta_report.rules import AdviceConfig
from kineto import TC_GEMM, TraceBuilder

STEP = 1000.0


def run(tmp_path, b: TraceBuilder, **config):
    tmp_path.mkdir(parents=True, exist_ok=True)
    b.write(tmp_path / "rank-0.json")
    return analyze(tmp_path, include_last_step=True, config=AdviceConfig(**config) if config else None)


def check(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def finding(result, rule_id):
    return next(f for f in result.findings if f.id == rule_id)


def copy_trace(fill: bool = True, between: bool = False, types=None, memory: str = "Pinned") -> TraceBuilder:
    """2 steps; in each, torch.zeros(...) (aten::zeros > aten::zero_ > aten::fill_;
    ``fill`` False: torch.empty(...), aten::empty alone) then aten::to >
    aten::_to_copy > aten::copy_ launching a 100 µs HtoD copy."""
    b = TraceBuilder(rank=0)
    for i in range(2):
        t = i * STEP
        b.step(i + 1, t, STEP)
        if fill:
            b.cpu_op("aten::zeros", t + 10, 40)
            b.cpu_op("aten::zero_", t + 30, 18)
            b.cpu_op("aten::fill_", t + 32, 15)
        else:
            b.cpu_op("aten::empty", t + 10, 40)
        if between:
            b.cpu_op("aten::relu", t + 52, 5)
        b.cpu_op("aten::to", t + 60, 60)
        b.cpu_op("aten::_to_copy", t + 61, 58)
        b.cpu_op("aten::copy_", t + 62, 56, types=types)
        b.memcpy("HtoD", memory, t + 100, 100, 4_000_000, launch_ts=t + 70, launch_dur=45)
        b.kernel(TC_GEMM, t + 300, 500, launch_ts=t + 290)
    return b


def test_cpu_tensor_copied_fires_with_the_copy_time(tmp_path):
    # the exposed copy is exposed-memcpy's (C15 claims it first) unless that rule is off
    c = check(run(tmp_path / "c15", copy_trace()), "cpu-tensor-copied")
    assert c.status == "covered" and "exposed-memcpy" in c.detail
    r = run(tmp_path / "alone", copy_trace(), disable=["exposed-memcpy"])
    p = r.ranks[0].patterns
    assert p.cpu_tensor_copies_per_step == 1
    # the copy's GPU time [100, 200] (not the host time of aten::to [60, 120])
    assert p.cpu_tensor_copy_us_per_step == pytest.approx(100)
    assert p.cpu_tensor_examples == ["aten::zero_ -> aten::to (HtoD 4.0 MB)"]
    f = finding(r, "cpu-tensor-copied")
    assert f.rule == "C23" and f.gain_ms_per_step == pytest.approx(0.1)  # the exposed copy: no kernel runs then
    # a pageable copy's time is pageable-memcpy's (C3 claims it first): no second claim on it
    r = run(tmp_path / "pageable", copy_trace(memory="Pageable"))
    c = check(r, "cpu-tensor-copied")
    assert c.status == "covered" and "pageable-memcpy" in c.detail
    # ... whose finding names the better fix: the tensor made on the device needs no copy at all
    f = finding(r, "pageable-memcpy")
    assert f.fix.startswith("# tensors filled on the CPU only to be copied: make them on the device")
    assert "pin_memory=True" in f.fix
    assert any("copies of a tensor filled on the CPU just before, 1 per step "
               "(aten::zero_ -> aten::to (HtoD 4.0 MB))" in e for e in f.evidence)


@pytest.mark.parametrize("kwargs", [{"fill": False}, {"between": True}, {"types": ["float", "double"]}])
def test_cpu_tensor_copied_needs_a_fill_right_before_and_one_dtype(tmp_path, kwargs):
    r = run(tmp_path, copy_trace(**kwargs))
    assert r.ranks[0].patterns.cpu_tensor_copies_per_step == 0
    assert check(r, "cpu-tensor-copied").status == "fine"


def conv_trace(bias: bool, then: str = "aten::batch_norm") -> TraceBuilder:
    b = TraceBuilder(rank=0)
    for i in range(2):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.cpu_op("aten::conv2d", t + 10, 100, dims=[[16, 3, 32, 32], [8, 3, 3, 3], [8] if bias else [], [], [], [], []])
        b.cpu_op("aten::convolution", t + 12, 90)
        b.cpu_op(then, t + 120, 50, dims=[[16, 8, 30, 30], [8], [8], [8], [8], [], [], [], []])
        b.kernel(TC_GEMM, t + 200, 500, launch_ts=t + 190)
    return b


def test_conv_bias_before_bn(tmp_path):
    r = run(tmp_path / "bias", conv_trace(bias=True))
    p = r.ranks[0].patterns
    assert p.shapes_recorded and p.conv_bias_bn_per_step == 1
    assert p.conv_bias_examples == ["aten::conv2d input [16, 3, 32, 32] weight [8, 3, 3, 3] bias [8] -> aten::batch_norm"]
    f = finding(r, "conv-bias-before-bn")
    assert f.rule == "C25" and f.gain_ms_per_step == 0
    assert check(run(tmp_path / "nobias", conv_trace(bias=False)), "conv-bias-before-bn").status == "fine"
    assert check(run(tmp_path / "relu", conv_trace(bias=True, then="aten::relu")), "conv-bias-before-bn").status == "fine"
    b = conv_trace(bias=True)
    for e in b.events:
        e.get("args", {}).pop("Input Dims", None)
    c = check(run(tmp_path / "noshapes", b), "conv-bias-before-bn")
    assert c.status == "not checked" and "record_shapes=True" in c.detail


def accumulation_trace(syncs) -> TraceBuilder:
    """2 steps of 3 micro-steps (DDP forwards at 0, 300, 600 µs); all-reduce
    ops (c10d::allreduce_) in the micro-steps listed in ``syncs``, 50, 40, 30 µs."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for i in range(2):
        t = i * STEP
        b.step(i + 1, t, STEP)
        for m, start in enumerate((0, 300, 600)):
            b.cpu_op("DistributedDataParallel.forward", t + start + 1, 100, cat="user_annotation")
            if m in syncs:
                b.cpu_op("c10d::allreduce_", t + start + 200, (50, 40, 30)[m])
    return b


def test_no_sync_accumulation_fires_with_the_extra_all_reduce_time(tmp_path):
    r = run(tmp_path, accumulation_trace(syncs=(0, 1, 2)))
    p = r.ranks[0].patterns
    assert (p.micro_steps_per_step, p.synced_micro_steps_per_step) == (3, 3)
    assert p.extra_sync_us_per_step == pytest.approx(50 + 40)  # all but the last micro-step's
    f = finding(r, "no-sync-accumulation")
    assert f.rule == "C28" and f.gain_ms_per_step == pytest.approx(0.09) and "2 extra all-reduce rounds" in f.title


def test_no_sync_accumulation_fine_with_no_sync_and_not_checked_without_ddp(tmp_path):
    assert check(run(tmp_path / "ok", accumulation_trace(syncs=(2,))), "no-sync-accumulation").status == "fine"
    b = TraceBuilder(rank=0, gpu_name=None)
    b.step(1, 0, STEP)
    b.cpu_op("aten::mm", 10, 100)
    assert check(run(tmp_path / "none", b), "no-sync-accumulation").status == "not checked"


# ---------------------------------------------------------------- recorded with plain torch.profiler

DDP_SCRIPT = textwrap.dedent('''
    import contextlib, sys, torch, torch.nn as nn, torch.distributed as dist
    from torch.profiler import profile, schedule, ProfilerActivity, tensorboard_trace_handler
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(sys.argv[2])) as prof:
        for step in range(4):
            for micro in range(4):
                ctx = model.no_sync() if sys.argv[1] == "nosync" and micro < 3 else contextlib.nullcontext()
                with ctx:
                    (model(torch.randn(8, 32)).sum() / 4).backward()
            opt.step(); opt.zero_grad(); prof.step()
    dist.destroy_process_group()
''')


@pytest.fixture(scope="module")
def ddp_traces(tmp_path_factory):
    """One-rank DDP (gloo) accumulation loops, with and without no_sync(): about 3 s each."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("ddp")
    script = root / "accum.py"
    script.write_text(DDP_SCRIPT)
    out = {}
    for mode in ("sync", "nosync"):
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(29400 + (os.getpid() % 500) + (mode == "nosync")), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, str(script), mode, str(root / mode)], env=env, check=True,
                       capture_output=True, timeout=120)
        out[mode] = root / mode
    return out


def test_no_sync_accumulation_on_real_ddp_traces(ddp_traces):
    fired = analyze(ddp_traces["sync"])
    p = fired.ranks[0].patterns
    assert (p.micro_steps_per_step, p.synced_micro_steps_per_step) == (4, 4) and p.extra_sync_us_per_step > 0
    assert check(fired, "no-sync-accumulation").status == "fired"
    clean = analyze(ddp_traces["nosync"])
    assert (clean.ranks[0].patterns.synced_micro_steps_per_step, check(clean, "no-sync-accumulation").status) == \
        (1, "fine")


def test_conv_bias_before_bn_on_a_real_trace(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    for bias in (True, False):
        out = tmp_path / f"bias{bias}"
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=bias), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=0, active=3),
                     on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
            for _ in range(3):
                model(torch.randn(4, 3, 16, 16)).sum().backward()
                prof.step()
        result = analyze(out)
        assert check(result, "conv-bias-before-bn").status == ("fired" if bias else "fine")
        assert result.ranks[0].patterns.conv_bias_bn_per_step == (1 if bias else 0)
