"""Tests of ``hta-report collect`` (hta_report.collect): workloads, scripts, API, torchrun."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from hta_report.collect.command import collect_command
from hta_report.errors import CollectError

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
TRACE_NAME = re.compile(r"^rank-(\d+)\.[^.]+_\d+\.(\d+)\.pt\.trace\.json\.gz$")


# ----------------------------------------------------------------- helpers
def collect(*args: str):
    """Run ``collect`` in-process; returns click's Result."""
    return CliRunner().invoke(collect_command, list(args), catch_exceptions=True)


def traces(out: Path):
    return sorted(p for p in out.iterdir() if p.name.endswith(".pt.trace.json.gz"))


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def events(trace: dict, prefix: str):
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]


def step_names(trace: dict):
    return sorted(e["name"] for e in events(trace, "ProfilerStep#"))


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def no_leftovers(out: Path) -> bool:
    return not [p for p in out.iterdir() if p.name.startswith(".")]


def dataloader_share(trace: dict) -> float:
    """Mean share of ProfilerStep time inside enumerate(DataLoader)#..., first step excluded."""
    loads = events(trace, "enumerate(DataLoader)#")
    shares = []
    for step in sorted(events(trace, "ProfilerStep#"), key=lambda e: e["ts"]):
        a, b = step["ts"], step["ts"] + step["dur"]
        inside = sum(max(0.0, min(b, e["ts"] + e["dur"]) - max(a, e["ts"])) for e in loads)
        shares.append(inside / step["dur"])
    return sum(shares[1:]) / len(shares[1:])


def write_script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


TRAIN_SCRIPT = """\
    import sys
    import torch
    from torch import nn

    print("script argv:", sys.argv[1:])
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)  # wraps opt.step per instance
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(112, 16), torch.randn(112, 1)), batch_size=16)

    def main():
        for x, y in data:  # 7 optimizer steps
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print("training finished, __name__ =", __name__)

    if __name__ == "__main__":
        main()
    """


# --------------------------------------------------------- built-in workloads
def test_cnn_workload_writes_trace_and_manifest(tmp_path):
    out = tmp_path / "t"
    result = collect("-o", str(out), "--workload", "cnn", "--steps", "10")
    assert result.exit_code == 0, result.output
    files = traces(out)
    assert len(files) == 1
    match = TRACE_NAME.match(files[0].name)
    assert match and match.group(1) == "0" and match.group(2) == "1"
    trace = load(files[0])
    # schedule wait=1 warmup=1 active=7: steps 2-8 are recorded (analyze keeps 5: 3-7)
    assert step_names(trace) == [f"ProfilerStep#{n}" for n in range(2, 9)]
    loads = events(trace, "enumerate(DataLoader)#")
    assert len(loads) >= 3
    assert any(e["name"].startswith("aten::conv") or e["name"] == "aten::convolution"
               for e in trace["traceEvents"] if "name" in e)
    assert trace["traceName"] == str(files[0])  # not the temporary export path
    m = manifest(out)
    assert m["torch_version"] == torch.__version__
    assert m["trace_files"] == [files[0].name]
    assert m["schedule"] == {"wait": 1, "warmup": 1, "active": 7, "repeat": 1}
    assert m["world_size"] == 1 and m["steps_run"] == 10
    assert m["run"]["workload"] == "cnn" and m["run"]["knobs"]["steps"] == 10
    assert m["start_time"].endswith("Z")
    datetime.fromisoformat(m["start_time"].replace("Z", "+00:00"))
    assert m["device_names"][0].startswith("cpu")
    assert no_leftovers(out)
    # progress goes to stderr, ending with what to run next
    assert "step 1/10" in result.stderr and "wrote" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"[collect] next: hta-report analyze {out} -o report.html"
    assert "[collect]" not in result.stdout


