"""The short summary printed to the terminal after a report is written."""
from __future__ import annotations

from typing import List, Mapping, Sequence

from ..escape import terminal
from ..model import AnalysisResult, Comparison
from . import fmt, view


def render(result: AnalysisResult, written: List[str]) -> str:
    """A few lines: the terminal lines of the report's sections
    (:data:`hta_report.render.view.SECTIONS`: headline figures, top
    findings), then the files written."""
    lines: List[str] = []
    for section in view.report(result, shown_in="terminal").sections:
        lines += section.terminal()
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
    """A few lines after ``compare``: the verdict, what each side ran on and
    a warning per way they differ, the CPU ops that changed most when no
    kernel did, findings that appeared or went away, files written."""
    from .compare_view import BIGGEST_CPU_OPS, cpu_op_rows, environment_text, interval_text, side_rows, verdict_figure

    change = fmt.fixed(c.step_time_change_pct, 1, sign=True, grouped=False)
    st = c.stats
    lines = [f"{terminal(c.verdict)}: {terminal(verdict_figure(c))} {change} % "
             f"(noise band ±{fmt.fixed(c.noise_band_pct, 1, grouped=False)} %)"]
    lines += [f"{s.role}: {terminal(s.line)}" for s in side_rows(c)]
    lines += [f"warning: {terminal(d)}" for d in c.differences]
    if st.method == "statistical" and st.step_method:
        lines.append(f"statistical test: {terminal(st.verdict)}, {interval_text(st)} "
                     f"(95 % interval, threshold ±{fmt.fixed(st.threshold_pct, 1, grouped=False)} %; "
                     f"{st.items_significant} of {st.items_tested} items changed)")
    elif st.method == "statistical":
        lines.append(f"statistical test: {terminal(st.verdict)}: {terminal(st.note)}")
    if st.method == "statistical" and st.environment_named:
        lines.append(terminal(environment_text(st)))
    if st.method == "statistical" and st.items:
        lines.append("what changed (per step): " + "; ".join(
            f"{'+' if i.us_per_step >= 0 else '−'}{fmt.ms(abs(i.us_per_step))} {terminal(i.name)}"
            f"{'' if i.status == 'changed' else ' (' + i.status + ')'}" for i in st.items[:3]))
    if not c.kernels and c.cpu_ops:
        lines.append("CPU ops that changed most (self time per step): " + "; ".join(
            f"{o.change} {terminal(o.name)}" for o in cpu_op_rows(c.cpu_ops[:BIGGEST_CPU_OPS])))
    lines.append(f"findings appeared: {len(c.findings_appeared)}, went away: {len(c.findings_gone)}")
    lines += [f"wrote {terminal(p)}" for p in written]
    return "\n".join(lines)


def catalogue_text(entries: Sequence[Mapping[str, object]]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as plain text,
    one block per rule, headed by its id (the rule's one name)."""
    lines = []
    for e in entries:
        state = "  [disabled]" if not e["enabled"] else ""
        lines.append(f"{e['id']}{state}")
        lines.append(f"    {e['title']}")
        lines.append(f"    fires when: {e['threshold']}")
        lines.append(f"    source: {e['source']}")
    lines.append(f"{len(entries)} rules; thresholds from [tool.hta-report] in pyproject.toml or --config FILE.toml; "
                 "what each checks and its fix: hta-report rules --format markdown (docs/RULES.md)")
    return "\n".join(lines)
