import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hta_report.api import analyze
from hta_report.intervals import intersect, overlap, overlap_each, subtract, total, union
from hta_report.model import SCHEMA_VERSION, AnalysisResult
from kineto import simple_gpu_trace


def test_result_round_trips_through_json(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    text = result.to_json()
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION
    assert AnalysisResult.from_json(text) == result


def test_wrong_schema_version_is_refused():
    with pytest.raises(ValueError, match="schema_version"):
        AnalysisResult.from_dict({"schema_version": 999})
    with pytest.raises(ValueError, match="not an hta-report result"):
        AnalysisResult.from_dict({"traceEvents": []})


intervals_st = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=10)


def _cells(iv):
    return {t for s, d in iv for t in range(s, s + d)}


@settings(max_examples=300, deadline=None)
@given(intervals_st, intervals_st)
def test_interval_arithmetic_matches_brute_force(a, b):
    ua = union([s for s, _ in a], [s + d for s, d in a])
    ub = union([s for s, _ in b], [s + d for s, d in b])
    assert total(ua) == len(_cells(a))
    assert overlap(ua, ub) == pytest.approx(len(_cells(a) & _cells(b)))
    windows = np.array([[s, s + d] for s, d in a], dtype=float).reshape(-1, 2)
    expected = [len(set(range(s, s + d)) & _cells(b)) for s, d in a]
    assert list(overlap_each(windows, ub)) == pytest.approx(expected)


@settings(max_examples=300, deadline=None)
@given(intervals_st, intervals_st)
def test_intersect_and_subtract_match_brute_force(a, b):
    ua = union([s for s, _ in a], [s + d for s, d in a])
    ub = union([s for s, _ in b], [s + d for s, d in b])
    inter, diff = intersect(ua, ub), subtract(ua, ub)
    for u in (inter, diff):  # results are unions: sorted, disjoint, non-empty rows
        assert all(u[:, 0] < u[:, 1]) and all(u[1:, 0] >= u[:-1, 1])
    assert _cells_of(inter) == _cells(a) & _cells(b)
    assert _cells_of(diff) == _cells(a) - _cells(b)


def _cells_of(u):
    return {t for s, e in u for t in range(int(s), int(e))}


def test_memoized_rank_arrays_are_computed_once_and_handed_out_as_copies():
    import numpy as np
    import pandas as pd

    from hta_report.analysis.events import RankEvents, memoized

    calls = []

    @memoized
    def windows(ev):
        calls.append(ev.rank)
        return np.array([[1.0, 0.0, 10.0]])

    ev = RankEvents(rank=3, df=pd.DataFrame())
    first = windows(ev)
    first[0, 2] = -1.0  # a caller that changes its copy
    assert windows(ev)[0, 2] == 10.0 and calls == [3]
    other = RankEvents(rank=4, df=pd.DataFrame())  # other events: computed for them
    windows(other)
    assert calls == [3, 4]


@pytest.mark.parametrize("categorical", [True, False])
def test_name_tests_and_strings_equal_the_per_row_strings(categorical):
    """The name tests our analyses make on decoded names (a categorical's own
    ``.str.startswith(..., na=False)``, ``isin``, ``eq``) and
    :func:`events.name_strings` give what ``astype(str)`` row by row gives,
    rows without a name included, on a categorical of decoded names and on
    plain strings."""
    import numpy as np
    import pandas as pd

    from hta_report.analysis import events

    symbols = np.array(["ProfilerStep#3", "aten::mm", "Memcpy HtoD (Pageable -> Device)", "nan", "enumerate(DataLoader)#x"],
                       dtype=object)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, len(symbols), 200)
    names = pd.Series(events.decoded(ids, symbols))
    names[rng.integers(0, 200, 20)] = np.nan  # rows without a name
    if not categorical:
        names = names.astype(object)
    assert isinstance(names.dtype, pd.CategoricalDtype) == categorical
    plain = names.astype(str)
    tests = [(lambda s: s.str.startswith("ProfilerStep#", na=False), lambda s: s.str.startswith("ProfilerStep#")),
             (lambda s: s.str.startswith(("enumerate(DataLoader)", "Memcpy"), na=False),
              lambda s: s.str.startswith(("enumerate(DataLoader)", "Memcpy"))),
             (lambda s: s.isin(["aten::mm", "nan"]), lambda s: s.isin(["aten::mm", "nan"])),
             (lambda s: s.eq("nan"), lambda s: s.eq("nan"))]
    for ours, per_row in tests:
        got = ours(names).to_numpy()
        assert got.dtype == bool and got.tolist() == per_row(plain).tolist()
    assert events.name_strings(names).tolist() == plain.tolist()
    assert events.name_strings(names.iloc[:0]).tolist() == []
    # name_test / name_search: the predicate once per distinct name, the row-by-row answer
    for pattern in (r"^aten::", r"HtoD|Loader", r"nan", r"^$"):
        want = plain.str.contains(pattern, regex=True).tolist()
        assert events.name_search(names, pattern).tolist() == want
        assert events.name_search(names, re.compile(pattern)).tolist() == want
    calls = []
    got = events.name_test(names, lambda s: calls.append(s) or len(s) > 8)
    assert got.dtype == bool and got.tolist() == [isinstance(s, str) and len(s) > 8 for s in plain]
    assert len(calls) == len(set(calls)) <= len(symbols)  # once per distinct name, never for a row without one
    assert events.name_test(names.iloc[:0], bool).tolist() == []
