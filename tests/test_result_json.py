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
