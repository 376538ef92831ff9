"""The helpers the rule modules share (rules/base.py) and who owns which time
(rules/claims.py ``OWNERSHIP``, checked through the ledger): unit tests on
hand-made ranks, and built traces where two rules used to fire on the same copies."""
from typing import Dict, List, Optional, Tuple

import pytest

from hta_report.api import analyze
from hta_report.model import AnalysisResult, IdleAttribution, MemcpyDirection, MemcpySummary, RankResult
from hta_report.rules import RULE_IDS, AdviceConfig
from hta_report.rules.base import (COVERED, EVIDENCE_RANKS, FIRED, claim, claim_each, evidence_lines, largest,
                                   per_step, shares_over, step_shares, up_to, worst_first)
from hta_report.rules.claims import (OWNERSHIP, POOLS, Ledger, OwnershipError, check_order, claimable_by, owner_of,
                                     pool_size)
from hta_report.rules.engine import _RUN_ORDER
from kineto import TC_GEMM, TraceBuilder

STEP = 1000.0


def rank(n: int, window_us: float = 1000.0, steps_used: int = 4, **idle: float) -> RankResult:
    """A GPU rank whose step is ``window_us`` and whose GPU idles ``idle`` (category -> µs per step)."""
    a = IdleAttribution(idle_us=sum(idle.values()), **{f"{k}_us": v for k, v in idle.items()})
    r = RankResult(rank=n, file=f"rank-{n}.json", has_gpu=True, window_us=window_us, steps_used=steps_used,
                   idle_attribution=a)
    r.steps.count = steps_used + 1  # ProfilerStep annotations: the first step is warm-up
    return r


# ---------------------------------------------------------------- per step, shares, worst first
def test_per_step_divides_a_total_over_the_analyzed_windows():
    assert per_step(300.0, 3) == 100.0
    # CpuSide.steps_used is 0 without ProfilerStep: the whole trace was the one window
    assert per_step(50.0, 0) == 50.0


def test_shares_worst_first_and_the_largest():
    ranks = [rank(0, window_us=1000), rank(1, window_us=2000), rank(2, window_us=500)]
    us = {0: 100.0, 1: 100.0, 2: 100.0}
    share = step_shares(ranks, lambda r: us[r.rank])
    assert share == {0: 10.0, 1: 5.0, 2: 20.0}
    assert [r.rank for r in worst_first(ranks, lambda r: share[r.rank])] == [2, 0, 1]
    # equal keys keep their order
    assert [r.rank for r in worst_first(ranks, lambda r: 1.0)] == [0, 1, 2]
    assert largest(ranks, share).rank == 2
    assert up_to(ranks, share) == "up to 20.0 % of the step"


def test_shares_over_a_threshold_at_or_above_it():
    ranks = [rank(0), rank(1), rank(2)]
    us = {0: 50.0, 1: 100.0, 2: 20.0}
    share, hits = shares_over(ranks, lambda r: us[r.rank], 5.0)
    assert share[0] == 5.0 and [r.rank for r in hits] == [1, 0]
    _, hits = shares_over(ranks, lambda r: us[r.rank], 5.0, strict=True)
    assert [r.rank for r in hits] == [1]


def test_evidence_shows_the_worst_ranks_only():
    ranks = [rank(i) for i in range(EVIDENCE_RANKS + 3)]
    lines = evidence_lines(ranks, lambda r: f"rank {r.rank}")
    assert lines == [f"rank {i}" for i in range(EVIDENCE_RANKS)]


# ---------------------------------------------------------------- claim, covered
def test_claim_takes_from_the_ledger_and_leaves_out_ranks_another_finding_holds():
    ledger = Ledger()
    r0, r1, r2 = rank(0, launch=100.0), rank(1, launch=100.0), rank(2, launch=0.0)
    # sync-in-step (which claims first in idle:launch) took all of rank 1's
    ledger.commit("sync-in-step", [1], {1: {"idle:launch": 100.0}})
    ledger.turn("launch-bound")
    c = claim(ledger, [r0, r1, r2], ["idle:launch"], lambda r: r.idle_attribution.launch_us, "launch idle")
    # rank 2's own time is 0: no other finding holds it, so it stays (a finding of no gain there)
    assert [r.rank for r in c.hits] == [0, 2] and [r.rank for r in c.held] == [1]
    assert c.claims == {0: {"idle:launch": 100.0}, 2: {}}
    assert c.us(r0) == 100.0 and c.us(r1) == 0.0 and c.worst is r0
    assert c.verdict(AdviceConfig(), "title", ["e"], "fix").status == FIRED
    # with every rank held, the verdict is covered, naming what it measured and who holds it
    held = claim(ledger, [r1], ["idle:launch"], lambda r: r.idle_attribution.launch_us, "launch idle")
    v = held.verdict(AdviceConfig(), "title", ["e"], "fix")
    assert v.status == COVERED and v.detail == "launch idle; its time is counted under sync-in-step"


