"""A trace never makes us read, link or show what it names (issue 31, items 1-3, 5, 6).

Frames, a ``manifest.json`` beside the traces, saved results and cache
entries are other people's data: the source finder reads only regular,
bounded ``.py`` files under the source root; SARIF locations are only
repository-relative paths; links are only to the rules' documentation and
images only our own charts; the HTML holds no raw control or bidi character.
Each case has a control that shows the same file *is* read when it lies
inside the root, so the tests can fail.
"""
import json
import os
import sys

import pytest

from hta_report import locate as locate_module
from hta_report.api import analyze
from hta_report.render import render
from test_source_lines import LINES, TRAIN_PY

SECRET = "AKIAIOSFODNN7SECRETKEY"
#: the training script with a secret on the line the sync finding points at (it lands in the excerpt if read)
SECRET_PY = "\n".join(line + (f"  # aws_secret_access_key = {SECRET}" if i == LINES["item"] else "")
                      for i, line in enumerate(TRAIN_PY.splitlines(), start=1)) + "\n"


def _trace(folder, frame_path, manifest_cwd=None):
    from kineto import training_trace

    folder.mkdir(parents=True, exist_ok=True)
    training_trace(rank=0, steps=6, item_per_layer=True, pinned=False, workers=False, dataloader_us=3000,
                   with_stack=str(frame_path)).write(folder / "rank0.json")
    if manifest_cwd is not None:
        (folder / "manifest.json").write_text(json.dumps({"run": {"cwd": str(manifest_cwd)}}))
    return folder


def _outputs(result):
    return {fmt: render(result, fmt) for fmt in ("md", "json", "sarif", "html")}


