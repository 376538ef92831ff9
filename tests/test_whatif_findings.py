"""Findings carry the replay's prediction for their fix (issue 30): the rules
that name an edit get ``Finding.whatif`` from their worst replayed rank, the
others keep a bound; the reports show the prediction and the critical path;
an edit only removes constraints, so it never predicts a slower step."""

import json
import re

import pytest

from conftest import REPO, SHARED_ROOT
from hta_report.analysis.replay import EDITS
from hta_report.analysis.replay.edits import fixes
from hta_report.api import analyze
from hta_report.model import ALL_EDITS, WHATIF_MIN_SAVING_PCT
from hta_report.render import render
from hta_report.render.replay_notes import replay_note
from hta_report.replay_terms import EditLabel, NoteCode
from hta_report.rules.engine import RULES

SAMPLE = REPO / "sample_traces" / "cpu_dataloader_bound"
#: Shared runs where a rule with an edit fires (checked below) and the replay runs on GPU ranks.
EDITED_RUNS = ["hta/distributed_info_unavailable", "hta/trace_diff/control", "legacy/tb_resnet50_num_workers_4",
               "tracelens/h100_bert_small"]
#: Shared runs whose analyzed window is mostly one-off warm-up: no what-if is made there.
WARMUP_RUNS = ["hta/amd_trace", "hta/alexnet"]


def test_every_edit_a_rule_names_is_one_the_replay_makes():
    """Rules name edits by :class:`EditLabel` (the registry's labels, no
    string of their own); every edit is some rule's fix; and which rules
    name an edit is what ``docs/EDITS.md`` says under its heading
    ``## `label` (rule-id, ...)``."""
    named = {r.id: r.edit for r in RULES if r.edit}
    assert all(isinstance(edit, EditLabel) for edit in named.values())
    assert set(named.values()) == set(fixes()) == set(EditLabel) - {EditLabel.NO_PROFILER}
    assert not EDITS[EditLabel.NO_PROFILER].fix  # the profiler's cost removed is no finding's fix
    text = (REPO / "docs" / "EDITS.md").read_text(encoding="utf-8")
    documented = {rule.strip(): label for label, rules in re.findall(r"^## `([^`]+)` \(([^)]+)\)$", text, re.M)
                  for rule in rules.split(",")}
    assert documented == named


@pytest.fixture(scope="module")
def sample(sample_results):
    return sample_results[SAMPLE.name]


@pytest.fixture(scope="module")
def gpu_loader(tmp_path_factory):
    """An H100 training loop that loads its batches in the main process
    (1.5 ms a step) and runs AdamW's single-tensor loop: DataLoader findings
    with a prediction, an unfused-optimizer finding without a GPU edit's."""
    from kineto import training_trace

    d = tmp_path_factory.mktemp("gpu-loader")
    training_trace(steps=8, workers=False, dataloader_us=1500, optimizer="single").write(d / "rank-0.json")
    return analyze(d)


def test_a_finding_with_an_edit_carries_its_rank_s_replayed_step(gpu_loader):
    f = next(f for f in gpu_loader.findings if f.id == "dataloader-bound")
    rank = next(x for x in gpu_loader.ranks if x.rank == f.whatif.rank)
    replayed = next(w for w in rank.replay.whatifs if w.edit == EditLabel.DATALOADER_HIDDEN)
    assert f.whatif == replayed
    assert f.whatif.step_us_before == pytest.approx(rank.steps.mean_us, rel=1e-6)
    assert 0 < f.whatif.step_us_after < f.whatif.step_us_before


