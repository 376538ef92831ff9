"""Findings that point at the user's lines: locations in the model and JSON,
SARIF 2.1.0 output, attribution from ``with_stack=True`` traces (issue 16)."""
import copy
import json
import os
from pathlib import Path

import pytest

from conftest import shared
from hta_report.api import analyze, compare_paths, load_result
from hta_report.model import SCHEMA_VERSION, AnalysisResult, Finding, SourceLocation
from hta_report.render import render, sarif
from kineto import simple_gpu_trace


def _as_version_1(result: AnalysisResult) -> dict:
    """``result`` as hta-report wrote it before locations existed (schema 1)."""
    doc = result.to_dict()
    doc = {"schema_version": 1, **{k: v for k, v in doc.items() if k != "schema_version"}}
    for f in doc["findings"]:
        f.pop("locations")
    for r in doc["ranks"]:
        r.pop("code")
        r.pop("gpu_span_busy_pct")
        r.pop("replaced")
    for key in ("kernel_busy_pct", "span_busy_pct", "hta_busy_pct", "idle_by_cause"):  # schema 3's
        doc["aggregate"].pop(key)
    return doc


def test_locations_round_trip_and_version_1_results_still_read(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    result.findings.append(Finding(id="x", title="t", severity="low", evidence=[], fix="", doc_url="", locations=[
        SourceLocation(path="train.py", line=12, function="main", how="call", time_us=5.0, share_pct=100.0,
                       excerpt=["for x in loader:", "    y = x.item()"], excerpt_start=11, found=True)]))
    back = AnalysisResult.from_json(result.to_json())
    assert back == result and back.findings[-1].locations[0].line == 12
    assert json.loads(result.to_json())["schema_version"] == SCHEMA_VERSION == 3

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
    doc["schema_version"] = 4
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="reads 1, 2, 3"):
        load_result(tmp_path / "r.json")


# ---------------------------------------------------------------- SARIF 2.1.0

SCHEMA = Path(__file__).parent / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"


