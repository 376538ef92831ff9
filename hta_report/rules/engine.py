"""Running the catalogue: findings by severity (the gain their fix is expected to bring), and a check per rule.

Every module of this package other than :data:`INFRASTRUCTURE` is a rule
module: it is imported here, and its ``@rule`` functions register themselves
(``tests/test_architecture.py`` checks that each registers at least one rule,
and that ``docs/RULES.md`` is the catalogue, ``hta-report rules --format markdown``).
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

from ..model import ATTRIBUTION_STEP, LISTED_MIN_GAIN_PCT, SEVERITY_RANK, AnalysisResult, Finding, RuleCheck, WhatIf
from . import config as _config
from .base import (COVERED, DISABLED, FIRED, GPU_SIDE_RULES, NOT_CHECKED, REGISTRY, WINDOW, Rule, Verdict, cite,
                   complete,
                   expected_pct, follow_prediction, pct_of_step, predicted, severity, together, trusted)
from .claims import Ledger, check_order
from .config import AdviceConfig
from .wording import fix_for

#: Modules of this package that hold no rules.
INFRASTRUCTURE = frozenset({"base", "claims", "config", "engine", "wording"})

#: A finding whose fix is predicted to save this much of the step (%) or more is never rated low,
#: even where the prediction's interval reaches the step (issue 50: "a finding predicted to save
#: >= 10 % of the step is never low"); below it, a prediction the noise may hide rates it low.
NEVER_LOW_PCT = 10.0
#: The window rule (:mod:`.window`): what the trace cannot show, which leads the findings whose
#: fixes are expected to save under LISTED_MIN_GAIN_PCT of the step.
WINDOW_RULE = "trace-window"
#: One-off warm-up (% of the window) from which a rank's window is a cold start: what is left of it
#: is no steady step either (first-pass idle no op explains, one-off gaps around a few launches), and
#: the findings read off its idle time (:data:`COLD_CAPPED`) are rated low, as the replay withholds
#: its what-ifs there (``WITHHOLD_WARMUP_PCT``, proposal: half the window).
COLD_WINDOW_PCT = 50.0
#: The rules read off a window's idle time and timing, which a cold start leaves unsteady (the
#: dtype, op-count and configuration rules read what every step does, cold or not).
COLD_CAPPED = frozenset({"low-gpu-utilization", "gpu-gaps", "gpu-idle", "launch-bound", "launch-outliers",
                         "host-bound", "step-time-outliers"})
#: Rules whose gain is a model's bound that no recorded pair has measured (and no edit predicts):
#: their findings are rated ``medium`` at most. ``unfused-elementwise``: the bandwidth model of a
#: chain's fusion, where what Inductor leaves unfused is not in the trace.
MODEL_BOUND_CAPPED = frozenset({"unfused-elementwise"})


def _import_rule_modules() -> List[str]:
    """Import every rule module of this package (their rules register on import); their names, sorted."""
    package = sys.modules[__package__]
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in INFRASTRUCTURE)
    for name in names:
        importlib.import_module(f"{__package__}.{name}")
    return names


#: The rule modules found in this package.
RULE_MODULES = _import_rule_modules()


def _number(r: Rule) -> int:
    return int(r.number.lstrip("C"))


#: The catalogue, in the order of the rules' internal numbers (the order the reports list them).
RULES: List[Rule] = sorted(REGISTRY, key=_number)
RULE_IDS = frozenset(r.id for r in RULES)
#: By phase (trace window, specific causes, general causes, residual, symptoms), then by number.
_RUN_ORDER: List[Rule] = sorted(RULES, key=lambda r: (r.phase, _number(r)))
# who owns which time (claims.OWNERSHIP) holds for this order: owners after the rules that claim
# first, before those that defer to them or take the rest
check_order([r.id for r in _RUN_ORDER])


def load_config(path: Optional[os.PathLike[str] | str] = None,
                cwd: Optional[os.PathLike[str] | str] = None) -> AdviceConfig:
    """:func:`hta_report.rules.config.load_config` checked against this
    catalogue's rule ids (an unknown id in ``disable`` is an error).

    Raises:
        hta_report.errors.InputError: as :func:`hta_report.rules.config.load_config`.
    """
    return _config.load_config(path, cwd, rule_ids=RULE_IDS)


@dataclass
class Advice:
    """Findings (largest estimated gain first), one check per catalogue rule,
    and what the findings' replayed edits buy together (:func:`~.base.together`)."""

    findings: List[Finding]
    checks: List[RuleCheck]
    together: Optional[WhatIf] = None


