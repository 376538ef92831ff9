"""The result check takes its types from msgspec (issue 32, item 9).

``hta_report.model_check`` validates what ``compare`` and the result cache
read with msgspec (``msgspec.convert(..., strict=True)`` against the model's
dataclasses) and keeps by hand only what plain annotations do not say
(finite numbers, 0-100 % shares, counts, known values, links, ranks). These
tests hold it to that: msgspec's verdict is the check's, its messages are put
in our one-line form, and a type the hand-written walker did not know (a
tuple, a ``Literal``, a new ``Optional`` dataclass field) needs no code.
"""
import copy
import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Dict, List, Literal, Optional, Tuple

import msgspec
import pytest

from hta_report.model import AnalysisResult, Finding, type_hints
from hta_report.model_check import ResultError, check_result

GOLD = Path(__file__).parent / "gold" / "cpu_ddp_2ranks" / "result.json"


@pytest.fixture(scope="module")
def doc():
    return json.loads(GOLD.read_text(encoding="utf-8"))


def _error(data) -> ResultError:
    with pytest.raises(ResultError) as info:
        check_result(data)
    return info.value


@pytest.mark.parametrize("where, value, message", [
    (("ranks", 0, "rank"), "0", "ranks[0].rank: '0' (a string), expected an integer"),
    (("ranks", 1, "kernel_count"), True, "ranks[1].kernel_count: true (a boolean), expected an integer"),
    (("aggregate", "idle_pct"), [1], "aggregate.idle_pct: a list, expected a number"),
    (("ranks", 0, "steps"), [], "ranks[0].steps: a list, expected an object"),
    (("inventory", "pytorch_version"), 2, "inventory.pytorch_version: 2, expected a string"),
    (("ranks", 0, "steps", "steps", 0, "warmup"), 0, "ranks[0].steps.steps[0].warmup: 0, expected true or false"),
])
def test_type_errors_are_msgspecs_in_our_one_line_form(doc, where, value, message):
    bad = copy.deepcopy(doc)
    target = bad
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(bad, type=AnalysisResult, strict=True)
    err = _error(bad)
    assert str(err) == message
    assert isinstance(err.__cause__, msgspec.ValidationError)  # the verdict is msgspec's


def test_a_missing_required_field_is_named_by_its_path(doc):
    bad = copy.deepcopy(doc)
    del bad["ranks"][1]["steps"]["steps"][0]["number"]  # StepTime.number has no default
    err = _error(bad)
    assert str(err) == "ranks[1].steps.steps[0].number: missing"
    assert isinstance(err.__cause__, msgspec.ValidationError)


def test_an_object_value_msgspec_does_not_name_is_found(doc):
    """msgspec says ``$.aggregate.idle_by_cause[...]`` for a value of an
    object; the message names its key, also for a number past the float range."""
    bad = copy.deepcopy(doc)
    bad["aggregate"]["idle_by_cause"] = {"launch": 1.0, "sync": "2", "other": 3.0}
    assert str(_error(bad)) == "aggregate.idle_by_cause.sync: '2' (a string), expected a number"
    bad["aggregate"]["idle_by_cause"] = {"launch": 1.0, "sync": 2.0, "other": 10 ** 400}
    assert str(_error(bad)) == "aggregate.idle_by_cause.other: 1e+400 (an integer), expected a finite number"


def _optional_dataclass_fields(cls):
    for name, tp in type_hints(cls).items():
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is typing.Union and len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            yield name, inner[0]


@pytest.mark.parametrize("name, inner", list(_optional_dataclass_fields(Finding)) or
                         [pytest.param(None, None, marks=pytest.mark.skip("no Optional dataclass in Finding"))])
def test_an_optional_dataclass_field_is_checked_with_no_code_of_its_own(doc, name, inner):
    bad = copy.deepcopy(doc)
    finding = bad["findings"][0]
    finding[name] = None
    check_result(bad)  # None, or absent: both fine
    finding[name] = 5
    assert str(_error(bad)) == f"findings[0].{name}: 5, expected an object"
    hints = type_hints(inner)
    fields = {f.name: hints[f.name] for f in dataclasses.fields(inner)}
    floats = [n for n, tp in fields.items() if tp is float]
    strings = [n for n, tp in fields.items() if tp is str]
    finding[name] = {}
    if strings:
        finding[name][strings[0]] = 3
        assert str(_error(bad)) == f"findings[0].{name}.{strings[0]}: 3, expected a string"
        finding[name] = {}
    if floats:
        finding[name][floats[0]] = math.nan
        assert str(_error(bad)) == f"findings[0].{name}.{floats[0]}: NaN, expected a finite number"


# A model of the test's own, with types the hand-written walker raised
# TypeError("model_check: no check for ...") on.
@dataclasses.dataclass
class _Point:
    x_us: float
    label: str = ""


@dataclasses.dataclass
class _Shapes:
    pair: Tuple[int, float]
    mode: Literal["fast", "slow"]
    point: Optional[_Point] = None
    by_name: Dict[str, List[_Point]] = dataclasses.field(default_factory=dict)


def test_check_values_reads_any_type_msgspec_reads():
    from hta_report.model_check import check_values

    good = {"pair": [1, 2.5], "mode": "fast", "point": {"x_us": 3}, "by_name": {"a": [{"x_us": 1.0}]},
            "unknown": "ignored"}
    check_values(good, _Shapes)
    cases = [
        ({"pair": [1, "2"]}, "pair[1]: '2' (a string), expected a number"),
        ({"pair": [1.5, 2]}, "pair[0]: 1.5, expected an integer"),
        ({"mode": "medium"}, "mode: Invalid enum value 'medium'"),
        ({"point": {"label": "p"}}, "point.x_us: missing"),
        ({"by_name": {"a": [{"x_us": 1.0}], "b": [{"x_us": "z"}]}},
         "by_name.b[0].x_us: 'z' (a string), expected a number"),
        ({"by_name": {"a": [{"x_us": math.inf}]}}, "by_name.a[0].x_us: infinity, expected a finite number"),
        ({"by_name": {1: []}}, "by_name: a key that is not a string"),
    ]
    for change, message in cases:
        with pytest.raises(ResultError) as info:
            check_values({**good, **change}, _Shapes)
        assert str(info.value) == message


def test_what_the_check_accepts_msgspec_builds_as_the_model(doc):
    """Every leaf of a real result replaced by a hostile value: whatever the
    check lets through, msgspec converts to the model (the published JSON
    Schema's types hold for it), and every refusal is one line naming a place."""
    paths = []

    def walk(value, path):
        paths.append(path)
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value[:2]):
                walk(v, path + (i,))

    walk(doc["ranks"][0], ("ranks", 0))
    walk(doc["aggregate"], ("aggregate",))
    accepted = refused = 0
    for path in paths:
        for value in (math.nan, -1, 150.0, "x", True, None, [], {}, 10 ** 400):
            bad = copy.deepcopy(doc)
            target = bad
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            try:
                check_result(bad)
            except ResultError as exc:
                refused += 1
                text = str(exc)
                assert "\n" not in text and ": " in text and "$" not in text, text
                continue
            accepted += 1
            msgspec.convert(bad, type=AnalysisResult, strict=True)
    assert accepted and refused > accepted
