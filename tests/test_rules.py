"""Each rule of the catalogue on builder-made traces whose ground truth is known exactly.

Every trace has 4 steps of 1000 µs unless said otherwise and is analyzed with
the last step kept, so steps 2-4 are the analyzed steps (step 1 is warm-up)
and every "per step" figure is the same in each of them. ``t`` is the start of
a step; gains are in % of the 1000 µs step.
"""
from typing import Callable, List, Optional

import pytest

from hta_report.api import analyze
from hta_report.model import SEVERITY_RANK
from hta_report.rules import RULES, AdviceConfig
from hta_report.rules.base import expected_pct, severity
from kineto import FP32_GEMM, NCCL_ALLREDUCE, TC_GEMM, TraceBuilder

STEP = 1000.0
DL_MAIN = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DL_WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def steps(body: Callable[[TraceBuilder, float], None], n: int = 4, rank: Optional[int] = 0,
          **builder) -> TraceBuilder:
    """``n`` steps of :data:`STEP` µs, ``body(b, t)`` filling each."""
    b = TraceBuilder(rank=rank, **builder)
    for i in range(n):
        b.step(i + 1, i * STEP, STEP)
        body(b, i * STEP)
    return b


def run(tmp_path, *builders: TraceBuilder, config: Optional[AdviceConfig] = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(builders):
        b.write(tmp_path / f"rank-{i}.json")
    return analyze(tmp_path, include_last_step=True, config=config)


def finding(result, rule_id):
    found = [f for f in result.findings if f.id == rule_id]
    assert found, f"{rule_id} did not fire: {[c for c in result.checks if c.id == rule_id]}"
    return found[0]


def status(result, rule_id) -> str:
    return next(c.status for c in result.checks if c.id == rule_id)


def busy(b, t, start=10.0, end=STEP, name=TC_GEMM):
    """One kernel [t+start, t+end] launched at t+start-8."""
    b.kernel(name, t + start, end - start, launch_ts=t + start - 8, launch_dur=5)


def test_catalogue_has_the_required_rules():
    numbers = {r.number for r in RULES}
    required = {f"C{i}" for i in list(range(1, 13)) + [15, 16, 17, 21, 22, 24]}
    assert required <= numbers and len(RULES) >= 20
    assert len({r.id for r in RULES}) == len(RULES)
    assert all("proposal" in r.source or any(c.isalpha() for c in r.source) for r in RULES)


# ---------------------------------------------------------------- C1, C2 DataLoader
def dataloader_trace(name: str, dl_us: float) -> TraceBuilder:
    def body(b, t):
        b.cpu_op(name, t, dl_us, cat="user_annotation")
        busy(b, t, start=dl_us)
    return steps(body)


def test_dataloader_bound_fires_with_the_gpu_idle_it_causes(tmp_path):
    r = run(tmp_path, dataloader_trace(DL_WORKERS, 300))
    f = finding(r, "dataloader-bound")
    # the GPU idles [t, t+300] while the host is in the DataLoader
    assert f.bound_pct == pytest.approx(30.0) and f.bound_ms_per_step == pytest.approx(0.3)
    assert f.severity == "high" and f.rule == "C1" and "num_workers=" in f.fix
    assert status(r, "dataloader-main-process") == "fine"


def test_dataloader_under_threshold_is_fine(tmp_path):
    r = run(tmp_path, dataloader_trace(DL_WORKERS, 30))
    assert status(r, "dataloader-bound") == "fine"


def test_dataloader_main_process_fires(tmp_path):
    r = run(tmp_path, dataloader_trace(DL_MAIN, 30))  # 3 %: under dataloader-bound's 5 %
    f = finding(r, "dataloader-main-process")
    assert f.bound_pct == pytest.approx(3.0) and "num_workers=max(1" in f.fix
    assert status(r, "dataloader-bound") == "fine"


def test_dataloader_main_process_is_covered_by_dataloader_bound(tmp_path):
    # the same wait: counted once, by dataloader-bound, whose evidence names the main process
    r = run(tmp_path / "a", dataloader_trace(DL_MAIN, 300))
    assert finding(r, "dataloader-bound").bound_pct == pytest.approx(30.0)
    assert any("main process" in e for e in finding(r, "dataloader-bound").evidence)
    check = next(c for c in r.checks if c.id == "dataloader-main-process")
    assert check.status == "covered" and "dataloader-bound" in check.detail


def test_dataloader_rules_not_checked_without_dataloader(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t)))
    assert status(r, "dataloader-bound") == status(r, "dataloader-main-process") == "not checked"


def test_dataloader_bound_on_a_cpu_only_trace_uses_host_time(tmp_path):
    def body(b, t):
        b.cpu_op(DL_MAIN, t, 250, cat="user_annotation")
        b.cpu_op("aten::conv2d", t + 250, 700)
    r = run(tmp_path, steps(body, gpu_name=None))
    assert not r.ranks[0].has_gpu
    assert finding(r, "dataloader-bound").bound_pct == pytest.approx(25.0)
    assert status(r, "low-gpu-utilization") == "not checked"


