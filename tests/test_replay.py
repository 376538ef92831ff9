"""The replay of a rank's execution graph (issue 30, first slice): fidelity,
what-ifs and the critical path on synthetic traces played on ``kineto.Sim``,
where the trace "after the fix" is the same loop built without the cause,
so each what-if's prediction is checked against a measured step time."""

import json
from typing import List

import numpy as np
import pytest

from hta_report.analysis import rank as rank_steps
from hta_report.api import analyze
from hta_report.analysis.events import RankEvents
from hta_report.analysis.regions import host_windows
from hta_report.analysis.replay import replay, schedule
from hta_report.analysis.replay.edits import fixes
from hta_report.analysis.replay.graph import build_graph
from hta_report.load import load_traces
from hta_report.model import ALL_EDITS, REPLAY_STEP, AnalysisResult, RankResult, Replay
from hta_report.model_check import check_result
from hta_report.render.replay_notes import replay_note
from hta_report.replay_terms import EditLabel, NoteCode
from kineto import op_loop_trace, ELEMENTWISE, FP32_GEMM, TC_GEMM, Sim, TraceBuilder, training_trace


def _events(tmp_path, b: TraceBuilder, name: str = "t") -> RankEvents:
    d = tmp_path / name
    d.mkdir()
    b.write(d / "rank-0.json")
    loaded = load_traces(d, include_last_step=True)
    return RankEvents.from_loaded(loaded, loaded.files[0].rank)


def _replay(tmp_path, b: TraceBuilder, name: str = "t") -> Replay:
    ev = _events(tmp_path, b, name)
    return replay(ev, host_windows(ev))


def _after(r: Replay, edit: str) -> float:
    return next(w.step_us_after for w in r.whatifs if w.edit == edit)


def sync_loop(sync: bool, steps: int = 6, ops: int = 20) -> TraceBuilder:
    """Per step: a 1 ms GEMM of the backward pass, then (``sync``)
    ``loss.item()``, which waits for it (a logged loss: removable), then ``ops``
    host ops of 70 µs each launching a 10 µs kernel. Without the sync the host
    runs the ops while the GEMM runs: host-bound, no GPU backlog."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    for s in range(1, steps + 1):
        t0 = sim.t
        with sim.region("autograd::engine::evaluate_function: MmBackward0"):
            sim.op("aten::mm", [(TC_GEMM, 1000.0)], host_us=20)
        if sync:
            sim.item()
        for _ in range(ops):
            sim.op("aten::add", [(ELEMENTWISE, 10.0)], host_us=70)
        sim.idle(20)
        b.step(s, t0, sim.t - t0)
    return b


def test_replay_of_the_unmodified_trace_reproduces_the_measured_step(tmp_path):
    """Host-bound and GPU-bound parts, slow launches, a sync every step."""
    b = training_trace(steps=6, item_every_step=True, slow_launch_us=80.0, dataloader_us=300.0)
    r = _replay(tmp_path, b)
    ev = _events(tmp_path, b, "again")
    hw = host_windows(ev)
    measured = float((hw[:, 1] - hw[:, 0]).mean())
    assert r.steps == len(hw) == 5
    assert r.measured_step_us == pytest.approx(measured)
    assert r.replayed_step_us == pytest.approx(measured, rel=0.01)
    assert r.error_pct < 1.0


def test_every_node_replays_at_its_measured_time(tmp_path):
    """The schedule of the unmodified graph puts every node (host calls, GPU
    operations, waits) where the trace has it: the graph's edges and delays
    explain the measured times."""
    ev = _events(tmp_path, training_trace(steps=4, item_every_step=True, allreduce_us=200.0))
    hw = host_windows(ev)
    g = build_graph(ev, hw.ravel(), float(hw[0, 0]), float(hw[-1, 1]))
    start, end, _ = schedule(g)
    assert np.allclose(np.array(end)[1:], g.m_end[1:], atol=1e-6)
    assert (g.ekind == 4).any(), "the item() syncs wait for GPU work"


def test_no_sync_whatif_predicts_the_loop_built_without_the_sync(tmp_path):
    with_sync = _replay(tmp_path, sync_loop(sync=True), "sync")
    without = _replay(tmp_path, sync_loop(sync=False), "nosync")
    predicted = _after(with_sync, EditLabel.NO_SYNC)
    # the sync costs the step more than 10 %: returning the measured time fails
    assert with_sync.measured_step_us > 1.3 * without.measured_step_us
    assert predicted == pytest.approx(without.measured_step_us, rel=0.10)


def test_dataloader_whatif_predicts_the_loop_without_the_dataloader_wait(tmp_path):
    """The DataLoader wait at a step's start overlaps the previous step's
    backward on the GPU (``loss.item()`` per forward layer, none at the
    step's end): without it the first sync waits for that backward, so the
    step gains less than the 2 ms of host time; the prediction must see it."""
    slow = _replay(tmp_path, training_trace(steps=6, item_per_layer=True, dataloader_us=2000.0), "slow")
    fast = _replay(tmp_path, training_trace(steps=6, item_per_layer=True, dataloader_us=0.0), "fast")
    predicted = _after(slow, EditLabel.DATALOADER_HIDDEN)
    assert slow.measured_step_us > 1.3 * fast.measured_step_us
    assert predicted == pytest.approx(fast.measured_step_us, rel=0.10)
    # removing the host time alone would predict 2 ms less, 10 % below the measured step without it
    assert slow.measured_step_us - 2000.0 < 0.9 * fast.measured_step_us
    # and a trace without DataLoader time gains nothing
    assert _after(fast, EditLabel.DATALOADER_HIDDEN) == pytest.approx(fast.measured_step_us, rel=0.01)


def test_critical_path_names_the_dominant_op(tmp_path):
    r = _replay(tmp_path, sync_loop(sync=True, ops=10))  # 10 x 64 µs of host work after the 1 ms GEMM
    top = r.critical_path[0]
    assert (top.name, top.kind) == (TC_GEMM, "gpu")
    assert top.us == pytest.approx(1000.0, rel=0.05)
    assert 0 < r.host_share_pct < 100
    dl = _replay(tmp_path, training_trace(steps=4, dataloader_us=5000.0), "dl").critical_path[0]
    assert dl.name.startswith("enumerate(DataLoader)#") and dl.kind == "cpu"


def test_without_gpu_the_host_timeline_is_replayed_and_edited(tmp_path):
    """A CPU-only rank: each 1,000 µs step holds a 300 µs DataLoader fetch, a
    100 µs zero_grad writing zeros (80 µs of aten::zero_) and a 50 µs
    aten::item (a logged value: zero_grad makes it a training step); nothing
    overlaps the host, so each edit removes exactly its ops' time, and all of
    them together the sum; the DataLoader's workers share the cores the
    training's threads use, which the trace does not show: its edit keeps
    45 % of the fetch (the middle of 10-80 %), and its interval spans that."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for s in range(1, 6):
        t = s * 1000.0
        b.step(s, t, 1000.0)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 10, 300.0, cat="user_annotation")
        b.cpu_op("aten::linear", t + 320, 400.0)
        b.cpu_op("Optimizer.zero_grad#AdamW.zero_grad", t + 730, 100.0, cat="user_annotation")
        b.cpu_op("aten::zero_", t + 740, 80.0)
        b.cpu_op("aten::item", t + 850, 50.0)
    r = _replay(tmp_path, b)
    assert r.steps > 0 and r.error_pct < 1e-6 and [n.code for n in r.notes] == [NoteCode.HOST_ONLY]
    assert "no GPU work" in replay_note(r)
    assert r.measured_step_us == pytest.approx(1000.0)
    hidden = next(w for w in r.whatifs if w.edit == EditLabel.DATALOADER_HIDDEN)
    assert hidden.applies and hidden.step_us_after == pytest.approx(1000.0 - 0.55 * 300)
    assert hidden.step_us_low <= 1000.0 - 0.9 * 300 and hidden.step_us_high >= 1000.0 - 0.2 * 300
    assert _after(r, EditLabel.ZERO_GRAD_NONE) == pytest.approx(920.0)
    assert _after(r, EditLabel.NO_SYNC) == pytest.approx(950.0)
    assert _after(r, EditLabel.COPIES_PINNED) == pytest.approx(1000.0)
    assert _after(r, ALL_EDITS) == pytest.approx(1000.0 - 80 - 50 - 0.55 * 300)
    path = {op.name: op.us for op in r.critical_path}  # a whole step on the path, by the ops' self time
    assert path == pytest.approx({"aten::linear": 400.0, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__":
                                  300.0, "host work": 150.0, "aten::zero_": 80.0, "aten::item": 50.0})
    assert r.host_share_pct == pytest.approx(100.0)


