"""Each edit removes what its fix removes and nothing else (issue 50), every
prediction carries its interval, and the page tells one story: the finding's
gain is its prediction, severity and order follow it, ``Together`` names what
it leaves out, and a window that is mostly cold start gets no prediction."""
import re

import pytest

from conftest import REPO
from hta_report.analysis.replay.edits import EDITS
from hta_report.analysis.events import RankEvents
from hta_report.analysis.regions import host_windows
from hta_report.analysis.sync_kinds import KINDS, classify
from hta_report.api import analyze
from hta_report.load import load_traces
from hta_report.model import ALL_EDITS
from hta_report.render import render
from hta_report.render.replay_notes import replay_note
from hta_report.replay_terms import EditLabel, NoteCode
from kineto import ELEMENTWISE, TC_GEMM, Sim, TraceBuilder


def test_every_edit_has_its_rule_written_in_docs():
    """docs/EDITS.md has a section for every registered edit, naming it as the registry does."""
    text = (REPO / "docs" / "EDITS.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## `([^`]+)`", text, flags=re.MULTILINE))
    assert set(EDITS) == headings
    assert list(EDITS) == list(EditLabel)  # one edit per label, in the labels' order (the replay's)
    assert all(spec.error_pct > 0 and spec.error_source for spec in EDITS.values())


def _steps(b: TraceBuilder, sim: Sim, steps: int, body) -> None:
    """``steps`` ProfilerStep windows, each running ``body(sim)``."""
    for s in range(1, steps + 1):
        start = sim.t
        body(sim)
        sim.idle(20.0)
        b.step(s, start, sim.t - start)


def _small_kernels(sim: Sim, n: int = 60) -> None:
    """A forward of ``n`` tiny kernels, each shorter than its launch: launch-bound."""
    for _ in range(n):
        sim.op("aten::relu", [(ELEMENTWISE, 3.0)], host_us=12.0)


def _write(tmp_path, name: str, b: TraceBuilder):
    d = tmp_path / name
    d.mkdir()
    b.write(d / "rank-0.json")
    return d


def test_a_cuda_graph_keeps_the_host_work_outside_the_region_it_captures(tmp_path):
    """A launch-bound step that first decodes its input on the host for 20 ms
    (a CPU op launching nothing): a CUDA graph captures the launches, not the
    decoding. The prediction with the decoding is the one without it plus
    the decoding, within 2 %; it used to remove the decoding too."""
    def build(decode_us: float) -> TraceBuilder:
        b = TraceBuilder(rank=0)
        sim = Sim(b)

        def body(s: Sim) -> None:
            if decode_us:
                s.cpu("decode_video", decode_us)  # e.g. PyAV frames to a CPU tensor
            _small_kernels(s)
        _steps(b, sim, 8, body)
        return b
    plain = analyze(_write(tmp_path, "plain", build(0.0)))
    decoded = analyze(_write(tmp_path, "decoded", build(20_000.0)))
    edit = EditLabel.CUDA_GRAPH
    w0 = next(w for w in plain.ranks[0].replay.whatifs if w.edit == edit)
    w1 = next(w for w in decoded.ranks[0].replay.whatifs if w.edit == edit)
    assert w0.step_us_after < 0.6 * w0.step_us_before  # the graph removes most of a launch-bound step
    assert w1.step_us_after == pytest.approx(w0.step_us_after + 20_000.0, rel=0.02)


def test_a_cuda_graph_keeps_cpu_work_between_launches(tmp_path):
    """Inside the capturable region, a CPU op that launches nothing (a tensor
    built on the CPU between two layers, 2 ms) stays in the predicted step."""
    def build(cpu_us: float) -> TraceBuilder:
        b = TraceBuilder(rank=0)
        sim = Sim(b)

        def body(s: Sim) -> None:
            _small_kernels(s, 30)
            if cpu_us:
                s.cpu("aten::randn", cpu_us)
            _small_kernels(s, 30)
        _steps(b, sim, 8, body)
        return b
    edit = EditLabel.CUDA_GRAPH
    with_cpu = next(w for w in analyze(_write(tmp_path, "cpu", build(2_000.0))).ranks[0].replay.whatifs
                    if w.edit == edit)
    without = next(w for w in analyze(_write(tmp_path, "none", build(0.0))).ranks[0].replay.whatifs
                   if w.edit == edit)
    # the first half's kernels run while the CPU works: the step grows by a little less than its 2 ms
    assert 0.9 * 2_000.0 <= with_cpu.step_us_after - without.step_us_after <= 2_000.0 + 50.0


