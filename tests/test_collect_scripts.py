"""``hta-report collect -- python script.py``: user scripts that do what real ones do (issue 18).

A matrix of scripts, each run as ``python -m hta_report collect`` in its own
process (a fork or a signal must not touch pytest's process), all started
at once and then checked one by one: a script that forks (the child returns
normally, raises, or calls sys.exit), calls ``os._exit``, changes directory
and rewrites ``sys.argv`` and ``sys.path``, leaves threads running, or gets
SIGINT or SIGTERM. Every case has a timeout: a hang fails the test instead of
blocking the suite. Each script trains a tiny model for 6 optimizer steps
(one profiler cycle of 5 completes after step 5).
"""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

#: Slow tier, the whole module: its ``runs`` fixture runs every script under
#: ``hta-report collect`` (18 s on a loaded 2-core machine) for all the tests.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120

TRAIN = """\
import os, signal, sys, threading, time
import torch

def train(steps=6):
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        m(torch.randn(2, 4)).sum().backward()
        opt.step()
"""

CASES = {
    # item 1: a child that returned from the script ran into the collector, wrote
    # manifest.json and blocked; the parent waited forever
    "fork": """
        train()
        def child(then):
            pid = os.fork()
            if pid == 0:
                then()
                return "child"
            _, status = os.waitpid(pid, 0)
            print(then.__name__, "exit", os.waitstatus_to_exitcode(status), flush=True)
            return "parent"

        def returns():
            print("child done", flush=True)

        def raises():
            raise ValueError("child failed")

        def exits():
            sys.exit(3)

        for then in (returns, raises, exits):
            if child(then) == "child":
                break
        else:
            print("parent done", flush=True)
        """,
    "os_exit": """
        train()
        print("exiting", flush=True)
        os._exit(5)
        """,
    # item 4: -o was resolved after the script ran: every trace was lost. Also:
    # runpy failed putting back sys.argv[0] after the script emptied sys.argv.
    "chdir_argv_path": """
        os.makedirs("elsewhere", exist_ok=True)
        os.chdir("elsewhere")
        train()
        sys.argv[:] = []
        sys.path.clear()
        sys.path = ["/nonexistent"]
        sys.exit(4)
        """,
    "threads": """
        def forever():
            while True:
                time.sleep(0.05)

        def late():
            time.sleep(0.5)
            print("late thread done", flush=True)

        threading.Thread(target=forever, daemon=True).start()
        threading.Thread(target=late).start()
        threading.Thread(target=train).start()  # the training itself runs in a thread
        print("main returns", flush=True)
        """,
    # analyze and compare end with os._exit (cli.run): collect must not, or the
    # script's atexit handlers (loggers, writers flushing) would never run
    "atexit": """
        import atexit
        atexit.register(lambda: print("user atexit ran", flush=True))
        train()
        """,
    "sigint": """
        train()
        os.kill(os.getpid(), signal.SIGINT)
        train(20)
        """,
    "sigterm": """
        train()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            train(20)
        except Exception:
            print("swallowed", flush=True)
        train(20)
        """,
}


def _write(tmp: Path, name: str) -> Path:
    script = tmp / f"{name}.py"
    script.write_text(TRAIN + textwrap.dedent(CASES[name]))
    return script


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case started at once (``-o out``, relative, from the case's own
    directory), then waited for; name -> (returncode, stdout, stderr, dir)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = {}
    for name in CASES:
        d = tmp_path_factory.mktemp(name)
        script = _write(d, name)
        procs[name] = (d, subprocess.Popen(
            [sys.executable, "-m", "hta_report", "collect", "-o", "out", "--wait", "1", "--warmup", "1",
             "--active", "3", "--", "python", str(script)],
            cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            # a shell's background job (nohup ... &) inherits SIGINT ignored, and Python then keeps it ignored:
            # the SIGINT case needs the default disposition whatever ran pytest
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)))
    deadline = time.monotonic() + TIMEOUT_S
    out = {}
    for name, (d, proc) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the case's whole session: a forked child too
            stdout, stderr = proc.communicate()
            out[name] = ("timeout", stdout, stderr, d)
            continue
        out[name] = (proc.returncode, stdout, stderr, d)
    return out


def _traces(d: Path):
    return sorted(p for p in (d / "out").iterdir() if p.name.endswith(".pt.trace.json.gz")) \
        if (d / "out").is_dir() else []


def _steps(path: Path):
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sorted(e["name"] for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))


def _manifest(d: Path) -> dict:
    return json.loads((d / "out" / "manifest.json").read_text())


def _check(runs, name, code):
    rc, stdout, stderr, d = runs[name]
    assert rc == code, f"{name}: exit {rc}\n--- stdout\n{stdout}\n--- stderr\n{stderr[-3000:]}"
    [trace] = _traces(d)
    assert _steps(trace) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    m = _manifest(d)
    assert m["trace_files"] == [trace.name] and m["run"]["exit_code"] == code
    assert not [p for p in (d / "out").iterdir() if p.name.startswith(".")]  # no temporary file left
    return stdout, stderr, m


def test_fork_child_never_runs_the_collector(runs):
    """A forked child that returns from the script exits with the script's
    code (0, 1 after an exception, a sys.exit code) without writing anything."""
    stdout, stderr, m = _check(runs, "fork", 0)
    assert stdout.count("child done") == 1 and "parent done" in stdout
    assert "returns exit 0" in stdout and "raises exit 1" in stdout and "exits exit 3" in stdout
    assert "ValueError: child failed" in stderr
    assert stderr.count("wrote ") == 2  # one trace, one manifest: written by the parent only


def test_os_exit_keeps_traces_and_writes_the_manifest(runs):
    stdout, _, m = _check(runs, "os_exit", 5)
    assert "exiting" in stdout


def test_the_scripts_atexit_handlers_run(runs):
    stdout, _, _ = _check(runs, "atexit", 0)
    assert stdout.count("user atexit ran") == 1


def test_chdir_and_argv_path_changes_keep_every_trace(runs):
    _, _, m = _check(runs, "chdir_argv_path", 4)
    assert not (runs["chdir_argv_path"][3] / "elsewhere" / "out").exists()
    assert m["run"]["command"][0] == "python"


def test_threads_running_at_exit(runs):
    """Non-daemon threads are waited for, as Python waits for them (here the
    training itself runs in one); a daemon thread running forever does not
    block the exit."""
    stdout, _, m = _check(runs, "threads", 0)
    assert "main returns" in stdout and "late thread done" in stdout
    assert m["steps_run"] == 6


def test_sigint_exits_130_keeping_completed_cycles(runs):
    _, stderr, m = _check(runs, "sigint", 130)
    assert "KeyboardInterrupt" in stderr and "ended by SIGINT" in stderr
    assert m["run"]["error"] == "ended by SIGINT"


def test_sigterm_exits_143_keeping_completed_cycles(runs):
    stdout, stderr, m = _check(runs, "sigterm", 143)
    assert "swallowed" not in stdout  # not an Exception: `except Exception` in the script does not stop it
    assert "ended by SIGTERM" in stderr and "Traceback" not in stderr
    assert m["run"]["error"] == "ended by SIGTERM" and m["steps_run"] >= 6