def _sync_location(result):
    (f,) = [f for f in result.findings if f.id == "sync-in-step"]
    return f.locations[0]


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """``repo/`` (a git work tree, the current directory) and ``outside/``
    holding a Python file with a secret."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / ".git").mkdir(parents=True)
    outside.mkdir()
    (outside / "train.py").write_text(SECRET_PY)
    monkeypatch.chdir(repo)
    return repo, outside


def test_control_a_file_inside_the_root_is_read(layout, tmp_path):
    repo, _ = layout
    (repo / "train.py").write_text(SECRET_PY)
    loc = _sync_location(analyze(_trace(tmp_path / "t", "train.py")))
    assert loc.found and loc.path == "train.py" and any(SECRET in x for x in loc.excerpt)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "manifest_cwd", "symlink", "source_root_elsewhere"])
def test_a_frame_or_manifest_never_reads_a_file_outside_the_root(layout, tmp_path, how):
    repo, outside = layout
    frame, cwd, root = "train.py", None, None
    if how == "absolute":
        frame = outside / "train.py"
    elif how == "dotdot":
        frame = "../outside/train.py"
    elif how == "manifest_cwd":  # the collector's working directory, as a manifest beside the traces claims
        cwd = outside
    elif how == "symlink":  # a link inside the root to a file outside it
        os.symlink(outside / "train.py", repo / "train.py")
    elif how == "source_root_elsewhere":  # --source-root given: the current tree is not read either
        (repo / "train.py").write_text(SECRET_PY)
        root = tmp_path / "empty"
        root.mkdir()
    result = analyze(_trace(tmp_path / "t", frame, manifest_cwd=cwd), source_root=root)
    loc = _sync_location(result)
    assert not loc.found and not loc.excerpt and not loc.url
    for fmt, text in _outputs(result).items():
        assert SECRET not in text, fmt


def test_only_regular_python_files_of_bounded_size_are_read(layout, tmp_path, monkeypatch):
    repo, _ = layout
    (repo / "credentials").write_text(SECRET_PY)  # parses as Python, but is not a .py file
    loc = _sync_location(analyze(_trace(tmp_path / "a", "credentials")))
    assert not loc.found and not loc.excerpt
    os.mkfifo(repo / "fifo.py")  # would block a reader forever
    loc = _sync_location(analyze(_trace(tmp_path / "b", "fifo.py")))
    assert not loc.found
    (repo / "big.py").write_text(SECRET_PY)
    monkeypatch.setattr(locate_module, "MAX_SOURCE_BYTES", len(SECRET_PY) - 1)
    loc = _sync_location(analyze(_trace(tmp_path / "c", "big.py")))
    assert not loc.found and not loc.excerpt
    monkeypatch.setattr(locate_module, "MAX_SOURCE_BYTES", len(SECRET_PY))
    assert _sync_location(analyze(_trace(tmp_path / "d", "big.py"))).found  # the bound is the size, inclusive


def test_a_large_source_file_is_never_read_whole(layout, tmp_path, monkeypatch):
    """A frame naming a huge file reads at most MAX_SOURCE_BYTES + 1 bytes of it."""
    from pathlib import Path

    repo, _ = layout
    big = (repo / "huge.py").resolve()
    with open(big, "wb") as fh:  # sparse: 1 GiB on paper, nothing on disk
        fh.truncate(1 << 30)
    reads = []
    real_open = open

    def counting_open(file, mode="r", *a, **k):
        fh = real_open(file, mode, *a, **k)
        return _Reader(fh, lambda n=-1: reads.append(n) or fh.read(n)) if Path(file).resolve() == big else fh

    for name in ("read_text", "read_bytes"):
        real = getattr(Path, name)
        monkeypatch.setattr(Path, name, lambda self, *a, _real=real, **k: reads.append("whole")
                            if self.resolve() == big else _real(self, *a, **k))
    monkeypatch.setattr(locate_module, "open", counting_open, raising=False)
    loc = _sync_location(analyze(_trace(tmp_path / "t", "huge.py")))
    assert not loc.found and "whole" not in reads
    assert all(0 <= n <= locate_module.MAX_SOURCE_BYTES + 1 for n in reads), reads


class _Reader:
    def __init__(self, fh, read):
        self._fh, self.read = fh, read

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __getattr__(self, name):
        return getattr(self._fh, name)


HOSTILE_PATHS = ["https://evil.example/x.py", "javascript:alert(document.domain)//x.py", "../../outside/x.py",
                 "/etc/x.py", "file:///etc/x.py", "C:/Users/x.py", "\\\\server\\share\\x.py", "a/./x.py",
                 "a//x.py", "x\u202e.py", "x\x1b[2J.py", "~/.aws/x.py", ""]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_sarif_locations_are_only_repository_relative_paths(tmp_path, path):
    from hta_report.model import Finding, SourceLocation
    from hta_report.render.sarif import placeable
    from kineto import simple_gpu_trace

    simple_gpu_trace().write(tmp_path / "t.json")
    result = analyze(tmp_path / "t.json")
    for p, found in ((path, False), (path, True), ("jobs/train.py", False)):
        result.findings[:0] = [Finding(
            id=result.checks[0].id, title="t", severity="high", evidence=[], fix="", doc_url="", ranks=[0],
            rule=result.checks[0].rule, locations=[SourceLocation(path=p, line=3, function="f", found=found)])]
        doc = json.loads(render(result, "sarif"))
        uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]
                for loc in r["locations"]]
        if p == "jobs/train.py":
            assert uris[0] == "jobs/train.py"  # the control: a clean relative path is a location
        else:
            assert not placeable(result.findings[0].locations[0])
            assert all(":" not in u and not u.startswith("/") and ".." not in u.split("/") for u in uris), uris
        del result.findings[0]


# ---------------------------------------------------------------- links and images from saved data

def test_every_rule_links_only_to_its_documentation():
    from hta_report.model import is_doc_url
    from hta_report.rules.engine import RULES

    assert RULES and all(is_doc_url(r.doc_url) for r in RULES), [r.doc_url for r in RULES if not is_doc_url(r.doc_url)]


@pytest.mark.parametrize("url", ["javascript:alert(document.domain)", "https://evil.example/doc",
                                 "https://pytorch.org.evil.example/x", "https://user:pw@pytorch.org/x",
                                 'https://pytorch.org/x" onmouseover="alert(1)', "http://pytorch.org/x",
                                 "data:text/html,<script>alert(1)</script>"])
def test_a_cache_entry_or_saved_result_cannot_make_a_link(tmp_path, url, run_cli):
    from hta_report.model_check import ResultError, check_result
    from kineto import training_trace

    traces = tmp_path / "t"
    traces.mkdir()
    training_trace(rank=0, steps=6, workers=False, dataloader_us=3000).write(traces / "rank0.json")
    cache_dir = tmp_path / "cache"
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "a.html", "--json", tmp_path / "a.json",
                           "--cache-dir", cache_dir)
    assert code == 0, err
    good = (tmp_path / "a.html").read_text()
    assert 'href="https://pytorch.org/' in good  # the control: the rules' own links are there
    edited = 0
    for entry in (cache_dir).rglob("*.json"):
        data = json.loads(entry.read_text())
        if isinstance(data.get("result"), str):
            doc = json.loads(data["result"])
            for f in doc["findings"]:
                f["doc_url"] = url
            data["result"] = json.dumps(doc)
            entry.write_text(json.dumps(data))
            edited += 1
    assert edited == 1
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "b.html", "--json", tmp_path / "b.json",
                           "--cache-dir", cache_dir)
    assert code == 0, err
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "b.sarif", "--cache-dir", cache_dir)
    assert code == 0, err
    for name in ("b.html", "b.json", "b.sarif"):
        assert url not in (tmp_path / name).read_text(), name  # the entry did not verify: computed again
    saved = json.loads((tmp_path / "a.json").read_text())
    saved["findings"][0]["doc_url"] = url
    with pytest.raises(ResultError, match="doc_url"):
        check_result(saved)
    (tmp_path / "evil.json").write_text(json.dumps(saved))
    code, _, err = run_cli("compare", tmp_path / "a.json", tmp_path / "evil.json", "-o", tmp_path / "c.html")
    assert code != 0 and "doc_url" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.html").exists()


def test_a_cached_chart_that_is_not_our_image_is_drawn_again(tmp_path):
    from hta_report.api import report_charts
    from hta_report.cache import Cache
    from hta_report.escape import is_image_data_uri
    from kineto import training_trace

    training_trace(rank=0, steps=6).write(tmp_path / "rank0.json")
    result = analyze(tmp_path / "rank0.json")
    cache = Cache(tmp_path / "cache")
    charts = report_charts(result, cache)
    assert charts and all(is_image_data_uri(v) for v in charts.values())
    (entry,) = list((tmp_path / "cache").rglob("*.charts.json"))
    data = json.loads(entry.read_text())
    data["charts"] = {k: "https://evil.example/pixel.png" for k in data["charts"]}
    entry.write_text(json.dumps(data))
    again = report_charts(result, cache)
    assert again == charts
    page = render(result, "html", charts={k: "https://evil.example/pixel.png" for k in charts})
    assert "evil.example" not in page  # the renderer too shows only our own image data


# ---------------------------------------------------------------- control characters in the HTML

CONTROLS = ["\x1b[2J\x1b]0;pwned\x07", "\u202eevil", "a\u200bb", "\x9b31m", "\x85x", "\u2066x\u2069", "\x7f"]


@pytest.mark.parametrize("text", CONTROLS)
def test_html_holds_no_raw_control_or_bidi_character(tmp_path, text):
    from kineto import simple_gpu_trace

    b = simple_gpu_trace(kernel_name=f"k{text}", rank=0)
    b.gpu_name = f"dev{text}"
    b.cpu_op(f"op{text}", 10, 5)
    doc = b.document()
    doc["distributedInfo"]["backend"] = f"nccl{text}"
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    result = analyze(tmp_path)
    page = render(result, "html")
    bad = [c for c in set(text) if c in page and not c.isprintable() and c not in "\n\t"]
    assert bad == [], [hex(ord(c)) for c in bad]
    shown = [c.encode("unicode_escape").decode("ascii") for c in text if not c.isprintable() and c != "\x85"]
    assert all(e in page for e in shown)  # shown as escapes (\x1b, \u202e), not dropped; NEL is a line break


# ---------------------------------------------------------------- properties, fuzzed

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: pieces a hostile frame path is made of: ways out, roots, schemes, links, controls
PATH_PIECES = st.sampled_from(["..", ".", "/", "~", "outside", "train.py", "link.py", "x.py", "https:", "file:",
                               "javascript:", "C:", "\\", "\x00", "\x1b[2J", "\u202e", "//", "credentials", " "])
HOSTILE_FRAME_PATHS = st.one_of(st.lists(PATH_PIECES, max_size=8).map("".join),
                                st.lists(PATH_PIECES, max_size=6).map("/".join), st.text(max_size=30))


@seed(31)
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(name=HOSTILE_FRAME_PATHS, line=st.integers(min_value=-3, max_value=40))
def test_the_source_finder_never_leaves_the_root(tmp_path_factory, name, line):
    """Whatever a frame names, the finder returns a regular .py file under
    the root or nothing, and reads nothing else."""
    from hta_report.locate import SourceFinder

    base = tmp_path_factory.getbasetemp() / "finder"
    repo, outside = base / "repo", base / "outside"
    if not repo.exists():
        (repo / "sub").mkdir(parents=True)
        outside.mkdir()
        (outside / "train.py").write_text(SECRET_PY)
        (repo / "train.py").write_text(TRAIN_PY)
        (repo / "sub" / "x.py").write_text(TRAIN_PY)
        os.symlink(outside / "train.py", repo / "link.py")
        (repo / "credentials").write_text(SECRET_PY)
    finder = SourceFinder(root=repo, bases=[repo, outside, repo / "sub"])
    for function, entered in (("main", False), ("__getitem__", True), ("<module>", False)):
        found = finder.find(name, line, function, entered)
        if found is not None:
            found.relative_to(repo.resolve())  # raises if outside
            assert found.suffix == ".py" and found.is_file() and not found.is_symlink()
            assert SECRET not in found.read_text()
            assert ".." not in finder.uri(found).split("/") and not finder.uri(found).startswith("/")
    for src in finder._trees:
        assert finder._trees[src] is None or SECRET not in "\n".join(finder._trees[src][0])


@seed(31)
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(path=HOSTILE_FRAME_PATHS, found=st.booleans())
def test_a_sarif_uri_is_always_a_clean_relative_path(path, found):
    from urllib.parse import unquote

    from hta_report.model import SourceLocation
    from hta_report.render.sarif import _uri, placeable

    loc = SourceLocation(path=path, line=1, found=found)
    if placeable(loc):
        uri = _uri(path)
        parts = unquote(uri).split("/")
        assert ":" not in uri and not uri.startswith(("/", "~")) and "\\" not in uri
        assert all(p not in ("", ".", "..") for p in parts) and unquote(uri).isprintable()


@pytest.mark.parametrize("frame", [".jupyter/jupyter_server_config.py", "sub/.venv/train.py"])
def test_a_frame_naming_a_hidden_folder_is_never_read(layout, tmp_path, frame):
    """Issue 56 item 1: hidden folders were skipped when the tree was searched,
    not when a frame named one: run from a home directory, a frame of
    ``.jupyter/jupyter_server_config.py`` put the Jupyter token into the
    report. Nothing under a dot-folder of the source root is read."""
    repo, _ = layout
    (repo / frame).parent.mkdir(parents=True)
    (repo / frame).write_text(SECRET_PY)
    result = analyze(_trace(tmp_path / "t", frame))
    loc = _sync_location(result)
    assert not loc.found and not loc.excerpt
    for fmt, text in _outputs(result).items():
        assert SECRET not in text, fmt


def test_a_file_swapped_for_a_link_after_its_check_is_not_read(layout, tmp_path, monkeypatch):
    """Issue 56 item 2: the file was checked (inside the root, a regular
    ``.py`` file), then opened by path: swapped for a link to a file outside
    the root in between, the outside file was read. The open refuses a link
    and the opened file must be the one checked."""
    repo, outside = layout
    (repo / "train.py").write_text(SECRET_PY.replace(SECRET, "harmless"))
    checked = locate_module.SourceFinder._resolved

    def swap_after_check(self, candidate):  # the last check, the one just before the read
        real = checked(self, candidate)
        if real is not None and real.name == "train.py" and not real.is_symlink() \
                and sys._getframe(1).f_code.co_name == "source":
            real.unlink()
            os.symlink(outside / "train.py", real)
        return real

    monkeypatch.setattr(locate_module.SourceFinder, "_resolved", swap_after_check)
    trace = _trace(tmp_path / "t", "train.py")
    opened = []
    _AUDIT["record"] = opened
    try:
        result = analyze(trace)
    finally:
        _AUDIT["record"] = None
    secret = str(outside / "train.py")
    assert not [p for p in opened if os.path.realpath(p) == secret]  # the outside file is never opened
    for fmt, text in _outputs(result).items():
        assert SECRET not in text, fmt


#: Where the audit hook records the paths this process opens (None: nowhere). A hook cannot be
#: removed, so one is added once and switched by this slot.
_AUDIT = {"record": None}


def _audit(event, args):
    rec = _AUDIT["record"]
    # an open with O_NOFOLLOW of a link fails (ELOOP): it cannot reach the file the link names
    if rec is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)) \
            and not (isinstance(args[2], int) and args[2] & os.O_NOFOLLOW):
        rec.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


def test_a_forged_cache_entry_never_decides_a_gate(tmp_path, run_cli):
    """Issue 56 item 3: a result-cache entry rewritten without findings (its
    key kept) turned a tripped ``--fail-on severity>=high`` (exit 2) into
    exit 0. Entries are signed with this user's key, kept outside the cache:
    the forged one is a miss, the run analyzes again and the gate trips."""
    from kineto import training_trace

    traces = tmp_path / "t"
    traces.mkdir()
    training_trace(rank=0, steps=6, workers=False, dataloader_us=3000).write(traces / "rank0.json")
    cache_dir = tmp_path / "cache"
    gate = ("--fail-on", "severity>=high", "--cache-dir", cache_dir)
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "a.json", *gate)
    assert code == 2, err  # the control: the gate trips on the fresh result
    forged = 0
    for entry in cache_dir.rglob("*.json"):
        data = json.loads(entry.read_text())
        if isinstance(data.get("result"), str):
            doc = json.loads(data["result"])
            doc["findings"] = []
            data["result"] = json.dumps(doc)
            entry.write_text(json.dumps(data))
            forged += 1
    assert forged == 1
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "b.json", *gate)
    assert code == 2, err
    assert json.loads((tmp_path / "b.json").read_text())["findings"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_cache_entry_that_is_no_regular_file_is_a_miss(tmp_path, run_cli, kind):
    """Issue 56 item 10: a FIFO (the read waits for ever) or a link to
    ``/dev/zero`` (it never ends) in a result entry's place hung the run or
    exhausted its memory. Entries are read only as regular files of bounded
    size, without following a link."""
    from kineto import training_trace

    traces = tmp_path / "t"
    traces.mkdir()
    training_trace(rank=0, steps=6).write(traces / "rank0.json")
    cache_dir = tmp_path / "cache"
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "a.json", "--cache-dir", cache_dir)
    assert code == 0, err
    (entry,) = [p for p in cache_dir.rglob("*.json") if not p.name.endswith(".charts.json")]
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry)
    else:
        os.symlink("/dev/zero", entry)
    code, _, err = run_cli("analyze", traces, "-o", tmp_path / "b.json", "--cache-dir", cache_dir)
    assert code == 0, err
    assert json.loads((tmp_path / "b.json").read_text())["findings"] == \
        json.loads((tmp_path / "a.json").read_text())["findings"]
