"""Issue 55: source lines never name the tool's own files, a DataLoader wait
marks the loop over the loader, SARIF places line-less findings on files that
exist, ``--open`` says when no browser opened, and the figures of one page agree."""
import ast
import json
from pathlib import Path

import pytest

import hta_report
from hta_report.api import analyze
from hta_report.frames import is_user_frame
from test_source_lines import TRAIN_PY  # the script whose lines the stack frames name

#: The package folder of the hta_report under test (an editable install names its frames by this absolute path).
PACKAGE = Path(hta_report.__file__).resolve().parent
#: The frame ``hta-report collect``'s optimizer-step wrapper adds around every ``optimizer.step()``.
RUNNER_FRAME = f"{PACKAGE / 'collect' / 'script.py'}(224): step"


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_tools_own_files_are_never_user_frames():
    # by module: any checkout's hta_report/collect/script.py, and runpy wherever the standard library is
    assert not is_user_frame(str(PACKAGE / "collect" / "script.py"))
    assert not is_user_frame("/elsewhere/checkout/hta_report/collect/script.py")
    assert not is_user_frame("C:/Python311/Lib/runpy.py")
    # a user's own folder that happens to be called hta_report, or a file of theirs called runpy.py, is theirs
    assert is_user_frame("/home/u/hta_report/train.py") and is_user_frame("/home/u/proj/runpy.py")
    assert is_user_frame("train.py")
    # the profiler trims a path to its sys.path entry: one above site-packages leaves it first
    # (gpupuzzlers-a100-cudagraph-replay-coldstart: "site-packages/torch/cuda/__init__.py(486): synchronize")
    assert not is_user_frame("site-packages/torch/cuda/__init__.py")
    assert not is_user_frame("dist-packages/numpy/core/fromnumeric.py")


def _wrap_optimizer_in_runner(doc: dict) -> dict:
    """``doc`` with every optimizer-step frame inside the collect runner's
    ``step`` wrapper (:data:`RUNNER_FRAME`), as ``hta-report collect`` records it."""
    events = doc["traceEvents"]
    wrapped = [e for e in events if e.get("name") == "torch/optim/optimizer.py(509): wrapper"]
    assert wrapped
    for i, e in enumerate(wrapped):
        events.append({**e, "name": RUNNER_FRAME, "ts": e["ts"] - 0.2, "dur": e["dur"] + 0.4,
                       "args": {**e["args"], "Python id": 10_000 + i}})
    return doc


def test_the_optimizer_finding_points_at_the_users_line_not_the_collect_runner(tmp_path):
    from kineto import training_trace

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(TRAIN_PY)
    traces = tmp_path / "traces"
    traces.mkdir()
    doc = training_trace(rank=0, steps=6, optimizer="single", params=40, workers=False,
                         with_stack="train.py").document()
    (traces / "rank0.json").write_text(json.dumps(_wrap_optimizer_in_runner(doc)))
    result = analyze(traces, source_root=repo)
    (f,) = [f for f in result.findings if f.id == "unfused-optimizer"]
    assert f.locations, "the optimizer finding has no source line"
    assert all("hta_report" not in loc.path for loc in f.locations), [loc.path for loc in f.locations]
    assert (f.locations[0].path, f.locations[0].line) == ("train.py", _line(TRAIN_PY, "opt.step()"))


EPOCHS_PY = """import torch


def main(model, opt, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            opt.step()
    for name, p in model.named_parameters():
        print(name)
"""


@pytest.mark.parametrize("iterable", ["loader", "train_loader", "enumerate(loader)", "tqdm(dl)"])
def test_a_dataloader_wait_marks_the_loop_over_the_loader_not_the_epoch_loop(iterable):
    from hta_report.locate import _lines_for

    text = EPOCHS_PY.replace("for x, y in loader:", f"for x, y in {iterable}:")
    if "dl" in iterable:
        text = text.replace("def main(model, opt, loader, epochs):",
                            "def main(model, opt, loader, epochs):\n    dl = DataLoader(loader)")
    main = _line(text, "def main")
    # main entered while tracing: the trace gives its first line, and what it called: the DataLoader's __next__
    how, lines = _lines_for(ast.parse(text), main, "main", True, "torch/utils/data/dataloader.py(720): __next__",
                            "dataloader")
    assert (how, lines) == ("call", [_line(text, f"for x, y in {iterable}:")])


# ---------------------------------------------------------------- SARIF anchors that exist

def _unplaced_sarif(tmp_path, files):
    from hta_report.render import sarif
    from kineto import training_trace

    traces = tmp_path / "traces"  # outside the source root: no manifest or trace file to anchor on
    traces.mkdir()
    training_trace(rank=0, steps=4, dataloader_us=3000.0, workers=False).write(traces / "rank0.json")
    root = tmp_path / "root"
    root.mkdir()
    for name in files:
        (root / name).write_text("x\n")
    result = analyze(traces, cache=None)
    assert result.findings and not any(f.locations for f in result.findings)
    return result, sarif.sarif_log(result, root=root), sarif.placement_note(result, root)


@pytest.mark.parametrize("files, uri", [((), None), (("README.md",), "README.md"),
                                        (("README.md", "pyproject.toml"), "pyproject.toml")])
def test_sarif_places_lineless_findings_only_on_files_that_exist(tmp_path, files, uri):
    import jsonschema

    from test_source_lines import SCHEMA

    result, doc, note = _unplaced_sarif(tmp_path, files)
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert list(jsonschema.Draft4Validator(schema).iter_errors(doc)) == []
    results = doc["runs"][0]["results"]
    assert len(results) == len(result.findings)
    for r in results:
        named = [loc["physicalLocation"]["artifactLocation"]["uri"] for loc in r.get("locations", [])
                 if "physicalLocation" in loc]
        assert all((tmp_path / "root" / u).is_file() for u in named), named
        if uri is None:  # nothing to name: no location, and the message and properties say so
            assert named == [] and r["properties"]["placed_on_file"] is False
            assert "placed on no file" in r["message"]["text"]
        else:
            assert named == [uri] and r["properties"]["placed_on_file"] is True
    assert ("placed on no file" in note) == (uri is None)


# ---------------------------------------------------------------- --open without a browser

def _no_browser(url, *args, **kwargs):
    return False


def _broken_browser(url, *args, **kwargs):
    import webbrowser

    raise webbrowser.Error("could not locate runnable browser")


@pytest.mark.parametrize("browser", [_no_browser, _broken_browser])
def test_open_without_a_browser_says_so_and_names_the_report(tmp_path, run_cli, monkeypatch, browser):
    import webbrowser

    from kineto import simple_gpu_trace

    monkeypatch.setattr(webbrowser, "open", browser)
    simple_gpu_trace().write(tmp_path / "t.json")
    report = tmp_path / "r.html"
    code, _, err = run_cli("analyze", tmp_path / "t.json", "-o", report, "--open", "-q", "--no-cache")
    plain, _, _ = run_cli("analyze", tmp_path / "t.json", "-o", tmp_path / "s.html", "-q", "--no-cache")
    assert code == plain  # the exit code is the run's, browser or not
    lines = [x for x in err.splitlines() if "no browser could be opened" in x]
    assert len(lines) == 1 and str(report.resolve()) in lines[0], err


# The figures of one page, its headings' lists and the terminal's count: tests/test_page_invariants.py.