# ---------------------------------------------------------------- C3, C4, C15 copies
def copy_trace(memory: str, blocking_call: bool) -> TraceBuilder:
    def body(b, t):
        # the copy [t+10, t+210]; a pageable call returns when the copy is done
        b.memcpy("HtoD", memory, t + 10, 200, 4_000_000, launch_ts=t + 5, launch_dur=205 if blocking_call else 5)
        b.kernel(TC_GEMM, t + 220, STEP - 220, launch_ts=t + 212, launch_dur=5)
    return steps(body)


def test_pageable_memcpy_fires_with_exposed_copy_and_idle_after_it(tmp_path):
    r = run(tmp_path, copy_trace("Pageable", blocking_call=True))
    f = finding(r, "pageable-memcpy")
    # 200 µs of copy with no kernel + the gap [t+210, t+220] that begins as the call returns
    assert r.ranks[0].memcpy.pageable_exposed_us_per_step == 200
    assert r.ranks[0].idle_attribution.pageable_copy_us == 10
    assert f.bound_pct == pytest.approx(21.0)
    assert "pin_memory=True" in f.fix and "non_blocking=True" in f.fix
    assert status(r, "exposed-memcpy") == "fine"  # the pageable copy is C3's


def test_pageable_memcpy_says_the_pin_would_run_on_the_training_thread(tmp_path):
    def body(b, t):  # batches loaded on the training thread, then copied from pageable memory
        b.cpu_op(DL_MAIN, t, 4, cat="user_annotation")
        b.memcpy("HtoD", "Pageable", t + 10, 200, 4_000_000, launch_ts=t + 5, launch_dur=205)
        b.kernel(TC_GEMM, t + 220, STEP - 220, launch_ts=t + 212, launch_dur=5)
    f = finding(run(tmp_path, steps(body)), "pageable-memcpy")
    assert any("training thread" in e and "num_workers=0" in e for e in f.evidence)
    assert "num_workers=4, pin_memory=True" in f.fix
    elsewhere = finding(run(tmp_path / "workers", copy_trace("Pageable", blocking_call=True)), "pageable-memcpy")
    assert not any("training thread" in e for e in elsewhere.evidence)
    assert "num_workers" not in elsewhere.fix


def test_pinned_copies_do_not_fire_pageable_but_exposed_memcpy(tmp_path):
    r = run(tmp_path, copy_trace("Pinned", blocking_call=False))
    assert status(r, "pageable-memcpy") == "fine"
    assert finding(r, "exposed-memcpy").bound_pct == pytest.approx(20.0)


def test_exposed_memcpy_fine_when_the_copy_overlaps_compute(tmp_path):
    def body(b, t):
        busy(b, t)
        b.memcpy("HtoD", "Pinned", t + 20, 200, 4_000_000, launch_ts=t + 12, stream=8)
    r = run(tmp_path, steps(body))
    assert status(r, "exposed-memcpy") == "fine"
    assert r.ranks[0].memcpy.other_exposed_us_per_step == 0


def blocking_trace(sync: bool) -> TraceBuilder:
    def body(b, t):
        end = 215 if sync else 12
        b.cpu_op("aten::copy_", t + 5, end - 5)
        b.memcpy("HtoD", "Pinned", t + 10, 200, 4_000_000, launch_ts=t + 6, launch_dur=5)
        if sync:
            b.runtime("cudaStreamSynchronize", t + 11, 201)
        b.kernel(TC_GEMM, t + 225, STEP - 225, launch_ts=t + 216, launch_dur=5)
    return steps(body)


def test_blocking_copy_fires(tmp_path):
    r = run(tmp_path, blocking_trace(sync=True))
    f = finding(r, "blocking-copy")
    m = r.ranks[0].memcpy
    assert (m.blocking_copies_per_step, m.blocking_copy_us_per_step) == (1, 210)
    # its copy is exposed 200 µs, then the GPU idles [t+210, t+225] (the gap begins inside the op)
    assert m.blocking_exposed_us_per_step == 200 and r.ranks[0].idle_attribution.blocking_copy_us == 15
    assert f.bound_pct == pytest.approx(21.5) and "non_blocking=True" in f.fix
    assert status(r, "exposed-memcpy") == "fine"


def test_non_blocking_copy_is_fine(tmp_path):
    r = run(tmp_path, blocking_trace(sync=False))
    assert status(r, "blocking-copy") == "fine"


def test_copy_rules_not_checked_without_gpu(tmp_path):
    r = run(tmp_path, steps(lambda b, t: b.cpu_op("aten::copy_", t, 100), gpu_name=None))
    for rule_id in ("pageable-memcpy", "blocking-copy", "exposed-memcpy"):
        assert status(r, rule_id) == "not checked"


