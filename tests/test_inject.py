"""bench/inject.py puts a cause into a real trace the way the profiler would
have recorded it: the result must be physically possible, or the diagnosis
benchmark scores the injector (issue 29).

The first version handed inserted calls fresh correlation ids above every
other: in launch order they came last although they ran mid-step, so a GPU
stream's work seemed to run out of order and every injected rank was refused
by the clock check ("its clock jumps back 130.75 ms on GPU 3 stream 7"): the
real-derived tier then scored no finding at all on those cases.
"""
from __future__ import annotations

import sys

import pytest

from conftest import REPO, SHARED_TRACES
from hta_report.api import analyze

sys.path.insert(0, str(REPO / "bench"))
import inject  # noqa: E402

CONTROL = SHARED_TRACES / "trace_diff" / "control"


def _injected(tmp_path, cause: str):
    if not CONTROL.is_dir():
        pytest.skip("hta/trace_diff/control not available (../shared is absent)")
    src = next(CONTROL.glob("*.json*"))
    doc = inject.inject(inject.read(src), cause, 0.4)
    return doc, analyze(inject.write(doc, tmp_path / "rank-3.json.gz"))


@pytest.mark.parametrize("cause, rule", [("pageable", "pageable-memcpy"), ("item", "sync-in-step")])
def test_an_injected_cause_is_physically_possible_and_found(tmp_path, cause, rule):
    doc, r = _injected(tmp_path, cause)
    rank = r.ranks[0]
    assert rank.integrity.clock_jumps == 0 and not rank.integrity.idle_unreliable
    # CUPTI numbers calls as they are made: correlation ids grow with the calls' start on each thread
    calls = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"
                    and (e.get("args") or {}).get("correlation", 0) > 0), key=lambda e: e["ts"])
    by_thread = {}
    for e in calls:
        by_thread.setdefault(e["tid"], []).append(e["args"]["correlation"])
    assert all(ids == sorted(ids) for ids in by_thread.values())
    assert r.findings and r.findings[0].id == rule