def advise(result: AnalysisResult, config: Optional[AdviceConfig] = None) -> Advice:
    """Run every enabled rule of the catalogue on ``result``.

    Rules run by phase (:data:`~hta_report.rules.base.WINDOW`, causes,
    general causes, symptoms), each seeing the time the findings before it
    claimed (:class:`~hta_report.rules.claims.Ledger`), so no two findings
    count the same time. The symptom rules all judge the idle time left by
    the causes; only the one with the largest gain gives a finding, the
    others are ``covered`` by it.

    Each finding's fix is in the words of its ranks' workload (training,
    inference, a graph-capture window, compiled code: :mod:`~hta_report.rules.wording`).

    A finding with a prediction the report stands by claims what its fix
    saves (:func:`~hta_report.rules.base.follow_prediction`), so its gain
    and its prediction are one figure. Its severity and order follow the
    gain its fix is expected to bring (% of the step: the replay's
    prediction where the fix has one, else the bound;
    :func:`~hta_report.rules.base.expected_pct`; low where the prediction's
    80 % interval reaches the step as measured and its middle is under
    :data:`NEVER_LOW_PCT`): sorted by severity, then by
    that expected gain, then by the bound, ties by rule number.
    Every rule reports a :class:`~hta_report.model.RuleCheck`: ``fired``,
    ``fine``, ``covered``, ``not checked`` (its data is absent from the
    traces) or ``disabled`` (``config.disable``).
    """
    cfg = config or AdviceConfig()
    ledger = Ledger()
    verdicts: Dict[str, Optional[Verdict]] = {}
    symptoms: List[Rule] = []
    for r in _RUN_ORDER:
        if r.id in cfg.disable:
            verdicts[r.id] = None
            continue
        if r.symptom:
            symptoms.append(r)
            continue
        verdicts[r.id] = _run(r, result, cfg, ledger)
    # symptoms: every one judges what the causes left; the largest gain is the one finding
    judged = {r.id: _check(r, result, cfg, ledger) for r in symptoms}
    found = {rule_id: v.finding for rule_id, v in judged.items() if v.status == FIRED and v.finding is not None}
    fired_symptoms = sorted((r for r in symptoms if r.id in found), key=lambda r: (-found[r.id].gain_pct, _number(r)))
    for r in symptoms:
        v = judged[r.id]
        if fired_symptoms and r is not fired_symptoms[0] and r.id in found:
            v = Verdict(COVERED, f"{found[r.id].title}; the same idle time is counted once, under "
                                 f"{fired_symptoms[0].id}")
        verdicts[r.id] = _commit(r, v, result, cfg, ledger)
    checks: List[RuleCheck] = []
    findings: List[Tuple[Finding, int]] = []
    for r in RULES:
        verdict = verdicts[r.id]
        if verdict is None:
            checks.append(RuleCheck(id=r.id, rule=r.number, title=r.title, status=DISABLED,
                                    detail="disabled by configuration"))
            continue
        checks.append(RuleCheck(id=r.id, rule=r.number, title=r.title, status=verdict.status, detail=verdict.detail))
        if verdict.finding is not None:
            findings.append((verdict.finding, _number(r)))
    # within a severity, a fix expected to save under LISTED_MIN_GAIN_PCT of the step goes after the
    # window finding: with nothing material found, what the trace cannot show is the first thing to say
    def order(fn: Tuple[Finding, int]) -> Tuple[int, bool, float, float, int]:
        f, number = fn
        expected = expected_pct(f, result)
        return (-SEVERITY_RANK.get(f.severity, 0), f.id != WINDOW_RULE and expected < LISTED_MIN_GAIN_PCT,
                -expected, -f.bound_pct, number)
    findings.sort(key=order)
    fired = [f for f, _ in findings]
    return Advice(findings=fired, checks=checks,
                  together=together(result, fired, {r.id: r.edit for r in RULES if r.edit}))


def _run(r: Rule, result: AnalysisResult, cfg: AdviceConfig, ledger: Ledger) -> Verdict:
    return _commit(r, _check(r, result, cfg, ledger), result, cfg, ledger)


