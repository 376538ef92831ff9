"""The markdown reporter: ``render(result, charts) -> str`` for pull-request comments."""
from __future__ import annotations

from typing import Dict, List, Mapping

from ..escape import md_code, md_code_block, md_html, md_text
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
    """Our own text (the rule catalogue) in a table cell: ``|`` escaped, one line.
    Trace-derived text goes through :mod:`hta_report.escape` instead."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """Headline (under a heading naming the run), findings and the per-rank
    table as GitHub-flavoured markdown (no charts: ``charts`` is unused)."""
    h = view.headline(result)
    run = view.run(result)
    step = f"mean step {h['mean_step']}" if not h["steps_note"] else h["steps_note"]
    lines = [f"## hta-report: {md_text(run['name'])}", ""]
    if h["has_gpu"]:
        lines.append(f"**GPU busy {h['busy']}** {h['window']} (kernels {h['kernels']}), idle {h['idle']}"
                     f"{idle_causes(h)} · {step} · {run['ranks']} · {md_text(run['devices'])}")
    else:
        lines.append(f"No GPU activity in the traces (CPU-side metrics only) · {step} · {run['ranks']} · "
                     f"{md_text(run['devices'])}")
    if h["has_gpu"] and h["integrity"]:
        lines += ["", "**Read the GPU figures with care:**", ""] + [f"- {md_text(n)}" for n in h["integrity"]]
    lines += ["", md_code(run["input"]) + (f" · {md_text(run['workload'])}" if run["workload"] else "")]
    if run["world_note"]:
        lines += ["", f"> {md_text(run['world_note'])}"]
    bad = view.unreadable(result)
    if bad["count"]:
        lines += ["", f"**{bad['summary']}:**", ""]
        lines += [f"- {md_text(u['path'])}: {md_text(u['reason'])}" for u in bad["files"]]
    part = view.incomplete(result)
    if part["count"]:
        lines += ["", f"**{part['summary']}:**", ""]
        lines += [f"- rank {md_text(r['rank'])} ({md_text(r['file'])}): "
                  + "; ".join(f"{md_text(f['step'])}: {md_text(f['reason'])}" for f in r["failures"])
                  for r in part["ranks"]]
    if part["replaced"]:
        lines += ["", "**Replaced:**", ""] + [f"- {md_text(x)}" for x in part["replaced"]]
    reading = view.reading_notes(result)
    if reading:
        lines += ["", "**How the traces were read:**", ""] + [f"- {md_text(n)}" for n in reading]
    lines += ["", "### Findings", ""]
    findings = view.findings(result)
    if not findings:
        lines.append(md_text(view.no_findings(result)))
    for f in findings:
        lines.append(f"- **[{md_text(f['severity'])}] {md_text(f['title'])}** ({md_code(f['id'])}, "
                     f"{md_text(f['rule'])}): {f['gain']}")
        for e in f["evidence"]:
            lines.append(f"  - {md_text(e)}")
        for loc in f["lines"]:
            label = md_code(loc["label"])
            where = f"[{label}]({loc['url']})" if loc["url"] else label
            lines.append(f"  - your code: {where} in {md_code(loc['function'])}: {loc['time']} per step "
                         f"({loc['share']} of this finding's time), {md_text(loc['how'])}")
        if f["fix"]:
            lines += ["", md_code_block(f["fix"], "python", indent="  "), ""]
    note = view.stack_note(result)
    if note and findings:
        lines += ["", f"_{md_text(note)}_"]
    lines += ["", f"<details><summary>What was checked ({md_html(view.check_counts(result))})</summary>", "",
              "| rule | id | status | detail |", "|---|---|---|---|"]
    for c in view.checks(result):
        lines.append(f"| {md_text(c['rule'])} | {md_code(c['id'], table=True)} | {md_text(c['status'])} | "
                     f"{md_text(c['detail'])} |")
    lines += ["", "</details>"]
    lines += ["", "### Per rank", "",
              "| rank | steps | mean step | GPU busy | kernels | idle | DataLoader | sync | exposed comm |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in view.rank_rows(result):
        lines.append(f"| {r['rank']} | {r['steps']} | {r['mean_step']} | {r['busy']} | {r['kernels']} | {r['idle']} | "
                     f"{r['dataloader']} | {r['sync']} | {r['exposed_comm']} |")
    if h["has_gpu"]:
        lines += ["", f"_GPU figures are {md_text(h['window'])}, as the findings' gains. {md_text(h['span_note'])}_"]
    lines += _occupancy_and_memory(result)
    return fit("\n".join(lines) + "\n")


def idle_causes(h: dict) -> str:
    """``" (DataLoader 12.0 %, host ops 3.1 %)"``: the headline's largest idle causes, or ``""``."""
    causes = ", ".join(f"{c['label']} {c['pct']}" for c in h["idle_causes"])
    return f" ({causes})" if causes else ""