def sarif_errors(doc) -> list:
    """Every violation of the official SARIF 2.1.0 schema (draft-04) in
    ``doc``, then of what GitHub code scanning requires (:func:`github_errors`)."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    return errors or github_errors(doc)


def _text(obj, key) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value.get("text", "") if isinstance(value, dict) else ""


def github_errors(doc) -> list:
    """What GitHub code scanning needs of a SARIF upload beyond the schema
    (docs.github.com, "SARIF support for code scanning"), and what it shows
    well: every rule with ``id``, ``name``, ``shortDescription``,
    ``fullDescription``, ``help`` (text and markdown) and ``properties``
    (tags, precision); every result with a ``ruleId`` of those rules (and a
    matching ``ruleIndex``), a message, exactly one location with a
    repository-relative URI and a ``startLine``, ``partialFingerprints``;
    related locations with an ``id`` and a location of their own."""
    errors = []
    for i, run in enumerate(doc.get("runs", [])):
        rules = run["tool"]["driver"].get("rules", [])
        ids = [r.get("id") for r in rules]
        if len(set(ids)) != len(ids):
            errors.append(f"runs/{i}: rule ids repeat")
        for r in rules:
            where = f"runs/{i}/rules/{r.get('id')}"
            for key in ("shortDescription", "fullDescription", "help"):
                if not _text(r, key).strip():
                    errors.append(f"{where}: no {key}")
            if not (r.get("help") or {}).get("markdown", "").strip():
                errors.append(f"{where}: no help markdown")
            if not r.get("name"):
                errors.append(f"{where}: no name")
            props = r.get("properties") or {}
            if not props.get("tags") or props.get("precision") not in ("very-high", "high", "medium", "low"):
                errors.append(f"{where}: properties need tags and a precision")
        for j, res in enumerate(run.get("results", [])):
            where = f"runs/{i}/results/{j}"
            if res.get("ruleId") not in ids:
                errors.append(f"{where}: ruleId {res.get('ruleId')!r} is no rule of the run")
            elif "ruleIndex" in res and ids[res["ruleIndex"]] != res["ruleId"]:
                errors.append(f"{where}: ruleIndex does not point at its rule")
            if not _text(res, "message").strip():
                errors.append(f"{where}: no message")
            if not res.get("partialFingerprints"):
                errors.append(f"{where}: no partialFingerprints")
            locations = res.get("locations", [])
            if len(locations) != 1:
                errors.append(f"{where}: {len(locations)} locations, GitHub takes one")
            for k, loc in enumerate(locations + res.get("relatedLocations", [])):
                phys = loc.get("physicalLocation", {})
                uri = phys.get("artifactLocation", {}).get("uri", "")
                if not uri or uri.startswith("/") or ":" in uri or ".." in uri.split("/"):
                    errors.append(f"{where}/location {k}: URI {uri!r} is not relative to the repository")
                if phys.get("region", {}).get("startLine", 0) < 1:
                    errors.append(f"{where}/location {k}: no startLine")
                if k >= len(locations) and "id" not in loc:
                    errors.append(f"{where}/related location {k}: no id")
    return errors


def test_schema_check_can_fail():
    # the check itself: a log the schema forbids is reported, and one GitHub would not take
    assert sarif_errors({"version": "2.1.0", "runs": [{"tool": {}}]})
    assert sarif_errors({"version": "9", "runs": []})
    bare = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x", "rules": [{"id": "r"}]}}, "results": [
        {"ruleId": "r", "message": {"text": "m"}}]}]}
    assert set(sarif_errors(bare)) == {
        "runs/0/rules/r: no shortDescription", "runs/0/rules/r: no fullDescription", "runs/0/rules/r: no help",
        "runs/0/rules/r: no help markdown", "runs/0/rules/r: no name",
        "runs/0/rules/r: properties need tags and a precision", "runs/0/results/0: no partialFingerprints",
        "runs/0/results/0: 0 locations, GitHub takes one"}


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
    result.findings[0].locations.append(SourceLocation(path="lib/data.py", line=3, function="load", how="def",
                                                       time_us=1000.0, share_pct=20.0))
    doc = json.loads(render(result, "sarif"))
    assert sarif_errors(doc) == []
    run = doc["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == sorted(c.id for c in result.checks)  # one per rule
    assert [r["ruleId"] for r in run["results"]] == [f.id for f in result.findings]  # every finding, in order
    res = run["results"][0]
    assert res["ruleId"] == result.checks[0].id and res["level"] == "error"
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    loc = res["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "train.py"}, "region": {"startLine": 12}}
    assert res["locations"][0]["message"]["text"] == \
        "main: 5.00 ms per step (80 % of the finding's time) spent in the call on this line"
    (other,) = res["relatedLocations"]  # the finding's other lines
    assert other["id"] == 1 and other["physicalLocation"]["artifactLocation"]["uri"] == "lib/data.py"
    assert other["message"]["text"].endswith("spent inside this function (the line is its first)")
    text = res["message"]["text"]
    assert "5.00 ms per step (25.0 % of the step)" in text and "Fix: do x" in text and "not tied" not in text
    # trace-derived text cannot open an embedded link, a mention or a terminal sequence
    assert "\\[x\\](1)" in text and "@\u2060team" in text and "\x1b" not in text
    for r in run["results"][1:]:  # findings without a line: anchored (the trace is outside the repository)
        assert r["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "pyproject.toml"},
                                                         "region": {"startLine": 1}}
        assert "Not tied to a source line" in r["message"]["text"]


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


# ---------------------------------------------------------------- attribution

#: A training script whose lines match the frames of ``training_trace(with_stack="train.py")``
#: (kineto.STACK_LINES: <module> runs line 20, main runs line 15 when tracing
#: starts, __getitem__ is defined on line 6).
TRAIN_PY = """import time
import torch


class Slow(torch.utils.data.Dataset):
    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.randn(8)

    def __len__(self):
        return 64

def main(model, opt):
    for x in torch.utils.data.DataLoader(Slow(), batch_size=8):
        opt.step()
        print(model(x).item())
        x = x.to("cuda")


