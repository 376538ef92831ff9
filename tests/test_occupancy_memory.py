"""SM occupancy (C14), memory (C20, C27) and the step breakdown: metrics,
rules and report, with exact ground truth from built traces, plus the shared
GPU traces and a CPU trace recorded with plain torch.profiler."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import shared
from hta_report.api import analyze
from hta_report.load import memory_events
from hta_report.load.memory_events import read_memory_events
from hta_report.render import render
from kineto import ELEMENTWISE, TC_GEMM, TraceBuilder, simple_gpu_trace

STEP = 1000.0
GPU_MEM = 85_000_000_000  # the builder's deviceProperties totalGlobalMem


def occupancy_trace(small_blocks: float = 0.25, sm: bool = True, memory=None) -> TraceBuilder:
    """4 steps of 1,000 µs: a 500 µs GEMM (4 blocks/SM, 50 %) and a 300 µs
    elementwise kernel (``small_blocks`` blocks/SM, 10 %) in each; ``memory``:
    (allocated, reserved) peaks reached in step 3 on cuda:0."""
    b = TraceBuilder(rank=0)
    for i in range(4):
        t = i * STEP
        b.step(i + 1, t, STEP)
        b.kernel(TC_GEMM, t + 10, 500, launch_ts=t + 2, sm=(4.0, 50) if sm else None)
        b.kernel(ELEMENTWISE, t + 600, 300, launch_ts=t + 520, sm=(small_blocks, 10) if sm else None)
        if memory is not None:
            alloc, resv = memory
            frac = 1.0 if i == 2 else 0.5
            b.memory(t + 5, int(alloc * frac), int(resv * frac))
            b.memory(t + 950, int(alloc * frac) // 4, int(resv * frac))
    return b


def run(tmp_path, b: TraceBuilder, name: str = "rank-0.json"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    b.write(tmp_path / name)
    return analyze(tmp_path, include_last_step=True)


def check(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def finding(result, rule_id):
    return next(f for f in result.findings if f.id == rule_id)


# ------------------------------------------------------------------ occupancy


def test_occupancy_figures_are_duration_weighted(tmp_path):
    o = run(tmp_path, occupancy_trace()).ranks[0].occupancy
    # analyzed steps 2-4, per step: 500 µs at 4 blocks/SM (50 %), 300 µs at 0.25 (10 %)
    assert o.kernels_with_data == 6
    assert o.kernel_us_per_step == pytest.approx(800)
    # the TensorBoard profiler's definition: of the whole 1,000 µs step, its 200 µs without a kernel included
    assert o.sm_efficiency_pct == pytest.approx(100 * (500 * 1 + 300 * 0.25) / 1000)  # 57.5
    assert o.achieved_occupancy_pct == pytest.approx((500 * 50 + 300 * 10) / 800)  # 35
    assert o.small_grid_us_per_step == pytest.approx(300)
    assert o.small_grid_pct == pytest.approx(37.5)
    assert o.idle_sm_us_per_step == pytest.approx(300 * 0.75)
    (k,) = o.top_small
    assert (k.name, k.count, k.total_us, k.blocks_per_sm, k.occupancy_pct) == (ELEMENTWISE, 3, 900, 0.25, 10)
    assert k.idle_sm_us == pytest.approx(675)


def test_low_sm_occupancy_fires_with_the_idle_sm_time(tmp_path):
    r = run(tmp_path, occupancy_trace())
    f = finding(r, "low-sm-occupancy")
    assert f.rule == "C14" and f.ranks == [0]
    assert f.gain_ms_per_step == pytest.approx(0.225)  # 300 µs × (1 − 0.25) of a 1,000 µs step
    assert f.gain_pct == pytest.approx(22.5)
    assert "0.25 blocks/SM" in " ".join(f.evidence)


def test_low_sm_occupancy_fine_when_kernels_nearly_fill_the_gpu(tmp_path):
    r = run(tmp_path, occupancy_trace(small_blocks=0.9))  # 300 × 0.1 = 30 µs = 3 % < 5 %
    c = check(r, "low-sm-occupancy")
    assert c.status == "fine" and "3.0 % of the step's SM time idle" in c.detail


def test_low_sm_occupancy_not_checked_without_occupancy_args(tmp_path):
    r = run(tmp_path, occupancy_trace(sm=False))
    c = check(r, "low-sm-occupancy")
    assert c.status == "not checked" and "blocks per SM" in c.detail and "AMD" in c.detail


def test_both_loaders_read_the_occupancy_args(tmp_path, monkeypatch):
    fast = run(tmp_path / "fast", occupancy_trace()).ranks[0].occupancy
    monkeypatch.setenv("HTA_REPORT_LOADER", "hta")
    slow = run(tmp_path / "hta", occupancy_trace()).ranks[0].occupancy
    assert slow == fast and fast.kernels_with_data == 6


# ------------------------------------------------------------------ memory


def test_memory_events_read_whole_across_block_boundaries(tmp_path, monkeypatch):
    b = TraceBuilder(rank=0)
    b.step(1, 0, STEP)
    for i in range(200):
        b.memory(i, allocated=1000 + i, reserved=4096)
    b.memory(500, allocated=7, reserved=8, device_type=0, device_id=-1)
    doc = b.document()
    # a writer that puts args before name, and an op whose name merely mentions [memory]
    doc["traceEvents"].append({"args": {"Total Allocated": 5, "Total Reserved": 6, "Device Type": 1, "Device Id": 0},
                               "ph": "i", "name": "[memory]", "ts": 1_000_600.0, "pid": 1, "tid": 1})
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "[memory]", "ts": 1_000_700.0, "dur": 1,
                               "pid": 1, "tid": 1, "args": {}})
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc, indent=2).encode()))
    monkeypatch.setattr(memory_events, "_BLOCK", 97)  # every event cut by a block boundary
    m = read_memory_events(path)
    assert len(m) == 202 and m.skipped == 1
    assert m.allocated[:200].tolist() == [1000 + i for i in range(200)]
    assert m.allocated[200:].tolist() == [7, 5] and m.device_type[200:].tolist() == [0, 1]
    assert m.ts[0] == 1_000_000.0


def test_memory_peaks_per_device_with_capacity(tmp_path):
    r = run(tmp_path, occupancy_trace(memory=(10 * 2 ** 30, 12 * 2 ** 30)))
    m = r.ranks[0].memory
    assert m.recorded and m.device == "cuda:0" and m.capacity_bytes == GPU_MEM
    assert (m.peak_allocated_bytes, m.peak_reserved_bytes) == (10 * 2 ** 30, 12 * 2 ** 30)
    assert m.peak_reserved_pct == pytest.approx(100 * 12 * 2 ** 30 / GPU_MEM)
    (d,) = m.devices
    assert d.events == 8 and len(d.timeline) == 8 and max(p.reserved_bytes for p in d.timeline) == 12 * 2 ** 30
    # the timeline is on the aligned timeline (the first event of the directory at 0); steps marked
    assert d.timeline[0].ts_us == pytest.approx(5) and m.step_starts_us == pytest.approx([0, 1000, 2000, 3000])


def test_memory_under_used_fires_with_small_kernels_and_gives_the_headroom(tmp_path):
    r = run(tmp_path, occupancy_trace(memory=(10 * 2 ** 30, 12 * 2 ** 30)))
    f = finding(r, "memory-under-used")
    assert f.rule == "C27" and f.gain_ms_per_step == 0  # the time at stake is C14's
    headroom = 0.9 * GPU_MEM / (12 * 2 ** 30)  # 5.9
    assert f"at least {headroom:.1f}×" in f.title
    assert check(r, "memory-near-capacity").status == "fine"


def test_memory_under_used_is_fine_when_kernels_fill_the_gpu(tmp_path):
    r = run(tmp_path, occupancy_trace(small_blocks=0.9, memory=(10 * 2 ** 30, 12 * 2 ** 30)))
    c = check(r, "memory-under-used")
    assert c.status == "fine" and "low-sm-occupancy did not fire" in c.detail


def test_memory_near_capacity_fires_over_90_pct(tmp_path):
    r = run(tmp_path, occupancy_trace(small_blocks=0.9, memory=(70_000_000_000, 80_000_000_000)))
    f = finding(r, "memory-near-capacity")
    assert f.rule == "C20" and f.gain_ms_per_step == 0
    assert "94 %" in f.title  # 80 GB of 85 GB
    assert check(r, "memory-under-used").status == "fine"


def test_memory_rules_not_checked_without_events_or_capacity(tmp_path):
    r = run(tmp_path / "none", occupancy_trace())
    for rule_id in ("memory-near-capacity", "memory-under-used"):
        c = check(r, rule_id)
        assert c.status == "not checked" and "profile_memory=True" in c.detail
    b = TraceBuilder(rank=0, gpu_name=None)
    b.step(1, 0, STEP)
    b.cpu_op("aten::mm", 10, 100)
    b.memory(20, 2048, 0, device_type=0, device_id=-1)
    r = run(tmp_path / "cpu", b)
    assert r.ranks[0].memory.peak_allocated_bytes == 2048 and r.ranks[0].memory.device == "cpu"
    c = check(r, "memory-near-capacity")
    assert c.status == "not checked" and "no device memory capacity for cpu" in c.detail


# ------------------------------------------------------------------ step breakdown


def test_step_breakdown_follows_tensorboards_priorities(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, STEP)
    b.cpu_op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 50, cat="user_annotation")
    b.cpu_op("aten::mm", 60, 140)
    b.kernel(TC_GEMM, 100, 300, launch_ts=90)  # runtime [90, 95] inside aten::mm
    b.memcpy("HtoD", "Pinned", 350, 150, 1 << 20, launch_ts=340)  # runtime inside the kernel
    b.memset(600, 50, 1024, launch_ts=590)
    (s,) = run(tmp_path, b).ranks[0].step_breakdown
    assert (s.number, s.duration_us, s.warmup) == (1, 1000, False)
    assert (s.kernel_us, s.memcpy_us, s.memset_us, s.runtime_us, s.dataloader_us, s.cpu_exec_us) == \
        pytest.approx((300, 100, 50, 10, 50, 35))
    assert s.other_us == pytest.approx(1000 - 300 - 100 - 50 - 10 - 50 - 35)


def test_report_shows_the_new_sections_and_charts(tmp_path):
    r = run(tmp_path, occupancy_trace(memory=(10 * 2 ** 30, 12 * 2 ** 30)))
    page = render(r, "html")
    assert "<h3>SM occupancy</h3>" in page and "57.5 %" in page and "35.0 %" in page
    assert "Chart: rank 0, one stacked bar per step" in page
    assert "Chart: rank 0, allocated and reserved memory on cuda:0" in page
    assert "<h3>Memory</h3>" in page and "12.00 GiB" in page and "79.16 GiB" in page
    md = render(r, "md")
    assert "### SM occupancy and memory" in md and "| 0 | 57.5 % | 35.0 % | 37.5 %" in md
    data = json.loads(r.to_json())["ranks"][0]
    assert data["memory"]["peak_allocated_bytes"] == 10 * 2 ** 30
    assert data["occupancy"]["sm_efficiency_pct"] == pytest.approx(57.5)
    assert len(data["step_breakdown"]) == 4


def test_report_says_how_to_record_memory(tmp_path):
    page = render(run(tmp_path, occupancy_trace()), "html")
    assert "No [memory] events in this trace: profile with torch.profiler.profile(profile_memory=True)" in page


# ------------------------------------------------------------------ real traces


def test_shared_gpu_trace_has_occupancy_and_a_step_breakdown():
    result = analyze(shared("trace_diff/control"))
    (r,) = result.ranks
    o = r.occupancy
    assert o.kernels_with_data > 1000 and 0 < o.sm_efficiency_pct < 100 and 0 < o.achieved_occupancy_pct < 100
    assert o.top_small and all(k.blocks_per_sm < 1 for k in o.top_small)
    assert not any(k.name.startswith("nccl") for k in o.top_small)  # communication kernels left out
    assert check(result, "low-sm-occupancy").status in ("fired", "fine")
    assert len(r.step_breakdown) == r.steps.count
    for s in r.step_breakdown:
        parts = s.kernel_us + s.memcpy_us + s.memset_us + s.runtime_us + s.dataloader_us + s.cpu_exec_us + s.other_us
        assert parts == pytest.approx(s.duration_us)
    assert "Chart: rank 3, one stacked bar per step" in render(result, "html")


def test_amd_trace_says_why_occupancy_is_not_checked():
    result = analyze(shared("amd_trace"))
    c = check(result, "low-sm-occupancy")
    assert c.status == "not checked" and "AMD" in c.detail


@pytest.fixture(scope="module")
def plain_memory_trace(tmp_path_factory):
    """A CPU training loop recorded with plain torch.profiler(profile_memory=True)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    out = tmp_path_factory.mktemp("plain_memory")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=schedule(wait=0, warmup=1, active=4),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(5):
            loss = model(torch.randn(32, 64)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return out


def test_plain_profiler_memory_events_are_read(plain_memory_trace):
    (path,) = plain_memory_trace.glob("*.json")
    raw = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    result = analyze(plain_memory_trace)
    m = result.ranks[0].memory
    assert m.recorded and m.device == "cpu" and m.devices[0].events == len(raw) > 0
    assert m.peak_allocated_bytes == max(max(e["args"]["Total Allocated"] for e in raw), 0) > 0
    assert check(result, "memory-near-capacity").status == "not checked"


def test_collect_profile_memory_gives_the_memory_section(tmp_path):
    """``collect --workload cnn --profile-memory`` then ``analyze`` (default
    schedule: 5 analyzed steps): peak allocated > 0 in the JSON, a memory chart."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from hta_report.cli import cli

    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["collect", "--workload", "cnn", "--profile-memory", "--width", "4", "-q",
                                    "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["analyze", str(out), "-o", str(tmp_path / "r.html"), "--json",
                                    str(tmp_path / "r.json"), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rank = json.loads((tmp_path / "r.json").read_text())["ranks"][0]
    assert rank["steps_used"] == 5
    assert rank["memory"]["recorded"] and rank["memory"]["peak_allocated_bytes"] > 0
    assert "Chart: rank 0, allocated and reserved memory on cpu" in (tmp_path / "r.html").read_text()


# ---------------------------------------------------------------- the [memory] pass skipped after a parse


def _memory_trace(path, memory_at=()):
    """A small GPU trace, with ``[memory]`` events at the times ``memory_at`` (µs)."""
    b = simple_gpu_trace()
    for k, ts in enumerate(memory_at):
        b.memory(ts, allocated=1024 * (k + 1), reserved=4096)
    return b.write(path)


@pytest.mark.parametrize("block", [7, 64, 301, 4096])
def test_a_parse_that_saw_memory_events_leaves_the_pass_to_read_them(tmp_path, monkeypatch, block):
    """Small blocks put ``"[memory]"`` across a block's end at some size: the
    parser must still see it, and the pass then reads every event."""
    from hta_report.load import fastparse, memory_events

    monkeypatch.setattr(memory_events, "_ABSENT", set())
    monkeypatch.setattr(fastparse, "BLOCK_BYTES", block)
    path = _memory_trace(tmp_path / "m.json", memory_at=(150.0, 1150.0, 2150.0))
    fastparse.parse_trace_file(str(path), fallback=False)
    assert memory_events._ABSENT == set()
    assert len(memory_events.read_memory_events(str(path))) == 3


@pytest.mark.parametrize("name", ["m.json", "m.json.gz"])
def test_a_parse_without_memory_events_skips_the_pass_until_the_file_changes(tmp_path, monkeypatch, name):
    from hta_report.load import fastparse, memory_events

    monkeypatch.setattr(memory_events, "_ABSENT", set())
    path = _memory_trace(tmp_path / name)
    fastparse.parse_trace_file(str(path), fallback=False)
    assert len(memory_events._ABSENT) == 1

    def no_reading(*args, **kwargs):
        raise AssertionError("the file was read again")

    with monkeypatch.context() as m:
        m.setattr(memory_events, "open_text_stream", no_reading)
        assert len(memory_events.read_memory_events(str(path))) == 0
    # the same path rewritten with memory events (another size): read again
    _memory_trace(path, memory_at=(150.0,))
    assert len(memory_events.read_memory_events(str(path))) == 1


def test_analyze_reads_memory_events_after_the_fast_parse(tmp_path):
    """End to end, one file and two (each parsed and analyzed in a worker):
    memory events are found after the parser's check."""
    d = tmp_path / "t"
    d.mkdir()
    for rank in (0, 1):
        b = simple_gpu_trace(rank=rank)
        b.memory(150.0, allocated=2048, reserved=4096)
        b.write(d / f"rank{rank}.json")
    result = analyze(d)
    assert [r.memory.recorded for r in result.ranks] == [True, True]
    one = tmp_path / "one"
    one.mkdir()
    (d / "rank0.json").rename(one / "rank0.json")
    assert analyze(one).ranks[0].memory.recorded
