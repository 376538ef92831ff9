"""The HTML report: escaping of trace-derived strings, nothing loaded from the network."""
import re

import pytest

from hta_report.api import analyze
from hta_report.render import render
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
    assert html.count("<img") == 5  # temporal, idle, kernel types, top kernels, steps (>= 2 steps)


def test_markdown_report(evil_report):
    _, _, md = evil_report
    assert md.startswith("## hta-report")
    assert "| rank |" in md and "dataloader-bound" in md


def test_findings_show_gain_and_the_checks_table(evil_report):
    result, html, md = evil_report
    assert "Estimated gain:</strong> up to" in html and 'id="checks"' in html
    for c in result.checks:
        assert f'<td class="name">{c.id}</td>' in html
    assert "What was checked (23 rules:" in md and "| C12 | `tensor-cores-unused` |" in md
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
    assert "No rule fired" in md and "| C1 | `dataloader-bound` | not checked |" in md
