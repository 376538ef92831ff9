"""The short summary printed to the terminal after a report is written."""
from __future__ import annotations

from typing import Dict, List

from ..escape import terminal
from ..model import AnalysisResult, Comparison
from . import fmt, view


def render(result: AnalysisResult, written: List[str]) -> str:
    """A few lines: headline figures, top findings, files written."""
    h = view.headline(result)
    run = view.run(result)
    lines = []
    if h["has_gpu"]:
        causes = ", ".join(f"{c['label']} {c['pct']}" for c in h["idle_causes"])
        lines.append(f"GPU busy {h['busy']} {h['window']} (kernels {h['kernels']}), idle {h['idle']}"
                     + (f" ({terminal(causes)})" if causes else ""))
        lines += [f"read with care: {terminal(n)}" for n in h["integrity"]]
    else:
        lines.append("No GPU activity in the traces (CPU-side metrics only)")
    step = f"mean step {h['mean_step']}" if not h["steps_note"] else h["steps_note"]
    lines.append(f"{terminal(run['name'])}: {run['ranks']}, {step}, devices: {terminal(run['devices'])}")
    if run["world_note"]:
        lines.append(terminal(run["world_note"]))
    bad = view.unreadable(result)
    if bad["count"]:
        lines.append(f"{bad['summary']} (listed in the report)")
    part = view.incomplete(result)
    if part["count"]:
        lines.append(f"{part['summary']} (listed in the report)")
    lines += [terminal(n) for n in view.reading_notes(result)]
    findings = view.findings(result)
    if findings:
        top = [f for f in findings if f["gain_pct"] >= view.TOP_MIN_GAIN_PCT]
        small = len(findings) - len(top)
        top = top[:5]
        lines.append(f"{fmt.plural(len(findings), 'finding')}" + (f", {small} below 1 % of the step or without a gain"
                                                                   if small else "") + ":")
        for f in top:
            lines.append(f"  [{terminal(f['severity'])}] {terminal(f['title'])} ({f['gain']})")
            if f["lines"]:  # the line with the largest share of its time
                line = f["lines"][0]
                lines.append(f"      at {terminal(line['label'])} in {terminal(line['function'])} "
                             f"({line['share']} of its time)")
    else:
        lines.append(terminal(view.no_findings(result)))
    lines += [f"wrote {terminal(p)}" for p in written]
    return "\n".join(lines)


def incomplete_lines(result: AnalysisResult) -> List[str]:
    """The stderr lines naming each trace left out (``hta-report: unreadable:
    FILE: REASON``) and each analysis step that failed on a rank
    (``hta-report: not computed: FILE: STEP: REASON``)."""
    lines = [f"hta-report: unreadable: {terminal(u.path)}: {terminal(u.reason)}" for u in result.inventory.unreadable]
    lines += [f"hta-report: not computed: {terminal(r.file)}: {terminal(f.step)}: {terminal(f.reason)}"
              for r in result.ranks for f in r.failures]
    return lines


def replaced_lines(result: AnalysisResult) -> List[str]:
    """The stderr lines naming each HTA analysis hta-report computed itself
    where HTA's failed (``hta-report: replaced: FILE: STEP: REASON``)."""
    return [f"hta-report: replaced: {terminal(r.file)}: {terminal(f.step)}: {terminal(f.reason)}; computed by "
            "hta-report from the exact times" for r in result.ranks for f in r.replaced]


def comparison_summary(c: Comparison, written: List[str]) -> str:
    """A few lines after ``compare``: the verdict, findings that appeared or went away, files written."""
    change = fmt.fixed(c.step_time_change_pct, 1, sign=True, grouped=False)
    lines = [f"{terminal(c.verdict)}: mean step time {change} % "
             f"(noise band ±{fmt.fixed(c.noise_band_pct, 1, grouped=False)} %)",
             f"findings appeared: {len(c.findings_appeared)}, went away: {len(c.findings_gone)}"]
    lines += [f"wrote {terminal(p)}" for p in written]
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
