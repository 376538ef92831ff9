"""bench/record_cuda.py's parts that run without a GPU (issue 30): every case
it would record has a shape, and the unprofiled timing of a plain case on the
CPU. A case without a shape would fail only on a lent GPU, where the minutes
are scarce."""
from __future__ import annotations

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import record_cuda  # noqa: E402


def test_every_case_in_the_order_is_defined_once():
    cases = set(record_cuda.PLAIN_CASES) | set(record_cuda.COLLECT_PAIRS)
    assert sorted(record_cuda.ORDER) == sorted(cases)
    assert not set(record_cuda.PLAIN_CASES) & set(record_cuda.COLLECT_PAIRS)


@pytest.mark.parametrize("case", sorted(record_cuda.PLAIN_CASES))
def test_a_plain_case_times_its_steps_without_the_profiler(case, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "never-written"
    ms = record_cuda.record_side(str(out), case, fix=False, device="cpu", timed_steps=1)
    assert ms > 0.0
    assert not out.exists(), "an unprofiled run wrote a trace"


def test_unprofiled_timings_are_kept_across_runs(tmp_path):
    pytest.importorskip("torch")
    import json
    (tmp_path / "unprofiled.json").write_text(json.dumps({"cuda-graphs": {"before": [2.7], "after": [0.35]}}))
    res = record_cuda.time_unprofiled(str(tmp_path), ["unfused-optimizer"], steps=1, repeats=1, device="cpu")
    on_disk = json.loads((tmp_path / "unprofiled.json").read_text())
    assert on_disk == res
    assert on_disk["cuda-graphs"] == {"before": [2.7], "after": [0.35]}  # the earlier run's case is kept
    assert all(ms > 0 for side in ("before", "after") for ms in on_disk["unfused-optimizer"][side])


def test_one_process_records_both_sides_and_their_unprofiled_steps(tmp_path):
    pytest.importorskip("torch")
    import json
    index = record_cuda.record_in_one_process(str(tmp_path), ["unfused-optimizer"], rounds=2, timed_steps=1,
                                              device="cpu")
    assert index["unfused-optimizer"]["error"] == ""
    assert index["unfused-optimizer"]["recorder"] == "torch.profiler, one process"
    # the layout bench/whatif.py --pairs-dir reads: <case>/<i>-before|after/ with one trace each
    folders = sorted(p.name for p in (tmp_path / "unfused-optimizer").iterdir())
    assert folders == ["0-after", "0-before", "1-after", "1-before"]
    assert all(len(list((tmp_path / "unfused-optimizer" / f).glob("*.json.gz"))) == 1 for f in folders)
    timed = json.loads((tmp_path / "unprofiled.json").read_text())["unfused-optimizer"]
    assert len(timed["before"]) == len(timed["after"]) == 2 and min(timed["before"] + timed["after"]) > 0


def test_one_process_names_a_failing_case_and_goes_on(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    real = record_cuda.build_side

    def failing(case, fix, device="cuda"):
        if case == "cuda-graphs":
            raise RuntimeError("no CUDA device")
        return real(case, fix, device)
    monkeypatch.setattr(record_cuda, "build_side", failing)
    index = record_cuda.record_in_one_process(str(tmp_path), ["cuda-graphs", "unfused-optimizer"], rounds=1,
                                              timed_steps=1, device="cpu")
    assert index["cuda-graphs"]["error"] == "RuntimeError: no CUDA device"
    assert index["unfused-optimizer"]["error"] == ""


def test_only_selects_a_whole_name_alone_and_a_part_of_names_by_substring():
    sel = record_cuda.selected
    assert sel("unfused-optimizer", "unfused-optimizer") and not sel("unfused-optimizer-wide", "unfused-optimizer")
    assert sel("collect-pinned", "pinned") and sel("collect-pinned-workers", "pinned")
    assert sel("cuda-graphs-deep", "item-per-step,deep") and not sel("cuda-graphs", "item-per-step,deep")
    assert all(sel(n, "") for n in record_cuda.ORDER)


def test_one_process_alternates_which_side_a_round_records_first(tmp_path, monkeypatch):
    order = []
    monkeypatch.setattr(record_cuda, "build_side", lambda case, fix, device="cuda": (f"step-{fix}", None))
    monkeypatch.setattr(record_cuda, "profile_steps", lambda out, step, sync, cuda: order.append(("p", step)))
    monkeypatch.setattr(record_cuda, "time_steps", lambda step, sync, steps: order.append(("t", step)) or 1.0)
    index = record_cuda.record_in_one_process(str(tmp_path), ["unfused-optimizer"], rounds=3, timed_steps=1,
                                              device="cpu")
    assert index["unfused-optimizer"]["error"] == ""
    b, a = "step-False", "step-True"
    assert order == [("p", b), ("p", a), ("p", a), ("p", b), ("p", b), ("p", a),
                     ("t", b), ("t", a), ("t", a), ("t", b), ("t", b), ("t", a)]
