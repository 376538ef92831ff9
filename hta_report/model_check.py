"""Checking a result read from JSON before anything trusts it.

A saved result (``analyze --json``, one side of ``compare``) or a result-cache
entry is a file anyone can edit. :func:`check_result` checks the plain JSON
document against the result model (:mod:`hta_report.model`) before it is
rebuilt: types (an ``int`` field holds an integer, not a bool, a string or a
float), finite numbers (no NaN or infinity), ranges (counts and ranks not
negative; shares of a whole, such as HTA's temporal breakdown, within 0–100
%; the ranges hold for everything ``analyze`` writes, which the trace fuzzer
checks), known values (finding severities, check statuses, rank sources),
links (a finding's ``doc_url`` only to the rules' documentation,
:func:`~hta_report.model.is_doc_url`; a source line's ``url`` only of a
GitHub line link's shape: a cache entry edited to ``javascript:`` is a miss,
a saved result is refused), the
sections every result has, and one result per rank. The first problem is
raised as a :class:`ResultError` naming where it is
(``aggregate.idle_pct: NaN, expected a finite number``).

Keys the model does not know are ignored, and a field the model gives a
default may be absent (a result saved before the field was added), except in
``aggregate``, whose every figure the gates read.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from typing import Any, Dict, FrozenSet, List, Tuple

from .model import (CHECK_STATUSES, DOC_HOSTS, READABLE_SCHEMA_VERSIONS, Aggregate, AnalysisResult, is_doc_url,
                    is_source_url, type_hints)

__all__ = ["ResultError", "check_result", "ENUMS", "SHARES"]

#: Allowed values of string fields: (class name, field) -> values.
ENUMS: Dict[Tuple[str, str], FrozenSet[str]] = {
    ("Finding", "severity"): frozenset({"high", "medium", "low"}),
    ("RuleCheck", "status"): frozenset(CHECK_STATUSES),
    ("TraceFileInfo", "rank_source"): frozenset({"distributedInfo", "file name", "sequential"}),
    ("SourceLocation", "how"): frozenset({"call", "def", "frame"}),
    ("CodeTime", "category"): frozenset({"dataloader", "sync", "pageable_copy", "optimizer"}),
    ("TemporalBreakdown", "source"): frozenset({"HTA", "hta-report"}),
}

#: Fields that are shares of a whole (%), so within 0–100: class name -> fields
#: (``*``: every ``_pct`` field of the class).
SHARES: Dict[str, FrozenSet[str]] = {
    "TemporalBreakdown": frozenset({"*"}),
    "KernelTypeShare": frozenset({"pct"}),
    "KernelStat": frozenset({"pct", "occupancy_pct"}),
    "CommSummary": frozenset({"overlap_pct", "exposed_pct"}),
    "MemcpySummary": frozenset({"exposed_pct"}),
    "TensorCoreUse": frozenset({"tensor_core_pct", "eligible_ops_kernel_pct"}),
    "LaunchSummary": frozenset({"full_queue_pct"}),
    "OccupancySummary": frozenset({"sm_efficiency_pct", "achieved_occupancy_pct", "small_grid_pct"}),
    "SmallKernel": frozenset({"occupancy_pct", "pct"}),
    "SourceLocation": frozenset({"share_pct"}),
    "Aggregate": frozenset({"busy_pct", "idle_pct", "compute_pct", "non_compute_pct", "exposed_comm_pct",
                            "exposed_memcpy_pct", "kernel_busy_pct", "span_busy_pct", "hta_busy_pct"}),
    "RankResult": frozenset({"gpu_span_busy_pct"}),
    "TensorBoardOverview": frozenset({"*"}),
    "Replay": frozenset({"host_share_pct"}),
}
#: Aggregate figures added in schema version 3: absent from older results
#: (whose busy and idle are HTA's, of the GPU span).
AGGREGATE_SINCE_3 = frozenset({"kernel_busy_pct", "span_busy_pct", "hta_busy_pct", "idle_by_cause"})
# Not here: the idle breakdown's cause shares (and the aggregate's idle split
# built from them). HTA's per-stream figures can make one cause negative and
# another pass 100 % on a malformed trace (an event listed twice); they are
# checked as finite numbers only.
#: Integer fields that may be negative (step numbers, stream ids, fields
#: copied from the trace); every other integer (counts, bytes, ranks) may not.
SIGNED_INTS = frozenset({"number", "stream", "world_size", "schema_version", "compute_major",
                         "kineto_schema_versions", "steps"})
#: Largest integer a float field may hold (float() of a larger one overflows).
_MAX_FLOAT_INT = int(sys.float_info.max)
#: Slack for float rounding at the ends of 0–100 %.
_PCT_SLACK = 1e-6
#: The sections every result has (and Aggregate's figures, above).
REQUIRED_TOP = ("schema_version", "inventory", "ranks", "aggregate", "findings", "checks")


class ResultError(ValueError):
    """A result document does not match the result model; ``str()`` says
    where (a dotted path) and what is wrong."""


def _describe(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "infinity" if value > 0 else "-infinity"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "…"
        return f"{shown!r} (a string)"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    if isinstance(value, int) and abs(value) >= 10 ** 18:  # not hundreds of digits in an error
        return f"{'-' if value < 0 else ''}1e+{math.floor(math.log10(abs(value)))} (an integer)"
    return repr(value)


def _fail(path: str, value: Any, expected: str) -> None:
    raise ResultError(f"{path or 'the document'}: {_describe(value)}, expected {expected}")


def _number(path: str, value: Any, integer: bool, owner: str, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        _fail(path, value, "an integer" if integer else "a number")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(path, value, "a finite number")
    if not integer and isinstance(value, int) and not -_MAX_FLOAT_INT <= value <= _MAX_FLOAT_INT:
        _fail(path, value, "a finite number")  # past the float range: float() would overflow
    shares = SHARES.get(owner, frozenset())
    if name in shares or ("*" in shares and name.endswith("_pct")):
        if not -_PCT_SLACK <= value <= 100 + _PCT_SLACK:
            _fail(path, value, "a share within 0–100 %")
    elif integer and name not in SIGNED_INTS and value < 0:
        _fail(path, value, "a count, not negative")
    # Times may be negative: HTA rounds fractional timestamps inwards, so a
    # sub-µs event can end before it starts (a step time <= 0 is "no steps"
    # to the verdict and the gates).


def _check(tp: Any, value: Any, path: str, owner: str = "", name: str = "", version: int = 3) -> None:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(path, value, "an object")
        hints = type_hints(tp)
        for f in dataclasses.fields(tp):
            sub = f"{path}.{f.name}" if path else f.name
            if f.name not in value:
                required = (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) \
                    or (tp is Aggregate and (version >= 3 or f.name not in AGGREGATE_SINCE_3)) \
                    or (tp is AnalysisResult and f.name in REQUIRED_TOP)
                if required:
                    raise ResultError(f"{sub}: missing")
                continue
            _check(hints[f.name], value[f.name], sub, tp.__name__, f.name, version)
        return
    if origin in (list, List):
        if not isinstance(value, list):
            _fail(path, value, "a list")
        (item,) = typing.get_args(tp)
        for i, v in enumerate(value):
            _check(item, v, f"{path}[{i}]", owner, name, version)
        return
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            _fail(path, value, "an object")
        args = typing.get_args(tp)
        if args and args[1] is not Any:  # typed values (a finding's claimed time by source): checked
            for k, v in value.items():
                _check(args[1], v, f"{path}.{k}", owner, name, version)
        return  # Dict[str, Any] is free-form (the collector's manifest): shown escaped, never computed with
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        _check(inner[0], value, path, owner, name, version)
        return
    if tp is Any:
        return
    if tp is bool:
        if not isinstance(value, bool):
            _fail(path, value, "true or false")
        return
    if tp is str:
        if not isinstance(value, str):
            _fail(path, value, "a string")
        allowed = ENUMS.get((owner, name))
        if allowed is not None and value not in allowed:
            _fail(path, value, "one of " + ", ".join(sorted(allowed)))
        return
    if tp in (int, float):
        _number(path, value, tp is int, owner, name)
        return
    raise TypeError(f"model_check: no check for {tp!r} at {path}")  # pragma: no cover - a new model type


def check_result(data: Any) -> None:
    """Check a result document (``json.loads`` of ``analyze --json``) against
    the result model; see the module docstring for what is checked.

    Raises:
        ResultError: the first problem, as ``"<dotted path>: <value>, expected <what>"``.
    """
    if not isinstance(data, dict):
        _fail("", data, "an object (an hta-report result)")
    if "schema_version" not in data:
        raise ResultError("not an hta-report result (no schema_version)")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_SCHEMA_VERSIONS:
        raise ResultError(f"schema_version is {_describe(version)}; this hta-report reads "
                          f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
    _check(AnalysisResult, data, "", version=version)
    ranks = [r["rank"] for r in data["ranks"]]
    seen = set()
    for i, r in enumerate(ranks):
        if r in seen:
            raise ResultError(f"ranks[{i}].rank: rank {r} appears twice")
        seen.add(r)
    agg = data["aggregate"]
    if agg["gpu_ranks"] > agg["ranks"]:
        raise ResultError(f"aggregate.gpu_ranks: {agg['gpu_ranks']}, expected at most aggregate.ranks ({agg['ranks']})")
    for i, f in enumerate(data.get("findings") or []):
        if f.get("doc_url", "") != "" and not is_doc_url(f["doc_url"]):
            _fail(f"findings[{i}].doc_url", f["doc_url"], "a link to the rules' documentation (https://"
                  + " or https://".join(DOC_HOSTS) + ")")
        for j, loc in enumerate(f.get("locations") or []):
            if loc.get("url", "") != "" and not is_source_url(loc["url"]):
                _fail(f"findings[{i}].locations[{j}].url", loc["url"], "a source line's link (https://…#L12)")
