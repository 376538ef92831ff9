"""The compare page a reviewer reads: biggest changes first, short kernel names, template variants grouped."""
import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import shared
from hta_report.api import analyze
from hta_report.compare import compare
from hta_report.model import AnalysisResult
from hta_report.render import render_comparison
from hta_report.render.compare_view import biggest_changes
from hta_report.render.terminal import comparison_summary
from kineto import TraceBuilder
from test_report_html import visible_text

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

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
        ("host in sync calls, % of step", "rank 3 → rank 1", "8.2 %", "26.7 %")
    moves = [float(r.change.split("\u00a0")[0]) for r in rows[1:]]
    assert moves == sorted(moves, key=abs, reverse=True) and all(abs(m) >= 1 for m in moves)
    html = render_comparison(control_vs_test, "html")
    order = [html.index(f'id="{s}"') for s in ("verdict", "biggest", "findings", "kernels", "overall", "ranks")]
    assert order == sorted(order)
    md = render_comparison(control_vs_test, "md")
    assert md.index("### Biggest changes") < md.index("### Findings")
    assert "| host in sync calls, % of step (rank 3 → rank 1) | 8.2 % | 26.7 % | **+18.5\u00a0pp** |" in md


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


# --- what each side ran on, and how the two differ (issue 32, item 6) --------------------------------


def _gpu_run(path, rank, world, gpu, header, step_us):
    b = TraceBuilder(rank=rank, world_size=world, gpu_name=gpu, header=header)
    for i in range(24):  # 22 analyzed steps: enough for the statistical verdict (compare_stats.MIN_STEPS)
        b.step(i + 1, i * step_us, step_us)
        b.cpu_op("aten::mm", i * step_us + 20, 50)
        b.kernel("volta_sgemm_128x64_nn", i * step_us + 100, step_us / 2)
    b.write(path / f"rank-{rank}.json")
    return analyze(path)


@pytest.fixture(scope="module")
def a100_vs_v100(tmp_path_factory):
    """Rank 3 of 8 on an A100 (CUDA 12.4) against rank 1 of 2 on a V100 (CUDA 11.8)."""
    base = _gpu_run(tmp_path_factory.mktemp("a100"), 3, 8, "NVIDIA A100-SXM4-80GB", {"cuda_runtime_version": 12040},
                    1000)
    new = _gpu_run(tmp_path_factory.mktemp("v100"), 1, 2, "Tesla V100-SXM2-16GB", {"cuda_runtime_version": 11080},
                   1550)
    return compare(base, new, "runs/a100", "runs/v100")


def test_each_side_says_what_it_ran_on(a100_vs_v100):
    b, n = a100_vs_v100.sides
    assert (b.label, b.gpu, b.devices, b.devices_from, b.world_size, b.ranks, b.gpu_runtime) == (
        "runs/a100", True, ["NVIDIA A100-SXM4-80GB"], "traces", 8, [3], "CUDA 12.4")
    assert (n.devices, n.world_size, n.ranks, n.gpu_runtime, n.torch_version) == (
        ["Tesla V100-SXM2-16GB"], 2, [1], "CUDA 11.8", None)
    assert a100_vs_v100.differences == [
        "The sides ran on different devices (NVIDIA A100-SXM4-80GB vs Tesla V100-SXM2-16GB): "
        "the change measures the hardware too.",
        "The sides ran with different world sizes (8 vs 2 ranks): each rank's share of the work and its "
        "communication differ.",
        "The sides analyzed different ranks (rank 3 vs rank 1): ranks of one job may do different work.",
        "The sides ran different GPU runtimes (CUDA 12.4 vs CUDA 11.8): the change measures the software too.",
    ]
    assert a100_vs_v100.verdict == "regressed"


def test_the_devices_and_the_warnings_are_in_every_output(a100_vs_v100):
    md = render_comparison(a100_vs_v100, "md")
    assert ("- base `runs/a100`: `NVIDIA A100-SXM4-80GB`, rank 3 of 8, PyTorch not recorded, CUDA 12.4\n"
            "- new `runs/v100`: `Tesla V100-SXM2-16GB`, rank 1 of 2, PyTorch not recorded, CUDA 11.8\n") in md
    assert "> [!WARNING]\n> **Not like for like:**\n>\n> - The sides ran on different devices (NVIDIA A100-SXM4" in md
    assert md.index("different devices") < md.index("### Biggest changes")  # next to the verdict
    html = render_comparison(a100_vs_v100, "html")
    text = visible_text(html)
    at = text.index("NVIDIA A100-SXM4-80GB, rank 3 of 8, PyTorch not recorded, CUDA 12.4")
    assert text[at - 1:at + 3] == ["base", text[at], "new", "Tesla V100-SXM2-16GB, rank 1 of 2, PyTorch not recorded, "
                                                            "CUDA 11.8"]
    assert "Not like for like:" in text and all(d in text for d in a100_vs_v100.differences)
    term = comparison_summary(a100_vs_v100, ["c.md"]).splitlines()
    assert term[1:3] == ["base: NVIDIA A100-SXM4-80GB, rank 3 of 8, PyTorch not recorded, CUDA 12.4",
                         "new: Tesla V100-SXM2-16GB, rank 1 of 2, PyTorch not recorded, CUDA 11.8"]
    assert [line for line in term if line.startswith("warning: ")] == [
        f"warning: {d}" for d in a100_vs_v100.differences]
    json_doc = json.loads(render_comparison(a100_vs_v100, "json"))
    assert json_doc["sides"][0]["devices"] == ["NVIDIA A100-SXM4-80GB"] and len(json_doc["differences"]) == 4


