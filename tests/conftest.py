import os
import sys
from pathlib import Path
from typing import Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # for tests/kineto.py

#: Real traces beside the checkout (never copied into the repo): HTA's,
#: TraceLens's and the TensorBoard plugin's test data (see its README.md).
SHARED_ROOT = Path(os.environ.get("HTA_REPORT_SHARED", HERE.parent.parent / "shared")) / "traces"
#: HTA's test traces among them.
SHARED_TRACES = SHARED_ROOT / "hta"
REPO = HERE.parent
#: Every trace folder under ../shared/traces/hta (see its README.md).
SHARED_FOLDERS = ["alexnet", "amd_trace", "cpu_only", "distributed_info_unavailable", "trace_diff/control",
                  "trace_diff/test", "triton_example", "two_ranks"]


def shared_runs():
    """Every folder under ``../shared/traces`` that holds trace files itself
    (one run each), relative to it, sorted; empty when ``../shared`` is absent."""
    if not SHARED_ROOT.is_dir():
        return []
    return sorted(str(p.relative_to(SHARED_ROOT)) for p in SHARED_ROOT.rglob("*")
                  if p.is_dir() and any(f.name.endswith((".json", ".json.gz")) for f in p.iterdir())
                  and p.name != "reference_gpu_timeline")


#: Test functions marked ``slow`` (``file::function``), measured: see tests/refresh_slow.py.
SLOW = {line.strip() for line in (HERE / "slow.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """Mark the measured slow tests (:data:`SLOW`) ``slow``: ``pytest -m "not slow"`` leaves them out."""
    for item in items:
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter):
    """One line saying how many tests skipped because ``../shared`` is absent
    (they need the real traces there), and where it was looked for."""
    skipped = terminalreporter.stats.get("skipped", [])
    shared_skips = sum(1 for r in skipped if "../shared" in str(getattr(r, "longrepr", "")))
    if shared_skips:
        terminalreporter.write_line(f"{shared_skips} tests skipped: they read real traces from {SHARED_ROOT}, which is "
                                    "absent (set HTA_REPORT_SHARED to the folder holding traces/)")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache directory: nothing is read from or
    written to the user's ~/.cache (subprocesses inherit it too)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def shared(name: str) -> Path:
    """Path of a folder under ../shared/traces/hta; skips the test when absent."""
    path = SHARED_TRACES / name
    if not path.is_dir():
        pytest.skip(f"{path} not available (../shared is absent)")
    return path


def result_json(path, workers: int, monkeypatch, stages=None, in_workers: Optional[bool] = None) -> dict:
    """The result JSON of ``analyze(path)`` with ``workers`` worker processes
    (the per-rank parallel path even for small traces), without its time
    stamp; asserts that worker processes ran exactly when ``workers`` > 1
    (or ``in_workers`` where given). ``stages`` (a list) receives the ``-v``
    stage names."""
    import io
    import json

    from hta_report import progress
    from hta_report.analysis import parallel
    from hta_report.api import analyze

    monkeypatch.setenv("HTA_REPORT_WORKERS", str(workers))
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)
    with progress.using(progress.Progress(stream=io.StringIO(), live=False)) as p:
        data = json.loads(analyze(path).to_json())
    ran = [name for name, _ in p.times if name.endswith("(worker)")]
    assert bool(ran) == (workers > 1 if in_workers is None else in_workers)  # the parallel path was taken, or not
    if stages is not None:
        stages.extend(name for name, _ in p.times)
    data["inventory"].pop("analyzed_at")
    return data


@pytest.fixture
def run_cli():
    """Run the CLI in-process; returns (exit_code, stdout, stderr)."""
    from hta_report.cli import main

    def _run(*args):
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
        return code, out.getvalue(), err.getvalue()

    return _run
