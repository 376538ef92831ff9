"""Regression tests of issue 18: what a hostile or unlucky user did to hta-report.

Each test is built from the repro of one item of the issue (numbered as
there): payloads in traces, file names and saved results, gates that failed
open, outputs that overwrote inputs, file modes, huge values, malformed
ranks, and a rank where one of HTA's analyses fails. The collector's items
(fork, os.chdir...) are in tests/test_collect_scripts.py.
"""
from __future__ import annotations

import json
import dataclasses
import os
import stat
from pathlib import Path

import pytest

import markup
from conftest import shared
from hta_report.api import analyze, load_result
from hta_report.compare import compare
from hta_report.errors import InputError
from hta_report.render import render, render_comparison
from kineto import TraceBuilder, simple_gpu_trace

EVIL_IMG = "<img src=https://evil.example/x.png>"


def _trace_dir(tmp_path: Path, name: str, builder: TraceBuilder, file: str = "rank-0.json") -> Path:
    d = tmp_path / name
    d.mkdir()
    builder.write(d / file)
    return d


# --- item 2: markdown injection ----------------------------------------------------------------------


def _optimizer_trace(marker: str, kernel: str = "void gemm_kernel<float, 128>(float*)") -> TraceBuilder:
    b = TraceBuilder(rank=0)
    for i in range(4):
        t0 = i * 1000.0
        b.step(i + 1, t0, 1000)
        b.cpu_op(f"Optimizer.step#{marker}.step", t0 + 600, 200, cat="user_annotation")
        b.kernel(kernel, t0 + 100, 300)
        b.kernel("multi_tensor_apply_kernel", t0 + 650, 100, launch_ts=t0 + 610)
    return b


def test_analyze_markdown_optimizer_marker_is_inert(tmp_path):
    """Repro: an ``Optimizer.step#Fused<img src=…>`` annotation gave a remote
    image in the checks table; @mentions, URLs and ESC bytes passed through."""
    d = _trace_dir(tmp_path, "t", _optimizer_trace(f"Fused{EVIL_IMG} @octocat http://evil.example \x1b[2J"))
    result = analyze(d)
    assert any(EVIL_IMG in c.detail for c in result.checks)  # it reaches the model raw
    benign = analyze(_trace_dir(tmp_path, "b", _optimizer_trace("Fused")))
    assert markup.markdown_problems(render(result, "md"), render(benign, "md")) == []


def test_compare_markdown_is_inert(tmp_path):
    """Repro: a kernel name or run label with a backtick broke out of its code
    span; finding titles were not escaped."""
    evil_kernel = f"k` {EVIL_IMG} [x](https://evil.example) `"
    base = analyze(_trace_dir(tmp_path, "base", simple_gpu_trace(kernel_name=evil_kernel, rank=0)))
    new = analyze(_trace_dir(tmp_path, "new", simple_gpu_trace(kernel_name="void gemm_kernel<float, 128>(float*)",
                                                               rank=0, steps=4)))
    new.findings[0].title = f"title ** {EVIL_IMG} @octocat #1 `x"
    c = compare(base, new, base_label=f"run` {EVIL_IMG} `", new_label="@octocat/team")
    md = render_comparison(c, "md")
    benign_new = analyze(tmp_path / "new")
    plain_base = analyze(_trace_dir(tmp_path, "plain", simple_gpu_trace(kernel_name="k", rank=0)))
    benign = render_comparison(compare(plain_base, benign_new, base_label="run", new_label="x"), "md")
    assert markup.markdown_problems(md, benign) == []
    assert f"k` {EVIL_IMG}" in markup.render_gfm(md).replace("&lt;", "<").replace("&gt;", ">")  # shown, as code


# --- item 7: terminal escapes in file names ---------------------------------------------------------


def test_unreadable_file_name_cannot_drive_the_terminal(tmp_path, run_cli):
    """Repro: a file name with OSC/CSI sequences retitled and cleared the terminal
    on the ``unreadable:`` line."""
    simple_gpu_trace(rank=0).write(tmp_path / "rank-0.json")
    (tmp_path / "rank-1\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e.json").write_text("{")
    code, out, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html")
    assert code == 1
    assert markup.terminal_problems(err, lines=2) == []
    assert markup.terminal_problems(out, lines=out.count("\n") + 1 - out.endswith("\n")) == []
    assert "rank-1\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e.json" in err