# ---------------------------------------------------------------- C5 sync
def sync_trace(sync_start: float) -> TraceBuilder:
    def body(b, t):
        b.kernel(TC_GEMM, t + 10, 590, launch_ts=t + 1, launch_dur=5)  # [t+10, t+600]
        end = max(t + 602, t + sync_start + 2)
        b.runtime("cudaStreamSynchronize", t + sync_start, end - t - sync_start)
        b.kernel(TC_GEMM, t + 810, 190, launch_ts=t + 800, launch_dur=5)  # the host relaunches at t+800
    return steps(body)


def test_sync_fires_with_the_gap_it_opens(tmp_path):
    r = run(tmp_path, sync_trace(sync_start=20))
    f = finding(r, "sync-in-step")
    # the GPU drains during the sync and stays idle [t+600, t+810]; the host, its lead spent in
    # the wait, then launches the next step's first kernel only as the GPU finishes: [t'+0, t'+10]
    a = r.ranks[0].idle_attribution
    assert a.sync_us == 210 and a.sync_lead_us == 10
    assert f.bound_pct == pytest.approx(22.0) and "item()" in f.fix


def test_sync_after_the_gpu_went_idle_costs_nothing(tmp_path):
    r = run(tmp_path, sync_trace(sync_start=700))
    assert r.ranks[0].idle_attribution.sync_us == 0
    assert status(r, "sync-in-step") == "fine"


# ---------------------------------------------------------------- C6, C7, C8 idle symptoms
def test_low_utilization_and_gaps_fire_with_unexplained_idle(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t, end=410)))
    a = r.ranks[0].idle_attribution
    assert (a.kernel_busy_us, a.idle_us) == (400, 600)
    # one symptom finding: low utilization claims the 600 µs; the gaps [1410, 2010], [2410, 3010],
    # [3410, 4000] (1790 µs over 3 steps, 59.7 %) are the same idle time
    assert finding(r, "low-gpu-utilization").bound_pct == pytest.approx(60.0)
    assert status(r, "gpu-gaps") == "covered"
    assert sum(f.id in ("low-gpu-utilization", "gpu-gaps") for f in r.findings) == 1


def test_gaps_are_the_symptom_finding_when_utilization_is_fine(tmp_path):
    def body(b, t):
        busy(b, t, start=10, end=300)
        busy(b, t, start=450, end=1000)
    r = run(tmp_path, steps(body))
    assert status(r, "low-gpu-utilization") == "fine"
    assert finding(r, "gpu-gaps").bound_pct == pytest.approx(15.0)  # [300, 450] each step


def test_busy_gpu_is_fine_for_idle_rules(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t, start=10, end=950)))
    for rule_id in ("low-gpu-utilization", "gpu-gaps", "gpu-idle"):
        assert status(r, rule_id) == "fine"


def test_symptoms_do_not_count_idle_a_cause_explains(tmp_path):
    r = run(tmp_path, dataloader_trace(DL_MAIN, 600))
    assert r.findings[0].id == "dataloader-bound"
    check = next(c for c in r.checks if c.id == "low-gpu-utilization")
    assert check.status == "covered" and "dataloader-bound" in check.detail


def kernel_wait_trace(early_launch: bool) -> TraceBuilder:
    def body(b, t):
        for k in range(30):  # 15 µs kernels 10 µs apart
            ts = t + 250 + 25 * k
            launch = t + 6 * k if early_launch else ts - 8
            b.kernel(TC_GEMM, ts, 15, launch_ts=launch, launch_dur=5)
    return steps(body)


def test_gpu_level_idle_split_is_htas_on_one_stream(tmp_path):
    r = run(tmp_path, kernel_wait_trace(early_launch=True))
    i = r.ranks[0].idle
    (stream,) = i.streams
    # one stream: the GPU-level split is HTA's per-stream one (kernel wait 4 x 290 µs, host wait 3 x 260 µs)
    assert (i.host_wait_us, i.kernel_wait_us, i.other_us) == (stream.host_wait_us, stream.kernel_wait_us,
                                                              stream.other_us)
    assert i.kernel_wait_pct == pytest.approx(100 * 1160 / 1940)
    # queued kernels 10 µs apart: launch latency (kernel wait), not work waiting on another stream
    assert r.ranks[0].idle_attribution.stream_wait_us == 0 and r.ranks[0].idle_attribution.launch_us > 0
    assert status(r, "gpu-idle") == "fine"


def test_gpu_idle_fires_on_queued_work_that_waits(tmp_path):
    def body(b, t):
        busy(b, t, start=10, end=300)
        # launched at t+20 (queued), starts at t+600: it waited on something else than the host
        b.kernel(TC_GEMM, t + 600, 390, launch_ts=t + 20, launch_dur=5)
    r = run(tmp_path, steps(body))
    assert r.ranks[0].idle_attribution.stream_wait_us == 300
    f = finding(r, "gpu-idle")
    assert f.bound_pct == pytest.approx(30.0) and f.rank_gains[0].sources == {"idle:stream_wait": 300.0}


