"""The markdown reporter: ``render(result, charts) -> str`` for pull-request comments."""
from __future__ import annotations

from typing import List, Mapping, Sequence

from ..escape import MD_CELL_MAX, clip, md_cell, md_code, md_html, md_text
from ..model import AnalysisResult, Comparison
from . import view
from .compare_view import KernelChangeRow, SideRow

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


def _side(s: SideRow) -> str:
    """A list item saying what one side ran on, device names as code."""
    names = ", ".join(md_code(d) for d in s.devices)
    devices = (f"CPU only: {names}" if s.cpu_only else names) if s.devices else md_text(s.devices_text)
    if s.devices_note:
        devices += f" ({md_text(s.devices_note)})"
    return f"- {s.role} {md_code(s.label)}: " + ", ".join([devices] + [md_text(x) for x in (s.ranks, s.torch, s.runtime)
                                                                        if x])


def _name_cell(name: str, note: str = "") -> str:
    """A table cell holding a name (as code) and a ``note``, within
    :data:`~hta_report.escape.MD_CELL_MAX` characters: the name is cut first."""
    if not note:
        return md_code(name, table=True)
    return f"{md_code(clip(name, max(MD_CELL_MAX - len(note) - 3, 1)), table=True)} ({md_text(note)})"


def _kernel_cell(k: KernelChangeRow) -> str:
    """The kernel table's first cell: the name and, for a group, its variants
    with their change, as many as fit in :data:`~hta_report.escape.MD_CELL_MAX`
    characters (then how many more: the HTML report lists them all)."""
    if not k.variants:
        return _name_cell(k.name, k.note)
    name = clip(k.name, MD_CELL_MAX // 2)
    room = MD_CELL_MAX - len(name) - len(f" ({k.note}: )") - len(f", {len(k.variants)} more")
    shown: list[str] = []
    for x in k.variants:
        label = clip(x.name, max(room - len(x.change) - 1, 1))
        if shown and len(label) + len(x.change) + 3 > room:
            break
        shown.append(f"{md_code(label, table=True)} {x.change}")
        room -= len(label) + len(x.change) + 3
    more = len(k.variants) - len(shown)
    return (f"{md_code(name, table=True)} ({md_text(k.note)}: " + ", ".join(shown)
            + (f", {more} more" if more else "") + ")")


def render_comparison(c: Comparison) -> str:
    """Verdict, what each side ran on (and how the sides differ), the biggest
    changes (ranked), findings that appeared or went away, kernels that
    changed most (short names, template variants grouped), CPU ops whose
    time per step changed most, all metrics and per-rank tables, as
    GitHub-flavoured markdown. Names are code spans; no table cell is
    longer than :data:`~hta_report.escape.MD_CELL_MAX` characters."""
    from .compare_view import context

    v = context(c)
    lines = [f"## hta-report compare: {md_text(v.base_name)} → {md_text(v.new_name)}", "",
             f"**Verdict: {v.verdict}** — {v.verdict_text}", ""]
    if v.sides:
        lines += [_side(s) for s in v.sides] + [""]
    else:
        lines += [f"base: {md_code(v.base_label)} · new: {md_code(v.new_label)}", ""]
    if v.differences:
        lines += ["> [!WARNING]", "> **Not like for like:**", ">"] + [f"> - {md_text(d)}" for d in v.differences]
        lines.append("")
    if v.statistical:
        if v.environment_text:
            lines += [f"> {md_text(v.environment_text)}", ""]
        lines += [f"{md_text(v.stat_text)}", "", f"_{md_text(v.test_text)} {md_text(v.step_text)}_", ""]
        if v.stat_note:
            lines += [f"_{md_text(v.stat_note)}._", ""]
        lines += [
                  "### What changed", ""]
        if v.items:
            lines += ["| item | base / step | new / step | change / step [95 %] | per instance [95 %] | q |",
                      "|---|---:|---:|---:|---:|---:|"]
            lines += [f"| {md_cell(i.kind)} {md_code(i.full, table=True)}{(' ' + md_code(i.shape, table=True)) if i.shape else ''}"
                      f"{(' (' + i.status + ')') if i.status != 'changed' else ''} | {i.base} | {i.new} | "
                      f"**{i.change}** | {i.pct} | {i.q} |" for i in v.items]
        else:
            lines.append(v.no_items)
        lines.append("")
    elif v.stat_note:
        lines += [f"_{md_text(v.stat_note)}._", ""]
    lines += ["### Biggest changes", ""]
    if v.biggest:
        lines += ["| metric | base | new | change |", "|---|---:|---:|---:|"]
        lines += [f"| {md_cell(m.name)}{' (' + md_cell(m.where) + ')' if m.where else ''} | {m.base} | "
                  f"{m.new} | **{m.change}** |" for m in v.biggest]
    if v.nothing_else:
        lines += ["", v.nothing_else] if v.biggest else [v.nothing_else]
    if v.biggest_kernels:
        lines += ["", "Kernels that changed most: " + "; ".join(
            f"{k.change} {md_code(k.name)} ({k.base} → {k.new}{', ' + md_text(k.note) if k.note else ''})"
            for k in v.biggest_kernels)]
    if v.biggest_cpu_ops:
        lines += ["", "CPU ops that changed most (self time per step): " + "; ".join(
            f"{o.change} {md_code(clip(o.name))} ({o.base} → {o.new}{', ' + md_text(o.note) if o.note else ''})"
            for o in v.biggest_cpu_ops)]
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
        lines += [f"| {_kernel_cell(k)} | {k.base} | {k.new} | {k.change} |" for k in v.kernels]
    lines += ["", "### CPU ops whose time per step changed most", ""]
    if not v.cpu_ops:
        lines.append(v.no_cpu_ops)
    else:
        lines += ["| op | base | new | change |", "|---|---:|---:|---:|"]
        lines += [f"| {_name_cell(o.name, o.note)} | {o.base} | {o.new} | {o.change} |" for o in v.cpu_ops]
        lines += ["", f"_{md_text(v.cpu_ops_note)}_"]
    lines += ["", "<details><summary>All metrics</summary>", "", "| metric | base | new | change |",
              "|---|---:|---:|---:|"]
    lines += [f"| {md_cell(m.name)} | {m.base} | {m.new} | {m.change} |" for m in v.overall]
    lines += ["", "</details>"]
    for r in v.ranks:
        lines += ["", f"<details><summary>{md_html(r.label)}</summary>", "", "| metric | base | new | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {md_cell(m.name)} | {m.base} | {m.new} | {m.change} |" for m in r.rows]
        lines += ["", "</details>"]
    return fit("\n".join(lines) + "\n")


#: The command that writes ``docs/RULES.md`` (its first lines say so).
RULES_DOC_COMMAND = "hta-report rules --format markdown > docs/RULES.md"


def catalogue_markdown(entries: Sequence[Mapping[str, object]]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as the
    document ``docs/RULES.md``: an index table (id, what it finds, when it
    fires), then one section per rule, headed by its id (so that
    ``docs/RULES.md#<id>`` links to it): what it checks, the threshold and its
    source, the fix, the replayed edit behind its prediction (or none), its
    documentation and the number saved results keep in their ``rule`` field."""
    lines = ["# Rule catalogue", "",
             f"<!-- generated: refresh with `{RULES_DOC_COMMAND}` (a test checks it) -->", "",
             "Every rule of hta-report's advice, in the order the reports list them. A rule's id is its one "
             "name: the reports show it, SARIF results carry it as `ruleId`, and `disable = [...]` in "
             "`[tool.hta-report]` (or `--config FILE.toml`) takes it. \"Fires when\" gives the default "
             "thresholds (`hta-report rules --config FILE.toml` shows yours); \"proposal\" marks a threshold "
             "with no published source. A finding's estimated gain is an upper bound of the time per step "
             "saved if its cause were removed. A rule with a replayed edit also predicts the step time after "
             "its fix: the trace's execution graph replayed with that edit (`Finding.whatif`). A finding's "
             "severity (`high_pct`, `medium_pct`) follows what its fix is expected to save: the predicted "
             "saving where there is one (at most the bound), else the bound; findings are listed by severity, "
             "then by gain.",
             "", "| id | finds | fires when |", "| --- | --- | --- |"]
    lines += [f"| [`{e['id']}`](#{e['id']}) | {_cell(e['title'])} | {_cell(e['threshold'])} |" for e in entries]
    for e in entries:
        off = "" if e["enabled"] else " (disabled by the configuration)"
        lines += ["", f"## {e['id']}", "", f"**{e['title']}**{off}", "",
                  f"- **Checks:** {e['description']}", f"- **Fires when:** {e['threshold']}",
                  f"- **Source of the threshold:** {e['source']}", f"- **Fix:** {e['fix']}"]
        if e.get("edit"):
            lines.append(f"- **Prediction:** the replay's edit `{e['edit']}`")
        else:
            lines.append("- **Prediction:** none: the gain is an upper bound")
        if e["doc_url"]:
            lines.append(f"- **Documentation:** <{e['doc_url']}>")
        lines.append(f"- **In saved results:** findings and checks of this rule carry `\"rule\": \"{e['rule']}\"` "
                     "beside the id (the number earlier versions showed)")
    return "\n".join(lines) + "\n"
