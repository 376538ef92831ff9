"""The SARIF reporter: findings as SARIF 2.1.0 for GitHub code scanning.

``render(result, charts)`` writes one SARIF log with one run:

* ``tool.driver.rules``: one reporting descriptor per rule of the catalogue
  (the result's ``checks``: every rule, fired or not), with its title, the
  documentation of its fix when a finding gives one, and what it concluded
  on this run in its properties;
* ``results``: one result per finding that has source lines
  (:attr:`~hta_report.model.Finding.locations`) with repository-relative
  paths (:func:`placeable`), its ``level`` from the
  severity (high ``error``, medium ``warning``, low ``note``), a message
  with the estimated gain, the evidence and the fix, and one location per
  placeable line (URI relative to the source root, as
  :mod:`hta_report.locate` resolved it; GitHub annotates the pull request at
  the first one, the largest share);
* findings without source lines (traces recorded without ``with_stack``, or
  causes no line explains) are listed as notifications of the run's
  invocation instead: GitHub code scanning rejects a whole upload in which a
  result has no location.

Every trace-derived string goes through :func:`hta_report.escape.sarif_text`.
"""
from __future__ import annotations

import json
from typing import Dict, List, Mapping

from ..escape import sarif_text
from ..model import AnalysisResult, Comparison, Finding, Inventory, SourceLocation, is_doc_url
from .fmt import fixed, pct

#: The schema a SARIF 2.1.0 log names (the OASIS standard, errata 01).
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: SARIF ``level`` of each finding severity.
LEVELS = {"high": "error", "medium": "warning", "low": "note"}


def _location(loc: SourceLocation) -> Dict[str, object]:
    how = {"call": "this call", "def": "inside this function",
           "frame": "in this function (the line it ran when tracing started)"}
    calls = f", one of {loc.calls} such calls in {loc.function}" if loc.calls > 1 else ""
    text = f"{loc.function or 'this line'}: {fixed(loc.time_us / 1e3, 2)} ms per step ({loc.share_pct:.0f} % of the " \
           f"finding's time) spent in {how.get(loc.how, loc.how)}{calls}"
    return {"physicalLocation": {"artifactLocation": {"uri": _uri(loc.path)},
                                 "region": {"startLine": max(int(loc.line), 1)}},
            "message": {"text": sarif_text(text)}}


def placeable(loc: SourceLocation) -> bool:
    """Whether ``loc`` may be a SARIF location: a path relative to the
    repository root, ``/`` separators, no ``..``, no scheme, no drive, no
    backslash, no leading ``~`` and no control character. Files found under the source root
    have such paths (:mod:`hta_report.locate`); a path the trace gave for a
    file that was not found is a location only when it has that shape too
    (``train.py`` recorded by a relative command line), never an absolute
    path, a URL (``https://``, ``javascript:``) or a way out (``../``)."""
    p = loc.path
    if not p or p.startswith(("/", "\\", "~")) or "\\" in p or ":" in p:
        return False
    return all(part not in ("", ".", "..") for part in p.split("/")) and p.isprintable()


def _uri(path: str) -> str:
    """A relative path (:func:`placeable`) as a URI reference: characters a URI may not hold percent-encoded."""
    from urllib.parse import quote

    return quote(path, safe="/!$&'()*+,;=-._~")


def _message(f: Finding) -> str:
    ranks = ", ".join(str(r) for r in f.ranks[:8]) + (" …" if len(f.ranks) > 8 else "")
    parts = [f"{f.title}.",
             f"Estimated gain: up to {fixed(f.gain_ms_per_step, 2)} ms per step ({pct(f.gain_pct)} of the step) "
             f"on the worst rank{'s' if len(f.ranks) > 1 else ''} ({ranks or 'all ranks'})."]
    if f.evidence:
        parts.append("Evidence: " + "; ".join(f.evidence) + ".")
    if f.fix:
        parts.append("Fix: " + " ".join(f.fix.split()))
    return sarif_text(" ".join(parts))


def sarif_log(result: AnalysisResult) -> Dict[str, object]:
    """The SARIF log of ``result`` as plain JSON values (see the module docstring)."""
    docs = {f.id: f.doc_url for f in result.findings if is_doc_url(f.doc_url)}  # never a link a saved result made up
    rules: List[Dict[str, object]] = []
    index: Dict[str, int] = {}
    for c in result.checks:
        index[c.id] = len(rules)
        rule: Dict[str, object] = {
            "id": c.id, "name": c.rule or c.id,
            "shortDescription": {"text": sarif_text(c.title)},
            "properties": {"rule": c.rule, "status": c.status, "detail": sarif_text(c.detail),
                           "tags": ["performance"]},
        }
        if c.id in docs:
            rule["helpUri"] = docs[c.id]
        rules.append(rule)
    results, notes = [], []
    for f in result.findings:
        placed = [loc for loc in f.locations if placeable(loc)]
        if not placed:
            notes.append({"level": "note", "message": {"text": sarif_text(
                f"{f.id} ({f.rule}) has no source line: {f.title}")}})
            continue
        res: Dict[str, object] = {
            "ruleId": f.id, "level": LEVELS.get(f.severity, "note"), "message": {"text": _message(f)},
            "locations": [_location(loc) for loc in placed],
            "properties": {"severity": f.severity, "gain_ms_per_step": round(f.gain_ms_per_step, 3),
                           "gain_pct": round(f.gain_pct, 2), "ranks": list(f.ranks)},
        }
        if f.id in index:
            res["ruleIndex"] = index[f.id]
        results.append(res)
    driver: Dict[str, object] = {"name": "hta-report", "rules": rules}
    if result.inventory.tool_version:
        driver["version"] = result.inventory.tool_version
    run: Dict[str, object] = {"tool": {"driver": driver}, "results": results,
                           "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notes}]}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(result: AnalysisResult, charts: Mapping[str, str]) -> str:
    """``result``'s findings as a SARIF 2.1.0 log (JSON text); ``charts`` is unused."""
    return json.dumps(sarif_log(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_comparison(comparison: Comparison) -> str:
    """The new side's findings as SARIF (what a pull request would merge);
    an empty run when the new side is not part of the comparison."""
    new = comparison.new if comparison.new is not None else AnalysisResult(inventory=Inventory(input_dir=""))
    return render(new, {})
