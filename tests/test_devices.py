"""What a trace's header says about its devices (``hta_report.load.devices``),
and the local engine's use of it: HTA's analyses are imported before the
workers are forked unless every header lists no device, with the same result
either way."""
import gzip
import json
from pathlib import Path

import pytest

from conftest import REPO, result_json, shared
from hta_report.engines import local
from hta_report.load.devices import all_declare_no_gpu, declares_no_gpu
from kineto import training_trace


def _cpu_doc_text(devices_text: str = '[\n  ]', events_first: bool = False) -> str:
    events = '"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]'
    devices = f'"deviceProperties": {devices_text}'
    body = f"{events}, {devices}" if events_first else f"{devices}, {events}"
    return '{"schemaVersion": 1, ' + body + "}"


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("devices", ["[]", "[ ]", "[\n  ]", "[\t\r\n]"])
def test_an_empty_device_list_before_the_events_declares_no_gpu(tmp_path, name, devices):
    data = _cpu_doc_text(devices).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert declares_no_gpu(path)
    assert all_declare_no_gpu([path, path])


@pytest.mark.parametrize("text", [
    _cpu_doc_text('[{"id": 0, "name": "NVIDIA H100"}]'),  # a device
    _cpu_doc_text(events_first=True),  # the key after the events: not in the header
    '{"schemaVersion": 1, "traceEvents": []}',  # no key at all (older traces, other writers)
    # the words inside a string, then a device
    '{"note": "\\"deviceProperties\\": []", "deviceProperties": [{"id": 0}], "traceEvents": []}',
])
def test_anything_else_may_have_a_gpu(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_text(text)
    assert not declares_no_gpu(path)


def test_unreadable_and_remote_files_may_have_a_gpu(tmp_path):
    assert not declares_no_gpu(tmp_path / "missing.json")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not deflate data" * 10)
    assert not declares_no_gpu(bad)
    assert not declares_no_gpu("s3://bucket/rank-0.json.gz")  # not opened: a URL
    assert not all_declare_no_gpu([])
    good = tmp_path / "cpu.json"
    good.write_text(_cpu_doc_text())
    assert not all_declare_no_gpu([good, bad])


def test_traces_recorded_by_collect_and_gpu_traces(tmp_path):
    assert declares_no_gpu(next((REPO / "sample_traces" / "cpu_healthy").glob("*.json.gz")))
    gpu = training_trace(rank=0).write(tmp_path / "gpu.json.gz")  # lists its device
    assert not declares_no_gpu(gpu)


def test_shared_traces():
    assert all_declare_no_gpu(sorted(shared("cpu_only").glob("*.json.gz")))
    assert not declares_no_gpu(next(shared("alexnet").glob("*.json.gz")))
    assert not all_declare_no_gpu(sorted(shared("two_ranks").glob("*.json.gz")))


def _gpu_ranks(tmp_path, devices_empty: bool) -> Path:
    d = tmp_path / ("empty" if devices_empty else "listed")
    d.mkdir()
    for rank in (0, 1):
        doc = training_trace(rank=rank, world_size=2, steps=4, allreduce_us=200.0).document()
        if devices_empty:
            doc["deviceProperties"] = []
        (d / f"rank{rank}.json").write_text(json.dumps(doc))
    return d


def test_the_workers_analyze_gpu_events_whatever_the_header_says(tmp_path, monkeypatch):
    preloaded = []
    real = local._preload
    monkeypatch.setattr(local, "_preload", lambda with_hta=True: (preloaded.append(with_hta), real(with_hta)))
    listed, empty = _gpu_ranks(tmp_path, False), _gpu_ranks(tmp_path, True)
    in_one = result_json(empty, 1, monkeypatch)
    assert preloaded == []  # one worker: no fork, nothing preloaded
    assert result_json(empty, 2, monkeypatch) == in_one
    assert preloaded == [False]  # the headers list no device: HTA left to the workers
    assert result_json(listed, 2, monkeypatch)["ranks"][0]["temporal"] == in_one["ranks"][0]["temporal"]
    assert preloaded == [False, True]
    assert in_one["ranks"][0]["has_gpu"] and in_one["ranks"][0]["temporal"]["compute_pct"] > 0
