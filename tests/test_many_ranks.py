"""Jobs of many ranks (issue 34): past ``view.RANKS_SHOWN`` ranks the reports show
the worst ranks one by one, each column's spread over every rank, and leave
the others to the JSON result, so that no report grows with the ranks as a
rank's table row and section do. Results are built here, without traces."""
from __future__ import annotations

import json
import re
from typing import Dict, List

import pytest

from hta_report.model import (AnalysisResult, CommSummary, CpuSide, IdleAttribution, Inventory, KernelStat,
                              RankResult, StepBreakdown, StepStats, StepTime, TraceFileInfo)
from hta_report.render import fmt, html, jsonreport, markdown, terminal, view
from hta_report.render.charts import MAX_RANK_CHARTS, chart_specs

WINDOW_US = 100_000.0  # one analyzed step of 100 ms


def _idle_fraction(r: int) -> float:
    """Each rank's GPU idle share, distinct up to 1,000 ranks (919 is prime to
    1,000) and in a shuffled order, so that the worst ranks are not the last;
    a rank's figures do not depend on the number of ranks."""
    return 0.1 + 0.8 * ((r * 919) % 1000) / 1000


def _rank(r: int) -> RankResult:
    idle = WINDOW_US * _idle_fraction(r)
    busy = WINDOW_US - idle
    steps = [StepTime(number=s, duration_us=WINDOW_US * (1 + 0.01 * ((r + s) % 5)), warmup=s == 0) for s in range(6)]
    kernels = [KernelStat(name=f"void gemm_kernel_{k}<float, 128>(float*, int)", kernel_type="compute", count=100,
                          total_us=busy / (k + 2), mean_us=busy / (k + 2) / 100, max_us=50.0, pct=100 / (k + 2))
               for k in range(3)]
    return RankResult(
        rank=r, file=f"/traces/job/rank-{r}.pt.trace.json.gz", device_names=["NVIDIA H100 80GB HBM3"], has_gpu=True,
        gpu_span_us=5 * WINDOW_US, gpu_span_busy_pct=100 * busy / WINDOW_US, window_us=WINDOW_US, steps_used=5,
        steps=StepStats(count=6, mean_us=WINDOW_US, p50_us=WINDOW_US, p90_us=1.04 * WINDOW_US, max_us=1.05 * WINDOW_US,
                        warmup_excluded=True, steps=steps),
        idle_attribution=IdleAttribution(kernel_busy_us=busy, busy_us=busy, idle_us=idle, stream_wait_us=idle / 2,
                                         unattributed_us=idle / 2),
        step_breakdown=[StepBreakdown(number=s.number, duration_us=s.duration_us, kernel_us=busy,
                                      other_us=s.duration_us - busy, warmup=s.warmup) for s in steps],
        top_kernels=kernels, kernel_count=3, comm=CommSummary(exposed_us_per_step=(r % 7) * 100.0),
        cpu=CpuSide(dataloader_pct=(r % 11) * 0.5, sync_pct=(r % 3) * 1.0))


def _result(n: int) -> AnalysisResult:
    ranks = [_rank(r) for r in range(n)]
    files = [TraceFileInfo(path=r.file, rank=r.rank, rank_source="distributedInfo", size_bytes=10_000_000,
                           world_size=n) for r in ranks]
    result = AnalysisResult(inventory=Inventory(input_dir="/traces/job", files=files, steps_found=6,
                                                tool_version="0", hta_version="0", analyzed_at="now"), ranks=ranks)
    result.aggregate.ranks = n
    result.aggregate.gpu_ranks = n
    return result


def _worst_first(result: AnalysisResult) -> List[int]:
    """Rank numbers, most GPU idle (% of the analyzed steps) first: the documented criterion."""
    return [r.rank for r in sorted(result.ranks, key=lambda r: -r.idle_pct)]


def _section(page: str, section_id: str) -> str:
    start = page.index(f'<section id="{section_id}">')
    return page[start:page.index("</section>", start)]


def _rank_table_rows(page: str) -> List[str]:
    """The first cell of each row of the per-rank table's body (rank numbers, then the spread's)."""
    body = _section(page, "ranks").split("<tbody", 1)[1]
    return [re.sub(r"</?em>", "", cell) for cell in re.findall(r"<tr><td>(.*?)</td>", body)]


def _md_rank_rows(text: str) -> List[str]:
    part = text.split("### Per rank", 1)[1].split("\n### ", 1)[0]
    return [line.split("|")[1].strip().strip("_") for line in part.splitlines()
            if line.startswith("| ") and not line.startswith("| rank ")]