def test_gpu_idle_fine_when_host_wait_dominates(tmp_path):
    r = run(tmp_path, kernel_wait_trace(early_launch=False))
    assert r.ranks[0].idle.host_wait_pct > 50
    assert status(r, "gpu-idle") == "fine"


# ---------------------------------------------------------------- C9, C10, C11 launches
def launch_trace(kernel_us: float) -> TraceBuilder:
    def body(b, t):
        for k in range(90):  # ops of 9 µs, each launching one kernel with an 8 µs call
            b.cpu_op("aten::add", t + 10 * k, 9)
            b.kernel(ELEMENT, t + 10 * k + 9, kernel_us, launch_ts=t + 10 * k + 1, launch_dur=8)
    return steps(body)


ELEMENT = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


def test_launch_bound_fires(tmp_path):
    r = run(tmp_path, launch_trace(kernel_us=3))
    a = r.ranks[0].idle_attribution
    # idle in short gaps while the host runs ops: 7 µs before each of kernels 2-90; [t, t+9] ends
    # the 107 µs gap from the previous step's last kernel: a long gap, host work
    assert a.launch_us == 89 * 7 and a.host_ops_us == 9 and a.unattributed_us == 98
    f = finding(r, "launch-bound")
    assert f.bound_pct == pytest.approx(62.3) and "reduce-overhead" in f.fix
    assert status(r, "host-bound") == "fine"
    assert r.ranks[0].launch.kernels_per_step == 90 and r.ranks[0].launch.median_kernel_us == 3


def test_long_kernels_are_not_launch_bound(tmp_path):
    r = run(tmp_path, launch_trace(kernel_us=9.5))
    assert status(r, "launch-bound") == "fine"


def outlier_trace(slow: bool) -> TraceBuilder:
    def body(b, t):
        b.kernel(TC_GEMM, t + 10, 100, launch_ts=t, launch_dur=5)
        b.kernel(TC_GEMM, t + 310, 100, launch_ts=t + 5, launch_dur=300 if slow else 5)
        for k in range(3):
            b.kernel(TC_GEMM, t + 410 + 100 * k, 100, launch_ts=t + 305 + 5 * k, launch_dur=5)
    return steps(body)


def test_launch_outliers_fire(tmp_path):
    r = run(tmp_path, outlier_trace(slow=True))
    f = finding(r, "launch-outliers")
    assert r.ranks[0].launch.kernel_runtime_outliers == 3  # one per analyzed step
    # 295 µs beyond the 5 µs median launch, but the GPU idles only 210 µs in long gaps during
    # host calls: [t+110, t+310] (the slow launch, then the third) and [t, t+10] (the first two
    # launches, at the end of the 300 µs gap from the previous step)
    assert r.ranks[0].launch.runtime_excess_us_per_step == 295
    assert r.ranks[0].idle_attribution.host_ops_us == 210
    assert f.bound_pct == pytest.approx(21.0)


def test_launch_outliers_are_measured_from_the_median_kernel_launch(tmp_path):
    """Per step five pageable copies whose ``cudaMemcpyAsync`` calls block
    1,990 µs each, then four kernel launches of 5, 5, 5 and 300 µs: HTA's
    median over launch and copy calls is a copy's 1,990 µs, the kernel
    launches' median 5 µs. The slow launch costs 295 µs beyond the latter
    per step; measured from HTA's median it would be a negative cost. Steps
    of 12,000 µs."""
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * 12000.0
        b.step(i + 1, t, 12000.0)
        for k in range(5):
            b.memcpy("HtoD", "Pageable", t + 2000 * k + 100, 1800, 1 << 20, launch_ts=t + 2000 * k + 10,
                     launch_dur=1990)
        for k, dur in enumerate((5, 5, 5, 300)):
            b.kernel(TC_GEMM, t + 10500 + 400 * k, 100, launch_ts=t + 10050 + 10 * k, launch_dur=dur)
    r = run(tmp_path, b)
    launch = r.ranks[0].launch
    assert launch.median_runtime_us == 1990  # HTA's, copies included
    assert launch.median_kernel_launch_us == 5
    assert launch.kernel_runtime_outliers == 3  # one per analyzed step
    assert launch.runtime_excess_us_per_step == 295


def test_no_slow_launch_is_fine(tmp_path):
    r = run(tmp_path, outlier_trace(slow=False))
    assert status(r, "launch-outliers") == "fine"


def queue_trace(kernels: int) -> TraceBuilder:
    b = TraceBuilder(rank=0)
    b.step(1, 0, 4000)
    for k in range(kernels):  # launched 1 µs apart, executed from t=2000 on, 2 µs each
        b.kernel(TC_GEMM, 2000 + 2 * k, 2, launch_ts=k, launch_dur=0.5)
    return b


def test_full_launch_queue_fires_with_no_gain(tmp_path):
    r = run(tmp_path, queue_trace(1100))
    f = finding(r, "full-launch-queue")
    assert max(q.max for q in r.ranks[0].launch.queue) >= 1024
    assert f.bound_ms_per_step == 0 and f.severity == "low"
    assert r.ranks[0].launch.full_queue_pct > 5


