"""GPU work written without stream and correlation (ROCm 6.x roctracer builds).

Such a trace's kernels carry only ``External id`` (equal to their launch
call's), on the track pid = GPU index, tid = stream; read as written it has
no GPU work. The trace below copies the shape of a real one (a one-layer
convolution on an AMD GPU: amd-sriram/Frameworks101, docs/FIELD.md, twelfth
gathering): the events and args as written, the times made up.
"""
import json

import pytest

from hta_report.api import analyze
from hta_report.load.compat import link_by_external_id

T0 = 1729005226243590


def _doc(with_streams: bool = False) -> dict:
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "model_inference", "pid": 456, "tid": 456,
         "ts": T0 + 100, "dur": 900, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 456, "tid": 456, "ts": T0 + 110,
         "dur": 400, "args": {"External id": 2, "Sequence number": 0, "Fwd thread id": 0}},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMalloc", "pid": 456, "tid": 456, "ts": T0 + 120,
         "dur": 50, "args": {"External id": 3, "size": 134217728}},
    ]
    kernels = [("igemm_fwd_gtcx3_nhwc_fp32_bx0_ex1_bt256x32x4", 30, 200, 100), ("batched_transpose_32x16_dword", 31, 300, 20),
               ("void at::native::elementwise_kernel<128, 2>(int)", 32, 650, 10)]
    for name, ext, at, dur in kernels:
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 456, "tid": 456,
                   "ts": T0 + at - 60, "dur": 8, "args": {"External id": ext, "stream": "0x0", "Kernel": name}})
        ev.append({"ph": "s", "id": ext, "pid": 456, "tid": 456, "ts": T0 + at - 60, "cat": "ac2g", "name": "ac2g"})
        args = {"External id": ext}
        if with_streams:
            args.update({"device": 2, "stream": 0, "correlation": ext})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 2, "tid": 0, "ts": T0 + at, "dur": dur, "args": args})
        ev.append({"ph": "f", "id": ext, "pid": 2, "tid": 0, "ts": T0 + at, "cat": "ac2g", "name": "ac2g", "bp": "e"})
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipDeviceSynchronize", "pid": 456, "tid": 456,
               "ts": T0 + 700, "dur": 40, "args": {"External id": 33}})
    ev += [{"name": "process_labels", "ph": "M", "ts": T0, "pid": 2, "tid": 0, "args": {"labels": "GPU 2"}},
           {"name": "process_labels", "ph": "M", "ts": T0, "pid": 456, "tid": 0, "args": {"labels": "CPU"}}]
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.mark.parametrize("parser", ["native", "python"])
def test_gpu_work_linked_by_external_id(tmp_path, monkeypatch, parser):
    if parser == "python":
        monkeypatch.setenv("HTA_REPORT_PARSER", "python")
    (tmp_path / "profile.json").write_text(json.dumps(_doc()))
    r = analyze(tmp_path)
    rank = r.ranks[0]
    assert rank.has_gpu
    assert r.inventory.files[0].external_id_links == 3
    assert rank.kernel_count == 3
    # each kernel is linked to its launch call: three launches, each kernel 60 µs after its call
    # starts (52 µs after it ends), and no launch left without its kernel
    assert rank.launch.launches == 3
    assert rank.launch.median_launch_delay_us == pytest.approx(52.0)
    assert rank.integrity.launches == 3 and rank.integrity.launches_without_ops == 0


def test_a_trace_with_streams_is_left_as_it_is(tmp_path):
    (tmp_path / "profile.json").write_text(json.dumps(_doc(with_streams=True)))
    r = analyze(tmp_path)
    assert r.ranks[0].has_gpu and r.inventory.files[0].external_id_links == 0


def test_link_by_external_id_on_a_frame():
    import pandas as pd

    symbols = ["kernel", "cuda_runtime", "cpu_op"]
    df = pd.DataFrame({"cat": [2, 1, 1, 0], "stream": [-1, -1, -1, -1], "correlation": [-1, -1, -1, -1],
                       "external_id": [7, 7, 8, 7], "tid": [1, 1, 1, 3]})
    assert link_by_external_id(df, symbols) == 1
    # the kernel gets its track's stream and its id; its launch (id 7) the same id; the cpu_op and
    # the runtime call with no kernel (id 8) keep none
    assert df["stream"].tolist() == [-1, -1, -1, 3]
    assert df["correlation"].tolist() == [-1, 7, -1, 7]
    # a frame where GPU work has a stream: nothing changes
    df2 = pd.DataFrame({"cat": [0, 1], "stream": [7, -1], "correlation": [-1, -1], "external_id": [5, 5], "tid": [7, 1]})
    assert link_by_external_id(df2, symbols) == 0 and df2["correlation"].tolist() == [-1, -1]
