"""`hta-report compare`, --fail-on gates and their exit codes."""
import json

import pytest

from conftest import shared
from hta_report.api import analyze
from hta_report.compare import compare
from hta_report.errors import InputError
from hta_report.gates import parse_gate
from hta_report.render.markdown import GITHUB_COMMENT_LIMIT, fit
from kineto import TraceBuilder, simple_gpu_trace


def _steps_trace(path, step_us, kernel_us, steps=6, jitter=()):
    b = TraceBuilder(rank=0)
    t = 0.0
    for i in range(steps):
        d = step_us + (jitter[i] if i < len(jitter) else 0)
        b.step(i + 1, t, d)
        b.kernel("sgemm", t + 50, kernel_us)
        t += d
    b.write(path)


@pytest.fixture
def fast_slow(tmp_path):
    (tmp_path / "fast").mkdir()
    (tmp_path / "slow").mkdir()
    # 24 steps: 22 analyzed (the first is warm-up, the last may be cut), enough for the
    # statistical verdict to take the steps as samples (compare_stats.MIN_STEPS)
    _steps_trace(tmp_path / "fast" / "t.json", 1000, 800, steps=24, jitter=(0, 5, -5, 5, -5, 0) * 4)
    _steps_trace(tmp_path / "slow" / "t.json", 1200, 800, steps=24, jitter=(0, 5, -5, 5, -5, 0) * 4)
    return tmp_path / "fast", tmp_path / "slow"


def test_verdicts(fast_slow):
    fast, slow = analyze(fast_slow[0]), analyze(fast_slow[1])
    assert compare(fast, slow).verdict == "regressed"
    assert compare(slow, fast).verdict == "improved"
    same = compare(fast, fast)
    assert same.verdict == "unchanged" and same.step_time_change_pct == 0
    # noise band: coefficient of variation of the analyzed steps, at least 1 %
    assert same.noise_band_pct == pytest.approx(1.0)
    c = compare(fast, slow)
    assert c.step_time_change_pct == pytest.approx(20.0, abs=0.5)


def test_compare_numbers_equal_separate_analyze(tmp_path, run_cli):
    base, new = shared("trace_diff/control"), shared("trace_diff/test")
    code, _, err = run_cli("analyze", base, "-o", tmp_path / "b.json")
    assert code == 0, err
    code, _, err = run_cli("analyze", new, "-o", tmp_path / "n.json")
    assert code == 0, err
    code, out, err = run_cli("compare", base, new, "-o", tmp_path / "d.json")
    assert code == 0, err
    b, n = json.loads((tmp_path / "b.json").read_text()), json.loads((tmp_path / "n.json").read_text())
    d = json.loads((tmp_path / "d.json").read_text())
    overall = {m["name"]: m for m in d["overall"]}
    assert overall["mean step time"]["base"] == pytest.approx(b["aggregate"]["mean_step_us"] / 1e3)
    assert overall["mean step time"]["new"] == pytest.approx(n["aggregate"]["mean_step_us"] / 1e3)
    assert overall["GPU idle"]["base"] == pytest.approx(b["aggregate"]["idle_pct"])
    assert overall["GPU idle"]["new"] == pytest.approx(n["aggregate"]["idle_pct"])
    # one rank on each side (3 and 1): they are paired
    assert [(r["rank"], r["new_rank"]) for r in d["ranks"]] == [(3, 1)]
    # comparable (the statistical verdict's four values; this pair scales nearly every kernel alike, which the
    # environment factor takes out, and what remains spans the threshold)
    assert d["verdict"] in ("regressed", "improved", "unchanged", "inconclusive")
    assert d["stats"]["method"] == "statistical" and d["stats"]["items_tested"] > 0
    # html and markdown from the same comparison; saved results compare too
    for name in ("d.html", "d.md"):
        code, _, err = run_cli("compare", base, new, "-o", tmp_path / name)
        assert code == 0, err
    assert "Verdict" in (tmp_path / "d.md").read_text()
    code, _, err = run_cli("compare", tmp_path / "b.json", tmp_path / "n.json", "-o", tmp_path / "j.json")
    assert code == 0, err
    j = json.loads((tmp_path / "j.json").read_text())
    assert j["overall"] == d["overall"] and j["verdict"] == d["verdict"]


