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
