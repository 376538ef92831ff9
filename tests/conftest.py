import collections
import os
import sys
import time
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


def _listed(name: str) -> set:
    """The entries of ``tests/<name>`` (one a line; ``#`` starts a comment line)."""
    return {line.strip() for line in (HERE / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}


#: Test functions marked ``slow`` (``file::function``), measured: see tests/refresh_slow.py.
SLOW = _listed("slow.txt")
#: The safety checks (a test file, or ``file::function``): always in the quick
#: tier, never marked ``slow`` whatever slow.txt says (tests/safety.txt).
SAFETY = _listed("safety.txt")
#: Fixtures that start a Ray head: a test using one is slow (a head takes 10-30 s to
#: start on a loaded 2-core machine, and may time out there).
RAY_FIXTURES = {"ray_head"}


def is_safety(nodeid: str) -> bool:
    """Whether a test (node id, parameters allowed) is a safety check (:data:`SAFETY`)."""
    function = nodeid.split("[")[0]
    return function in SAFETY or function.split("::")[0] in SAFETY


def pytest_collection_modifyitems(config, items):
    """Mark the measured slow tests (:data:`SLOW`) and the tests that start
    Ray (a :data:`RAY_FIXTURES` fixture or the ``ray`` marker) ``slow``:
    ``pytest -m "not slow"`` leaves them out. The safety checks
    (:data:`SAFETY`) are marked ``safety`` instead, never ``slow``.

    Raises:
        pytest.UsageError: a safety check carries ``@pytest.mark.slow`` or
            starts Ray in its own code (it would leave the quick tier).
    """
    for item in items:
        if is_safety(item.nodeid):
            if item.get_closest_marker("slow") or item.get_closest_marker("ray") \
                    or RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
                raise pytest.UsageError(f"{item.nodeid} is a safety check (tests/safety.txt): it may not be "
                                        "marked slow or start Ray")
            item.add_marker(pytest.mark.safety)
        elif (item.nodeid.split("[")[0] in SLOW or item.get_closest_marker("ray")
              or RAY_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)


#: Seconds each test's setup spent in fixtures shared with other tests (module,
#: class, package or session scope): charged to whichever test comes first,
#: they are no test's own cost (tests/refresh_slow.py subtracts them).
SHARED_SETUP_S: dict = collections.defaultdict(float)


class _SharedSetupTimer:
    """Times the setup of shared fixtures into :data:`SHARED_SETUP_S`. A
    plugin registered in :func:`pytest_configure`, not hooks of this
    conftest: those would not see session-scoped fixtures (set up on the
    session node, outside ``tests/``)."""

    def __init__(self) -> None:
        self.running: list = []
        self.timing: list = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        self.running.append(item.nodeid)
        yield
        self.running.pop()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        outer = fixturedef.scope != "function" and bool(self.running) and not self.timing
        start = time.perf_counter()
        if outer:
            self.timing.append(fixturedef.argname)  # a shared fixture inside it is counted once, in it
        try:
            yield
        finally:
            if outer:
                self.timing.pop()
                SHARED_SETUP_S[self.running[-1]] += time.perf_counter() - start


def pytest_configure(config):
    config.pluginmanager.register(_SharedSetupTimer(), "hta-report-shared-setup-timer")


def pytest_terminal_summary(terminalreporter):
    """With ``--durations``: the setup time each test spent in shared fixtures
    (``SHARED_SETUP_S``, one ``shared-setup`` line each, read by
    tests/refresh_slow.py). Then one line saying how many tests skipped
    because ``../shared`` is absent (they need the real traces there), and
    where it was looked for."""
    if terminalreporter.config.getoption("durations", None) is not None:
        for nodeid, seconds in sorted(SHARED_SETUP_S.items()):
            if seconds >= 0.005:
                terminalreporter.write_line(f"{seconds:.2f}s shared-setup {nodeid}")
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


#: The shipped sample runs (``sample_traces/<name>``), by name.
SAMPLES_DIR = REPO / "sample_traces"
SAMPLE_NAMES = sorted(p.name for p in SAMPLES_DIR.iterdir() if p.is_dir())


@pytest.fixture(scope="session")
def sample_results():
    """The shipped samples analyzed once per pytest run: name -> AnalysisResult
    (``analyze(sample_traces/<name>, cache=None, source_root=REPO)``), for every
    test module that reads them instead of analysing them again.

    Shared, so read-only: a test that needs a changed result makes a copy
    (``dataclasses.replace``). At the end of the run the results must still
    equal what they were (their JSON); a test that changed one fails there.
    """
    from types import MappingProxyType

    from hta_report.api import analyze

    results = {name: analyze(SAMPLES_DIR / name, cache=None, source_root=REPO) for name in SAMPLE_NAMES}
    before = {name: r.to_json() for name, r in results.items()}
    yield MappingProxyType(results)
    changed = [name for name, r in results.items() if r.to_json() != before[name]]
    assert not changed, f"a test changed the shared sample results of {changed}: copy them before changing"


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
