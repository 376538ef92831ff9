"""The type checker is part of the tests: ``python -m mypy`` with the
project's configuration (``[tool.mypy]`` in pyproject.toml: 0 errors in
default mode everywhere, --strict's flags on the result model, the renderers
and the rules). mypy and pandas-stubs come with the ``test`` extra."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_error():
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert proc.returncode == 0 and not errors, \
        f"{len(errors)} mypy errors:\n" + "\n".join(errors[:60]) + proc.stderr[-2000:]


def test_the_strict_modules_are_the_documented_ones():
    """pyproject.toml gives the model, the renderers and the rules all of --strict's flags."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    (strict,) = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    assert {"hta_report.model", "hta_report.render.*", "hta_report.rules.*"} <= set(strict["module"])
    for flag in ("disallow_any_generics", "disallow_untyped_calls", "disallow_untyped_defs", "check_untyped_defs",
                 "warn_return_any", "no_implicit_reexport", "strict_equality", "disallow_incomplete_defs"):
        assert strict.get(flag) is True, flag