def _check(r: Rule, result: AnalysisResult, cfg: AdviceConfig, ledger: Ledger) -> Verdict:
    """``r``'s verdict on the ranks where every step it needs (``Rule.needs``)
    was computed; the detail names each rank left out and the step that
    failed there, and with no rank left it is ``not checked``."""
    missing = {x.rank: f"{next(f for f in x.failures if f.step in r.needs).step} failed" for x in result.ranks
               if x.failed(*r.needs)}
    if ATTRIBUTION_STEP in r.needs:  # its GPU idle time is not known (graph replays dropped, records lost...)
        # the window rule still says that the trace lost its GPU records, or holds none of the
        # workload: what to record again
        missing.update({x.rank: f"its GPU idle time is not known: {x.integrity.unreliable_reason()}"
                        for x in result.ranks if x.integrity.idle_unreliable and x.rank not in missing
                        and not (r.phase == WINDOW and (x.integrity.records_lost or x.integrity.workload_missing))})
    if r.id not in GPU_SIDE_RULES:  # it reads the host's ops, which a GPU-only recording lacks
        missing.update({x.rank: "its host side was not recorded: GPU activity only" for x in result.ranks
                        if x.integrity.host_unrecorded and x.rank not in missing})
    ledger.turn(r.id)
    if not missing:
        return r.check(result, cfg, ledger)
    note = "; ".join(f"rank {rank} not checked ({why})" for rank, why in sorted(missing.items()))
    usable = [x for x in result.ranks if x.rank not in missing]
    if not usable:
        return Verdict(NOT_CHECKED, note)
    v = r.check(dataclasses.replace(result, ranks=usable), cfg, ledger)
    v.detail = f"{v.detail}; {note}" if v.detail else note
    return v


def _commit(r: Rule, v: Verdict, result: AnalysisResult, cfg: AdviceConfig, ledger: Ledger) -> Verdict:
    """Complete a fired verdict's finding, give it the fix in the words of its
    ranks' workload (:func:`~hta_report.rules.wording.fix_for`) and record
    its claims in the ledger."""
    if v.status == FIRED and v.finding is not None:
        complete(v.finding, r, cfg)
        cite(v.finding, r, result)
        f = v.finding
        f.fix = fix_for(r.id, [x for x in result.ranks if x.rank in f.ranks], f.fix)
        f.whatif = predicted(f, r, result)
        owner = ledger.edit_owner(f.whatif.rank, f.whatif.edit) if f.whatif is not None else None
        if owner is not None:  # the same fix, predicted once: its saving is the earlier finding's
            return Verdict(COVERED, f"{f.title}; its fix ({f.whatif.edit if f.whatif else ''}) and what it "
                                    f"saves are counted under {owner}")
        follow_prediction(f, v, r.id, result, ledger)
        f.severity = severity(expected_pct(f, result), cfg)
        if f.whatif is not None and trusted(f.whatif, result) and not f.whatif.measurable \
                and expected_pct(f, result) < NEVER_LOW_PCT:
            f.severity = "low"  # the prediction's interval reaches the step: a gain the noise may hide
        if r.id in MODEL_BOUND_CAPPED and f.whatif is None and f.severity == "high":
            f.severity = "medium"
        if r.id in COLD_CAPPED and f.ranks:
            cold = {x.rank: pct_of_step(x.warmup.us_per_step, x) for x in result.ranks if x.rank in f.ranks}
            if cold and all(pct >= COLD_WINDOW_PCT for pct in cold.values()):
                rank, pct = next(iter(cold.items()))
                f.severity = "low"
                f.evidence.append(f"rank {rank}: {pct:.0f} % of the window is one-off warm-up: what is left of a cold "
                                  "start is no steady step; judge this on steady steps (see trace-window)")
        ledger.commit(r.id, v.finding.ranks, v.claims)
        if f.whatif is not None:  # a job's figure (ranks that wait for each other) is every rank's
            for rank in ([x.rank for x in result.ranks] if f.whatif.slowest_of else f.ranks):
                ledger.own_edit(rank, f.whatif.edit, r.id)
    return v


def catalogue(config: Optional[AdviceConfig] = None) -> List[Dict[str, Union[str, bool]]]:
    """The rule catalogue as plain dicts (``id``, ``rule``: the internal
    number saved results keep, ``title``, ``description``, ``threshold`` for
    ``config``, ``source``, ``fix``, ``doc_url``, ``edit``: the replay's edit
    behind its prediction or ``""``, ``enabled``), in catalogue
    order; what ``hta-report rules`` prints (``--format markdown``: ``docs/RULES.md``)."""
    cfg = config or AdviceConfig()
    return [{"id": r.id, "rule": r.number, "title": r.title, "description": r.description,
             "threshold": r.threshold(cfg), "source": r.source, "fix": r.fix, "doc_url": r.doc_url,
             "edit": r.edit, "enabled": r.id not in cfg.disable} for r in RULES]
