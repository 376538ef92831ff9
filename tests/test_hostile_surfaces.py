"""Hostile inputs at the edges of hta-report (issue 56).

- no ``--source-root`` and no git work tree: no source file is read, and the
  report says so once (item 1);
- compare's noise band is a robust spread of the step times: one checkpoint
  step cannot hide a consistent regression (item 18);
- a huge device name cannot push the findings out of the markdown comment
  (item 19);
- odd but valid TOML in ``--config`` is a one-line configuration error or a
  working configuration, never the "unexpected error" path (item 22);
- a 5,000-digit rank in a profiling window's head is skipped with a warning;
  the report is still written (item 23);
- a presigned ``.json?X-Amz-...`` URL is a trace, a folder URL with a query
  is refused, and neither echoes its secrets (item 24);
- absurd figures in a saved result are "not available" rather than
  nonsense, with no numpy warning; a result without ``schema_version`` is
  called that, not "not a Kineto trace" (item 25).
"""
import json
import warnings

import pytest

from hta_report.api import analyze
from hta_report.render import render

SECRET = "AKIAIOSFODNN7SECRETKEY"


# --- item 1: no source root, no source ----------------------------------------------------------------------------

def _stack_trace(folder, frame):
    from kineto import training_trace

    folder.mkdir(parents=True, exist_ok=True)
    training_trace(rank=0, steps=6, item_per_layer=True, pinned=False, workers=False, dataloader_us=3000,
                   with_stack=frame).write(folder / "rank0.json")
    return folder


def _sync_location(result):
    (f,) = [f for f in result.findings if f.id == "sync-in-step"]
    return f.locations[0]


@pytest.mark.slow
def test_without_a_git_tree_or_source_root_no_source_is_read(tmp_path, monkeypatch):
    from hta_report.locate import NO_SOURCE_ROOT
    from test_hostile_sources import SECRET_PY

    home = tmp_path / "home"  # run from $HOME: no .git above it
    (home / ".jupyter").mkdir(parents=True)
    (home / ".jupyter" / "jupyter_server_config.py").write_text(SECRET_PY)
    (home / "train.py").write_text(SECRET_PY)
    monkeypatch.chdir(home)
    for frame in ("train.py", ".jupyter/jupyter_server_config.py"):
        result = analyze(_stack_trace(tmp_path / frame.replace("/", "_"), frame), cache=None)
        loc = _sync_location(result)
        assert not loc.found and not loc.excerpt and loc.how in ("def", "frame")
        assert result.inventory.warnings.count(NO_SOURCE_ROOT) == 1  # said once, not per finding
        for fmt in ("md", "json", "sarif", "html"):
            assert SECRET not in render(result, fmt), (frame, fmt)
        assert "no --source-root was given" in render(result, "html")
    # control: the same file is read once the folder is a git work tree, or named as the source root
    loc = _sync_location(analyze(tmp_path / "train.py", cache=None, source_root=home))
    assert loc.found and any(SECRET in x for x in loc.excerpt)
    (home / ".git").mkdir()
    result = analyze(tmp_path / "train.py", cache=None)
    assert _sync_location(result).found and NO_SOURCE_ROOT not in result.inventory.warnings
    # a dot-folder is never read, even inside the root
    assert not _sync_location(analyze(tmp_path / ".jupyter_jupyter_server_config.py", cache=None)).found


# --- item 18: one checkpoint step does not widen the noise band ---------------------------------------------------

def _run_with_a_checkpoint(path, step_us):
    """12 steps of ``step_us`` (± 1 %), the sixth a checkpoint 10× as long."""
    from test_compare_and_gates import _steps_trace

    path.mkdir()
    jitter = [step_us * j / 100 for j in (0, 1, -1, 1, -1, 0, 1, -1, 0, 1, -1, 0)]
    jitter[5] += 9 * step_us
    _steps_trace(path / "t.json", step_us, step_us * 0.8, steps=12, jitter=jitter)
    return path


