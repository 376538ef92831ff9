"""`compare`'s statistical verdict (hta_report/compare_stats.py) and the instance samples it reads."""
import json

import numpy as np
import pytest

from hta_report.api import analyze
from hta_report.compare import compare
from hta_report.compare_stats import BOOTSTRAP
from hta_report.model import SAMPLE_ITEMS, SAMPLES_PER_ITEM, AnalysisResult, InstanceSample, InstanceSamples
from kineto import TraceBuilder

#: Items of the synthetic host-op results and their mean durations (µs): 30 ops, 4 instances a step each;
#: aten::addmm takes 12 of the step's 40.7 ms.
ITEMS = {**{f"aten::op{i}": 20.0 + 15 * i for i in range(29)}, "aten::addmm": 3000.0}
PER_STEP = 12


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A real (small) analyzed CPU result, whose steps and samples the tests replace."""
    d = tmp_path_factory.mktemp("tpl")
    b = TraceBuilder(rank=0, gpu_name=None)
    t = 0.0
    for i in range(4):
        b.step(i + 1, t, 1000)
        b.cpu_op("aten::mm", t + 10, 500)
        t += 1000
    b.write(d / "t.json")
    return analyze(d).to_json()


def _result(template, seed, steps=10, instances_per_step=PER_STEP, scale=None, slow=None, step_scale=1.0,
            step_noise=0.01, shift_noise=0.0):
    """A result whose rank holds ``steps`` analyzed steps and host-op samples:
    each op's durations lognormal (σ 0.05) around its mean, times ``scale``
    (all ops: the environment) and ``slow`` = (op, factor) for one op. The
    steps are the sum of the ops' per-step time plus 200 µs, with
    ``step_noise`` relative noise."""
    rng = np.random.default_rng(seed)
    a = AnalysisResult.from_json(template)
    r = a.ranks[0]
    items, per_step = [], 0.0
    env = scale or 1.0
    for name, mean in ITEMS.items():
        factor = env * (slow[1] if slow and slow[0] == name else 1.0)
        n = steps * instances_per_step
        d = mean * factor * rng.lognormal(0, 0.05, n) * np.exp(shift_noise * rng.standard_normal())
        items.append(InstanceSample(kind="cpu_op", name=name, count=n, total_us=float(d.sum()),
                                    durations_us=[round(float(x), 3) for x in d[:SAMPLES_PER_ITEM]]))
        per_step += mean * factor * instances_per_step
    items.sort(key=lambda i: -i.total_us)
    step = (per_step + 200 * env) * step_scale
    durations = step * (1 + step_noise * rng.standard_normal(steps + 1))
    r.steps.steps = [type(r.steps.steps[0])(number=i + 1, duration_us=float(x), warmup=i == 0)
                     for i, x in enumerate(durations)]
    r.steps.count = steps + 1
    r.steps.mean_us = float(durations[1:].mean())
    a.aggregate.mean_step_us = r.steps.mean_us
    r.samples = InstanceSamples(steps=steps, items=items)
    return a


def test_aa_pairs_of_equal_distributions_read_unchanged(template):
    verdicts = [compare(_result(template, 2 * i), _result(template, 2 * i + 1)).stats.verdict for i in range(40)]
    # no false verdict; an interval that happens to reach past ±1 % reads inconclusive, not a change
    # (53 of 60 such pairs read unchanged when this was written: at least 30 of 40 leaves room for the draws)
    assert "regressed" not in verdicts and "improved" not in verdicts
    assert verdicts.count("unchanged") >= 30 and set(verdicts) <= {"unchanged", "inconclusive"}


def test_one_op_slowed_10_pct_regresses_and_is_named_first(template):
    slowed = "aten::addmm"  # 3 ms × 4 a step: 10 % slower moves the step by 1.2 ms of 40.7 ms (2.9 %)
    c = compare(_result(template, 1), _result(template, 2, slow=(slowed, 1.10), step_scale=1.029))
    s = c.stats
    assert s.verdict == "regressed", s
    assert s.items[0].name == slowed and s.items[0].status == "changed"
    # the estimate is near the 10 % put in, its 95 % interval clear of 0 (it holds the truth 95 % of the time:
    # these draws put it at [+10.0, +13.4] %)
    assert s.items[0].change_pct == pytest.approx(10, abs=2.5) and s.items[0].change_pct_low > 5
    assert s.items[0].us_per_step_low > 0 and s.items[0].q_value < s.alpha
    assert s.change_pct_low > s.threshold_pct


def test_uniform_scaling_is_the_environment_and_the_verdict_is_unchanged(template):
    c = compare(_result(template, 3), _result(template, 4, scale=1.25))
    s = c.stats
    assert s.environment_named and s.environment_low < 1.25 < s.environment_high
    assert s.environment_factor == pytest.approx(1.25, rel=0.02) and s.environment_items == len(ITEMS)
    assert s.raw_change_pct == pytest.approx(25, abs=3)
    assert s.verdict == "unchanged", s
    assert c.step_time_change_pct == pytest.approx(25, abs=3)  # the raw change is still shown
    assert c.verdict == "regressed"  # the headline is the noise band's: it reads the raw step change


def test_too_few_steps_and_instances_are_inconclusive(template):
    c = compare(_result(template, 5, steps=3, instances_per_step=1), _result(template, 6, steps=3,
                                                                              instances_per_step=1, step_scale=1.3))
    assert c.stats.verdict == "inconclusive" and "too few" in c.stats.note
    assert c.verdict == "regressed"  # the band's headline: +30 %


def test_benjamini_hochberg_counts_the_survivors(template):
    slowed = [f"aten::op{i}" for i in (24, 25, 26, 27, 28)]
    base = _result(template, 7)
    new = _result(template, 8)
    for it in new.ranks[0].samples.items:  # five ops 30 % slower, the 25 others drawn alike
        if it.name in slowed:
            it.durations_us = [x * 1.3 for x in it.durations_us]
    s = compare(base, new).stats
    changed = [i for i in s.items if i.status == "changed"]
    assert s.items_tested == len(ITEMS) and s.items_significant == len(changed)
    assert set(slowed) <= {i.name for i in changed} and len(changed) <= len(slowed) + 1  # BH: few false discoveries
    assert all(i.q_value >= i.p_value and i.q_value < s.alpha for i in changed)
    # adjusted, not raw: the q-value of the largest surviving p-value is at most p × tested / survivors
    worst = max(changed, key=lambda i: i.p_value)
    assert worst.q_value <= worst.p_value * s.items_tested / s.items_significant + 1e-12
    assert any(i.q_value > i.p_value for i in changed)
    # a false-discovery rate at the smallest q-value keeps none of them (q < α is strict)
    strict = compare(base, new, alpha=min(i.q_value for i in changed)).stats
    assert strict.items_significant < s.items_significant


def test_a_result_without_samples_compares_by_the_band(template):
    base, new = _result(template, 9), _result(template, 10, step_scale=1.3)
    base.ranks[0].samples = InstanceSamples()
    old = json.loads(base.to_json())
    del old["ranks"][0]["samples"]  # as saved before the field existed
    c = compare(AnalysisResult.from_dict(old), new)
    assert c.stats.method == "noise band" and "no instance samples: band verdict" in c.stats.note
    assert c.verdict == "regressed"  # +30 % against a band of a few %


def test_a_comparison_of_results_read_back_from_json_is_the_same(template):
    base, new = _result(template, 11), _result(template, 12, slow=("aten::addmm", 1.1), step_scale=1.029)
    again = [AnalysisResult.from_json(x.to_json()) for x in (base, new)]
    assert again[1].ranks[0].samples == new.ranks[0].samples
    c, c2 = compare(base, new), compare(*again)
    assert c2.verdict == c.verdict and c2.stats == c.stats
    data = json.loads(c.to_json())
    assert data["stats"]["method"] == "statistical" and data["stats"]["items"][0]["name"] == "aten::addmm"


def test_gate_exit_codes(template, tmp_path, run_cli):
    files = {}
    for name, r in {"base": _result(template, 13), "same": _result(template, 14),
                    "slow": _result(template, 15, slow=("aten::addmm", 1.1), step_scale=1.029),
                    "few_a": _result(template, 16, steps=3, instances_per_step=1),
                    "few_b": _result(template, 17, steps=3, instances_per_step=1)}.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(r.to_json())
    out = tmp_path / "c.json"
    assert run_cli("compare", files["base"], files["slow"], "-o", out, "--fail-on", "regression")[0] == 2
    assert json.loads(out.read_text())["gates"][0]["tripped"] is True
    assert run_cli("compare", files["base"], files["same"], "-o", out, "--fail-on", "regression")[0] == 0
    # the gate on the statistical interval's lower end: the slowed op moves the step by about 2.9 %, so a
    # significant regression above 1 % trips and one above 5 % does not
    assert run_cli("compare", files["base"], files["slow"], "-o", out, "--fail-on",
                   "step_time_regression_low>1")[0] == 2
    assert run_cli("compare", files["base"], files["slow"], "-o", out, "--fail-on",
                   "step_time_regression_low>5")[0] == 0
    code, _, err = run_cli("compare", files["few_a"], files["few_b"], "-o", out, "--inconclusive", "fail")
    assert code == 3 and "inconclusive" in err
    assert run_cli("compare", files["few_a"], files["few_b"], "-o", out, "--inconclusive", "pass")[0] == 0
    assert run_cli("compare", files["few_a"], files["few_b"], "-o", out, "--fail-on", "regression")[0] == 0
    code, help_text, _ = run_cli("compare", "--help")
    assert "--inconclusive" in help_text and "3  --inconclusive fail" in help_text


def test_the_samples_are_bounded_and_in_time_order(tmp_path):
    """60 kernels and a frequent one: the 40 with the most time are kept, each
    with at most 128 durations, an even spread of all its instances."""
    b = TraceBuilder(rank=0)
    t = 0.0
    for s in range(10):
        b.step(s + 1, t, 5000)
        for i in range(60):
            b.kernel(f"k{i:02d}", t + 10 + i * 20, 1 + i / 10)
        for j in range(30):
            b.kernel("frequent", t + 1500 + j * 100, 10 + j)
        t += 5000
    b.write(tmp_path / "t.json")
    r = analyze(tmp_path).ranks[0]
    kernels = [i for i in r.samples.items if i.kind == "kernel"]
    assert len(kernels) == SAMPLE_ITEMS and kernels[0].name == "frequent"
    assert {i.name for i in kernels[1:]} == {f"k{i:02d}" for i in range(21, 60)}  # the 39 longest of the 60
    f = kernels[0]
    steps = r.samples.steps
    assert f.count == 30 * steps and len(f.durations_us) == SAMPLES_PER_ITEM
    assert f.durations_us[0] == 10 and f.durations_us[-1] == 39  # first and last instance kept
    assert all(len(i.durations_us) == i.count == steps for i in kernels[1:])
    assert BOOTSTRAP >= 1000


def _gpu(result, host_share_pct):
    """``result`` with its items as GPU kernels and its replay's critical path ``host_share_pct`` % on the host."""
    r = result.ranks[0]
    for it in r.samples.items:
        it.kind = "kernel"
    r.replay.host_share_pct = host_share_pct
    return result


