"""The compare page a reviewer reads: biggest changes first, short kernel names, template variants grouped."""
import re

import pytest

from conftest import shared
from hta_report.api import analyze
from hta_report.compare import compare
from hta_report.render import render_comparison
from hta_report.render.compare_view import biggest_changes
from kineto import TraceBuilder
from test_report_html import visible_text

SPLIT = ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, {}ul>("
         "at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, "
         "at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>, long, float*)")


def _run(path, variant, us):
    b = TraceBuilder(rank=0)
    for i in range(6):
        b.step(i + 1, i * 2000, 2000)
        b.kernel(SPLIT.format(variant), i * 2000 + 100, us)
        b.kernel("volta_sgemm_128x64_nn", i * 2000 + 900, 300)
    b.write(path / "t.json")
    return analyze(path)


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    base, new = tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("new")
    return compare(_run(base, 2, 500), _run(new, 5, 700), str(base), str(new))


def test_template_variants_are_one_kernel_with_the_variants_listed(variants):
    [k] = variants.kernels  # volta_sgemm did not change: left out
    assert k.name == "split_embedding_codegen_forward_unweighted_kernel"
    assert [(v.name, v.base_us, v.new_us) for v in k.variants] == [
        (SPLIT.format(5), 0.0, 3500.0), (SPLIT.format(2), 2500.0, 0.0)]  # 5 analyzed steps per side
    assert (k.base_us, k.new_us, k.delta_us) == (2500.0, 3500.0, 1000.0)
    md = render_comparison(variants, "md")
    assert ("| `split_embedding_codegen_forward_unweighted_kernel` (2 template variants: `…<5ul>` +3.50 ms, "
            "`…<2ul>` −2.50 ms) | 2.50 ms | 3.50 ms | +1.00 ms |") in md
    html = render_comparison(variants, "html")
    assert "2 template variants" in html and "…&lt;5ul&gt;" in html
    assert "GenericPackedTensorAccessor" not in re.sub(r'title="[^"]*"', "", html)  # full names on hover only


def test_unchanged_kernels_are_not_listed_as_changed(variants):
    same = compare(variants.base, variants.base)
    assert same.kernels == []
    assert "No kernel&#39;s total time changed." in render_comparison(same, "html")
    md = render_comparison(same, "md")
    assert "No kernel's total time changed." in md and "No other metric moved by 1 pp or more." in md


def test_markdown_heading_names_both_runs(variants):
    md = render_comparison(variants, "md")
    first = md.splitlines()[0]
    assert first.startswith("## hta-report compare: base") and " → new" in first


@pytest.fixture(scope="module")
def control_vs_test():
    return compare(analyze(shared("trace_diff/control")), analyze(shared("trace_diff/test")),
                   "trace_diff/control", "trace_diff/test")


def test_the_biggest_movements_lead_the_page(control_vs_test):
    rows = biggest_changes(control_vs_test)
    assert rows[0].name == "mean step time"
    # the largest move is on one rank only (rank 3 of the base job against rank 1 of the new one)
    assert (rows[1].name, rows[1].where, rows[1].base, rows[1].new) == \
        ("sync share of step", "rank 3 → rank 1", "8.2 %", "26.7 %")
    moves = [float(r.change.split("\u00a0")[0]) for r in rows[1:]]
    assert moves == sorted(moves, key=abs, reverse=True) and all(abs(m) >= 1 for m in moves)
    html = render_comparison(control_vs_test, "html")
    order = [html.index(f'id="{s}"') for s in ("verdict", "biggest", "findings", "kernels", "overall", "ranks")]
    assert order == sorted(order)
    md = render_comparison(control_vs_test, "md")
    assert md.index("### Biggest changes") < md.index("### Findings")
    assert "| sync share of step (rank 3 → rank 1) | 8.2 % | 26.7 % | **+18.5\u00a0pp** |" in md


def test_no_visible_line_is_longer_than_300_characters(control_vs_test):
    html = render_comparison(control_vs_test, "html")
    lines = visible_text(html)
    assert max(len(line) for line in lines) <= 300, max(lines, key=len)
    md = render_comparison(control_vs_test, "md")
    assert max(len(line) for line in md.splitlines()) <= 600  # a table row holds a whole group
    # the two template variants of the embedding kernels are one row each
    split = [k for k in control_vs_test.kernels if k.variants]
    assert split and all(len(k.variants) == 2 for k in split)
    assert all(re.search(r", [25]ul>\(", v.name) for k in split for v in k.variants)
