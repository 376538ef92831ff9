"""The per-rank analyses give the same result in forked workers as in one process.

With several files and workers, the local engine parses and analyzes each
rank in one worker (``hta_report.engines.local``); with one worker everything
runs in this process; a worker that dies sends the run back to the second way.
"""
import io
import json
import os

import pytest

from conftest import result_json, shared
from hta_report import progress
from hta_report.api import analyze
from hta_report.analysis import parallel
from hta_report.analysis import rank as rank_mod
from kineto import training_trace


def _sim_dir(tmp_path):
    for rank, comm in ((0, 300.0), (1, 900.0), (2, 0.0)):
        training_trace(rank=rank, world_size=3, steps=5, allreduce_us=comm, slow_launch_us=80.0,
                       pinned=rank != 1).write(tmp_path / f"rank{rank}.json")
    return tmp_path


@pytest.mark.parametrize("name", ["trace_diff/control", "two_ranks", "cpu_only"])
def test_workers_give_the_result_of_one_process_on_real_traces(name, monkeypatch):
    path = shared(name)
    one = result_json(path, 1, monkeypatch)
    assert result_json(path, 2, monkeypatch) == one
    assert one["ranks"]


def test_workers_give_the_result_of_one_process_on_simulated_ranks(tmp_path, monkeypatch):
    path = _sim_dir(tmp_path)
    one = result_json(path, 1, monkeypatch)
    stages = []
    assert result_json(path, 2, monkeypatch, stages) == one
    assert "analyze 3 ranks in worker processes" in stages  # each rank parsed and analyzed in one worker
    assert "HTA align and filter" not in stages  # nothing loaded in this process
    assert result_json(path, 3, monkeypatch) == one
    assert [r["rank"] for r in one["ranks"]] == [0, 1, 2]
    assert one["ranks"][0]["launch"]["kernel_runtime_outliers"] > 0  # the joined launch metrics are exercised
    assert one["ranks"][1]["comm"]["overlap_pct"] > 0


def _five_ranks(tmp_path, monkeypatch):
    """5 simulated ranks under ``tmp_path/traces``, and the folder the spill
    folders are made in (``tmp_path/tmp``, as ``tempfile`` is told)."""
    import tempfile

    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in range(5):
        training_trace(rank=rank, world_size=5, steps=5, allreduce_us=100.0 * rank,
                       slow_launch_us=80.0).write(traces / f"rank{rank}.json")
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    return traces, spill_root


def test_a_worker_holds_one_parse_in_memory_and_reads_the_others_back(tmp_path, monkeypatch):
    """5 ranks on 2 workers: each worker writes the parse it holds to disk
    before it parses its next file (3 spills: 3 files on one worker, 2 on the
    other), the result is that of one process, and the spill folder is gone."""
    traces, spill_root = _five_ranks(tmp_path, monkeypatch)
    one = result_json(traces, 1, monkeypatch)
    stages = []
    assert result_json(traces, 2, monkeypatch, stages) == one
    assert stages.count("spill the worker's previous parse to disk") == 3
    assert list(spill_root.iterdir()) == []


def test_one_process_holds_one_parse_at_a_time_with_the_result_of_loading_all(tmp_path, monkeypatch):
    """5 ranks and one worker (``HTA_REPORT_WORKERS=1``, one core, no fork):
    each file's parse is written to disk before the next is made (4 spills)
    and read back for its rank, as a forked worker does, instead of every
    file being loaded here at once (the peak grew ~25 MB per 28 MB rank);
    the result is that of the forked workers and of loading all the files
    here (``load_traces``), and the spill folder is gone."""
    from hta_report.analysis import analyze_loaded
    from hta_report.api import describe
    from hta_report.load import load_traces

    traces, spill_root = _five_ranks(tmp_path, monkeypatch)
    stages = []
    one = result_json(traces, 1, monkeypatch, stages)
    assert stages.count("spill the worker's previous parse to disk") == 4
    assert "analyze 5 ranks" in stages and "HTA align and filter" not in stages
    assert list(spill_root.iterdir()) == []
    assert result_json(traces, 2, monkeypatch) == one
    spec = describe(traces)
    loaded_all = json.loads(analyze_loaded(load_traces(spec), spec).to_json())
    loaded_all["inventory"].pop("analyzed_at")
    advice = ("findings", "checks", "together")  # the advice comes after (api): metrics compared
    assert {k: v for k, v in loaded_all.items() if k not in advice} == {k: v for k, v in one.items() if k not in advice}
    assert one["findings"] and one["ranks"][4]["comm"]["overlap_pct"] > 0