def test_gate_exit_codes(fast_slow, tmp_path, run_cli):
    fast, slow = fast_slow
    # 0: no gate trips (a run compared with itself trips no regression gate)
    code, _, err = run_cli("compare", fast, fast, "-o", tmp_path / "a.html", "--fail-on", "step_time_regression>5%")
    assert code == 0, err
    # 2: a gate trips, and the report was written first
    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "b.html", "--fail-on", "step_time_regression>5%")
    assert code == 2
    assert "gate tripped: step_time_regression>5%" in err
    assert (tmp_path / "b.html").exists()
    # 1: a malformed gate is a usage error, checked before any work
    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "c.html", "--fail-on", "speed>>5")
    assert code == 1 and "expected METRIC OP VALUE" in err
    assert not (tmp_path / "c.html").exists()


def test_analyze_gates(tmp_path, run_cli):
    simple_gpu_trace().write(tmp_path / "t.json")
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html", "--fail-on", "idle_pct>30")
    # 3 steps, the last dropped, the first warm-up: step 2 analyzed, 550 of its 1,000 µs without GPU work
    assert code == 2 and "idle_pct = 55.00" in err
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html", "--fail-on", "idle_pct>60",
                           "--fail-on", "severity>=high")
    assert code == 2 and "severity>=high" in err and "idle_pct>60" not in err
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html", "--fail-on", "dataloader_pct>=20")
    assert code == 0, err
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html", "--fail-on", "nonsense>1")
    assert code == 1 and "unknown metric" in err


def test_every_gate_outcome_is_in_the_saved_result(tmp_path, run_cli):
    """The gates are checked before the reports are written, so a JSON result
    (and any output) says which held and which tripped, with the value."""
    simple_gpu_trace().write(tmp_path / "t.json")
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.json", "--fail-on", "idle_pct>30",
                           "--fail-on", "idle_pct>60", "--fail-on", "dataloader_pct>=20")
    assert code == 2, err
    gates = json.loads((tmp_path / "r.json").read_text())["gates"]
    assert [(g["expression"], g["tripped"]) for g in gates] == [
        ("idle_pct>30", True), ("idle_pct>60", False), ("dataloader_pct>=20", False)]
    assert gates[0]["value"] == pytest.approx(55.0) and gates[0]["not_measured"] == ""


def test_a_comparison_keeps_its_gates(fast_slow, tmp_path, run_cli):
    fast, slow = fast_slow
    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "c.json", "--fail-on", "step_time_regression>5%",
                           "--fail-on", "new_findings>100")
    assert code == 2, err
    gates = json.loads((tmp_path / "c.json").read_text())["gates"]
    assert [(g["metric"], g["tripped"]) for g in gates] == [("step_time_regression", True), ("new_findings", False)]
    assert gates[0]["value"] > 5


def test_an_unmeasured_metric_trips_and_says_why():
    from hta_report.gates import evaluate, parse_gate
    from hta_report.model import AnalysisResult, Inventory

    empty = AnalysisResult(inventory=Inventory(input_dir=""))
    (r,) = evaluate([parse_gate("idle_pct>30")], result=empty)
    assert r.tripped and r.value is None and r.not_measured == "no rank has GPU activity"


def test_gate_parsing():
    g = parse_gate("step_time_regression > 5 %", comparison=True)
    assert (g.metric, g.op, g.value) == ("step_time_regression", ">", 5.0)
    assert parse_gate("severity>=medium").value == 2
    with pytest.raises(InputError):
        parse_gate("step_time_regression>5")  # comparison metric on analyze
    with pytest.raises(InputError):
        parse_gate("severity>=urgent")


def test_markdown_fits_a_github_comment():
    text = "\n".join(f"| row {i} | {'x' * 80} |" for i in range(2000))
    cut = fit(text)
    assert len(cut) < GITHUB_COMMENT_LIMIT and cut.endswith("has everything._\n")
    assert fit("short\n") == "short\n"


def test_help_lists_gate_metrics(run_cli):
    code, out, _ = run_cli("compare", "--help")
    assert code == 0 and "step_time_regression" in out and "idle_pct" in out
    code, out, _ = run_cli("analyze", "--help")
    assert "severity" in out and "step_time_regression" not in out


