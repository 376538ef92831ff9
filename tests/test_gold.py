"""Gold files of every text output: the shipped samples and a comparison of
two of them in every format of ``REPORTERS`` (HTML without its charts), kept in
``tests/gold/`` and compared byte for byte after scrubbing versions, times
and paths (:mod:`goldtest`). A change to a renderer, a rule's words or a
figure shows here as a diff; refresh with::

    HTA_REPORT_UPDATE_GOLD=1 python -m pytest -q tests/test_gold.py
"""
from __future__ import annotations

import dataclasses

import pytest

from goldtest import REPO, check_gold, scrub
from hta_report.render import FORMATS, REPORTERS

SAMPLES = sorted(p.name for p in (REPO / "sample_traces").iterdir() if p.is_dir())
#: What the gold files hold in place of this run's time and versions.
FIXED = {"analyzed_at": "2026-01-01T00:00:00+00:00", "tool_version": "<VERSION>", "hta_version": "<HTA>"}
#: The file name of each format's gold file.
NAMES = {"html": "report.html", "md": "report.md", "json": "result.json", "sarif": "findings.sarif"}


def _steady(result):
    """``result`` with this run's time and versions replaced by :data:`FIXED`, and
    the reader of every file by ``native``."""
    # the reader that ran depends on the install (the native reader needs a compiler): fixed too
    files = [dataclasses.replace(f, parser="native") for f in result.inventory.files]
    return dataclasses.replace(result, inventory=dataclasses.replace(result.inventory, files=files, **FIXED))


@pytest.fixture(scope="module")
def results(sample_results):
    """The shipped samples, analyzed with ``source_root=REPO`` once per run
    (conftest's ``sample_results``), time and versions fixed."""
    assert sorted(sample_results) == SAMPLES
    return {name: _steady(sample_results[name]) for name in SAMPLES}


def _scrubbed(text: str) -> str:
    import hta.version

    from hta_report import __version__

    return scrub(text, {str(REPO): "<REPO>", f"hta-report {__version__}": "hta-report <VERSION>",
                        f"HTA {getattr(hta.version, '__version__', '')}": "HTA <HTA>"})


def test_every_format_has_a_gold_name():
    assert set(NAMES) == set(FORMATS)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_reports_match_their_gold_files(sample, fmt, results):
    r = REPORTERS[fmt]
    check_gold(f"{sample}/{NAMES[fmt]}", _scrubbed(r.render(results[sample], {} if r.charts else None)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_comparison_matches_its_gold_file(fmt, results):
    from hta_report.compare import compare

    comparison = compare(results["cpu_healthy"], results["cpu_dataloader_bound"])
    check_gold(f"compare/{NAMES[fmt].replace('report', 'compare').replace('result', 'compare').replace('findings', 'compare')}",
               _scrubbed(REPORTERS[fmt].render_comparison(comparison)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_gate_outcomes_match_their_gold_file(fmt, results):
    """A result checked with --fail-on: each output says which gate tripped."""
    from hta_report.gates import evaluate, parse_gate

    result = results["cpu_dataloader_bound"]
    gates = [parse_gate(g) for g in ("dataloader_pct>20", "step_time_ms>1000", "idle_pct>30")]
    gated = dataclasses.replace(result, gates=evaluate(gates, result=result))
    r = REPORTERS[fmt]
    check_gold(f"gates/{NAMES[fmt]}", _scrubbed(r.render(gated, {} if r.charts else None)))
