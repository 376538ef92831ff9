"""The real serving, capture, compiled and AMD traces read as an expert would
(issue 29): every expectation of ``bench/expert_reading.py`` holds.

Run against the code before issue 29, 5 of the 21 held (E2, E5, E12, E14, E21).
"""
from __future__ import annotations

import sys

import pytest

from conftest import REPO, SHARED_ROOT

sys.path.insert(0, str(REPO / "bench"))
import expert_reading  # noqa: E402


@pytest.mark.parametrize("expectation", expert_reading.EXPECTATIONS, ids=lambda e: e.id)
def test_expectation_holds(expectation, monkeypatch):
    monkeypatch.setattr(expert_reading, "SHARED", SHARED_ROOT)
    absent = [r for r in expectation.runs if not (SHARED_ROOT / r).is_dir()]
    if absent:
        pytest.skip(f"{absent[0]} not available (../shared is absent)")
    ok, said = expectation.check()
    assert ok, f"{expectation.id} [{expectation.says}]: the report says {said}"