def test_short_queue_is_fine(tmp_path):
    r = run(tmp_path, queue_trace(100))
    assert status(r, "full-launch-queue") == "fine"


# ---------------------------------------------------------------- C12, C13 compute
def test_tensor_cores_unused_fires_on_fp32_gemms(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t, name=FP32_GEMM)))
    f = finding(r, "tensor-cores-unused")
    assert r.ranks[0].tensor_cores.compute_major == 9 and r.ranks[0].tensor_cores.tensor_core_pct == 0
    assert f.bound_pct == pytest.approx(99.0) and "torch.autocast" in f.fix


@pytest.mark.parametrize("name", [
    # cuBLAS's fp32 GEMM on an H200 (torch 2.11, fp32 nn.Linear): "xmma" in the name, FFMA main loop
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
])
def test_ffma_and_simt_gemms_are_not_tensor_cores(tmp_path, name):
    def gpu_bound(b, t):  # the host waits for the kernel each step: its speed sets the step
        busy(b, t, end=STEP - 20, name=name)
        b.runtime("cudaDeviceSynchronize", t + 8, STEP - 27)
    r = run(tmp_path, steps(gpu_bound))
    assert r.ranks[0].tensor_cores.tensor_core_pct == 0
    f = finding(r, "tensor-cores-unused")
    assert f.whatif is not None and f.whatif.step_us_after < 0.2 * f.whatif.step_us_before
    assert f.severity == "high"


def dataloader_then_fp32_gemm(b, t):
    """A 300 µs DataLoader wait, then an fp32 GEMM to the step's end that the host never waits for."""
    b.cpu_op(DL_WORKERS, t, 300, cat="user_annotation")
    busy(b, t, start=300, name=FP32_GEMM)


def test_a_fix_the_replay_finds_off_the_critical_path_is_low(tmp_path):
    """The same fp32 GEMM filling the step, but the host never waits for it:
    the host's own time sets the step, so Tensor Cores alone buy nothing.
    The rule measured 70 % of the step (its bound), but the gain, the
    severity and the order follow the prediction: the finding is listed after
    one whose fix saves time though its bound is larger."""
    r = run(tmp_path, steps(dataloader_then_fp32_gemm))
    f = finding(r, "tensor-cores-unused")
    assert f.bound_pct > 20 and f.whatif is not None and f.gain_pct == pytest.approx(0.0, abs=0.1)
    assert f.whatif.step_us_after == pytest.approx(f.whatif.step_us_before, rel=1e-3)
    assert f.severity == "low" and expected_pct(f, r) == 0
    # the DataLoader's 30 % (a smaller bound than the GEMMs' 70 %) is what a fix buys here: it comes first
    assert [g.id for g in r.findings] == ["dataloader-bound", "tensor-cores-unused"]
    assert finding(r, "dataloader-bound").severity == "high"


def test_gemms_mostly_off_tensor_cores_fire_though_some_use_them(tmp_path):
    """15 % of the GEMM time on Tensor Cores, 85 % in float32 SIMT kernels
    (a field run: a laptop Ada GPU's ResNet inference, 11 % of its
    convolution time in TF32 kernels): the GEMMs mostly run without Tensor
    Cores, and the finding's bound is the float32 time alone."""
    def mixed(b, t):
        busy(b, t, start=10.0, end=150.0)
        busy(b, t, start=160.0, end=STEP - 30, name=FP32_GEMM)
    r = run(tmp_path, steps(mixed))
    assert 10 < r.ranks[0].tensor_cores.tensor_core_pct < 20
    f = finding(r, "tensor-cores-unused")
    assert f.bound_pct == pytest.approx(100 * (STEP - 30 - 160) / STEP, abs=1.0)


def test_gemms_mostly_on_tensor_cores_are_fine(tmp_path):
    """60 % on Tensor Cores, 40 % float32: the model already uses them; no finding."""
    def mixed(b, t):
        busy(b, t, start=10.0, end=580.0)
        busy(b, t, start=590.0, end=970.0, name=FP32_GEMM)
    r = run(tmp_path, steps(mixed))
    assert r.ranks[0].tensor_cores.tensor_core_pct > 55
    assert status(r, "tensor-cores-unused") == "fine"


def test_tensor_core_gemms_are_fine(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t)))
    assert r.ranks[0].tensor_cores.tensor_core_pct == 100
    assert status(r, "tensor-cores-unused") == "fine"


def test_tensor_cores_not_checked_without_device_properties(tmp_path):
    """No deviceProperties and kernel names that name no architecture (an
    ``ampere_sgemm`` would: tests/test_field_round4.py): not checked."""
    r = run(tmp_path, steps(lambda b, t: busy(b, t, name="void gemm_kernel<float, 128>(float*)"), gpu_name=None))
    assert status(r, "tensor-cores-unused") == "not checked"