def _rendered(n: int) -> Dict[str, str]:
    result = _result(n)
    return {"html": html.render(result, {}), "md": markdown.render(result, {}),
            "terminal": terminal.render(result, ["report.html"]), "json": jsonreport.render(result, {})}


def test_below_the_limit_every_rank_is_shown_in_its_order():
    n = 8
    assert n <= view.RANKS_SHOWN
    out = _rendered(n)
    assert _rank_table_rows(out["html"]) == [str(r) for r in range(n)]
    assert re.findall(r'<section id="rank-(\d+)">', out["html"]) == [str(r) for r in range(n)]
    assert _md_rank_rows(out["md"]) == [str(r) for r in range(n)]
    for text in out.values():
        assert "more ranks" not in text
    assert 'class="spread"' not in out["html"]


@pytest.fixture(scope="module")
def many() -> Dict[str, object]:
    n = 300
    result = _result(n)
    return {"n": n, "result": result, "worst": _worst_first(result), **_rendered(n)}


def test_past_the_limit_the_table_shows_the_worst_ranks_then_the_spread(many):
    n, worst, page = many["n"], many["worst"], many["html"]
    shown = [str(r) for r in worst[:view.RANKS_SHOWN]]
    assert _rank_table_rows(page) == shown + [name for name, _ in view.SPREAD]
    assert _md_rank_rows(many["md"]) == shown + [name for name, _ in view.SPREAD]
    more = f"{n - view.RANKS_SHOWN} more ranks: in the JSON result"
    assert more in page and more in many["md"]


def test_past_the_limit_only_the_shown_ranks_have_a_section(many):
    worst, page = many["worst"], many["html"]
    sections = re.findall(r'<section id="rank-(\d+)">', page)
    assert sections == [str(r) for r in worst[:view.RANKS_SHOWN]]
    assert f'<section id="rank-{worst[0]}">' in page  # the worst rank
    assert f'<section id="rank-{worst[len(worst) // 2]}">' not in page  # a middling one
    assert f"rank-{worst[len(worst) // 2]}.pt.trace" in _section(page, "inventory")  # still listed as a file


def test_the_spread_covers_every_rank(many):
    result, page = many["result"], many["html"]
    idle = sorted(r.idle_pct for r in result.ranks)
    spread = _section(page, "ranks").split('class="spread"', 1)[1]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", spread)]
    idle_column = 7  # rank, device, steps, mean step, p90 step, busy, kernels, idle
    assert [c[idle_column] for c in cells] == [fmt.pct(idle[0]), fmt.pct(view.quantile(idle, 0.5)),
                                               fmt.pct(view.quantile(idle, 0.9)), fmt.pct(idle[-1])]
    assert view.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and view.quantile([5.0], 0.9) == 5.0


def test_charts_draw_the_shown_ranks_and_the_mean_of_all(many):
    result, worst = many["result"], many["worst"]
    specs = {name: args for name, _, args, _ in chart_specs(result)}
    labels = specs["gpu_time"][0]
    assert labels == [f"rank {r}" for r in worst[:view.RANKS_SHOWN]] + [f"mean of all {many['n']} ranks"]
    kernels = specs["gpu_time"][1]["kernels"]
    assert kernels[-1] == pytest.approx(sum(r.kernel_busy_pct for r in result.ranks) / many["n"])
    assert set(specs["steps"][0]) == {f"rank {r}" for r in worst[:view.RANKS_SHOWN]}
    per_rank = {name.split("/")[1] for name in specs if name.startswith("step_breakdown/") and "@" not in name}
    assert per_rank == {str(r) for r in worst[:MAX_RANK_CHARTS]}


def test_rendered_text_grows_less_than_the_ranks():
    """Past the limit, a rank adds no table row and no section: what it still
    adds (its line in the inventory of files) is a small part of what a rank
    adds below the limit; the JSON result keeps every rank, and its bytes per
    rank do not grow with the ranks."""
    small, limit, mid, big = (_rendered(n) for n in (8, view.RANKS_SHOWN, 100, 300))
    for fmt_name in ("html", "md", "terminal", "json"):
        size = {n: len(out[fmt_name].encode()) for n, out in ((8, small), (view.RANKS_SHOWN, limit), (100, mid),
                                                               (300, big))}
        if fmt_name == "json":  # every rank, each as long whatever the number of ranks
            assert json.loads(big["json"])["ranks"][:100] == json.loads(mid["json"])["ranks"]
            continue
        assert size[300] / 300 <= size[100] / 100, fmt_name
        below = (size[view.RANKS_SHOWN] - size[8]) / (view.RANKS_SHOWN - 8)  # bytes one more rank adds
        above = (size[300] - size[100]) / 200
        assert above <= max(below / 10, 1), (fmt_name, below, above)
