"""Hostile and absurd values (issue 31, items 8, 11, 12 and 13): a trace or a
configuration must not make the analysis hang, crash, or report "fine" on
what it did not really check.

* 8: the ``[memory]`` pass stays linear on a document holding a long list
  of ``"[memory]"`` strings, and reads real events as before;
* 11: ``[memory]`` values no device has (totals beyond 2**50 bytes or the
  device's capacity, NaN, a device id of 2**63 + 5) are unknown, not measured;
* 12: NaN, infinite, negative or above-100 % thresholds are refused with one
  line naming the file and the key (exit 1), as are gates beyond a float;
* 13: a clock that jumps back is detected, said in the report, and the rank
  is not called healthy.
"""
from __future__ import annotations

import gzip
import json
import time

import numpy as np
import pytest

from hta_report.api import analyze
from hta_report.errors import EXIT_ERROR, InputError
from hta_report.gates import parse_gate
from hta_report.load import memory_events
from hta_report.load.memory_events import MAX_MEMORY_BYTES, read_memory_events
from hta_report.render import render, view
from hta_report.rules import AdviceConfig, load_config
from kineto import ELEMENTWISE, TraceBuilder, simple_gpu_trace

GPU_MEM = 85_000_000_000  # the builder's deviceProperties totalGlobalMem
JUMP_US = 10_000_000.0  # 10 s


def _check(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def _write(path, doc) -> None:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def _reference(doc) -> list:
    """What a whole-document read finds: every well-formed ``[memory]`` event of ``traceEvents``."""
    return [(e["ts"], e["args"]["Total Allocated"]) for e in doc["traceEvents"] if e.get("name") == "[memory]"
            and e.get("ph") == "i"]


# ------------------------------------------------------------------ item 8: the [memory] pass is linear


def _memory_trace(n_events: int = 3) -> TraceBuilder:
    b = simple_gpu_trace(steps=2)
    for i in range(n_events):
        b.memory(10 + i, allocated=1000 + i, reserved=4096)
    return b


@pytest.mark.parametrize("layout", ["after", "before", "bare", "nested"])
def test_a_long_list_of_memory_strings_is_read_in_linear_work(tmp_path, layout):
    """200,000 ``"[memory]"`` strings in a list: each used to walk back over
    the whole list (minutes for a few MB); now the strings between two ``{``
    are counted at once, and every ``{`` is decoded at most once."""
    n = 200_000
    doc = _memory_trace().document()
    junk = ["[memory]"] * n
    if layout == "after":
        doc["junk"] = junk
    elif layout == "before":
        doc = {"junk": junk, **doc}
    elif layout == "bare":
        doc = junk
    else:  # inside an event's args, after the real events (an object longer than any event: not decoded whole)
        doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1_000_900.0, "dur": 1,
                                   "pid": 1, "tid": 1, "args": {"list": junk}})
    path = tmp_path / "t.json.gz"
    _write(path, doc)
    text = json.dumps(doc)
    t0 = time.perf_counter()
    m = read_memory_events(path)
    elapsed = time.perf_counter() - t0
    assert m.decoded <= text.count("{") + 10  # structural: at most one decode per '{' (the old pass: one per hit)
    assert m.decoded <= 100
    assert m.skipped == n
    if layout != "bare":
        assert m.allocated.tolist() == [1000, 1001, 1002]
    assert elapsed < 10, elapsed  # generous: 0.01 s here; the old pass took about 20 s


def test_strings_between_objects_cost_one_decode_each(tmp_path):
    """``[{}, "[memory]", {}, "[memory]", ...]``: every hit has new ``{`` before
    it; the work is still one decode per ``{``, not per hit times the list."""
    n = 50_000
    doc = _memory_trace().document()
    doc["junk"] = [{}, "[memory]"] * n
    path = tmp_path / "t.json"
    _write(path, doc)
    m = read_memory_events(path)
    assert m.skipped == n and len(m) == 3
    assert m.decoded <= json.dumps(doc).count("{") + 10