def test_a_cuda_graph_breaks_at_a_synchronization(tmp_path):
    """A synchronization between two halves of a launch-bound step (an
    ``.item()`` read): a graph cannot capture it (``torch.compile`` breaks the
    graph there), so the host's 600 µs of short ops and Python between the
    sync and the next launch run eagerly between two graphs and stay; without
    the sync the graph removes them (a field run, nano-vllm's CPU attention
    with 9 stream syncs, was predicted to save 2.4x its launch time)."""
    def build(sync: bool) -> TraceBuilder:
        b = TraceBuilder(rank=0)
        sim = Sim(b)

        def body(s: Sim) -> None:
            _small_kernels(s, 30)
            if sync:
                s.synchronize()
            for _ in range(20):
                s.cpu("aten::view", 10.0)
                s.idle(20.0)
            _small_kernels(s, 30)
            s.synchronize()
        _steps(b, sim, 8, body)
        return b
    edit = EditLabel.CUDA_GRAPH
    synced = next(w for w in analyze(_write(tmp_path, "sync", build(True))).ranks[0].replay.whatifs if w.edit == edit)
    free = next(w for w in analyze(_write(tmp_path, "free", build(False))).ranks[0].replay.whatifs if w.edit == edit)
    assert free.step_us_after < 0.6 * free.step_us_before
    # the 600 µs after the sync stay (the sync itself waits for ~30 x 3 µs of kernels already run)
    assert 600.0 - 20.0 <= synced.step_us_after - free.step_us_after <= 600.0 + 120.0, \
        (synced.step_us_after, free.step_us_after)


def test_a_cuda_graph_keeps_unexplained_host_time_where_ops_were_not_recorded(tmp_path):
    """A trace of runtime calls only (CUPTI without the CPU activity): the
    host time between two launches with no call for 400 µs cannot be told
    from Python a graph removes, so it stays in the predicted step (with ops
    recorded, only gaps of 1 ms or more stay)."""
    def build(gap_us: float) -> TraceBuilder:
        b = TraceBuilder(rank=0)
        sim = Sim(b)

        def body(s: Sim) -> None:
            for half in range(2):
                for _ in range(30):
                    s.launch(ELEMENTWISE, 3.0)
                    s.idle(8.0)
                if gap_us and not half:
                    s.idle(gap_us)
            s.synchronize()
        _steps(b, sim, 8, body)
        return b
    edit = EditLabel.CUDA_GRAPH
    gap = next(w for w in analyze(_write(tmp_path, "gap", build(400.0))).ranks[0].replay.whatifs if w.edit == edit)
    none = next(w for w in analyze(_write(tmp_path, "none", build(0.0))).ranks[0].replay.whatifs if w.edit == edit)
    assert none.step_us_after < 0.6 * none.step_us_before  # the launches and the 8 µs between them go
    # the first half's 90 µs of kernels run during the gap: the step grows by the gap less them
    assert 400.0 - 90.0 - 10.0 <= gap.step_us_after - none.step_us_after <= 400.0 + 10.0


