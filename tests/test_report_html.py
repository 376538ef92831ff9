"""The HTML report: escaping of trace-derived strings, nothing loaded from the network."""
import re

import pytest


from hta_report.api import analyze
from hta_report.render import render
from hta_report.rules import RULES
from kineto import simple_gpu_trace

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def evil_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    simple_gpu_trace(kernel_name=EVIL, steps=4).write(d / "rank-0.json")
    result = analyze(d)
    return result, render(result, "html"), render(result, "md")


def test_kernel_name_with_script_is_escaped(evil_report):
    result, html, _ = evil_report
    assert result.ranks[0].top_kernels[0].name == EVIL  # the model keeps the raw name
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()


def test_report_loads_nothing_from_the_network(evil_report):
    _, html, _ = evil_report
    # no external resources: every src= is a data: URI, no <link>, no @import, no url(http...)
    srcs = re.findall(r'\ssrc="([^"]*)"', html)
    assert srcs and all(s.startswith("data:image/svg+xml;base64,") for s in srcs)
    assert "<link" not in html.lower()
    assert "@import" not in html
    assert not re.search(r"url\(\s*['\"]?https?:", html)
    # plain links to documentation are allowed, and only as <a href>
    for m in re.finditer(r"(\w+)=\"https?://", html):
        assert m.group(1) == "href"
    assert "Content-Security-Policy" in html


def test_report_sections_present(evil_report):
    _, html, _ = evil_report
    for section in ("headline", "findings", "ranks", "charts", "rank-0", "inventory"):
        assert f'id="{section}"' in html
    assert "Input-bound" in html
    # GPU time per rank, top kernels, steps (>= 2 steps), rank 0's step breakdown; each also drawn for narrow screens
    assert html.count("<img") == 4 and html.count('<source media="(max-width: 640px)"') == 4


def test_markdown_report(evil_report):
    _, _, md = evil_report
    assert md.startswith("## hta-report")
    assert "| rank |" in md and "dataloader-bound" in md


def test_findings_show_gain_and_the_checks_table(evil_report):
    result, html, md = evil_report
    assert "Estimated gain:</strong> up to" in html and 'id="checks"' in html
    for c in result.checks:
        assert f'<td class="name">{c.id}</td>' in html
    assert f"What was checked ({len(RULES)} rules:" in md and "| `tensor-cores-unused` |" in md and "| C12 |" not in md
    assert "```python" in md


def test_healthy_run_says_so_and_lists_what_was_checked(tmp_path):
    from kineto import TC_GEMM, TraceBuilder

    b = TraceBuilder(rank=0)
    for i in range(5):
        b.step(i + 1, i * 1000, 1000)
        for j in range(10):
            b.kernel(TC_GEMM, i * 1000 + j * 100, 100, launch_ts=i * 1000 + j * 100 - 50)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    html, md = render(result, "html"), render(result, "md")
    assert result.findings == []
    assert "No rule fired: the run looks healthy on what was checked" in html
    assert '<details id="checks" open>' in html and "not checked" in html
    assert "No rule fired" in md and "| `dataloader-bound` | not checked |" in md


# --- what a reviewer reads first: the run's name, words, kernel names --------------------------

from html.parser import HTMLParser  # noqa: E402

from conftest import REPO  # noqa: E402
from hta_report.render.terminal import render as terminal  # noqa: E402

FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
        "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")


class VisibleText(HTMLParser):
    """The text a reader sees without hovering or opening anything: outside
    <style>, <title>, attributes, and the bodies of closed <details> (their
    <summary> is seen)."""

    def __init__(self):
        super().__init__()
        self.lines, self._hidden, self._stack, self._glue = [], 0, [], False

    def handle_starttag(self, tag, attrs):
        self._glue = tag == "wbr"
        if tag in ("style", "title", "head"):
            self._hidden += 1
        if tag == "details":
            self._stack.append("open" in dict(attrs))
            if not self._stack[-1]:
                self._hidden += 1
        if tag == "summary" and self._stack and not self._stack[-1]:
            self._hidden -= 1

    def handle_endtag(self, tag):
        if tag in ("style", "title", "head"):
            self._hidden -= 1
        if tag == "summary" and self._stack and not self._stack[-1]:
            self._hidden += 1
        if tag == "details" and self._stack:
            if not self._stack.pop():
                self._hidden -= 1

    def handle_data(self, data):
        glue, self._glue = self._glue, False
        if self._hidden or not data.strip():
            return
        if glue and self.lines:
            self.lines[-1] += data.strip()  # <wbr> breaks no word
        else:
            self.lines.append(data.strip())


