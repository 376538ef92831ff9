"""The wheel ships the templates: a non-editable install renders a report."""
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO
from kineto import simple_gpu_trace


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(REPO)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(proc.stderr)
    (whl,) = out.glob("hta_report-*.whl")
    return whl


def test_wheel_contains_templates(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "hta_report/templates/report.html.j2" in names
    assert "hta_report/templates/report.css" in names
    assert "hta_report/py.typed" in names  # PEP 561: users' type checkers read our annotations
    # the MIT license text travels with the wheel, as pyproject.toml's license says
    (lic,) = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
    assert "MIT License" in zipfile.ZipFile(wheel).read(lic).decode()
    # an SPDX expression (PEP 639), not the deprecated license table setuptools warns about
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: MIT" in metadata.splitlines()


def test_installed_wheel_renders_a_report(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    traces = tmp_path / "traces"
    traces.mkdir()
    simple_gpu_trace().write(traces / "t.json")
    # run from a directory outside the checkout, with only the installed copy on the path
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import hta_report, sys; assert 'site' in hta_report.__file__, hta_report.__file__; "
            "from hta_report.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(traces), "-o", str(tmp_path / "r.html")],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Input-bound" in (tmp_path / "r.html").read_text()
