"""The markdown reporter: ``render(result, charts) -> str`` for pull-request comments."""
from __future__ import annotations

from typing import List, Mapping, Sequence

from ..escape import md_code, md_html, md_text
from ..model import AnalysisResult, Comparison
from . import view

#: GitHub's limit on a pull-request comment (characters).
GITHUB_COMMENT_LIMIT = 65_536


def fit(text: str, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """``text`` cut at a line boundary so that it stays under ``limit``
    characters, with a note saying so; unchanged when it fits."""
    if len(text) < limit:
        return text
    note = "\n\n_… truncated to fit a pull-request comment; the HTML report has everything._\n"
    cut = text.rfind("\n", 0, limit - len(note) - 1)
    return text[: max(cut, 0)] + note


def _cell(text: object) -> str:
    """Our own text (the rule catalogue) in a table cell: ``|`` escaped, one line.
    Trace-derived text goes through :mod:`hta_report.escape` instead."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """The report's sections (:data:`hta_report.render.view.SECTIONS`) that
    markdown shows, under a heading naming the run: headline, findings, the
    per-rank table, SM occupancy and memory, as GitHub-flavoured markdown
    (no charts: ``charts`` is unused)."""
    report = view.report(result, shown_in="markdown")
    lines = [f"## hta-report: {md_text(report.run.name)}"]
    for section in report.sections:
        lines += section.markdown()
    return fit("\n".join(lines) + "\n")


def render_comparison(c: Comparison) -> str:
    """Verdict, the biggest changes (ranked), findings that appeared or went
    away, kernels that changed most (short names, template variants
    grouped), all metrics and per-rank tables, as GitHub-flavoured markdown."""
    from .compare_view import context

    v = context(c)
    lines = [f"## hta-report compare: {md_text(v.base_name)} → {md_text(v.new_name)}", "",
             f"**Verdict: {v.verdict}** — {v.verdict_text}", "",
             f"base: {md_code(v.base_label)} · new: {md_code(v.new_label)}", "",
             "### Biggest changes", ""]
    if v.biggest:
        lines += ["| metric | base | new | change |", "|---|---:|---:|---:|"]
        lines += [f"| {md_text(m.name)}{' (' + md_text(m.where) + ')' if m.where else ''} | {m.base} | "
                  f"{m.new} | **{m.change}** |" for m in v.biggest]
    if v.nothing_else:
        lines += ["", v.nothing_else] if v.biggest else [v.nothing_else]
    if v.biggest_kernels:
        lines += ["", "Kernels that changed most: " + "; ".join(
            f"{k.change} {md_code(k.name)} ({k.base} → {k.new}{', ' + md_text(k.note) if k.note else ''})"
            for k in v.biggest_kernels)]
    lines += ["", "### Findings", ""]
    lines += [f"- appeared: **[{md_text(f.severity)}] {md_text(f.title)}** ({md_code(f.id)})"
              for f in v.appeared]
    lines += [f"- went away: [{md_text(f.severity)}] {md_text(f.title)} ({md_code(f.id)})" for f in v.gone]
    if v.kept:
        lines.append(f"- on both sides: {', '.join(md_code(k) for k in v.kept)}")
    if not (v.appeared or v.gone or v.kept):
        lines.append("No findings on either side.")
    lines += ["", "### Kernels whose total time changed most", ""]
    if not v.kernels:
        lines.append(v.no_kernels)
    else:
        lines += ["| kernel | base | new | change |", "|---|---:|---:|---:|"]
        for k in v.kernels:
            name = md_code(k.name, table=True)
            if k.variants:
                name += f" ({md_text(k.note)}: " + ", ".join(
                    f"{md_code(x.name, table=True)} {x.change}" for x in k.variants) + ")"
            elif k.note:
                name += f" ({md_text(k.note)})"
            lines.append(f"| {name} | {k.base} | {k.new} | {k.change} |")
    lines += ["", "<details><summary>All metrics</summary>", "", "| metric | base | new | change |",
              "|---|---:|---:|---:|"]
    lines += [f"| {md_text(m.name)} | {m.base} | {m.new} | {m.change} |" for m in v.overall]
    lines += ["", "</details>"]
    for r in v.ranks:
        lines += ["", f"<details><summary>{md_html(r.label)}</summary>", "", "| metric | base | new | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {md_text(m.name)} | {m.base} | {m.new} | {m.change} |" for m in r.rows]
        lines += ["", "</details>"]
    return fit("\n".join(lines) + "\n")


def catalogue_markdown(entries: Sequence[Mapping[str, object]]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as the
    README's markdown table: rule, id, when it fires, source of the threshold."""
    lines = ["| rule | id | fires when | source of the threshold |", "| --- | --- | --- | --- |"]
    lines += [f"| {e['rule']} | `{e['id']}` | {_cell(e['threshold'])} | {_cell(e['source'])} |" for e in entries]
    return "\n".join(lines) + "\n"