def gemm_trace(dims: Optional[list]) -> TraceBuilder:
    def body(b, t):
        b.cpu_op("aten::linear", t + 2, 8, dims=dims, types=["c10::BFloat16"] * 3 if dims else None)
        b.kernel(TC_GEMM, t + 10, 500, launch_ts=t + 3, launch_dur=5)
        b.kernel(TC_GEMM, t + 510, 490, launch_ts=t + 20, launch_dur=5)
    return steps(body)


def test_misaligned_gemm_fires(tmp_path):
    r = run(tmp_path, gemm_trace([[64, 1020], [1020, 1020], [1020]]))
    f = finding(r, "misaligned-gemm")
    # at most what padding K = N = 1020 could save of the linear's 500 µs kernel (issue 29): a bound, not all of it
    from hta_report.analysis.kernels import padding_bound
    assert f.bound_pct == pytest.approx(50.0 * padding_bound("aten::linear", [[64, 1020], [1020, 1020]]))
    assert "1020" in " ".join(f.evidence)


def test_aligned_gemm_is_fine_and_missing_shapes_not_checked(tmp_path):
    r = run(tmp_path, gemm_trace([[64, 1024], [1024, 1024], [1024]]))
    assert status(r, "misaligned-gemm") == "fine"
    r = run(tmp_path / "no", gemm_trace(None))
    assert status(r, "misaligned-gemm") == "not checked"


# ---------------------------------------------------------------- C16, C17, C18, C19 distributed
def comm_trace(comm_start: float, comm_us: float, compute_end: float = 500) -> Callable:
    def body(b, t):
        busy(b, t, end=compute_end)
        b.kernel(NCCL_ALLREDUCE, t + comm_start, comm_us, launch_ts=t + 3, launch_dur=5, stream=20)
    return body


def test_exposed_communication_fires(tmp_path):
    r = run(tmp_path, steps(comm_trace(500, 300)))
    f = finding(r, "exposed-communication")
    assert f.bound_pct == pytest.approx(30.0) and "unknown (one rank" in f.evidence[0]
    assert status(r, "rank-straggler") == "not checked"


def test_overlapped_communication_is_fine(tmp_path):
    r = run(tmp_path, steps(comm_trace(100, 300)))
    assert status(r, "exposed-communication") == "fine"


def test_exposed_communication_not_checked_without_nccl(tmp_path):
    r = run(tmp_path, steps(lambda b, t: busy(b, t)))
    assert status(r, "exposed-communication") == "not checked"


def test_straggler_fires_on_sync_wait(tmp_path):
    fast = steps(comm_trace(300, 600, compute_end=300), rank=0, world_size=2)
    slow = steps(comm_trace(800, 100, compute_end=800), rank=1, world_size=2)
    r = run(tmp_path, fast, slow)
    assert [x.comm.sync_wait_us_per_step for x in r.ranks] == [500, 0]
    f = finding(r, "rank-straggler")
    assert f.bound_pct == pytest.approx(50.0) and f.ranks == [1] and "Rank 1" in f.title
    assert status(r, "exposed-communication") == "fine"  # 600 exposed - 500 waiting = 10 %, not > 10 %


def test_balanced_ranks_are_fine(tmp_path):
    r = run(tmp_path, *[steps(comm_trace(500, 100), rank=k, world_size=2) for k in (0, 1)])
    assert status(r, "rank-straggler") == "fine"


def test_data_parallel_fires_without_gain(tmp_path):
    def body(b, t):
        b.cpu_op("DataParallel.forward", t + 1, 400, cat="user_annotation")
        busy(b, t)
    r = run(tmp_path, steps(body))
    f = finding(r, "data-parallel")
    assert f.bound_ms_per_step == 0 and "DDP(" in f.fix
    r2 = run(tmp_path / "x", steps(lambda b, t: busy(b, t)))
    assert status(r2, "data-parallel") == "fine"


def gloo_trace(backend: str, gpu: bool = True) -> TraceBuilder:
    def body(b, t):
        if gpu:
            busy(b, t, end=500)
        b.cpu_op("gloo:all_reduce", t + 500, 200)
    return steps(body, backend=backend, world_size=2, gpu_name="NVIDIA H100" if gpu else None)


def test_gloo_on_gpus_fires(tmp_path):
    r = run(tmp_path, gloo_trace("gloo"))
    f = finding(r, "non-nccl-backend")
    assert f.bound_pct == pytest.approx(20.0) and 'backend="nccl"' in f.fix


def test_nccl_is_fine_and_gloo_on_cpu_not_checked(tmp_path):
    assert status(run(tmp_path, gloo_trace("nccl")), "non-nccl-backend") == "fine"
    assert status(run(tmp_path / "cpu", gloo_trace("gloo", gpu=False)), "non-nccl-backend") == "not checked"


