"""Findings that point at the user's lines: locations in the model and JSON,
SARIF 2.1.0 output, attribution from ``with_stack=True`` traces (issue 16)."""
import json
from pathlib import Path

import pytest

from conftest import shared
from hta_report.api import analyze, compare_paths, load_result
from hta_report.model import SCHEMA_VERSION, AnalysisResult, Finding, SourceLocation
from hta_report.render import render
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


# ---------------------------------------------------------------- SARIF 2.1.0

SCHEMA = Path(__file__).parent / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"


def sarif_errors(doc) -> list:
    """Every violation of the official SARIF 2.1.0 schema (draft-04) in ``doc``."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_schema_check_can_fail():
    # the check itself: a log the schema forbids is reported
    assert sarif_errors({"version": "2.1.0", "runs": [{"tool": {}}]})
    assert sarif_errors({"version": "9", "runs": []})


def _with_location(result, path="train.py", line=12):
    loc = SourceLocation(path=path, line=line, function="main", how="call", time_us=5000.0, share_pct=80.0)
    result.findings.insert(0, Finding(id=result.checks[0].id, title="Slow [x](1) @team", severity="high",
                                      evidence=["a ` b \x1b[31m"], fix="do x", doc_url="https://e.x/doc",
                                      ranks=[0], gain_ms_per_step=5.0, gain_pct=25.0, rule=result.checks[0].rule,
                                      locations=[loc]))
    return result


def test_sarif_is_valid_and_puts_each_finding_on_its_lines(tmp_path, run_cli):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = _with_location(analyze(tmp_path))
    doc = json.loads(render(result, "sarif"))
    assert sarif_errors(doc) == []
    run = doc["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [c.id for c in result.checks]  # one per rule
    (res,) = run["results"]  # only the finding with a line: GitHub rejects results without one
    assert res["ruleId"] == result.checks[0].id and res["level"] == "error"
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    loc = res["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "train.py"}, "region": {"startLine": 12}}
    text = res["message"]["text"]
    assert "5.00 ms per step (25.0 % of the step)" in text and "Fix: do x" in text
    # trace-derived text cannot open an embedded link, a mention or a terminal sequence
    assert "\\[x\\](1)" in text and "@\u2060team" in text and "\x1b" not in text
    unlocated = [f for f in result.findings if not f.locations]
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert len(notes) == len(unlocated)


def test_sarif_from_the_cli_by_extension_and_format(tmp_path, run_cli):
    simple_gpu_trace().write(tmp_path / "t.json")
    code, _, err = run_cli("analyze", tmp_path / "t.json", "-o", tmp_path / "r.sarif")
    assert code == 0, err
    assert sarif_errors(json.loads((tmp_path / "r.sarif").read_text())) == []
    code, _, err = run_cli("analyze", tmp_path / "t.json", "-o", tmp_path / "x.txt", "--format", "sarif")
    assert code == 0, err
    assert json.loads((tmp_path / "x.txt").read_text())["version"] == "2.1.0"


def test_sarif_of_real_traces_is_valid(tmp_path):
    path = shared("trace_diff/control")
    doc = json.loads(render(analyze(path), "sarif"))
    assert sarif_errors(doc) == []