def test_claim_each_gives_each_rank_its_pools():
    ledger = Ledger()
    cpu = RankResult(rank=1, file="b", has_gpu=False, window_us=1000.0, steps_used=2)
    cpu.cpu.sync_us_per_step = 30.0
    gpu = rank(0, sync=40.0)
    got = claim_each(ledger, [gpu, cpu], lambda r: ["idle:sync"] if r.has_gpu else ["host:sync"], lambda r: 35.0)
    assert got == {0: {"idle:sync": 35.0}, 1: {"host:sync": 30.0}}


# ---------------------------------------------------------------- who owns which time
def test_every_pool_has_one_owner_row_naming_known_rules():
    assert set(OWNERSHIP) == set(POOLS)
    for pool, o in OWNERSHIP.items():
        assert set(o.claimants) <= RULE_IDS, pool
        assert len(set(o.claimants)) == len(o.claimants), f"{pool}: a rule listed twice"
    with pytest.raises(OwnershipError):
        owner_of("idle:nothing")


def test_the_engine_runs_owners_in_their_turn():
    check_order([r.id for r in _RUN_ORDER])
    # the residual rules run after every owner they take the rest from (step outliers after host-bound)
    order = [r.id for r in _RUN_ORDER]
    assert order.index("host-bound") < order.index("step-time-outliers") < order.index("low-gpu-utilization")


def test_check_order_names_a_rule_out_of_turn():
    order = [r.id for r in _RUN_ORDER]
    # host-bound before sync-in-step, which claims first inside its idle
    swapped = [x for x in order if x != "host-bound"]
    swapped.insert(swapped.index("sync-in-step"), "host-bound")
    with pytest.raises(OwnershipError, match="sync-in-step claims first but runs after the owner host-bound"):
        check_order(swapped)
    # a deferring rule before its owner
    swapped = [x for x in order if x != "dataloader-main-process"]
    swapped.insert(0, "dataloader-main-process")
    with pytest.raises(OwnershipError, match="dataloader-main-process defers to the owner dataloader-bound"):
        check_order(swapped)
    with pytest.raises(OwnershipError, match="no rule"):
        check_order(order[1:])


def test_a_rule_cannot_take_or_commit_time_it_does_not_own():
    ledger = Ledger()
    r = rank(0, dataloader=100.0)
    ledger.turn("launch-bound")
    with pytest.raises(OwnershipError, match="launch-bound may not claim idle:dataloader"):
        ledger.take(r, ["idle:dataloader"], 10.0)
    with pytest.raises(OwnershipError, match="gives it to dataloader-bound"):
        ledger.commit("launch-bound", [0], {0: {"idle:dataloader": 10.0}})
    # without a turn (no engine), take does not check; commit always does
    ledger.turn(None)
    assert ledger.take(r, ["idle:dataloader"], 10.0) == {"idle:dataloader": 10.0}


def test_a_deferring_rule_gets_nothing_where_its_owner_claimed():
    ledger = Ledger()
    r0, r1 = rank(0, dataloader=100.0), rank(1, dataloader=100.0)
    ledger.commit("dataloader-bound", [0], {0: {"idle:dataloader": 60.0}})
    ledger.turn("dataloader-main-process")
    assert ledger.deferred("dataloader-main-process", 0) and not ledger.deferred("dataloader-main-process", 1)
    # 40 µs are still free on rank 0, but the DataLoader there is dataloader-bound's finding
    assert ledger.take(r0, ["idle:dataloader"], 100.0) == {}
    assert ledger.take(r1, ["idle:dataloader"], 100.0) == {"idle:dataloader": 100.0}
    with pytest.raises(OwnershipError, match="where an owner it defers to claimed"):
        ledger.commit("dataloader-main-process", [0], {0: {"idle:dataloader": 40.0}})


def test_deferring_on_several_owners_is_per_rank():
    # cpu-tensor-copied's copies are pageable, blocking or other; which, the model does not say: where
    # one copy rule claimed on a rank, it claims none of the copy pools there
    ledger = Ledger()
    r = rank(0)
    r.memcpy = MemcpySummary(pageable_exposed_us_per_step=30.0, other_exposed_us_per_step=20.0)
    ledger.commit("pageable-memcpy", [0], {0: {"copy:pageable": 30.0}})
    ledger.turn("cpu-tensor-copied")
    assert ledger.take(r, ["copy:pageable", "copy:blocking", "copy:other"], 20.0) == {}