def test_without_runtime_calls_only_device_reads_a_fix_can_drop_are_removed(tmp_path):
    """A training step whose device the profile did not record (no runtime
    call, no GPU record: the MoE 6.7960 field run). Per 2,000 µs step: an
    ``Optimizer.step#AdamW.step`` holding 20 reads of its CPU step counter
    (``aten::item`` of 1.3 µs each: shorter than any device read,
    ``cpu_side.DEVICE_READ_MIN_US``), an ``aten::bincount`` whose 600 µs
    ``aten::item`` reads the input's maximum to size its output (required:
    kind ``shape``), and the loss read, 400 µs (a logged value: removable).
    The sync kinds count the two device reads once each per step, and the
    ``no host-device sync`` edit removes exactly the loss read's 400 µs."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for s in range(1, 6):
        t = s * 2000.0
        b.step(s, t, 2000.0)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", t + 10, 200.0)
        b.cpu_op("aten::bincount", t + 300, 700.0)
        b.cpu_op("aten::item", t + 350, 600.0)
        b.cpu_op("aten::_local_scalar_dense", t + 351, 598.0)
        b.cpu_op("Optimizer.step#AdamW.step", t + 1100, 300.0, cat="user_annotation")
        for k in range(20):
            b.cpu_op("aten::item", t + 1110 + 10 * k, 1.3)
            b.cpu_op("aten::_local_scalar_dense", t + 1110.4 + 10 * k, 0.5)
        b.cpu_op("aten::item", t + 1500, 400.0)
        b.cpu_op("aten::_local_scalar_dense", t + 1501, 398.0)
    d = tmp_path / "unrecorded"
    d.mkdir()
    b.write(d / "rank-0.json")
    r = analyze(d).ranks[0]
    kinds = {k.kind: (k.per_step, k.us_per_step, k.removable) for k in r.cpu.sync_kinds}
    assert kinds == {"shape": pytest.approx((1.0, 600.0, False)), "logged": pytest.approx((1.0, 400.0, True))}
    assert r.replay.measured_step_us == pytest.approx(2000.0)
    assert _after(r.replay, EditLabel.NO_SYNC) == pytest.approx(1600.0)


def test_without_steps_the_whole_window_is_replayed(tmp_path):
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    for _ in range(10):
        sim.op("aten::mm", [(TC_GEMM, 200.0)], host_us=30)
    sim.synchronize()
    r = _replay(tmp_path, b)
    assert r.steps == 1 and [n.code for n in r.notes] == [NoteCode.NO_STEPS, NoteCode.GPU_LIMITS]
    assert replay_note(r).startswith("no ProfilerStep: one window")
    assert r.error_pct < 1.0
    assert r.measured_step_us == pytest.approx(sim.t, rel=0.02)


def test_a_failing_replay_fails_only_its_step(tmp_path, monkeypatch):
    d = tmp_path / "run"
    d.mkdir()
    training_trace(steps=4).write(d / "rank-0.json")
    loaded = load_traces(d, include_last_step=True)

    def broken(ev, hw, rank=0):
        raise ValueError("boom")

    monkeypatch.setattr(rank_steps, "replay", broken)
    rr = rank_steps.own_part(loaded, loaded.files[0]).result
    assert [f.step for f in rr.failures] == [REPLAY_STEP]
    assert rr.steps.count == 4 and rr.replay == Replay()


def test_replay_round_trips_through_the_result_json(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    training_trace(steps=4, item_every_step=True).write(d / "rank-0.json")
    loaded = load_traces(d, include_last_step=True)
    rr = rank_steps.own_part(loaded, loaded.files[0]).result
    assert isinstance(rr, RankResult) and rr.replay.steps == 3 and len(rr.replay.whatifs) >= len(fixes()) + 1
    from hta_report.api import analyze
    result = analyze(d, include_last_step=True)
    doc = json.loads(result.to_json())
    check_result(doc)
    back = AnalysisResult.from_dict(doc)
    assert back.ranks[0].replay == result.ranks[0].replay
    assert doc["ranks"][0]["replay"]["measured_step_us"] > 0


def _step_with_gpu_tail(tmp_path, b: TraceBuilder, name: str) -> float:
    """The mean step of a trace as the what-ifs measure it (:func:`replay.span`:
    until the GPU work the steps launched ends, per step), µs."""
    from hta_report.analysis import replay as R
    ev = _events(tmp_path, b, name)
    g, w, steps = R.rank_graph(ev, host_windows(ev))
    return R.span(g, w, R.schedule(g)[1], steps) / len(w)


@pytest.mark.parametrize("edit, before, after", [
    (EditLabel.ZERO_GRAD_NONE, dict(set_to_none=False, params=200), dict(set_to_none=True, params=200)),
    (EditLabel.NO_SYNC, dict(item_every_step=True, host_op_us=150), dict(item_every_step=False, host_op_us=150)),
    (EditLabel.OPTIMIZER_FUSED, dict(optimizer="single", params=200, host_op_us=150),
     dict(optimizer="fused", params=200, host_op_us=150)),
])
def test_an_edit_predicts_the_loop_built_without_the_cause(tmp_path, edit, before, after):
    """zero_grad writing 200 zero-fills per step (GPU-bound once the host runs
    ahead), a host-bound loop reading the loss every step, and a host-bound
    loop whose single-tensor optimizer step runs 1,000 ops of 12 µs over 200
    parameters (against one fused op of 20 µs host time and 40 µs on the GPU,
    which the edit leaves out): the edit's prediction lands within 10 % of
    the same loop built without the cause."""
    r = _replay(tmp_path, training_trace(steps=6, **before), "before")
    measured_after = _step_with_gpu_tail(tmp_path, training_trace(steps=6, **after), "after")
    predicted = _after(r, edit)
    assert predicted < r.measured_step_us
    assert abs(predicted - measured_after) <= 0.10 * measured_after


@pytest.mark.parametrize("backwards", [1, 2])
def test_set_to_none_also_drops_backward_s_adds_into_zeroed_gradients(tmp_path, backwards):
    """Two parameters: zero_grad writes two zeros (2 × 40 µs), then each
    backward's AccumulateGrad adds into them (2 × 30 µs per backward). With
    set_to_none the first backward takes the gradients as they are; with two
    backwards per step (accumulation) the adds stay, so only the zeros go."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for s in range(1, 6):
        t = s * 1000.0
        b.step(s, t, 1000.0)
        b.cpu_op("Optimizer.zero_grad#SGD.zero_grad", t + 10, 100.0, cat="user_annotation")
        b.cpu_op("aten::zero_", t + 15, 40.0)
        b.cpu_op("aten::zero_", t + 60, 40.0)
        for k in range(backwards):
            for p in range(2):
                t0 = t + 200 + 200 * k + 80 * p
                b.cpu_op("torch::autograd::AccumulateGrad", t0, 50.0)
                b.cpu_op("aten::add_", t0 + 5, 30.0)
    r = _replay(tmp_path, b, f"b{backwards}")
    saved = r.measured_step_us - _after(r, EditLabel.ZERO_GRAD_NONE)
    assert saved == pytest.approx(80.0 + (60.0 if backwards == 1 else 0.0))


