"""Results in Jupyter: ``_repr_html_`` frames the report page, escaped."""
import html
import re

from hta_report.model import AnalysisResult, Inventory


def test_a_result_shows_its_report_in_a_sandboxed_frame():
    import hta_report.render  # noqa: F401  (registers the display, as hta_report.api does)

    result = AnalysisResult(inventory=Inventory(input_dir='runs/"><script>alert(1)</script>'))
    shown = result._repr_html_()
    m = re.fullmatch(r'<iframe sandbox srcdoc="([^"]*)" style="[^"]*"></iframe>', shown)
    assert m, shown[:200]  # one attribute: no quote of the page escapes it
    page = html.unescape(m.group(1))
    assert page.lstrip().lower().startswith("<!doctype html>") and "<script>" not in page
    assert "&lt;script&gt;" in page  # the run's name, escaped once more inside the page


def test_a_comparison_too_and_reprs_stay_short():
    from hta_report.compare import compare
    import hta_report.render  # noqa: F401

    a = AnalysisResult(inventory=Inventory(input_dir="a"))
    c = compare(a, a)
    assert c._repr_html_().startswith("<iframe sandbox srcdoc=")
    assert repr(a) == "<AnalysisResult 'a': 0 rank(s), 0 finding(s), schema 3>"
    assert repr(c).startswith("<Comparison ") and len(repr(c)) < 200