def test_gpu_presence_agrees_with_the_decoded_events(tmp_path):
    from hta_report.analysis.events import RankEvents
    from hta_report.load import load_traces

    for path in (_sim_dir(tmp_path), shared("cpu_only"), shared("two_ranks")):
        loaded = load_traces(path)
        for r in loaded.ranks:
            ev = RankEvents.from_loaded(loaded, r)
            has_comm = bool(ev.gpu["kernel_type"].eq("COMMUNICATION").any()) if ev.has_gpu else False
            assert rank_mod.gpu_presence(loaded, r) == (ev.has_gpu, has_comm)


def _ranks_in_daemon(path):
    return [r.rank for r in analyze(path).ranks]


def test_analyze_works_inside_a_daemonic_worker(tmp_path):
    """A multiprocessing.Pool worker may not have children: parsing and the
    analyses then stay in that process (they once failed there, every file
    listed as unreadable)."""
    import multiprocessing

    path = _sim_dir(tmp_path)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_ranks_in_daemon, (path,)) == [0, 1, 2]


#: The test's process and the phase functions it replaced (read in forked workers too).
_PARENT = {"pid": 0, "_parse_held": None, "_analyze_held": None}


def _dies_in_a_worker(phase, args, kwargs):
    if os.getpid() != _PARENT["pid"]:
        os._exit(9)
    return _PARENT[phase](*args, **kwargs)


def _parse_dies(*args, **kwargs):  # module functions: a worker's call is pickled by name
    return _dies_in_a_worker("_parse_held", args, kwargs)


def _analyze_dies(*args, **kwargs):
    return _dies_in_a_worker("_analyze_held", args, kwargs)


@pytest.mark.parametrize("phase", ["_parse_held", "_analyze_held"])
def test_a_worker_that_dies_sends_the_run_back_to_one_process(phase, tmp_path, monkeypatch, caplog):
    """A worker killed (say, for memory) loses the parses it held: the run is
    done again in this process, one rank at a time, with the same result."""
    from hta_report.engines import local

    path = _sim_dir(tmp_path)
    one = result_json(path, 1, monkeypatch)
    monkeypatch.setitem(_PARENT, "pid", os.getpid())
    monkeypatch.setitem(_PARENT, phase, getattr(local, phase))
    monkeypatch.setattr(local, phase, _parse_dies if phase == "_parse_held" else _analyze_dies)
    stages = []
    assert result_json(path, 2, monkeypatch, stages, in_workers=False) == one
    assert "analyze 3 ranks" in stages  # done again here, one rank at a time
    assert "a worker process died" in caplog.text


#: The analysis phase function replaced by :func:`_timed_analysis`, and the file its spans go to.
_TIMED = {"_analyze_held": None, "spans": ""}


def _timed_analysis(*args, **kwargs):
    """:func:`hta_report.engines.local._analyze_held`, appending ``pid start end`` to ``_TIMED["spans"]``."""
    import time

    t0 = time.monotonic()
    try:
        return _TIMED["_analyze_held"](*args, **kwargs)
    finally:
        with open(_TIMED["spans"], "a", encoding="ascii") as fh:
            fh.write(f"{os.getpid()} {t0} {time.monotonic()}\n")


def _spans(monkeypatch, tmp_path, name):
    from hta_report.engines import local

    spans = tmp_path / name
    monkeypatch.setitem(_TIMED, "_analyze_held", local._analyze_held)
    monkeypatch.setitem(_TIMED, "spans", str(spans))
    monkeypatch.setattr(local, "_analyze_held", _timed_analysis)
    return spans