def _sync_trace(training: bool, bare: str = "", item: bool = True, control: bool = False) -> TraceBuilder:
    """Steps of GEMMs with a read of a scalar after them (``item``, held by
    ``aten::is_nonzero`` when ``control``), the backward ops of training when
    ``training``, and a bare synchronize at the step's ``end`` or in its ``middle``."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(4):
            s.op("aten::linear", [(TC_GEMM, 200.0)], host_us=20.0)
        if bare == "middle":
            s.synchronize("cudaDeviceSynchronize")
        if training:
            with s.region("autograd::engine::evaluate_function: MmBackward0"):
                s.op("aten::mm", [(TC_GEMM, 200.0)], host_us=20.0)
        else:
            s.op("aten::linear", [(TC_GEMM, 200.0)], host_us=20.0)
        if item and control:
            with s.region("aten::is_nonzero"):
                s.item()
        elif item:
            s.item()
        s.idle(300.0)
        if bare == "end":
            s.synchronize("cudaDeviceSynchronize")
    _steps(b, sim, 8, body)
    return b


def _kinds(tmp_path, name: str, b: TraceBuilder):
    d = _write(tmp_path, name, b)
    loaded = load_traces(d)
    ev = RankEvents.from_loaded(loaded, 0)
    cpu, w = ev.cpu, host_windows(ev)
    rows = cpu[cpu["s_name"].isin(("aten::item", "cudaDeviceSynchronize"))]
    ts = rows["ts"].to_numpy(float)
    rows = rows[((ts[:, None] >= w[:, 0]) & (ts[:, None] < w[:, 1])).any(axis=1)]  # the analyzed steps'
    return [(str(n), k) for n, k in zip(rows["s_name"], classify(ev, rows, w))]


def test_syncs_are_classified_by_what_the_trace_shows(tmp_path):
    """A training step's .item() is a logged value (removable); an inference
    step's is its output (required); one under aten::is_nonzero decides
    control flow (required); a bare synchronize that ends the step is a
    timing harness's (required), one with launches on both sides is not."""
    assert {k for n, k in _kinds(tmp_path, "train", _sync_trace(True)) if n == "aten::item"} == {"logged"}
    assert {k for n, k in _kinds(tmp_path, "infer", _sync_trace(False)) if n == "aten::item"} == {"output"}
    assert {k for n, k in _kinds(tmp_path, "ctl", _sync_trace(True, control=True)) if n == "aten::item"} == \
        {"control"}
    assert {k for n, k in _kinds(tmp_path, "end", _sync_trace(True, bare="end", item=False))} == {"harness"}
    assert {k for n, k in _kinds(tmp_path, "mid", _sync_trace(True, bare="middle", item=False))} == {"explicit"}
    assert KINDS["logged"].removable and KINDS["explicit"].removable
    assert not any(KINDS[k].removable for k in ("output", "control", "harness", "shape"))


def test_a_required_sync_gets_no_prediction_and_says_why(tmp_path):
    """An inference step's output read and a harness's step-end synchronize:
    sync-in-step fires (the GPU idles after them) but names them as required,
    gives the fix for each kind, and predicts nothing (no removal edit)."""
    b = _sync_trace(False, bare="end")
    r = analyze(_write(tmp_path, "required", b))
    f = next((f for f in r.findings if f.id == "sync-in-step"), None)
    assert f is not None and f.whatif is None
    assert "cannot be removed" in f.title and "required" in " ".join(f.evidence)
    assert "pin_memory=True" in f.fix and "enable_timing=True" in f.fix
    w = next(w for w in r.ranks[0].replay.whatifs if w.edit == EditLabel.NO_SYNC)
    assert not w.applies


def test_a_harness_synchronize_alone_is_named_as_the_harness_s_cost(tmp_path):
    """A training step whose only sync is the bare synchronize that ends it (a benchmark's timing
    loop): the finding says the measured step includes the harness's synchronize and points to CUDA
    events; it no longer says "cannot be removed" beside a fix that takes it out of the loop (a
    field run's cuDNN GRU benchmark, 41 % of its step)."""
    r = analyze(_write(tmp_path, "harness", _sync_trace(True, bare="end", item=False)))
    f = next(f for f in r.findings if f.id == "sync-in-step")
    assert f.title.startswith("The step includes its timing harness's synchronize")
    assert "cannot be removed" not in f.title and "enable_timing=True" in f.fix and f.whatif is None


