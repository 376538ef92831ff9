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
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] == 3
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


def test_output_in_missing_directory_is_created_and_its_absolute_path_printed(good_dir, tmp_path, run_cli,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("analyze", good_dir, "-o", "missing/r.html")
    assert code == 0, err
    assert (tmp_path / "missing" / "r.html").is_file()
    assert f"wrote {tmp_path / 'missing' / 'r.html'}" in out  # absolute: a terminal makes it a link


def test_usage_error_exits_1(run_cli):
    code, _, err = run_cli("analyze")
    assert code == 1 and "Missing argument" in err


def test_python_dash_m_entry_point(good_dir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(good_dir), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("extra, code, out_needle, err_needle", [
    ((), 0, "wrote ", None),
    (("--fail-on", "idle_pct>-1"), 2, "wrote ", "idle_pct"),  # a gate that trips: exit 2
])
def test_console_script_ends_without_teardown_keeping_output_and_exit_code(good_dir, tmp_path, extra, code,
                                                                           out_needle, err_needle):
    """``cli.run`` ends analyze with ``os._exit``: what was printed (to a pipe,
    so buffered) still arrives, the exit code is kept, the report is whole,
    and no atexit handler runs (a handler registered in the process would print)."""
    script = ("import atexit, sys; atexit.register(lambda: print('atexit ran')); "
              "sys.argv = ['hta-report'] + sys.argv[1:]; from hta_report.cli import run; run()")
    out = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-c", script, "analyze", str(good_dir), "-o", str(out), *extra],
                          capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert out_needle in proc.stdout and "atexit ran" not in proc.stdout
    assert proc.stdout.endswith("\n") and not proc.stderr.count("Traceback")
    if err_needle:
        assert err_needle in proc.stderr
    assert out.read_text().rstrip().endswith("</html>")


def test_console_script_error_exit_without_teardown(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hta_report", "analyze", str(tmp_path / "missing"), "-o",
                           str(tmp_path / "r.html")], capture_output=True, text=True)
    assert proc.returncode == 1
    _one_line_error(proc.stderr, "missing")


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


# --- inputs: files as well as directories, folders of runs, output formats -------------------


@pytest.fixture
def two_ranks(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    simple_gpu_trace(rank=0).write(d / "rank-0.json")
    simple_gpu_trace(rank=1).write(d / "rank-1.json")
    return d


def test_one_trace_file_is_analyzed(two_ranks, tmp_path, run_cli):
    one = two_ranks / "rank-1.json"
    code, out, err = run_cli("analyze", one, "-o", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["rank"] for r in data["ranks"]] == [1]
    assert data["inventory"]["input_dir"] == str(one)
    assert [f["path"] for f in data["inventory"]["files"]] == [str(one)]


def test_several_files_and_directories_make_one_run(two_ranks, tmp_path, run_cli):
    files = [two_ranks / "rank-0.json", two_ranks / "rank-1.json"]
    code, _, err = run_cli("analyze", *files, "-o", tmp_path / "r.json")
    assert code == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["inventory"]["input_dir"] == f"{files[0]}, {files[1]}"
    other = tmp_path / "other"
    other.mkdir()
    simple_gpu_trace(rank=2).write(other / "rank-2.json")
    code, _, err = run_cli("analyze", two_ranks, other / "rank-2.json", "-o", tmp_path / "r.json")
    assert code == 0, err
    assert [r["rank"] for r in json.loads((tmp_path / "r.json").read_text())["ranks"]] == [0, 1, 2]


def test_a_file_that_is_no_trace_is_named(two_ranks, tmp_path, run_cli):
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = run_cli("analyze", tmp_path / "notes.txt", "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, tmp_path / "notes.txt", "not a trace file")
    code, _, _ = run_cli("analyze", two_ranks, "-o", tmp_path / "r.json")
    code, _, err = run_cli("analyze", tmp_path / "r.json", "-o", tmp_path / "r2.html")
    assert code == 1
    _one_line_error(err, tmp_path / "r.json", "a result saved by hta-report", "compare")


@pytest.mark.parametrize("name", ["x.pdf", "report", "x.HTML.bak"])
def test_unknown_report_extension_is_refused_before_analysis(good_dir, tmp_path, run_cli, name):
    code, _, err = run_cli("analyze", good_dir, "-o", tmp_path / name)
    assert code == 1
    _one_line_error(err, tmp_path / name, ".html", ".md", ".json", "--format")
    assert not (tmp_path / name).exists()
    code, _, err = run_cli("compare", good_dir, good_dir, "-o", tmp_path / name)
    assert code == 1 and not (tmp_path / name).exists()
    _one_line_error(err, tmp_path / name, ".html")
    code, _, err = run_cli("analyze", good_dir, "-o", tmp_path / name, "--format", "md", "-q")
    assert code == 0, err
    assert (tmp_path / name).read_text().startswith("## hta-report")


def test_folder_of_runs_is_named_with_analyze_and_compare(tmp_path, run_cli):
    runs = tmp_path / "runs"
    for name in ("baseline", "tuned"):
        (runs / name).mkdir(parents=True)
        simple_gpu_trace(rank=0).write(runs / name / "rank-0.json")
        (runs / name / "manifest.json").write_text("{}")
    code, _, err = run_cli("analyze", runs, "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, runs, "2 separate runs", "baseline, tuned",
                    f"hta-report compare {runs / 'baseline'} {runs / 'tuned'}")
    code, _, err = run_cli("analyze", runs, "--recursive", "-o", tmp_path / "r.html")
    assert code == 1  # --recursive would merge two runs
    _one_line_error(err, runs, "2 separate runs", "--recursive would merge them")
    assert not (tmp_path / "r.html").exists()
    (runs / "tuned").rename(tmp_path / "tuned")  # one run left, one level down
    code, _, err = run_cli("analyze", runs, "-o", tmp_path / "r.html")
    assert code == 1
    _one_line_error(err, runs, f"they are in {runs / 'baseline'}")


def test_compare_reads_trace_files(two_ranks, tmp_path, run_cli):
    code, out, err = run_cli("compare", two_ranks / "rank-0.json", two_ranks / "rank-1.json",
                             "-o", tmp_path / "c.md")
    assert code == 0, err
    assert "rank 0 → rank 1" in (tmp_path / "c.md").read_text()


def test_open_launches_the_html_report_only(tmp_path, run_cli, monkeypatch):
    import webbrowser

    from conftest import REPO

    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **kw: opened.append(url) or True)
    sample = REPO / "sample_traces" / "cpu_healthy"
    code, _, err = run_cli("analyze", sample, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json", "--open",
                           "-q")
    assert code == 0, err
    assert opened == [(tmp_path / "r.html").resolve().as_uri()] and "no browser" not in err
    code, _, err = run_cli("analyze", sample, "-o", tmp_path / "r.md", "--open", "-q")
    assert code == 0 and "--open: no HTML report was written" in err and len(opened) == 1
