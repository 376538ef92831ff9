"""Findings that point at the user's lines: locations in the model and JSON,
SARIF 2.1.0 output, attribution from ``with_stack=True`` traces (issue 16)."""
import json

import pytest

from hta_report.api import analyze, compare_paths, load_result
from hta_report.model import SCHEMA_VERSION, AnalysisResult, Finding, SourceLocation
from kineto import simple_gpu_trace


def _as_version_1(result: AnalysisResult) -> dict:
    """``result`` as hta-report wrote it before locations existed (schema 1)."""
    doc = result.to_dict()
    doc = {"schema_version": 1, **{k: v for k, v in doc.items() if k != "schema_version"}}
    for f in doc["findings"]:
        f.pop("locations")
    for r in doc["ranks"]:
        r.pop("code")
    return doc


def test_locations_round_trip_and_version_1_results_still_read(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    result.findings.append(Finding(id="x", title="t", severity="low", evidence=[], fix="", doc_url="", locations=[
        SourceLocation(path="train.py", line=12, function="main", how="call", time_us=5.0, share_pct=100.0,
                       excerpt=["for x in loader:", "    y = x.item()"], excerpt_start=11, found=True)]))
    back = AnalysisResult.from_json(result.to_json())
    assert back == result and back.findings[-1].locations[0].line == 12
    assert json.loads(result.to_json())["schema_version"] == SCHEMA_VERSION == 2

    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_version_1(result)))
    read = load_result(old)  # checked by model_check, then rebuilt
    assert read.schema_version == SCHEMA_VERSION
    assert read.findings[-1].locations == [] and not read.ranks[0].code.has_stacks
    new = tmp_path / "new.json"
    new.write_text(result.to_json())
    comparison = compare_paths(old, new)  # compare reads both versions
    assert comparison.base is not None and comparison.new is not None


def test_unknown_schema_version_is_refused_naming_both_readable(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    doc = analyze(tmp_path).to_dict()
    doc["schema_version"] = 3
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="reads 1, 2"):
        load_result(tmp_path / "r.json")