def test_another_thread_s_work_moves_with_the_step_thread(tmp_path):
    """Per 1,000 µs step the training thread loads a batch (400 µs of
    DataLoader), launches a 50 µs kernel, then a second thread (autograd's
    backward thread) launches 300 µs of kernels after idling; a sync at the
    step's end waits for them. Hiding the DataLoader must move the backward
    thread's launches too (they are triggered by the training thread), so the
    step shortens by the DataLoader time; pinned at their measured times they
    would not move at all."""
    b = TraceBuilder(rank=0)
    bwd = 2
    for s in range(1, 6):
        t = s * 1000.0
        b.step(s, t, 1000.0)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 5, 400.0, cat="user_annotation")
        b.kernel("fwd", t + 420, 50.0, launch_ts=t + 410)
        for k in range(3):  # the backward thread, after idling since the last step
            b.kernel("bwd", t + 500 + 100 * k, 100.0, launch_ts=t + 480 + 5 * k, tid=bwd)
        b.runtime("cudaDeviceSynchronize", t + 500, 310.0)
    r = _replay(tmp_path, b)
    assert r.error_pct < 1e-6
    assert r.measured_step_us - _after(r, EditLabel.DATALOADER_HIDDEN) == pytest.approx(400.0, abs=1.0)


MIB = 1 << 20