def test_claiming_first_after_the_owner_is_refused():
    ledger = Ledger()
    ledger.commit("host-bound", [0], {0: {"idle:host_ops": 10.0}})
    with pytest.raises(OwnershipError, match="after its owner host-bound"):
        ledger.commit("launch-outliers", [0], {0: {"idle:host_ops": 5.0}})


def test_the_straggler_takes_no_time_of_causes_that_run_after_it():
    pools = claimable_by("rank-straggler")
    assert "compute" not in pools and "idle:optimizer" not in pools and "host:optimizer" not in pools
    assert "idle:unattributed" in pools and "host:other" in pools and "comm:exposed" in pools


def test_the_ownership_table_is_written_down_in_the_architecture():
    """docs/ARCHITECTURE.md's "Which rule owns which time" has a row for every pool, naming its owner."""
    from conftest import REPO
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Which rule owns which time", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(OWNERSHIP)
    for pool, o in OWNERSHIP.items():
        assert rows[pool][2].startswith(o.owner or "none"), pool


# ---------------------------------------------------------------- no two findings claim the same slice
def assert_owned(result: AnalysisResult) -> None:
    """Each finding claims only pools OWNERSHIP gives its rule; per rank and pool the claims
    fit in the pool; a deferring rule claims nothing on a rank where its owner claimed."""
    by_rank = {r.rank: r for r in result.ranks}
    claimed: Dict[Tuple[int, str], List[Tuple[str, float]]] = {}
    for f in result.findings:
        for g in f.rank_gains:
            for pool, us in g.sources.items():
                assert f.id in OWNERSHIP[pool].claimants, (f.id, pool)
                claimed.setdefault((g.rank, pool), []).append((f.id, us))
    for (n, pool), parts in claimed.items():
        assert sum(us for _, us in parts) <= pool_size(by_rank[n], pool) + 1e-6, (n, pool, parts)
    # a deferring rule claims nothing on a rank where the owner of a slice it defers on claimed
    for (n, pool), parts in claimed.items():
        for rule_id, _ in parts:
            owners = {o.owner for o in OWNERSHIP.values() if rule_id in o.defer}
            beside = [(p, x) for (m, p), xs in claimed.items() if m == n for x, _ in xs
                      if x in owners and rule_id in OWNERSHIP[p].defer and x == OWNERSHIP[p].owner]
            assert not beside, f"rank {n}: {rule_id} claims {pool} beside its owner's claims {beside}"


def run(tmp_path, b: TraceBuilder, disable: Optional[List[str]] = None) -> AnalysisResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    b.write(tmp_path / "rank-0.json")
    return analyze(tmp_path, include_last_step=True, config=AdviceConfig(disable=disable or []))


def status(result: AnalysisResult, rule_id: str) -> Tuple[str, str]:
    c = next(c for c in result.checks if c.id == rule_id)
    return c.status, c.detail


def pageable_blocking_trace() -> TraceBuilder:
    """4 steps; in each, aten::to copies from pageable memory ([t+5, t+240]: a pageable
    cudaMemcpyAsync, then cudaStreamSynchronize) while a kernel on another stream keeps the
    GPU busy until t+220; the GPU then idles until t+260, a gap that begins inside aten::to
    after the pageable call returned (the blocking-copy idle category)."""
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.kernel(TC_GEMM, t + 1, 219, launch_ts=t + 0.5, launch_dur=0.3, stream=8)
        b.cpu_op("aten::to", t + 5, 235)
        b.memcpy("HtoD", "Pageable", t + 10, 190, 4_000_000, launch_ts=t + 6, launch_dur=199)
        b.runtime("cudaStreamSynchronize", t + 206, 32)
        b.kernel(TC_GEMM, t + 260, STEP - 260, launch_ts=t + 245, launch_dur=5)
    return b