@pytest.mark.slow
def test_one_checkpoint_step_does_not_hide_a_consistent_regression(tmp_path, run_cli):
    from hta_report.compare import compare, step_variation_pct

    base = analyze(_run_with_a_checkpoint(tmp_path / "base", 1000), cache=None)
    new = analyze(_run_with_a_checkpoint(tmp_path / "new", 1220), cache=None)
    steps = [s.duration_us for s in base.ranks[0].steps.steps if not s.warmup]
    assert max(steps) > 5 * min(steps)  # the checkpoint is among the analyzed steps
    c = compare(base, new)
    assert c.step_time_change_pct == pytest.approx(22.0, abs=1.0)
    assert c.noise_band_pct < 5, c.noise_band_pct  # the ±1 % steps set it, not the checkpoint
    assert c.verdict == "regressed"
    assert step_variation_pct(base) == pytest.approx(step_variation_pct(new), abs=0.5)
    code, _, err = run_cli("compare", tmp_path / "base", tmp_path / "new", "-o", tmp_path / "c.md", "--no-cache",
                           "--fail-on", "regressed==1")
    assert code == 2, err


# --- item 19: a huge device name leaves room for the findings -----------------------------------------------------

@pytest.mark.slow
def test_a_70_kb_device_name_leaves_the_findings_in_the_markdown_comment(tmp_path):
    from kineto import training_trace

    from hta_report.render.markdown import GITHUB_COMMENT_LIMIT

    name = "NVIDIA " + "H" * 70_000
    d = tmp_path / "t"
    d.mkdir()
    training_trace(rank=0, steps=6, item_per_layer=True, pinned=False, workers=False, dataloader_us=3000,
                   gpu_name=name).write(d / "rank0.json")
    result = analyze(d, cache=None)
    assert result.findings and name in result.inventory.devices
    md = render(result, "md")
    assert len(md) < GITHUB_COMMENT_LIMIT and "truncated to fit" not in md
    for f in result.findings:
        assert f.id in md, f.id  # every finding is in the comment
    assert "H" * 5_000 not in md and "NVIDIA HHH" in md and "H…" in md  # the name, cut with an ellipsis
    assert name in render(result, "json")  # the JSON keeps it whole


# --- item 22: odd but valid TOML in --config ----------------------------------------------------------------------

@pytest.mark.parametrize("text, key", [
    ("dataloader_pct = {a = 1}\n", "dataloader_pct"),  # a table where a number belongs
    ("sync_pct = 1979-05-27T07:32:00Z\n", "sync_pct"),  # a date-time
    ("sync_pct = 07:32:00\n", "sync_pct"),  # a time
    ("[tool]\nhta-report = 5\n", "tool.hta-report"),
    ("[[tool.hta-report]]\nsync_pct = 3\n", "tool.hta-report"),  # an array of tables
    ("tool = 1979-05-27\n[x]\n", "tool"),
    ("[tool.hta-report.sub]\nx = 1\n", "sub"),  # nested tables
    ('sync_pct = "' + "x" * 100_000 + '"\n', "sync_pct"),  # a huge value: named, not echoed whole
    ("window_min_steps = " + "9" * 5_000 + "\n", "not valid TOML"),  # past int()'s 4,300 digits
    ("a = " + "[" * 5_000 + "]" * 5_000 + "\n", "nested too deeply"),  # valid TOML, past the parser's recursion
])
def test_odd_but_valid_toml_is_one_configuration_error(tmp_path, monkeypatch, run_cli, text, key):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    monkeypatch.chdir(tmp_path)
    runs = [(["rules", "--config", cfg], "c.toml")]
    if "tool" in text:  # [tool.hta-report] of ./pyproject.toml too
        (tmp_path / "pyproject.toml").write_text(text)
        runs.append((["rules"], "pyproject.toml"))
    for args, named in runs:
        code, _, err = run_cli(*args)
        assert code == 1, err
        assert "unexpected error" not in err and err.count("\n") == 1 and len(err) < 1000, err[:300]
        assert key in err and named in err, err[:300]


def test_a_huge_but_valid_integer_threshold_is_a_working_configuration(tmp_path, run_cli):
    (tmp_path / "c.toml").write_text("window_min_steps = " + "9" * 40 + "\n")
    code, out, err = run_cli("rules", "--config", tmp_path / "c.toml")
    assert code == 0 and "unexpected" not in err, err


