"""Rule configuration: [tool.hta-report] in pyproject.toml, --config FILE.toml, `hta-report rules`."""
import json

import pytest

from hta_report.errors import InputError
from hta_report.rules import RULE_IDS, AdviceConfig, load_config
from kineto import simple_gpu_trace


def test_defaults_without_pyproject(tmp_path):
    assert load_config(cwd=tmp_path) == AdviceConfig()


def test_pyproject_table_in_the_current_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.hta-report]\ndataloader-pct = 12\nstep_outlier_min_steps = 8\n'
        'disable = ["gpu-gaps"]\n')
    cfg = load_config(cwd=tmp_path)
    assert (cfg.dataloader_pct, cfg.step_outlier_min_steps, cfg.disable) == (12.0, 8, ["gpu-gaps"])


def test_pyproject_without_our_table_gives_defaults(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_config(cwd=tmp_path) == AdviceConfig()


def test_config_file_top_level_or_tool_table(tmp_path):
    (tmp_path / "a.toml").write_text("sync_pct = 3\n")
    (tmp_path / "b.toml").write_text('[tool.hta-report]\nsync_pct = 4\n')
    assert load_config(tmp_path / "a.toml").sync_pct == 3.0
    assert load_config(tmp_path / "b.toml").sync_pct == 4.0


@pytest.mark.parametrize("text, needle", [
    ("bogus = 1\n", "unknown configuration key 'bogus'"),
    ('disable = ["no-such-rule"]\n', "unknown rule id 'no-such-rule'"),
    ('disable = ["C1"]\n', "unknown rule id 'C1' in disable: rules are named by their slug, e.g. dataloader-bound"),
    ('disable = "gpu-gaps"\n', "disable must be a list"),
    ('dataloader_pct = "high"\n', "dataloader_pct must be a number"),
    ("step_outlier_min_steps = 2.5\n", "must be an integer"),
    ("gap_pct = -1\n", "must be >= 0"),
    ("gap_pct = \n", "not valid TOML"),
])
def test_bad_configuration_is_one_clear_error(tmp_path, text, needle):
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(InputError, match=needle) as info:
        load_config(tmp_path / "c.toml")
    assert str(tmp_path / "c.toml") in str(info.value) and "\n" not in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_rules_command_json(run_cli):
    code, out, err = run_cli("rules", "--format", "json")
    assert code == 0, err
    entries = json.loads(out)
    assert len(entries) >= 20 and {e["id"] for e in entries} == set(RULE_IDS)
    for e in entries:
        assert set(e) == {"id", "rule", "title", "description", "threshold", "source", "fix", "doc_url", "edit", "enabled"}
        assert e["threshold"] and e["source"] and e["doc_url"].startswith("https://")
        assert e["description"] and e["fix"] and "C" + e["rule"].lstrip("C") not in e["description"] + e["fix"]
    assert any("proposal" in e["source"] for e in entries)


def test_rules_command_text_shows_the_configured_thresholds(tmp_path, run_cli):
    (tmp_path / "c.toml").write_text('dataloader_pct = 7\ndisable = ["gpu-gaps"]\n')
    code, out, _ = run_cli("rules", "--config", tmp_path / "c.toml")
    assert code == 0
    assert "DataLoader wait > 7 % of the step" in out and "gpu-gaps  [disabled]" in out
    assert out.splitlines()[0] == "trace-window"  # the id heads each rule, no number
    code, md, _ = run_cli("rules", "--format", "markdown", "--config", tmp_path / "c.toml")
    assert code == 0 and "DataLoader wait > 7 % of the step" in md
    assert "**Long stretches with no GPU work** (disabled by the configuration)" in md


def test_analyze_with_config(tmp_path, run_cli):
    traces = tmp_path / "t"
    traces.mkdir()
    simple_gpu_trace(steps=4).write(traces / "a.json")
    (tmp_path / "c.toml").write_text('[tool.hta-report]\ndisable = ["tensor-cores-unused"]\ndataloader_pct = 50\n')
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "r.json", "--config", tmp_path / "c.toml")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    checks = {c["id"]: c["status"] for c in data["checks"]}
    assert checks["tensor-cores-unused"] == "disabled" and checks["dataloader-bound"] == "fine"
    assert "tensor-cores-unused" not in {f["id"] for f in data["findings"]}


def test_analyze_with_bad_config_exits_1(tmp_path, run_cli):
    traces = tmp_path / "t"
    traces.mkdir()
    simple_gpu_trace().write(traces / "a.json")
    (tmp_path / "c.toml").write_text("nope = 1\n")
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "r.html", "--config", tmp_path / "c.toml")
    assert code == 1
    lines = [l for l in err.splitlines() if l]
    assert len(lines) == 1 and "unknown configuration key 'nope'" in lines[0]
    assert not (tmp_path / "r.html").exists()