def test_a_logged_item_that_drains_the_queue_is_predicted_and_rated_by_its_saving(tmp_path):
    """A training step whose host queues 4 ms of GEMMs, then reads the loss
    (.item() drains the queue) and runs 2 ms of Python before launching again:
    the GPU idles those 2 ms every step. Removing the read lets the host's
    Python overlap the GPU: the prediction saves most of those 2 ms, the
    finding's gain is that saving (not its bound), and it is not rated low."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)

    def body(s: Sim) -> None:
        s.idle(2_000.0)
        for _ in range(20):
            s.op("aten::linear", [(TC_GEMM, 200.0)], host_us=10.0)
        with s.region("autograd::engine::evaluate_function: MmBackward0"):
            s.op("aten::mm", [(TC_GEMM, 100.0)], host_us=10.0)
        s.item()
    _steps(b, sim, 8, body)
    r = analyze(_write(tmp_path, "drain", b))
    f = next(f for f in r.findings if f.id == "sync-in-step")
    w = f.whatif
    assert w is not None and w.step_us_low <= w.step_us_after <= w.step_us_high
    saved = w.step_us_before - w.step_us_after
    assert saved > 1_500.0
    assert f.gain_ms_per_step * 1e3 == pytest.approx(saved, rel=1e-6)
    assert f.severity != "low"


def test_a_window_mostly_warm_up_gets_no_prediction_and_no_together(tmp_path):
    """Each step spends 30 ms in a one-off 30 ms cudaFree-like setup call (as a
    window that starts with the process has): no what-if is made, the rank's
    note says why, no finding carries a prediction, and no Together line."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)

    def body(s: Sim) -> None:
        start = s.t
        b.runtime("cudaFree", start, 30_000.0)
        s.t += 30_000.0
        _small_kernels(s)
        s.item()
    _steps(b, sim, 4, body)
    r = analyze(_write(tmp_path, "cold", b))
    rank = r.ranks[0]
    assert rank.replay.steps > 0 and rank.replay.whatifs == []
    assert [n.code for n in rank.replay.notes][-1] == NoteCode.WARMUP
    assert "warm-up" in replay_note(rank.replay)
    assert all(f.whatif is None for f in r.findings) and r.together is None
    assert "fixed together" not in render(r, "md")


def test_every_whatif_has_an_interval_around_its_prediction(sample_results):
    """On the README's samples every what-if's interval holds its prediction,
    and the reports show it."""
    r = sample_results["cpu_dataloader_bound"]
    for x in r.ranks:
        for w in x.replay.whatifs:
            assert 0 <= w.step_us_low <= w.step_us_after <= w.step_us_high
    f = next(f for f in r.findings if f.id == "dataloader-bound")
    assert f.whatif is not None and f.whatif.step_us_low < f.whatif.step_us_after < f.whatif.step_us_high
    md = render(r, "md")
    assert re.search(r"step \d+\.\d+ → \d+\.\d+ ms \(\d+\.\d+–\d+\.\d+\)", md)
    assert "saves " in md and "80 %" in md


def test_findings_with_predictions_state_them_as_their_gain_and_are_ordered_by_them(sample_results):
    """A finding with a prediction states the saving as its gain (no bound
    beside it), no finding predicted to save 5 % or more is low, and the
    findings come in the order of what their fixes are expected to save,
    within each severity."""
    from hta_report.rules.base import expected_pct
    for name in ("cpu_dataloader_bound", "cpu_healthy", "cpu_ddp_2ranks"):
        r = sample_results[name]
        for f in r.findings:
            if f.whatif is not None:
                saved = max(0.0, f.whatif.step_us_before - f.whatif.step_us_after)
                assert f.gain_ms_per_step * 1e3 == pytest.approx(saved, rel=1e-6, abs=1e-6)
                if 100 * saved / f.whatif.step_us_before >= 5:
                    assert f.severity != "low"
        order = [(f.severity, expected_pct(f, r)) for f in r.findings]
        for (s1, e1), (s2, e2) in zip(order, order[1:]):
            if s1 == s2:
                assert e1 >= e2 - 1e-9


def test_together_names_the_findings_it_leaves_out(sample_results):
    """Two rank-1 fixes with predictions replayed together; the straggler
    finding, which has no edit, is named as left out."""
    r = sample_results["cpu_ddp_2ranks"]
    if r.together is None:
        pytest.skip("no two findings with predictions on one rank in this sample")
    md = render(r, "md")
    line = next(x for x in md.splitlines() if "fixed together" in x)
    assert "not in it: rank-straggler (no prediction)" in line.replace("\\", "")


def test_the_rank_section_shows_no_prediction_the_findings_do_not(sample_results):
    """The rank section's replay shows the findings' Together line or none:
    not an every-edit what-if no finding stands behind."""
    r = sample_results["cpu_healthy"]
    html = render(r, "html")
    assert "Every edit the replay knows" not in html
    assert all(w.edit != ALL_EDITS or w.step_us_low <= w.step_us_after for w in r.ranks[0].replay.whatifs)
