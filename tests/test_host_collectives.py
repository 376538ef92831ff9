"""Collectives of a CPU backend (gloo): the step thread's wait for them is
exposed communication (C16 on ranks without GPU activity), split by kind.

Recorded on this machine (2 gloo ranks, 1 thread each, an 8-layer MLP): a
loop of blocking ``dist.all_reduce`` over the parameters after backward kept
the step thread waiting 63-65 % of a 33.7 ms step, where DDP's bucketed
all-reduce took a 20.3 ms step; the report said nothing of either. The traces
here are built by hand with the same layout: the step thread issues
``c10d::allreduce_`` and waits unrecorded while gloo's thread runs
``gloo:all_reduce``."""
from pathlib import Path

import pytest

from hta_report.api import analyze
from hta_report.analysis.collectives import operation
from hta_report.rules.claims import HOST
from kineto import TraceBuilder

STEP = 12_000.0
GLOO_TID = 2000


def _ranks(tmp_path: Path, *, overlapped: bool, calls: int = 4, transfer: float = 1000.0, steps: int = 6):
    """Two CPU ranks: forward 3 ms, backward 3 ms, then ``calls`` all-reduces
    of ``transfer`` µs each (gloo's thread) and an optimizer step. With
    ``overlapped`` the all-reduces run in gloo's thread during backward (as
    DDP's buckets do) and the step thread never waits for them."""
    for k in (0, 1):
        b = TraceBuilder(rank=k, world_size=2, gpu_name=None, backend="gloo")
        t = 0.0
        for i in range(steps):
            b.step(i + 1, t, STEP)
            b.cpu_op("aten::linear", t + 10, 3000)
            b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", t + 3020, 3000)
            at = t + 6030
            for c in range(calls):
                if overlapped:
                    s = t + 3030 + c * 10
                    b.cpu_op("c10d::allreduce_", s, 5)
                    b.cpu_op("gloo:all_reduce", s + 5, 500, cat="user_annotation", tid=GLOO_TID)
                else:
                    b.cpu_op("c10d::allreduce_", at, 20)
                    b.cpu_op("gloo:all_reduce", at + 20, transfer, cat="user_annotation", tid=GLOO_TID)
                    b.cpu_op("aten::div_", at + 20 + transfer, 10)
                    at += 30 + transfer
            b.cpu_op("Optimizer.step#SGD.step", t + STEP - 1000, 900, cat="user_annotation")
            t += STEP
        b.write(tmp_path / f"rank-{k}.json")
    return analyze(tmp_path, include_last_step=True)


def test_blocking_all_reduces_after_backward_are_exposed_gradient_reduction(tmp_path):
    r = _ranks(tmp_path, overlapped=False)
    for rank in r.ranks:
        assert rank.comm.collective_basis == "host"
        # 4 x (20 µs call + 1,000 µs in gloo's thread): the step thread runs nothing else meanwhile
        assert rank.comm.host_exposed_us_per_step == pytest.approx(4 * 1020, rel=1e-6)
        (kind,) = rank.comm.kinds
        assert (kind.kind, kind.calls_per_step) == ("dp", 4)
        assert kind.exposed_us_per_step == pytest.approx(4 * 1020, rel=1e-6)
    (f,) = [f for f in r.findings if f.id == "exposed-communication"]
    assert f.title.startswith("Overlap the gradient reduction with the backward pass")
    assert "DDP(model" in f.fix
    assert "4 calls per step" in " ".join(f.evidence)
    for g in f.rank_gains:  # the whole wait, from the CPU pool; no peer waits here
        assert g.sources == {"host:communication": pytest.approx(4 * 1020, rel=1e-6)}
    assert f.share_pct == pytest.approx(100 * 4 * 1020 / STEP, rel=1e-3)


def test_all_reduces_overlapped_with_backward_are_not_exposed(tmp_path):
    r = _ranks(tmp_path, overlapped=True)
    for rank in r.ranks:
        assert rank.comm.cpu_collective_us_per_step > 0
        assert rank.comm.host_exposed_us_per_step == pytest.approx(0.0, abs=1e-6)
    assert not [f for f in r.findings if f.id == "exposed-communication"]
    assert next(c for c in r.checks if c.id == "exposed-communication").status == "fine"


def test_findings_of_a_cpu_rank_never_pass_its_step(tmp_path):
    # the all-reduces take 8 of the 12 ms step: pools and claims stay inside the step
    r = _ranks(tmp_path, overlapped=False, calls=8, transfer=1000.0)
    for rank in r.ranks:
        claimed = sum(g.gain_us for f in r.findings for g in f.rank_gains if g.rank == rank.rank)
        assert claimed <= rank.window_us * (1 + 1e-9)
    assert "host:communication" in HOST


@pytest.mark.parametrize("name,op", [("c10d::allreduce_", "all_reduce"), ("c10d::gather_", "gather"),
                                     ("c10d::scatter_", "scatter"), ("c10d::reduce_", "reduce"),
                                     ("c10d::reduce_scatter_", "reduce_scatter"), ("gloo:all_gather", "all_gather"),
                                     ("c10d::barrier", "")])
def test_operations_to_or_from_one_rank_are_named(name, op):
    assert operation(name) == op


def test_a_loop_of_all_reduces_without_ddp_is_named_as_gradients_reduced_by_hand(tmp_path):
    """10 blocking all-reduces a step after backward and no DDP in the trace (CS336's "naive DDP",
    COS568's task 2b): the finding names the loop and its fix wraps the model in DDP."""
    r = _ranks(tmp_path, overlapped=False, calls=10, transfer=400.0)
    (kind,) = r.ranks[0].comm.kinds
    assert (kind.calls_per_step, kind.after_backward_per_step) == (10, 10) and r.ranks[0].comm.wrapper == ""
    (f,) = [f for f in r.findings if f.id == "exposed-communication"]
    assert f.title.startswith("Gradients reduced by hand, 10 collectives a step after the backward pass")
    assert "DistributedDataParallel(model)" in f.fix and "_flatten_dense_tensors" in f.fix
