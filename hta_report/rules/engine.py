"""Running the catalogue: findings sorted by estimated gain, and a check per rule.

Every module of this package other than :data:`INFRASTRUCTURE` is a rule
module: it is imported here, and its ``@rule`` functions register themselves
(``tests/test_rules.py`` checks that each registers at least one rule, and
that the README's rule table is :func:`catalogue_markdown`).
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..model import AnalysisResult, Finding, RuleCheck
from . import config as _config
from .base import DISABLED, FIRED, REGISTRY, Rule, complete
from .config import AdviceConfig

#: Modules of this package that hold no rules.
INFRASTRUCTURE = frozenset({"base", "config", "engine"})


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


#: The catalogue in rule-number order.
RULES: List[Rule] = sorted(REGISTRY, key=_number)
RULE_IDS = frozenset(r.id for r in RULES)
#: Cause rules first, then the symptom rules that subtract what causes explain.
_RUN_ORDER: List[Rule] = [r for r in RULES if not r.symptom] + [r for r in RULES if r.symptom]


def load_config(path: Optional[os.PathLike | str] = None, cwd: Optional[os.PathLike | str] = None) -> AdviceConfig:
    """:func:`hta_report.rules.config.load_config` checked against this
    catalogue's rule ids (an unknown id in ``disable`` is an error).

    Raises:
        hta_report.errors.InputError: as :func:`hta_report.rules.config.load_config`.
    """
    return _config.load_config(path, cwd, rule_ids=RULE_IDS)


@dataclass
class Advice:
    """Findings (largest estimated gain first) and one check per catalogue rule."""

    findings: List[Finding]
    checks: List[RuleCheck]


def advise(result: AnalysisResult, config: Optional[AdviceConfig] = None) -> Advice:
    """Run every enabled rule of the catalogue on ``result``.

    Findings are sorted by estimated gain (% of the step), ties by rule number.
    Every rule reports a :class:`~hta_report.model.RuleCheck`: ``fired``,
    ``fine``, ``not checked`` (its data is absent from the traces) or
    ``disabled`` (``config.disable``).
    """
    cfg = config or AdviceConfig()
    fired: Dict[str, frozenset] = {}
    verdicts: Dict[str, Any] = {}
    for r in _RUN_ORDER:
        if r.id in cfg.disable:
            verdicts[r.id] = None
            continue
        v = r.check(result, cfg, fired)
        if v.finding is not None:
            complete(v.finding, r, cfg)
        verdicts[r.id] = v
        if v.status == FIRED and v.finding is not None:
            fired[r.id] = frozenset(v.finding.ranks)
    checks, findings = [], []
    for r in RULES:
        v = verdicts[r.id]
        if v is None:
            checks.append(RuleCheck(id=r.id, rule=r.number, title=r.title, status=DISABLED,
                                    detail="disabled by configuration"))
            continue
        checks.append(RuleCheck(id=r.id, rule=r.number, title=r.title, status=v.status, detail=v.detail))
        if v.finding is not None:
            findings.append((v.finding, _number(r)))
    findings.sort(key=lambda fn: (-fn[0].gain_pct, fn[1]))
    return Advice(findings=[f for f, _ in findings], checks=checks)


def catalogue(config: Optional[AdviceConfig] = None) -> List[Dict[str, str]]:
    """The rule catalogue as plain dicts (``id``, ``rule``, ``title``,
    ``threshold`` for ``config``, ``source``, ``doc_url``, ``enabled``), in
    rule-number order; what ``hta-report rules`` prints."""
    cfg = config or AdviceConfig()
    return [{"id": r.id, "rule": r.number, "title": r.title, "threshold": r.threshold(cfg), "source": r.source,
             "doc_url": r.doc_url, "enabled": r.id not in cfg.disable} for r in RULES]