# ---------------------------------------------------------------- C21, C22 optimizer
def optimizer_trace(foreach: bool, name: str = "AdamW") -> TraceBuilder:
    def body(b, t):
        busy(b, t, end=500)
        b.cpu_op(f"Optimizer.step#{name}.step", t + 500, 400, cat="user_annotation")
        if foreach:
            b.cpu_op("aten::_foreach_add_", t + 501, 5)
        for k in range(20):  # per-parameter ops: each launches a 3 µs kernel
            b.cpu_op("aten::add_", t + 500 + 20 * k, 18)
            b.kernel("void at::native::vectorized_elementwise_kernel<4>(int)", t + 510 + 20 * k, 3,
                     launch_ts=t + 502 + 20 * k, launch_dur=5)
    return steps(body)


def test_unfused_optimizer_fires(tmp_path):
    r = run(tmp_path, optimizer_trace(foreach=False))
    o = r.ranks[0].optimizer
    assert (o.step_calls, o.kernels_per_step, o.median_kernel_us, o.multi_tensor) == (3, 20, 3, False)
    # the GPU idles in Optimizer.step [t+500, t+900] except its 20 x 3 µs kernels
    assert r.ranks[0].idle_attribution.optimizer_us == 340
    f = finding(r, "unfused-optimizer")
    # the bound: that idle and the kernels' 60 µs (a fused step runs a few kernels in their place)
    assert f.bound_pct == pytest.approx(40.0) and "fused=True" in f.fix
    assert f.rank_gains[0].sources == {"idle:optimizer": 340.0, "compute": 60.0}


@pytest.mark.parametrize("name, title, code", [
    ("SGD", "Use a fused optimizer", "torch.optim.SGD(model.parameters(), lr=..., fused=True)"),
    ("RMSprop", "Use a foreach optimizer", "torch.optim.RMSprop(model.parameters(), lr=..., foreach=True)"),
    ("MyOpt", "Use a fused optimizer", "# MyOpt has no foreach or fused implementation in torch.optim"),
])
def test_unfused_optimizer_fix_names_the_traces_optimizer(tmp_path, name, title, code):
    f = finding(run(tmp_path, optimizer_trace(foreach=False, name=name)), "unfused-optimizer")
    assert f.title.startswith(title) and code in f.fix
    # only the trace's class is named, except as the example for a class torch.optim has no fused form of
    assert ("AdamW" in f.fix) == (name == "MyOpt")
    assert ("fused=True runs on CUDA" in f.fix) == (name != "RMSprop")


def test_foreach_optimizer_is_fine(tmp_path):
    r = run(tmp_path, optimizer_trace(foreach=True))
    assert r.ranks[0].optimizer.multi_tensor and r.ranks[0].idle_attribution.optimizer_us == 0
    assert status(r, "unfused-optimizer") == "fine"


def test_optimizer_on_cpu_only_traces_is_judged_on_host_time(tmp_path):
    def body(b, t, ops):
        b.cpu_op("Optimizer.step#AdamW.step", t, 400, cat="user_annotation")
        for k in range(ops):  # per-parameter ops of the single-tensor loop
            b.cpu_op("aten::add_", t + 1 + 10 * k, 8)
    r = run(tmp_path / "a", steps(lambda b, t: body(b, t, 30), gpu_name=None))
    f = finding(r, "unfused-optimizer")
    assert f.bound_pct == pytest.approx(40.0) and "30 CPU ops" in f.title
    # the gain is what the fused step saves (the region less the arithmetic it keeps), from the optimizer's time
    assert set(f.rank_gains[0].sources) == {"host:optimizer"}
    assert f.rank_gains[0].gain_us == pytest.approx(f.gain_ms_per_step * 1e3) and 0 < f.gain_pct < 40.0
    r = run(tmp_path / "b", steps(lambda b, t: body(b, t, 3), gpu_name=None))
    assert status(r, "unfused-optimizer") == "fine"


def zero_grad_trace(inside_zeros: bool, gpu: bool = True) -> TraceBuilder:
    def body(b, t):
        if gpu:
            busy(b, t, end=500)
        b.cpu_op("Optimizer.zero_grad#AdamW.zero_grad", t + 500, 200, cat="user_annotation")
        if inside_zeros:
            b.cpu_op("aten::zeros", t + 500, 200)
        for k in range(10):
            b.cpu_op("aten::zero_", t + 500 + 20 * k, 18)
            if gpu:
                b.kernel("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>(int)",
                         t + 510 + 20 * k, 5, launch_ts=t + 502 + 20 * k, launch_dur=5)
    return steps(body, gpu_name="NVIDIA H100" if gpu else None)


def test_zero_grad_zeros_fires(tmp_path):
    r = run(tmp_path, zero_grad_trace(inside_zeros=False))
    o = r.ranks[0].optimizer
    assert (o.zero_ops_per_step, o.zero_grad_kernel_us_per_step) == (10, 50)
    # GPU idle in zero_grad (200 - 50 µs) plus its kernels (50 µs)
    f = finding(r, "zero-grad-zeros")
    assert f.bound_pct == pytest.approx(20.0) and "set_to_none=True" in f.fix


