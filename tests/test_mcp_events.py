"""Evidence events per finding (``Finding.events``): what the idle analysis
records per cause (:func:`hta_report.analysis.evidence.cause_events`), what
a rule cites, and that each cited event is found again in the trace file
with json alone (``explain_finding``'s ``trace_ts_us``)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hta_report.analysis.evidence import cause_events
from hta_report.model import MAX_EVIDENCE_EVENTS, Finding

REPO = Path(__file__).resolve().parents[1]
CONTROL = REPO / ".." / "shared" / "traces" / "hta" / "trace_diff" / "control"


def _frame(rows):
    df = pd.DataFrame(rows, columns=["ts", "dur", "s_name", "stream", "correlation"])
    return df.assign(end=df["ts"] + df["dur"])


def test_a_sync_gap_cites_its_call_and_the_gpu_work_around_it():
    gpu = _frame([(0.0, 100.0, "gemm", 7, 11), (400.0, 50.0, "relu", 7, 12), (900.0, 10.0, "add", 7, 13)])
    busy = gpu[["ts", "end"]].to_numpy(dtype=float)
    sync = _frame([(60.0, 50.0, "cudaStreamSynchronize", -1, 21), (700.0, 30.0, "cudaStreamSynchronize", -1, 22)])
    parts = {"sync": np.array([[100.0, 400.0]]), "launch": np.array([[450.0, 900.0]])}
    out = {c.cause: c.events for c in cause_events(3, gpu, busy, parts, {"sync": sync}, np.array([[0.0, 1000.0]]))}
    assert [(e.role, e.name, e.correlation) for e in out["sync"]] == [
        ("call", "cudaStreamSynchronize", 21), ("before", "gemm", 11), ("after", "relu", 12),
        # the sync that began no gap; no GPU work ran while it waited, so it cites nothing more
        ("call", "cudaStreamSynchronize", 22)]
    assert all(e.rank == 3 for e in out["sync"]) and out["sync"][0].stream == -1 and out["sync"][1].stream == 7
    assert [(e.role, e.name) for e in out["launch"]] == [("before", "relu"), ("after", "add")]
    # "any": every cause's gaps, the largest first (the 450 µs launch gap before the 300 µs sync gap)
    assert [e.name for e in out["any"]] == ["relu", "add", "gemm"]
    # a copy call that began no gap cites the copy it launched (same correlation)
    copy = _frame([(950.0, 20.0, "cudaMemcpyAsync", -1, 13)])
    copies = {c.cause: c.events
              for c in cause_events(3, gpu, busy, {}, {"pageable_copy": copy}, np.array([[0.0, 1000.0]]))}
    assert [(e.role, e.name, e.correlation) for e in copies["pageable_copy"]] == [
        ("call", "cudaMemcpyAsync", 13), ("launched", "add", 13)]


def test_events_are_bounded_and_an_old_result_reads_without_them():
    n = 200
    gpu = _frame([(1000.0 * i, 10.0, f"k{i}", 7, i) for i in range(n)])
    busy = gpu[["ts", "end"]].to_numpy(dtype=float)
    gaps = np.column_stack([1000.0 * np.arange(n - 1) + 10, 1000.0 * np.arange(1, n)])
    calls = _frame([(1000.0 * i + 5, 20.0, "cudaDeviceSynchronize", -1, 10_000 + i) for i in range(n)])
    out = cause_events(0, gpu, busy, {"sync": gaps}, {"sync": calls}, np.array([[0.0, 1000.0 * n]]))
    assert out and all(0 < len(c.events) <= MAX_EVIDENCE_EVENTS for c in out)
    data = json.loads(json.dumps({"id": "x", "title": "t", "severity": "low", "evidence": [], "fix": "", "doc_url": ""}))
    assert Finding(**data).events == []


def _trace_events(folder: Path):
    f = sorted(folder.glob("*.json*"))[0]
    with (gzip.open if f.name.endswith(".gz") else open)(f, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.skipif(not CONTROL.is_dir(), reason="../shared/traces is not here")
def test_explain_finding_cites_events_found_again_in_the_trace(tmp_path):
    pytest.importorskip("mcp")
    from hta_report.mcp_tools import Workspace, explain_finding, list_findings

    ws = Workspace.of([str(CONTROL.parent)], cache=str(tmp_path / "cache"))
    listed = list_findings(ws, "control", limit=50)["findings"]
    sync = next(f for f in listed if f["id"] == "sync-in-step")
    assert 0 < sync["events"] <= MAX_EVIDENCE_EVENTS
    refs = explain_finding(ws, "control", "sync-in-step")["finding"]["events"]
    assert len(refs) == sync["events"]
    assert {r["role"] for r in refs} >= {"call", "before"}
    by_key = {}
    for e in _trace_events(CONTROL):
        if isinstance(e, dict) and e.get("ph") == "X" and "correlation" in (e.get("args") or {}):
            by_key.setdefault((e["args"]["correlation"], e["name"]), []).append(e)
    for r in refs:
        if r["correlation"] <= 0:
            continue  # an annotation has no correlation; its name and time cite it
        found = by_key.get((r["correlation"], r["name"]), [])
        assert any(abs(float(e["ts"]) - r["trace_ts_us"]) <= 1.0 and abs(float(e["dur"]) - r["dur_us"]) <= 1.0
                   for e in found), r
        stream = next(iter(found))["args"].get("stream", -1)
        assert r["stream"] == (stream if r["role"] != "call" else -1)
    # the synchronizing calls the finding names are among its cited calls
    calls = {r["name"] for r in refs if r["role"] == "call"}
    assert calls & {"cudaStreamSynchronize", "cudaMemcpyAsync", "aten::item", "aten::_local_scalar_dense"}
