"""Every figure on a page is defined once (issue 55, item 4): on one page,
two figures with the same label never differ (a figure of another window or
definition carries its own label), a heading is never followed by an empty
list, and the terminal's count of findings is the number it lists.

Checked on the markdown, the HTML and the terminal summary of the shipped
samples and their comparison (quick), and of every run of ``../shared/traces``
and the comparison of HTA's trace_diff pair (slow; skipped when ``../shared``
is absent). How a page is read: ``tests/page_figures.py``.
"""
from __future__ import annotations

import re

import pytest

from conftest import SHARED_ROOT, shared_runs
from page_figures import Figure, disagreements, figures, heading_then_empty_list, html_lines


def _listed_count(text: str) -> tuple:
    """``(findings the count line says are listed, findings listed)`` of the terminal summary."""
    head = next((x for x in text.splitlines() if re.match(r"^\d+ findings?\b", x)), None)
    if head is None:
        return 0, 0
    m = re.search(r", (\d+) listed", head)
    said = int(m.group(1)) if m else int(head.split()[0])
    return said, sum(1 for x in text.splitlines() if re.match(r"^  \[(high|medium|low)\] ", x))


def page_problems(result) -> list:
    """What breaks the invariants on ``result``'s markdown, HTML and terminal pages."""
    from hta_report.render import markdown, render, terminal

    one = len(result.ranks) == 1
    term = terminal.render(result, [])
    pages = {"md": markdown.render(result, {}).splitlines(), "html": html_lines(render(result, "html")),
             "terminal": term.splitlines()}
    out = [(page, "same label, other figure", d) for page, lines in pages.items()
           for d in disagreements(figures(lines, one))]
    out += [(page, "heading over an empty list", h) for page, lines in pages.items()
            for h in heading_then_empty_list(lines)]
    said, listed = _listed_count(term)
    if said != listed:
        out.append(("terminal", "count of findings listed", f"says {said}, lists {listed}"))
    return out


def comparison_problems(comparison) -> list:
    """What breaks the invariants on a comparison's markdown and HTML pages."""
    from hta_report.render import render_comparison

    one = len(comparison.ranks) <= 1
    pages = {"md": render_comparison(comparison, "md").splitlines(),
             "html": html_lines(render_comparison(comparison, "html"))}
    out = [(page, "same label, other figure", d) for page, lines in pages.items()
           for d in disagreements(figures(lines, one))]
    out += [(page, "heading over an empty list", h) for page, lines in pages.items()
            for h in heading_then_empty_list(lines)]
    return out


# ---------------------------------------------------------------- the checks can fail

def test_the_figure_check_finds_one_label_with_two_figures():
    # the h100_timesformer page before issue 55: three "busy" figures, and a sync column beside the headline's
    md = ["**GPU busy 41.4 %** of the analyzed steps (kernels 40.5 %), idle 58.6 % (host ops 57.0 %, "
          "synchronization 1.2 %)",
          "",
          "| rank | steps | GPU busy | sync |",
          "|---:|---:|---:|---:|",
          "| 0 | 1 | 41.4 % | 0.0 % |",
          "",
          "_Over the GPU's own span: busy 99.0 %; HTA's temporal breakdown: busy 98.7 %._"]
    found = {d[0] for d in disagreements(figures(md, one_rank=True))}
    assert found == {"busy", "sync"}
    # labelled by window and definition, as the pages are now: nothing to report
    fixed = [x.replace("| sync |", "| host in sync calls |").replace(": busy 99.0", ": span busy 99.0")
             .replace(": busy 98.7", ": HTA busy 98.7") for x in md]
    assert disagreements(figures(fixed, one_rank=True)) == []


def test_rounding_is_no_disagreement_and_ranks_are_their_own_scope():
    assert disagreements([Figure("idle", "", "57", "a"), Figure("idle", "", "57.0", "b")]) == []
    assert disagreements([Figure("idle", "", "57", "a"), Figure("idle", "", "58.0", "b")]) != []
    md = ["| rank | idle |", "|---:|---:|", "| 0 | 10.0 % |", "| 1 | 30.0 % |", "",
          "- rank 1: idle 30.0 %", "- rank 0: idle 10.0 %"]
    assert disagreements(figures(md, one_rank=False)) == []
    assert disagreements(figures(md + ["- rank 0: idle 12.0 %"], one_rank=False)) != []


def test_the_heading_check_finds_an_empty_list():
    assert heading_then_empty_list(["## Findings", "", "## Per rank", "| a |"]) == ["## Findings"]
    assert heading_then_empty_list(["## Findings", "", "- one"]) == []
    assert heading_then_empty_list(["1 finding, 0 listed:"]) == ["1 finding, 0 listed:"]
    assert html_lines("<h2>Findings</h2><ul></ul><h2>Per rank</h2><p>x</p>")[:2] == ["## Findings", "## Per rank"]
    assert heading_then_empty_list(html_lines("<h2>Findings</h2><ul></ul><h2>Per rank</h2><p>x</p>")) \
        == ["## Findings"]


# ---------------------------------------------------------------- the samples (quick)

def test_sample_pages_define_each_figure_once(sample_results):
    from hta_report.compare import compare

    for name, result in sample_results.items():
        assert page_problems(result) == [], name
    assert comparison_problems(compare(sample_results["cpu_healthy"], sample_results["cpu_dataloader_bound"])) == []


# ---------------------------------------------------------------- the real traces of ../shared (slow)

@pytest.mark.slow
@pytest.mark.parametrize("name", shared_runs() or ["(../shared absent)"])
def test_real_trace_pages_define_each_figure_once(name):
    from hta_report.api import analyze

    if not shared_runs():
        pytest.skip(f"{SHARED_ROOT} not available (../shared is absent)")
    assert page_problems(analyze(SHARED_ROOT / name)) == []


@pytest.mark.slow
def test_the_trace_diff_comparison_defines_each_figure_once():
    from hta_report.api import analyze
    from hta_report.compare import compare
    from hta_report.render import render_comparison

    control, test = SHARED_ROOT / "hta" / "trace_diff" / "control", SHARED_ROOT / "hta" / "trace_diff" / "test"
    if not (control.is_dir() and test.is_dir()):
        pytest.skip(f"{control.parent} not available (../shared is absent)")
    c = compare(analyze(control), analyze(test))
    assert comparison_problems(c) == []
    # the host's time in sync calls rose while the sync-in-step finding went away: labelled apart
    for page in (render_comparison(c, "md"), "\n".join(html_lines(render_comparison(c, "html")))):
        assert "host in sync calls" in page and "sync share of step" not in page