def test_quiet_collect_prints_nothing_not_even_kinetos_lines(tmp_path):
    """libkineto writes ``USDT:... profiler_start`` straight to file descriptor 2
    (not through Python): only a fresh process shows whether -q keeps it out."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "hta_report.collect", "--workload", "cnn", "--steps", "3", "--wait", "0",
           "--warmup", "1", "--active", "2", "--width", "4"]
    quiet = subprocess.run(cmd + ["-o", str(tmp_path / "q"), "-q"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert quiet.stderr == "" and quiet.stdout == ""
    assert len(traces(tmp_path / "q")) == 1


@pytest.mark.parametrize("workload, op", [("rnn", "aten::lstm"),
                                           ("transformer", "aten::scaled_dot_product_attention")])
def test_rnn_and_transformer_workloads(tmp_path, workload, op):
    out = tmp_path / workload
    result = collect("-o", str(out), "--workload", workload, "--steps", "5", "--active", "3", "--width", "32",
                     "--amp", "--sync-every-step", "-q")
    assert result.exit_code == 0, result.output
    assert result.stderr == "" or "[collect]" not in result.stderr  # -q
    [path] = traces(out)
    trace = load(path)
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert events(trace, op), f"no {op} in the {workload} trace"
    assert len(events(trace, "enumerate(DataLoader)#")) >= 3
    m = manifest(out)
    assert m["run"]["knobs"]["amp"] is True and m["run"]["knobs"]["width"] == 32
    assert m["run"]["result"]["steps"] == 5


def _dataloader_shares(tmp_path, attempt):
    shares = {}
    for workers in (0, 2):
        out = tmp_path / f"try{attempt}-nw{workers}"
        result = collect("-o", str(out), "--workload", "cnn", "--steps", "8", "--active", "3", "--slow-data", "5",
                         "--num-workers", str(workers), "-q", "--no-record-shapes")
        assert result.exit_code == 0, result.output
        [path] = traces(out)
        shares[workers] = dataloader_share(load(path))
    return shares


def test_slow_data_share_drops_with_workers(tmp_path):
    # On an idle 2-core machine the shares are about 0.43 and 0.11. The
    # measurement is a timing one: other load on the machine (the worker
    # processes compete with it for 2 cores) can blur one run, so a second
    # run is allowed; both runs' figures are printed.
    for attempt in (1, 2):
        shares = _dataloader_shares(tmp_path, attempt)
        print("attempt", attempt, "dataloader shares", shares)
        if shares[0] > 0.10 and shares[2] < 0.75 * shares[0]:
            break
    assert shares[0] > 0.10, shares
    assert shares[2] < 0.75 * shares[0], shares


def test_repeat_writes_one_file_per_cycle(tmp_path):
    out = tmp_path / "rep"
    result = collect("-o", str(out), "--workload", "cnn", "--wait", "0", "--warmup", "1",
                     "--active", "1", "--repeat", "2", "-q")
    assert result.exit_code == 0, result.output
    files = traces(out)
    assert [TRACE_NAME.match(p.name).group(2) for p in files] == ["1", "2"]
    assert [step_names(load(p)) for p in files] == [["ProfilerStep#1"], ["ProfilerStep#3"]]
    assert sorted(manifest(out)["trace_files"]) == [p.name for p in files]
    # the command collect prints next reads them as two windows of one rank, the latest analyzed
    from hta_report.api import analyze

    r = analyze(out)
    assert [f.path for f in r.inventory.files] == [str(files[1])] and len(r.ranks) == 1
    (w,) = r.inventory.windows
    assert w.analyzed == str(files[1]) and w.others == [str(files[0])]
    assert w.worker.startswith("rank-0.") and files[0].name == f"{w.worker}.1.pt.trace.json.gz"


# ------------------------------------------------------------------ scripts
def test_script_is_profiled_at_optimizer_steps(tmp_path):
    script = write_script(tmp_path, "train.py", TRAIN_SCRIPT)
    out = tmp_path / "s"
    argv_before = list(sys.argv)
    result = collect("-o", str(out), "--active", "3", "--", "python", str(script), "--lr", "3")
    assert result.exit_code == 0, result.output
    assert "script argv: ['--lr', '3']" in result.stdout
    assert "training finished, __name__ = __main__" in result.stdout
    assert sys.argv == argv_before
    [path] = traces(out)
    trace = load(path)
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # each recorded step holds exactly one optimizer step and one DataLoader fetch,
    # properly nested: no ProfilerStep boundary cuts an Optimizer.step range
    steps = events(trace, "ProfilerStep#")
    for name in ("Optimizer.step#SGD.step", "enumerate(DataLoader)#"):
        found = events(trace, name)
        assert len(found) == 3
        for e in found:
            assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
                       for s in steps), e
    # the optimizer classes are restored afterwards
    assert not hasattr(torch.optim.SGD.step, "_hta_report_step_wrapper")
    assert torch.optim.SGD.step.hooked
    assert "profile_hook_step" in repr(torch.optim.Optimizer.__dict__["profile_hook_step"].__func__)
    m = manifest(out)
    assert m["run"]["mode"] == "script" and m["run"]["exit_code"] == 0
    assert m["steps_run"] == 7


def test_script_forms_without_python_and_as_module(tmp_path, monkeypatch):
    write_script(tmp_path, "mytrain.py", TRAIN_SCRIPT)
    monkeypatch.chdir(tmp_path)
    result = collect("-o", "a", "-q", "--active", "3", "--", "mytrain.py")
    assert result.exit_code == 0, result.output
    assert len(traces(tmp_path / "a")) == 1
    sys.modules.pop("mytrain", None)
    result = collect("-o", "b", "-q", "--active", "3", "--", "-m", "mytrain", "x")
    assert result.exit_code == 0, result.output
    assert "script argv: ['x']" in result.stdout
    assert len(traces(tmp_path / "b")) == 1


def test_step_on_forward_for_inference_script(tmp_path):
    script = write_script(tmp_path, "infer.py", """\
        import torch
        from torch import nn
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
        with torch.no_grad():
            for _ in range(8):
                out = model(torch.randn(4, 16))
        print("inference done", tuple(out.shape))
        """)
    out = tmp_path / "f"
    result = collect("-o", str(out), "-q", "--active", "3", "--step-on", "forward", "--", "python", str(script))
    assert result.exit_code == 0, result.output
    assert "inference done (4, 4)" in result.stdout
    [path] = traces(out)
    trace = load(path)
    # one step per outermost module call (the Sequential), not per Linear/ReLU
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert len(events(trace, "aten::linear")) == 6
    assert manifest(out)["steps_run"] == 8


def test_script_exception_propagates_and_completed_cycle_is_kept(tmp_path):
    script = write_script(tmp_path, "boom.py", """\
        import torch
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        def fail(step):
            raise ValueError(f"boom at step {step}")
        for step in range(20):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
            if step == 6:
                fail(step)
        """)
    out = tmp_path / "b"
    result = collect("-o", str(out), "--active", "3", "--", "python", str(script))
    assert result.exit_code == 1
    assert isinstance(result.exception, CollectError)
    assert "ValueError: boom at step 6" in str(result.exception)
    assert "\n" not in str(result.exception)
    assert "Traceback (most recent call last)" in result.stderr
    assert f'File "{script}", line 10' in result.stderr
    assert "hta_report" not in result.stderr.split("Traceback")[1]
    # cycle 1 (steps 0-4) finished before the error; cycle 2 never started
    [path] = traces(out)
    assert step_names(load(path)) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    m = manifest(out)
    assert m["run"]["exit_code"] == 1 and "boom at step 6" in m["run"]["error"]
    assert no_leftovers(out)


def test_script_error_mid_cycle_writes_no_partial_trace(tmp_path):
    script = write_script(tmp_path, "early.py", """\
        import torch
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for step in range(3):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
        raise RuntimeError("stopped during the active steps")
        """)
    out = tmp_path / "e"
    result = collect("-o", str(out), "--active", "3", "--", "python", str(script))
    assert result.exit_code == 1
    assert "RuntimeError: stopped during the active steps" in str(result.exception)
    assert traces(out) == []
    assert manifest(out)["trace_files"] == []
    assert "discarded cycle 1" in result.stderr
    assert no_leftovers(out)


def test_script_exit_code_propagates(tmp_path):
    script = write_script(tmp_path, "exit3.py", """\
        import sys, torch
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(6):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
        print("exiting with 3")
        sys.exit(3)
        """)
    out = tmp_path / "x"
    result = collect("-o", str(out), "-q", "--active", "3", "--", "python", str(script))
    assert result.exit_code == 3
    assert "exiting with 3" in result.stdout
    assert len(traces(out)) == 1
    assert manifest(out)["run"]["exit_code"] == 3


def test_script_too_short_for_one_cycle_is_an_error(tmp_path):
    script = write_script(tmp_path, "short.py", """\
        import torch
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
        """)
    result = collect("-o", str(tmp_path / "s"), "-q", "--", "python", str(script))
    assert result.exit_code == 1
    assert "took 2 profiler steps" in str(result.exception)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("args, message", [
    (["--workload", "vgg"], "unknown workload 'vgg'"),
    ([], "nothing to run"),
    (["--", "no_such_script.py"], "no such script: no_such_script.py"),
    (["--", "python"], "no script after the interpreter"),
    (["--", "-m", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
    (["--workload", "cnn", "--", "train.py"], "either --workload or a script"),
    (["--batch-size", "8", "--", "train.py"], "--batch-size only applies to --workload"),
    (["--workload", "cnn", "--active", "0"], "--active must be >= 1"),
    (["--workload", "cnn", "--steps", "3"], "shorter than one profiler cycle"),
    (["--workload", "cnn", "--device", "tpu"], "unknown device 'tpu'"),
])
def test_user_errors_are_one_line_collect_errors(tmp_path, args, message):
    result = collect("-o", str(tmp_path / "o"), *args)
    assert result.exit_code == 1
    assert isinstance(result.exception, CollectError), result.output
    assert message in str(result.exception)
    assert "\n" not in str(result.exception)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_an_error(tmp_path):
    result = collect("-o", str(tmp_path / "o"), "--workload", "cnn", "--device", "cuda")
    assert isinstance(result.exception, CollectError)
    assert "CUDA is not available" in str(result.exception)


def test_output_dir_with_traces_is_refused(tmp_path):
    out = tmp_path / "full"
    out.mkdir()
    (out / "rank-0.old.pt.trace.json.gz").write_bytes(b"")
    result = collect("-o", str(out), "--workload", "cnn")
    assert isinstance(result.exception, CollectError)
    assert "already holds 1 trace" in str(result.exception)


def test_command_imports_without_torch(tmp_path):
    code = textwrap.dedent(f"""\
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        from click.testing import CliRunner
        from hta_report.collect.command import collect_command
        import hta_report.collect
        r = CliRunner().invoke(collect_command, ["-o", {str(tmp_path / 'o')!r}, "--workload", "cnn"])
        print(r.exit_code, type(r.exception).__name__, r.exception)
        """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.stdout.strip() == "1 CollectError PyTorch is not installed: pip install torch", \
        proc.stderr


# --------------------------------------------------------------------- API
def test_profile_context_manager(tmp_path):
    from hta_report.collect import profile

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(tmp_path / "api", wait=1, warmup=0, active=2, repeat=2, quiet=True,
                 record_shapes=False) as prof:
        for _ in range(7):  # two full cycles of 3 steps, then one extra step
            with torch.profiler.record_function("my_step"):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            prof.step()
    assert [p.name for p in prof.trace_files] == [p.name for p in traces(tmp_path / "api")]
    assert [step_names(load(p)) for p in prof.trace_files] == [
        ["ProfilerStep#1", "ProfilerStep#2"], ["ProfilerStep#4", "ProfilerStep#5"]]
    assert len(events(load(prof.trace_files[0]), "my_step")) == 2
    m = manifest(tmp_path / "api")
    assert m["run"] == {"mode": "api"} and m["steps_run"] == 7
    assert m["profiler"]["record_shapes"] is False


def test_profile_discards_a_cycle_cut_short(tmp_path):
    from hta_report.collect import profile

    with profile(tmp_path / "cut", wait=0, warmup=1, active=3, repeat=0, quiet=True) as prof:
        for _ in range(6):  # cycle 1 = steps 0-3; cycle 2 stops after 2 of its 4 steps
            torch.randn(64, 64).matmul(torch.randn(64, 64))
            prof.step()
    assert len(prof.trace_files) == 1 and prof.discarded_cycles == 1
    assert len(traces(tmp_path / "cut")) == 1
    assert no_leftovers(tmp_path / "cut")


def test_trace_write_is_atomic(tmp_path):
    from hta_report.collect.traces import write_trace_atomically

    class Exporting:
        def export_chrome_trace(self, path):
            Path(path).write_text(json.dumps({"traceName": path, "traceEvents": []}))

    class Failing:
        def export_chrome_trace(self, path):
            Path(path).write_text('{"traceEvents": [')
            raise OSError(28, "No space left on device")

    good = write_trace_atomically(Exporting(), tmp_path / "rank-0.h_1.1.pt.trace.json.gz")
    assert load(good) == {"traceName": str(good), "traceEvents": []}
    with pytest.raises(OSError):
        write_trace_atomically(Failing(), tmp_path / "rank-0.h_1.2.pt.trace.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.h_1.1.pt.trace.json.gz"]


# ----------------------------------------------------------------- torchrun
@pytest.mark.torchrun
@pytest.mark.skipif(os.environ.get("HTA_REPORT_SKIP_TORCHRUN") == "1",
                    reason="HTA_REPORT_SKIP_TORCHRUN=1")
def test_torchrun_two_ranks_write_two_traces(tmp_path):
    """Takes about 5 s on 2 CPU cores (2 gloo ranks, 6 steps); skip with -m 'not torchrun'."""
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "hta_report.collect", "-o", str(out), "--workload", "cnn", "--steps", "6", "--active", "3", "-q"],
        capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = traces(out)
    assert len(files) == 2
    ranks = []
    for path in files:
        info = load(path)["distributedInfo"]
        assert info["backend"] == "gloo" and info["world_size"] == 2
        assert TRACE_NAME.match(path.name).group(1) == str(info["rank"])
        ranks.append(info["rank"])
    assert sorted(ranks) == [0, 1]
    m = manifest(out)
    assert m["world_size"] == 2 and m["trace_files_complete"] is True
    assert sorted(m["trace_files"]) == [p.name for p in files]
    assert m["run"]["distributed_backend"] == "gloo"
    assert elapsed < 60, f"torchrun test took {elapsed:.0f} s"


def test_a_finished_rank_meets_its_peers_then_ends_without_teardown(monkeypatch):
    """After a finished run, a torchrun rank meets its peers at a barrier,
    destroys the process group and asks for an exit without the
    interpreter's teardown (gloo's threads can abort it, and torchrun then
    fails the job though every file is written); after an error there is
    no barrier (the peers may never reach it) and the teardown stays."""
    import torch.distributed as dist

    from hta_report import teardown
    from hta_report.collect.run import _leave_group

    calls = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: calls.append("destroy"))
    teardown.reset()
    _leave_group(finished=False)
    assert calls == ["destroy"] and not teardown.teardown_skipped()
    calls.clear()
    _leave_group(finished=True)
    assert calls == ["barrier", "destroy"] and teardown.teardown_skipped()
    teardown.reset()


def test_finish_skips_atexit_only_when_asked(tmp_path):
    """``teardown.finish`` flushes what was printed and exits with the code;
    ``atexit`` handlers run unless :func:`skip_teardown` was called."""
    code = ("import atexit, sys; from hta_report import teardown; "
            "atexit.register(lambda: print('teardown ran')); print('written', end=''); "
            "{skip}teardown.finish(3)")
    for skip, out in (("teardown.skip_teardown(); ", "written"), ("", "writtenteardown ran\n")):
        proc = subprocess.run([sys.executable, "-c", code.format(skip=skip)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
        assert proc.returncode == 3 and proc.stdout == out, (skip, proc.stdout, proc.stderr)


def test_cuda_runs_record_synchronization_events(tmp_path, monkeypatch):
    """On CUDA the profiler gets ``_ExperimentalConfig(enable_cuda_sync_events=True)``
    (what a synchronization waited for; issue 30) and the manifest says so; on
    the CPU it gets no experimental configuration. The profiler is replaced
    by a recorder: this machine has no GPU."""
    import torch

    from hta_report.collect import environment, session

    seen = []

    class Recorder:
        def __init__(self, **kwargs):
            seen.append(kwargs)

        def start(self):
            pass

    monkeypatch.setattr(torch.profiler, "profile", Recorder)
    for device in ("cuda", "cpu"):
        monkeypatch.setattr(environment, "resolve_device", lambda requested, d=device: d)
        prof = session.profile(tmp_path / device, device=device, manifest=False)
        prof.start()
        assert prof.sync_events is (device == "cuda")
    cuda, cpu = seen
    assert type(cuda["experimental_config"]).__name__ == "_ExperimentalConfig"
    assert "experimental_config" not in cpu