def test_a_host_bound_gpu_rank_is_inconclusive_with_its_gpu_work_shown(template):
    # the same kernel slowed 10 %: decided where the GPU makes the step, not where the host does
    slow = ("aten::addmm", 1.10)
    gpu_bound = compare(_gpu(_result(template, 1), 10.0), _gpu(_result(template, 2, slow=slow, step_scale=1.029), 10.0))
    assert gpu_bound.stats.verdict == "regressed"
    host_bound = compare(_gpu(_result(template, 1), 90.0), _gpu(_result(template, 2, slow=slow, step_scale=1.029), 90.0))
    s = host_bound.stats
    assert s.verdict == "inconclusive" and "the step is the host's (90 %" in s.note
    assert s.change_pct_low > 0  # the GPU work's change is still measured and shown
    assert s.items[0].name == "aten::addmm"


def test_host_and_gpu_each_get_their_environment_factor(template):
    # a slower host (every host op 30 % longer) beside an unchanged GPU: the GPU-bound step's factor is the
    # kernels' (1.0), not a median over both parts
    def mixed(result, host_scale):
        r = result.ranks[0]
        r.replay.host_share_pct = 10.0
        for i, it in enumerate(sorted(r.samples.items, key=lambda x: x.name)):
            if i % 2:
                it.kind = "kernel"
            else:
                it.durations_us = [d * host_scale for d in it.durations_us]
                it.total_us *= host_scale
        return result
    s = compare(mixed(_result(template, 7), 1.0), mixed(_result(template, 8), 1.3)).stats
    assert s.environment_factor == pytest.approx(1.0, abs=0.02) and s.environment_items == len(ITEMS) // 2
    assert s.verdict == "unchanged", s
