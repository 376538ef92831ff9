"""Display strings for a :class:`~hta_report.model.Comparison` (HTML and markdown)."""
from __future__ import annotations

from typing import Any, Dict, List

from ..model import Comparison, MetricDelta
from . import fmt


def _value(unit: str, v: float) -> str:
    return f"{v:,.2f} ms" if unit == "ms" else fmt.pct(v)


def _change(m: MetricDelta) -> str:
    if m.unit == "ms":
        return f"{round(m.delta, 2) + 0.0:+,.2f} ms ({round(m.delta_pct, 1) + 0.0:+.1f} %)"
    return f"{round(m.delta, 1) + 0.0:+.1f} pp"  # + 0.0 turns -0.0 into 0.0


def metric_rows(metrics: List[MetricDelta]) -> List[Dict[str, str]]:
    """Rows of metric, base, new, change."""
    return [{"name": m.name, "base": _value(m.unit, m.base), "new": _value(m.unit, m.new), "change": _change(m)}
            for m in metrics]


def context(c: Comparison) -> Dict[str, Any]:
    """Everything the compare template and markdown show, formatted."""
    verdict_text = {
        "improved": f"faster: mean step time {c.step_time_change_pct:+.1f} %, beyond the ±{c.noise_band_pct:.1f} % noise band",
        "regressed": f"slower: mean step time {c.step_time_change_pct:+.1f} %, beyond the ±{c.noise_band_pct:.1f} % noise band",
        "unchanged": f"mean step time {c.step_time_change_pct:+.1f} %, within the ±{c.noise_band_pct:.1f} % noise band",
        "not comparable": "no ProfilerStep annotations on one side: step times cannot be compared",
    }[c.verdict]
    return {
        "base_label": c.base_label, "new_label": c.new_label,
        "verdict": c.verdict, "verdict_text": verdict_text,
        "noise_band": fmt.pct(c.noise_band_pct),
        "overall": metric_rows(c.overall),
        "ranks": [{"label": f"rank {r.rank}" if r.rank == r.new_rank else f"rank {r.rank} → rank {r.new_rank}",
                   "rows": metric_rows(r.metrics)} for r in c.ranks],
        "only_base": ", ".join(str(r) for r in c.ranks_only_base),
        "only_new": ", ".join(str(r) for r in c.ranks_only_new),
        "kernels": [{"name": k.name, "type": k.kernel_type, "base": fmt.ms(k.base_us), "new": fmt.ms(k.new_us),
                     "change": ("+" if k.delta_us >= 0 else "−") + fmt.ms(abs(k.delta_us))} for k in c.kernels],
        "appeared": [{"id": f.id, "title": f.title, "severity": f.severity} for f in c.findings_appeared],
        "gone": [{"id": f.id, "title": f.title, "severity": f.severity} for f in c.findings_gone],
        "kept": list(c.findings_kept),
    }