def copy_loop(pinned: bool, gpu_name: str = "NVIDIA H200", steps: int = 6, queued_us: float = 0.0) -> TraceBuilder:
    """Per step an 8 MiB batch copied to the device, then a 1 ms kernel, the
    host going on to the next step at once. Pageable: the copy waits for the
    stream, runs at 8.4 GB/s (998.6 µs, as measured on an H200) and its
    ``cudaMemcpyAsync`` returns 15 µs before the copy's last chunk lands (the
    driver's staging): the step is copy + kernel. Pinned: the copy runs at
    the H200's table rate (PCIe gen 5 at 80 %), the call returns at once and
    the host runs ahead of the GPU. ``queued_us``: a kernel that long,
    launched before the first step, is still running when it starts."""
    b = TraceBuilder(rank=0, gpu_name=gpu_name)
    copy_us = 8 * MIB / (8.4e3 if not pinned else 63.0 * 0.8 * 1e3)
    h, gpu_free = 100.0, 0.0
    if queued_us:
        b.kernel(TC_GEMM, 60.0, queued_us, launch_ts=40.0, launch_dur=5.0)
        gpu_free = 60.0 + queued_us
    for s in range(1, steps + 1):
        t, call = h, h + 3
        start = max(call + 10, gpu_free)
        call_end = call + 5 if pinned else start + copy_us - 15
        b.memcpy("HtoD", "Pinned" if pinned else "Pageable", start, copy_us, 8 * MIB, launch_ts=call,
                 launch_dur=call_end - call)
        launch = call_end + 5
        k0 = max(launch + 10, start + copy_us)
        b.kernel(TC_GEMM, k0, 1000.0, launch_ts=launch, launch_dur=5.0)
        gpu_free = k0 + 1000.0
        b.step(s, t, launch + 10 - t)
        h = launch + 12
    return b


def test_pinned_copies_edit_copies_at_the_pinned_rate(tmp_path):
    """A pageable copy whose call returns just before its copy ends is a
    blocking copy (the replay stays exact); the edit runs it at the pinned
    rate of the device's link, which predicts the loop recorded pinned (GPU
    -bound there: its step is the GPU's busy time per step); on an unknown
    device the copy keeps its measured time (the old prediction)."""
    ev = _events(tmp_path, copy_loop(pinned=False), "pageable")
    r = replay(ev, host_windows(ev), 0, ["NVIDIA H200"])
    assert r.error_pct < 1e-6
    pinned = _events(tmp_path, copy_loop(pinned=True), "pinned")
    after = float(pinned.gpu["dur"].sum()) / 6
    predicted = _after(r, EditLabel.COPIES_PINNED)
    assert abs(predicted - after) <= 0.05 * after, (predicted, after)
    unknown = replay(ev, host_windows(ev), 0, ["Mystery GPU"])
    assert _after(unknown, EditLabel.COPIES_PINNED) > 0.95 * unknown.measured_step_us


def test_cuda_graph_edit_keeps_the_dataloader_and_runs_kernels_back_to_back(tmp_path):
    """Launch-bound steps: a 300 µs DataLoader fetch, then 40 kernels of 5 µs
    launched 40 µs apart from t + 322 to t + 1,890, then 110 µs of host time
    to the step's end. Captured in a CUDA graph, the region from the first
    launch to the last goes (its launches' host time; the kernels run back to
    back, 200 µs a step, while the host does the rest), and the host time
    outside it stays: the DataLoader and the Python before the first launch
    and after the last, 432 µs a step; plus the last step's 200 µs of GPU
    work spread over the 5 analyzed steps (the what-if's span)."""
    b = TraceBuilder(rank=0)
    for s in range(1, 7):
        t = s * 2000.0
        b.step(s, t, 2000.0)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 5, 300.0, cat="user_annotation")
        for k in range(40):
            at = t + 320 + 40 * k
            b.cpu_op("aten::add", at, 30.0)
            b.kernel(ELEMENTWISE, at + 18, 5.0, launch_ts=at + 2, launch_dur=8.0)
    r = _replay(tmp_path, b)
    assert r.error_pct < 1e-6
    predicted = _after(r, EditLabel.CUDA_GRAPH)
    outside = 2000.0 - (320 + 40 * 39 + 10 - 322)
    assert outside <= predicted <= outside + 40 * 5 / r.steps + 5, predicted
    assert _after(r, EditLabel.DATALOADER_HIDDEN) > 1500  # the launches, not the fetch, hold this step


def test_a_host_that_ran_ahead_starts_the_what_ifs_from_the_gpu_s_time(tmp_path):
    """Pinned copies: the host's 25 µs steps run ahead of a GPU busy 1,166 µs a step. The
    ProfilerStep windows measure the host alone; the what-ifs start from the time per step
    counting the GPU work the steps leave behind, and the note says so."""
    ev = _events(tmp_path, copy_loop(pinned=True), "ahead")
    r = replay(ev, host_windows(ev), 0, ["NVIDIA H200"])
    before = next(w.step_us_before for w in r.whatifs)
    assert r.measured_step_us < 100 and before > 10 * r.measured_step_us
    ahead = r.notes[-1]
    assert ahead.code == NoteCode.HOST_AHEAD
    assert ahead.values == {"before_us": before, "measured_us": r.measured_step_us}
    assert f"the host ran ahead of the GPU: what-ifs start from {before / 1e3:.2f} ms per step" in replay_note(r)
    assert r.gpu_paced_step_us == before  # the result says so, not only the note
    blocking = _events(tmp_path, copy_loop(pinned=False), "blocking")
    assert replay(blocking, host_windows(blocking), 0, ["NVIDIA H200"]).gpu_paced_step_us == 0.0


