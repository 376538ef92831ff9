"""SARIF for GitHub code scanning (issue 32): every finding is one result with
one location (its line, else the run's anchor: the collected script, the
trace folder's manifest, the first trace file, else ``pyproject.toml``),
rule metadata that is the catalogue's and the same on every run, stable
``partialFingerprints``, and a line on stderr when findings have no line.
Each log is checked against the SARIF 2.1.0 schema and GitHub's required
fields (:func:`test_source_lines.sarif_errors`)."""
import copy
import json
import os
from pathlib import Path

import pytest

from conftest import REPO, SHARED_ROOT
from hta_report.api import analyze
from hta_report.model import Finding, SourceLocation
from hta_report.render import sarif
from kineto import simple_gpu_trace, training_trace
from markup import inspect_markdown, markdown_problems
from test_source_lines import sarif_errors

SAMPLES = sorted(p.name for p in (REPO / "sample_traces").iterdir() if p.is_dir())
#: Real traces (../shared): the H100 timesformer (Python stacks; its largest finding has no line), a
#: GPU job without stacks, a CPU-only rank, a trace without ProfilerStep.
SHARED = ["tracelens/h100_timesformer", "hta/trace_diff/control", "hta/cpu_only", "hta/alexnet"]


def _shared(name: str) -> Path:
    path = SHARED_ROOT / name
    if not path.is_dir():
        pytest.skip(f"{path} not available (../shared is absent)")
    return path


def _log(result, root=REPO) -> dict:
    return sarif.sarif_log(result, root=Path(root))