def test_a_cpu_only_dataloader_finding_predicts_a_range_and_says_why(sample):
    """The README's sample, a CPU-only CNN loading its batches in the main
    process: worker processes take their CPU time from the cores the
    training's threads use, which the trace does not show, so the prediction
    keeps part of the loading time (the middle of a measured range,
    :data:`~hta_report.analysis.replay.edits.CPU_LOADER_KEPT`) and its interval spans
    the range; the evidence says why, and the fix speaks of threads, not GPUs."""
    from hta_report.analysis.replay.edits import CPU_LOADER_KEPT
    from hta_report.rules.input import CPU_ONLY_RANGE

    rank = sample.ranks[0]
    assert not rank.has_gpu and rank.replay.steps > 0
    hidden = next(w for w in rank.replay.whatifs if w.edit == EditLabel.DATALOADER_HIDDEN)
    loading = rank.cpu.dataloader_us_per_step
    best, mid, worst = CPU_LOADER_KEPT
    assert hidden.applies
    assert hidden.step_us_after == pytest.approx(hidden.step_us_before - (1 - mid) * loading, rel=1e-6)
    assert hidden.step_us_low <= hidden.step_us_before - (1 - best) * loading
    assert hidden.step_us_high >= hidden.step_us_before - (1 - worst) * loading
    f = next(f for f in sample.findings if f.id == "dataloader-bound")
    assert f.whatif == hidden and CPU_ONLY_RANGE in f.evidence
    assert "torch.set_num_threads" in f.fix and "cuda" not in f.fix and "pin_memory" not in f.fix  # no GPU here
    md = render(sample, "md")
    kept = f"keeps {round(100 * best)}-{round(100 * worst)} % of the loading time"
    assert kept in CPU_ONLY_RANGE and kept in md and "predicted after the fix" in md


def test_reports_show_the_prediction_and_the_critical_path(gpu_loader, sample, sample_results):
    f = next(f for f in gpu_loader.findings if f.id == "dataloader-bound")
    before, after = f.whatif.step_us_before / 1e3, f.whatif.step_us_after / 1e3
    md = render(gpu_loader, "md")
    line = next(x for x in md.splitlines() if "predicted after the fix" in x and "DataLoader" in x)
    assert f"ms ({(after - before) / before * 100:+.1f} %" not in line  # the change follows the interval
    assert re.search(r"step \d+\.\d+ → \d+\.\d+ ms \(\d+\.\d+–\d+\.\d+\), "
                     + re.escape(f"{(after - before) / before * 100:+.1f} %, on rank 0"), line)
    assert "DataLoader" in line
    page = render(gpu_loader, "html")
    assert "Predicted after the fix:" in page and "Critical path (replay)" in page
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in page.split("Critical path (replay)")[1]
    doc = json.loads(render(gpu_loader, "json"))
    f = next(f for f in doc["findings"] if f["id"] == "dataloader-bound")
    assert set(f["whatif"]) >= {"edit", "step_us_before", "step_us_after", "step_us_low", "step_us_high"}
    straggler = sample_results["cpu_ddp_2ranks"]
    assert next(f for f in json.loads(render(straggler, "json"))["findings"]
                if f["id"] == "rank-straggler")["whatif"] is None  # no edit: a bound


@pytest.mark.parametrize("run", EDITED_RUNS)
def test_edits_never_predict_a_slower_step_and_together_beat_each_alone(run):
    path = SHARED_ROOT / run
    if not path.is_dir():
        pytest.skip(f"{path} not available (../shared is absent)")
    result = analyze(path)
    replayed = [x for x in result.ranks if x.replay.steps]
    assert replayed
    for x in replayed:
        after = {w.edit: w.step_us_after for w in x.replay.whatifs}
        assert set(after) >= set(fixes()) | {ALL_EDITS}  # and the combinations of those that change the rank
        before = x.replay.measured_step_us
        assert all(v <= before * (1 + 1e-9) for v in after.values()), after
        # together: the edits that save at least WHATIF_MIN_SAVING_PCT of the step
        assert after[ALL_EDITS] <= min(after[e] for e in fixes()) + before * WHATIF_MIN_SAVING_PCT / 100
    edited = [f for f in result.findings if f.whatif is not None]
    assert edited, [f.id for f in result.findings]
    for f in edited:
        assert f.whatif.edit == next(r.edit for r in RULES if r.id == f.id)
        assert f.whatif.rank in f.ranks