def test_the_headline_gives_the_gpu_paced_step_where_the_host_ran_ahead(tmp_path):
    """The mean ProfilerStep of a host that ran ahead is its enqueueing alone: the headline
    says so and gives the time per step counting the GPU work; a
    host that waits for its copies gets the plain mean step."""
    from hta_report.api import analyze
    from hta_report.render import reporter

    for pinned in (True, False):
        d = tmp_path / f"pinned-{pinned}"
        d.mkdir()
        copy_loop(pinned=pinned).write(d / "rank-0.json")
        result = analyze(d, include_last_step=True)
        text = str(reporter("md").render(result, None))
        paced = result.ranks[0].replay.gpu_paced_step_us
        if pinned:
            assert paced > 10 * result.ranks[0].steps.mean_us
            assert f"it ran ahead of the GPU: {paced / 1e3:.2f} ms a step counting the GPU work" in text
        else:
            assert paced == 0.0 and "ran ahead of the GPU" not in text


def test_work_queued_before_the_first_window_is_not_counted_as_the_steps(tmp_path):
    """The same host running ahead, after a 5 ms kernel launched before the first window (an
    earlier step's work still queued when profiling starts): the GPU runs it first, then the
    steps' copies and kernels. The time per step counts from the end of that queued work,
    as it counts to the end of the last step's: 1,166 µs of GPU work a step, not 5 ms more
    spread over the steps (recorded on an H200: 18.7 against 15.36 ms a step, 2026-11-27)."""
    ev = _events(tmp_path, copy_loop(pinned=True, queued_us=5000.0), "queued")
    r = replay(ev, host_windows(ev), 0, ["NVIDIA H200"])
    per_step = float(ev.gpu["dur"].sum() - 5000.0) / 6
    before = next(w.step_us_before for w in r.whatifs)
    assert before == pytest.approx(per_step, rel=0.01), (before, per_step)
    assert r.error_pct < 1e-6 and "the host ran ahead of the GPU" in replay_note(r)


def test_tensor_core_edit_divides_fp32_gemms_by_the_device_s_ratio(tmp_path):
    """Steps of one 1 ms fp32 GEMM (no Tensor Cores) and a 100 µs elementwise kernel, the host
    waiting for both (a sync at the step's end): on an H100 (dense bf16 989 / fp32 67 TFLOP/s)
    the GEMM takes 1000 / 14.8 µs; on an unknown device nothing changes."""
    def loop(gpu_name: str) -> TraceBuilder:
        b = TraceBuilder(rank=0, gpu_name=gpu_name)
        t = 100.0
        for s in range(1, 7):
            b.cpu_op("aten::mm", t + 5, 20.0)
            b.kernel(FP32_GEMM, t + 30, 1000.0, launch_ts=t + 10)
            b.kernel(ELEMENTWISE, t + 1035, 100.0, launch_ts=t + 40)
            b.runtime("cudaStreamSynchronize", t + 50, 1137.0 - 50)
            b.step(s, t, 1140.0)
            t += 1145.0
        return b
    ev = _events(tmp_path, loop("NVIDIA H100"), "h100")
    r = replay(ev, host_windows(ev), 0, ["NVIDIA H100"])
    saved = r.measured_step_us - _after(r, EditLabel.TENSOR_CORES)
    assert saved == pytest.approx(1000.0 - 1000.0 / 14.8, rel=0.05), saved
    other = _events(tmp_path, loop("Mystery GPU"), "other")
    r2 = replay(other, host_windows(other), 0, ["Mystery GPU"])
    assert _after(r2, EditLabel.TENSOR_CORES) == pytest.approx(r2.measured_step_us)


