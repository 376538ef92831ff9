#!/usr/bin/env python
"""Benchmark: real runs nobody here recorded, read against an expert's expectations written first.

The runs are the public traces listed in ``bench/field/manifest.json`` (kept
out of the repository: ``bench/field/README.md`` says where each comes from;
the traces live under ``$HTA_REPORT_FIELD`` or ``/work/field/traces``). For
each, ``bench/field/expectations.json`` holds what a GPU performance engineer
read off the raw events before ``hta-report`` ran on it: the acceptable rule
ids of the report's first finding (``top``; ``healthy`` where nothing should
be rated high), the advice that would be wrong (``forbidden``) and how many
ranks the report should show (``ranks_expected``).

Checked per run, each a line of the output:

* **top**: the first finding's id is one of ``top`` (with ``healthy`` in it, a
  report whose findings are none high also passes);
* **ranks**: the report shows ``ranks_expected`` ranks;
* **forbidden**: no forbidden rule id is the first finding or rated high, and
  the run's ``forbidden_advice`` (the kinds of advice its forbidden texts name:
  serving recipes, code moving work to bf16, code turning autocast on; found
  by :data:`ADVICE_WORDS`) appears in no finding's fix;
* **invariants**: no rank's findings add past its step (gain %), no LOW finding
  predicts a saving of 10 % or more that clears its interval, no prediction
  without its interval.

    python bench/field_reading.py                    # every run with its traces present
    python bench/field_reading.py --only deepseek    # runs whose id holds the text
    python bench/field_reading.py --json out.json    # the per-run verdicts

Prints one line per run and the score: right (all checks hold; also with
the ids a run's ``revisions`` added to its ``top``, each with its reason), and
the counts of each failed check. Runs whose traces are absent are listed as skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hta_report.api import analyze  # noqa: E402
from hta_report.errors import HtaReportError  # noqa: E402
from hta_report.model import AnalysisResult  # noqa: E402

FIELD = ROOT / "bench" / "field"
#: Where the traces are looked for: ``$HTA_REPORT_FIELD``, else this folder.
DEFAULT_TRACES = Path("/work/field/traces")
#: Forbidden advice recognised by words in a finding's fix or title: the
#: expectation's text (lower case) -> a pattern that the advice shows.
ADVICE_WORDS = {
    "serving": re.compile(r"vllm|sglang|max-num-seqs|--enforce-eager", re.IGNORECASE),
    # code that moves work to bfloat16 (a sentence naming it, "the kernels already run bf16", is not)
    "bf16": re.compile(r"dtype=torch\.bfloat16|\.to\(torch\.bfloat16\)|\.bfloat16\(\)"),
    # code that turns autocast on
    "autocast": re.compile(r"\bautocast\("),
}


def traces_root() -> Path:
    """The folder holding one sub-folder of trace files per run."""
    return Path(os.environ.get("HTA_REPORT_FIELD", DEFAULT_TRACES))


def _rule_id(text: str) -> Optional[str]:
    """The rule id a forbidden entry names (its first word, when it is kebab-case), or None."""
    word = text.split()[0].strip("`'\",;:()") if text.split() else ""
    return word if re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+", word) else None


def check(result: AnalysisResult, exp: dict, revised: bool = False) -> Dict[str, List[str]]:
    """The failed checks of one run (check -> reasons; empty: right); with
    ``revised``, the ids its ``revisions`` added count as a right top."""
    out: Dict[str, List[str]] = {}
    first = result.findings[0] if result.findings else None
    top = list(exp.get("top", []))
    if revised:
        top += [i for r in exp.get("revisions", []) for i in r.get("top_added", [])]
    high = [f.id for f in result.findings if f.severity == "high"]
    ok_top = (first is not None and first.id in top) or ("healthy" in top and not high)
    if not ok_top:
        out["top"] = [f"first finding {first.id if first else 'none'} ({first.severity if first else ''}), "
                      f"expected one of {top}"]
    want = exp.get("ranks_expected")
    if isinstance(want, int) and len(result.ranks) != want:
        out["ranks"] = [f"{len(result.ranks)} ranks, expected {want}"]
    bad: List[str] = []
    for text in exp.get("forbidden", []):
        rid = _rule_id(text)
        if rid and ((first is not None and first.id == rid) or rid in high):
            bad.append(f"{rid} is {'first' if first is not None and first.id == rid else 'high'}")
    for key in exp.get("forbidden_advice", []):
        hits = [f.id for f in result.findings if ADVICE_WORDS[key].search(f.fix)]
        if hits:
            bad.append(f"{key} advice in {', '.join(hits)}")
    if bad:
        out["forbidden"] = bad
    inv: List[str] = []
    for x in result.ranks:
        total = sum(g.gain_pct for f in result.findings for g in f.rank_gains if g.rank == x.rank)
        if total > 100.0 + 1e-6:
            inv.append(f"rank {x.rank}'s findings claim {total:.1f} % of its step")
    for f in result.findings:
        w = f.whatif
        if w is None:
            continue
        saved = 100 * (w.step_us_before - w.step_us_after) / w.step_us_before if w.step_us_before else 0.0
        # getattr: the checker also reads results of older code (no interval, no measurable flag)
        if f.severity == "low" and saved >= 10 and getattr(w, "measurable", True):
            inv.append(f"{f.id} is low and predicts -{saved:.0f} %")
        low, high = getattr(w, "step_us_low", None), getattr(w, "step_us_high", None)
        if low is None or high is None or not low <= w.step_us_after <= high:
            inv.append(f"{f.id}'s prediction has no interval around it")
        if saved > f.gain_pct + 1e-6:
            inv.append(f"{f.id} predicts -{saved:.1f} % past its stated {f.gain_pct:.1f} %")
    if inv:
        out["invariants"] = inv
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="runs whose id holds this text")
    ap.add_argument("--json", default="", help="write the per-run verdicts here")
    args = ap.parse_args(argv)
    exp = json.loads((FIELD / "expectations.json").read_text(encoding="utf-8"))["runs"]
    root = traces_root()
    verdicts: Dict[str, dict] = {}
    right = right_revised = total = 0
    failed: Dict[str, int] = {}
    for run, e in sorted(exp.items()):
        if args.only and args.only not in run:
            continue
        folder = root / run
        if not folder.is_dir():
            print(f"{run:48s} skipped: no traces under {folder}")
            continue
        t = time.perf_counter()
        try:
            result = analyze(folder)
        except HtaReportError as err:
            verdicts[run] = {"error": str(err)}
            failed["error"] = failed.get("error", 0) + 1
            total += 1
            print(f"{run:48s} ERROR {err}")
            continue
        bad = check(result, e)
        total += 1
        right += not bad
        right_revised += not check(result, e, revised=True)
        for k in bad:
            failed[k] = failed.get(k, 0) + 1
        first = result.findings[0] if result.findings else None
        head = f"{first.id} [{first.severity}]" if first else "no finding"
        print(f"{run:48s} {'RIGHT' if not bad else 'WRONG'} {head:34s} {time.perf_counter() - t:5.1f} s"
              + "".join(f"\n    {k}: {'; '.join(v)}" for k, v in bad.items()))
        verdicts[run] = {"first": first.id if first else None, "ranks": len(result.ranks), "failed": bad}
    print(f"\nright: {right} of {total} ({right_revised} with the expectations' revisions)"
          + "".join(f"; {k} failed on {n}" for k, n in sorted(failed.items())))
    if args.json:
        Path(args.json).write_text(json.dumps(verdicts, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
