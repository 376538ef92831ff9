"""A trace recorded with GPU activity alone (``activities=[ProfilerActivity.CUDA]``,
twelfth field gathering (B): a ViT step on an RTX A4000 read as "97 % idle,
no profiled host activity", fix torch.compile): the report says the host
side was not recorded, and the rules that read the host's ops are not checked."""
from kineto import TraceBuilder
from hta_report.api import analyze
from hta_report.render import markdown, view
from hta_report.rules.base import GPU_SIDE_RULES, REGISTRY

SGEMM = "ampere_sgemm_128x64_tn"


def _bursts(host_ops: bool) -> TraceBuilder:
    """10 bursts 5 ms apart, each a 200 µs pageable copy of 1 MB and 5 fp32
    SGEMMs of 100 µs (GPU busy 700 µs of each 5 ms); ``host_ops``: an
    ``aten::linear`` op on the host around each burst's launches."""
    b = TraceBuilder(rank=0, gpu_name="NVIDIA RTX A4000", compute_major=8)
    for k in range(10):
        t0 = k * 5000
        if host_ops:
            b.cpu_op("aten::linear", t0, 80)
        b.memcpy("HtoD", "Pageable", t0 + 20, 200, 1_000_000, launch_ts=t0 + 10, launch_dur=210)
        for j in range(5):
            b.kernel(SGEMM, t0 + 230 + 100 * j, 100, launch_ts=t0 + 225 + 5 * j, launch_dur=4)
    return b


def _status(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def test_a_gpu_only_recording_says_the_host_side_is_missing(tmp_path):
    _bursts(host_ops=False).write(tmp_path / "t.json")
    result = analyze(tmp_path)
    r = result.ranks[0]
    i = r.integrity
    assert i.host_unrecorded == "60 GPU operations and 60 runtime calls, and no operator or annotation"
    assert not i.idle_unreliable  # the GPU side is whole: its busy and idle time stand
    for rule_id in ("low-gpu-utilization", "gpu-gaps", "host-bound", "sync-in-step", "launch-bound",
                    "dataloader-bound", "blocking-copy"):
        c = _status(result, rule_id)
        assert (c.status, c.detail) == ("not checked", "rank 0 not checked (its host side was not recorded: GPU "
                                                       "activity only)"), rule_id
    # the GPU side's rules still judge it
    for rule_id in ("tensor-cores-unused", "pageable-memcpy", "exposed-memcpy"):
        assert "host side" not in _status(result, rule_id).detail
    # the copies judged on the GPU side (pageable-memcpy) may come first; the window says what is missing
    first = next(f for f in result.findings if f.id == "trace-window")
    assert first.title == ("The trace lost its host side: only GPU activity was recorded; record again with "
                           "ProfilerActivity.CPU")
    assert "ProfilerActivity.CPU" in first.fix
    assert not any("torch.compile" in f.fix for f in result.findings)
    (note,) = [n for n in view.integrity_notes(result) if "host side" in n]
    assert note.startswith("rank 0: the host side was not recorded: the trace holds 60 GPU operations")
    assert "the host side was not recorded" in markdown.render(result, {})


def test_the_same_bursts_with_host_ops_are_judged(tmp_path):
    """One operator per burst: the host side was recorded, and the idle 86 %
    of the window is judged (low-gpu-utilization fires)."""
    _bursts(host_ops=True).write(tmp_path / "t.json")
    result = analyze(tmp_path)
    assert result.ranks[0].integrity.host_unrecorded == ""
    assert _status(result, "low-gpu-utilization").status == "fired"


def test_steps_alone_are_a_recorded_host(tmp_path):
    """The same bursts each in a ``ProfilerStep#N`` (an annotation the CPU
    activity records) and no operator: the host side was recorded."""
    b = _bursts(host_ops=False)
    for k in range(10):
        b.step(k + 1, k * 5000, 5000)
    b.write(tmp_path / "t.json")
    assert analyze(tmp_path).ranks[0].integrity.host_unrecorded == ""


def test_the_gpu_side_rules_are_rules():
    assert set(GPU_SIDE_RULES) <= {r.id for r in REGISTRY}