# --- items 3, 8, 9: results read from JSON are checked; gates fail closed ---------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A result saved by ``analyze --json`` (GPU trace, 3 steps) as a dict, and a directory to write variants to."""
    d = tmp_path_factory.mktemp("saved")
    simple_gpu_trace(rank=0).write(d / "t.json")
    analyze_dir = d
    result = analyze(analyze_dir)
    return json.loads(result.to_json()), d


def _variant(saved, name, edit, raw=None):
    data, d = saved
    doc = json.loads(json.dumps(data))
    edit(doc)
    path = d / name
    path.write_text(raw(json.dumps(doc)) if raw else json.dumps(doc))
    return path


def _set(path, value):
    def edit(doc):
        *parents, last = path
        target = doc
        for p in parents:
            target = target[p]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return edit


@pytest.mark.parametrize("name, edit, needle", [
    # item 3: these passed every --fail-on with exit 0
    ("nan.json", _set(["aggregate", "idle_pct"], float("nan")), "aggregate.idle_pct: NaN, expected a finite number"),
    ("inf.json", _set(["aggregate", "busy_pct"], float("inf")), "aggregate.busy_pct: infinity, expected a finite"),
    ("noagg.json", _set(["aggregate"], KeyError), "aggregate: missing"),
    ("nofield.json", _set(["aggregate", "idle_pct"], KeyError), "aggregate.idle_pct: missing"),
    ("critical.json", _set(["findings", 0, "severity"], "critical"),
     "findings[0].severity: 'critical' (a string), expected one of high, low, medium"),
    ("share.json", _set(["aggregate", "idle_pct"], 250.0), "aggregate.idle_pct: 250.0, expected a share within 0"),
    ("status.json", _set(["checks", 0, "status"], "ok"), "checks[0].status: 'ok' (a string), expected one of"),
    # item 8: wrong types gave "unexpected error: TypeError" without the file name
    ("strpct.json", _set(["aggregate", "idle_pct"], "40"), "aggregate.idle_pct: '40' (a string), expected a number"),
    ("strrank.json", _set(["ranks", 0, "rank"], "0 <img src=x>"), "ranks[0].rank: '0 <img src=x>' (a string), expected an integer"),
    ("boolcount.json", _set(["ranks", 0, "kernel_count"], True), "ranks[0].kernel_count: true (a boolean), expected an integer"),
    ("listranks.json", _set(["ranks"], {"0": {}}), "ranks: an object, expected a list"),
    ("negcount.json", _set(["aggregate", "ranks"], -1), "aggregate.ranks: -1, expected a count"),
    ("dupe.json", lambda doc: doc["ranks"].append(doc["ranks"][0]), "ranks[1].rank: rank 0 appears twice"),
    # item 9: schema_version "1" said "has 1, reads 1"
    ("schema.json", _set(["schema_version"], "1"), "schema_version is '1' (a string); this hta-report reads 1, 2"),
])
def test_invalid_saved_result_is_a_one_line_error_naming_the_file(saved, tmp_path, run_cli, name, edit, needle):
    bad = _variant(saved, name, edit)
    good = _variant(saved, "good.json", lambda doc: None)
    code, out, err = run_cli("compare", good, bad, "-o", tmp_path / "c.md", "--fail-on", "idle_pct>30",
                             "--fail-on", "severity>=high", "--fail-on", "step_time_regression>5")
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith(f"hta-report: error: {bad}: not a valid hta-report result: ")
    assert needle in err
    assert not (tmp_path / "c.md").exists()
    with pytest.raises(InputError, match="not a valid hta-report result"):
        load_result(bad)


def test_nan_token_in_saved_result(saved, tmp_path, run_cli):
    """Python's json writes and reads NaN and Infinity: a result edited to hold them is refused."""
    bad = _variant(saved, "token.json", lambda doc: None,
                   raw=lambda text: text.replace('"idle_pct": 40.0', '"idle_pct": NaN', 1))
    assert '"idle_pct": NaN' in bad.read_text()
    code, _, err = run_cli("compare", bad, bad, "-o", tmp_path / "c.md")
    assert code == 1 and "ranks[0].temporal.idle_pct: NaN, expected a finite number" in err