def _gemm_loop(gemm: str, gemm_us: List[float]) -> TraceBuilder:
    """One step per entry of ``gemm_us``: a GEMM kernel ``gemm`` of that many µs, then a 100 µs
    elementwise kernel, the host waiting for both (a synchronize), on an H100."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for s, us in enumerate(gemm_us, start=1):
        b.cpu_op("aten::mm", t + 5, 20.0)
        b.kernel(gemm, t + 30, us, launch_ts=t + 10)
        b.kernel(ELEMENTWISE, t + 35 + us, 100.0, launch_ts=t + 40)
        b.runtime("cudaStreamSynchronize", t + 50, us + 87.0)
        b.step(s, t, us + 140.0)
        t += us + 145.0
    return b


def test_tensor_core_edit_keeps_a_stalled_gemm_s_stall(tmp_path):
    """The same loop with the GEMM of step 4 stalled at 20 ms (20x its 1 ms median: a field run's
    fp32 sgemm ran 9.7, 9.5 and 2,440.7 µs on the same inputs): bf16 shortens the matrix math of
    every GEMM, the stalled one's median included, and leaves its 19 ms stall; before, the edit
    divided the stall by 14.8 too and predicted 4.8x the saving (4,474 µs a step)."""
    b = _gemm_loop(FP32_GEMM, [1000.0, 1000.0, 1000.0, 20_000.0, 1000.0, 1000.0])
    ev = _events(tmp_path, b, "stalled")
    r = replay(ev, host_windows(ev), 0, ["NVIDIA H100"])
    saved_per_step = r.measured_step_us - _after(r, EditLabel.TENSOR_CORES)
    assert saved_per_step == pytest.approx(1000.0 - 1000.0 / 14.8, rel=0.05), saved_per_step


def test_stall_excess_is_the_time_past_the_median_of_a_10x_kernel():
    import numpy as np
    import pandas as pd

    from hta_report.analysis.kernels import stall_excess

    names = pd.Series(["sgemm"] * 3 + ["conv"] * 2 + ["small"] * 3)
    dur = np.array([9.7, 9.5, 2440.7, 10.0, 5000.0, 10.0, 10.0, 900.0])
    got = stall_excess(names, dur)
    # sgemm: 2440.7 is 252x its median 9.7, 2431 µs past it; conv: two calls, no median to trust;
    # small: 900 µs is 90x the median but only 890 µs past it (under the 1 ms floor)
    assert got.tolist() == pytest.approx([0, 0, 2440.7 - 9.7, 0, 0, 0, 0, 0])


TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"


def test_tf32_edit_predicts_the_loop_built_with_bf16_gemms(tmp_path):
    """Steps of one 1 ms TF32 GEMM (on Tensor Cores, ``tf32f32`` in its name) and a 100 µs
    elementwise kernel, the host waiting for both: the edit halves the GEMM beyond its 2 µs fixed
    cost, and lands within 10 % of the same loop built with a bf16 GEMM at twice the rate
    (501 µs); on the bf16 loop it changes nothing."""
    def loop(gemm: str, gemm_us: float) -> TraceBuilder:
        return _gemm_loop(gemm, [gemm_us] * 6)
    r = _replay(tmp_path, loop(TF32_GEMM, 1000.0), "tf32")
    assert r.measured_step_us - _after(r, EditLabel.TF32_TO_BF16) == pytest.approx(499.0, rel=0.02)
    measured_after = _step_with_gpu_tail(tmp_path, loop(TC_GEMM, 501.0), "bf16")
    assert abs(_after(r, EditLabel.TF32_TO_BF16) - measured_after) <= 0.10 * measured_after
    r2 = _replay(tmp_path, loop(TC_GEMM, 501.0), "bf16-before")
    assert _after(r2, EditLabel.TF32_TO_BF16) == pytest.approx(r2.measured_step_us)


ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
ALLGATHER = "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)"


def serialized_buckets(collective: str, steps: int = 6) -> TraceBuilder:
    """Backward (an autograd node opens each step) of four 200 µs kernels on
    stream 7 with two 300 µs gradient buckets reduced on stream 20, each after the kernel that produced it
    (``cudaStreamWaitEvent``); the compute stream waits for the first bucket
    before going on (no overlap), the optimizer kernel for the second, and a
    synchronization ends the step: 1480 µs a step, 1180 µs with the first
    bucket overlapped."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for s in range(1, steps + 1):
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", t + 2, 4.0)  # the backward pass begins
        b.kernel(FP32_GEMM, t + 20, 200.0, launch_ts=t + 10)
        b.kernel(FP32_GEMM, t + 220, 200.0, launch_ts=t + 20)
        b.runtime("cudaStreamWaitEvent", t + 26, 2.0)
        b.kernel(collective, t + 420, 300.0, launch_ts=t + 30, stream=20)
        b.runtime("cudaStreamWaitEvent", t + 36, 2.0)
        b.kernel(FP32_GEMM, t + 720, 200.0, launch_ts=t + 40)
        b.kernel(FP32_GEMM, t + 920, 200.0, launch_ts=t + 50)
        b.runtime("cudaStreamWaitEvent", t + 56, 2.0)
        b.kernel(collective, t + 1120, 300.0, launch_ts=t + 60, stream=20)
        b.runtime("cudaStreamWaitEvent", t + 66, 2.0)
        b.kernel(ELEMENTWISE, t + 1420, 50.0, launch_ts=t + 70)
        b.runtime("cudaStreamSynchronize", t + 80, 1395.0)
        b.step(s, t, 1480.0)
        t += 1485.0
    return b


def test_gradient_reduction_edit_overlaps_all_but_the_step_s_last_bucket(tmp_path):
    """The compute stream stops waiting for the first bucket's all-reduce (it
    runs beside the next backward kernels); the optimizer still waits for the
    second: 300 µs of the 1480 µs step saved."""
    r = _replay(tmp_path, serialized_buckets(ALLREDUCE))
    hit = next(w for w in r.whatifs if w.edit == EditLabel.GRADIENT_OVERLAP)
    assert hit.applies
    assert r.measured_step_us - hit.step_us_after == pytest.approx(300.0, abs=15.0)


def test_gradient_reduction_edit_leaves_all_gathers_waited_for(tmp_path):
    """An all-gather brings the parameters the next layer computes with: the
    edit does not touch it, says it does not apply, and the finding keeps its bound."""
    r = _replay(tmp_path, serialized_buckets(ALLGATHER), "gather")
    hit = next(w for w in r.whatifs if w.edit == EditLabel.GRADIENT_OVERLAP)
    assert not hit.applies and hit.step_us_after == pytest.approx(r.measured_step_us)


def test_gradient_reduction_edit_that_drops_only_waits_that_bind_nothing_does_not_apply(tmp_path):
    """The compute stream's wait for a 100 µs all-reduce that ended long before the
    next kernel's launch (host-bound: the kernel starts after its launch, not after
    the all-reduce): dropping that wait cannot change the step, so the what-if says the
    edit does not apply and the finding keeps its bound (on the A100 trace_diff traces,
    exposed communication is send/recv; their all-reduce waits bind nothing)."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for s in range(1, 7):
        b.kernel(FP32_GEMM, t + 20, 200.0, launch_ts=t + 10)
        b.runtime("cudaStreamWaitEvent", t + 26, 2.0)
        b.kernel(ALLREDUCE, t + 220, 100.0, launch_ts=t + 30, stream=20)
        b.runtime("cudaStreamWaitEvent", t + 596, 2.0)
        b.kernel(FP32_GEMM, t + 610, 200.0, launch_ts=t + 600)
        b.runtime("cudaStreamWaitEvent", t + 806, 2.0)
        b.kernel(ALLREDUCE, t + 820, 100.0, launch_ts=t + 810, stream=20)
        b.runtime("cudaStreamWaitEvent", t + 816, 2.0)
        b.kernel(ELEMENTWISE, t + 925, 50.0, launch_ts=t + 820)
        b.runtime("cudaStreamSynchronize", t + 830, 150.0)
        b.step(s, t, 985.0)
        t += 990.0
    r = _replay(tmp_path, b, "slack")
    hit = next(w for w in r.whatifs if w.edit == EditLabel.GRADIENT_OVERLAP)
    assert not hit.applies and hit.step_us_after == pytest.approx(r.measured_step_us)


def _cross_edges(tmp_path, b: TraceBuilder) -> list:
    """The ``(source, target)`` names of the cross-stream edges of ``b``'s replay graph."""
    from hta_report.analysis.replay import rank_graph
    from hta_report.analysis.replay.graph import E_CROSS

    ev = _events(tmp_path, b)
    g, _, _ = rank_graph(ev, host_windows(ev))
    dst = np.repeat(np.arange(g.size), np.diff(g.ptr))  # edges are by target (CSR)
    return [(g.name[int(g.src[i])], g.name[int(dst[i])]) for i in np.flatnonzero(g.ekind == E_CROSS)]


