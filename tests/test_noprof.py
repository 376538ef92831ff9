"""The step without the profiler (issues 51/52): on a host-bound GPU rank the
replay removes the profiler's own cost per recorded host event
(:attr:`EditLabel.NO_PROFILER`) and puts the predicted step, with its interval,
in the profiler-cost note; it is never a fix's what-if."""
import numpy as np
import pytest

from hta_report.analysis.events import RankEvents
from hta_report.analysis.regions import host_windows
from hta_report.analysis.replay import replay
from hta_report.analysis.replay.edits import EDITS, NO_PROFILER_EVENT_US, Edit, edit_no_profiler, fixes
from hta_report.analysis.replay.graph import E_HOST
from hta_report.analysis.replay.run import rank_graph
from hta_report.load import load_traces
from hta_report.model import Replay
from hta_report.render.replay_notes import replay_note
from hta_report.replay_terms import EditLabel, NoteCode
from kineto import op_loop_trace, ELEMENTWISE, TID, Sim, TraceBuilder

C_MID = NO_PROFILER_EVENT_US[1]


def _events(tmp_path, b: TraceBuilder, name: str) -> RankEvents:
    d = tmp_path / name
    d.mkdir()
    b.write(d / "rank-0.json")
    loaded = load_traces(d, include_last_step=True)
    return RankEvents.from_loaded(loaded, loaded.files[0].rank)


def _cost(r: Replay) -> dict:
    (note,) = [n for n in r.notes if n.code == NoteCode.PROFILER_COST]
    return note.values


def test_a_host_bound_step_loses_the_cost_of_each_recorded_event(tmp_path):
    """30 ops a step, each an op and a launch recorded (20 µs of host each, 5 µs kernels): the
    host's step loses 3 µs per recorded event, the GPU never binds; the interval spans 2-6 µs
    an event and ends at the measured step."""
    r = replay(*(lambda ev: (ev, host_windows(ev)))(_events(tmp_path, op_loop_trace(20, 5), "host")))
    v = _cost(r)
    assert v["noprof_us"] == pytest.approx(v["step_us"] - C_MID * v["events"], rel=0.03)
    assert v["noprof_low_us"] <= v["step_us"] - NO_PROFILER_EVENT_US[0] * v["events"]
    assert v["noprof_low_us"] < v["noprof_us"] < v["noprof_high_us"] <= v["step_us"]
    assert "without the profiler at about" in replay_note(r)


def test_the_step_without_the_profiler_is_never_shorter_than_the_gpu_work(tmp_path):
    """Each op's kernel runs 24 µs against 26 µs of profiled host time: host-bound with the
    profiler, GPU-bound without it (20 µs of host): the prediction stops at the GPU's step."""
    r = replay(*(lambda ev: (ev, host_windows(ev)))(_events(tmp_path, op_loop_trace(20, 24), "gpu")))
    v = _cost(r)
    gpu_us = 30 * 24
    assert v["step_us"] - C_MID * v["events"] < gpu_us * 0.97  # the host alone would be faster than the GPU
    assert gpu_us * 0.97 <= v["noprof_us"] <= gpu_us * 1.1


def _with_backward(steps: int = 4, fwd: int = 10, bwd: int = 40, opt: int = 5) -> TraceBuilder:
    """Per step: ``fwd`` ops on the training thread, ``backward()`` running ``bwd`` ops on
    autograd's thread while the training thread waits with nothing recorded, then ``opt`` ops."""
    b = TraceBuilder(rank=0)
    main, grad = Sim(b), Sim(b, tid=TID + 1)
    for s in range(1, steps + 1):
        t0 = main.t
        for _ in range(fwd):
            main.op("aten::add", [(ELEMENTWISE, 5)], host_us=20)
        grad.t = main.t + 5
        grad.free = main.free
        for _ in range(bwd):
            grad.op("aten::mul", [(ELEMENTWISE, 5)], host_us=20)
        main.t = grad.t + 5
        main.free = grad.free
        for _ in range(opt):
            main.op("aten::add_", [(ELEMENTWISE, 5)], host_us=20)
        main.idle(10)
        b.step(s, t0, main.t - t0)
    return b


def test_the_training_thread_waits_less_for_a_backward_that_costs_less(tmp_path):
    """``backward()`` runs on autograd's thread while the training thread waits: the wait is
    shorter by the cost of the events autograd's thread recorded, so the whole step loses
    3 µs per event of both threads; counting the training thread's own events alone
    (the prototype) left the backward's 40 ops of each step in the prediction."""
    ev = _events(tmp_path, _with_backward(), "bwd")
    r = replay(ev, host_windows(ev))
    v = _cost(r)
    own_only = v["step_us"] - C_MID * 2 * (10 + 5)  # an op and a launch per op on the training thread
    assert v["noprof_us"] == pytest.approx(v["step_us"] - C_MID * v["events"], rel=0.04)
    assert v["noprof_us"] < own_only - C_MID * 2 * 40 * 0.8


def test_an_interval_never_loses_more_than_it_lasted(tmp_path):
    """Twelve 1 µs ops back to back between two launches: 13 events in a 14 µs interval
    cost more than it lasted at 3 µs each; the edited offset stops at 0, and elsewhere it is
    the measured one less 3 µs per event."""
    b = TraceBuilder(rank=0)
    sim = Sim(b)
    for s in range(1, 4):
        t0 = sim.t
        for _ in range(5):
            sim.op("aten::add", [(ELEMENTWISE, 5)], host_us=20)
            for _ in range(12):
                sim.cpu("aten::view", 1.0)
        sim.idle(10)
        b.step(s, t0, sim.t - t0)
    ev = _events(tmp_path, b, "dense")
    built = rank_graph(ev, host_windows(ev))
    assert not isinstance(built, str)
    g, w, _ = built
    e = Edit.of(g, (), w)
    edit_no_profiler(ev, g, e)
    host = g.ekind == E_HOST
    assert (e.off[host] >= np.minimum(g.off[host], 0.0)).all()
    floored = host & (e.off == 0.0) & (g.off > 0)
    assert floored.any()
    kept = host & ~floored & (g.off > 0)
    assert kept.any() and np.all(e.off[kept] < g.off[kept])


def test_the_profiler_removed_is_no_fix_and_no_what_if(tmp_path):
    """The edit is registered (the replay makes it) but no rule names it, and a rank's
    what-ifs never hold it, alone or combined."""
    assert EditLabel.NO_PROFILER in EDITS and EditLabel.NO_PROFILER not in fixes()
    assert not EDITS[EditLabel.NO_PROFILER].fix and all(EDITS[x].fix for x in fixes())
    ev = _events(tmp_path, op_loop_trace(20, 5), "loop")
    r = replay(ev, host_windows(ev))
    assert r.whatifs and _cost(r)["noprof_us"] > 0
    assert not [w for w in r.whatifs if EditLabel.NO_PROFILER in w.edit or "profiler's own" in w.description]
