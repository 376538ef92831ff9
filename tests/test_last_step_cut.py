"""The dropped last ``ProfilerStep`` takes its kernels with it where the host runs ahead of the GPU.

HTA's step filter cuts at the latest start of any ``ProfilerStep`` row it
counts as a CPU op, Kineto's copy of the step on the GPU
(``gpu_user_annotation``) included; where the host is a step or more ahead,
that copy starts after the host launched the whole last step, and every
kernel of the dropped step stayed in the kernel table while the step figures
counted one step fewer (field runs rtx3060-*, tracelens
mi300_resnet_act_checkpoint). :func:`hta_report.load.traces.drop_after_host_step`
cuts at the host's step instead.
"""
import gzip
import json

from conftest import shared
from kineto import TraceBuilder
from hta_report.api import analyze


def _host_ahead(tmp_path, steps=4, kernels_per_step=3, lag_us=2500.0):
    """``steps`` host steps of 1 ms, each launching ``kernels_per_step``
    kernels of 300 µs that run ``lag_us`` later; the GPU copy of each step
    (``gpu_user_annotation``) spans its kernels."""
    b = TraceBuilder(rank=0)
    for i in range(steps):
        t0 = i * 1000.0
        b.step(i + 1, t0, 1000.0)
        g0 = t0 + lag_us
        b._x("gpu_user_annotation", f"ProfilerStep#{i + 1}", g0, kernels_per_step * 300.0, pid=0, tid=7)
        for k in range(kernels_per_step):
            b.cpu_op("aten::mm", t0 + 50 + 100 * k, 60)
            b.kernel("void gemm_kernel<float, 128>(float*)", g0 + 300 * k, 290, launch_ts=t0 + 60 + 100 * k)
    return b.write(tmp_path / "rank0.json")


def test_kernels_of_the_dropped_step_leave_with_it(tmp_path):
    _host_ahead(tmp_path)
    result = analyze(tmp_path)
    r = result.ranks[0]
    assert not result.inventory.last_step_included
    analyzed = r.steps.steps
    # 4 host steps, the last dropped: 3 kept (the first a warm-up), and only their 3 × 3 kernels counted
    assert len(analyzed) == 3
    assert r.kernel_count == 9


def test_a_lag_shorter_than_a_step_too(tmp_path):
    _host_ahead(tmp_path, lag_us=100.0)
    r = analyze(tmp_path).ranks[0]
    assert r.kernel_count == 9


def test_kept_last_step_keeps_its_kernels(tmp_path):
    _host_ahead(tmp_path)
    r = analyze(tmp_path, include_last_step=True).ranks[0]
    assert r.kernel_count == 12


def _launched_before_last_host_step(path):
    """Kernels whose launch (a host event with the kernel's correlation)
    starts before the last host ``ProfilerStep``: read with json alone."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    host_steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                  and e.get("cat") == "user_annotation"]
    cut = max(float(e["ts"]) for e in host_steps)
    host_corr = {e["args"]["correlation"] for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {}) and float(e["ts"]) < cut}
    return sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
               and e.get("args", {}).get("correlation") in host_corr)


def test_real_trace_host_ahead_counts_the_kept_steps_kernels():
    folder = shared("../tracelens/mi300_resnet_act_checkpoint")
    want = _launched_before_last_host_step(next(folder.glob("*.json.gz")))
    r = analyze(folder).ranks[0]
    assert r.kernel_count == want