@pytest.mark.parametrize("run", WARMUP_RUNS)
def test_a_window_mostly_warm_up_makes_no_prediction(run):
    """amd_trace (70 % of its window one-off warm-up) and alexnet (97 %): the
    replay still reproduces the step and names its critical path, but no
    what-if is made, no finding predicts, no Together, and the rank's note
    and the report say why."""
    path = SHARED_ROOT / run
    if not path.is_dir():
        pytest.skip(f"{path} not available (../shared is absent)")
    result = analyze(path)
    for x in result.ranks:
        assert x.replay.steps and x.replay.whatifs == [] and "no what-if made" in replay_note(x.replay)
        assert x.replay.notes[-1].code == NoteCode.WARMUP
    assert all(f.whatif is None for f in result.findings) and result.together is None
    md = render(result, "md")
    assert "fixed together" not in md and "predicted after the fix" not in md


def test_removing_the_reads_of_a_rank_without_gpu_events_saves_their_host_time():
    """HTA's A100 trace without kernels: the .item() reads are host time only."""
    path = SHARED_ROOT / "hta" / "distributed_info_unavailable"
    if not path.is_dir():
        pytest.skip(f"{path} not available (../shared is absent)")
    f = next(f for f in analyze(path).findings if f.id == "sync-in-step")
    assert f.whatif is not None and f.whatif.step_us_after < f.whatif.step_us_before


def test_two_fixes_are_replayed_together_not_added_up(tmp_path):
    """A loop that loads batches in the main process and zero-fills 100
    gradients per step: both findings predict their fix, and the result says
    what the two buy together (one replay of both edits), which the reports show."""
    from kineto import training_trace

    training_trace(steps=8, workers=False, dataloader_us=1500, set_to_none=False, params=100).write(
        tmp_path / "rank-0.json")
    result = analyze(tmp_path)
    fired = {f.id: f for f in result.findings}
    assert fired["dataloader-bound"].whatif is not None and fired["zero-grad-zeros"].whatif is not None
    both = result.together
    assert both is not None and both.edit == "DataLoader hidden + zero_grad sets None" and both.rank == 0
    assert both.step_us_after < min(fired[i].whatif.step_us_after for i in ("dataloader-bound", "zero-grad-zeros"))
    rank = result.ranks[0]
    assert both in rank.replay.whatifs
    line = next(x for x in render(result, "md").splitlines() if "fixed together" in x)
    assert line.startswith("dataloader-bound and zero-grad-zeros fixed together: step ")
    assert "Together:" in render(result, "html")
    assert json.loads(render(result, "json"))["together"]["edit"] == both.edit


def test_sarif_carries_the_prediction(gpu_loader, sample, sample_results):
    doc = json.loads(render(gpu_loader, "sarif"))
    res = next(r for r in doc["runs"][0]["results"] if r["ruleId"] == "dataloader-bound")
    f = next(f for f in gpu_loader.findings if f.id == "dataloader-bound")
    assert "Predicted after the fix" in res["message"]["text"]
    assert res["properties"]["predicted_step_ms"] == pytest.approx(f.whatif.step_us_after / 1e3, abs=1e-3)
    straggler = sample_results["cpu_ddp_2ranks"]  # rank-straggler has no edit: no prediction
    bound = json.loads(render(straggler, "sarif"))
    r = next(r for r in bound["runs"][0]["results"] if r["ruleId"] == "rank-straggler")
    assert "predicted_step_ms" not in r["properties"] and "Predicted" not in r["message"]["text"]