def test_like_for_like_sides_give_no_warning(a100_vs_v100):
    same = compare(a100_vs_v100.base, a100_vs_v100.base)
    assert same.differences == []
    assert "[!WARNING]" not in render_comparison(same, "md")
    assert "Not like for like" not in render_comparison(same, "html")
    assert "warning:" not in comparison_summary(same, [])


def _edited(result, **inventory):
    data = json.loads(result.to_json())
    data["inventory"].update(inventory)
    for f in data["inventory"]["files"]:
        f["cuda_runtime_version"] = None
    return AnalysisResult.from_dict(data)


def test_versions_from_the_manifest_are_compared(a100_vs_v100):
    """PyTorch's version is the manifest's; without a runtime in the traces the
    CUDA or ROCm build is the one the version names (``+cu121``, ``+rocm6.2``)."""
    base = _edited(a100_vs_v100.base, pytorch_version="2.4.0+cu121",
                   manifest={"world_size": 8, "device_names": ["cpu: Xeon", "cuda:0: NVIDIA A100-SXM4-80GB"]})
    new = _edited(a100_vs_v100.base, pytorch_version="2.5.1+rocm6.2", devices=[],
                  manifest={"device_names": ["cpu: EPYC", "cuda:0: AMD Instinct MI300X"]})
    c = compare(base, new)
    b, n = c.sides
    assert (b.torch_version, b.gpu_runtime, n.torch_version, n.gpu_runtime) == (
        "2.4.0+cu121", "CUDA 12.1", "2.5.1+rocm6.2", "ROCm 6.2")
    assert (n.devices, n.devices_from) == (["AMD Instinct MI300X"], "manifest.json")  # the GPU, not the CPU
    assert c.differences == [
        "The sides ran on different devices (NVIDIA A100-SXM4-80GB vs AMD Instinct MI300X): "
        "the change measures the hardware too.",
        "The sides ran different PyTorch versions (2.4.0+cu121 vs 2.5.1+rocm6.2): the change measures the software too.",
        "The sides ran different GPU runtimes (CUDA 12.1 vs ROCm 6.2): the change measures the software too.",
    ]
    assert "`AMD Instinct MI300X` (from manifest.json), rank 3 of 8, PyTorch 2.5.1+rocm6.2, ROCm 6.2" in \
        render_comparison(c, "md")


def test_a_comparison_saved_before_the_sides_were_recorded_still_renders(a100_vs_v100):
    old = dataclasses.replace(a100_vs_v100, sides=[], differences=[], cpu_ops=[])
    md = render_comparison(old, "md")
    assert "base: `runs/a100` · new: `runs/v100`" in md and "[!WARNING]" not in md
    assert "No CPU op's time per step changed." in md
    assert 'id="cpu-ops"' in render_comparison(old, "html")


@pytest.fixture(scope="module")
def cpu_runs(sample_results):
    return compare(sample_results["cpu_healthy"], sample_results["cpu_dataloader_bound"],
                   "sample_traces/cpu_healthy", "sample_traces/cpu_dataloader_bound")


def test_two_cpu_runs_show_the_cpu_ops_that_changed_most(cpu_runs):
    top = cpu_runs.cpu_ops[0]
    assert top.name == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert top.new_us > 10 * top.base_us and top.delta_us == pytest.approx(top.new_us - top.base_us)
    assert [abs(o.delta_us) for o in cpu_runs.cpu_ops] == sorted((abs(o.delta_us) for o in cpu_runs.cpu_ops),
                                                                 reverse=True)
    assert 3 <= len(cpu_runs.cpu_ops) <= 10 and cpu_runs.differences == []
    md = render_comparison(cpu_runs, "md")
    assert ("- base `sample_traces/cpu_healthy`: CPU only: `AMD EPYC (2 logical cores)` (from manifest.json), "
            "rank 0 of 1, PyTorch 2.13.0+cpu") in md
    # no kernel: the ops lead the biggest changes, and have a table of their own
    lead = next(line for line in md.splitlines() if line.startswith("CPU ops that changed most"))
    assert "`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`" in lead
    assert md.index(lead) < md.index("### Findings") < md.index("### CPU ops whose time per step changed most")
    assert re.search(r"^\| `enumerate\(DataLoader\)#_SingleProcessDataLoaderIter\.__next__` \| [0-9]+ µs \| "
                     r"[0-9.]+ ms \| \+[0-9.]+ ms \|$", md, re.M)
    html = render_comparison(cpu_runs, "html")
    assert 'id="cpu-ops"' in html and "CPU ops that changed most" in html
    term = comparison_summary(cpu_runs, [])
    assert "CPU ops that changed most (self time per step): +" in term
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in term
    assert "base: CPU only: AMD EPYC (2 logical cores) (from manifest.json), rank 0 of 1, PyTorch 2.13.0+cpu" in term