def test_a_stream_wait_made_on_a_thread_that_launches_nothing_more_holds_the_next_launch_of_its_step(tmp_path):
    """DDP makes its last gradient wait on the autograd thread, which launches nothing more in the
    step; the optimizer, launched from the main thread, is what waits (on the A100 trace_diff
    control trace, 8 of the 124 waits in its analyzed steps were linked to a later step's kernel
    or to nothing). The graph's cross edge goes from the all-reduce to the optimizer's kernel,
    not to the next step's first backward kernel."""
    b = TraceBuilder(rank=0)
    t = 100.0
    for s in range(1, 7):
        b.kernel(FP32_GEMM, t + 20, 200.0, launch_ts=t + 10, tid=2)
        b.kernel(ALLREDUCE, t + 220, 300.0, launch_ts=t + 30, stream=20, tid=2)
        b.runtime("cudaStreamWaitEvent", t + 40, 2.0, tid=2)
        b.kernel(ELEMENTWISE, t + 525, 50.0, launch_ts=t + 60)
        b.step(s, t, 600.0)
        t += 610.0
    cross = _cross_edges(tmp_path, b)
    assert cross and all(src == ALLREDUCE and dst == ELEMENTWISE for src, dst in cross)  # not the next GEMM


def test_a_stream_wait_event_record_names_the_stream_that_waits(tmp_path):
    """With CUPTI's synchronization records (``hta-report collect`` on CUDA), a
    ``cudaStreamWaitEvent``'s ``Stream Wait Event`` names the stream that waits: the
    op that waits is the next one launched onto that stream, not the thread's next
    launch (here a kernel on the compute stream). On an H200 collect trace
    (DataLoader workers, pinned copies) 54 waits had such records and the edges
    went both ways between two streams, where the thread's next launch gave one way."""
    side = "void side_kernel(float*)"
    b = TraceBuilder(rank=0)
    t = 100.0
    for s in range(1, 7):
        b.kernel(FP32_GEMM, t + 20, 200.0, launch_ts=t + 10)
        b.runtime("cudaStreamWaitEvent", t + 225, 2.0)
        b._x("cuda_sync", "Stream Wait Event", t + 226, 1.0, pid=0, tid=20, stream=20, correlation=b._corr,
             cuda_sync_kind="Stream Wait Event", wait_on_stream=-1)
        b.kernel(ELEMENTWISE, t + 240, 50.0, launch_ts=t + 230)
        b.kernel(side, t + 245, 30.0, launch_ts=t + 236, stream=20)
        b.step(s, t, 400.0)
        t += 410.0
    cross = _cross_edges(tmp_path, b)
    assert cross and all(src == FP32_GEMM and d == side for src, d in cross)


def _gpu_bound(steps: int) -> TraceBuilder:
    """A host that launches one 1,000 µs float32 GEMM per 200 µs step: the
    GPU paces the loop, the ProfilerStep windows measure the host."""
    b = TraceBuilder(rank=0, compute_major=8, gpu_name="NVIDIA A100")
    for s in range(steps):
        t0 = s * 200
        b.step(s + 1, t0, 200)
        b.cpu_op("aten::mm", t0 + 10, 150)
        b.kernel(FP32_GEMM, 100 + s * 1000, 1000, launch_ts=t0 + 20)
    return b


def test_one_analyzed_step_of_a_gpu_bound_loop_is_not_predicted_to_vanish(tmp_path):
    """Issue 56 item 11: with one analyzed step no GPU lag can grow, so the
    step was taken as its 200 µs host window while the replay spans the
    1,000 µs kernel: the Tensor-Core edit's 800 µs saving came off 200 µs,
    "200 µs -> 0 µs (-100 %)". The one step is now read as GPU-paced, as the
    same loop with three analyzed steps is, and predicts what they predict."""
    one = _replay(tmp_path, _gpu_bound(2), "one")  # the first step is left out, the last one kept
    three = _replay(tmp_path, _gpu_bound(4), "three")
    assert one.steps == 1 and three.steps == 3
    assert one.gpu_paced_step_us == pytest.approx(1000, rel=0.05)
    tc = EditLabel.TENSOR_CORES
    assert _after(one, tc) > 0.1 * one.gpu_paced_step_us
    assert _after(one, tc) == pytest.approx(_after(three, tc), rel=0.1)


def test_an_edit_that_shortens_queued_work_never_predicts_a_slower_step(tmp_path):
    """Issue 56 item 12: float32 GEMMs queued before the first step run into
    it; the Tensor-Core edit shortened them, which moved the span's start
    (the end of that backlog) earlier and predicted a step 8 % slower. Every
    edit removes or shortens work: no prediction is slower than the step."""
    b = TraceBuilder(rank=0, compute_major=8, gpu_name="NVIDIA A100")
    for k in range(20):
        b.kernel(FP32_GEMM, 100 + k * 300, 300, launch_ts=10 + k * 5)
    for s in range(3):
        t0 = 500 + s * 700
        b.step(s + 1, t0, 700)
        b.cpu_op("aten::mm", t0 + 10, 50)
        b.kernel(FP32_GEMM, max(6200, t0 + 100) + s * 400, 350, launch_ts=t0 + 20)
        b.cpu_op("aten::add", t0 + 100, 500)
    (tmp_path / "q").mkdir()
    r = analyze(b.write(tmp_path / "q" / "rank-0.json")).ranks[0].replay
    assert r.whatifs
    assert all(w.step_us_after <= w.step_us_before + 1e-6 for w in r.whatifs), \
        [(w.edit, w.step_us_before, w.step_us_after) for w in r.whatifs if w.step_us_after > w.step_us_before]