def test_a_memory_cap_analyzes_the_ranks_one_at_a_time_with_the_same_result(tmp_path, monkeypatch):
    """``HTA_REPORT_MAX_MEMORY`` below two ranks' estimate: the workers'
    analyses never overlap in time (timed in the workers themselves), both
    workers still analyze the ranks they parsed, the run says it was held, the
    result is that of one process and the spill folder is gone; without a cap
    (``0``) nothing is held back."""
    from hta_report.engines.per_rank import rank_memory_bytes

    traces, spill_root = _five_ranks(tmp_path, monkeypatch)
    one = result_json(traces, 1, monkeypatch)
    monkeypatch.setenv("HTA_REPORT_MAX_MEMORY", str(rank_memory_bytes(0) + 1))  # under any two ranks
    spans = _spans(monkeypatch, tmp_path, "capped.txt")
    stages = []
    assert result_json(traces, 2, monkeypatch, stages) == one
    assert any(s.startswith("analyses held to 1 at once by the memory cap") for s in stages)
    rows = sorted((float(a), float(b), int(pid)) for pid, a, b in (line.split() for line in spans.read_text().splitlines()))
    assert len(rows) == 5 and len({pid for _, _, pid in rows}) == 2
    assert all(rows[k][1] <= rows[k + 1][0] for k in range(4))  # each starts after the one before ended
    assert list(spill_root.iterdir()) == []
    monkeypatch.setenv("HTA_REPORT_MAX_MEMORY", "0")
    stages.clear()
    assert result_json(traces, 2, monkeypatch, stages) == one
    assert not any("memory cap" in s for s in stages)


@pytest.mark.parametrize("value, budget", [("2GB", 2 * 10**9), ("1.5GiB", 3 * 2**29), ("0", None)])
def test_the_memory_cap_reads_sizes(value, budget, monkeypatch):
    from hta_report import workers

    monkeypatch.setenv("HTA_REPORT_MAX_MEMORY", value)
    assert workers.memory_budget() == budget


def test_the_memory_cap_defaults_to_the_memory_available(monkeypatch):
    from hta_report import workers

    monkeypatch.delenv("HTA_REPORT_MAX_MEMORY", raising=False)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    except OSError:
        assert workers.memory_budget() is None  # not Linux: no cap
        return
    assert abs(workers.memory_budget() - kb * 1024) < 2**30  # read moments apart


def test_a_memory_cap_that_is_not_a_size_is_refused_before_any_work(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("HTA_REPORT_MAX_MEMORY", "lots")
    for args in (["analyze", _sim_dir(tmp_path)], ["compare", _sim_dir(tmp_path), _sim_dir(tmp_path)]):
        code, _, err = run_cli(*args, "-o", tmp_path / "r.md", "--no-cache")
        assert code == 1 and err.strip() == (
            "hta-report: error: HTA_REPORT_MAX_MEMORY: 'lots' is not a size; write e.g. 500MB, 4GiB or 1000000 (bytes)")
        assert not (tmp_path / "r.md").exists()


def _sleep_then_pid(seconds):
    import time

    time.sleep(seconds)
    return os.getpid()


def test_a_pool_left_by_an_exception_stops_its_workers_at_once():
    """Ctrl-C (or any error) inside ``with workers.pool(...)`` does not wait
    for the calls the workers are running (a large rank takes tens of
    seconds): the workers are killed and the exception goes on."""
    import time

    from hta_report import workers

    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        with workers.pool(2) as pool:
            futures = [pool.submit(_sleep_then_pid, 60) for _ in range(3)]
            time.sleep(0.5)  # the workers are running their calls
            processes = list(pool._processes.values())
            raise KeyboardInterrupt
    assert time.perf_counter() - started < 20
    assert processes and not any(p.is_alive() for p in processes)
    assert all(f.done() for f in futures)
    with workers.pool(1) as pool:  # without an exception, the calls run to their end
        assert pool.submit(_sleep_then_pid, 0.1).result() != os.getpid()


def test_meanwhile_tasks_run_once_while_waiting_and_are_dropped_after():
    from hta_report import workers

    ran = []
    with workers.meanwhile(lambda: ran.append("a"), lambda: 1 / 0, lambda: ran.append("c")):
        workers.idle()  # the failing task is logged and dropped; the others run
        workers.idle()
    assert ran == ["a", "c"]
    with workers.meanwhile(lambda: ran.append("late")):
        pass
    workers.idle()  # left the block before any wait: dropped
    assert ran == ["a", "c"]


@pytest.mark.parametrize("files", [1, 2])
def test_the_engines_run_the_meanwhile_tasks_while_their_workers_work(files, tmp_path, monkeypatch):
    """Several files (each parsed and analyzed in a worker) or one (its two
    halves in workers): this process (not a worker) runs the task, once,
    when it waits for the workers."""
    from hta_report import workers

    monkeypatch.setenv("HTA_REPORT_WORKERS", "2")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)
    for r in range(files):
        training_trace(rank=r, world_size=files, steps=4).write(tmp_path / f"rank{r}.json")
    ran = []
    with workers.meanwhile(lambda: ran.append(os.getpid())):
        analyze(tmp_path)
    assert ran == [os.getpid()]