main(*build())
"""
LINES = {"getitem": 6, "for": 14, "item": 16, "to": 17}


def _stack_trace(tmp_path, **kw):
    from kineto import STACK_LINES, training_trace

    assert TRAIN_PY.splitlines()[STACK_LINES["getitem"] - 1].strip().startswith("def __getitem__")
    assert TRAIN_PY.splitlines()[STACK_LINES["module"] - 1].startswith("main(")
    traces = tmp_path / "traces"
    traces.mkdir()
    training_trace(rank=0, steps=6, item_per_layer=True, pinned=False, workers=False, dataloader_us=3000,
                   with_stack="train.py", **kw).write(traces / "rank0.json")
    return traces


def _lines(result, finding_id):
    (f,) = [f for f in result.findings if f.id == finding_id]
    return [(loc.path, loc.line, loc.how) for loc in f.locations], f


def test_sync_and_data_loading_point_at_the_users_lines(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # a git work tree: URIs are relative to it
    (repo / "jobs").mkdir()
    (repo / "jobs" / "train.py").write_text(TRAIN_PY)
    # a train.py of another project, where the frames do not fit, is never taken for it
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "train.py").write_text("print('hello')\n")
    result = analyze(_stack_trace(tmp_path), source_root=repo)
    sync, f = _lines(result, "sync-in-step")
    # the .item() in the loop: main() was running when tracing started, so the trace only has the
    # line it ran then (15); the call is found in main's body from the python_function it made
    assert sync == [("jobs/train.py", LINES["item"], "call")]
    assert f.locations[0].share_pct == pytest.approx(100.0) and f.locations[0].function == "main"
    assert f.locations[0].excerpt[LINES["item"] - f.locations[0].excerpt_start].strip() == "print(model(x).item())"
    data, f = _lines(result, "dataloader-bound")
    # 90 % of the DataLoader's time runs in __getitem__ (entered in the trace: its def line), 10 % in
    # the DataLoader's own code called from the for loop
    assert data == [("jobs/train.py", LINES["getitem"], "def"), ("jobs/train.py", LINES["for"], "call")]
    assert [round(loc.share_pct) for loc in f.locations] == [90, 10]
    copy, _ = _lines(result, "pageable-memcpy")
    # the batch's .to(); .item()'s 4-byte read back is a device-to-host read, not a pageable upload
    assert copy == [("jobs/train.py", LINES["to"], "call")]
    # the time per step on a line is the cause's time under that frame
    assert sum(loc.time_us for loc in f.locations) == pytest.approx(
        sum(t.time_us for t in result.ranks[0].code.times if t.category == "dataloader"))


def test_without_the_source_the_frames_own_lines_are_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = analyze(_stack_trace(tmp_path))
    sync, f = _lines(result, "sync-in-step")
    assert sync == [("train.py", 15, "frame")] and not f.locations[0].found and not f.locations[0].excerpt
    data, _ = _lines(result, "dataloader-bound")
    assert data[0] == ("train.py", LINES["getitem"], "def")


def test_library_modules_move_the_line_outwards(tmp_path):
    from hta_report.rules import AdviceConfig

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN_PY)
    result = analyze(_stack_trace(tmp_path), source_root=repo, config=AdviceConfig(library_modules=["train"]))
    assert all(not f.locations for f in result.findings)  # every user frame is now library code


def test_traces_without_stacks_say_what_with_stack_adds(tmp_path):
    from hta_report.render.view import stack_note
    from kineto import training_trace

    training_trace(rank=0, steps=4, item_per_layer=True).write(tmp_path / "t.json")
    result = analyze(tmp_path)
    assert not result.ranks[0].code.has_stacks and all(not f.locations for f in result.findings)
    assert "--with-stack" in stack_note(result)
    assert stack_note(analyze(_stack_trace(tmp_path))) == ""


def test_both_loaders_give_the_same_attribution(tmp_path):
    traces = _stack_trace(tmp_path)
    fast = analyze(traces, loader="fast").ranks[0].code
    hta = analyze(traces, loader="hta").ranks[0].code
    assert fast.has_stacks and fast == hta


def test_sarif_of_a_stack_trace_points_at_the_item_line(tmp_path, run_cli):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN_PY)
    traces = _stack_trace(tmp_path)
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "r.sarif", "--source-root", repo, "--no-cache")
    assert code == 0, err
    doc = json.loads((tmp_path / "r.sarif").read_text())
    assert sarif_errors(doc) == []
    by_rule = {r["ruleId"]: r for r in doc["runs"][0]["results"]}
    loc = by_rule["sync-in-step"]["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "train.py"}, "region": {"startLine": LINES["item"]}}
    assert by_rule["sync-in-step"]["level"] in ("error", "warning", "note")


# ---------------------------------------------------------------- HTML and markdown

def test_html_and_markdown_show_the_lines_and_link_them_on_github(tmp_path, monkeypatch):
    import html as htmllib

    from hta_report.render import render as render_as

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(TRAIN_PY)
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/trainer")
    monkeypatch.setenv("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.delenv("GITHUB_SERVER_URL", raising=False)
    result = analyze(_stack_trace(tmp_path), source_root=repo)
    page = render_as(result, "html")
    assert f"train.py:{LINES['item']}" in page
    assert htmllib.escape("print(model(x).item())", quote=False) in page  # the excerpt, read at analyze time
    assert f'<span class="hit">{LINES["item"]}  ' in page
    md = render_as(result, "md")
    url = f"https://github.com/acme/trainer/blob/0123456789abcdef0123456789abcdef01234567/train.py#L{LINES['item']}"
    assert f"[`train.py:{LINES['item']}`]({url})" in md
    monkeypatch.delenv("GITHUB_SHA")
    again = tmp_path / "again"
    again.mkdir()
    md = render_as(analyze(_stack_trace(again), source_root=repo), "md")
    assert f"`train.py:{LINES['item']}`" in md and "github.com" not in md


def test_github_url_refuses_what_it_cannot_vouch_for():
    from hta_report.locate import github_url

    env = {"GITHUB_REPOSITORY": "acme/trainer", "GITHUB_SHA": "abcdef1"}
    assert github_url("src/a b.py", 3, env) == "https://github.com/acme/trainer/blob/abcdef1/src/a%20b.py#L3"
    assert github_url("/abs/train.py", 3, env) == ""
    assert github_url("../x.py", 3, env) == ""
    assert github_url("a.py", 3, {**env, "GITHUB_REPOSITORY": "acme/x)[y]"}) == ""
    assert github_url("a.py", 3, {"GITHUB_SHA": "abcdef1"}) == ""


# ---------------------------------------------------------------- the done-when, end to end

PLAIN_SCRIPT = """import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(16), torch.randn(1)