def test_profiler_cost_noted_on_a_host_bound_rank_only(tmp_path):
    from hta_report.analysis.replay.run import PROFILER_EVENT_US
    # host-bound: 20 µs ops, each an op and a launch recorded: at 3-6 µs an event, 30-60 % of the step
    r = _replay(tmp_path, op_loop_trace(host_us=20, kernel_us=5), "host")
    cost = [n for n in r.notes if n.code == NoteCode.PROFILER_COST]
    assert len(cost) == 1
    v = cost[0].values
    assert v["events"] >= 60 and v["low_us"] == pytest.approx(v["events"] * PROFILER_EVENT_US[0])
    assert v["high_us"] <= v["step_us"] and v["host_share_pct"] >= 50
    assert "the profiler's own cost" in replay_note(r) and "the what-ifs are the profiled run's" in replay_note(r)
    # GPU-bound (each kernel 200 µs behind a 20 µs op): the host's cost does not make the step
    r = _replay(tmp_path, op_loop_trace(host_us=20, kernel_us=200), "gpu")
    assert not [n for n in r.notes if n.code == NoteCode.PROFILER_COST]
    # host-bound but few events for their time (2 ms ops): under the note's 10 %
    r = _replay(tmp_path, op_loop_trace(host_us=2000, kernel_us=5), "slow-ops")
    assert not [n for n in r.notes if n.code == NoteCode.PROFILER_COST]


def test_profiler_cost_words_when_the_events_come_faster_than_the_estimate():
    from hta_report.model import ReplayNote
    from hta_report.render.replay_notes import note_text
    dense = ReplayNote(code=NoteCode.PROFILER_COST.value,
                       values={"events": 527.0, "low_us": 1100.0, "high_us": 1100.0, "step_us": 1100.0,
                               "host_share_pct": 100.0})
    text = note_text(dense)
    assert "2.1 µs apart" in text and "the trace cannot say" in text and "%" in text
    sparse = ReplayNote(code=NoteCode.PROFILER_COST.value,
                        values={"events": 1898.0, "low_us": 5694.0, "high_us": 11388.0, "step_us": 18411.0,
                                "host_share_pct": 100.0})
    assert "5.7-11.4 ms of this 18.41 ms step (31-62 % of it)" in note_text(sparse)


AUTOGRAD_TID = 2


def backward_sync_trace(gemm_us: float, steps: int = 5) -> TraceBuilder:
    """Per 2000 µs step, on the step thread: a forward launch [t+10] (a 20 µs
    kernel), then nothing until t+1900 (it sits in ``loss.backward()``), then
    a launch at t+1900. On autograd's thread: a launch at t+100 of an fp32
    GEMM [t+120, t+120+gemm_us] and a ``cudaStreamSynchronize`` from t+110
    until the GEMM ends (a ``.item()`` inside backward), then 30 µs of its
    own ops. The step thread goes on once backward returns."""
    b = TraceBuilder(rank=0, compute_major=8, gpu_name="NVIDIA A100-SXM4-80GB")
    for s in range(steps):
        t = s * 2000.0
        b.step(s + 1, t, 2000.0)
        b.kernel(ELEMENTWISE, t + 20, 20, launch_ts=t + 10, launch_dur=5)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", t + 95, gemm_us + 60, tid=AUTOGRAD_TID)
        b.kernel(FP32_GEMM, t + 120, gemm_us, launch_ts=t + 100, launch_dur=5, tid=AUTOGRAD_TID)
        b.runtime("cudaStreamSynchronize", t + 110, gemm_us + 15, tid=AUTOGRAD_TID)
        b.kernel(ELEMENTWISE, t + 1905, 20, launch_ts=t + 1900, launch_dur=5)
    return b


def test_the_step_thread_joined_to_backward_follows_its_sync(tmp_path):
    """The step thread's gap holds the autograd thread's synchronization: a
    faster GEMM (Tensor Cores) returns the sync sooner and the step thread
    goes on sooner. Before the join the gap was fixed host time and the
    Tensor-Core what-if predicted no gain."""
    ev = _events(tmp_path, backward_sync_trace(1600.0))
    r = replay(ev, host_windows(ev), 0, ["NVIDIA A100-SXM4-80GB"])
    assert r.replayed_step_us == pytest.approx(2000.0, abs=1.0) and r.error_pct < 1
    after = _after(r, EditLabel.TENSOR_CORES)
    # the GEMM takes 2 + 1598 / 16 = 101.9 µs on A100 Tensor Cores (k = 16): 1498 µs sooner
    assert after == pytest.approx(2000.0 - 1498.1, abs=5.0)


def test_a_wait_the_step_thread_does_not_sit_out_is_not_joined(tmp_path):
    """Where the step thread runs its own op over the other thread's sync, it
    is not waiting for it: its gap stays host time."""
    b = backward_sync_trace(1600.0)
    for s in range(5):
        b.cpu_op("aten::cat", s * 2000.0 + 50, 1800)  # the step thread's own work over the wait
    ev = _events(tmp_path, b)
    r = replay(ev, host_windows(ev), 0, ["NVIDIA A100-SXM4-80GB"])
    assert _after(r, EditLabel.TENSOR_CORES) == pytest.approx(2000.0, abs=5.0)