def _check_one_to_one(result, doc) -> None:
    """The log is valid, and its results are the findings, one to one, in order."""
    assert sarif_errors(doc) == []
    results = doc["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == [f.id for f in result.findings]
    for f, r in zip(result.findings, results):
        assert r["level"] == sarif.LEVELS[f.severity]
        placed = [loc for loc in f.locations if sarif.placeable(loc)]
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        if placed:
            assert uri == sarif._uri(placed[0].path) and len(r.get("relatedLocations", [])) == len(placed) - 1
        else:
            assert "Not tied to a source line" in r["message"]["text"]
            assert r["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_sample_finding_is_a_result_anchored_to_its_manifest(sample, sample_results):
    result = sample_results[sample]
    assert result.findings
    doc = _log(result)
    _check_one_to_one(result, doc)
    for r in doc["runs"][0]["results"]:  # a workload: no script, so the trace folder's manifest
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
            f"sample_traces/{sample}/manifest.json"


@pytest.mark.parametrize("name", SHARED)
def test_every_shared_trace_finding_is_a_result(name):
    result = analyze(_shared(name), cache=None)
    doc = _log(result)
    _check_one_to_one(result, doc)
    for f, r in zip(result.findings, doc["runs"][0]["results"]):  # the traces lie outside the repository
        if not any(sarif.placeable(loc) for loc in f.locations):
            assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == sarif.FALLBACK_URI


def test_the_timesformer_high_finding_reaches_code_scanning():
    """The H100 timesformer trace: host-bound is the largest finding (57 % of the step, high) and has no
    line; it was a notification GitHub never shows, now it is an ``error`` result."""
    result = analyze(_shared("tracelens/h100_timesformer"), cache=None)
    doc = _log(result)
    by_rule = {r["ruleId"]: r for r in doc["runs"][0]["results"]}
    assert len(by_rule) == len(result.findings) and result.findings[0].id == "host-bound"
    assert by_rule["host-bound"]["level"] == "error"
    assert "Not tied to a source line" in by_rule["host-bound"]["message"]["text"]
    assert "invocations" in doc["runs"][0] and "toolExecutionNotifications" not in doc["runs"][0]["invocations"][0]
    assert sarif.placement_note(result, REPO).startswith(f"{len(result.findings) - 2} of {len(result.findings)} "
                                                         "findings have no source line; anchored to pyproject.toml")


def test_rule_metadata_is_the_catalogue_and_the_same_on_every_run(tmp_path, sample_results):
    import dataclasses

    from hta_report.rules import RULES

    simple_gpu_trace().write(tmp_path / "t.json")
    a = analyze(tmp_path)
    b = sample_results[SAMPLES[0]]
    b = dataclasses.replace(b, checks=b.checks[:3])  # a result saved by another version, with other checks
    rules_a = _log(a)["runs"][0]["tool"]["driver"]["rules"]
    rules_b = _log(b, root=tmp_path)["runs"][0]["tool"]["driver"]["rules"]
    assert rules_a == rules_b and [r["id"] for r in rules_a] == sorted(r.id for r in RULES)
    by_id = {r.id: r for r in RULES}
    for d in rules_a:
        r = by_id[d["id"]]
        assert d["name"] == "".join(w.capitalize() for w in r.id.split("-"))  # CamelCase of the id, never "C1"
        assert r.fix in d["help"]["markdown"] and d["fullDescription"]["text"]
        assert f"docs/RULES.md#{r.id}" in d["help"]["markdown"] and d["helpUri"] == r.doc_url
        assert "status" not in d["properties"] and "rule" not in d["properties"]  # nothing of one run
    assert not any("C1" == d["name"] for d in rules_a)


def test_a_finding_of_a_rule_this_version_lacks_gets_its_own_descriptor(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    result.findings.insert(0, Finding(id="old-rule", title="t", severity="low", evidence=[], fix="", doc_url="",
                                      rule="C99"))
    doc = _log(result, tmp_path)
    assert sarif_errors(doc) == []
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert rules[-1]["id"] == "old-rule" and doc["runs"][0]["results"][0]["ruleIndex"] == len(rules) - 1


def test_fingerprints_stay_when_the_numbers_change(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    f = Finding(id="host-bound", title="Host-bound: the GPU waits 57 % of the step", severity="high",
                evidence=["rank 0: 217.3 ms"], fix="", doc_url="", gain_pct=57.0)
    g = copy.deepcopy(f)
    g.title, g.gain_pct, g.evidence = "Host-bound: the GPU waits 61.5 % of the step", 61.5, ["rank 0: 230 ms"]
    h = copy.deepcopy(f)
    h.id = "launch-bound"
    prints = []
    for x in (f, g, h):
        result.findings = [x]
        prints.append(_log(result, tmp_path)["runs"][0]["results"][0]["partialFingerprints"])
    assert prints[0] == prints[1] != prints[2]
    result.findings = [copy.deepcopy(f)]  # on a line: the file counts, the line does not
    result.findings[0].locations = [SourceLocation(path="train.py", line=10)]
    on_10 = _log(result, tmp_path)["runs"][0]["results"][0]["partialFingerprints"]
    result.findings[0].locations = [SourceLocation(path="train.py", line=14)]
    assert _log(result, tmp_path)["runs"][0]["results"][0]["partialFingerprints"] == on_10 != prints[0]


# ---------------------------------------------------------------- the anchor

def _run_dir(root: Path, manifest: dict, name="traces") -> Path:
    d = root / name
    d.mkdir(parents=True)
    training_trace(rank=0, steps=4, dataloader_us=3000.0, workers=False).write(d / "rank-0.json")
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def _anchor(run: Path, root: Path) -> sarif.Anchor:
    result = analyze(run, cache=None)
    assert result.findings
    return sarif.anchor(result, root.resolve())


def test_the_anchor_is_the_collected_script_under_the_source_root(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text("print(1)\n")
    run = _run_dir(repo, {"run": {"mode": "script", "command": ["python", "-u", "src/train.py", "--lr", "1"],
                                  "cwd": str(repo)}})
    assert _anchor(run, repo) == sarif.Anchor("src/train.py", "the collected script")
    doc = sarif.sarif_log(analyze(run, cache=None), root=repo)
    assert sarif_errors(doc) == []
    for r in doc["runs"][0]["results"]:
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/train.py"
        assert "placed on src/train.py, the collected script" in r["message"]["text"]


def test_the_anchor_of_a_module_and_of_the_profile_api(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "main.py").write_text("print(1)\n")
    run = _run_dir(repo, {"run": {"mode": "script", "command": ["python3.11", "-m", "pkg.main"], "cwd": str(repo)}})
    assert _anchor(run, repo).uri == "pkg/main.py"
    api = _run_dir(repo, {"command_line": ["pkg/main.py", "--x"], "run": {"mode": "api"}}, name="api")
    assert _anchor(api, repo).uri == "pkg/main.py"  # sys.argv of the script, relative: under the source root


@pytest.mark.parametrize("case", ["outside", "missing", "link-out", "dotdot", "workload", "venv"])
def test_a_script_not_under_the_source_root_is_never_the_anchor(tmp_path, case):
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    (elsewhere / "train.py").write_text("SECRET\n")
    run_info = {"outside": {"mode": "script", "command": ["python", str(elsewhere / "train.py")], "cwd": str(repo)},
                "missing": {"mode": "script", "command": ["python", "train.py"], "cwd": str(repo)},
                "link-out": {"mode": "script", "command": ["python", "link.py"], "cwd": str(repo)},
                "dotdot": {"mode": "script", "command": ["python", "../elsewhere/train.py"], "cwd": str(repo)},
                "workload": {"mode": "workload", "workload": "cnn"},
                "venv": {"mode": "script", "command": ["python", ".venv/lib/site-packages/x.py"], "cwd": str(repo)},
                }[case]
    if case == "link-out":
        os.symlink(elsewhere / "train.py", repo / "link.py")
    if case == "venv":  # a file there, but in an environment, not the user's code
        (repo / ".venv" / "lib" / "site-packages").mkdir(parents=True)
        (repo / ".venv" / "lib" / "site-packages" / "x.py").write_text("print(1)\n")
    run = _run_dir(repo, {"command_line": ["hta-report", "collect"], "run": run_info})
    assert _anchor(run, repo) == sarif.Anchor("traces/manifest.json", "the trace folder's manifest")


def test_without_a_manifest_the_first_trace_file_then_pyproject(tmp_path):
    repo = tmp_path / "repo"
    (repo / "t").mkdir(parents=True)
    for rank in (1, 0):
        training_trace(rank=rank, world_size=2, steps=4, dataloader_us=3000.0, workers=False).write(
            repo / "t" / f"rank-{rank}.json")
    assert _anchor(repo / "t", repo) == sarif.Anchor("t/rank-0.json", "the first trace file")
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text("[project]\n")  # the fallback, only where it exists
    a = _anchor(repo / "t", other)  # the traces lie outside this source root
    assert a.uri == sarif.FALLBACK_URI and "no script, manifest or trace file" in a.what


def test_the_cli_says_when_findings_have_no_source_line(tmp_path, run_cli, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # the source root: the git work tree of the current directory
    (repo / "train.py").write_text("print(1)\n")
    run = _run_dir(repo, {"run": {"mode": "script", "command": ["python", "train.py"], "cwd": str(repo)}})
    monkeypatch.chdir(repo)
    code, _, err = run_cli("analyze", "traces", "-o", "f.sarif", "-q", "--no-cache")
    assert code == 0, err
    doc = json.loads((repo / "f.sarif").read_text())
    n = len(doc["runs"][0]["results"])
    assert n > 0 and sarif_errors(doc) == []
    assert err.strip() == (f"hta-report: SARIF: {n} of {n} finding{'s' if n > 1 else ''} "
                           f"{'have' if n > 1 else 'has'} no source line; anchored to train.py (the collected script)")
    code, _, err = run_cli("analyze", str(run), "-o", "f.md", "-q", "--no-cache")  # no SARIF written: no line
    assert code == 0 and "SARIF" not in err


def test_no_line_on_stderr_when_every_finding_has_its_line(tmp_path):
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    result.findings = [f for f in result.findings[:1]]
    for f in result.findings:
        f.locations = [SourceLocation(path="train.py", line=3)]
    assert sarif.placement_note(result, tmp_path) == ""
    result.findings = []
    assert sarif.placement_note(result, tmp_path) == ""
    assert _log(result, tmp_path)["runs"][0]["results"] == []


def test_the_anchor_follows_source_root(tmp_path, monkeypatch, run_cli):
    """``--source-root`` decides where line-less findings go, whatever the
    current directory: the trace folder's manifest under that root."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(REPO / "sample_traces" / "cpu_dataloader_bound", repo / "traces")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = run_cli("analyze", repo / "traces", "-o", tmp_path / "f.sarif", "--source-root", repo,
                           "--no-cache")
    assert code == 0, err
    results = json.loads((tmp_path / "f.sarif").read_text())["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert results and uris == {"traces/manifest.json"}
    assert "anchored to traces/manifest.json" in err


def test_a_saved_rule_id_puts_no_markup_into_the_rule_help(tmp_path):
    """Issue 56 item 4: a saved result's finding of a rule this version lacks
    got a descriptor whose ``help.markdown`` held the id as it was saved: raw
    HTML (``<img onerror>``) and a link reached code scanning's rule help. The
    markdown is escaped as every other trace-derived markdown is."""
    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path)
    hostile = "x<img src=x onerror=alert(1)>[click](https://evil.example)"
    result.findings.insert(0, Finding(id=hostile, title="t", severity="low", evidence=[], fix="", doc_url="",
                                      rule="C99"))
    doc = _log(result, tmp_path)
    (desc,) = [r for r in doc["runs"][0]["tool"]["driver"]["rules"] if r["id"] == hostile]
    (benign,) = [r for r in _log(_with_rule(tmp_path, "old-rule"), tmp_path)["runs"][0]["tool"]["driver"]["rules"]
                 if r["id"] == "old-rule"]
    assert markdown_problems(desc["help"]["markdown"], benign["help"]["markdown"]) == []
    assert "onerror=alert(1)" in "".join(inspect_markdown(desc["help"]["markdown"]).text)  # readable, inert


def _with_rule(tmp_path, rule_id: str):
    result = analyze(tmp_path)
    result.findings.insert(0, Finding(id=rule_id, title="t", severity="low", evidence=[], fix="", doc_url="",
                                      rule="C99"))
    return result
