"""The test tiers (docs/TESTING.md): the safety checks (tests/safety.txt)
stay in the quick tier whatever slow.txt says, tests/refresh_slow.py never
lists them, and a Ray test is always slow."""
import ast

import pytest

import refresh_slow
from conftest import HERE, REPO, SAFETY, SLOW, is_safety


def test_every_safety_entry_names_a_test_that_exists():
    assert {"tests/test_types.py", "tests/test_gold.py", "tests/test_formats.py",
            "tests/test_architecture.py::test_layers"} <= SAFETY
    assert any("typed_frozen" in s for s in SAFETY)
    for entry in SAFETY:
        path, _, function = entry.partition("::")
        assert (REPO / path).is_file(), entry
        if function:
            tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
            assert function in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, entry


def test_no_safety_check_is_listed_slow():
    assert [f for f in SLOW if is_safety(f)] == []


def test_the_safety_checks_of_this_run_are_marked_safety_not_slow(request):
    items = [i for i in request.session.items if is_safety(i.nodeid)]
    for item in items:
        assert item.get_closest_marker("safety") and not item.get_closest_marker("slow"), item.nodeid


LOG = """
============================= slowest durations ==============================
40.00s call     tests/test_types.py::test_mypy_reports_no_error
3.00s setup    tests/test_gold.py::test_sample_reports_match_their_gold_files[cpu_healthy-md]
9.00s call     tests/test_inject.py::test_pageable_fixed_twin
2.50s setup    tests/test_x.py::test_first_of_a_module
0.20s call     tests/test_x.py::test_first_of_a_module
0.10s call     tests/test_x.py::test_was_slow_now_fast
0.30s call     tests/test_x.py::test_param[a]
0.40s call     tests/test_x.py::test_param[b]
0.30s setup    tests/test_x.py::test_param[b]
2.40s shared-setup tests/test_x.py::test_first_of_a_module
"""


def test_refresh_never_lists_a_safety_check_and_keeps_what_it_did_not_measure():
    safety = {"tests/test_types.py", "tests/test_gold.py"}
    current = ["tests/test_x.py::test_was_slow_now_fast", "tests/test_y.py::test_not_run_here",
               "tests/test_gold.py::test_sample_reports_match_their_gold_files"]
    assert refresh_slow.refreshed(LOG, current, safety) == [
        "tests/test_inject.py::test_pageable_fixed_twin",  # measured slow
        "tests/test_x.py::test_param",  # its case b: 0.4 + 0.3 s
        "tests/test_y.py::test_not_run_here",  # not measured here: kept
    ]  # test_first_of_a_module: 2.7 s of which 2.4 s is a shared fixture's setup, its own 0.3 s


def test_the_lists_refresh_writes_are_the_ones_conftest_reads():
    assert refresh_slow.SLOW_LIST == HERE / "slow.txt" and refresh_slow.SAFETY_LIST == HERE / "safety.txt"
    assert refresh_slow.listed(refresh_slow.SAFETY_LIST) == SAFETY


class _Item:
    """What conftest's marking reads of a collected test."""

    def __init__(self, nodeid, fixturenames=(), markers=()):
        self.nodeid, self.fixturenames, self.markers = nodeid, list(fixturenames), [pytest.mark.__getattr__(m).mark
                                                                                 for m in markers]

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker):
        self.markers.append(marker.mark)


def test_a_test_that_starts_ray_is_slow_and_a_safety_check_never_is():
    from conftest import pytest_collection_modifyitems

    items = [_Item("tests/test_engines.py::test_ray_engine_x[ray_head0]", fixturenames=["ray_head", "tmp_path"]),
             _Item("tests/test_hostile_urls.py::test_ray_address_y", markers=["ray"]),
             _Item("tests/test_engines.py::test_plain"),
             _Item("tests/test_gold.py::test_sample_reports_match_their_gold_files[cpu_healthy-md]")]
    pytest_collection_modifyitems(None, items)
    assert [bool(i.get_closest_marker("slow")) for i in items] == [True, True, False, False]
    assert items[3].get_closest_marker("safety")
    with pytest.raises(pytest.UsageError, match="safety check"):
        pytest_collection_modifyitems(None, [_Item("tests/test_types.py::test_mypy_reports_no_error",
                                                   markers=["slow"])])