def test_analyze_prepares_the_charts_only_for_reports_with_charts(tmp_path):
    from hta_report.api import preparations

    assert preparations([(str(tmp_path / "r.html"), None)]) != []
    assert preparations([(str(tmp_path / "r.md"), None), (str(tmp_path / "r.json"), "json")]) == []
    assert preparations([(str(tmp_path / "r.unknown"), None)]) == []  # refused later, by the writer


def test_a_large_lone_rank_is_analyzed_in_this_process_with_the_same_result(tmp_path, monkeypatch):
    """One rank of SEQUENTIAL_MIN_EVENTS events or more: its two parts run
    one after the other here (their temporaries do not add up), not side by
    side in workers; the result is the same."""
    training_trace(rank=0, world_size=1, steps=5, slow_launch_us=80.0).write(tmp_path / "rank0.json")
    side_by_side = result_json(tmp_path, 2, monkeypatch)
    monkeypatch.setattr(parallel, "SEQUENTIAL_MIN_EVENTS", 1)
    monkeypatch.setenv("HTA_REPORT_WORKERS", "2")
    with progress.using(progress.Progress(stream=io.StringIO(), live=False)) as p:
        data = json.loads(analyze(tmp_path).to_json())
    names = [name for name, _ in p.times]
    assert "analyze rank 0" in names and not [n for n in names if n.endswith("(worker)")]
    data["inventory"].pop("analyzed_at")
    assert data == side_by_side


def test_forked_workers_are_stopped_before_the_results_are_built(tmp_path, monkeypatch):
    """The workers send their ranks pickled, and this process builds the
    results only once the workers are stopped (their memory no longer
    beside the results); the collector's freeze for the fork ends with them;
    the ranks' equal strings are one object."""
    import gc
    import multiprocessing

    from hta_report.engines import local

    traces, _ = _five_ranks(tmp_path, monkeypatch)
    one = result_json(traces, 1, monkeypatch)
    seen = []
    real = local._unpickled

    def spy(got):
        seen.append((len(multiprocessing.active_children()), gc.get_freeze_count(),
                     [type(value).__name__ for status, value, _ in got if status == "ok"]))
        return real(got)
    monkeypatch.setattr(local, "_unpickled", spy)
    monkeypatch.setenv("HTA_REPORT_WORKERS", "2")
    result = analyze(traces)
    assert seen == [(0, 0, ["bytes"] * 5)]  # no worker alive, nothing frozen, every rank still bytes
    assert gc.get_freeze_count() == 0
    names = [r.top_kernels[0].name for r in result.ranks]
    assert len(set(names)) == 1 and all(n is names[0] for n in names)
    assert result_json(traces, 2, monkeypatch) == one


def test_chart_workers_are_forked_with_the_result_frozen_for_the_collector(tmp_path, monkeypatch):
    """The report's charts are drawn in forked workers while this process
    holds the whole result; forked with it frozen (``gc.freeze``), their
    collections leave its pages shared; the freeze ends with them, and the
    charts are those drawn in this process."""
    import gc

    from hta_report import api, workers
    from hta_report.render.charts import chart_specs

    monkeypatch.setenv("HTA_REPORT_WORKERS", "2")
    result = analyze(_sim_dir(tmp_path))
    specs = chart_specs(result)
    assert len(specs) >= api.PARALLEL_MIN_CHARTS
    frozen = []
    real = workers.pool

    def spy(n, state=None):
        frozen.append(gc.get_freeze_count())
        return real(n, state)
    monkeypatch.setattr(workers, "pool", spy)
    drawn = api._draw_charts(specs)
    assert len(frozen) == 1 and frozen[0] > 0
    assert gc.get_freeze_count() == 0
    monkeypatch.setenv("HTA_REPORT_WORKERS", "1")
    assert drawn == api._draw_charts(specs)