def test_a_blocking_copy_from_pageable_memory_is_one_finding(tmp_path):
    r = run(tmp_path / "both", pageable_blocking_trace())
    rr = r.ranks[0]
    assert rr.memcpy.blocking_copies_per_step == 1 and rr.idle_attribution.blocking_copy_us == 40
    # the copy op waits for a copy from pageable memory: pinning it (and non_blocking=True) removes
    # the wait, so the idle after the op is pageable-memcpy's, and blocking-copy names no second finding
    f = next(f for f in r.findings if f.id == "pageable-memcpy")
    assert f.bound_pct == pytest.approx(4.0)
    # the fix also runs the copy at the pinned rate: its gain is the replay's saving, which adds the
    # exposed copy time (copy:pageable) it owns to the wait it measured
    assert f.rank_gains[0].sources["idle:blocking_copy"] == 40.0 and set(f.rank_gains[0].sources) <= {
        "idle:blocking_copy", "idle:pageable_copy", "copy:pageable"}
    assert f.gain_ms_per_step * 1e3 == pytest.approx(f.whatif.step_us_before - f.whatif.step_us_after)
    assert "1.0 of them per step are issued by copy ops that then wait for the stream (aten::to ×3)" in f.evidence[0]
    assert status(r, "blocking-copy") == ("covered", "1.0 blocking copies per step on rank 0; its time is "
                                                     "counted under pageable-memcpy")
    assert_owned(r)
    # with pageable-memcpy off, the idle is blocking-copy's again
    r = run(tmp_path / "alone", pageable_blocking_trace(), disable=["pageable-memcpy"])
    f = next(f for f in r.findings if f.id == "blocking-copy")
    assert f.rank_gains[0].sources == {"idle:blocking_copy": 40.0}
    assert_owned(r)


def cpu_tensor_trace() -> TraceBuilder:
    """2 steps; torch.zeros(...).to("cuda") copies from pageable memory (100 µs, exposed), and a
    pinned copy of 10 µs runs with no kernel (1 % of the step: under exposed-memcpy's 5 %)."""
    b = TraceBuilder(rank=0)
    for i in range(2):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.cpu_op("aten::zeros", t + 10, 40)
        b.cpu_op("aten::zero_", t + 30, 18)
        b.cpu_op("aten::fill_", t + 32, 15)
        b.cpu_op("aten::to", t + 60, 60)
        b.cpu_op("aten::_to_copy", t + 61, 58)
        b.cpu_op("aten::copy_", t + 62, 56)
        b.memcpy("HtoD", "Pageable", t + 100, 100, 4_000_000, launch_ts=t + 70, launch_dur=45)
        b.memcpy("HtoD", "Pinned", t + 250, 10, 40_000, launch_ts=t + 240, launch_dur=3)
        b.kernel(TC_GEMM, t + 300, 500, launch_ts=t + 290)
    return b


def test_a_tensor_copied_from_pageable_memory_is_not_counted_twice(tmp_path):
    r = run(tmp_path, cpu_tensor_trace())
    rr = r.ranks[0]
    assert rr.patterns.cpu_tensor_copies_per_step == 1 and rr.memcpy.other_exposed_us_per_step == 10
    assert any(f.id == "pageable-memcpy" for f in r.findings)
    # the 10 µs of the pinned copy are free, but they are not the tensor's copy: pageable-memcpy
    # claimed this rank's copies, so cpu-tensor-copied defers to it
    assert status(r, "cpu-tensor-copied") == ("covered", "tensors filled on the CPU, then copied to the GPU; its time "
                                                         "is counted under pageable-memcpy")
    assert_owned(r)


def test_real_traces_claim_by_ownership(shared_results):
    for name, result in shared_results.items():
        assert_owned(result)


@pytest.fixture(scope="module")
def shared_results() -> Dict[str, AnalysisResult]:
    from conftest import SHARED_ROOT
    out = {}
    for folder in ("hta/alexnet", "hta/two_ranks", "legacy/tb_resnet50_num_workers_4", "tracelens/h100_timesformer"):
        path = SHARED_ROOT / folder
        if path.is_dir():
            out[folder] = analyze(path)
    if not out:
        pytest.skip("../shared is absent")
    return out


def test_real_traces_name_no_blocking_copy_beside_its_pageable_copy(shared_results):
    # every copy to the device in these traces is from pageable memory: the aten::to that waits
    # for it is pinning's to fix, one finding (pageable-memcpy), not two
    for name in ("hta/alexnet", "legacy/tb_resnet50_num_workers_4", "tracelens/h100_timesformer"):
        if name not in shared_results:
            continue
        r = shared_results[name]
        assert not any(f.id == "blocking-copy" for f in r.findings), name
        assert status(r, "blocking-copy")[0] == "covered", name
        f = next(f for f in r.findings if f.id == "pageable-memcpy")
        assert "idle:blocking_copy" in f.rank_gains[0].sources, name


def test_memcpy_directions_say_when_every_copy_to_the_device_is_pageable():
    from hta_report.rules.copies import all_pageable_to_device
    r = rank(0)
    r.memcpy = MemcpySummary(directions=[MemcpyDirection("HtoD", count=4, pageable_count=4),
                                         MemcpyDirection("DtoH", count=2, pageable_count=0),
                                         MemcpyDirection("Memset", count=9)])
    assert all_pageable_to_device(r)
    r.memcpy.directions.append(MemcpyDirection("DtoD", count=1))
    assert not all_pageable_to_device(r)
    assert not all_pageable_to_device(rank(1))  # no copies at all
