"""AnalysisResult.to_json writes the text json.dumps(to_dict()) writes, one rank at a time."""
import dataclasses
import json
from pathlib import Path

import pytest

from hta_report.api import load_result

GOLD = Path(__file__).parent / "gold" / "cpu_ddp_2ranks" / "result.json"


@pytest.mark.parametrize("indent", [2, None, 4, "\t"])
def test_to_json_is_the_text_of_the_whole_dict(indent):
    result = load_result(GOLD)
    assert len(result.ranks) == 2
    # strings a trace may hold: a newline and a quote (escaped in JSON), non-ASCII, the
    # writer's own placeholder shape
    rank = result.ranks[1]
    result.ranks[1] = dataclasses.replace(rank, file='a "b"\nc ×µ ranks-0123 "ranks-')
    whole = result.to_dict()
    whole = {"schema_version": whole.pop("schema_version"), **whole}
    assert result.to_json(indent=indent) == json.dumps(whole, indent=indent, allow_nan=False)
    assert json.loads(result.to_json(indent=indent))["ranks"][1]["file"] == result.ranks[1].file


def test_to_json_without_ranks_and_with_nan():
    result = load_result(GOLD)
    empty = dataclasses.replace(result, ranks=[])
    assert json.loads(empty.to_json())["ranks"] == []
    bad = dataclasses.replace(result.ranks[0], window_us=float("nan"))
    with pytest.raises(ValueError):
        dataclasses.replace(result, ranks=[bad]).to_json()


def test_the_json_report_is_written_part_by_part_with_the_same_text(tmp_path):
    from hta_report.api import write_reports

    result = load_result(GOLD)
    out = tmp_path / "r.json"
    write_reports(result, [(out, None)])
    assert out.read_text(encoding="utf-8") == result.to_json()


def test_a_part_that_fails_leaves_the_old_report_whole(tmp_path, monkeypatch):
    from hta_report.api import write_reports
    from hta_report.model import AnalysisResult

    result = load_result(GOLD)
    out = tmp_path / "r.json"
    out.write_text("the good report", encoding="utf-8")
    made = []

    def failing(self, indent=2):
        yield "{"
        made.append(1)
        raise ValueError("Out of range float values are not JSON compliant")

    monkeypatch.setattr(AnalysisResult, "json_parts", failing)
    with pytest.raises(ValueError):
        write_reports(result, [(out, None), (tmp_path / "r.md", None)])
    assert made  # the writer did ask for parts (the failure came from writing, not before it)
    assert out.read_text(encoding="utf-8") == "the good report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_ranks_share_their_equal_strings_and_say_the_same():
    from hta_report.model import share_strings

    a, b = load_result(GOLD), load_result(GOLD)
    before = a.to_json()
    kind_a, kind_b = a.ranks[0].workload.kind, b.ranks[1].workload.kind
    assert kind_a == kind_b == "training" and kind_a is not kind_b  # each read made its own copy
    table = {}
    for r in a.ranks + b.ranks:
        share_strings(r, table)
    assert a.ranks[0].workload.kind is b.ranks[1].workload.kind
    assert a.ranks[0].file == b.ranks[0].file and a.ranks[0].file is b.ranks[0].file
    assert a.to_json() == before
