"""The README and the docs site: the README stays a front page whose links
hold, the site builds with ``mkdocs build --strict`` (no warning, no broken
link or anchor), and the one runnable example of each task page runs as
written, in a fresh folder against ``sample_traces/``.

A runnable example is a fenced ``bash`` or ``python`` block right after the
line ``<!-- runnable: tests/test_docs.py runs this block -->``. In a bash
block, ``hta-report`` and ``python`` are this checkout's (a shim on ``PATH``),
and the block runs under ``set -euo pipefail``: any failing command fails the
test (a command expected to fail says so, e.g. ``|| test $? -eq 2``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DOCS = REPO / "docs"
MARKER = "<!-- runnable: tests/test_docs.py runs this block -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```(bash|python)\n(.*?)\n```", re.S)
#: The task pages: each has exactly one runnable example.
TASK_PAGES = ("install", "collect", "analyze", "report", "source", "advice", "CI", "formats",
              "configuration", "scale", "whatif", "bad-input", "api", "performance", "contributing",
              "releases")
#: The README is a front page, not a log (issue 55: at most about 200 lines).
README_MAX_LINES = 220


def examples():
    out = []
    for page in sorted(DOCS.glob("*.md")):
        for lang, code in BLOCK.findall(page.read_text(encoding="utf-8")):
            out.append(pytest.param(page.stem, lang, code, id=page.stem))
    return out


def test_every_task_page_has_one_runnable_example():
    found = [p.values[0] for p in examples()]
    for page in TASK_PAGES:
        assert found.count(page) == 1, f"docs/{page}.md: {found.count(page)} runnable examples, expected 1"
    # a marker not followed by a bash or python block would silently run nothing
    for page in DOCS.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert text.count(MARKER) == len(BLOCK.findall(text)), f"{page}: a marker without a block after it"


@pytest.mark.parametrize("page, lang, code", examples())
def test_runnable_example(page, lang, code, tmp_path):
    """Run the page's example in an empty folder holding links to the samples
    and the docs (for the checks of generated files), with this checkout's
    package first on the path."""
    if "hta-report collect" in code:
        pytest.importorskip("torch")  # collect records with torch.profiler
    work = tmp_path / "work"
    work.mkdir()
    for name in ("sample_traces", "docs"):
        (work / name).symlink_to(REPO / name)
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, target in (("hta-report", f'"{sys.executable}" -m hta_report "$@"'),
                         ("python", f'"{sys.executable}" "$@"')):
        (shims / name).write_text(f"#!/bin/sh\nexec {target}\n")
        (shims / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # the example's cache, not the user's
    if lang == "bash":
        cmd = ["bash", "-c", "set -euo pipefail\n" + code]
    else:
        cmd = [sys.executable, "-c", code]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"docs/{page}.md example failed ({proc.returncode}):\n{code}\n{proc.stdout}\n{proc.stderr}"
    # every output an example names is left behind, non-empty (but where exit 1 is expected)
    written = "\n".join(line for line in code.splitlines() if "-eq 1" not in line)
    for out in re.findall(r"(?:-o|--json)\s+(\S+\.(?:html|md|json|sarif))", written):
        assert (work / out).is_file() and (work / out).stat().st_size > 0, f"docs/{page}.md: {out} not written"


def test_readme_is_a_front_page_whose_links_hold():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links the docs"
    for link in local:
        path, _, anchor = link.partition("#")
        assert (REPO / path).exists(), f"README links {link}: {path} does not exist"
        if anchor and path.endswith(".md"):
            heads = (REPO / path).read_text(encoding="utf-8")
            # headings as mkdocs and GitHub slug them: lower case, spaces to '-', punctuation dropped
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.*)$", heads, re.M)}
            assert anchor in slugs, f"README links {link}: no heading with that anchor"
    # the two fresh-machine commands come first, as CI's .ci/run says
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert "hta-report analyze sample_traces/" in blocks[0]
    assert "pip install torch==2.13.0 && pip install -e" in blocks[1] and blocks[1].endswith("python -m pytest -q")
    assert (REPO / "docs" / "img" / "report.png").stat().st_size < 300_000


def test_the_version_is_the_same_in_pyproject_and_the_package():
    import hta_report

    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["version"] == hta_report.__version__
    assert meta["license"] == "MIT" and meta["license-files"] == ["LICENSE"]  # SPDX, PEP 639


def test_the_site_builds_strict(tmp_path):
    """``mkdocs build --strict`` with mkdocs.yml's validation at ``warn``:
    a broken link, a missing anchor, a page outside the nav fails."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    assert (site / "report" / "index.html").is_file() and (site / "img" / "report.png").is_file()


def test_contributing_names_every_benchmark():
    """The benchmark table of docs/contributing.md is not a hand-kept list that
    falls behind: every script in bench/ is in it."""
    page = (DOCS / "contributing.md").read_text(encoding="utf-8")
    for script in sorted((REPO / "bench").glob("*.py")):
        assert f"`bench/{script.name}`" in page, f"docs/contributing.md: add bench/{script.name}"