# --- item 23: a 5,000-digit rank in a profiling window ------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("quoted", [False, True])
def test_a_5000_digit_rank_in_a_window_is_skipped_and_the_report_written(tmp_path, run_cli, quoted):
    from kineto import simple_gpu_trace

    d = tmp_path / "t"
    d.mkdir()
    simple_gpu_trace(rank=None, steps=3).write(d / "worker0.100.pt.trace.json")
    bad = d / "worker0.200.pt.trace.json"
    simple_gpu_trace(rank=None, steps=4).write(bad)
    digits = "7" * 5_000
    rank = f'"{digits}"' if quoted else digits
    bad.write_text(bad.read_text().replace(
        "{", '{"distributedInfo": {"backend": "nccl", "rank": ' + rank + ', "world_size": 1}, ', 1))
    code, _, err = run_cli("analyze", d, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json", "--no-cache")
    assert code in (0, 1), err  # 1: a trace unreadable, the report covering the rest
    assert "unexpected error" not in err and digits not in err, err[:300]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert (tmp_path / "r.md").is_file() and saved["ranks"]
    notes = [w for w in saved["inventory"]["warnings"] if bad.name in w and "not a rank" in w]
    assert notes and digits not in json.dumps(saved), saved["inventory"]["warnings"]


# --- item 24: URLs with a query ------------------------------------------------------------------------------------

SIGNATURE = "deadbeefSIGNATURE0123"


@pytest.fixture
def memory_bucket():
    """fsspec's memory filesystem holding the 2-rank sample under ``/bucket/run/``
    and one rank under a presigned name (``rank0.json.gz?X-Amz-...``, as a
    server answering a presigned URL has it); the bucket's URL."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("upath")
    from test_hostile_urls import TWO_RANKS

    mem = fsspec.filesystem("memory")
    traces = sorted(p for p in TWO_RANKS.iterdir() if p.name.endswith(".json.gz"))
    for p in traces:
        mem.pipe(f"/bucket/run/{p.name}", p.read_bytes())
    mem.pipe(f"/bucket/run/rank0.json.gz?X-Amz-Date=1&X-Amz-Signature={SIGNATURE}", traces[0].read_bytes())
    try:
        yield "memory://bucket/run/"
    finally:
        mem.rm("/bucket", recursive=True)


@pytest.mark.slow
def test_a_presigned_trace_url_is_read_and_its_signature_never_shown(tmp_path, memory_bucket, run_cli):
    url = f"{memory_bucket}rank0.json.gz?X-Amz-Date=1&X-Amz-Signature={SIGNATURE}"
    code, out, err = run_cli("analyze", url, "-o", tmp_path / "r.md", "--json", tmp_path / "r.json", "--no-cache")
    assert code == 0, err
    saved = json.loads((tmp_path / "r.json").read_text())
    assert len(saved["ranks"]) == 1 and saved["inventory"]["files"][0]["path"].endswith("X-Amz-Signature=***")
    for text in (out, err, (tmp_path / "r.md").read_text(), (tmp_path / "r.json").read_text()):
        assert SIGNATURE not in text


def test_a_folder_url_with_a_query_is_refused_in_one_line(tmp_path, memory_bucket, run_cli):
    code, out, err = run_cli("analyze", f"{memory_bucket}?token={SIGNATURE}", "-o", tmp_path / "r.md", "--no-cache")
    assert code == 1 and not (tmp_path / "r.md").exists()
    assert err.count("\n") == 1 and "name the trace files" in err and "token=***" in err, err
    assert SIGNATURE not in out + err


@pytest.mark.slow
def test_over_http_a_folder_listing_is_never_read_as_a_trace(tmp_path, run_cli):
    """A real server (fsspec's http:// needs aiohttp): the folder URL with a
    query used to list the folder's files as ``…/run/?token=x/rank0.json``,
    each answered with the folder's listing."""
    from test_hostile_urls import SAMPLES

    pytest.importorskip("aiohttp", reason="fsspec's http:// filesystem needs aiohttp (pip install aiohttp)")
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SAMPLES)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/cpu_ddp_2ranks/"
        code, _, err = run_cli("analyze", f"{base}?token={SIGNATURE}", "-o", tmp_path / "r.md", "--no-cache")
        assert code == 1 and "name the trace files" in err and "not gzip data" not in err and SIGNATURE not in err
        name = next(p.name for p in (SAMPLES / "cpu_ddp_2ranks").iterdir() if p.name.endswith(".json.gz"))
        code, _, err = run_cli("analyze", f"{base}{name}?X-Amz-Signature={SIGNATURE}", "-o", tmp_path / "r.md",
                               "--no-cache")
        assert code == 0 and SIGNATURE not in err + (tmp_path / "r.md").read_text(), err
    finally:
        server.shutdown()
        server.server_close()


# --- item 25: absurd saved values, and a result without schema_version ---------------------------------------------

@pytest.fixture(scope="module")
def two_rank_result(tmp_path_factory):
    """A saved 2-rank result with findings that carry the replay's predictions (the JSON document)."""
    from kineto import training_trace

    d = tmp_path_factory.mktemp("two")
    for rank in (0, 1):
        training_trace(rank=rank, world_size=2, steps=6, item_per_layer=True, pinned=False, workers=False,
                       dataloader_us=3000).write(d / f"rank{rank}.json")
    doc = json.loads(analyze(d, cache=None).to_json())
    assert any(f.get("whatif") for f in doc["findings"]) and len(doc["ranks"]) == 2
    return doc


def _absurd_predictions(doc):
    """``doc`` with each finding's prediction absurd in another way: a predicted step of 0, a measured step
    of 0, a negative one, 1e308; and both ranks' GPU-paced steps at 1.7e308 (their mean overflows)."""
    doc = json.loads(json.dumps(doc))
    kinds = [{"step_us_after": 0.0}, {"step_us_before": 0.0}, {"step_us_after": -5000.0, "step_us_low": -6000.0},
             {"step_us_before": 1e308}, {"step_us_after": 1e308, "step_us_high": 1e308}]
    with_whatif = [f for f in doc["findings"] if f.get("whatif")]
    for i, f in enumerate(with_whatif):
        f["whatif"].update(kinds[i % len(kinds)])
    if doc.get("together"):
        doc["together"]["step_us_after"] = 0.0
    for r in doc["ranks"]:
        r["replay"]["gpu_paced_step_us"] = 1.7e308
    return doc


@pytest.mark.slow
def test_absurd_saved_predictions_are_not_available_without_numpy_warnings(tmp_path, two_rank_result, run_cli):
    import re

    from hta_report.api import load_result
    from hta_report.compare import compare
    from hta_report.render import render_comparison

    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(two_rank_result))
    new.write_text(json.dumps(_absurd_predictions(two_rank_result)))
    absurd = re.compile(r"\b(?:inf|nan)\b|→ 0(?:\.0+)? (?:µs|ms)|→ -", re.IGNORECASE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning (overflow in the mean) fails the test
        result = load_result(new)
        texts = {fmt: render(result, fmt) for fmt in ("md", "html", "sarif", "json")}
        c = compare(load_result(base), result)
        texts.update({f"compare.{fmt}": render_comparison(c, fmt) for fmt in ("md", "json")})
    for where, text in texts.items():
        shown = text if not where.endswith("json") else ""  # JSON keeps the figures as saved
        assert not absurd.search(shown), (where, absurd.search(shown).group(0))
    assert "not available" in texts["md"]
    code, _, err = run_cli("compare", base, new, "-o", tmp_path / "c.md", "--no-cache")
    assert code == 0 and "Warning" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["result", "comparison"])
def test_a_saved_result_without_schema_version_is_called_that(tmp_path, run_cli, kind):
    from kineto import simple_gpu_trace

    from hta_report.api import load_result
    from hta_report.compare import compare
    from hta_report.errors import InputError

    d = tmp_path / "t"
    d.mkdir()
    simple_gpu_trace(rank=0).write(d / "t.json")
    result = analyze(d, cache=None)
    doc = json.loads((compare(result, result) if kind == "comparison" else result).to_json())
    del doc["schema_version"]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(doc, indent=2))
    for args in (["compare", saved, saved], ["analyze", saved]):
        code, _, err = run_cli(*args, "-o", tmp_path / "c.md", "--no-cache")
        assert code == 1 and err.count("\n") == 1, err
        assert "without a schema_version" in err and "not a Kineto trace" not in err and str(saved) in err, err
    if kind == "result":
        with pytest.raises(InputError, match="without a schema_version"):
            load_result(saved)
