"""A trace file holding several ranks (a merge tool's output: TraceLens's
TraceFuse remaps each rank's process ids into one file) is read as its ranks;
one process launching onto several GPUs (DataParallel) stays one rank."""
import gzip
import json

from hta_report.api import analyze
from kineto import FP32_GEMM, Sim, TraceBuilder


def _write_doc(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _steps(b: TraceBuilder, sim: Sim, steps: int, body) -> None:
    for s in range(1, steps + 1):
        start = sim.t
        body(sim)
        sim.idle(20.0)
        b.step(s, start, sim.t - start)


def _rank_doc(rank: int, slow: float, pid_host: int, pid_gpu: int) -> list:
    """A DDP-like step of one rank, its processes renumbered as a merge tool does."""
    b = TraceBuilder(rank=None)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for _ in range(20):
            s.op("aten::linear", [(FP32_GEMM, 40.0 + slow)], host_us=10.0)
        s.synchronize()
    _steps(b, sim, 6, body)
    doc = b.document()
    out = []
    for e in doc["traceEvents"]:
        e = dict(e)
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") == "f":
            e["pid"] = pid_gpu
        elif e.get("pid") is not None:
            e["pid"] = pid_host
        e.setdefault("args", {})
        e["args"] = dict(e["args"], rank=rank)
        out.append(e)
    return out


def test_a_file_holding_several_ranks_is_read_as_its_ranks(tmp_path, monkeypatch):
    """Two ranks merged into one file (each host process launching onto its
    own GPU, process ids remapped as TraceFuse does): two ranks, the warning
    names the file, and the slower rank's steps are its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    events = _rank_doc(0, 0.0, 3194582, 2) + _rank_doc(1, 60.0, 103194583, 100000003)
    path = _write_doc(tmp_path / "run" / "merged_all_events.json.gz",
                      {"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "computeMinor": 0}],
                       "traceEvents": events})
    result = analyze(path.parent)
    assert [r.rank for r in result.ranks] == [0, 1]
    assert any("merged_all_events.json.gz holds 2 ranks" in w for w in result.inventory.warnings)
    steps = {r.rank: r.steps.mean_us for r in result.ranks}
    assert steps[1] > steps[0] * 1.5  # rank 1's kernels are 2.5 times as long: its own GPU, not a mix


def test_one_process_on_two_gpus_stays_one_rank(tmp_path, monkeypatch):
    """DataParallel: one host process launching onto two GPUs is one rank."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    b = TraceBuilder(rank=None)
    sim = Sim(b)

    def body(s: Sim) -> None:
        for i in range(10):
            s.launch(FP32_GEMM, 50.0, stream=7)
        s.synchronize()
    _steps(b, sim, 5, body)
    doc = b.document()
    for i, e in enumerate(k for k in doc["traceEvents"] if k.get("cat") == "kernel"):
        if i % 2:
            e["pid"] = 1
    path = _write_doc(tmp_path / "dp" / "trace.json.gz", doc)
    assert len(analyze(path.parent).ranks) == 1