def test_a_finding_with_a_prediction_states_it_as_its_gain(gpu_loader):
    """The gain shown is the prediction with its interval, not an "up to"
    bound beside it; a finding without one shows its bound, labelled so; and
    an interval that reaches the measured step says no measurable gain."""
    import dataclasses
    from hta_report.render.view import FindingRow

    sample = gpu_loader
    f = next(f for f in sample.findings if f.id == "dataloader-bound")
    row = FindingRow.of(sample, f)
    assert row.gain.startswith("saves ") and "80 %:" in row.gain and row.gain_note == ""
    w = f.whatif
    assert f.gain_ms_per_step * 1e3 == pytest.approx(w.step_us_before - w.step_us_after)
    bound = FindingRow.of(sample, dataclasses.replace(f, whatif=None))
    assert bound.gain.startswith("up to ") and "upper bound" in bound.gain_note
    flat = dataclasses.replace(f, whatif=dataclasses.replace(w, step_us_high=w.step_us_before * 1.1))
    assert FindingRow.of(sample, flat).gain.startswith("no measurable gain expected")


def test_an_edit_that_changes_nothing_leaves_the_finding_its_bound(sample):
    """exposed-communication's edit overlaps gradient all-reduces: on a rank whose exposed
    communication is something else (all-gathers, send/recv, NCCL's generic kernel) the
    replay says the edit does not apply, and the finding keeps its bound instead of a
    prediction of no gain."""
    import copy
    from hta_report.model import Finding, RankGain, WhatIf
    from hta_report.rules.base import predicted
    from hta_report.rules.engine import RULES

    result = copy.deepcopy(sample)
    rank = result.ranks[0]
    rule = next(r for r in RULES if r.id == "exposed-communication")
    f = Finding(id=rule.id, severity="high", title="t", evidence=[], fix="f", doc_url="", gain_pct=20.0,
                gain_ms_per_step=1.0, ranks=[rank.rank], rank_gains=[RankGain(rank=rank.rank, gain_us=1e3, gain_pct=20.0)])
    before = rank.replay.measured_step_us
    hit = WhatIf(edit=rule.edit, step_us_before=before, step_us_after=before, rank=rank.rank, applies=False)
    rank.replay.whatifs = [w for w in rank.replay.whatifs if w.edit != rule.edit] + [hit]
    assert predicted(f, rule, result) is None
    hit.applies = True
    assert predicted(f, rule, result) is hit


def test_a_fix_that_saves_nothing_alone_says_what_the_step_waits_for(sample):
    """On the V100 trace_diff test trace, Tensor Cores would cut 28 % of the step's GPU time
    and the replay predicts 119.44 -> 119.43 ms: its GEMMs are off the critical path. The
    prediction says so and names the path's top entries (escaped on the terminal), instead
    of a bare '-0.0 %' under a high-severity finding; SARIF says it too."""
    import copy
    from hta_report.model import Finding, RankGain, ReplayOp, WhatIf
    from hta_report.render.terminal import render as terminal_summary
    from hta_report.render.view import prediction

    result = copy.deepcopy(sample)
    rank = result.ranks[0]
    rank.replay.critical_path = [ReplayOp(name="ncclKernel_SendRecv\x1b[31m", kind="gpu", us=15630.0),
                                 ReplayOp(name="host work", kind="cpu", us=9000.0)]
    before = rank.replay.measured_step_us

    def finding(after_us: float) -> Finding:
        return Finding(id="tensor-cores-unused", severity="high", title="t", evidence=[], fix="f", doc_url="",
                       gain_pct=28.0, gain_ms_per_step=1.0, ranks=[rank.rank],
                       rank_gains=[RankGain(rank=rank.rank, gain_us=before * 0.28, gain_pct=28.0)],
                       whatif=WhatIf(edit=EditLabel.TENSOR_CORES, step_us_before=before,
                                     step_us_after=after_us, rank=rank.rank))
    text = prediction(result, finding(before - 1.0))
    assert "no gain alone" in text and "ncclKernel_SendRecv" in text and "15.63 ms" in text and "host work" in text
    assert "no gain alone" not in prediction(result, finding(before * 0.9))
    result.findings = [finding(before - 1.0)]
    shown = terminal_summary(result, [])
    assert "no gain alone" in shown and "\x1b" not in shown
    (res,) = [r for r in json.loads(render(result, "sarif"))["runs"][0]["results"] if r["ruleId"] == "tensor-cores-unused"]
    assert "no gain alone" in res["message"]["text"]
