"""CLI behaviour: exit codes, one-line errors naming the file, atomic output."""
import gzip
import json
import subprocess
import sys

import pytest

from kineto import simple_gpu_trace


@pytest.fixture
def good_dir(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    simple_gpu_trace(rank=0).write(d / "a.json")
    return d


def _one_line_error(err, *needles):
    lines = [l for l in err.strip().splitlines() if l]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert str(n) in lines[0]


def test_help_documents_exit_codes(run_cli):
    code, out, _ = run_cli("analyze", "--help")
    assert code == 0
    assert "Exit codes" in out and "2  a quality gate" in out


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0 and "hta-report" in out


def test_missing_directory(tmp_path, run_cli):
    code, _, err = run_cli("analyze", tmp_path / "nope", "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, tmp_path / "nope", "no such directory")


def test_empty_directory(tmp_path, run_cli):
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, "no trace files")


@pytest.mark.parametrize("content, needle", [
    (b"this is not json", "not valid JSON"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1,', "truncated JSON"),
    (gzip.compress(b'{"traceEvents": []}')[:-10], "gzip"),
])
def test_bad_file_is_named(tmp_path, run_cli, content, needle):
    name = "bad.json.gz" if content[:2] == b"\x1f\x8b" else "bad.json"
    (tmp_path / name).write_bytes(content)
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, tmp_path / name, needle)


def test_two_files_one_rank_names_both(good_dir, run_cli, tmp_path):
    simple_gpu_trace(rank=0).write(good_dir / "b.json")
    code, _, err = run_cli("analyze", good_dir, "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, "rank 0", good_dir / "a.json", good_dir / "b.json")


def test_ranks_from_file_names_and_sequential(tmp_path, run_cli):
    simple_gpu_trace(rank=None).write(tmp_path / "worker_rank_5.json")
    simple_gpu_trace(rank=None).write(tmp_path / "x.json")
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert [(f["rank"], f["rank_source"]) for f in data["inventory"]["files"]] == [(0, "sequential"), (5, "file name")]
    assert any("analyzed as rank 0" in w for w in data["inventory"]["warnings"])


def test_formats_follow_extension(good_dir, tmp_path, run_cli):
    code, out, err = run_cli("analyze", good_dir, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert (tmp_path / "r.md").read_text().startswith("## hta-report")
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] == 1
    assert f"wrote {tmp_path / 'r.md'}" in out
    code, _, _ = run_cli("analyze", good_dir, "-o", tmp_path / "x.txt", "--format", "md", "-q")
    assert code == 0 and (tmp_path / "x.txt").read_text().startswith("## hta-report")


def test_failed_run_leaves_existing_report_untouched(good_dir, tmp_path, run_cli):
    report = tmp_path / "r.html"
    code, _, _ = run_cli("analyze", good_dir, "-o", report)
    assert code == 0
    before = report.read_bytes()
    (good_dir / "a.json").write_text("{")  # no readable trace left: no report (a partial one is in test_bad_input)
    code, _, _ = run_cli("analyze", good_dir, "-o", report)
    assert code == 1
    assert report.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "traces"]  # no temp files


def test_output_in_missing_directory(good_dir, tmp_path, run_cli):
    code, _, err = run_cli("analyze", good_dir, "-o", tmp_path / "missing" / "r.html")
    assert code == 1
    _one_line_error(err, tmp_path / "missing" / "r.html", "does not exist")


def test_usage_error_exits_1(run_cli):
    code, _, err = run_cli("analyze")
    assert code == 1 and "Missing argument" in err


def test_python_dash_m_entry_point(good_dir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(good_dir), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_recursive_and_last_step_flags(tmp_path, run_cli):
    (tmp_path / "sub").mkdir()
    simple_gpu_trace(rank=0, steps=4).write(tmp_path / "sub" / "t.json")
    code, _, err = run_cli("analyze", tmp_path, "-o", tmp_path / "r.json")
    assert code == 1 and "--recursive" in err
    code, _, err = run_cli("analyze", tmp_path, "-r", "-o", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ranks"][0]["steps"]["count"] == 3 and not data["inventory"]["last_step_included"]
    code, _, err = run_cli("analyze", tmp_path, "-r", "--include-last-step", "-o", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ranks"][0]["steps"]["count"] == 4 and data["inventory"]["last_step_included"]