def test_zero_grad_on_cpu_uses_host_time(tmp_path):
    r = run(tmp_path, zero_grad_trace(inside_zeros=False, gpu=False))
    assert finding(r, "zero-grad-zeros").bound_pct == pytest.approx(20.0)


def test_zero_under_zeros_is_fine(tmp_path):
    r = run(tmp_path, zero_grad_trace(inside_zeros=True))
    assert status(r, "zero-grad-zeros") == "fine"


# ---------------------------------------------------------------- C24 step outliers
def outlier_steps(durations: List[float]) -> TraceBuilder:
    b = TraceBuilder(rank=0, gpu_name=None)
    t = 0.0
    for i, d in enumerate(durations):
        b.step(i + 1, t, d)
        b.cpu_op("aten::mm", t, d - 10)
        t += d
    return b


def test_step_outlier_fires(tmp_path):
    r = run(tmp_path, outlier_steps([1000] * 4 + [5000] + [1000] * 3))
    f = finding(r, "step-time-outliers")
    # steps 2-8 analyzed; step 5 is 4000 µs over the others: 571.4 µs per step of a 1571.4 µs mean
    assert f.bound_ms_per_step == pytest.approx(4.0 / 7)
    assert f.bound_pct == pytest.approx(100 * 4000 / 11000)
    assert "step 5 took 5.00 ms" in f.evidence[0]


def test_step_outliers_not_checked_where_the_host_ran_ahead(tmp_path):
    # where the GPU paces the run, a long ProfilerStep is the host blocked on a full launch queue
    from hta_report.rules import advise
    r = run(tmp_path, outlier_steps([1000] * 4 + [5000] + [1000] * 3))
    assert status(r, "step-time-outliers") == "fired"
    r.ranks[0].replay.gpu_paced_step_us = 6000.0
    check = next(c for c in advise(r).checks if c.id == "step-time-outliers")
    assert check.status == "not checked" and "ran ahead of the GPU on 1 rank" in check.detail


def test_even_steps_are_fine_and_few_steps_not_checked(tmp_path):
    assert status(run(tmp_path, outlier_steps([1000, 1010, 990, 1000, 1005, 995, 1000])), "step-time-outliers") == "fine"
    assert status(run(tmp_path / "few", outlier_steps([1000, 1000, 5000, 1000])), "step-time-outliers") == "not checked"


# ---------------------------------------------------------------- engine and configuration
def test_findings_sorted_by_gain_and_every_rule_checked(tmp_path):
    r = run(tmp_path, steps(dataloader_then_fp32_gemm))
    # by severity (what the fix is expected to save), then by bound
    keys = [(SEVERITY_RANK[f.severity], f.bound_pct) for f in r.findings]
    assert keys == sorted(keys, reverse=True)
    cfg = AdviceConfig()
    assert all(f.severity == severity(expected_pct(f, r), cfg) and expected_pct(f, r) <= f.bound_pct
               for f in r.findings)
    assert len(r.checks) == len(RULES)
    assert {c.status for c in r.checks} <= {"fired", "fine", "covered", "not checked"}
    assert {f.id for f in r.findings} == {c.id for c in r.checks if c.status == "fired"}


def test_config_thresholds_and_disable(tmp_path):
    b = dataloader_trace(DL_WORKERS, 30)  # 3 % DataLoader wait
    cfg = AdviceConfig(dataloader_pct=2.0, disable=["gpu-gaps"])
    r = run(tmp_path, b, config=cfg)
    assert finding(r, "dataloader-bound").bound_pct == pytest.approx(3.0)
    assert "> 2 % of the step" in finding(r, "dataloader-bound").threshold
    assert status(r, "gpu-gaps") == "disabled"


def test_exposed_memcpy_claims_only_what_overlap_with_kernels_can_hide(tmp_path):
    # Unseen runs (pytorch/benchmark's copy benchmark, A100): steps that only
    # copy were told to "overlap copies with compute" at 99.8 % of the step;
    # a step of copies C and kernels K shrinks to max(C, K) at best.
    def only_copies(b, t):
        b.memcpy("HtoD", "Pinned", t + 10, 600, 12_000_000, launch_ts=t + 5)

    def short_kernel(b, t):
        b.memcpy("HtoD", "Pinned", t + 10, 600, 12_000_000, launch_ts=t + 5)
        b.kernel(TC_GEMM, t + 620, 100, launch_ts=t + 612, launch_dur=5)

    r = run(tmp_path / "copies", steps(only_copies))
    assert r.ranks[0].memcpy.other_exposed_us_per_step == pytest.approx(600)
    assert status(r, "exposed-memcpy") == "fine"
    r = run(tmp_path / "short", steps(short_kernel))
    f = finding(r, "exposed-memcpy")
    assert f.gain_ms_per_step == pytest.approx(0.1, rel=0.05)  # the 100 µs kernel, not the 600 µs copy
    assert any("overlap hides at most that" in e for e in f.evidence)
