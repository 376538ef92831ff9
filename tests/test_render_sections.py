"""The view model (hta_report/render/view.py): typed, frozen rows and one list
of sections that the HTML page, the markdown report and the terminal summary
all walk, each figure formatted once."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar, List

import pytest

from conftest import REPO
from hta_report.api import analyze
from hta_report.model import AnalysisResult, Inventory, SectionFailure
from hta_report.render import html, markdown, render, terminal, view
from kineto import simple_gpu_trace

TEMPLATES = REPO / "templates"


@pytest.fixture(scope="module")
def gpu_result(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu")
    simple_gpu_trace(kernel_name="void gemm_kernel<float, 128>(float*)", steps=4).write(d / "rank-0.json")
    return analyze(d, cache=None)


@pytest.fixture(scope="module")
def results(gpu_result, sample_results):
    cpu = sample_results["cpu_ddp_2ranks"]
    return {"gpu": gpu_result, "cpu": cpu, "empty": AnalysisResult(inventory=Inventory(input_dir=""))}


def _walk(value: object, where: str, out: List[str]) -> None:
    """Every value of a view that is neither a frozen dataclass, a tuple nor a plain scalar."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:
            out.append(f"{where}: {type(value).__name__} is not frozen")
        for f in dataclasses.fields(value):
            _walk(getattr(value, f.name), f"{where}.{f.name}", out)
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            _walk(v, f"{where}[{i}]", out)
    elif value is not None and not isinstance(value, (str, bool, int, float)):
        out.append(f"{where}: {type(value).__name__}")


@pytest.mark.parametrize("name", ["gpu", "cpu", "empty"])
def test_the_view_is_typed_frozen_rows_all_the_way_down(name, results):
    result = results[name]
    bad: List[str] = []
    _walk(view.report(result, {"gpu_time": "data:image/svg+xml;base64,AA=="}), "report", bad)
    assert bad == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.report(result).run.name = "x"


def test_every_section_is_listed_once_with_a_packaged_partial():
    assert len(set(view.SECTIONS)) == len(view.SECTIONS)
    for section in view.SECTIONS:
        assert issubclass(section, view.Section) and dataclasses.is_dataclass(section)
        assert section.__dataclass_params__.frozen
        if section.template:  # shipped: pyproject's package data is templates/*.j2, not subfolders
            assert re.fullmatch(r"[a-z_]+\.html\.j2", section.template) and (TEMPLATES / section.template).is_file()


@pytest.mark.parametrize("name", ["gpu", "cpu", "empty"])
def test_each_partial_renders_whole_lines(name, results):
    """The page puts a blank line between two sections: each partial renders
    to lines that each end in a newline, or to nothing."""
    env = html.environment()
    for section in view.report(results[name], {"gpu_time": "data:image/svg+xml;base64,AA=="}).sections:
        if section.template:
            text = env.get_template(section.template).render(section=section)
            assert text == "" or text.endswith("\n"), section.template


def test_templates_only_read_loop_and_test():
    """No arithmetic and no formatting in a template: numbers arrive formatted."""
    allowed_filters = {"breakable", "safe", "join", "replace"}
    for path in sorted(TEMPLATES.glob("*.j2")):
        text = path.read_text(encoding="utf-8")
        for expr in re.findall(r"{{(.*?)}}|{%(.*?)%}", text, flags=re.S):
            code = re.sub(r"'[^']*'|\"[^\"]*\"", "''", "".join(expr))  # string literals aside
            assert not re.search(r"[-+*/%]|\bround\b|\bformat\b|\bsum\b", code), (path.name, code)
            assert set(re.findall(r"\|\s*(\w+)", code)) <= allowed_filters, (path.name, code)


def test_markdown_and_terminal_walk_the_same_sections(gpu_result):
    report = view.report(gpu_result)
    md = render(gpu_result, "md")
    position = 0
    for section in report.sections:  # each section's markdown lines, in the sections' order
        block = "\n".join(section.markdown())
        position = md.index(block, position) + len(block) if block else position
    summary = terminal.render(gpu_result, ["r.html"])
    assert summary == "\n".join([line for s in report.sections for line in s.terminal()] + ["wrote r.html"])


def test_each_rank_figure_is_formatted_once_and_shown_alike(gpu_result):
    report = view.report(gpu_result)
    table = next(s for s in report.sections if isinstance(s, view.RankTableSection))
    details = next(s for s in report.sections if isinstance(s, view.RankDetailsSection))
    (row,), (rank,) = table.rows, details.ranks
    assert rank.gpu_time is not None
    assert rank.gpu_time.window.startswith(f"GPU busy {row.busy} of the analyzed steps (kernels {row.kernels}, "
                                           f"idle {row.idle})")
    assert rank.step_stats.mean == row.mean_step and rank.cpu.dataloader_pct == row.dataloader
    md, page = render(gpu_result, "md"), render(gpu_result, "html", {})
    assert f"| {row.rank} | {row.steps} | {row.mean_step} | {row.busy} | {row.kernels} | {row.idle} |" in md
    assert f"<td>{row.busy}</td><td>{row.kernels}</td><td>{row.idle}</td>" in page
    headline = next(s for s in report.sections if isinstance(s, view.HeadlineSection))
    findings = next(s for s in report.sections if isinstance(s, view.FindingsSection))
    assert headline.top == tuple(f for f in findings.findings if f.gain_pct >= 1)[:3]


def test_a_failed_step_shows_as_not_computed_in_the_table_but_not_in_the_sentence(gpu_result):
    r = dataclasses.replace(gpu_result, ranks=[dataclasses.replace(
        gpu_result.ranks[0], failures=[SectionFailure("idle attribution", "boom"), SectionFailure("SM occupancy", "x")])])
    (row,) = view.rank_rows(r)
    assert (row.busy, row.kernels, row.idle) == (view.NOT_COMPUTED,) * 3
    detail = view.RankDetailsSection.of(view.Basis.of(r)).ranks[0]
    assert detail.occupancy == view.Absent(view.NOT_COMPUTED, "x")
    assert detail.gpu_time is not None and f"GPU busy {view.fmt.pct(r.ranks[0].busy_pct)} " in detail.gpu_time.window


def test_a_new_section_is_a_class_and_a_partial(gpu_result, monkeypatch, tmp_path):
    """The recipe of ARCHITECTURE.md: a section class listed in SECTIONS and
    its partial show in the page, the markdown report and the terminal
    summary, with no reporter edited."""

    @dataclass(frozen=True)
    class Devices(view.Section):
        template: ClassVar[str] = "section_devices.html.j2"
        devices: str

        @classmethod
        def of(cls, b: view.Basis) -> "Devices":
            return cls(devices=b.run.devices)

        def markdown(self) -> List[str]:
            return ["", f"### Devices: {self.devices}"]

        def terminal(self) -> List[str]:
            return [f"devices again: {self.devices}"]

    partials = {"section_devices.html.j2": '<section id="devices">{{ section.devices }}</section>\n'}
    text_of = html._template_text
    monkeypatch.setattr(html, "_template_text", lambda name: partials.get(name) or text_of(name))
    monkeypatch.setattr(view, "SECTIONS", view.SECTIONS + (Devices,))
    html.environment.cache_clear()
    try:
        page = render(gpu_result, "html", {})
    finally:
        html.environment.cache_clear()
    assert '</section>\n\n<section id="devices">NVIDIA H100</section>\n<footer>' in page
    assert markdown.render(gpu_result, {}).endswith("\n\n### Devices: NVIDIA H100\n")
    assert "\ndevices again: NVIDIA H100\nwrote x" in terminal.render(gpu_result, ["x"])
