"""The markdown reporter: ``render(result, charts) -> str`` for pull-request comments."""
from __future__ import annotations

from typing import Dict, List, Mapping

from ..errors import one_line
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


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: Characters that could start markup in GitHub-flavoured markdown.
_MD_SPECIAL = {c: "\\" + c for c in "\\`*_[]<>&|~#"}


def _md_text(text: str) -> str:
    """Trace-derived or free text made inert in markdown prose and table cells:
    markup characters backslash-escaped (``<script>`` shows as text, never as
    HTML), line breaks turned into spaces."""
    return "".join(_MD_SPECIAL.get(c, c) for c in one_line(str(text)))


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """Headline, findings and the per-rank table as GitHub-flavoured markdown
    (no charts: ``charts`` is unused)."""
    h = view.headline(result)
    lines = ["## hta-report", ""]
    if h["has_gpu"]:
        lines.append(
            f"**GPU busy {h['busy']}**, idle {h['idle']} of GPU time (all streams together: host wait "
            f"{h['idle_host']}, kernel wait {h['idle_kernel']}, other {h['idle_other']}) · mean step {h['mean_step']} · "
            f"{h['ranks']} rank(s) · {_md_text(h['devices'])}"
        )
    else:
        lines.append(f"No GPU activity in the traces · mean step {h['mean_step']} · {h['ranks']} rank(s)")
    bad = view.unreadable(result)
    if bad["count"]:
        lines += ["", f"**{bad['summary']}:**", ""]
        lines += [f"- {_md_text(u['path'])}: {_md_text(u['reason'])}" for u in bad["files"]]
    lines += ["", "### Findings", ""]
    findings = view.findings(result)
    if not findings:
        lines.append("No rule fired: the run looks healthy on what was checked (below).")
    for f in findings:
        lines.append(f"- **[{f['severity']}] {_md_text(f['title'])}** (`{f['id']}`, {f['rule']}): {f['gain']}")
        for e in f["evidence"]:
            lines.append(f"  - {_md_text(e)}")
        if f["fix"]:
            lines += ["", "  ```python"] + [f"  {line}" for line in f["fix"].splitlines()] + ["  ```", ""]
    lines += ["", f"<details><summary>What was checked ({view.check_counts(result)})</summary>", "",
              "| rule | id | status | detail |", "|---|---|---|---|"]
    for c in view.checks(result):
        lines.append(f"| {c['rule']} | `{c['id']}` | {c['status']} | {_cell(c['detail'])} |")
    lines += ["", "</details>"]
    lines += ["", "### Per rank", "",
              "| rank | steps | mean step | GPU busy | idle | DataLoader | sync | exposed comm |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in view.rank_rows(result):
        lines.append(f"| {r['rank']} | {r['steps']} | {r['mean_step']} | {r['busy']} | {r['idle']} | "
                     f"{r['dataloader']} | {r['sync']} | {r['exposed_comm']} |")
    return fit("\n".join(lines) + "\n")


def render_comparison(c: Comparison) -> str:
    """Verdict, overall table, findings that appeared or went away, kernels
    that changed most and per-rank tables, as GitHub-flavoured markdown."""
    from .compare_view import context

    v = context(c)
    lines = ["## hta-report compare", "", f"**Verdict: {v['verdict']}** — {v['verdict_text']}", "",
             f"base: `{_cell(v['base_label'])}` · new: `{_cell(v['new_label'])}`", "",
             "| metric | base | new | change |", "|---|---:|---:|---:|"]
    lines += [f"| {_cell(m['name'])} | {m['base']} | {m['new']} | {m['change']} |" for m in v["overall"]]
    lines += ["", "### Findings", ""]
    lines += [f"- appeared: **[{f['severity']}] {_cell(f['title'])}** (`{f['id']}`)" for f in v["appeared"]]
    lines += [f"- went away: [{f['severity']}] {_cell(f['title'])} (`{f['id']}`)" for f in v["gone"]]
    if v["kept"]:
        lines.append(f"- on both sides: {', '.join(v['kept'])}")
    if not (v["appeared"] or v["gone"] or v["kept"]):
        lines.append("No findings on either side.")
    if v["kernels"]:
        lines += ["", "### Kernels whose total time changed most", "", "| kernel | base | new | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| `{_cell(k['name'][:120])}` | {k['base']} | {k['new']} | {k['change']} |" for k in v["kernels"]]
    for r in v["ranks"]:
        lines += ["", f"<details><summary>{_cell(r['label'])}</summary>", "", "| metric | base | new | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {_cell(m['name'])} | {m['base']} | {m['new']} | {m['change']} |" for m in r["rows"]]
        lines += ["", "</details>"]
    return fit("\n".join(lines) + "\n")


def catalogue_markdown(entries: List[Dict]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as the
    README's markdown table: rule, id, when it fires, source of the threshold."""
    lines = ["| rule | id | fires when | source of the threshold |", "| --- | --- | --- | --- |"]
    lines += [f"| {e['rule']} | `{e['id']}` | {_cell(e['threshold'])} | {_cell(e['source'])} |" for e in entries]
    return "\n".join(lines) + "\n"