def test_compare_reads_sides_analyzed_before_from_the_cache(fast_slow, tmp_path, run_cli):
    fast, slow = fast_slow
    cache = tmp_path / "cache"
    code, _, err = run_cli("analyze", fast, "-o", tmp_path / "a.html", "-q", "-v", "--cache-dir", cache)
    assert code == 0, err
    assert "from cache" not in err and "parse t.json" in err

    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "d1.json", "-q", "-v", "--cache-dir", cache)
    assert code == 0, err
    assert err.count("analysis result (from cache)") == 1  # fast: analyzed above; slow: parsed now
    assert err.count("parse t.json\n") == 1 and "render json" in err

    # with only the parsed files kept, neither side is parsed again
    for p in (cache / "result-v1").iterdir():
        p.unlink()
    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "d2.json", "-q", "-v", "--cache-dir", cache)
    assert code == 0, err
    assert err.count("parse t.json (from cache)") == 2 and "parse t.json\n" not in err

    code, _, err = run_cli("compare", fast, slow, "-o", tmp_path / "d3.json", "-q", "--no-cache",
                           "--cache-dir", tmp_path / "unused")
    assert code == 0 and err == ""
    assert not (tmp_path / "unused").exists()
    d1, d2, d3 = (json.loads((tmp_path / f"d{i}.json").read_text()) for i in (1, 2, 3))
    for d in (d1, d2, d3):
        for side in ("base", "new"):
            d[side]["inventory"].pop("analyzed_at")
    assert d1 == d2 == d3
    assert d1["verdict"] == "regressed"


def test_compare_of_huge_finite_figures_stays_finite(tmp_path):
    """A saved result may hold any finite number: differences and ratios that
    overflow are the largest float of their sign, so the comparison is still
    JSON (it wrote Infinity before, and json refused it)."""
    import math

    from hta_report.model import AnalysisResult

    simple_gpu_trace(rank=0).write(tmp_path / "t.json")
    base = analyze(tmp_path)
    def edited(step_us, kernel_us):
        data = json.loads(base.to_json())
        data["aggregate"]["mean_step_us"] = step_us
        data["ranks"][0]["steps"]["mean_us"] = step_us
        for k in data["ranks"][0]["top_kernels"]:
            k["total_us"] = kernel_us
        # the figures above are edited, the instance samples would contradict them: without
        # samples the verdict is the noise band's (compare_stats.fallback)
        data["ranks"][0]["samples"] = {"steps": 0, "items": []}
        return AnalysisResult.from_json(json.dumps(data))

    c = compare(edited(1e-10, -1.7e308), edited(1e300, 1.7e308))  # 1e312 % and 3.4e308 µs overflow
    text = c.to_json()  # allow_nan=False: raises on infinity or NaN
    assert c.step_time_change_pct > 1e290 and c.verdict == "regressed" and c.stats.method == "noise band"
    assert c.kernels and all(math.isfinite(k.delta_us) for k in c.kernels) and "Infinity" not in text


def test_the_verdict_counts_the_gpu_work_where_the_host_ran_ahead(tmp_path):
    """Pageable 8 MiB copies (the host waits for each: ~2 ms a step) against
    pinned ones (the host runs ahead: its ProfilerStep windows are its ~25 µs
    of enqueueing, the GPU takes ~1.2 ms a step). The verdict compares the
    pinned side's time per step counting the GPU work, not the enqueueing
    (which would read -98 %), and says so; the mean ProfilerStep stays in the
    table beside it."""
    from test_replay import copy_loop

    for pinned in (False, True):
        d = tmp_path / ("pinned" if pinned else "pageable")
        d.mkdir()
        # 8 steps: 6 analyzed, enough instances for the statistical verdict (compare_stats.MIN_INSTANCES)
        copy_loop(pinned=pinned, steps=8).write(d / "rank-0.json")
    base, new = analyze(tmp_path / "pageable"), analyze(tmp_path / "pinned")
    paced = new.ranks[0].replay.gpu_paced_step_us
    assert paced > 10 * new.ranks[0].steps.mean_us and base.ranks[0].replay.gpu_paced_step_us == 0
    c = compare(base, new)
    mean_base = base.aggregate.mean_step_us
    assert (c.base_step_us, c.new_step_us, c.base_paced_ranks, c.new_paced_ranks) == (mean_base, paced, 0, 1)
    assert c.step_time_change_pct == pytest.approx(100 * (paced - mean_base) / mean_base)
    assert -60 < c.step_time_change_pct < -30 and c.verdict == "improved"  # the enqueueing alone: -98 %
    names = [m.name for m in c.overall]
    assert names[:2] == ["time per step, GPU work counted", "mean step time"]
    from hta_report.render import render_comparison
    from hta_report.render.terminal import comparison_summary
    summary = comparison_summary(c, [])
    assert summary.startswith("improved: time per step counting the GPU work where the host ran ahead of it "
                              "(new: 1 of 1 rank;")
    back = compare(new, base)  # the other way round: slower, the base side's rank named
    assert back.verdict == "regressed" and (back.base_paced_ranks, back.new_paced_ranks) == (1, 0)
    assert "(base: 1 of 1 rank;" in comparison_summary(back, [])
    for fmt in ("md", "html"):
        assert "faster: time per step counting the GPU work where the host ran ahead of it" in render_comparison(c, fmt)
