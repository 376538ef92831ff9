"""Ranks that wait for each other at collectives run at the pace of the
slowest: a prediction for such a job is what its slowest rank's own time
(step less wait) saves, not what the rank that gains most saves (field: an 8-rank TorchRec DLRM
job's fixes together read -27.3 % on rank 3, their figures alone taken on
ranks 0 and 7; the same edit saves 1-27 % by rank)."""
import pytest

from hta_report.model import (AnalysisResult, CommSummary, Finding, Inventory, RankResult, Replay, WhatIf,
                              combined_edit)
from hta_report.render import render
from hta_report.rules.base import coupled_ranks, job_whatif, together

SYNC, LOADER = "no host-device sync", "DataLoader hidden"


def _rank(rank: int, before: float, after: dict, basis: str = "kernels", error_pct: float = 2.0,
          whatifs: bool = True, wait: float = 0.0) -> RankResult:
    """A replayed rank with mean step ``before`` (µs) and one what-if per
    ``after`` entry (edit -> step after, µs; None: the edit changes nothing)."""
    ws = [WhatIf(edit=e, step_us_before=before, step_us_after=before if a is None else a,
                 step_us_low=(before if a is None else a) * 0.9, step_us_high=(before if a is None else a) * 1.1,
                 rank=rank, applies=a is not None, description=f"edit {e}") for e, a in after.items()]
    return RankResult(rank=rank, file=f"rank-{rank}.json", comm=CommSummary(collective_basis=basis,
                                                                          sync_wait_us_per_step=wait),
                      replay=Replay(steps=5, error_pct=error_pct, measured_step_us=before,
                                    whatifs=ws if whatifs else []))


def _result(*ranks: RankResult) -> AnalysisResult:
    return AnalysisResult(inventory=Inventory(input_dir="t"), ranks=list(ranks))


def _pick(edit):
    return lambda x: next((w for w in x.replay.whatifs if w.edit == edit), None)


def test_the_job_steps_at_its_slowest_rank_before_and_after():
    """Rank 1 gains most (20 -> 8 ms) but rank 0 stays slowest after the fix
    (19 -> 15 ms): the job goes from 20 ms (its slowest before) to 15 ms."""
    res = _result(_rank(0, 19000.0, {SYNC: 15000.0}), _rank(1, 20000.0, {SYNC: 8000.0}))
    assert [x.rank for x in coupled_ranks(res)] == [0, 1]
    w = job_whatif(res, _pick(SYNC), SYNC)
    assert w is not None and w.slowest_of == 2 and w.rank == 0 and w.applies
    assert (w.step_us_before, w.step_us_after) == (20000.0, 15000.0)
    assert w.step_us_low == pytest.approx(15000.0 * 0.9) and w.step_us_high == pytest.approx(15000.0 * 1.1)


def test_a_rank_the_fix_leaves_alone_holds_the_job_back():
    """The edit changes rank 0 only; rank 1 (18 ms, unchanged) then gates the
    job: 18 ms before is not the slowest (rank 0, 20 ms), 18 ms after."""
    res = _result(_rank(0, 20000.0, {SYNC: 10000.0}), _rank(1, 18000.0, {SYNC: None}))
    w = job_whatif(res, _pick(SYNC), SYNC)
    assert w is not None and w.rank == 1 and (w.step_us_before, w.step_us_after) == (20000.0, 18000.0)


def test_fixing_the_rank_the_others_wait_for_saves_the_job_time():
    """Rank 1 arrives last (own time 20 ms); rank 0's own work is 12 ms and
    it waits 8 ms for rank 1. A fix that cuts rank 1 to 14 ms: the job
    steps at 14 ms (rank 0, 12 ms of its own, then waits 2 ms), though rank
    0's replay, which keeps its 8 ms wait, predicts no change for it."""
    res = _result(_rank(0, 20000.0, {SYNC: None}, wait=8000.0), _rank(1, 20000.0, {SYNC: 14000.0}))
    w = job_whatif(res, _pick(SYNC), SYNC)
    assert w is not None and (w.step_us_before, w.step_us_after) == (20000.0, 14000.0) and w.rank == 1


