"""What keeps a large rank's memory down without changing a figure: the heap
trims between steps (:func:`hta_report.workers.trim_heap`) and the small
integer types of the parser's pieces (:func:`hta_report.load.fastparse._small_ints`).
"""
import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from hta_report import workers
from hta_report.analysis import rank
from hta_report.load import fastparse, load_traces
from hta_report.model import SectionFailure

EDGES = [-(1 << 63), -(1 << 31) - 1, -(1 << 31), -32769, -32768, -129, -128, -1, 0, 1, 127, 128, 32767, 32768,
         (1 << 31) - 1, 1 << 31, (1 << 63) - 1]


@pytest.mark.parametrize("lo,hi", [(a, b) for a in EDGES for b in EDGES if a <= b])
def test_small_ints_hold_the_values_in_the_smallest_signed_type(lo, hi):
    values = np.array([lo, hi, lo, hi], dtype=np.int64)
    small = fastparse._small_ints(values)
    assert small.tolist() == values.tolist()
    expected = pd.to_numeric(pd.Series(values), downcast="integer").dtype
    assert small.dtype == expected


def test_pieces_of_small_ints_give_the_frames_downcast_of_int64():
    rng = np.random.default_rng(7)
    for _ in range(200):
        pieces = [rng.integers(-(1 << rng.integers(1, 40)), 1 << rng.integers(1, 40), size=rng.integers(0, 20))
                  for _ in range(rng.integers(1, 6))]
        whole = np.concatenate(pieces).astype(np.int64)
        joined = np.concatenate([fastparse._small_ints(p.astype(np.int64)) for p in pieces])
        theirs = pd.to_numeric(pd.Series(whole), downcast="integer")
        ours = pd.to_numeric(pd.Series(joined), downcast="integer")
        pd.testing.assert_series_equal(theirs, ours, check_exact=True)


def test_run_steps_trims_after_every_step_failed_or_not(monkeypatch):
    calls = []
    monkeypatch.setattr(workers, "trim_heap", lambda: calls.append(1))

    def fails(ctx):
        raise ValueError("boom")

    failures = []
    rank.run_steps({}, [("a", lambda c: None), ("b", fails), ("c", lambda c: None)], "f", failures, trim=True)
    assert len(calls) == 3 and [f.step for f in failures] == ["b"]
    assert isinstance(failures[0], SectionFailure)
    rank.run_steps({}, [("a", lambda c: None)], "f", [])
    assert len(calls) == 3  # no trim unless asked


@pytest.mark.parametrize("threshold,trims", [(0, True), (10 ** 9, False)])
def test_a_rank_trims_from_trim_min_events(monkeypatch, threshold, trims):
    loaded = load_traces(REPO / "sample_traces" / "cpu_healthy")
    info = loaded.files[0]
    monkeypatch.setattr(workers, "TRIM_MIN_EVENTS", threshold)
    calls = []
    monkeypatch.setattr(workers, "trim_heap", lambda: calls.append(1))
    part = rank.own_part(loaded, info)
    assert part.result.steps
    assert bool(calls) is trims
    if trims:
        assert len(calls) >= len(rank.OWN_STEPS)


def test_a_large_file_trims_while_its_frame_is_built(monkeypatch):
    from hta_report.load.parse import report_parser_config

    path = next((REPO / "sample_traces" / "cpu_healthy").glob("*.trace.json.gz"))
    plain = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)[1]
    monkeypatch.setattr(workers, "TRIM_MIN_EVENTS", 0)
    calls = []
    monkeypatch.setattr(workers, "trim_heap", lambda: calls.append(1))
    trimmed = fastparse.parse_trace_file(path, report_parser_config(), fallback=False)[1]
    assert len(calls) > len(plain.columns) // 2
    pd.testing.assert_frame_equal(plain, trimmed, check_exact=True)
