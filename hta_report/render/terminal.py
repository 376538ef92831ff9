"""The short summary printed to the terminal after a report is written."""
from __future__ import annotations

from typing import Dict, List

from ..model import AnalysisResult
from . import view


def _plain(text: str) -> str:
    """Trace-derived text for a terminal: control characters (escape sequences
    could restyle or clear the terminal) and line breaks shown escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in str(text))


def render(result: AnalysisResult, written: List[str]) -> str:
    """A few lines: headline figures, top findings, files written."""
    h = view.headline(result)
    lines = []
    if h["has_gpu"]:
        lines.append(f"GPU busy {h['busy']}, idle {h['idle']} of GPU time (all streams together: host wait "
                     f"{h['idle_host']}, kernel wait {h['idle_kernel']}, other {h['idle_other']})")
    else:
        lines.append("No GPU activity in the traces (CPU-side metrics only)")
    lines.append(f"{h['ranks']} rank(s), mean step {h['mean_step']}, devices: {_plain(h['devices'])}")
    bad = view.unreadable(result)
    if bad["count"]:
        lines.append(f"{bad['summary']} (listed in the report)")
    findings = view.findings(result)
    if findings:
        top = [f for f in findings if f["gain_pct"] >= view.TOP_MIN_GAIN_PCT]
        small = len(findings) - len(top)
        top = top[:5]
        lines.append(f"{len(findings)} finding(s)" + (f", {small} below 1 % of the step or without a gain" if small
                                                      else "") + ":")
        lines += [f"  [{f['severity']}] {_plain(f['title'])} ({f['gain']})" for f in top]
    else:
        lines.append("No rule fired: the run looks healthy on what was checked.")
    lines += [f"wrote {p}" for p in written]
    return "\n".join(lines)


def catalogue_text(entries: List[Dict]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as plain text,
    one block per rule."""
    lines = []
    for e in entries:
        state = "" if e["enabled"] else "  [disabled]"
        lines.append(f"{e['rule']:<4} {e['id']}{state}")
        lines.append(f"     {e['title']}")
        lines.append(f"     fires when: {e['threshold']}")
        lines.append(f"     source: {e['source']}")
    lines.append(f"{len(entries)} rules; thresholds from [tool.hta-report] in pyproject.toml or --config FILE.toml")
    return "\n".join(lines)