def test_fixing_a_rank_that_waits_saves_the_job_nothing():
    """The same job, the fix cutting rank 0 (which waits) from 20 to 15 ms:
    rank 0 only waits longer for rank 1; the job saves nothing (its own
    replay predicts -25 %)."""
    res = _result(_rank(0, 20000.0, {SYNC: 15000.0}, wait=8000.0), _rank(1, 20000.0, {SYNC: None}))
    w = job_whatif(res, _pick(SYNC), SYNC)
    assert w is not None and w.step_us_after == pytest.approx(20000.0) and w.rank == 1


def test_no_job_figure_without_every_coupled_rank_replayed():
    """A coupled rank the replay does not reproduce, or whose what-ifs were
    withheld, leaves the job without a figure (the finding keeps its bound)."""
    bad_fit = _result(_rank(0, 20000.0, {SYNC: 10000.0}), _rank(1, 18000.0, {SYNC: 9000.0}, error_pct=40.0))
    withheld = _result(_rank(0, 20000.0, {SYNC: 10000.0}), _rank(1, 18000.0, {}, whatifs=False))
    nothing = _result(_rank(0, 20000.0, {SYNC: None}), _rank(1, 18000.0, {SYNC: None}))
    assert job_whatif(bad_fit, _pick(SYNC), SYNC) is None
    assert job_whatif(withheld, _pick(SYNC), SYNC) is None
    assert job_whatif(nothing, _pick(SYNC), SYNC) is None


def test_ranks_without_collectives_are_not_a_job():
    """Independent ranks (no collective on two of them): each keeps its own figures."""
    res = _result(_rank(0, 20000.0, {SYNC: 10000.0}, basis=""), _rank(1, 18000.0, {SYNC: 9000.0}))
    assert coupled_ranks(res) == []
    assert job_whatif(res, _pick(SYNC), SYNC) is None


def test_together_takes_each_ranks_largest_combination():
    """Rank 0 has both edits combined, rank 1 only one of them (the other
    did not save alone there): each contributes what it has, and the job
    is its slowest after."""
    both = combined_edit([SYNC, LOADER])
    res = _result(_rank(0, 20000.0, {SYNC: 17000.0, LOADER: 18000.0, both: 12000.0}),
                  _rank(1, 19000.0, {SYNC: 14000.0, LOADER: None}))
    fs = [Finding(id="sync-in-step", title="s", severity="low", evidence=[], fix="", doc_url="", ranks=[0, 1]),
          Finding(id="dataloader-bound", title="d", severity="low", evidence=[], fix="", doc_url="", ranks=[0])]
    for f, e in zip(fs, (SYNC, LOADER)):
        f.whatif = job_whatif(res, _pick(e), e)
    w = together(res, fs, {"sync-in-step": SYNC, "dataloader-bound": LOADER})
    assert w is not None and w.edit == both and w.slowest_of == 2
    assert (w.step_us_before, w.step_us_after, w.rank) == (20000.0, 14000.0, 1)


def test_the_page_says_the_figure_is_the_jobs(sample_results):
    """The 2-rank gloo DDP sample: every prediction is the job's (its
    slowest rank before and after), and the page says so."""
    r = sample_results["cpu_ddp_2ranks"]
    preds = [f.whatif for f in r.findings if f.whatif is not None]
    assert preds, "the sample has findings with predictions"
    slowest = max(x.replay.measured_step_us for x in r.ranks)
    for w in preds:
        assert w.slowest_of == 2
        assert w.step_us_before == pytest.approx(slowest, rel=1e-6)
        own_before = max(x.replay.measured_step_us - x.comm.sync_wait_us_per_step for x in r.ranks)
        own_after = max(next(y.step_us_after for y in x.replay.whatifs if y.edit == w.edit)
                        - x.comm.sync_wait_us_per_step for x in r.ranks)
        assert w.step_us_after == pytest.approx(slowest - (own_before - own_after), rel=1e-6)
    md = render(r, "md").replace("\\", "")
    assert "the job's step (2 ranks that wait for each other at collectives; rank" in md
    edits = [w.edit for w in preds]
    assert len(edits) == len(set(edits)), "one fix, predicted once"


def test_a_job_without_steps_says_traced_window():
    """Ranks without ProfilerStep: the job's figure is of its traced window, and says so."""
    from hta_report.render.view import _step_change
    res = _result(_rank(0, 20000.0, {SYNC: 15000.0}), _rank(1, 20000.0, {SYNC: 14000.0}))
    w = job_whatif(res, _pick(SYNC), SYNC)
    assert w is not None
    text = _step_change(res, w)
    assert text.startswith("traced window ") and "the job's traced window (2 ranks" in text
