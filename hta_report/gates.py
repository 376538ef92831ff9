"""Quality gates: ``--fail-on EXPR`` expressions checked after the report is written.

An expression is ``METRIC OP VALUE`` with OP one of ``> >= < <= == !=`` and an
optional ``%`` after VALUE (ignored: percentages are already in %). Pure
functions; the CLI maps a tripped gate to exit code 2.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from .errors import InputError
from .model import AnalysisResult, Comparison

_OPS: Dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*([A-Za-z]+|[-+]?\d+(?:\.\d+)?)\s*%?\s*$")
SEVERITY_RANK = {"low": 1, "medium": 2, "high": 3}

#: Metrics of one analysis: name -> (description, getter). Percentages in %, times in ms.
RESULT_METRICS: Dict[str, tuple] = {
    "idle_pct": ("GPU idle, % of GPU time (mean over ranks)", lambda a: a.aggregate.idle_pct),
    "busy_pct": ("GPU busy, % of GPU time", lambda a: a.aggregate.busy_pct),
    "compute_pct": ("GPU compute, % of GPU time", lambda a: a.aggregate.compute_pct),
    "host_wait_pct": ("GPU idle waiting for the host, % of GPU time", lambda a: a.aggregate.idle_host_wait_pct),
    "dataloader_pct": ("DataLoader, % of step", lambda a: a.aggregate.dataloader_pct),
    "exposed_comm_pct": ("exposed communication, % of GPU time", lambda a: a.aggregate.exposed_comm_pct),
    "exposed_memcpy_pct": ("exposed memcpy, % of GPU time", lambda a: a.aggregate.exposed_memcpy_pct),
    "step_time_ms": ("mean step time, ms", lambda a: a.aggregate.mean_step_us / 1e3),
    "findings": ("number of findings", lambda a: float(len(a.findings))),
    "severity": ("highest finding severity (low < medium < high; none = 0)",
                 lambda a: float(max((SEVERITY_RANK.get(f.severity, 0) for f in a.findings), default=0))),
}

#: Metrics of a comparison (the new side's result metrics apply too).
COMPARISON_METRICS: Dict[str, tuple] = {
    "step_time_regression": ("mean step time change new vs base, % (positive = slower)",
                             lambda c: c.step_time_change_pct),
    "idle_pct_increase": ("GPU idle change, percentage points", lambda c: c.new.aggregate.idle_pct - c.base.aggregate.idle_pct),
    "regressed": ("1 when the verdict is 'regressed' (beyond the noise band), else 0",
                  lambda c: 1.0 if c.verdict == "regressed" else 0.0),
    "new_findings": ("findings that appeared", lambda c: float(len(c.findings_appeared))),
}


@dataclass
class Gate:
    """A parsed ``--fail-on`` expression."""

    text: str
    metric: str
    op: str
    value: float


def parse_gate(text: str, comparison: bool = False) -> Gate:
    """Parse ``METRIC OP VALUE[%]``; ``severity`` takes ``low``/``medium``/``high``.

    Raises:
        InputError: malformed expression or unknown metric (the message lists the metrics).
    """
    m = _EXPR.match(text)
    known = {**RESULT_METRICS, **(COMPARISON_METRICS if comparison else {})}
    if not m:
        raise InputError(f"--fail-on {text!r}: expected METRIC OP VALUE, e.g. 'idle_pct>30'")
    metric, op, raw = m.groups()
    if metric not in known:
        raise InputError(f"--fail-on {text!r}: unknown metric {metric!r}; known: {', '.join(sorted(known))}")
    if metric == "severity":
        if raw.lower() not in SEVERITY_RANK:
            raise InputError(f"--fail-on {text!r}: severity takes low, medium or high")
        value = float(SEVERITY_RANK[raw.lower()])
    else:
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"--fail-on {text!r}: {raw!r} is not a number") from None
    return Gate(text=text.strip(), metric=metric, op=op, value=value)


def tripped(gates: List[Gate], result: Optional[AnalysisResult] = None,
            comparison: Optional[Comparison] = None) -> List[str]:
    """The gates that trip, each as ``"EXPR (metric = value)"``. Result metrics
    are read from ``result``, or from the comparison's new side."""
    target = comparison.new if comparison is not None else result
    out = []
    for g in gates:
        if g.metric in COMPARISON_METRICS:
            actual = COMPARISON_METRICS[g.metric][1](comparison)
        else:
            actual = RESULT_METRICS[g.metric][1](target)
        if _OPS[g.op](actual, g.value):
            out.append(f"{g.text} ({g.metric} = {actual:.2f})")
    return out


def metrics_help(comparison: bool = False) -> str:
    """The metric names and meanings, for ``--help``."""
    items = {**RESULT_METRICS, **(COMPARISON_METRICS if comparison else {})}
    return "\n".join(f"  {name:22s} {desc}" for name, (desc, _) in sorted(items.items()))