@pytest.mark.parametrize("block", [97, 4096, 1 << 20])
def test_the_pass_reads_what_a_whole_document_read_finds(tmp_path, monkeypatch, block):
    """The same events as ``json.loads`` of the whole file, across block
    boundaries, with a long list of strings, args (holding an object) before
    name, an op named ``[memory]``, events of about 4 KB, and pretty-printing."""
    rng = np.random.default_rng(block)
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    for i in range(300):
        b.memory(i * 2.5, allocated=int(rng.integers(-10 ** 6, 10 ** 10)), reserved=int(rng.integers(0, 10 ** 10)),
                 device_type=int(rng.choice([0, 1])), device_id=int(rng.choice([-1, 0, 1])))
        if i % 50 == 0:
            b.events.append({"args": {"Total Allocated": 5 + i, "Total Reserved": 6, "Device Type": 1, "Device Id": 0,
                                      "nested": {"a": 1}},
                             "ph": "i", "name": "[memory]", "ts": 1_000_900.0 + i, "pid": 1, "tid": 1})
            b.events.append({"ph": "X", "cat": "cpu_op", "name": "[memory]", "ts": 1_000_950.0, "dur": 1,
                             "pid": 1, "tid": 1, "args": {}})
    for j in range(0, 120, 7):  # events of about 4 KB: a literal (true) where a first decoding window may end
        b.events.append({"ph": "i", "name": "[memory]", "ts": 1_000_990.0 + j, "pid": 1, "tid": 1,
                         "args": {"pad": "x" * (3950 + j), "flag": True, "Total Allocated": 77 + j}})
    doc = b.document()
    doc["junk"] = ["[memory]"] * 5000
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    monkeypatch.setattr(memory_events, "_BLOCK", block)
    m = read_memory_events(path)
    want = _reference(doc)
    assert list(zip(m.ts.tolist(), m.allocated.tolist())) == [(float(t), float(a)) for t, a in want]
    assert m.skipped == 6 + 5000 and m.out_of_range == 0


# ------------------------------------------------------------------ item 11: absurd [memory] values


def _event(**args):
    base = {"Total Allocated": 512, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0}
    base.update(args)
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": 1_000_000.0, "args": base}


@pytest.mark.parametrize("args", [
    {"Total Allocated": 1.1e21},  # "Memory near capacity: 1388931318491 %"
    {"Total Reserved": 2 ** 51},
    {"Total Allocated": -(2 ** 51)},
    {"Total Allocated": 10 ** 400},  # an integer no float holds: no OverflowError
    {"Device Id": 2 ** 63 + 5},  # ended the run with an OverflowError
    {"Device Id": -2},
    {"Device Id": 128},
    {"Device Id": 0.5},
    {"Device Type": 10 ** 30},
    {"Total Allocated": float("nan")},
    {"Total Reserved": float("inf")},
])
def test_memory_values_no_device_has_are_unknown(tmp_path, args):
    doc = {"traceEvents": [_event(), _event(**args), _event(**{"Total Allocated": 1024})]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's JSON writes them
    m = read_memory_events(path)
    assert (len(m), m.out_of_range, m.skipped) == (2, 1, 0)
    assert m.allocated.tolist() == [512, 1024] and m.device_id.tolist() == [0, 0]


def test_values_as_before_where_they_were_believed(tmp_path):
    """Absent or non-numeric reserved/type/id read as before (0, -1, -1), and a
    total at the bound is believed."""
    ev = _event(**{"Total Allocated": MAX_MEMORY_BYTES})
    del ev["args"]["Device Id"], ev["args"]["Device Type"]
    ev["args"]["Total Reserved"] = "x"
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [ev]}))
    m = read_memory_events(path)
    assert (len(m), m.out_of_range) == (1, 0)
    assert (m.allocated[0], m.reserved[0], m.device_type[0], m.device_id[0]) == (MAX_MEMORY_BYTES, 0, -1, -1)


def _gpu_memory_trace(*extra):
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * 1000.0
        b.step(i + 1, t, 1000)
        b.kernel(ELEMENTWISE, t + 20, 900, sm=(4.0, 50))
        b.memory(t + 5, 10 * 2 ** 30, 12 * 2 ** 30)
    for ts, alloc, resv, did in extra:
        b.memory(ts, alloc, resv, device_id=did)
    return b


def test_absurd_totals_are_not_measured_near_capacity(tmp_path):
    """1.1e21 bytes (beyond 2**50) and 200 GB (beyond the 85 GB device, under
    2**50) are not believed: the peak is the believable 12 GiB, and the
    check says how many events it left out."""
    _gpu_memory_trace((2500, 1.1e21, 1.2e21, 0), (2600, 200e9, 200e9, 0)).write(tmp_path / "t.json")
    r = analyze(tmp_path)
    m = r.ranks[0].memory
    assert m.out_of_range == 2 and m.devices[0].events == 4
    assert (m.peak_allocated_bytes, m.peak_reserved_bytes, m.capacity_bytes) == (10 * 2 ** 30, 12 * 2 ** 30, GPU_MEM)
    c = _check(r, "memory-near-capacity")
    assert c.status == "fine" and "2 [memory] events with values no device has" in c.detail
    assert not any(f.id == "memory-near-capacity" for f in r.findings)