def _occupancy_and_memory(result: AnalysisResult) -> List[str]:
    """The per-rank SM occupancy and memory table (view's ``occupancy`` and
    ``memory``), or nothing when no rank has either."""
    rows = []
    for r in view.rank_details(result):
        o, m = r["occupancy"], r["memory"]
        if o.get("state") != "shown" and m.get("state") != "shown":
            continue
        occ = ((o["sm_efficiency"], o["occupancy"], f"{o['small_pct']} ({o['idle_sm']} SM time idle {o['per']})")
               if o.get("state") == "shown" else ("–", "–", md_text(o.get("reason", "–"))))
        main = next((d for d in m.get("devices", []) if d["device"] == m.get("device")), None)
        mem = ((md_text(main["device"]), main["allocated"], main["reserved"], main["capacity"]) if main
               else ("–", "–", "–", "not recorded"))
        rows.append(f"| {r['rank']} | {occ[0]} | {occ[1]} | {occ[2]} | {mem[0]} | {mem[1]} | {mem[2]} | {mem[3]} |")
    if not rows:
        return []
    return ["", "### SM occupancy and memory", "",
            "| rank | SM efficiency | achieved occupancy | kernels < 1 block/SM (% of compute kernel time) | device "
            "| peak allocated | peak reserved | device memory |",
            "|---:|---:|---:|---|---|---:|---:|---:|"] + rows


def render_comparison(c: Comparison) -> str:
    """Verdict, the biggest changes (ranked), findings that appeared or went
    away, kernels that changed most (short names, template variants
    grouped), all metrics and per-rank tables, as GitHub-flavoured markdown."""
    from .compare_view import context

    v = context(c)
    lines = [f"## hta-report compare: {md_text(v['base_name'])} → {md_text(v['new_name'])}", "",
             f"**Verdict: {v['verdict']}** — {v['verdict_text']}", "",
             f"base: {md_code(v['base_label'])} · new: {md_code(v['new_label'])}", "",
             "### Biggest changes", ""]
    if v["biggest"]:
        lines += ["| metric | base | new | change |", "|---|---:|---:|---:|"]
        lines += [f"| {md_text(m['name'])}{' (' + md_text(m['where']) + ')' if m['where'] else ''} | {m['base']} | "
                  f"{m['new']} | **{m['change']}** |" for m in v["biggest"]]
    if v["nothing_else"]:
        lines += ["", v["nothing_else"]] if v["biggest"] else [v["nothing_else"]]
    if v["biggest_kernels"]:
        lines += ["", "Kernels that changed most: " + "; ".join(
            f"{k['change']} {md_code(k['name'])} ({k['base']} → {k['new']}{', ' + md_text(k['note']) if k['note'] else ''})"
            for k in v["biggest_kernels"])]
    lines += ["", "### Findings", ""]
    lines += [f"- appeared: **[{md_text(f['severity'])}] {md_text(f['title'])}** ({md_code(f['id'])})"
              for f in v["appeared"]]
    lines += [f"- went away: [{md_text(f['severity'])}] {md_text(f['title'])} ({md_code(f['id'])})" for f in v["gone"]]
    if v["kept"]:
        lines.append(f"- on both sides: {', '.join(md_code(k) for k in v['kept'])}")
    if not (v["appeared"] or v["gone"] or v["kept"]):
        lines.append("No findings on either side.")
    lines += ["", "### Kernels whose total time changed most", ""]
    if not v["kernels"]:
        lines.append(v["no_kernels"])
    else:
        lines += ["| kernel | base | new | change |", "|---|---:|---:|---:|"]
        for k in v["kernels"]:
            name = md_code(k["name"], table=True)
            if k["variants"]:
                name += f" ({md_text(k['note'])}: " + ", ".join(
                    f"{md_code(x['name'], table=True)} {x['change']}" for x in k["variants"]) + ")"
            elif k["note"]:
                name += f" ({md_text(k['note'])})"
            lines.append(f"| {name} | {k['base']} | {k['new']} | {k['change']} |")
    lines += ["", "<details><summary>All metrics</summary>", "", "| metric | base | new | change |",
              "|---|---:|---:|---:|"]
    lines += [f"| {md_text(m['name'])} | {m['base']} | {m['new']} | {m['change']} |" for m in v["overall"]]
    lines += ["", "</details>"]
    for r in v["ranks"]:
        lines += ["", f"<details><summary>{md_html(r['label'])}</summary>", "", "| metric | base | new | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {md_text(m['name'])} | {m['base']} | {m['new']} | {m['change']} |" for m in r["rows"]]
        lines += ["", "</details>"]
    return fit("\n".join(lines) + "\n")


def catalogue_markdown(entries: List[Dict]) -> str:
    """The rule catalogue (:func:`hta_report.api.rule_catalogue`) as the
    README's markdown table: rule, id, when it fires, source of the threshold."""
    lines = ["| rule | id | fires when | source of the threshold |", "| --- | --- | --- | --- |"]
    lines += [f"| {e['rule']} | `{e['id']}` | {_cell(e['threshold'])} | {_cell(e['source'])} |" for e in entries]
    return "\n".join(lines) + "\n"