def main():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=4, num_workers=0)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
"""


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(PLAIN_SCRIPT.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """``hta-report collect --with-stack -o t -- python train.py`` on a plain
    script (no profiler code; slow __getitem__, num_workers=0, .item() each step)."""
    from click.testing import CliRunner

    from hta_report.collect.command import collect_command

    d = tmp_path_factory.mktemp("plain")
    (d / ".git").mkdir()  # the script lies in a git work tree
    (d / "train.py").write_text(PLAIN_SCRIPT)
    old = os.getcwd()
    os.chdir(d)
    try:
        res = CliRunner().invoke(collect_command, ["--with-stack", "-o", "t", "--", "python", "train.py"])
    finally:
        os.chdir(old)
    assert res.exit_code == 0, res.output
    return d


def test_collect_with_stack_then_sarif_points_at_the_data_loading_line(collected, tmp_path, run_cli):
    # analyzed from another directory: the script's tree is named as the source root (the manifest's
    # working directory alone never makes us read a file, see test_hostile_sources.py)
    code, _, err = run_cli("analyze", collected / "t", "-o", tmp_path / "r.sarif", "--json", tmp_path / "r.json",
                           "--no-cache", "--source-root", collected)
    assert code == 0, err
    doc = json.loads((tmp_path / "r.sarif").read_text())
    assert sarif_errors(doc) == []
    by_rule = {r["ruleId"]: r for r in doc["runs"][0]["results"]}
    assert "dataloader-bound" in by_rule, sorted(by_rule)
    first = by_rule["dataloader-bound"]["locations"][0]["physicalLocation"]
    assert first["artifactLocation"]["uri"] == "train.py"
    getitem = range(_line_of(PLAIN_SCRIPT, "def __getitem__"), _line_of(PLAIN_SCRIPT, "return torch.randn(16)") + 1)
    for_line = _line_of(PLAIN_SCRIPT, "for x, y in loader:")
    assert first["region"]["startLine"] in getitem or first["region"]["startLine"] == for_line
    # the sleep is where the time goes: the line of the call inside __getitem__, found in the source
    assert first["region"]["startLine"] == _line_of(PLAIN_SCRIPT, "time.sleep(0.004)")
    lines = {loc["physicalLocation"]["region"]["startLine"] for loc in by_rule["dataloader-bound"]["locations"]}
    result = load_result(tmp_path / "r.json")
    (f,) = [f for f in result.findings if f.id == "dataloader-bound"]
    assert f.locations[0].share_pct > 50 and f.locations[0].function == "__getitem__"
    assert lines <= set(getitem) | {for_line}
    code, _, err = run_cli("analyze", collected / "t", "-o", tmp_path / "r.html", "--no-cache", "-q",
                           "--source-root", collected)
    assert code == 0, err
    assert f"train.py:{_line_of(PLAIN_SCRIPT, 'time.sleep(0.004)')}" in (tmp_path / "r.html").read_text()


def test_the_item_line_on_a_real_cpu_trace(collected):
    # On CPU the sync rule has no GPU idle to measure and stays quiet; the attribution it would use is
    # checked on the same real trace: aten::item's time points at the .item() line, found from main's
    # frame (running since tracing started) and the <built-in method item> it called.
    from hta_report.locate import SourceFinder, finding_locations

    result = analyze(collected / "t")
    assert result.ranks[0].code.has_stacks
    f = Finding(id="sync-in-step", title="t", severity="low", evidence=[], fix="", doc_url="",
                ranks=[result.ranks[0].rank])
    locs = finding_locations(result, f, SourceFinder(root=collected, bases=[collected]))
    assert [(loc.path, loc.line, loc.how) for loc in locs][0] == (
        "train.py", _line_of(PLAIN_SCRIPT, "loss.item()"), "call")


# ---------------------------------------------------------------- GPU time by operator and module

def test_gpu_time_by_operator_and_module(tmp_path):
    from hta_report.render import render as render_as
    from kineto import TraceBuilder

    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    b.python("nn.Module: Sequential_0", 10, 600, 1, None)
    b.python("nn.Module: Linear_0", 20, 200, 2, 1)
    b.cpu_op("aten::linear", 30, 150)
    b.cpu_op("aten::addmm", 40, 100)  # nested: the outermost op, aten::linear, gets the time
    b.kernel("gemm_a", 300, 100, launch_ts=50)
    b.kernel("gemm_b", 400, 50, launch_ts=60)
    b.python("nn.Module: ReLU_0", 300, 200, 3, 1)
    b.cpu_op("aten::relu", 310, 50)
    b.kernel("relu_k", 500, 30, launch_ts=320)
    b.kernel("orphan", 600, 70, launch_ts=700)  # launched outside any op or module: not counted
    b.write(tmp_path / "t.json")
    code = analyze(tmp_path, include_last_step=True).ranks[0].code
    assert [(x.name, x.count, x.total_us) for x in code.gpu_by_op] == [("aten::linear", 2, 150.0),
                                                                       ("aten::relu", 1, 30.0)]
    assert [(x.name, x.count, x.total_us) for x in code.gpu_by_module] == [("Linear_0", 2, 150.0),
                                                                           ("ReLU_0", 1, 30.0)]
    page = render_as(analyze(tmp_path, include_last_step=True), "html")
    assert "GPU time by nn.Module" in page and "Linear_<wbr>0" in page


# ---------------------------------------------------------------- hostile names from the trace

HOSTILE = ["<img src=x>", "[x](https://evil.example)", "@octocat", "`", "\x1b[2J", "a|b", "#12", "*em*"]


def test_hostile_paths_and_functions_stay_inert_in_markdown_html_and_sarif(tmp_path):
    import markup
    from hta_report.render import render as render_as

    simple_gpu_trace().write(tmp_path / "t.json")
    base = analyze(tmp_path)
    for i, text in enumerate(HOSTILE):
        hostile, benign = copy.deepcopy(base), copy.deepcopy(base)
        for result, path, fn, url in ((hostile, f"{text}/train.py", text, f"javascript:{text}"),
                                      (benign, "t0/train.py", "t1", "")):
            result.findings.insert(0, Finding(
                id="sync-in-step", title="t", severity="high", evidence=[], fix="", doc_url="", ranks=[0],
                rule="C5", locations=[SourceLocation(path=path, line=3, function=fn, how="call", time_us=1.0,
                                                     share_pct=50.0, excerpt=[text, text], excerpt_start=2,
                                                     url=url)]))
        problems = markup.markdown_problems(render_as(hostile, "md"), render_as(benign, "md"))
        assert problems == [], (text, problems)
        page = render_as(hostile, "html")
        assert "<img src=x>" not in page and "javascript:" not in page
        doc = json.loads(render_as(hostile, "sarif"))
        assert sarif_errors(doc) == []
        assert "\x1b" not in json.dumps(doc, ensure_ascii=False)
        if not sarif.placeable(hostile.findings[0].locations[0]):  # a URL, an absolute path, a way out, controls
            res = doc["runs"][0]["results"][0]  # the finding, anchored: its path is not a location
            assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "pyproject.toml", text
            assert "not paths under the source root" in res["message"]["text"]
            continue
        res = doc["runs"][0]["results"][0]
        assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("/train.py")
        if "[" in text:
            assert "\\[" in res["locations"][0]["message"]["text"]


def test_compare_writes_the_new_sides_findings_as_sarif(tmp_path, run_cli):
    from kineto import training_trace

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    training_trace(rank=0, steps=4).write(tmp_path / "a" / "t.json")
    training_trace(rank=0, steps=4, item_per_layer=True).write(tmp_path / "b" / "t.json")
    code, _, err = run_cli("compare", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "c.sarif", "--no-cache")
    assert code in (0, 2), err
    doc = json.loads((tmp_path / "c.sarif").read_text())
    assert sarif_errors(doc) == []
    (res,) = [r for r in doc["runs"][0]["results"] if r["ruleId"] == "sync-in-step"]  # no stacks: still a result
    assert "Not tied to a source line: the traces have no Python stacks" in res["message"]["text"]


def test_library_modules_configuration_is_checked(tmp_path):
    from hta_report.errors import InputError
    from hta_report.rules import load_config

    (tmp_path / "ok.toml").write_text('library_modules = ["mylib", "src/vendor/"]\n')
    assert load_config(tmp_path / "ok.toml").library_modules == ["mylib", "src/vendor/"]
    (tmp_path / "bad.toml").write_text('library_modules = "mylib"\n')
    with pytest.raises(InputError, match="library_modules must be a list"):
        load_config(tmp_path / "bad.toml")


def test_a_failure_to_locate_lines_never_costs_the_report(tmp_path, monkeypatch):
    import hta_report.locate

    def broken(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(hta_report.locate, "finding_locations", broken)
    result = analyze(_stack_trace(tmp_path))
    assert result.findings and all(not f.locations for f in result.findings)
    assert any("source lines not located: RuntimeError: disk on fire" in w for w in result.inventory.warnings)


def test_terminal_summary_names_the_top_line(tmp_path):
    from hta_report.render.terminal import render as summary

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN_PY)
    text = summary(analyze(_stack_trace(tmp_path), source_root=repo), [])
    assert f"at train.py:{LINES['item']} in main (100.0 % of its time)" in text


PLAIN_PROFILER = """import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(32), torch.randn(4)


def main():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Slow(), batch_size=4, num_workers=0)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(with_stack=True, schedule=sched,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler("traces")) as p:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            p.step()


main()
"""


def test_a_trace_from_plain_torch_profiler_points_at_the_getitem_line(tmp_path):
    # not our collector: the script profiles itself with torch.profiler.profile(with_stack=True)
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(PLAIN_PROFILER)
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = analyze(tmp_path / "traces", source_root=tmp_path)
    (f,) = [f for f in result.findings if f.id == "dataloader-bound"]
    sleep = next(i for i, line in enumerate(PLAIN_PROFILER.splitlines(), 1) if "time.sleep" in line)
    assert (f.locations[0].path, f.locations[0].line, f.locations[0].function) == ("train.py", sleep, "__getitem__")
    assert f.locations[0].how == "call" and f.locations[0].share_pct > 50