def test_a_device_id_of_2_63_plus_5_ends_nothing(tmp_path):
    _gpu_memory_trace((2500, 100, 100, 2 ** 63 + 5)).write(tmp_path / "t.json")
    r = analyze(tmp_path)  # was: OverflowError
    m = r.ranks[0].memory
    assert m.out_of_range == 1 and [d.device for d in m.devices] == ["cuda:0"]
    assert not r.ranks[0].failed("memory")


def test_only_absurd_values_leave_the_memory_rules_not_checked(tmp_path):
    b = simple_gpu_trace(steps=4)
    b.memory(100, 1.1e21, 1.2e21)
    b.memory(200, 100, 100, device_id=2 ** 63 + 5)
    b.write(tmp_path / "t.json")
    r = analyze(tmp_path)
    m = r.ranks[0].memory
    assert m.recorded and not m.devices and m.out_of_range == 2
    for rule_id in ("memory-near-capacity", "memory-under-used"):
        c = _check(r, rule_id)
        assert c.status == "not checked" and "2 [memory] events with values no device has" in c.detail
    shown = view.memory(r.ranks[0])
    assert shown.state == "missing" and "All 2 [memory] events" in shown.reason
    md, page = render(r, "md"), render(r, "html")
    assert "values no device has" in md and "All 2 [memory] events" in page
    assert "1388931318491" not in md + page


# ------------------------------------------------------------------ item 12: NaN and inf thresholds


@pytest.mark.parametrize("value, needle", [
    ("nan", "dataloader_pct must be a finite number, got nan"),
    ("inf", "dataloader_pct must be a finite number, got inf"),
    ("-inf", "dataloader_pct must be a finite number"),
    ("1e400", "dataloader_pct must be a finite number"),
    ("150", "dataloader_pct is a percentage: it must be at most 100, got 150"),
    ("-1", "dataloader_pct must be >= 0"),
])
def test_non_finite_or_out_of_range_thresholds_are_refused(tmp_path, value, needle):
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.hta-report]\ndataloader_pct = {value}\n')
    with pytest.raises(InputError, match=needle) as info:
        load_config(cwd=tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "pyproject.toml") in msg and "[tool.hta-report]" in msg and "\n" not in msg


THRESHOLDS = [f for f in AdviceConfig.__dataclass_fields__ if f not in ("disable", "library_modules")]


@pytest.mark.parametrize("key", THRESHOLDS)
def test_no_threshold_takes_nan(key):
    with pytest.raises(InputError, match=f"{key} must be"):
        AdviceConfig.from_mapping({key: float("nan")}, "c.toml")
    with pytest.raises(InputError, match=f"{key} must be"):
        AdviceConfig.from_mapping({key: float("inf")}, "c.toml")


def test_an_integer_beyond_a_float_is_refused_not_raised():
    with pytest.raises(InputError, match="step_outlier_sigma must be a finite number"):
        AdviceConfig.from_mapping({"step_outlier_sigma": 10 ** 400}, "c.toml")


def test_thresholds_in_range_still_load(tmp_path):
    (tmp_path / "c.toml").write_text("dataloader_pct = 100\nstraggler_pct = 150\nstep_outlier_sigma = 4.5\n")
    cfg = load_config(tmp_path / "c.toml")
    assert (cfg.dataloader_pct, cfg.straggler_pct, cfg.step_outlier_sigma) == (100.0, 150.0, 4.5)


def test_a_nan_threshold_in_pyproject_fails_the_run_instead_of_passing_the_gate(tmp_path, run_cli, monkeypatch):
    """The repro: ``dataloader_pct = nan`` was accepted, the rule said "fine"
    and ``--fail-on severity>=high`` passed. Now: exit 1, one line naming the
    file and the key, no report."""
    traces = tmp_path / "t"
    traces.mkdir()
    simple_gpu_trace(steps=4).write(traces / "a.json")
    (tmp_path / "pyproject.toml").write_text('[tool.hta-report]\ndataloader_pct = nan\n')
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "r.json", "--fail-on", "severity>=high")
    assert code == EXIT_ERROR
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and "pyproject.toml" in lines[0] and "dataloader_pct must be a finite number" in lines[0]
    assert "Traceback" not in err and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("expr", ["idle_pct>nan", "idle_pct<inf", "idle_pct>" + "9" * 400, "idle_pct<-" + "9" * 400])
