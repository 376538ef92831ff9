"""The markdown reporter: ``render(result) -> str`` for pull-request comments."""
from __future__ import annotations

from ..model import AnalysisResult
from . import view


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(result: AnalysisResult) -> str:
    """Headline, findings and the per-rank table as GitHub-flavoured markdown."""
    h = view.headline(result)
    lines = ["## hta-report", ""]
    if h["has_gpu"]:
        lines.append(
            f"**GPU busy {h['busy']}**, idle {h['idle']} (host wait {h['idle_host']}, kernel wait "
            f"{h['idle_kernel']}, other {h['idle_other']}) · mean step {h['mean_step']} · "
            f"{h['ranks']} rank(s) · {h['devices']}"
        )
    else:
        lines.append(f"No GPU activity in the traces · mean step {h['mean_step']} · {h['ranks']} rank(s)")
    lines += ["", "### Findings", ""]
    findings = view.findings(result)
    if not findings:
        lines.append("No rule fired: the run looks healthy on what was checked (below).")
    for f in findings:
        lines.append(f"- **[{f['severity']}] {_cell(f['title'])}** (`{f['id']}`, {f['rule']}): {f['gain']}")
        for e in f["evidence"]:
            lines.append(f"  - {_cell(e)}")
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
    return "\n".join(lines) + "\n"