def test_a_comparison_is_not_a_result(saved, tmp_path, run_cli):
    good = _variant(saved, "good.json", lambda doc: None)
    code, _, err = run_cli("compare", good, good, "-o", tmp_path / "c.json")
    assert code == 0, err
    code, _, err = run_cli("compare", tmp_path / "c.json", good, "-o", tmp_path / "d.json")
    assert code == 1 and "a comparison, not a result" in err


@pytest.mark.parametrize("expr", ["idle_pct>nan", "idle_pct<NaN", "busy_pct>inf", "step_time_ms<-inf"])
def test_gate_against_nan_or_inf_is_a_usage_error(saved, tmp_path, run_cli, expr):
    """Repro: ``--fail-on 'idle_pct>nan'`` was accepted and could never trip."""
    good = _variant(saved, "good.json", lambda doc: None)
    code, _, err = run_cli("compare", good, good, "-o", tmp_path / "c.md", "--fail-on", expr)
    assert code == 1 and ("is not a number" in err or "expected METRIC OP VALUE" in err)
    assert not (tmp_path / "c.md").exists()


def test_gate_on_a_metric_the_traces_do_not_measure_fails(tmp_path, run_cli):
    """A GPU gate on traces without GPU activity used to compare against a 0
    that was never measured, and pass; it now fails and says why."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for i in range(4):
        b.step(i + 1, i * 1000.0, 1000)
        b.cpu_op("aten::mm", i * 1000.0 + 100, 500)
    b.write(tmp_path / "cpu.json")
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.md", "--fail-on", "idle_pct>30",
                           "--fail-on", "step_time_ms>100")
    assert code == 2, err
    assert "gate tripped: idle_pct>30 (idle_pct not measured: no rank has GPU activity; the gate fails)" in err
    assert "step_time_ms>100" not in err  # measured (1 ms), does not trip
    assert (tmp_path / "r.md").exists()


def test_gate_regression_between_runs_that_cannot_be_compared_fails(saved, tmp_path, run_cli):
    nosteps = _variant(saved, "nosteps.json", _set(["aggregate", "mean_step_us"], 0.0))
    good = _variant(saved, "good.json", lambda doc: None)
    code, _, err = run_cli("compare", good, nosteps, "-o", tmp_path / "c.md", "--fail-on", "step_time_regression>5")
    assert code == 2, err
    assert "step_time_regression not measured: the runs cannot be compared" in err


# --- item 12: result-cache entries are checked like results -----------------------------------------


@pytest.mark.parametrize("edit", [
    lambda r: r["aggregate"].update(idle_pct=float("nan")),
    lambda r: r["aggregate"].update(idle_pct="40"),
    lambda r: r["findings"][0].update(severity="critical"),
    lambda r: r.pop("ranks"),
])
def test_hand_edited_cache_entry_is_not_served(tmp_path, run_cli, edit):
    simple_gpu_trace(rank=0).write(tmp_path / "t.json")
    cache = tmp_path / "cache"
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "a.json", "--cache-dir", cache, "-q")
    assert code == 0, err
    [entry] = (cache / "result-v1").glob("*[0-9a-f].json")
    stored = json.loads(entry.read_text())
    doc = json.loads(stored["result"])
    edit(doc)
    stored["result"] = json.dumps(doc)
    entry.write_text(json.dumps(stored))
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "b.json", "--cache-dir", cache, "-q", "-v",
                           "--fail-on", "severity>=high")
    assert code == 2, err  # the real result: a high finding, from the traces, not from the edited entry
    assert "from cache)" in err and "analysis result (from cache)" not in err
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert [g["expression"] for g in b.pop("gates")] == ["severity>=high"] and a.pop("gates") == []
    for d in (a, b):
        d["inventory"].pop("analyzed_at")
    assert a == b
    assert json.loads(json.loads(entry.read_text())["result"])["aggregate"]["idle_pct"] == a["aggregate"]["idle_pct"]


# --- item 6: outputs that are inputs, or each other ----------------------------------------------------


@pytest.mark.parametrize("target", ["-o", "--json"])
def test_output_naming_an_input_trace_is_refused(tmp_path, run_cli, target):
    """Repro: ``-o`` or ``--json`` naming one of the input traces overwrote its only copy."""
    trace = simple_gpu_trace(rank=0).write(tmp_path / "rank0.json")
    (tmp_path / "rank1.json").write_text("{")  # an unreadable trace is an input too
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for victim in (trace, tmp_path / "rank1.json", tmp_path / "sub" / ".." / "rank0.json"):
        args = ["-o", tmp_path / "r.html", "--json", victim] if target == "--json" else ["-o", victim]
        code, _, err = run_cli("analyze", tmp_path, *args)
        assert code == 1 and "is an input of this run" in err, err
        assert err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_output_through_a_link_to_an_input_is_refused(tmp_path, run_cli):
    trace = simple_gpu_trace(rank=0).write(tmp_path / "rank0.json")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(trace, out / "report.json")
    os.link(trace, out / "hard.json")
    for victim in (out / "report.json", out / "hard.json"):
        code, _, err = run_cli("analyze", tmp_path, "-o", victim)
        assert code == 1 and "is an input of this run" in err
    assert json.loads(trace.read_text())["traceEvents"]


def test_two_outputs_in_one_file_are_refused(tmp_path, run_cli):
    """Repro: ``-o x.md --json x.md`` silently kept only the JSON."""
    (tmp_path / "t").mkdir()
    simple_gpu_trace(rank=0).write(tmp_path / "t" / "rank0.json")
    code, _, err = run_cli("analyze", tmp_path / "t", "-o", tmp_path / "x.md", "--json", tmp_path / "x.md")
    assert code == 1 and "given as two outputs" in err
    assert not (tmp_path / "x.md").exists()


def test_compare_output_naming_a_side_is_refused(saved, tmp_path, run_cli):
    good = _variant(saved, "good.json", lambda doc: None)
    before = good.read_bytes()
    code, _, err = run_cli("compare", good, good, "-o", good)
    assert code == 1 and "is an input of this run" in err
    assert good.read_bytes() == before


def test_write_reports_refuses_an_input(tmp_path):
    """The Python API refuses it too (the result names its traces)."""
    from hta_report.api import write_reports

    trace = simple_gpu_trace(rank=0).write(tmp_path / "rank0.json")
    result = analyze(tmp_path)
    with pytest.raises(InputError, match="is an input of this run"):
        write_reports(result, [(trace, "json")])


# --- item 10: report file modes -----------------------------------------------------------------------


@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)

    def set_(mask):
        os.umask(mask)
    yield set_
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_new_reports_honour_the_umask(tmp_path, run_cli, umask):
    """Repro: reports were written 0644 whatever the umask."""
    simple_gpu_trace(rank=0).write(tmp_path / "rank0.json")
    for mask, mode in ((0o077, 0o600), (0o002, 0o664), (0o027, 0o640)):
        umask(mask)
        out = tmp_path / f"r{mask:o}.md"
        code, _, err = run_cli("analyze", tmp_path, "-o", out, "--json", tmp_path / f"r{mask:o}.json", "-q")
        assert code == 0, err
        assert _mode(out) == mode and _mode(tmp_path / f"r{mask:o}.json") == mode


def test_replaced_reports_keep_their_mode(tmp_path, run_cli, umask):
    simple_gpu_trace(rank=0).write(tmp_path / "rank0.json")
    umask(0o022)
    for mode in (0o600, 0o640, 0o664):
        out = tmp_path / "r.md"
        out.write_text("yesterday's report")
        out.chmod(mode | stat.S_ISUID)
        code, _, err = run_cli("analyze", tmp_path, "-o", out, "-q")
        assert code == 0, err
        assert _mode(out) == mode and out.read_text() != "yesterday's report"


# --- item 11: absurd memcpy byte counts ------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1e308, 2.0 ** 63, 10 ** 30, -5])
def test_absurd_memcpy_bytes_do_not_drop_the_rank(tmp_path, nbytes):
    """Repro: a memcpy ``bytes`` of 1e308 dropped the whole rank (OverflowError
    in the memcpy summary); such counts are now unknown (0)."""
    b = simple_gpu_trace(rank=0)
    b.memcpy("HtoD", "Pageable", 100, 10, 4096)
    doc = b.document()
    copy = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"][-1]
    copy["args"]["bytes"] = 0
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "rank0.json").write_text(json.dumps(doc))
    copy["args"]["bytes"] = nbytes
    (tmp_path / "absurd").mkdir()
    (tmp_path / "absurd" / "rank0.json").write_text(json.dumps(doc))
    result, unknown = analyze(tmp_path / "absurd"), analyze(tmp_path / "zero")
    assert not result.inventory.unreadable and len(result.ranks) == 1
    assert result.ranks[0].memcpy == unknown.ranks[0].memcpy
    assert result.ranks[0].memcpy.directions[0].count >= 1


# --- item 13: malformed distributedInfo.rank ---------------------------------------------------------


def _with_rank(tmp_path, file, rank):
    doc = simple_gpu_trace(rank=0).document()
    doc["distributedInfo"]["rank"] = rank
    (tmp_path / file).write_text(json.dumps(doc))


def test_rank_as_a_string_of_digits_is_accepted(tmp_path):
    _with_rank(tmp_path, "trace.json", "3")
    result = analyze(tmp_path)
    [info] = result.inventory.files
    assert (info.rank, info.rank_source) == (3, "distributedInfo")
    assert [r.rank for r in result.ranks] == [3]
    assert not any("rank" in w for w in result.inventory.warnings)


@pytest.mark.parametrize("rank", [-1, 1.5, True, "three", "-2", [1], 2 ** 40])
def test_malformed_rank_falls_back_with_a_warning(tmp_path, rank):
    """Repro: such a rank silently fell back to the file name."""
    _with_rank(tmp_path, "rank-5.json", rank)
    _with_rank(tmp_path, "other.json", rank)
    result = analyze(tmp_path)
    by_file = {Path(f.path).name: (f.rank, f.rank_source) for f in result.inventory.files}
    assert by_file == {"rank-5.json": (5, "file name"), "other.json": (0, "sequential")}
    warnings = " | ".join(result.inventory.warnings)
    assert "rank-5.json: distributedInfo.rank " in warnings and "is not a rank; analyzed as rank 5" in warnings
    assert "other.json: distributedInfo.rank " in warnings and "analyzed as rank 0" in warnings


# --- item 14: a rank where one of HTA's analyses fails -------------------------------------------------


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    """Repro: two real traces of different jobs in one directory (an AMD MI250
    rank 0 and an A100 rank 3): HTA's temporal breakdown asserts on rank 3
    (``compute_time <= kernel_time``), and rank 3 used to disappear from the report."""
    control = shared("trace_diff/control") / "control.json.gz"
    amd = next(shared("amd_trace").glob("*.json.gz"))
    d = tmp_path_factory.mktemp("two_jobs")
    (d / "both").mkdir()
    (d / "alone").mkdir()
    for src in (control, amd):
        os.symlink(src, d / "both" / src.name)
    os.symlink(control, d / "alone" / control.name)
    cache = d / "cache"  # each trace parsed once for the whole module
    return d, analyze(d / "both", cache=cache), analyze(d / "alone", cache=cache)


def test_rank_with_a_failing_hta_analysis_keeps_its_other_sections(two_jobs):
    d, both, alone = two_jobs
    assert [r.rank for r in both.ranks] == [0, 3] and not both.inventory.unreadable
    r3, a3 = both.ranks[1], alone.ranks[0]
    # HTA's temporal breakdown asserts on rank 3: a bug in HTA, named as one, and replaced by ours
    assert r3.failures == [] and not a3.failures
    (replaced,) = r3.replaced
    assert replaced.step == "temporal breakdown (HTA)"
    assert replaced.reason.startswith("AssertionError: a consistency check failed at hta/analyzers/breakdown_analysis.py:")
    assert "a bug in HTA, not a fault of the trace" in replaced.reason
    # ours has HTA's definitions: on this whole-µs trace it gives HTA's own figures for the rank alone
    assert r3.temporal.source == "hta-report" and a3.temporal.source == "HTA"
    for part in ("compute_pct", "non_compute_pct", "idle_pct"):
        assert getattr(r3.temporal, part) == pytest.approx(getattr(a3.temporal, part), abs=0.01), part
    # every other section of rank 3 is the same as when analyzed alone
    for section in ("idle", "kernel_types", "cpu", "memcpy", "launch", "optimizer"):
        assert getattr(r3, section) == getattr(a3, section), section
    # the steps and kernels too; step starts and the kernels' longest calls are on each run's own
    # timeline (its earliest event is 0): the same events, at the same time in the file
    assert dataclasses.replace(r3.steps, steps=[]) == dataclasses.replace(a3.steps, steps=[])
    assert [(s.number, s.duration_us, s.warmup) for s in r3.steps.steps] == \
        [(s.number, s.duration_us, s.warmup) for s in a3.steps.steps]
    assert [s.start_us + r3.time_origin_us for s in r3.steps.steps] == \
        pytest.approx([s.start_us + a3.time_origin_us for s in a3.steps.steps])
    assert len(r3.top_kernels) == len(a3.top_kernels) > 0
    for k3, ka in zip(r3.top_kernels, a3.top_kernels):
        assert dataclasses.replace(k3, longest=None) == dataclasses.replace(ka, longest=None)
        if k3.longest is not None or ka.longest is not None:
            assert k3.longest.correlation == ka.longest.correlation
            assert k3.longest.ts_us + r3.time_origin_us == pytest.approx(ka.longest.ts_us + a3.time_origin_us)
    assert r3.busy_pct == pytest.approx(a3.busy_pct)
    assert both.aggregate.gpu_ranks == 2
    # the rank is complete: every rule checks it
    assert not any("not checked (" in c.detail for c in both.checks)


def test_report_says_which_analysis_was_replaced(two_jobs, tmp_path, run_cli):
    d, both, _ = two_jobs
    code, out, err = run_cli("analyze", d / "both", "-o", tmp_path / "r.html", "--json", tmp_path / "r.json",
                             "--cache-dir", d / "cache")
    assert code == 0, err  # nothing is missing: the report is complete
    assert "hta-report: replaced: " in err and "control.json.gz: temporal breakdown (HTA): AssertionError" in err
    assert "computed by hta-report from the exact times" in err
    html = (tmp_path / "r.html").read_text()
    assert "rank 3: HTA&#39;s temporal breakdown failed (AssertionError: a consistency check failed at " in html
    assert "The temporal breakdown as HTA defines it, computed by hta-report from the exact times" in html
    assert "not computed" not in html
    saved = load_result(tmp_path / "r.json")  # the replacement survives the JSON round trip (and its check)
    assert saved.ranks[1].replaced == both.ranks[1].replaced and saved.ranks[1].temporal == both.ranks[1].temporal


def test_a_failed_section_leaves_the_rank_out_of_the_rules_that_need_it_only(two_jobs, monkeypatch):
    from hta_report.analysis import rank as rank_module
    from hta_report.api import analyze
    from hta_report.render import view

    d, _, alone = two_jobs

    def broken(c):
        raise KeyError("blocks per SM")

    steps = [(n, broken if n == "SM occupancy" else fn) for n, fn in rank_module.GPU_STEPS]
    monkeypatch.setattr(rank_module, "GPU_STEPS", steps)
    result = analyze(d / "alone")
    (failure,) = result.ranks[0].failures
    assert failure.step == "SM occupancy" and "a bug in hta-report" in failure.reason
    by_id = {c.id: c for c in result.checks}
    assert by_id["low-sm-occupancy"].status == "not checked"
    assert by_id["low-sm-occupancy"].detail == "rank 3 not checked (SM occupancy failed)"
    # every other rule still checks rank 3, with the same verdicts as when nothing failed
    alone_checks = {c.id: c for c in alone.checks}
    for c in result.checks:
        if c.id not in ("low-sm-occupancy", "memory-under-used"):
            assert (c.status, c.detail) == (alone_checks[c.id].status, alone_checks[c.id].detail), c.id
    assert "looks healthy" not in view.no_findings(result)
