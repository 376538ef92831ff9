"""The markdown reporter: ``render(result) -> str`` for pull-request comments."""
from __future__ import annotations

from ..errors import one_line
from ..model import AnalysisResult
from . import view


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: Characters that could start markup in GitHub-flavoured markdown.
_MD_SPECIAL = {c: "\\" + c for c in "\\`*_[]<>&|~#"}


def _md_text(text: str) -> str:
    """Trace-derived or free text made inert in markdown prose and table cells:
    markup characters backslash-escaped (``<script>`` shows as text, never as
    HTML), line breaks turned into spaces."""
    return "".join(_MD_SPECIAL.get(c, c) for c in one_line(str(text)))


def render(result: AnalysisResult) -> str:
    """Headline, findings and the per-rank table as GitHub-flavoured markdown."""
    h = view.headline(result)
    lines = ["## hta-report", ""]
    if h["has_gpu"]:
        lines.append(
            f"**GPU busy {h['busy']}**, idle {h['idle']} (host wait {h['idle_host']}, kernel wait "
            f"{h['idle_kernel']}, other {h['idle_other']}) · mean step {h['mean_step']} · "
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
        lines.append("No rule fired: the run looks healthy on what was checked.")
    for f in findings:
        lines.append(f"- **[{f['severity']}] {_md_text(f['title'])}** (`{f['id']}`)")
        for e in f["evidence"]:
            lines.append(f"  - {_md_text(e)}")
    lines += ["", "### Per rank", "",
              "| rank | steps | mean step | GPU busy | idle | DataLoader | sync | exposed comm |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in view.rank_rows(result):
        lines.append(f"| {r['rank']} | {r['steps']} | {r['mean_step']} | {r['busy']} | {r['idle']} | "
                     f"{r['dataloader']} | {r['sync']} | {r['exposed_comm']} |")
    return "\n".join(lines) + "\n"
