"""Checking a result read from JSON before anything trusts it.

A saved result (``analyze --json``, one side of ``compare``) or a result-cache
entry is a file anyone can edit. :func:`check_result` checks the plain JSON
document against the result model (:mod:`hta_report.model`) before it is
rebuilt, in two parts:

* the types, by msgspec (``msgspec.convert(data, type=AnalysisResult,
  strict=True)``, the library that writes the published JSON Schema,
  :mod:`hta_report.schema`): an ``int`` field holds an integer, not a bool,
  a string or a float; a ``float`` field a number within the float range; a
  list a list; an object an object; the fields without a default are there;
  any type msgspec reads (an ``Optional`` dataclass added to the model, say)
  is checked with no code here;
* what the model's plain annotations do not say, by :func:`check_values`, a
  pass over the document with a plan made once per class: finite numbers (no
  NaN or infinity), ranges (counts and ranks not negative; shares of a whole,
  such as HTA's temporal breakdown, within 0–100 %; the ranges hold for
  everything ``analyze`` writes, which the trace fuzzer checks), known values
  (:data:`ENUMS`: finding severities, check statuses, rank sources); then,
  on the result, links (a finding's ``doc_url`` only to the rules'
  documentation, :func:`~hta_report.model.is_doc_url`; a source line's
  ``url`` only of a GitHub line link's shape: a cache entry edited to
  ``javascript:`` is a miss, a saved result is refused), the sections every
  result has, and one result per rank.

The first problem is raised as a :class:`ResultError` naming where it is
(``aggregate.idle_pct: NaN, expected a finite number``); msgspec's own
messages (``Expected `int`, got `str` - at `$.ranks[0].rank```) are put in
the same form (``ranks[0].rank: '0' (a string), expected an integer``).

Keys the model does not know are ignored, and a field the model gives a
default may be absent (a result saved before the field was added), except in
``aggregate``, whose every figure the gates read.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
import types
import typing
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import msgspec

from .model import (CHECK_STATUSES, DOC_HOSTS, READABLE_SCHEMA_VERSIONS, Aggregate, AnalysisResult, is_doc_url,
                    is_source_url, type_hints)

__all__ = ["ResultError", "check_result", "check_values", "ENUMS", "SHARES"]

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
#: Integer fields that may be negative (step numbers, stream ids, correlations (-1: none), fields
#: copied from the trace); every other integer (counts, bytes, ranks) may not.
SIGNED_INTS = frozenset({"number", "stream", "correlation", "world_size", "schema_version", "compute_major",
                         "kineto_schema_versions", "steps"})
#: Largest finite float: an integer above it in a float field overflows (µs, %, bytes alike).
_MAX_FLOAT = sys.float_info.max
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


#: msgspec's names of JSON types (``Expected `int`, got `str```) -> ours.
_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
          "array": "a list", "object": "an object", "null": "null"}
#: Python's JSON types -> msgspec's names of them.
_KINDS = {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object", type(None): "null"}
#: A msgspec error: what, then where (``- at `$.ranks[0].rank```, or ``- at
#: `key` in `$.manifest``` for an object's key).
_MSGSPEC_ERROR = re.compile(r"(?P<what>.*?)(?: - at `(?P<at>[^`]*)`(?: in `(?P<within>[^`]*)`)?)?", re.S)
#: One step of msgspec's path: ``.name``, ``[3]``, or ``[...]`` (a key it does not name).
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")

#: A field's check in :func:`check_values`' plan: ``("model", class)``,
#: ``("list", item)``, ``("dict", value)``, ``("num", integer, share,
#: signed)`` or ``("enum", allowed)``; None: nothing beyond msgspec's types.
Spec = Optional[Tuple[Any, ...]]


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _kind(value: Any) -> str:
    """msgspec's name of a JSON value's type (``str``, ``array``...)."""
    return _KINDS.get(type(value), type(value).__name__)


def _follow(value: Any, steps: List[Tuple[str, str]], path: str, want: Any) -> Tuple[str, Any]:
    """The dotted path and the value at msgspec's ``steps`` from ``value``; at
    a ``[...]`` step, the first key whose value (at the steps after it)
    satisfies ``want``.

    Raises:
        LookupError, TypeError: the steps do not lead anywhere in ``value``.
    """
    for i, (name, index) in enumerate(steps):
        if name:
            path, value = _join(path, name), value[name]
        elif index != "...":
            path, value = _join(path, int(index)), value[int(index)]
        else:
            for key, item in value.items():
                try:
                    found = _follow(item, steps[i + 1:], _join(path, key), want)
                except (LookupError, TypeError):
                    continue
                if want(found[1]):
                    return found
            raise LookupError(path)
    return path, value


def _translated(exc: msgspec.ValidationError, data: Any) -> ResultError:
    """msgspec's ``exc`` about ``data`` as our one line: the dotted path, the
    value found there and what was expected (``ranks[0].rank: '0' (a
    string), expected an integer``)."""
    m = _MSGSPEC_ERROR.fullmatch(str(exc))
    what, at, within = (m.group("what"), m.group("at"), m.group("within")) if m else (str(exc), None, None)
    missing = re.match(r"Object missing required field `([^`]*)`", what)
    got = re.search(r"got `([^`]*)`", what)

    def want(v: Any) -> bool:  # the value msgspec means, under a key it does not name
        if missing:
            return isinstance(v, dict) and missing.group(1) not in v
        if got:
            return _kind(v) == got.group(1)
        return _kind(v) == "int" and abs(v) > _MAX_FLOAT  # "Number out of range"

    try:
        path, value = _follow(data, _STEP.findall((within or at or "$")[1:]), "", want)
    except (LookupError, TypeError):  # pragma: no cover - msgspec's path is always in the document
        return ResultError(f"the document: {exc}")
    place = path or "the document"
    if within is not None:
        return ResultError(f"{place}: a key that is not a string")
    if missing:
        return ResultError(f"{_join(path, missing.group(1))}: missing")
    expected = re.match(r"Expected `([^`]*)`", what)
    if expected and got:
        names = [n for n in expected.group(1).split(" | ") if n != "null"] or ["null"]
        return ResultError(f"{place}: {_describe(value)}, expected "
                           + " or ".join(_WORDS.get(n, f"`{n}`") for n in names))
    if what.startswith("Number out of range"):  # an integer past the float range: float() would overflow
        return ResultError(f"{place}: {_describe(value)}, expected a finite number")
    return ResultError(f"{place}: {what}")  # msgspec's words (a Literal: "Invalid enum value 'x'")


def _spec(tp: Any, owner: str, name: str) -> Spec:
    """What :func:`check_values` checks in a value of type ``tp`` held by
    field ``name`` of class ``owner`` (the items of a list or the values of an
    object are checked as their field is)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return ("model", tp)
    if origin is list and len(args) == 1:
        item = _spec(args[0], owner, name)
        return None if item is None else ("list", item)
    if origin is dict and len(args) == 2:
        value = _spec(args[1], owner, name)  # Dict[str, Any] (the collector's manifest) is free-form
        return None if value is None else ("dict", value)
    inner = [a for a in args if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(inner) == 1:  # Optional[X]: X is checked
        return _spec(inner[0], owner, name)
    if tp in (int, float):
        shares = SHARES.get(owner, frozenset())
        share = name in shares or ("*" in shares and name.endswith("_pct"))
        return ("num", tp is int, share, name in SIGNED_INTS)
    if tp is str and (owner, name) in ENUMS:
        return ("enum", ENUMS[(owner, name)])
    return None  # bool, free text, Any, and any other type msgspec checked


@functools.lru_cache(maxsize=None)
def _plan(cls: type) -> Tuple[Tuple[str, Tuple[Any, ...]], ...]:
    """The fields of model class ``cls`` that :func:`check_values` looks at, with their checks."""
    hints = type_hints(cls)
    found = ((f.name, _spec(hints[f.name], cls.__name__, f.name)) for f in dataclasses.fields(cls))
    return tuple((name, spec) for name, spec in found if spec is not None)


def _problem(spec: Tuple[Any, ...], value: Any) -> Optional[str]:
    """What a number or an enum's string should have been; None when it is fine."""
    if spec[0] == "enum":
        return None if value in spec[1] else "one of " + ", ".join(sorted(spec[1]))
    _, integer, share, signed = spec
    if not integer and not math.isfinite(value):
        return "a finite number"
    if share and not -_PCT_SLACK <= value <= 100 + _PCT_SLACK:
        return "a share within 0–100 %"
    if integer and not share and not signed and value < 0:
        return "a count, not negative"
    # Times may be negative: HTA rounds fractional timestamps inwards, so a
    # sub-µs event can end before it starts (a step time <= 0 is "no steps"
    # to the verdict and the gates).
    return None


def _visit(spec: Tuple[Any, ...], value: Any, path: str) -> None:
    kind = spec[0]
    if kind == "model":
        for name, sub in _plan(spec[1]):
            if name not in value or value[name] is None:
                continue
            if sub[0] in ("num", "enum"):
                problem = _problem(sub, value[name])
                if problem is not None:
                    _fail(_join(path, name), value[name], problem)
            else:
                _visit(sub, value[name], _join(path, name))
        return
    sub = spec[1]
    items = enumerate(value) if kind == "list" else value.items()
    leaf = sub[0] in ("num", "enum")
    for key, item in items:
        if item is None:
            continue
        if not leaf:
            _visit(sub, item, _join(path, key))
        elif (problem := _problem(sub, item)) is not None:
            _fail(_join(path, key), item, problem)


def check_values(data: Any, model: type) -> None:
    """Check a plain JSON document against model dataclass ``model``: its
    types by msgspec (``msgspec.convert(data, type=model, strict=True)``:
    unknown keys ignored, fields with a default may be absent), then what
    plain annotations do not say: numbers finite; the fields of
    :data:`SHARES` within 0–100 % (with 1e-6 of slack for float rounding);
    integers not negative except :data:`SIGNED_INTS`; the strings of
    :data:`ENUMS` among their values.

    Raises:
        ResultError: the first problem, as ``"<dotted path>: <value>, expected <what>"``
            (a type error chained to msgspec's ``ValidationError``).
    """
    try:
        msgspec.convert(data, type=model, strict=True)
    except msgspec.ValidationError as exc:
        raise _translated(exc, data) from exc
    _visit(("model", model), data, "")


def check_result(data: Any) -> None:
    """Check a result document (``json.loads`` of ``analyze --json``) against
    the result model: :func:`check_values`, then the sections every result
    has, one result per rank, ``aggregate.gpu_ranks`` at most
    ``aggregate.ranks``, and the findings' links; see the module docstring.

    Raises:
        ResultError: the first problem, as ``"<dotted path>: <value>, expected <what>"``.
    """
    if not isinstance(data, dict):
        _fail("", data, "an object (an hta-report result)")
    if "schema_version" not in data:
        if "inventory" in data or data.get("kind") == "comparison":
            raise ResultError("a result saved by hta-report without a schema_version: put back the "
                              "\"schema_version\" it was written with, or analyze its traces again")
        raise ResultError("not an hta-report result (no schema_version)")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_SCHEMA_VERSIONS:
        raise ResultError(f"schema_version is {_describe(version)}; this hta-report reads "
                          f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
    check_values(data, AnalysisResult)
    for name in REQUIRED_TOP:
        if name not in data:
            raise ResultError(f"{name}: missing")
    agg = data["aggregate"]
    for f in dataclasses.fields(Aggregate):
        if f.name not in agg and (version >= 3 or f.name not in AGGREGATE_SINCE_3):
            raise ResultError(f"aggregate.{f.name}: missing")
    ranks = [r["rank"] for r in data["ranks"]]
    seen = set()
    for i, r in enumerate(ranks):
        if r in seen:
            raise ResultError(f"ranks[{i}].rank: rank {r} appears twice")
        seen.add(r)
    if agg["gpu_ranks"] > agg["ranks"]:
        raise ResultError(f"aggregate.gpu_ranks: {agg['gpu_ranks']}, expected at most aggregate.ranks ({agg['ranks']})")
    for i, f in enumerate(data.get("findings") or []):
        if f.get("doc_url", "") != "" and not is_doc_url(f["doc_url"]):
            _fail(f"findings[{i}].doc_url", f["doc_url"], "a link to the rules' documentation (https://"
                  + " or https://".join(DOC_HOSTS) + ")")
        for j, loc in enumerate(f.get("locations") or []):
            if loc.get("url", "") != "" and not is_source_url(loc["url"]):
                _fail(f"findings[{i}].locations[{j}].url", loc["url"], "a source line's link (https://…#L12)")