def test_gates_beyond_a_finite_number_are_refused(expr):
    with pytest.raises(InputError, match="not a number|beyond a finite number") as info:
        parse_gate(expr)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ item 13: a clock that jumps back


def _stepped_trace(jump=None) -> TraceBuilder:
    """6 steps of 1 ms, 4 back-to-back kernels of 235 µs in each (94 % busy);
    ``jump``: ``"gpu"`` puts the kernels of steps 4-6 10 s back (the GPU's
    clock jumps), ``"all"`` every event of steps 4-6 (the process's clock)."""
    b = TraceBuilder(rank=0)
    for i in range(6):
        t = i * 1000.0
        b.step(i + 1, t, 1000)
        for k in range(4):
            ts = t + 20 + k * 240
            b.kernel(ELEMENTWISE, ts - (JUMP_US if jump == "gpu" and i >= 3 else 0), 235, launch_ts=t + 5 + k * 3)
    if jump == "all":
        for e in b.events:
            if e["ts"] >= b.base + 3000:
                e["ts"] -= JUMP_US
    return b


@pytest.mark.parametrize("jump, where", [("gpu", "GPU 0 stream 7"), ("all", "")])
def test_a_clock_that_jumps_back_is_said_and_the_rank_is_not_called_healthy(tmp_path, jump, where):
    _stepped_trace(jump).write(tmp_path / "t.json")
    result = analyze(tmp_path)
    i = result.ranks[0].integrity
    assert i.clock_jumps >= 1 and i.idle_unreliable
    assert i.clock_jump_us == pytest.approx(JUMP_US, rel=0.01)
    assert i.clock_where.startswith(where)
    (note,) = view.integrity_notes(result)
    assert note.startswith("rank 0: the trace's clock jumps back") and "not reliable" in note
    # no rule judges the rank's times: not "fine", not fired
    for rule_id in ("low-gpu-utilization", "gpu-gaps", "host-bound", "trace-window"):
        c = _check(result, rule_id)
        assert c.status == "not checked" and "its clock jumps back" in c.detail, (rule_id, c)
    assert not result.findings
    words = view.no_findings(result)
    assert "looks healthy" not in words and "its clock jumps back" in words
    md = render(result, "md")
    assert "Read the GPU figures with care" in md and "clock jumps back" in md and "looks healthy" not in md


def _moved(back_us: float) -> TraceBuilder:
    """:func:`_stepped_trace` with the second kernel of step 3 (launched at
    2,008 µs, run at 2,260 µs) moved ``back_us`` earlier."""
    b = _stepped_trace()
    (k,) = [e for e in b.events if e["ph"] == "X" and e["cat"] == "kernel" and e["ts"] == b.base + 2260]
    k["ts"] -= back_us
    return b


def test_a_kernel_starting_before_its_launch_is_a_jump_but_clock_skew_is_not(tmp_path):
    (tmp_path / "a").mkdir()
    _moved(5000).write(tmp_path / "a" / "t.json")  # 5 ms before its launch call, and before the kernels before it
    i = analyze(tmp_path / "a").ranks[0].integrity
    assert i.clock_jumps == 2 and i.idle_unreliable
    # 4,748 µs before its launch call began; 4,760 µs before the kernel launched before it (the largest)
    assert i.clock_where == "GPU 0 stream 7 (its operations in launch order)"
    assert i.clock_jump_us == pytest.approx(5000 - 240)

    (tmp_path / "b").mkdir()
    _moved(300).write(tmp_path / "b" / "t.json")  # 0.3 ms: skew or overlap on the stream, not a jump
    i = analyze(tmp_path / "b").ranks[0].integrity
    assert (i.clock_jumps, i.idle_unreliable) == (0, False)


def test_a_healthy_trace_has_no_clock_jump(tmp_path):
    _stepped_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    i = result.ranks[0].integrity
    assert (i.clock_jumps, i.clock_jump_us, i.clock_where, i.idle_unreliable) == (0, 0.0, "", False)
    assert _check(result, "low-gpu-utilization").status == "fine"
