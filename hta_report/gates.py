"""Quality gates: ``--fail-on EXPR`` expressions checked after the report is written.

An expression is ``METRIC OP VALUE`` with OP one of ``> >= < <= == !=`` and an
optional ``%`` after VALUE (ignored: percentages are already in %). Pure
functions; the CLI evaluates the gates before it writes the reports
(:func:`evaluate`, kept in ``result.gates`` / ``comparison.gates`` so that
every output says which gate tripped) and maps a tripped gate to exit code 2.

Gates fail closed: a gate whose metric the result does not measure (a GPU
figure of traces without GPU activity, a step time without ``ProfilerStep``
annotations, a regression between runs that cannot be compared, advice when
no rule could check the traces) or whose value is not a finite number trips,
and says why. Results read from JSON are checked before they get here
(:mod:`hta_report.model_check`).
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from .errors import InputError
from .model import (ATTRIBUTION_STEP, COMMUNICATION_STEP, CPU_SIDE_STEP, IDLE_STEP, MEMCPY_STEP, SEVERITY_RANK,
                    TEMPORAL_STEP, WINDOWS_STEP, AnalysisResult, Comparison, GateResult)

_OPS: Dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}
_EXPR = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*([A-Za-z]+|[-+]?\d+(?:\.\d+)?)\s*%?\s*$")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")
S = TypeVar("S", AnalysisResult, Comparison)

__all__ = ["Gate", "GateResult", "parse_gate", "evaluate", "describe", "metrics_help",
           "RESULT_METRICS", "COMPARISON_METRICS", "SEVERITY_RANK"]


def _gpu(a: AnalysisResult) -> Optional[str]:
    return None if a.aggregate.gpu_ranks > 0 else "no rank has GPU activity"


def _gpu_step(*steps: str) -> Callable[[AnalysisResult], Optional[str]]:
    """A GPU figure from ``steps``: measured when some GPU rank has them (not failed)."""
    def missing(a: AnalysisResult) -> Optional[str]:
        if _gpu(a):
            return _gpu(a)
        if not any(r.has_gpu and not r.failed(*steps) for r in a.ranks):
            return f"{' and '.join(steps)} failed on every GPU rank"
        return None
    return missing


def _steps(a: AnalysisResult) -> Optional[str]:
    return None if a.aggregate.mean_step_us > 0 else "no ProfilerStep annotations"


def _host_steps(a: AnalysisResult) -> Optional[str]:
    if any(r.cpu.steps_used and not r.failed(CPU_SIDE_STEP) for r in a.ranks):
        return None
    return "no rank has an analyzed step window"


def _advice(a: AnalysisResult) -> Optional[str]:
    return None if any(c.status in ("fired", "fine") for c in a.checks) else "no rule could check these traces"


def _severity(a: AnalysisResult) -> float:
    """The highest severity as 1-3 (0 without findings); NaN for an unknown one."""
    ranks = [SEVERITY_RANK.get(f.severity) for f in a.findings]
    known = [r for r in ranks if r is not None]
    return math.nan if len(known) < len(ranks) else float(max(known, default=0))


#: A metric of one analysis: (description, getter, why it is not measured or None).
ResultMetric = Tuple[str, Callable[[AnalysisResult], float], Callable[[AnalysisResult], Optional[str]]]
#: A metric of a comparison, the same for two runs.
ComparisonMetric = Tuple[str, Callable[[Comparison], float], Callable[[Comparison], Optional[str]]]

#: Metrics of one analysis: name -> (description, getter, why it is not
#: measured or None). Percentages in %, times in ms.
RESULT_METRICS: Dict[str, ResultMetric] = {
    "idle_pct": ("GPU idle, % of the analyzed steps (mean over ranks)", lambda a: a.aggregate.idle_pct,
                 _gpu_step(WINDOWS_STEP, ATTRIBUTION_STEP)),
    "busy_pct": ("GPU busy, % of the analyzed steps", lambda a: a.aggregate.busy_pct,
                 _gpu_step(WINDOWS_STEP, ATTRIBUTION_STEP)),
    "kernel_busy_pct": ("kernels running, % of the analyzed steps (TensorBoard's GPU utilization)",
                        lambda a: a.aggregate.kernel_busy_pct, _gpu_step(WINDOWS_STEP, ATTRIBUTION_STEP)),
    "compute_pct": ("GPU compute, % of the GPU span (HTA's temporal breakdown)", lambda a: a.aggregate.compute_pct,
                    _gpu_step(TEMPORAL_STEP)),
    "host_wait_pct": ("GPU idle waiting for the host, % of the GPU span (HTA's idle classes)",
                      lambda a: a.aggregate.idle_host_wait_pct, _gpu_step(TEMPORAL_STEP, IDLE_STEP)),
    "dataloader_pct": ("DataLoader, % of step", lambda a: a.aggregate.dataloader_pct, _host_steps),
    "exposed_comm_pct": ("exposed communication, % of the analyzed steps", lambda a: a.aggregate.exposed_comm_pct,
                         _gpu_step(COMMUNICATION_STEP)),
    "exposed_memcpy_pct": ("exposed memcpy, % of the analyzed steps", lambda a: a.aggregate.exposed_memcpy_pct,
                           _gpu_step(MEMCPY_STEP)),
    "step_time_ms": ("mean step time, ms", lambda a: a.aggregate.mean_step_us / 1e3, _steps),
    "findings": ("number of findings", lambda a: float(len(a.findings)), _advice),
    "severity": ("highest finding severity (low < medium < high; none = 0)",
                 _severity, _advice),
}


def _comparable(c: Comparison) -> Optional[str]:
    return None if c.verdict != "not comparable" else "the runs cannot be compared (no ProfilerStep on a side)"


def _both(check: Callable[[AnalysisResult], Optional[str]]) -> Callable[[Comparison], Optional[str]]:
    """A comparison metric needing ``check`` to pass on both sides."""
    def missing(c: Comparison) -> Optional[str]:
        for side, a in (("base", c.base), ("new", c.new)):
            why = check(a) if a is not None else "not in the comparison"
            if why is not None:
                return f"{side}: {why}"
        return None
    return missing


def _idle_increase(c: Comparison) -> float:
    """GPU idle of new minus base, percentage points (NaN without both sides)."""
    if c.base is None or c.new is None:
        return math.nan
    return c.new.aggregate.idle_pct - c.base.aggregate.idle_pct


#: Metrics of a comparison (the new side's result metrics apply too).
COMPARISON_METRICS: Dict[str, ComparisonMetric] = {
    "step_time_regression": ("time per step change new vs base, before the environment factor, % (positive = slower)",
                             lambda c: c.step_time_change_pct, _comparable),
    "idle_pct_increase": ("GPU idle change, percentage points",
                          _idle_increase,
                          _both(_gpu_step(WINDOWS_STEP, ATTRIBUTION_STEP))),
    "regressed": ("1 when the verdict is 'regressed' (the step change beyond the noise band), else 0; "
                  "'--fail-on regression' is regressed>=1",
                  lambda c: 1.0 if c.verdict == "regressed" else 0.0, _comparable),
    "step_time_regression_low": ("lower end of the step change's interval after the environment factor, % "
                                 "(> X: a significant regression larger than X %)",
                                 lambda c: c.stats.change_pct_low if c.stats.method == "statistical"
                                 else c.step_time_change_pct, _comparable),
    "inconclusive": ("1 when the statistical test's verdict is 'inconclusive' (its interval spans the "
                     "threshold, or too few samples), else 0",
                     lambda c: 1.0 if c.stats.verdict == "inconclusive" else 0.0, _comparable),
    "new_findings": ("findings that appeared", lambda c: float(len(c.findings_appeared)), _both(_advice)),
}


@dataclass
class Gate:
    """A parsed ``--fail-on`` expression."""

    text: str
    metric: str
    op: str
    value: float


def parse_gate(text: str, comparison: bool = False) -> Gate:
    """Parse ``METRIC OP VALUE[%]``; ``severity`` takes ``low``/``medium``/``high``;
    with ``comparison``, the bare word ``regression`` is ``regressed>=1``
    (the verdict: a significant step change larger than the threshold).

    Raises:
        InputError: malformed expression, unknown metric (the message lists
            the metrics), or a value that is not a finite number (``nan``,
            ``inf``, or digits beyond a float's range), against which no gate
            could trip.
    """
    if comparison and text.strip() == "regression":  # the verdict gate: a significant change past the threshold
        return Gate(text="regression", metric="regressed", op=">=", value=1.0)
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
        if not _NUMBER.match(raw):  # also refuses nan and inf, against which no gate can trip
            raise InputError(f"--fail-on {text!r}: {raw!r} is not a number")
        value = float(raw)
        if not math.isfinite(value):  # 400 digits read as infinity: as useless a bound as inf
            raise InputError(f"--fail-on {text!r}: {raw[:20]}... is beyond a finite number")
    return Gate(text=text.strip(), metric=metric, op=op, value=value)


def evaluate(gates: Sequence[Gate], result: Optional[AnalysisResult] = None,
             comparison: Optional[Comparison] = None) -> List[GateResult]:
    """Every gate checked, in order, as a :class:`~hta_report.model.GateResult`
    (the CLI stores them in ``result.gates`` or ``comparison.gates`` before the
    reports are written, so that each output says which gate tripped). Result
    metrics are read from ``result``, or from the comparison's new side. A gate
    whose metric is not measured, or not a finite number, trips (fails closed)
    with ``not_measured`` saying why.

    Raises:
        ValueError: a comparison metric without ``comparison``, or a result
            metric with neither ``result`` nor a comparison's new side.
    """
    target = comparison.new if comparison is not None else result
    out = []
    for g in gates:
        if g.metric in COMPARISON_METRICS:
            if comparison is None:
                raise ValueError(f"gate {g.text!r} needs a comparison")
            why, value = _measure(COMPARISON_METRICS[g.metric], comparison)
        else:
            if target is None:
                raise ValueError(f"gate {g.text!r} needs a result")
            why, value = _measure(RESULT_METRICS[g.metric], target)
        if why is None and value is not None and not math.isfinite(value):
            why, value = f"its value is {value}", None
        hit = why is not None or (value is not None and _OPS[g.op](value, g.value))
        out.append(GateResult(expression=g.text, metric=g.metric, value=value, tripped=hit, not_measured=why or ""))
    return out


def _measure(metric: Tuple[str, Callable[[S], float], Callable[[S], Optional[str]]],
             subject: S) -> Tuple[Optional[str], Optional[float]]:
    """``(why not measured, None)`` or ``(None, value)`` of one metric on its subject."""
    _, get, missing = metric
    why = missing(subject)
    return (why, None) if why is not None else (None, get(subject))


def describe(r: GateResult) -> str:
    """One gate's outcome as the CLI prints it: ``"EXPR (metric = value)"``, or
    ``"EXPR (metric not measured: why; the gate fails)"``."""
    if r.value is None:
        return f"{r.expression} ({r.metric} not measured: {r.not_measured}; the gate fails)"
    shown = f"{r.value:.2f}" if abs(r.value) < 1e15 else f"{r.value:.3g}"  # not hundreds of digits
    return f"{r.expression} ({r.metric} = {shown})"


def metrics_help(comparison: bool = False) -> str:
    """The metric names and meanings, for ``--help``."""
    items = {**RESULT_METRICS, **(COMPARISON_METRICS if comparison else {})}
    return "\n".join(f"  {name:22s} {entry[0]}" for name, entry in sorted(items.items()))
