"""Names copy cleanly from the markdown (issue 32, item 7): kernel, op, device
and file names are code spans, which GitHub leaves alone, so nothing invisible
is added to them (the U+2060 word joiners that keep prose from turning into
mentions, references or emoji stay out of names); and no table cell is longer
than ``MD_CELL_MAX`` characters, the HTML report keeping every name whole."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import markup
from hta_report.compare import compare
from hta_report.escape import MD_CELL_MAX, WJ, clip, md_cell, md_code, md_text
from hta_report.model import KernelDelta, KernelVariant
from hta_report.render import render_comparison
from hta_report.render.markdown import render

REPO = Path(__file__).resolve().parent.parent
NAMES = ["aten::add_", "cuda:0", "cuda:0: NVIDIA H100", "@octocat", "#12", "org/repo#12",
         "Optimizer.step#AdamW.step", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "gloo:all_reduce", ":smile:", "http://example.com/x", "a`b", "a``b`c", "`lead", "trail`", " spaced ",
         "x|y", "void k<float, 2ul>(float*)", "www.example.com", "GH-12"]


class _Cells(HTMLParser):
    """The text of each ``<code>`` element and each table cell of rendered HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.code: list[str] = []
        self.cells: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("code", "td", "th"):
            self._in.append(tag)
            (self.code if tag == "code" else self.cells).append("")

    def handle_endtag(self, tag):
        if tag in ("code", "td", "th") and self._in:
            self._in.pop()

    def handle_data(self, data):
        for tag in self._in:
            (self.code if tag == "code" else self.cells)[-1] += data


def _parsed(md: str) -> _Cells:
    cells = _Cells()
    cells.feed(markup.render_gfm(md))
    return cells


@pytest.mark.parametrize("name", NAMES)
def test_a_name_in_a_code_span_is_copied_as_it_is(name):
    """What GitHub shows of the span is the name, character for character (a
    backtick inside gets a longer fence, CommonMark 6.1), and GitHub's
    filters do not act inside code."""
    prose = _parsed(f"- {md_code(name)}\n")
    assert prose.code == [name]
    table = _parsed(f"| a |\n|---|\n| {md_code(name, table=True)} |\n")
    assert table.code == [name]
    assert markup.markdown_problems(f"- {md_code(name)}\n", "- `t`\n") == []


def test_prose_keeps_names_whole_and_still_stops_mentions_and_references():
    for name in ("aten::zero_", "gloo:all_reduce", "Optimizer.step#AdamW.step", "cuda:0", "aten::add"):
        for text in (f"no {name} here", f"{name} first", f"ends with {name}"):
            shown = html.unescape(re.sub("<[^>]+>", "", markup.render_gfm(md_text(text))))
            assert name in shown, (text, shown)  # what a reader copies from the comment: grep finds the name
        assert WJ not in md_text(f"({name})")
    for trigger in ("@octocat", "#12", "http://e.x", ":smile:", "mailto:a", "www.e.com", "GH-12", "a:b:c", "x:smile"):
        shown = md_text(trigger)
        assert WJ in shown, trigger
        assert markup.markdown_problems(f"- {shown}\n", "- t\n") == [], trigger
        assert markup.markdown_problems(f"- {shown}: reason\n", "- t: reason\n") == [], trigger


def test_sample_reports_add_nothing_invisible():
    for path in sorted((REPO / "tests" / "gold").glob("*/*.md")):
        assert WJ not in path.read_text(encoding="utf-8"), path


def test_a_cell_is_cut_at_the_documented_length():
    long = "k" * 1000
    assert clip(long) == "k" * (MD_CELL_MAX - 1) + "…" and clip("short") == "short"
    [code] = _parsed(f"| a |\n|---|\n| {md_code(long, table=True)} |\n").code
    assert len(code) == MD_CELL_MAX and code.endswith("…")
    assert len(html.unescape(re.sub("<[^>]+>", "", markup.render_gfm(md_cell(long))).strip())) == MD_CELL_MAX


@pytest.fixture(scope="module")
def many_variants(sample_results):
    """A kernel of 40 template variants, each with a long name (a comment once
    held a cell of 1,470 characters)."""
    base = sample_results["cpu_healthy"]
    c = compare(base, base)
    variants = [KernelVariant(name=f"void ns::fused_kernel<float, {i}ul, " + "ns::Accessor<float, 3ul>, " * 8 + "4>"
                              "(float*)", base_us=1000.0 + i, new_us=2000.0 + i) for i in range(40)]
    c.kernels = [KernelDelta(name="fused_kernel", kernel_type="COMPUTATION", base_us=sum(v.base_us for v in variants),
                             new_us=sum(v.new_us for v in variants), delta_us=40_000.0, variants=variants),
                 KernelDelta(name="void " + "very_long_name_" * 40 + "(float*)", kernel_type="COMPUTATION",
                             base_us=0.0, new_us=10.0, delta_us=10.0)]
    return c


def test_no_markdown_table_cell_passes_the_cap(many_variants):
    md = render_comparison(many_variants, "md")
    cells = _parsed(md).cells
    assert cells and max(len(c) for c in cells) <= MD_CELL_MAX, max(cells, key=len)
    row = next(line for line in md.splitlines() if line.startswith("| `fused_kernel`"))
    assert re.search(r"\(40 template variants: `…<[^`]+>` \+1\.0[0-9] ms, .*, [0-9]+ more\)", row), row
    page = render_comparison(many_variants, "html")
    assert all(html.escape(v.name, quote=True) in page for v in many_variants.kernels[0].variants)  # whole there


def test_analyze_markdown_shows_devices_and_files_as_code(tmp_path):
    from hta_report.api import analyze
    from kineto import simple_gpu_trace

    simple_gpu_trace(rank=0).write(tmp_path / "rank-0.json")
    result = analyze(tmp_path, cache=None)
    result.inventory.devices = ["NVIDIA H100 @lab #1"]
    md = render(result, {})
    assert "· `NVIDIA H100 @lab #1`" in md and WJ not in md.split("\n\n")[1]
    assert markup.markdown_problems(md, md.replace("`NVIDIA H100 @lab #1`", "`t`")) == []
