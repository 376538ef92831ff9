"""Every output format, tested as a family: each entry of ``REPORTERS``
renders an empty result, each shipped sample trace and a comparison, and a
format added to the table is tested here without a line more."""
import json
from pathlib import Path

import pytest

from hta_report.render import FORMATS, REPORTERS, format_for_path

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (REPO / "sample_traces").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def results(sample_results):
    """An empty result and every shipped sample (analyzed once per run: conftest's ``sample_results``)."""
    from hta_report.model import AnalysisResult, Inventory

    assert sorted(sample_results) == SAMPLES
    return {"empty": AnalysisResult(inventory=Inventory(input_dir="")), **sample_results}


def _check(fmt: str, text: str, where: str) -> None:
    """What every format's output must be: text, and valid in its own syntax."""
    assert isinstance(text, str) and text.strip(), where
    if fmt in ("json", "sarif"):
        json.loads(text)
    if fmt == "sarif":
        from test_source_lines import sarif_errors

        assert sarif_errors(json.loads(text)) == [], where
    if fmt == "html":
        assert text.lstrip().lower().startswith("<!doctype html>") and text.rstrip().endswith("</html>"), where
    assert "\x1b" not in text, where


def test_the_table_names_each_format_once():
    exts = [e for r in REPORTERS.values() for e in r.extensions]
    assert len(exts) == len(set(exts)) and set(FORMATS) == set(REPORTERS)
    for r in REPORTERS.values():  # every extension selects its own format, upper case too
        for ext in r.extensions:
            assert format_for_path(f"out/report{ext}") == r.format
            assert format_for_path(f"out/REPORT{ext.upper()}") == r.format


@pytest.mark.parametrize("name,fmt", [("x.sarif.json", "sarif"), ("x.json", "json"), ("a.b.md", "md"),
                                      ("report.htm", "html")])
def test_the_longest_registered_extension_wins(name, fmt):
    assert format_for_path(name) == fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_every_result(fmt, results):
    r = REPORTERS[fmt]
    for name, result in results.items():
        _check(fmt, r.render(result, {} if r.charts else None), f"{fmt} of {name}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_a_comparison(fmt, results):
    from hta_report.compare import compare

    base, new = results[SAMPLES[0]], results[SAMPLES[-1]]
    for a, b in ((base, new), (base, base), (results["empty"], new)):
        _check(fmt, REPORTERS[fmt].render_comparison(compare(a, b)), f"{fmt} comparison")