def visible_text(html: str):
    parser = VisibleText()
    parser.feed(html)
    return parser.lines


def test_markdown_heading_and_html_title_name_the_run(evil_report):
    result, html, md = evil_report
    assert md.splitlines()[0] == "## hta-report: evil0"
    assert "<h1>evil0</h1>" in html and "<title>hta-report: evil0</title>" in html
    assert "why is the GPU idle?" in html


def test_collected_cpu_run_reads_right(tmp_path, sample_results):
    result = sample_results["cpu_dataloader_bound"]
    html, md = render(result, "html"), render(result, "md")
    text = terminal(result, [])
    assert md.splitlines()[0] == "## hta-report: cpu\\_dataloader\\_bound"
    assert "<h1>cpu_dataloader_bound</h1>" in html and "why is the GPU idle" not in html.lower()
    # devices from the collector's manifest, not "none recorded"
    for out in (html, md, text):
        assert "cpu: Intel" in out or "cpu: " in out
        assert "none recorded" not in out
        assert "(s)" not in out
    assert "workload cnn" in html and "workload cnn" in md
    assert "of the step. Synchronization:" in html  # was "of the step.Synchronization:"
    assert ">GPU busy<" not in html  # no empty GPU columns in the per-rank table


def test_kernel_names_are_short_with_the_full_name_on_hover(tmp_path):
    from kineto import TraceBuilder

    b = TraceBuilder(rank=0)
    for i in range(4):
        b.step(i + 1, i * 1000, 1000)
        b.kernel(FILL, i * 1000 + 100, 300)
        b.kernel(ADD, i * 1000 + 500, 200)
    b.write(tmp_path / "t.json")
    html = render(analyze(tmp_path), "html")
    for name, short in ((FILL, "FillFunctor"), (ADD, "CUDAFunctor_add")):
        full = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        # the short name in the table (a line break allowed after each "_"), the full one on hover and on click
        assert (f'<summary title="{full}">vectorized_<wbr>elementwise_<wbr>kernel&lt;{short.replace("_", "_<wbr>")}&gt;'
                f'</summary><code class="full">{full}</code>') in html
    shown = re.sub(r'title="[^"]*"|<code class="full">.*?</code>', "", html)
    assert "at::native" not in shown  # the full signature nowhere else
    assert max(len(part) for line in visible_text(html) for part in line.splitlines()) < 300  # code: per line


def test_world_size_larger_than_the_ranks_found_is_said(tmp_path):
    from kineto import simple_gpu_trace

    b = simple_gpu_trace(rank=3)
    b.world_size = 8
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    html, md = render(result, "html"), render(result, "md")
    note = "only 1 of its 8 traces is here (rank 3)"
    assert note in html and note in md and note in terminal(result, [])
    whole = tmp_path / "whole"
    whole.mkdir()
    for r in (0, 1):
        b = simple_gpu_trace(rank=r)
        b.world_size = 2
        b.write(whole / f"r{r}.json")
    assert "traces is here" not in render(analyze(whole), "html")


def test_no_profiler_steps_is_small_print_not_a_headline_figure(tmp_path):
    from kineto import TraceBuilder

    b = TraceBuilder(rank=0)
    for i in range(4):
        b.kernel(FILL, i * 1000 + 100, 300)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    html, md = render(result, "html"), render(result, "md")
    assert '<div class="v">–</div><div class="k">mean step time: no ProfilerStep annotations</div>' in html
    assert "mean step no ProfilerStep" not in md and "no ProfilerStep annotations" in md
